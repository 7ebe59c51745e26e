//! Taking a checkpoint: the fields the generated code encodes become a
//! [`CheckpointRecord`] (prepare), the schemas it refers to are stored once,
//! and the record is stored under the run's lease (commit). The suspension
//! sites (`wait_for`, `wait_for_timeout`, `sleep`) are checkpoints that then
//! consume a signal, time out, or end the execution.

use std::borrow::Cow;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;

use super::Frame;
use crate::abi::Encoder;
use crate::history::Event;
use crate::run::Halt;
use crate::schema::{self, SchemaRef};
use crate::signal_types;
use crate::store::{user_signal_name, CheckpointRecord, SchemaKeys, Suspend, LOOP_ITEMS};
use crate::Error;

impl Frame {
    pub(super) fn prepare<F>(
        &mut self,
        site: u32,
        loops: &[u64],
        fields: F,
        suspend: Option<Suspend>,
    ) -> Result<Arc<CheckpointRecord>, Error>
    where
        F: FnOnce(&mut Encoder) -> Result<(), Error>,
    {
        // The last one's bytes are no longer needed for a reload, and may
        // be reused (see `buffer`).
        self.saved = None;
        let info = self.site(site).ok_or_else(|| {
            Error::internal(format!(
                "workflow `{}` has no checkpoint site #{site}",
                self.run.workflow
            ))
        })?;
        // Positions, then (optionally) the current items' fingerprints.
        let n = info.loops as usize;
        let well_formed =
            loops.len() == n || (n > 0 && loops.len() == 2 * n + 1 && loops[n] == LOOP_ITEMS);
        if !well_formed {
            return Err(Error::internal(format!(
                "site `{}` of workflow `{}` is inside {} loop(s) but {} position(s) were given",
                info.key,
                self.run.workflow,
                info.loops,
                loops.len()
            )));
        }
        let buf = self.buffer();
        let mut enc = Encoder::new(
            info.fields,
            self.run.workflow,
            self.run.id.clone(),
            info.key,
            buf,
            std::mem::take(&mut self.schema_buf),
        );
        fields(&mut enc)?;
        if enc.len() != info.fields.len() {
            return Err(Error::internal(format!(
                "site `{}` of workflow `{}` declares {} field(s) but {} were encoded",
                info.key,
                self.run.workflow,
                info.fields.len(),
                enc.len()
            )));
        }
        let (encoded, data, mut spare) = enc.into_parts();
        let seq = self.run.seq.load(Ordering::Acquire) + 1;
        let keys = self.schema_keys(&spare);
        spare.clear();
        self.schema_buf = spare;
        Ok(Arc::new(
            CheckpointRecord::new(
                self.run.id.clone(),
                seq,
                Cow::Borrowed(info.key),
                info.label.map(Cow::Borrowed),
                loops.to_vec(),
                encoded,
                data,
                suspend,
                SystemTime::now(),
            )
            .with_schemas(keys),
        ))
    }

    /// The schema keys of a checkpoint whose fields have `schemas` (shared
    /// with the previous checkpoint when they are the same); notes the ones
    /// the store may lack in `new_schemas` (which keeps, for another try,
    /// those that could not be stored for the previous one).
    fn schema_keys(&mut self, schemas: &[Option<&'static SchemaRef>]) -> SchemaKeys {
        let same = schemas.len() == self.last_schemas.len()
            && schemas
                .iter()
                .zip(&self.last_schemas)
                .all(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => std::ptr::eq(*a, *b),
                    (None, None) => true,
                    _ => false,
                });
        if same {
            return self.last_keys.clone();
        }
        self.new_schemas.clear();
        for s in schemas.iter().flatten() {
            let known = self.stored_schemas.iter().any(|k| std::ptr::eq(*k, *s))
                || self.new_schemas.iter().any(|k| std::ptr::eq(*k, *s));
            if !known {
                self.new_schemas.push(s);
            }
        }
        let keys: SchemaKeys = if schemas.iter().all(Option::is_none) {
            SchemaKeys::default()
        } else {
            schemas
                .iter()
                .map(|s| s.map(|s| Cow::Borrowed(s.key)))
                .collect()
        };
        self.last_schemas.clear();
        self.last_schemas.extend_from_slice(schemas);
        self.last_keys = keys.clone();
        keys
    }

