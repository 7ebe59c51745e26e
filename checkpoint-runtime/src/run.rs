//! What one execution of a run shares with its frame, its `Ctx` clones and
//! its driver ([`RunShared`]), why an execution stops ([`Halt`]), and the
//! narrow part of the runtime an execution may use ([`RunEnv`]).
//!
//! This is the bottom of the runtime core: it imports only the store, the
//! error type and the crash hook of [`crate::testing`]; `ctx`, `frame`,
//! `launch` and `executor` build on it.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::store::{rules, CancelRequest, Lease, Store};
use crate::testing::crash::SaveHook;
use crate::Error;

/// Locks `m`, going on with the data of a holder that panicked (every
/// critical section here leaves its data consistent).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

tokio::task_local! {
    /// The run the current task executes (set around each execution), so
    /// that [`SideEffects`](crate::testing::SideEffects) can say which run an
    /// effect came from.
    pub(crate) static CURRENT_RUN: Arc<str>;
}

/// Shared, non-serialized dependencies registered on a runtime.
#[derive(Clone, Default)]
pub(crate) struct Resources(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl Resources {
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Arc::new(value));
    }

    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.0
            .get(&TypeId::of::<T>())
            .and_then(|r| r.downcast_ref::<T>())
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// The part of the runtime an execution uses: where it stores checkpoints,
/// how many it keeps, who it runs as, its resources, and which schemas the
/// store already has. Everything else (the registry, the worker loops) stays
/// in the executor, out of reach of the frame and the `Ctx`.
pub(crate) struct RunEnv {
    pub(crate) store: Arc<dyn Store>,
    /// The worker id as configured (what `Ctx::worker_id` reports).
    pub(crate) worker: Arc<str>,
    /// How many checkpoint versions a run keeps (`None`: all).
    pub(crate) keep: Option<usize>,
    pub(crate) resources: Resources,
    /// The schemas this runtime stored, and those being stored.
    pub(crate) schemas: crate::schema::stored::StoredSchemas,
    /// A simulated crash around checkpoint writes (tests only).
    pub(crate) save_hook: Option<Arc<dyn SaveHook>>,
    /// Carries each run's trace context across executions.
    pub(crate) trace: Option<Arc<dyn crate::observe::TracePropagation>>,
    /// The runtime's registry of workflows (a `Registry`, kept opaque
    /// here so that this module stays below it): `ctx.spawn` registers
    /// the child's workflow, so that this runtime executes it too.
    pub(crate) registry: Arc<dyn Any + Send + Sync>,
    /// The clock of durable time: deadlines and when timers are due.
    pub(crate) clock: Arc<dyn crate::clock::Clock>,
    /// What this runtime's workflows' wait sites take, on its way to the
    /// store (see [`crate::signal_catalog`]).
    pub(crate) signal_catalog: crate::signal_catalog::Catalog,
    /// The items this runtime's executions emitted and did not store yet,
    /// by run, for readers in this process (see [`crate::streams`]).
    pub(crate) streams: crate::streams::live::Hub,
}

impl RunEnv {
    /// Whether a simulated crash fired: the runtime then stops executing.
    pub(crate) fn crashed(&self) -> bool {
        self.save_hook.as_ref().is_some_and(|h| h.fired())
    }
}

/// Why an execution stopped before its workflow returned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Halt {
    /// Suspended durably (waiting, sleeping): release the lease.
    Suspended,
    /// The run cannot go on: record the failure.
    Failed(Error),
    /// This code cannot resume the run's latest checkpoint (or decode its
    /// input): park the run untouched, for code that matches.
    Park(Error),
    /// The delivered signal's payload was unusable: reject it, keep waiting.
    RejectSignal(String),
    /// Simulated crash: leave everything in the store as it is.
    Crash,
    /// Cancelled, or the lease was lost: nothing to write.
    Stop,
    /// Asked to cancel, and the grace period ended with the execution
    /// still going: cancel the run hard, as `Runtime::cancel` does.
    CancelHard,
    /// A store error (a write that failed: disk full, a dropped
    /// connection): give the run back for a retry.
    Retry(Error),
    /// The worker shuts down: give the run back untouched.
    Shutdown,
    /// A compatibility probe got past every resume check: user code would
    /// run next (see [`RunShared::probe`]).
    Fits,
}

