//! The interface the `#[workflow]` macro generates code against (re-exported
//! as `checkpoint_runtime::__private`; not a public API).
//!
//! One [`Frame`] exists per execution of a run and is owned by the workflow
//! future. Running forward, the generated code calls [`Frame::save`] (and the
//! suspension methods) at each site; resuming, it reads [`Frame::target`],
//! checks and loads the saved fields into [`Slot`]s, advances `for` loops,
//! calls [`Frame::resumed`] and [`Frame::arrive`], and continues after the site.

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec;
use crate::ctx::Ctx;
use crate::executor::{Halt, RunShared};
use crate::history::Event;
use crate::iteration;
use crate::schema::{self, SchemaRef};
use crate::store::{CheckpointRecord, FieldRecord, SchemaKeys, Suspend, WakeValue};
use crate::Error;

/// A checkpoint site, as the macro describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteInfo {
    /// The key stored with each checkpoint and matched on resume.
    pub key: &'static str,
    /// The user's label.
    pub label: Option<&'static str>,
    /// What kind of site.
    pub kind: SiteKind,
    /// The names of the saved fields, in order.
    pub fields: &'static [&'static str],
    /// How many `for` loops enclose the site.
    pub loops: u32,
}

/// The kinds of checkpoint sites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteKind {
    /// `checkpoint!()`.
    Checkpoint,
    /// `ctx.wait_for(..).await`.
    WaitFor,
    /// `ctx.wait_for_timeout(..).await`.
    WaitForTimeout,
    /// `ctx.sleep(..).await`.
    Sleep,
}

/// One execution of a run, owned by the workflow future.
pub struct Frame {
    run: Arc<RunShared>,
    sites: &'static [SiteInfo],
    target: Option<u32>,
    checkpoint: Option<Arc<CheckpointRecord>>,
    wake: Option<WakeValue>,
    resumed: bool,
    size_hint: usize,
    /// Schemas this execution knows the store has.
    stored_schemas: Vec<&'static SchemaRef>,
    /// Schemas the prepared checkpoint refers to that the store may lack.
    new_schemas: Vec<&'static SchemaRef>,
    /// The fields' schemas of the latest checkpoint prepared, and the keys
    /// stored for them (shared by the next checkpoints with the same ones).
    last_schemas: Vec<Option<&'static SchemaRef>>,
    last_keys: SchemaKeys,
    /// A spare buffer for [`Encoder`]'s schemas.
    schema_buf: Vec<Option<&'static SchemaRef>>,
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("run", &self.run.id)
            .field("workflow", &self.run.workflow)
            .field("target", &self.target)
            .field("seq", &self.run.seq.load(Ordering::Relaxed))
            .finish()
    }
}

/// Encodes the fields of one checkpoint.
pub struct Encoder {
    buf: Vec<u8>,
    fields: Vec<FieldRecord>,
    /// The schema of each field so far (`None`: none), in order.
    schemas: Vec<Option<&'static SchemaRef>>,
    names: &'static [&'static str],
    workflow: &'static str,
    run: Arc<str>,
    site: &'static str,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("site", &self.site)
            .field("fields", &self.fields.len())
            .field("bytes", &self.buf.len())
            .finish()
    }
}

