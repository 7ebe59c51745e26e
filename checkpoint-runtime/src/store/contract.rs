//! The [`Store`] trait and what a backend must guarantee.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::records::{
    CheckpointRecord, ClaimRequest, ClaimResult, Created, GcReport, Lease, NewRun, Outcome,
    Release, Renewed, RunRecord, SignalRecord, SignalSite, Wakeup, WorkerHold,
};
use super::ScheduleRecord;
use crate::history::{Event, HistoryEntry};
use crate::status::{RunFilter, StatusKind};
use crate::Error;

/// A storage backend.
///
/// All methods are asynchronous (boxed futures, so the trait is object safe:
/// the runtime holds an `Arc<dyn Store>`). A backend must guarantee:
///
/// - **Atomicity.** Each method is one transaction: a checkpoint and the state
///   change it carries ([`CheckpointRecord::state`]) and its history event are
///   stored together or not at all; a claim moves a run to its new lease and
///   epoch (and, for a waiting run, moves the matching signal into
///   [`RunRecord::wake`]) atomically.
/// - **Fencing.** Every method taking a [`Lease`] fails with
///   [`Error::LeaseLost`] when the run's epoch differs from the lease's (another
///   worker claimed it since), and with [`Error::Cancelled`] when the run was
///   cancelled; terminal runs are never changed by fenced writes.
/// - **Claim rules.** A run may be claimed when its workflow is in
///   [`ClaimRequest::workflows`], its state is not terminal, its lease is absent,
///   expired, or held by the same worker id under an *older* instance (a
///   restart: instance ids sort by start time, see [`LeaseInfo::instance`](super::LeaseInfo::instance); an
///   older instance never takes a run from a newer one, so two live runtimes
///   that share a worker id cannot steal runs back and forth; and the
///   runtime only leases under a worker id while it holds it, see
///   [`Store::hold_worker`], so that the newer instance's rule only ever
///   meets the runs of a dead one);
///   and it is `Ready`, `Sleeping` with a due timer, or `Waiting` with a stored
///   signal of that name or a passed deadline. Timers and deadlines are
///   compared with the claiming runtime's clock, [`ClaimRequest::clock_now`]
///   (never with the database's or the system's time: a test runs on a
///   virtual clock); leases with the system's time. A claim increments the epoch and
///   the attempt counter, sets the state to `Ready`, and for a waiting run
///   records the wake value for the latest checkpoint (the oldest matching signal
///   is consumed, exactly once).
/// - **Queues.** A run of a queue the claim limits
///   ([`ClaimRequest::queues`], [`rules::queue_limits`](super::rules::queue_limits))
///   is taken only as [`rules::admit_queued`](super::rules::admit_queued)
///   admits it, with the runs of the queue that hold a slot
///   ([`rules::holds_slot`](super::rules::holds_slot)) and its admissions
///   within the rate's window counted in the claim's transaction, so that
///   concurrent claims (of any process) never admit more than the limits
///   together; each admission to a queue with a rate is stored with it.
/// - **Signals** are kept per run in arrival order until consumed.
/// - **Notification.** The counter returned by [`Store::subscribe`] changes
///   whenever a run may have become runnable or finished (a backend without push
///   notifications may bump it from a poller).
/// - **Durability**: a method returns `Ok` only once its effect is durable.
/// - **Integrity.** A durable backend seals every checkpoint it stores
///   ([`checksums`](super::checksums)) and checks the seal
///   ([`verify_checksums`](super::verify_checksums)) wherever it rebuilds one
///   (claims, [`latest_checkpoint`](Store::latest_checkpoint),
///   [`checkpoint`](Store::checkpoint), [`list_checkpoints`](Store::list_checkpoints),
///   [`fork`](Store::fork)): damaged bytes, or damaged metadata locating or
///   naming them, are an [`Error::Decode`] naming the run, its workflow, the
///   site and the field, never a record with other values. A claim that
///   meets a run it cannot load (its row, or its latest checkpoint, damaged
///   or missing) marks it failed with that error and goes on with the
///   others; it never starts such a run over from its input.
pub trait Store: Send + Sync + 'static {
    /// A short name of the backend (`"memory"`, `"sqlite"`, ...).
    fn kind(&self) -> &'static str;

    /// Creates a run in state `Ready` and records `Started`, unless the id exists.
    fn create_run(&self, run: NewRun) -> BoxFuture<'_, Result<Created, Error>>;

    /// Loads a run.
    fn load_run<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<RunRecord>, Error>>;

    /// Lists runs, oldest first.
    fn list_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, Error>>;

    /// How many runs match `filter`'s workflow, id prefix and parent, by
    /// status (its status, limit, offset and order are ignored); kinds
    /// with no run are left out. The default lists the runs and counts
    /// them; a backend with many runs counts in the database instead.
    fn count_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<BTreeMap<StatusKind, u64>, Error>> {
        Box::pin(async move {
            let all = RunFilter {
                status: None,
                limit: None,
                offset: 0,
                ..filter.clone()
            };
            let mut counts = BTreeMap::new();
            for run in self.list_runs(&all).await? {
                *counts.entry(run.status().kind()).or_insert(0) += 1;
            }
            Ok(counts)
        })
    }

    /// The parked runs ([`RunState::Parked`](super::RunState::Parked)),
    /// oldest first: every worker looks for them every few seconds, so a
    /// backend with many finished runs answers from an index. The default
    /// filters [`Store::list_runs`].
    fn parked_runs(&self) -> BoxFuture<'_, Result<Vec<RunRecord>, Error>> {
        Box::pin(async move {
            let filter = RunFilter::new().status(crate::status::StatusKind::Incompatible);
            self.list_runs(&filter).await
        })
    }

    /// Claims runnable runs (see the trait docs for the rules).
    fn claim<'a>(&'a self, req: &'a ClaimRequest) -> BoxFuture<'a, Result<ClaimResult, Error>>;

    /// Extends a lease by `ttl` from now. Fenced. Reports what
    /// [`rules::renewed`](super::rules::renewed) reports of the run (its
    /// cancel request), read in the same transaction: this is how a cancel
    /// requested by another process reaches a run that executes without
    /// suspending.
    fn renew<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Renewed, Error>>;

    /// Extends the leases of many runs by `ttl` from now, each fenced like
    /// [`Store::renew`] and reporting like it: one result per entry, in
    /// order. A runtime renews all the runs it executes with one call per
    /// renewal period, so a backend where each call is a transaction
    /// (PostgreSQL) overrides this with one statement for all of them. The default issues one
    /// [`Store::renew`] per entry, all at once.
    ///
    /// A backend must not wait long for a run whose row another
    /// transaction holds (that run's own checkpoint in flight): it may
    /// answer `Err(Error::Store)` for that run, which the runtime tries
    /// again shortly.
    fn renew_many<'a>(
        &'a self,
        runs: &'a [(Arc<str>, Lease)],
        ttl: Duration,
    ) -> BoxFuture<'a, Vec<Result<Renewed, Error>>> {
        Box::pin(futures::future::join_all(
            runs.iter().map(|(id, lease)| self.renew(id, lease, ttl)),
        ))
    }

    /// Gives a run back (clears the lease). Fenced.
    fn release<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        how: Release,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Stores a checkpoint (its `seq` must be the run's latest + 1), moves the
    /// run to [`CheckpointRecord::state`], resets the attempt counter to 1,
    /// clears the wake value, records `CheckpointSaved`, and prunes old
    /// checkpoints beyond `keep` (the latest is always kept). Fenced.
    fn save_checkpoint<'a>(
        &'a self,
        lease: &'a Lease,
        checkpoint: Arc<CheckpointRecord>,
        keep: Option<usize>,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Consumes the oldest stored signal named `name` into the wake value of
    /// the latest checkpoint (state becomes `Ready`), and returns it. Fenced.
    fn take_signal<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<SignalRecord>, Error>>;

    /// Records that the deadline of the latest (wait) checkpoint passed: wake
    /// value `TimedOut`, state `Ready`. Fenced.
    fn time_out<'a>(&'a self, id: &'a str, lease: &'a Lease) -> BoxFuture<'a, Result<(), Error>>;

    /// Discards the consumed signal of the wake value (its payload was
    /// unusable): records `SignalRejected`, clears the wake value and returns the
    /// run to the waiting state of its latest checkpoint. Fenced; does not
    /// release the lease. A run whose latest checkpoint the store no longer
    /// has is left as it is, with an [`Error::Decode`] naming it (see
    /// `rules::reject_signal`).
    fn reject_signal<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        reason: String,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Finishes a run (records `Completed` or `Failed`), clears the lease. Fenced.
    fn finish<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        outcome: Outcome,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Cancels a run unless it is finished; returns whether it was cancelled
    /// by this call. Records `Cancelled`.
    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, Error>>;

    /// Stores cancel request `req` on a run that is not finished
    /// ([`rules::request_cancel`](super::rules::request_cancel)): records
    /// `CancelRequested`, wakes it when it sleeps or waits with a deadline.
    /// [`Error::CancelRefused`] for a finished run. A backend written before
    /// this method existed refuses it.
    fn request_cancel<'a>(
        &'a self,
        id: &'a str,
        req: super::CancelRequest,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let _ = req;
        Box::pin(futures::future::ready(Err(Error::store(format!(
            "this store ({}) cannot request a cancel of run `{id}`",
            self.kind()
        )))))
    }

    /// Makes a failed or parked run runnable again from its latest
    /// checkpoint, as a new attempt, and records `Retried`;
    /// [`Error::NotRetryable`] for a run in another state. A backend
    /// written before this method existed refuses it.
    fn retry<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(futures::future::ready(Err(Error::store(format!(
            "this store ({}) cannot retry run `{id}`",
            self.kind()
        )))))
    }

    /// Stores a signal for a run and records `SignalReceived`.
    fn put_signal<'a>(
        &'a self,
        id: &'a str,
        name: &'a str,
        payload: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// The signals stored for a run and not yet consumed, oldest first.
    fn pending_signals<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SignalRecord>, Error>>;

    /// The latest checkpoint of a run.
    fn latest_checkpoint<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<CheckpointRecord>>, Error>>;

    /// One checkpoint of a run.
    fn checkpoint<'a>(
        &'a self,
        id: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<Option<Arc<CheckpointRecord>>, Error>>;

    /// The kept checkpoints of a run, oldest first ([`Error::UnknownRun`] if
    /// the run does not exist). A damaged version is listed as the stand-in
    /// [`CheckpointRecord::damaged`] (its [`damage`](CheckpointRecord::damage)
    /// says what is wrong), so that one damaged version does not hide the
    /// others.
    fn list_checkpoints<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Arc<CheckpointRecord>>, Error>>;

    /// Appends a history event.
    fn append_event<'a>(&'a self, id: &'a str, event: Event) -> BoxFuture<'a, Result<(), Error>>;

    /// The history of a run, oldest first ([`Error::UnknownRun`] if the run
    /// does not exist).
    fn history<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<HistoryEntry>, Error>>;

    /// Creates run `new_id` (same workflow and input as `from`) whose only
    /// checkpoint (seq 1) is a copy of checkpoint `seq` of `from`, in the state
    /// that checkpoint carries; records `Forked` in both histories.
    fn fork<'a>(
        &'a self,
        from: &'a str,
        seq: u64,
        new_id: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// When a run that is not runnable now may next become runnable without
    /// a signal: the earliest expiry of another worker's lease (system
    /// time), or of an admission to a queue's rate window (see
    /// [`rules::rate_window`](super::rules::rate_window)), and the earliest
    /// timer or deadline later than `after` (the runtime's clock reading)
    /// of a sleeping or waiting run under no lease (see
    /// [`rules::timer_after`](super::rules::timer_after)); a run started
    /// with a start time is such a sleeping run.
    fn next_wakeup(&self, after: SystemTime) -> BoxFuture<'_, Result<Wakeup, Error>>;

    /// A counter that changes whenever a run may have become runnable or finished.
    fn subscribe(&self) -> watch::Receiver<u64>;

    /// Holds worker id `worker` for the calling runtime instance while the
    /// returned [`WorkerHold`] lives (and never longer than its process):
    /// `None` when another live instance holds it. The runtime executes
    /// runs under the worker id itself only while it holds it; a second
    /// live instance with the same id leases under an id of its own (so
    /// that the claim rule "a newer instance of the same worker id takes
    /// over at once" only ever applies to the runs of a dead instance).
    /// The default (a store in one process) always grants it.
    fn hold_worker<'a>(
        &'a self,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Option<WorkerHold>, Error>> {
        let _ = worker;
        Box::pin(std::future::ready(Ok(Some(WorkerHold::unchecked()))))
    }

    /// Reclaims space that retention ([`Store::save_checkpoint`]'s `keep`)
    /// freed but the backend still holds. Nothing visible changes. The
    /// default does nothing.
    fn gc(&self) -> BoxFuture<'_, Result<GcReport, Error>> {
        Box::pin(std::future::ready(Ok(GcReport::default())))
    }

    /// Stores schema documents, `(key, JSON)` pairs (see [`crate::schema`]
    /// for what they are). A key names its document for good (it is a hash
    /// of it), so a key already stored is left as it is. Not fenced: any
    /// worker may add schemas, and they are never removed.
    ///
    /// The runtime stores a field's schema before the first checkpoint that
    /// refers to it and remembers what it stored, so this is called once per
    /// schema and runtime, not per checkpoint. A failure only costs the JSON
    /// view of those fields. The default keeps nothing (the fields of
    /// checkpoints in such a store cannot be shown as JSON).
    fn put_schemas(&self, schemas: Vec<(String, String)>) -> BoxFuture<'_, Result<(), Error>> {
        let _ = schemas;
        Box::pin(std::future::ready(Ok(())))
    }

    /// The stored schema documents among `keys`, by key (unknown keys are
    /// left out). The default has none.
    fn schemas<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<HashMap<String, String>, Error>> {
        let _ = keys;
        Box::pin(std::future::ready(Ok(HashMap::new())))
    }

    /// Records what `workflow`'s wait sites take (see [`SignalSite`]): the
    /// names its code waits for, written by every worker that registers
    /// it, and each site's payload schema once a worker ran the site.
    /// Rows only accumulate (a name an older deploy waits for stays known,
    /// for that deploy's runs); a row already stored is left as it is. Not
    /// fenced. The default keeps nothing, and then every name is accepted.
    fn put_signal_sites(
        &self,
        workflow: &str,
        sites: Vec<SignalSite>,
    ) -> BoxFuture<'_, Result<(), Error>> {
        let _ = (workflow, sites);
        Box::pin(std::future::ready(Ok(())))
    }

    /// The rows [`Store::put_signal_sites`] recorded for `workflow`, in
    /// order; empty when none were (no worker of this store registered it
    /// since this was kept: its signals are not checked by name). The
    /// default has none.
    fn signal_sites<'a>(
        &'a self,
        workflow: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SignalSite>, Error>> {
        let _ = workflow;
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// Stores schedule `rec.name`: a new one as given; over a stored one,
    /// its workflow and definition only (pause, last tick, last run and
    /// creation time stay: every worker registers its schedules at start).
    /// Returns the record now stored. Not fenced. The default refuses:
    /// this store keeps no schedules.
    fn put_schedule(&self, rec: ScheduleRecord) -> BoxFuture<'_, Result<ScheduleRecord, Error>> {
        let _ = rec;
        Box::pin(std::future::ready(Err(no_schedules(self.kind()))))
    }

    /// Every stored schedule, by name. The default has none.
    fn schedules(&self) -> BoxFuture<'_, Result<Vec<ScheduleRecord>, Error>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// Pauses or unpauses schedule `name`; `false` when there is none.
    fn pause_schedule<'a>(
        &'a self,
        name: &'a str,
        paused: bool,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        let _ = (name, paused);
        Box::pin(std::future::ready(Err(no_schedules(self.kind()))))
    }

    /// Removes schedule `name` (its runs stay); `false` when there is none.
    fn delete_schedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        let _ = name;
        Box::pin(std::future::ready(Err(no_schedules(self.kind()))))
    }

    /// Moves schedule `name`'s last tick from `from` to `to` (and its last
    /// run to `run`, when given), only if its last tick is still `from`:
    /// `false` when another worker moved it first, or there is no such
    /// schedule. This compare-and-set is what makes every tick handled
    /// once across workers.
    fn advance_schedule<'a>(
        &'a self,
        name: &'a str,
        from: Option<SystemTime>,
        to: SystemTime,
        run: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        let _ = (name, from, to, run);
        Box::pin(std::future::ready(Err(no_schedules(self.kind()))))
    }

    /// Stores `write` for run `id` (see [`StreamWrite`](super::StreamWrite)):
    /// its items (an index stored already is replaced) and its progress
    /// (when set; latest value wins). Fenced: a worker that lost its lease
    /// cannot write ([`rules::streams::may_write`](super::rules::streams::may_write)).
    /// Durable once `Ok`. A backend written before this method existed
    /// refuses it.
    fn write_stream<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        write: super::StreamWrite,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let _ = (lease, write);
        Box::pin(futures::future::ready(Err(Error::store(format!(
            "this store ({}) cannot store the stream of run `{id}`",
            self.kind()
        )))))
    }

    /// The stored items of run `id`'s stream from index `from` on, in index
    /// order, at most `limit` of them (and never more than
    /// [`STREAM_PAGE_MAX`](super::STREAM_PAGE_MAX)): a stream is read in
    /// pages. [`Error::UnknownRun`] if the run does not exist. The default
    /// has none.
    fn stream_items<'a>(
        &'a self,
        id: &'a str,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<super::StreamItem>, Error>> {
        let _ = (id, from, limit);
        Box::pin(futures::future::ready(Ok(Vec::new())))
    }

    /// Prepares run `id`'s stream for a resume from checkpoint `from_seq`
    /// (0: from its input): deletes the items emitted since that checkpoint
    /// ([`rules::streams::kept_on_resume`](super::rules::streams::kept_on_resume)),
    /// which the resumed segment emits again, and returns the index the next
    /// item gets ([`rules::streams::next_index`](super::rules::streams::next_index)).
    /// Fenced. The default keeps nothing and answers 0.
    fn discard_stream<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        from_seq: u64,
    ) -> BoxFuture<'a, Result<u64, Error>> {
        let _ = (id, lease, from_seq);
        Box::pin(futures::future::ready(Ok(0)))
    }

    /// Run `id`'s latest stored progress (JSON), `None` if none was stored.
    /// [`Error::UnknownRun`] if the run does not exist. The default has none.
    fn progress<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, Error>> {
        let _ = id;
        Box::pin(futures::future::ready(Ok(None)))
    }

    /// A counter that changes when some run's stream items may have been
    /// stored ([`Store::write_stream`]), where the backend can tell (the
    /// PostgreSQL store learns of other processes' writes by `NOTIFY`):
    /// readers of a stream wait on it, and poll besides. The default is
    /// [`Store::subscribe`].
    fn subscribe_streams(&self) -> watch::Receiver<u64> {
        self.subscribe()
    }
}

fn no_schedules(kind: &str) -> Error {
    Error::store(format!("the {kind} store keeps no schedules"))
}
