//! The in-memory backend: everything in one process, lost when it exits.
//! Meant for tests and examples; it honours the full [`Store`] contract
//! (fencing, leases, signals, timers) so that several runtimes sharing one
//! `MemoryStore` behave like several workers sharing a database.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::rules;
use super::{
    CancelRequest, CheckpointRecord, ClaimRequest, ClaimResult, Claimed, Created, Lease, NewRun,
    Outcome, Release, Renewed, RunRecord, RunState, SignalRecord, SignalSite, Store, Suspend,
    Wakeup,
};
use crate::history::{Event, HistoryEntry};
use crate::status::RunFilter;
use crate::Error;

/// An in-memory [`Store`].
///
/// ```
/// use std::sync::Arc;
/// use checkpoint_runtime::{store::MemoryStore, Runtime};
///
/// // Two runtimes over one store behave like two workers over one database.
/// let store = Arc::new(MemoryStore::new());
/// let rt = Runtime::builder().store(store).in_memory();
/// # let _ = rt;
/// ```
pub struct MemoryStore {
    state: Mutex<State>,
    changes: watch::Sender<u64>,
    /// Tests: how late the next claim that takes a run answers (a claim
    /// transaction that took long on a loaded server).
    #[cfg(test)]
    claim_delay: Mutex<Option<Duration>>,
    /// Tests: how `put_schemas` answers (see [`SchemaPuts`]).
    #[cfg(test)]
    pub(crate) schema_puts: Mutex<SchemaPuts>,
}

/// Tests: the `put_schemas` calls a [`MemoryStore`] had, and how it answers
/// the next ones: after `delay`, and with an error while `fail` is set.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct SchemaPuts {
    pub(crate) calls: usize,
    pub(crate) delay: Option<Duration>,
    pub(crate) fail: bool,
}

mod children;
mod queues;

#[derive(Default)]
struct State {
    runs: HashMap<Arc<str>, Entry>,
    /// Non-terminal runs, in creation order.
    active: BTreeMap<u64, Arc<str>>,
    next_order: u64,
    /// Schema documents by key.
    schemas: HashMap<String, String>,
    /// What each workflow's wait sites take (`put_signal_sites`).
    signal_sites: HashMap<String, BTreeSet<SignalSite>>,
    /// Schedules by name.
    schedules: super::ScheduleTable,
    /// Per child run that a joining run waits for: the runs waiting
    /// (`Suspend::Joining`).
    joins: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// Each run's stream and progress (see `memory_streams`).
    streams: HashMap<Arc<str>, streams::RunStream>,
    /// Per queue with a rate: its admissions (see `queues`).
    admissions: queues::Admissions,
}

struct Entry {
    rec: RunRecord,
    order: u64,
    checkpoints: VecDeque<Arc<CheckpointRecord>>,
    history: Vec<Hist>,
    signals: VecDeque<SignalRecord>,
    /// How many children the run's join still waits for.
    join_pending: usize,
}

/// A history entry as kept in memory: the frequent `CheckpointSaved` event
/// compactly (no allocation for a static label), the rest boxed.
enum Hist {
    Saved {
        at: SystemTime,
        seq: u64,
        label: Option<Cow<'static, str>>,
    },
    Other(Box<HistoryEntry>),
}

impl Hist {
    fn entry(&self) -> HistoryEntry {
        match self {
            Hist::Saved { at, seq, label } => HistoryEntry {
                at: *at,
                event: rules::checkpoint_saved(*seq, label.as_deref()),
            },
            Hist::Other(e) => (**e).clone(),
        }
    }
}

impl Entry {
    /// Records `event`: a `CheckpointSaved` compactly (its label is static
    /// for a label written in the workflow), any other boxed.
    fn record(&mut self, at: SystemTime, event: Event) {
        let hist = match event {
            Event::CheckpointSaved { seq, label } => Hist::Saved {
                at,
                seq,
                label: label.map(Cow::Owned),
            },
            event => Hist::Other(Box::new(HistoryEntry { at, event })),
        };
        self.history.push(hist);
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let runs = self.lock().runs.len();
        f.debug_struct("MemoryStore").field("runs", &runs).finish()
    }
}