impl Encoder {
    fn next_name(&self) -> Result<&'static str, Error> {
        self.names.get(self.fields.len()).copied().ok_or_else(|| {
            Error::internal(format!(
                "site `{}` of workflow `{}` declares {} field(s) but more were encoded",
                self.site,
                self.workflow,
                self.names.len()
            ))
        })
    }

    /// Encodes the next field (postcard), recording `std::any::type_name::<T>()`
    /// and the schema of `T` (traced once per type and process; none if `T`
    /// cannot be traced), so that the field can be shown as JSON without this
    /// code. The generated code saves every field with this.
    pub fn typed_field<T: Serialize + DeserializeOwned>(&mut self, value: &T) -> Result<(), Error> {
        self.push_field(std::any::type_name::<T>(), |buf| {
            codec::encode_into(value, buf)
        })?;
        if let Some(last) = self.schemas.last_mut() {
            *last = schema::schema_of::<T>();
        }
        Ok(())
    }

    /// Encodes the next field (postcard), recording `std::any::type_name::<T>()`
    /// but no schema (see [`Encoder::typed_field`]).
    pub fn field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.push_field(std::any::type_name::<T>(), |buf| codec::append(value, buf))
    }

    /// Appends the next field, of type `type_name`, as `encode` writes it.
    fn push_field(
        &mut self,
        type_name: &'static str,
        encode: impl FnOnce(&mut Vec<u8>) -> postcard::Result<()>,
    ) -> Result<(), Error> {
        let name = self.next_name()?;
        let offset = self.buf.len();
        if let Err(e) = encode(&mut self.buf) {
            self.buf.truncate(offset);
            return Err(Error::Encode {
                workflow: self.workflow.to_owned(),
                run: self.run.to_string(),
                site: self.site.to_owned(),
                field: name.to_owned(),
                detail: e.to_string().into(),
            });
        }
        self.fields.push(FieldRecord {
            name: Cow::Borrowed(name),
            type_name: Cow::Borrowed(type_name),
            offset,
            len: self.buf.len() - offset,
        });
        self.schemas.push(None);
        Ok(())
    }

    /// Appends the next field, of type `type_name`, as `encode` writes it
    /// (for values saved through a reference, see `iteration`).
    pub(crate) fn field_with(
        &mut self,
        type_name: &'static str,
        encode: impl FnOnce(&mut Vec<u8>) -> postcard::Result<()>,
    ) -> Result<(), Error> {
        self.push_field(type_name, encode)
    }

    /// Appends a field encoded earlier with [`encode`].
    pub fn encoded(&mut self, value: &Encoded) -> Result<(), Error> {
        let name = self.next_name()?;
        let offset = self.buf.len();
        self.buf.extend_from_slice(&value.bytes);
        self.fields.push(FieldRecord {
            name: Cow::Borrowed(name),
            type_name: Cow::Borrowed(value.type_name),
            offset,
            len: value.bytes.len(),
        });
        self.schemas.push(value.schema);
        Ok(())
    }
}

/// A value encoded ahead of its checkpoint (postcard bytes and type name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    bytes: Vec<u8>,
    type_name: &'static str,
    schema: Option<&'static SchemaRef>,
}

impl Encoded {
    /// The encoded bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// `std::any::type_name` of the encoded value's type.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }
}

/// Encodes a value now, to be stored by a later checkpoint with [`Encoder::encoded`].
pub fn encode<T: Serialize>(value: &T) -> Result<Encoded, Error> {
    let mut bytes = Vec::new();
    codec::encode_into(value, &mut bytes).map_err(|e| Error::Encode {
        workflow: String::new(),
        run: String::new(),
        site: String::new(),
        field: std::any::type_name::<T>().to_owned(),
        detail: e.to_string().into(),
    })?;
    Ok(Encoded {
        bytes,
        type_name: std::any::type_name::<T>(),
        schema: None,
    })
}

/// [`encode`], also recording the value's schema so the snapshot can be
/// shown as JSON without the workflow's binary (see [`Encoder::typed_field`]).
pub fn encode_typed<T: Serialize + DeserializeOwned>(value: &T) -> Result<Encoded, Error> {
    let mut encoded = encode(value)?;
    encoded.schema = schema::schema_of::<T>();
    Ok(encoded)
}

/// A restored value waiting to be moved into its local.
pub struct Slot<T>(Option<T>);

impl<T> std::fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("type", &std::any::type_name::<T>())
            .field("loaded", &self.0.is_some())
            .finish()
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(None)
    }
}