impl Halt {
    pub(crate) fn from_error(err: Error, at_wait_site_with_signal: bool) -> Halt {
        match err {
            err @ (Error::Cancelled { .. } | Error::LeaseLost { .. }) => {
                crate::observe::stopped(&err);
                Halt::Stop
            }
            err @ Error::Store { .. } => Halt::Retry(err),
            // The stored state is intact (checksums passed); this code does
            // not fit it. Another version, a rollback or a fix may.
            err @ (Error::Incompatible { .. } | Error::Decode { .. }) => Halt::Park(err),
            Error::SignalPayload { detail, .. } if at_wait_site_with_signal => {
                Halt::RejectSignal(detail)
            }
            other => Halt::Failed(other),
        }
    }
}

/// State shared by one execution of a run: its frame, its `Ctx` clones and
/// the driver.
pub(crate) struct RunShared {
    pub(crate) id: Arc<str>,
    pub(crate) workflow: &'static str,
    pub(crate) env: Arc<RunEnv>,
    pub(crate) lease: Lease,
    /// When the lease's expiry was last set, by the claim or a renewal: the
    /// instant just before the store was asked (it computes the expiry
    /// later, never earlier). The lease keeper renews a third of the TTL
    /// after it.
    lease_set: Mutex<Instant>,
    /// The lease's TTL, when this execution holds a lease it must renew
    /// (`None` for a compatibility probe, which holds none): past
    /// `lease_set + ttl` by this process's monotonic clock the lease may be
    /// another worker's, and the workflow future is not polled again (see
    /// [`RunShared::lease_lapsed`]).
    lease_ttl: Option<Duration>,
    pub(crate) attempt: AtomicU32,
    /// The latest checkpoint's sequence number.
    pub(crate) seq: AtomicU64,
    /// Idempotency keys handed out since the latest checkpoint.
    pub(crate) calls: AtomicU64,
    halt: Mutex<Option<Halt>>,
    halted: AtomicBool,
    halt_notify: Notify,
    /// A compatibility probe ([`Runtime::check_compatibility`](crate::Runtime::check_compatibility)),
    /// not an execution: the frame loads and checks everything a resume
    /// would, then halts with [`Halt::Fits`] before any user code runs, and
    /// writes nothing.
    pub(crate) probe: bool,
    /// The reason of a cancel requested of the run, as the claim found it,
    /// a lease renewal reported it or this runtime's `request_cancel` set
    /// it (see `Ctx::cancel_requested` and [`RunShared::note_cancel`]).
    pub(crate) cancel: Mutex<Option<String>>,
    /// The cancel request with the earliest grace deadline this execution
    /// learnt of (see [`RunShared::grace_over`]).
    cancel_request: watch::Sender<Option<CancelRequest>>,
    /// What `ctx.emit` and `ctx.set_progress` queued and is not stored yet.
    pub(crate) emitted: Arc<crate::streams::live::Emitted>,
}

impl RunShared {
    pub(crate) fn new(
        id: &str,
        workflow: &'static str,
        env: Arc<RunEnv>,
        lease: Lease,
        attempt: u32,
        seq: u64,
    ) -> Self {
        RunShared {
            id: Arc::from(id),
            workflow,
            env,
            lease,
            lease_set: Mutex::new(Instant::now()),
            lease_ttl: None,
            attempt: AtomicU32::new(attempt.max(1)),
            seq: AtomicU64::new(seq),
            calls: AtomicU64::new(0),
            halt: Mutex::new(None),
            halted: AtomicBool::new(false),
            halt_notify: Notify::new(),
            probe: false,
            cancel: Mutex::new(None),
            cancel_request: watch::channel(None).0,
            emitted: Arc::default(),
        }
    }