/// `now + d`, saturating at a far-future time instead of overflowing.
fn later(now: SystemTime, d: Duration) -> SystemTime {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

fn ready<'a, T: Send + 'a>(v: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(v))
}

impl MemoryStore {
    /// An empty store.
    ///
    /// ```
    /// let store = checkpoint_runtime::store::MemoryStore::new();
    /// # let _ = store;
    /// ```
    pub fn new() -> Self {
        MemoryStore {
            state: Mutex::new(State::default()),
            changes: watch::channel(0).0,
            #[cfg(test)]
            claim_delay: Mutex::new(None),
            #[cfg(test)]
            schema_puts: Mutex::new(SchemaPuts::default()),
        }
    }

    /// Tests: the next claim that takes a run answers `delay` late, its
    /// leases' expiry computed before the delay.
    #[cfg(test)]
    pub(crate) fn delay_next_claim(&self, delay: Duration) {
        *self.claim_delay.lock().unwrap_or_else(|e| e.into_inner()) = Some(delay);
    }

    fn do_put_schemas(&self, schemas: Vec<(String, String)>) {
        let mut st = self.lock();
        for (key, json) in schemas {
            st.schemas.entry(key).or_insert(json);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held; recover from poisoning anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn fenced<'s>(st: &'s mut State, id: &str, lease: &Lease) -> Result<&'s mut Entry, Error> {
        let e = st.runs.get_mut(id).ok_or_else(|| Error::unknown_run(id))?;
        rules::check_lease(id, &e.rec, lease)?;
        Ok(e)
    }

    fn do_create(&self, run: NewRun) -> Result<Created, Error> {
        let mut st = self.lock();
        if let Some(e) = st.runs.get(run.id.as_str()) {
            return Ok(Created::Existing(Box::new(e.rec.clone())));
        }
        let running = match &run.parent {
            Some(parent) if rules::counts_siblings(&run) => st
                .runs
                .values()
                .filter(|e| e.rec.parent.as_ref() == Some(parent) && rules::is_running(&e.rec))
                .count(),
            _ => 0,
        };
        let now = SystemTime::now();
        let (rec, change) = rules::create(run, running, now);
        let id = Self::insert(&mut st, rec, VecDeque::new());
        Self::apply(&mut st, &id, change, now);
        drop(st);
        self.bump();
        Ok(Created::New)
    }

    /// Adds run `rec`, with `checkpoints`, as the newest run.
    fn insert(
        st: &mut State,
        rec: RunRecord,
        checkpoints: VecDeque<Arc<CheckpointRecord>>,
    ) -> Arc<str> {
        let id: Arc<str> = Arc::from(rec.id.as_str());
        let order = st.next_order;
        st.next_order += 1;
        let entry = Entry {
            rec,
            order,
            checkpoints,
            history: Vec::new(),
            signals: VecDeque::new(),
            join_pending: 0,
        };
        st.active.insert(order, id.clone());
        st.runs.insert(id.clone(), entry);
        id
    }

    /// Applies what a rule changed of run `id` (its record already changed
    /// in place): its history, another run's, its signals, and what its end
    /// changes elsewhere (see [`rules::Ended`]). The one place this backend
    /// stores a transition.
    fn apply(st: &mut State, id: &str, change: rules::Change, now: SystemTime) {
        let rules::Change {
            event,
            elsewhere,
            signal,
            ended,
            ..
        } = change;
        if let Some(e) = st.runs.get_mut(id) {
            if let Some(event) = event {
                e.record(now, event);
            }
            if let Some(signal) = signal {
                e.signals.push_back(signal);
            }
            // The active index follows the state: an end leaves it, a retry
            // comes back.
            let order = e.order;
            if e.rec.state.is_terminal() {
                st.active.remove(&order);
            } else {
                st.active.entry(order).or_insert_with(|| Arc::from(id));
            }
        }
        if let Some((other, event)) = elsewhere {
            if let Some(o) = st.runs.get_mut(other.as_str()) {
                o.record(now, event);
            }
        }
        if let Some(ended) = ended {
            Self::child_ended(st, id, ended.freed_slot, now);
            if ended.cancels_descendants {
                Self::cancel_children(st, id, now);
            }
        }
    }