impl<T> Slot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        Slot(None)
    }

    /// `std::any::type_name::<T>()`.
    pub fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }

    /// Ties the slot's type to a local's (type inference only; does nothing).
    pub fn bind(&self, _value: &T) {}

    /// Moves the restored value out.
    ///
    /// # Panics
    ///
    /// If nothing was loaded into the slot: generated code only takes slots it
    /// loaded successfully, so this is a bug in the generated code.
    pub fn take(&mut self) -> T {
        match self.0.take() {
            Some(v) => v,
            None => panic!(
                "checkpoint internal error: slot of type `{}` taken before it was loaded",
                std::any::type_name::<T>()
            ),
        }
    }
}

/// The error for resumed code that did not reach its site the way it was left
/// (an `if`/`match` around the site took another branch when evaluated again).
pub fn diverged(frame: &Frame, detail: &str) -> Error {
    Error::Diverged {
        workflow: frame.run.workflow.to_owned(),
        run: frame.run.id.to_string(),
        site: frame.site_key(),
        detail: detail.to_owned(),
    }
}

/// The error for a fresh start without input (a broken invariant).
pub fn missing_input(frame: &Frame) -> Error {
    Error::internal(format!(
        "run `{}` of workflow `{}` was started without its input",
        frame.run.id, frame.run.workflow
    ))
}

/// Decodes field `field` of the checkpoint being resumed into `slot`.
pub fn load<T: DeserializeOwned>(
    slot: &mut Slot<T>,
    frame: &Frame,
    field: usize,
) -> Result<(), Error> {
    let cp = frame.checkpoint.as_deref().ok_or_else(|| {
        Error::internal(format!(
            "run `{}`: field #{field} loaded while not resuming",
            frame.run.id
        ))
    })?;
    let name = cp
        .fields
        .get(field)
        .map(|f| f.name.to_string())
        .unwrap_or_else(|| format!("#{field}"));
    let decode_err = |detail: String| Error::Decode {
        workflow: frame.run.workflow.to_owned(),
        run: frame.run.id.to_string(),
        site: cp.site_key.to_string(),
        field: name.clone(),
        detail: detail.into(),
    };
    let bytes = cp.field_bytes(field).ok_or_else(|| {
        decode_err("the checkpoint has no such field (or its record is corrupt)".to_owned())
    })?;
    match codec::decode::<T>(bytes) {
        Ok((value, [])) => {
            slot.0 = Some(value);
            Ok(())
        }
        Ok((_, rest)) => Err(decode_err(format!(
            "{} trailing byte(s) after a value of type `{}`",
            rest.len(),
            std::any::type_name::<T>()
        ))),
        Err(e) => Err(decode_err(format!(
            "{e} (expected a value of type `{}`)",
            std::any::type_name::<T>()
        ))),
    }
}

fn delivered_signal(frame: &Frame) -> Result<Option<(&str, &[u8])>, Error> {
    match &frame.wake {
        Some(WakeValue::Signal { name, payload }) => Ok(Some((name, payload))),
        Some(WakeValue::TimedOut) => Ok(None),
        None => Err(Error::internal(format!(
            "run `{}`: a signal was loaded but none was delivered to this site",
            frame.run.id
        ))),
    }
}

fn decode_signal<T: DeserializeOwned>(
    frame: &Frame,
    name: &str,
    payload: &[u8],
) -> Result<T, Error> {
    serde_json::from_slice(payload).map_err(|e| Error::SignalPayload {
        run: frame.run.id.to_string(),
        signal: name.to_owned(),
        detail: format!("{e} (expected `{}`)", std::any::type_name::<T>()),
    })
}

/// Decodes the signal delivered to a resumed `wait_for` site into `slot`.
pub fn load_signal<T: DeserializeOwned>(slot: &mut Slot<T>, frame: &Frame) -> Result<(), Error> {
    match delivered_signal(frame)? {
        Some((name, payload)) => {
            slot.0 = Some(decode_signal(frame, name, payload)?);
            Ok(())
        }
        None => Err(Error::internal(format!(
            "run `{}`: a `wait_for` site was resumed by a timeout",
            frame.run.id
        ))),
    }
}