    /// Stores the schemas the prepared checkpoint refers to that the store
    /// may lack (once per schema and runtime). A failure is not the run's
    /// problem: those fields merely cannot be shown as JSON.
    async fn store_schemas(&mut self) {
        if self.new_schemas.is_empty() {
            return;
        }
        let env = &self.run.env;
        if !env.schemas.ensure(&*env.store, &self.new_schemas).await {
            return;
        }
        self.stored_schemas.append(&mut self.new_schemas);
    }

    /// The buffer to encode the next checkpoint into: the bytes of a
    /// checkpoint this execution stored and the store no longer holds (a
    /// backend keeps the latest one or two), else a new one. A state of
    /// megabytes otherwise costs a fresh allocation per checkpoint, and
    /// the old one is freed on the store's thread, in another allocator
    /// arena: every checkpoint then faulted in its pages anew (measured:
    /// most of the runtime's time per checkpoint at a 2 MB state). Sized
    /// with a quarter of headroom: a state that grows by appending would
    /// otherwise regrow (and copy) its whole buffer at every checkpoint.
    fn buffer(&mut self) -> Vec<u8> {
        let want = self.size_hint + self.size_hint / 4 + 64;
        if let Some(oldest) = self.recent.pop_front() {
            match Arc::try_unwrap(oldest) {
                Ok(cp) => {
                    let mut buf = cp.data;
                    buf.clear();
                    buf.reserve(want);
                    return buf;
                }
                // Still held by the store (the in-memory one keeps every
                // version): look again next time.
                Err(held) => self.recent.push_front(held),
            }
        }
        Vec::with_capacity(want)
    }

    /// Stores a prepared checkpoint; halts on failure and on a simulated crash.
    pub(super) async fn commit(&mut self, prepared: Result<Arc<CheckpointRecord>, Error>) {
        let cp = match prepared {
            Ok(cp) => cp,
            Err(e) => match self.halt(e).await {},
        };
        if self.run.is_halted() {
            // Cancelled or shut down meanwhile: stop at this checkpoint.
            match self.stop(Halt::Stop).await {}
        }
        let hook = self.run.env.save_hook.clone();
        let numbered = hook.as_ref().map(|h| h.before_save());
        if let Some((_, true)) = numbered {
            match self.stop(Halt::Crash).await {}
        }
        // The items emitted since the last checkpoint, and the progress,
        // are durable with this one.
        if let Err(e) = crate::streams::flush::flush(&self.run, true).await {
            match self.halt(e).await {}
        }
        let seq = cp.seq;
        let size = cp.data.len();
        let saved = cp.clone();
        let site = cp.site_key.clone();
        self.store_schemas().await;
        let env = &self.run.env;
        let began = std::time::Instant::now();
        // Kept for its bytes (see `buffer`): this one and the one before
        // it, which the store lets go of once this one is stored.
        self.recent.push_back(cp.clone());
        if self.recent.len() > 2 {
            self.recent.pop_front();
        }
        let stored = env
            .store
            .save_checkpoint(&self.run.lease, cp, env.keep)
            .await;
        if let Err(e) = stored {
            match self.halt(e).await {}
        }
        crate::observe::checkpoint_saved(self.run.workflow, &site, seq, size, began.elapsed());
        self.size_hint = size.max(16);
        self.run.seq.store(seq, Ordering::Release);
        self.run.calls.store(0, Ordering::Release);
        self.run.attempt.store(1, Ordering::Release);
        self.wake = None;
        self.checkpoint = None;
        self.saved = Some(saved);
        if let (Some(hook), Some((n, _))) = (hook, numbered) {
            if hook.after_save(n, &self.run.id) {
                match self.stop(Halt::Crash).await {}
            }
        }
    }