    fn do_claim(&self, req: &ClaimRequest) -> Result<ClaimResult, Error> {
        let now = SystemTime::now();
        let mut out = ClaimResult::default();
        let mut changed = false;
        let mut st = self.lock();
        let candidates: Vec<Arc<str>> = match &req.only {
            Some(only) => st
                .runs
                .get_key_value(only.as_str())
                .map(|(k, _)| vec![k.clone()])
                .unwrap_or_default(),
            None => st.active.values().cloned().collect(),
        };
        // The runs of bounded queues are set aside in a first pass, then
        // taken as `rules::admit_queued` admits them (a second pass).
        let mut queued: BTreeMap<String, Vec<(i32, u64, Arc<str>)>> = BTreeMap::new();
        let mut work = candidates;
        let mut admitting = false;
        loop {
            for id in std::mem::take(&mut work) {
                if out.claimed.len() >= req.limit {
                    break;
                }
                let Some(e) = st.runs.get_mut(&id) else {
                    continue;
                };
                if e.rec.state.is_terminal() {
                    continue;
                }
                if !rules::lease_free(e.rec.lease.as_ref(), &req.worker, &req.instance, now) {
                    continue;
                }
                let signal = match &e.rec.state {
                    RunState::Waiting { signal, .. } => {
                        e.signals.iter().position(|s| s.name == *signal)
                    }
                    _ => None,
                };
                if !rules::claimable(&e.rec.state, signal.is_some(), req) {
                    continue;
                }
                if !req.workflows.iter().any(|w| *w == e.rec.workflow) {
                    out.unregistered
                        .push((e.rec.id.clone(), e.rec.workflow.clone()));
                    continue;
                }
                if let (false, Some(_)) =
                    (admitting, rules::queue_limits(req, e.rec.queue.as_deref()))
                {
                    let queue = e.rec.queue.clone().unwrap_or_default();
                    queued
                        .entry(queue)
                        .or_default()
                        .push((e.rec.priority, e.order, id.clone()));
                    continue;
                }
                // As in every backend, a run whose latest checkpoint is gone is
                // set aside, never started over (see `rules::latest_checkpoint`).
                let latest = e.checkpoints.back().filter(|c| c.seq == e.rec.latest_seq);
                if let Err(cause) = rules::latest_checkpoint(&e.rec, latest.map(|c| &**c)) {
                    let error = rules::damaged(&id, Some(&e.rec.workflow), None, &[], &cause);
                    let change = rules::set_aside(&mut e.rec, error, now);
                    Self::apply(&mut st, &id, change, now);
                    changed = true;
                    continue;
                }
                let checkpoint = latest.cloned();
                let signal = signal.and_then(|pos| e.signals.remove(pos));
                let (lease, change) =
                    rules::claim(&mut e.rec, req, signal, later(now, req.ttl), now);
                out.claimed.push(Claimed {
                    lease,
                    run: e.rec.clone(),
                    checkpoint,
                });
                Self::apply(&mut st, &id, change, now);
            }
            if admitting || queued.is_empty() {
                break;
            }
            admitting = true;
            let room = req.limit.saturating_sub(out.claimed.len());
            let State {
                runs, admissions, ..
            } = &mut *st;
            let held = |queue: &str| {
                runs.values()
                    .filter(|e| {
                        e.rec.queue.as_deref() == Some(queue)
                            && !e.rec.state.is_terminal()
                            && rules::holds_slot(
                                e.rec.lease.as_ref(),
                                &req.worker,
                                &req.instance,
                                now,
                            )
                    })
                    .count()
            };
            work = queues::admit(
                admissions,
                held,
                req,
                std::mem::take(&mut queued),
                room,
                now,
            );
        }
        drop(st);
        if changed {
            self.bump();
        }
        Ok(out)
    }