    /// Tells this execution that its run was asked to cancel (`req`: found
    /// by the claim, reported by a lease renewal, or made on this runtime).
    /// `ctx.cancel_requested` reads the reason from then on (the first
    /// learnt of: a second request keeps the first reason, as the store
    /// does), and once the earliest grace deadline passes on the runtime's
    /// clock, [`RunShared::grace_over`] resolves: the driver stops polling
    /// the workflow and cancels the run hard. Noting the same request again
    /// (each renewal reports it) changes nothing.
    pub(crate) fn note_cancel(&self, req: &CancelRequest) {
        lock(&self.cancel).get_or_insert_with(|| req.reason.clone());
        self.cancel_request.send_if_modified(|known| {
            let earlier = known.as_ref().is_none_or(|k| req.deadline < k.deadline);
            if earlier {
                *known = Some(req.clone());
            }
            earlier
        });
    }

    /// Resolves once the grace period of a cancel request noted on this
    /// execution ([`RunShared::note_cancel`]) has ended on the runtime's
    /// clock, as `rules::grace_over` decides (a test clock moved past it
    /// ends it too); never while none is noted.
    pub(crate) async fn grace_over(&self) {
        let mut noted = self.cancel_request.subscribe();
        loop {
            let req = noted.borrow_and_update().clone();
            let clock = &self.env.clock;
            match req {
                Some(req) if rules::grace_over(&req, clock.now()) => return,
                // The clock may resolve early: read again either way.
                Some(req) => tokio::select! {
                    _ = clock.wait_until(req.deadline) => {}
                    _ = noted.changed() => {}
                },
                // The sender lives as long as `self`: `changed` only
                // returns when a request is noted.
                None => {
                    let _ = noted.changed().await;
                }
            }
        }
    }

    /// Records why the execution stops (the first reason wins) and wakes the driver.
    pub(crate) fn halt(&self, h: Halt) {
        {
            let mut g = lock(&self.halt);
            if g.is_none() {
                *g = Some(h);
            }
        }
        self.halted.store(true, Ordering::Release);
        self.halt_notify.notify_one();
    }

    /// Bounds this execution by its lease: see [`RunShared::lease_lapsed`].
    pub(crate) fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = Some(ttl);
        self
    }

    /// Whether, at `now`, this execution can no longer prove by its own
    /// clock that it holds its lease: the store set the expiry at least a
    /// TTL after [`lease_set`](RunShared::lease_set), so before
    /// `lease_set + ttl` no other worker can have claimed the run; after it,
    /// one may have. A process frozen past that point (SIGSTOP, a VM
    /// paused, a machine swapping) must not run user code for the run
    /// again: its side effects would duplicate the new owner's (its writes
    /// are fenced anyway). Measured from outside before this check: a
    /// worker SIGSTOPped for 9 s with 3 s leases ran 7 segments of runs
    /// already taken over.
    pub(crate) fn lease_lapsed(&self, now: Instant) -> bool {
        self.lease_ttl
            .is_some_and(|ttl| now >= self.lease_set() + ttl)
    }

    /// When the lease's expiry was last set (see the field).
    pub(crate) fn lease_set(&self) -> Instant {
        *lock(&self.lease_set)
    }

    /// Records that the lease's expiry was set from `at` on (a claim that
    /// began then, or a renewal).
    pub(crate) fn note_lease_set(&self, at: Instant) {
        *lock(&self.lease_set) = at;
    }

    pub(crate) fn is_halted(&self) -> bool {
        self.halted.load(Ordering::Acquire)
    }

    pub(crate) fn take_halt(&self) -> Option<Halt> {
        lock(&self.halt).take()
    }

    /// Resolves once [`RunShared::halt`] was called (again, after a
    /// [`RunShared::take_halt`]).
    pub(crate) async fn halted(&self) {
        self.halt_notify.notified().await
    }
}

impl std::fmt::Debug for RunShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunShared")
            .field("id", &self.id)
            .field("workflow", &self.workflow)
            .field("epoch", &self.lease.epoch)
            .finish()
    }
}