    /// Takes a checkpoint at site number `site`: encodes the live locals
    /// with `fields` (in the order of the site's `fields`) and returns once
    /// it is stored. On failure, cancellation or a lost lease the execution halts instead.
    pub fn save<F>(
        &mut self,
        site: u32,
        loops: &[u64],
        fields: F,
    ) -> impl Future<Output = ()> + Send + '_
    where
        F: FnOnce(&mut Encoder) -> Result<(), Error>,
    {
        let prepared = self.prepare(site, loops, fields, None);
        async move { self.commit(prepared).await }
    }

    /// Notes the payload type of wait site `site` (numbered from 1), so
    /// that a signal sent to it from this process is checked at once, and
    /// returns its schema, whose key is stored with the wait so that other
    /// processes check it too ([`Frame::store_with`] then stores the schema).
    fn note_payload_type<T: DeserializeOwned>(
        &self,
        site: u32,
        signal: &str,
    ) -> Option<&'static SchemaRef> {
        if let Some(info) = self.site(site) {
            signal_types::note::<T>(self.run.workflow, info.key);
        }
        let schema = schema::schema_of::<T>();
        if let Some(schema) = schema {
            let catalog = &self.run.env.signal_catalog;
            catalog.note_payload(self.run.workflow, signal, schema.key);
        }
        schema
    }

    /// Records what [`Frame::note_payload_type`] noted in the signal
    /// catalog, after the checkpoint that stored the schema itself.
    async fn flush_signal_catalog(&self) {
        let env = &self.run.env;
        env.signal_catalog.flush(&*env.store).await;
    }

    /// What a suspension at `site` stores of the sites before it (see
    /// [`SiteInfo::sites_before`](crate::abi::SiteInfo)).
    pub(super) fn sites_before(&self, site: u32) -> Option<Vec<String>> {
        let info = self.site(site)?;
        Some(info.sites_before.iter().map(|k| (*k).to_owned()).collect())
    }

    /// Has the next commit store `schema` too (unless this execution
    /// already stored it), after [`Frame::prepare`] (which picks the
    /// checkpoint's own).
    fn store_with(&mut self, schema: Option<&'static SchemaRef>) {
        let Some(schema) = schema else { return };
        let known = self.stored_schemas.iter().any(|k| std::ptr::eq(*k, schema))
            || self.new_schemas.iter().any(|k| std::ptr::eq(*k, schema));
        if !known {
            self.new_schemas.push(schema);
        }
    }

    /// Consumes a stored signal named `name` if one decodes as `T`; rejected
    /// (undecodable) ones are discarded with a history event.
    async fn try_take<T: DeserializeOwned>(&mut self, name: &str) -> Option<T> {
        loop {
            let taken = self
                .run
                .env
                .store
                .take_signal(&self.run.id, &self.run.lease, name)
                .await;
            let payload = match taken {
                Ok(Some(sig)) => sig.payload,
                Ok(None) => return None,
                Err(e) => match self.halt(e).await {},
            };
            // Checked first and decoded for good after the history write,
            // so that no `T` is held across it (`T` need not be `Send`).
            let reason = match serde_json::from_slice::<T>(&payload).map(drop) {
                Ok(()) => {
                    let event = Event::SignalConsumed {
                        name: name.to_owned(),
                    };
                    // Informational, as every history event.
                    let _ = self.run.env.store.append_event(&self.run.id, event).await;
                    match serde_json::from_slice::<T>(&payload) {
                        Ok(v) => return Some(v),
                        Err(e) => format!("{e} (expected `{}`)", std::any::type_name::<T>()),
                    }
                }
                Err(e) => format!("{e} (expected `{}`)", std::any::type_name::<T>()),
            };
            let rejected = self
                .run
                .env
                .store
                .reject_signal(&self.run.id, &self.run.lease, reason)
                .await;
            if let Err(e) = rejected {
                match self.halt(e).await {}
            }
        }
    }

    /// `ctx.wait_for(name)`: an implicit checkpoint (the run is `Waiting`);
    /// returns a stored signal at once if one decodes as `T`, otherwise ends
    /// the execution; the run is resumed at this site when the signal arrives.
    pub fn wait_for<T: DeserializeOwned, F>(
        &mut self,
        site: u32,
        loops: &[u64],
        fields: F,
        name: &str,
    ) -> impl Future<Output = T> + Send + '_
    where
        F: FnOnce(&mut Encoder) -> Result<(), Error>,
    {
        let name = name.to_owned();
        let payload = self.note_payload_type::<T>(site, &name);
        let suspend = Suspend::Waiting {
            signal: name.clone(),
            deadline: None,
            payload_schema: payload.map(|s| s.key.to_owned()),
            sites_before: self.sites_before(site),
        };
        let prepared = user_signal_name(&self.run.id, &name)
            .and_then(|()| self.prepare(site, loops, fields, Some(suspend)));
        self.store_with(payload);
        async move {
            self.commit(prepared).await;
            self.flush_signal_catalog().await;
            if let Some(v) = self.try_take::<T>(&name).await {
                return v;
            }
            match self.stop(Halt::Suspended).await {}
        }
    }

    /// `ctx.wait_for_timeout(name, timeout)`: like [`Frame::wait_for`] with a
    /// durable deadline; yields `None` once it passes.
    pub fn wait_for_timeout<T: DeserializeOwned, F>(
        &mut self,
        site: u32,
        loops: &[u64],
        fields: F,
        name: &str,
        timeout: Duration,
    ) -> impl Future<Output = Option<T>> + Send + '_
    where
        F: FnOnce(&mut Encoder) -> Result<(), Error>,
    {
        let name = name.to_owned();
        // Durable time: the runtime's clock (a test clock in tests).
        let clock = self.run.env.clock.clone();
        let deadline = clock.now().checked_add(timeout);
        let payload = self.note_payload_type::<T>(site, &name);
        let suspend = Suspend::Waiting {
            signal: name.clone(),
            deadline,
            payload_schema: payload.map(|s| s.key.to_owned()),
            sites_before: self.sites_before(site),
        };
        let prepared = user_signal_name(&self.run.id, &name)
            .and_then(|()| self.prepare(site, loops, fields, Some(suspend)));
        self.store_with(payload);
        async move {
            self.commit(prepared).await;
            self.flush_signal_catalog().await;
            if let Some(v) = self.try_take::<T>(&name).await {
                return Some(v);
            }
            if deadline.is_some_and(|d| d <= clock.now()) {
                self.wake_here().await;
                return None;
            }
            match self.stop(Halt::Suspended).await {}
        }
    }

    /// `ctx.sleep(duration)`: an implicit checkpoint and a durable timer; the
    /// execution ends and the run is resumed at this site when it is due.
    pub fn sleep<F>(
        &mut self,
        site: u32,
        loops: &[u64],
        fields: F,
        duration: Duration,
    ) -> impl Future<Output = ()> + Send + '_
    where
        F: FnOnce(&mut Encoder) -> Result<(), Error>,
    {
        // Durable time: the runtime's clock (a test clock in tests).
        let clock = self.run.env.clock.clone();
        let now = clock.now();
        // An unrepresentable deadline is as good as "never": cap it at ~100 years.
        let until = now
            .checked_add(duration)
            .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
            .unwrap_or(now);
        let suspend = Suspend::Sleeping {
            until,
            sites_before: self.sites_before(site),
            retry: None,
        };
        let prepared = self.prepare(site, loops, fields, Some(suspend));
        async move {
            self.commit(prepared).await;
            if until <= clock.now() {
                self.wake_here().await;
                return;
            }
            match self.stop(Halt::Suspended).await {}
        }
    }
}