    fn do_release(&self, id: &str, lease: &Lease, how: Release) -> Result<(), Error> {
        let mut st = self.lock();
        let now = SystemTime::now();
        let change = match Self::fenced(&mut st, id, lease) {
            Ok(e) => rules::release(&mut e.rec, how, now),
            Err(Error::Cancelled { .. }) => match st.runs.get_mut(id) {
                Some(e) => rules::release_cancelled(&mut e.rec),
                None => return Ok(()),
            },
            Err(err) => return Err(err),
        };
        Self::apply(&mut st, id, change, now);
        drop(st);
        self.bump();
        Ok(())
    }

    fn do_save(
        &self,
        lease: &Lease,
        cp: Arc<CheckpointRecord>,
        keep: Option<usize>,
    ) -> Result<(), Error> {
        let mut st = self.lock();
        let e = Self::fenced(&mut st, &cp.run, lease)?;
        rules::check_next_seq(&e.rec, &cp)?;
        let change = rules::save_checkpoint(&mut e.rec, &cp);
        let joining = match &cp.suspend {
            Some(Suspend::Joining { children, .. }) => Some(children.clone()),
            _ => None,
        };
        let at = cp.created_at;
        e.checkpoints.push_back(cp);
        if let Some(keep) = keep {
            let floor = rules::retention_floor(e.rec.latest_seq, keep);
            while e.checkpoints.front().is_some_and(|c| c.seq < floor) {
                e.checkpoints.pop_front();
            }
        }
        let run: Arc<str> = Arc::from(e.rec.id.as_str());
        Self::apply(&mut st, &run, change, at);
        if let Some(children) = joining {
            Self::join(&mut st, run, &children);
        }
        Ok(())
    }

    fn do_take_signal(
        &self,
        id: &str,
        lease: &Lease,
        name: &str,
    ) -> Result<Option<SignalRecord>, Error> {
        let mut st = self.lock();
        let e = Self::fenced(&mut st, id, lease)?;
        let Some(pos) = e.signals.iter().position(|s| s.name == name) else {
            return Ok(None);
        };
        let Some(sig) = e.signals.remove(pos) else {
            return Ok(None);
        };
        let now = SystemTime::now();
        let change = rules::consume_signal(&mut e.rec, &sig, now);
        Self::apply(&mut st, id, change, now);
        Ok(Some(sig))
    }

    fn do_time_out(&self, id: &str, lease: &Lease) -> Result<(), Error> {
        let mut st = self.lock();
        let e = Self::fenced(&mut st, id, lease)?;
        let now = SystemTime::now();
        let change = rules::time_out(&mut e.rec, now);
        Self::apply(&mut st, id, change, now);
        Ok(())
    }

    fn do_reject(&self, id: &str, lease: &Lease, reason: String) -> Result<(), Error> {
        let mut st = self.lock();
        let e = Self::fenced(&mut st, id, lease)?;
        let now = SystemTime::now();
        let latest = e
            .checkpoints
            .back()
            .filter(|cp| cp.seq == e.rec.latest_seq)
            .cloned();
        let change = rules::reject_signal(&mut e.rec, reason, latest.as_deref(), now)?;
        Self::apply(&mut st, id, change, now);
        Ok(())
    }

    fn do_finish(&self, id: &str, lease: &Lease, outcome: Outcome) -> Result<(), Error> {
        let mut st = self.lock();
        let e = Self::fenced(&mut st, id, lease)?;
        let now = SystemTime::now();
        let change = rules::finish(&mut e.rec, outcome, now);
        Self::apply(&mut st, id, change, now);
        drop(st);
        self.bump();
        Ok(())
    }

    fn do_cancel(&self, id: &str) -> Result<bool, Error> {
        let mut st = self.lock();
        let e = st.runs.get_mut(id).ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let Some(change) = rules::cancel(&mut e.rec, now) else {
            return Ok(false);
        };
        Self::apply(&mut st, id, change, now);
        drop(st);
        self.bump();
        Ok(true)
    }