/// Decodes the outcome of a resumed `wait_for_timeout` site into `slot`:
/// `Some(payload)`, or `None` when the deadline passed.
pub fn load_signal_timeout<T: DeserializeOwned>(
    slot: &mut Slot<Option<T>>,
    frame: &Frame,
) -> Result<(), Error> {
    slot.0 = Some(match delivered_signal(frame)? {
        Some((name, payload)) => Some(decode_signal(frame, name, payload)?),
        None => None,
    });
    Ok(())
}

impl Frame {
    pub(crate) fn new(
        run: Arc<RunShared>,
        sites: &'static [SiteInfo],
        target: Option<u32>,
        checkpoint: Option<Arc<CheckpointRecord>>,
        wake: Option<WakeValue>,
    ) -> Self {
        let size_hint = checkpoint.as_ref().map_or(64, |c| c.data.len());
        Frame {
            run,
            sites,
            // The executor knows the site's index; the generated code, its
            // number (from 1).
            target: target.map(|index| index + 1),
            checkpoint,
            wake,
            resumed: false,
            size_hint,
            stored_schemas: Vec::new(),
            new_schemas: Vec::new(),
            last_schemas: Vec::new(),
            last_keys: SchemaKeys::default(),
            schema_buf: Vec::new(),
        }
    }

    /// A clone of the run's [`Ctx`].
    pub fn ctx(&self) -> Ctx {
        Ctx::new(self.run.clone())
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run.id
    }