    fn do_request_cancel(&self, id: &str, req: CancelRequest) -> Result<(), Error> {
        let mut st = self.lock();
        let e = st.runs.get_mut(id).ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let change = rules::request_cancel(&mut e.rec, req, now)?;
        Self::apply(&mut st, id, change, now);
        drop(st);
        self.bump();
        Ok(())
    }

    fn do_retry(&self, id: &str) -> Result<(), Error> {
        let mut st = self.lock();
        let e = st.runs.get_mut(id).ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let change = rules::retry(&mut e.rec, now)?;
        Self::apply(&mut st, id, change, now);
        drop(st);
        self.bump();
        Ok(())
    }

    fn do_put_signal(&self, id: &str, name: &str, payload: Vec<u8>) -> Result<(), Error> {
        let mut st = self.lock();
        let e = st.runs.get(id).ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let change = rules::accept_signal(&e.rec, name, payload, now)?;
        Self::apply(&mut st, id, change, now);
        drop(st);
        self.bump();
        Ok(())
    }

    fn do_fork(&self, from: &str, seq: u64, new_id: &str) -> Result<(), Error> {
        let mut st = self.lock();
        if st.runs.contains_key(new_id) {
            return Err(Error::AlreadyExists {
                run: new_id.to_owned(),
            });
        }
        let src = st.runs.get(from).ok_or_else(|| Error::unknown_run(from))?;
        let cp = src
            .checkpoints
            .iter()
            .find(|c| c.seq == seq)
            .cloned()
            .ok_or_else(|| Error::UnknownCheckpoint {
                run: from.to_owned(),
                seq,
            })?;
        let now = SystemTime::now();
        let (workflow, input) = (src.rec.workflow.clone(), src.rec.input.clone());
        let (rec, copy, change) = rules::fork(from, &cp, new_id, workflow, input, now);
        let id = Self::insert(&mut st, rec, VecDeque::from([Arc::new(copy)]));
        Self::apply(&mut st, &id, change, now);
        // The fork joins the same children (they are not run again).
        if let Some(Suspend::Joining { children, .. }) = &cp.suspend {
            Self::join(&mut st, id, children);
        }
        drop(st);
        self.bump();
        Ok(())
    }

    fn do_next_wakeup(&self, after: SystemTime) -> Wakeup {
        let st = self.lock();
        let earliest = |a: Option<SystemTime>, t: Option<SystemTime>| match (a, t) {
            (Some(a), Some(t)) => Some(a.min(t)),
            (a, t) => a.or(t),
        };
        let mut next = Wakeup::default();
        for id in st.active.values() {
            let Some(e) = st.runs.get(id) else { continue };
            let lease = e.rec.lease.as_ref();
            next.lease = earliest(next.lease, lease.map(|l| l.expires_at));
            next.timer = earliest(next.timer, rules::timer_after(&e.rec.state, lease, after));
        }
        next.lease = earliest(
            next.lease,
            queues::next_window(&st.admissions, SystemTime::now()),
        );
        next
    }

    fn with_entry<T>(&self, id: &str, f: impl FnOnce(&Entry) -> T) -> Result<T, Error> {
        let st = self.lock();
        st.runs.get(id).map(f).ok_or_else(|| Error::unknown_run(id))
    }
}

impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn create_run(&self, run: NewRun) -> BoxFuture<'_, Result<Created, Error>> {
        ready(self.do_create(run))
    }

    fn load_run<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<RunRecord>, Error>> {
        ready(Ok(self.lock().runs.get(id).map(|e| e.rec.clone())))
    }

    fn list_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, Error>> {
        let st = self.lock();
        let mut found: Vec<(u64, RunRecord)> = st
            .runs
            .values()
            .filter(|e| {
                filter
                    .workflow
                    .as_ref()
                    .is_none_or(|w| *w == e.rec.workflow)
                    && filter
                        .id_prefix
                        .as_ref()
                        .is_none_or(|p| e.rec.id.starts_with(p.as_str()))
                    && filter
                        .status
                        .is_none_or(|k| e.rec.status().kind().stored() == k.stored())
                    && filter
                        .parent
                        .as_ref()
                        .is_none_or(|p| e.rec.parent.as_deref() == Some(p.as_str()))
                    && filter.tags_match(&e.rec.tags)
            })
            .map(|e| (e.order, e.rec.clone()))
            .collect();
        drop(st);
        found.sort_by_key(|(o, _)| *o);
        if filter.newest_first {
            found.reverse();
        }
        let runs = found
            .into_iter()
            .map(|(_, r)| r)
            .skip(filter.offset)
            .take(filter.limit.unwrap_or(usize::MAX))
            .collect();
        ready(Ok(runs))
    }

    fn claim<'a>(&'a self, req: &'a ClaimRequest) -> BoxFuture<'a, Result<ClaimResult, Error>> {
        let claimed = self.do_claim(req);
        #[cfg(test)]
        if claimed.as_ref().is_ok_and(|c| !c.claimed.is_empty()) {
            let delay = self
                .claim_delay
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(delay) = delay {
                return Box::pin(async move {
                    tokio::time::sleep(delay).await;
                    claimed
                });
            }
        }
        ready(claimed)
    }

    fn renew<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Renewed, Error>> {
        let mut st = self.lock();
        let now = SystemTime::now();
        let r = Self::fenced(&mut st, id, lease).map(|e| rules::renew(&mut e.rec, later(now, ttl)));
        ready(r.map(|(change, renewed)| {
            Self::apply(&mut st, id, change, now);
            renewed
        }))
    }

    fn release<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        how: Release,
    ) -> BoxFuture<'a, Result<(), Error>> {
        ready(self.do_release(id, lease, how))
    }

    fn save_checkpoint<'a>(
        &'a self,
        lease: &'a Lease,
        checkpoint: Arc<CheckpointRecord>,
        keep: Option<usize>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        ready(self.do_save(lease, checkpoint, keep))
    }

    fn take_signal<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<SignalRecord>, Error>> {
        ready(self.do_take_signal(id, lease, name))
    }

    fn time_out<'a>(&'a self, id: &'a str, lease: &'a Lease) -> BoxFuture<'a, Result<(), Error>> {
        ready(self.do_time_out(id, lease))
    }

    fn reject_signal<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        reason: String,
    ) -> BoxFuture<'a, Result<(), Error>> {
        ready(self.do_reject(id, lease, reason))
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        outcome: Outcome,
    ) -> BoxFuture<'a, Result<(), Error>> {
        ready(self.do_finish(id, lease, outcome))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        ready(self.do_cancel(id))
    }

    fn retry<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        ready(self.do_retry(id))
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a str,
        req: CancelRequest,
    ) -> BoxFuture<'a, Result<(), Error>> {
        ready(self.do_request_cancel(id, req))
    }

    fn put_signal<'a>(
        &'a self,
        id: &'a str,
        name: &'a str,
        payload: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        ready(self.do_put_signal(id, name, payload))
    }

    fn pending_signals<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SignalRecord>, Error>> {
        ready(self.with_entry(id, |e| e.signals.iter().cloned().collect()))
    }

    fn latest_checkpoint<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<CheckpointRecord>>, Error>> {
        ready(self.with_entry(id, |e| e.checkpoints.back().cloned()))
    }

    fn checkpoint<'a>(
        &'a self,
        id: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<Option<Arc<CheckpointRecord>>, Error>> {
        ready(self.with_entry(id, |e| e.checkpoints.iter().find(|c| c.seq == seq).cloned()))
    }

    fn list_checkpoints<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Arc<CheckpointRecord>>, Error>> {
        ready(self.with_entry(id, |e| e.checkpoints.iter().cloned().collect()))
    }

    fn append_event<'a>(&'a self, id: &'a str, event: Event) -> BoxFuture<'a, Result<(), Error>> {
        let mut st = self.lock();
        let r = match st.runs.get_mut(id) {
            Some(e) => {
                e.record(SystemTime::now(), event);
                Ok(())
            }
            None => Err(Error::unknown_run(id)),
        };
        ready(r)
    }

    fn history<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<HistoryEntry>, Error>> {
        ready(self.with_entry(id, |e| e.history.iter().map(Hist::entry).collect()))
    }

    fn fork<'a>(
        &'a self,
        from: &'a str,
        seq: u64,
        new_id: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        ready(self.do_fork(from, seq, new_id))
    }

    fn next_wakeup(&self, after: SystemTime) -> BoxFuture<'_, Result<Wakeup, Error>> {
        ready(Ok(self.do_next_wakeup(after)))
    }

    fn put_schemas(&self, schemas: Vec<(String, String)>) -> BoxFuture<'_, Result<(), Error>> {
        #[cfg(test)]
        {
            let (delay, fail) = {
                let mut puts = self.schema_puts.lock().unwrap_or_else(|e| e.into_inner());
                puts.calls += 1;
                (puts.delay, puts.fail)
            };
            if delay.is_some() || fail {
                return Box::pin(async move {
                    if let Some(delay) = delay {
                        tokio::time::sleep(delay).await;
                    }
                    if fail {
                        return Err(Error::store("memory: schemas refused (test)"));
                    }
                    self.do_put_schemas(schemas);
                    Ok(())
                });
            }
        }
        self.do_put_schemas(schemas);
        ready(Ok(()))
    }

    fn schemas<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<HashMap<String, String>, Error>> {
        let st = self.lock();
        let found = keys
            .iter()
            .filter_map(|k| st.schemas.get(k).map(|j| (k.clone(), j.clone())))
            .collect();
        ready(Ok(found))
    }

    fn put_signal_sites(
        &self,
        workflow: &str,
        sites: Vec<SignalSite>,
    ) -> BoxFuture<'_, Result<(), Error>> {
        let mut st = self.lock();
        st.signal_sites
            .entry(workflow.to_owned())
            .or_default()
            .extend(sites);
        ready(Ok(()))
    }

    fn signal_sites<'a>(
        &'a self,
        workflow: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SignalSite>, Error>> {
        let st = self.lock();
        let sites = st.signal_sites.get(workflow);
        ready(Ok(sites
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()))
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn put_schedule(
        &self,
        rec: super::ScheduleRecord,
    ) -> BoxFuture<'_, Result<super::ScheduleRecord, Error>> {
        ready(Ok(self.lock().schedules.put(rec)))
    }

    fn schedules(&self) -> BoxFuture<'_, Result<Vec<super::ScheduleRecord>, Error>> {
        ready(Ok(self.lock().schedules.list()))
    }

    fn pause_schedule<'a>(
        &'a self,
        name: &'a str,
        paused: bool,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        ready(Ok(self.lock().schedules.set_paused(name, paused)))
    }

    fn delete_schedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        ready(Ok(self.lock().schedules.delete(name)))
    }

    fn advance_schedule<'a>(
        &'a self,
        name: &'a str,
        from: Option<SystemTime>,
        to: SystemTime,
        run: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        ready(Ok(self.lock().schedules.advance(name, from, to, run)))
    }

    fn write_stream<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        write: super::StreamWrite,
    ) -> BoxFuture<'a, Result<(), Error>> {
        ready(self.do_write_stream(id, lease, write))
    }

    fn stream_items<'a>(
        &'a self,
        id: &'a str,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<super::StreamItem>, Error>> {
        ready(self.do_stream_items(id, from, limit))
    }

    fn discard_stream<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        from_seq: u64,
    ) -> BoxFuture<'a, Result<u64, Error>> {
        ready(self.do_discard_stream(id, lease, from_seq))
    }

    fn progress<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, Error>> {
        ready(self.do_progress(id))
    }
}

mod streams;

#[cfg(test)]
mod tests;