    /// The workflow name.
    pub fn workflow(&self) -> &'static str {
        self.run.workflow
    }

    /// The number of the site being resumed (from 1: `W::SITES[n - 1]`, the
    /// `#n` of an unlabelled site's key); `None` when running forward (fresh
    /// start, or after [`Frame::arrive`]).
    pub fn target(&self) -> Option<u32> {
        self.target
    }

    fn site_key(&self) -> String {
        self.checkpoint
            .as_ref()
            .map(|c| c.site_key.to_string())
            .or_else(|| {
                self.target
                    .and_then(|t| self.sites.get((t as usize).checked_sub(1)?))
                    .map(|s| s.key.to_owned())
            })
            .unwrap_or_else(|| "-".to_owned())
    }

    /// Checks the names and types (`std::any::type_name`) of the fields the
    /// code restores at the target site against the loaded checkpoint's.
    pub fn check_fields(&self, expected: &[(&'static str, &'static str)]) -> Result<(), Error> {
        let cp = self.checkpoint.as_deref().ok_or_else(|| {
            Error::internal(format!(
                "run `{}`: check_fields called while not resuming",
                self.run.id
            ))
        })?;
        let mismatch = |field: &str, detail: String| Error::Incompatible {
            workflow: self.run.workflow.to_owned(),
            run: self.run.id.to_string(),
            site: cp.site_key.to_string(),
            field: field.to_owned(),
            detail: detail.into(),
        };
        for (i, (name, ty)) in expected.iter().enumerate() {
            let Some(stored) = cp.fields.get(i) else {
                return Err(mismatch(
                    name,
                    format!(
                        "the code restores `{name}: {ty}` but the checkpoint has no field #{i}"
                    ),
                ));
            };
            if stored.name != *name {
                return Err(mismatch(
                    name,
                    format!(
                        "field #{i} is `{}` in the checkpoint but `{name}` in the code",
                        stored.name
                    ),
                ));
            }
            if stored.type_name != *ty {
                return Err(mismatch(
                    name,
                    format!("stored as `{}`, the code now has `{ty}`", stored.type_name),
                ));
            }
        }
        if let Some(extra) = cp.fields.get(expected.len()) {
            return Err(mismatch(
                &extra.name,
                format!(
                    "the checkpoint holds field `{}: {}` that the code no longer restores",
                    extra.name, extra.type_name
                ),
            ));
        }
        Ok(())
    }

    /// The saved position (items already taken) of the `depth`-th enclosing
    /// `for` loop (0 = outermost) of the target site; 0 if there is none.
    pub fn loop_position(&self, depth: usize) -> u64 {
        self.checkpoint
            .as_ref()
            .and_then(|c| iteration::loop_positions(&c.loops).get(depth).copied())
            .unwrap_or(0)
    }

    /// Checks that the item a resumed `for` loop (the `depth`-th around the
    /// target site, written `described`) now stands at has the fingerprint
    /// of the one it left: refused otherwise, before its body runs. Items
    /// without a fingerprint (not serializable, or an older checkpoint) are
    /// not checked.
    pub fn check_item(&self, depth: usize, fingerprint: u64, described: &str) -> Result<(), Error> {
        let stored = self
            .checkpoint
            .as_ref()
            .map_or(0, |c| iteration::loop_item(&c.loops, depth));
        if stored == 0 || fingerprint == 0 || stored == fingerprint {
            return Ok(());
        }
        Err(self.loop_error(format!(
            "the loop `{described}` resumed at another item (#{}) than the one it left: its iterable yields other items, or another order, when evaluated again (a HashSet or HashMap returned by a function, an iterator over data the body changed); iterate a Vec or BTreeMap, or collect the items into a local before the loop",
            self.loop_position(depth)
        )))
    }

    /// Skips `n` items of `iter`; an error naming the workflow, run and site
    /// if it ends early.
    pub fn advance<I: Iterator>(&self, iter: &mut I, n: u64) -> Result<(), Error> {
        let mut left = n;
        while left > 0 {
            let step = usize::try_from(left).unwrap_or(usize::MAX);
            if iter.nth(step - 1).is_none() {
                return Err(Error::Diverged {
                    workflow: self.run.workflow.to_owned(),
                    run: self.run.id.to_string(),
                    site: self.site_key(),
                    detail: format!(
                        "the loop's iterator ended before reaching the saved position {n}"
                    ),
                });
            }
            left -= step as u64;
        }
        Ok(())
    }

    /// The error for a resumed `for` loop that cannot stand where it was left.
    pub(crate) fn loop_error(&self, detail: String) -> Error {
        Error::Diverged {
            workflow: self.run.workflow.to_owned(),
            run: self.run.id.to_string(),
            site: self.site_key(),
            detail,
        }
    }

    /// The resumed run reached its site: from now on it runs forward.
    pub fn arrive(&mut self) {
        self.target = None;
    }

    /// Called once after all loads succeeded and before any user code runs:
    /// records that the run was resumed. A no-op on a fresh start.
    pub async fn resumed(&mut self) {
        if self.resumed {
            return;
        }
        self.resumed = true;
        let Some(cp) = &self.checkpoint else { return };
        let event = Event::Resumed {
            worker: self.run.rt.worker.to_string(),
            from_seq: cp.seq,
        };
        // History is informational: a failure to record it must not stop the run.
        let _ = self.run.rt.store.append_event(&self.run.id, event).await;
    }

    /// Stops this execution for good: records why (see the runtime docs) and
    /// never returns; the executor drops the future.
    pub async fn halt(&mut self, err: Error) -> Infallible {
        let with_signal = matches!(self.wake, Some(WakeValue::Signal { .. }));
        self.run.halt(Halt::from_error(err, with_signal));
        std::future::pending().await
    }

    async fn stop(&self, h: Halt) -> Infallible {
        self.run.halt(h);
        std::future::pending().await
    }

    fn prepare<F>(
        &mut self,
        site: u32,
        loops: &[u64],
        fields: F,
        suspend: Option<Suspend>,
    ) -> Result<Arc<CheckpointRecord>, Error>
    where
        F: FnOnce(&mut Encoder) -> Result<(), Error>,
    {
        // Site numbers start at 1; stored records keep the 0-based index.
        let index = site.checked_sub(1);
        let info = index
            .and_then(|i| self.sites.get(i as usize))
            .ok_or_else(|| {
                Error::internal(format!(
                    "workflow `{}` has no checkpoint site #{site}",
                    self.run.workflow
                ))
            })?;
        // Positions, then (optionally) the current items' fingerprints.
        let n = info.loops as usize;
        let well_formed = loops.len() == n
            || (n > 0 && loops.len() == 2 * n + 1 && loops[n] == iteration::LOOP_ITEMS);
        if !well_formed {
            return Err(Error::internal(format!(
                "site `{}` of workflow `{}` is inside {} loop(s) but {} position(s) were given",
                info.key,
                self.run.workflow,
                info.loops,
                loops.len()
            )));
        }
        let mut enc = Encoder {
            buf: Vec::with_capacity(self.size_hint),
            fields: Vec::with_capacity(info.fields.len()),
            schemas: std::mem::take(&mut self.schema_buf),
            names: info.fields,
            workflow: self.run.workflow,
            run: self.run.id.clone(),
            site: info.key,
        };
        fields(&mut enc)?;
        if enc.fields.len() != info.fields.len() {
            return Err(Error::internal(format!(
                "site `{}` of workflow `{}` declares {} field(s) but {} were encoded",
                info.key,
                self.run.workflow,
                info.fields.len(),
                enc.fields.len()
            )));
        }
        let seq = self.run.seq.load(Ordering::Acquire) + 1;
        let keys = self.schema_keys(&enc.schemas);
        let mut spare = std::mem::take(&mut enc.schemas);
        spare.clear();
        self.schema_buf = spare;
        Ok(Arc::new(
            CheckpointRecord::new(
                enc.run,
                seq,
                Cow::Borrowed(info.key),
                info.label.map(Cow::Borrowed),
                index.unwrap_or(0),
                loops.to_vec(),
                enc.fields,
                enc.buf,
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
        let rt = &self.run.rt;
        let missing: Vec<(String, String)> = {
            let stored = rt.schemas_stored.lock().unwrap_or_else(|e| e.into_inner());
            self.new_schemas
                .iter()
                .filter(|s| !stored.contains(s.key))
                .map(|s| (s.key.to_owned(), s.json.to_owned()))
                .collect()
        };
        if !missing.is_empty() {
            if rt.store.put_schemas(missing).await.is_err() {
                return;
            }
            let mut stored = rt.schemas_stored.lock().unwrap_or_else(|e| e.into_inner());
            stored.extend(self.new_schemas.iter().map(|s| s.key));
        }
        self.stored_schemas.append(&mut self.new_schemas);
    }

    /// Stores a prepared checkpoint; halts on failure and on a simulated crash.
    async fn commit(&mut self, prepared: Result<Arc<CheckpointRecord>, Error>) {
        let cp = match prepared {
            Ok(cp) => cp,
            Err(e) => match self.halt(e).await {},
        };
        let rt = &self.run.rt;
        if self.run.is_halted() {
            // Cancelled or shut down meanwhile: stop at this checkpoint.
            match self.stop(Halt::Stop).await {}
        }
        let n = rt.next_save();
        if rt.crash_point(n, true) {
            match self.stop(Halt::Crash).await {}
        }
        let seq = cp.seq;
        let size = cp.data.len();
        self.store_schemas().await;
        let rt = &self.run.rt;
        let stored = rt.store.save_checkpoint(&self.run.lease, cp, rt.keep).await;
        if let Err(e) = stored {
            match self.halt(e).await {}
        }
        self.size_hint = size.max(16);
        self.run.seq.store(seq, Ordering::Release);
        self.run.calls.store(0, Ordering::Release);
        self.run.attempt.store(1, Ordering::Release);
        self.wake = None;
        self.checkpoint = None;
        if self.run.rt.crash_point(n, false) {
            match self.stop(Halt::Crash).await {}
        }
    }

    /// Takes a checkpoint at `site`: encodes the live locals with `fields` (in
    /// the order of `SITES[site].fields`) and returns once it is stored. On
    /// failure, cancellation or a lost lease the execution halts instead.
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

    /// Consumes a stored signal named `name` if one decodes as `T`; rejected
    /// (undecodable) ones are discarded with a history event.
    async fn try_take<T: DeserializeOwned>(&mut self, name: &str) -> Option<T> {
        loop {
            let taken = self
                .run
                .rt
                .store
                .take_signal(&self.run.id, &self.run.lease, name)
                .await;
            let payload = match taken {
                Ok(Some(sig)) => sig.payload,
                Ok(None) => return None,
                Err(e) => match self.halt(e).await {},
            };
            let reason = match serde_json::from_slice::<T>(&payload) {
                Ok(v) => return Some(v),
                Err(e) => format!("{e} (expected `{}`)", std::any::type_name::<T>()),
            };
            let rejected = self
                .run
                .rt
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
        let suspend = Suspend::Waiting {
            signal: name.clone(),
            deadline: None,
        };
        let prepared = self.prepare(site, loops, fields, Some(suspend));
        async move {
            self.commit(prepared).await;
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
        let deadline = SystemTime::now().checked_add(timeout);
        let suspend = Suspend::Waiting {
            signal: name.clone(),
            deadline,
        };
        let prepared = self.prepare(site, loops, fields, Some(suspend));
        async move {
            self.commit(prepared).await;
            if let Some(v) = self.try_take::<T>(&name).await {
                return Some(v);
            }
            if deadline.is_some_and(|d| d <= SystemTime::now()) {
                let timed_out = self
                    .run
                    .rt
                    .store
                    .time_out(&self.run.id, &self.run.lease)
                    .await;
                if let Err(e) = timed_out {
                    match self.halt(e).await {}
                }
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
        let now = SystemTime::now();
        // An unrepresentable deadline is as good as "never": cap it at ~100 years.
        let until = now
            .checked_add(duration)
            .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
            .unwrap_or(now);
        let prepared = self.prepare(site, loops, fields, Some(Suspend::Sleeping { until }));
        async move {
            self.commit(prepared).await;
            if until <= SystemTime::now() {
                let woke = self
                    .run
                    .rt
                    .store
                    .time_out(&self.run.id, &self.run.lease)
                    .await;
                if let Err(e) = woke {
                    match self.halt(e).await {}
                }
                return;
            }
            match self.stop(Halt::Suspended).await {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoder(names: &'static [&'static str]) -> Encoder {
        Encoder {
            buf: Vec::new(),
            fields: Vec::new(),
            schemas: Vec::new(),
            names,
            workflow: "wf",
            run: Arc::from("run"),
            site: "site",
        }
    }

    /// A `Vec<u8>` written in one copy gives the bytes serde's element by
    /// element encoding gives (lengths on both sides of the varint's one- and
    /// two-byte forms), and loads back as the same vector.
    #[test]
    fn byte_vectors_encode_as_serde_would() {
        for len in [0usize, 1, 127, 128, 300, 16_384, 70_000] {
            let v: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let by_serde = postcard::to_stdvec(&v).unwrap();
            let mut enc = encoder(&["v", "after"]);
            enc.typed_field(&v).unwrap();
            enc.typed_field(&7u32).unwrap();
            let field = &enc.fields[0];
            assert_eq!(&enc.buf[..field.len], &by_serde[..], "{len} bytes");
            assert_eq!(field.type_name, std::any::type_name::<Vec<u8>>());
            assert_eq!(enc.fields[1].offset, by_serde.len());
            let back: Vec<u8> = postcard::from_bytes(&enc.buf[..field.len]).unwrap();
            assert_eq!(back, v);
            assert_eq!(encode(&v).unwrap().bytes(), &by_serde[..]);
        }
        // Other sequences of bytes keep serde's path, and the same bytes.
        let nested = (vec![1u8, 2, 3], [4u8; 3], vec![vec![5u8]]);
        let mut enc = encoder(&["nested"]);
        enc.typed_field(&nested).unwrap();
        assert_eq!(enc.buf, postcard::to_stdvec(&nested).unwrap());
    }
}
