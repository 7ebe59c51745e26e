//! The executor: claims runnable runs from the store, runs each workflow future
//! in a tokio task, renews leases, and turns the way an execution ends (output,
//! suspension, failure, panic, crash, cancellation) into store updates.
//!
//! A workflow future never returns on suspension or failure: the frame records
//! a [`Halt`] on the run's [`RunShared`], wakes the driver and pends forever;
//! the driver notices, drops the future and acts on the halt.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::watch;
use tracing::Instrument;

use crate::conclude::{Conclusion, Troubles};
use crate::history::Event;
use crate::launch::{Finished, Launch};
use crate::lease_keeper::{ActiveRuns, LeaseKeeper};
use crate::observe;
use crate::registry::Registry;
use crate::run::{lock, Halt, Resources, RunEnv, RunShared};
use crate::store::{rules, ClaimRequest, Claimed, Outcome, Release, Store, Wakeup};
use crate::testing::crash::SaveHook;
use crate::workflow::Workflow;
use crate::Error;

/// The runtime's shared state.
pub(crate) struct Inner {
    /// What executions may use (the store, the worker id, resources).
    pub(crate) env: Arc<RunEnv>,
    pub(crate) instance: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) concurrency: usize,
    pub(crate) max_attempts: u32,
    pub(crate) registry: Arc<Registry>,
    active: Arc<ActiveRuns>,
    /// Executions ended so far, counted before they leave
    /// [`Inner::active`] (see [`Inner::run_until_idle`]).
    ended: AtomicU64,
    /// Renews the leases of [`Inner::active`].
    keeper: LeaseKeeper,
    local: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    noted: Mutex<HashSet<String>>,
    pump_lock: tokio::sync::Mutex<()>,
    /// The worker id this instance leases runs under, decided at its first
    /// claim (see [`Inner::lease_worker`]).
    lease_worker: tokio::sync::OnceCell<Arc<str>>,
    /// The store's hold of [`Inner::worker`], when this instance has it.
    hold: Mutex<Option<crate::store::WorkerHold>>,
    /// Starts, signals and inspects runs, never executes them.
    pub(crate) client_only: bool,
    /// Whether the background worker loop was started.
    background: AtomicBool,
    /// The latest error the worker loop could not get past (`run_worker`
    /// returns it); the loop itself goes on.
    fatal: watch::Sender<Option<Error>>,
    /// Set once the worker loop ended (shutdown).
    worker_ended: watch::Sender<bool>,
    /// Store failures of executions not resolved yet.
    troubles: Troubles,
    /// Parked runs this runtime's code tried (or parked itself), by id,
    /// with the checkpoint it was tried at (see [`Inner::revisit_parked`]).
    parked_tried: Mutex<HashMap<String, u64>>,
    /// When parked runs were last looked for; held for a whole sweep, so
    /// that `run_until_idle` does not find the runtime idle while the worker
    /// loop is between taking a parked run up and starting it.
    parked_swept: tokio::sync::Mutex<Option<std::time::Instant>>,
    /// Set when a registration changed the code this runtime runs.
    code_changed: AtomicBool,
    /// The schedules this runtime fires (see `scheduler.rs`).
    pub(crate) schedules: crate::schedule_registry::Registered,
    /// The queues declared on the builder, passed with every claim.
    queues: Arc<std::collections::BTreeMap<String, crate::Queue>>,
}

/// The owner of a runtime: every [`Runtime`](crate::Runtime) clone and
/// [`WorkflowHandle`](crate::WorkflowHandle) holds it, and when the last one
/// is dropped the runtime shuts down (its executions stop and hand their
/// runs back), so a background worker loop never outlives its runtime.
pub(crate) struct Engine(Arc<Inner>);

impl Engine {
    pub(crate) fn new(inner: Inner) -> Self {
        Engine(Arc::new(inner))
    }
}

impl std::ops::Deref for Engine {
    type Target = Arc<Inner>;

    fn deref(&self) -> &Arc<Inner> {
        &self.0
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.0.shutdown();
    }
}

/// How often the executor re-checks the store even without notifications.
const POLL: Duration = Duration::from_millis(500);

/// How often a worker looks for parked runs its code has not tried.
const PARKED_SWEEP: Duration = Duration::from_secs(2);

/// Consecutive failures other than [`Error::Store`] (which is retried for
/// as long as it lasts) after which `run_worker` reports the error (the
/// worker loop goes on).
const MAX_STORE_FAILURES: u32 = 10;

fn new_instance_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // Zero-padded so that ids sort by start time (the claim rule relies on it).
    format!(
        "{nanos:020}-{:010}-{:06}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub(crate) struct InnerConfig {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) worker: String,
    pub(crate) ttl: Duration,
    pub(crate) keep: Option<usize>,
    pub(crate) concurrency: usize,
    pub(crate) max_attempts: u32,
    pub(crate) resources: Resources,
    pub(crate) save_hook: Option<Arc<dyn SaveHook>>,
    pub(crate) client_only: bool,
    pub(crate) trace: Option<Arc<dyn crate::observe::TracePropagation>>,
    pub(crate) clock: Arc<dyn crate::clock::Clock>,
    pub(crate) queues: std::collections::BTreeMap<String, crate::Queue>,
}

impl Inner {
    pub(crate) fn new(cfg: InnerConfig) -> Self {
        let worker: Arc<str> = Arc::from(cfg.worker);
        let registry = Arc::new(Registry::default());
        Inner {
            env: Arc::new(RunEnv {
                store: cfg.store,
                worker,
                keep: cfg.keep,
                resources: cfg.resources,
                schemas: Default::default(),
                save_hook: cfg.save_hook,
                trace: cfg.trace,
                registry: registry.clone(),
                clock: cfg.clock,
                signal_catalog: Default::default(),
                streams: Default::default(),
            }),
            instance: Arc::from(new_instance_id()),
            // Bounded so that lease arithmetic on times never overflows.
            ttl: cfg.ttl.clamp(
                Duration::from_millis(30),
                Duration::from_secs(365 * 24 * 3600),
            ),
            concurrency: cfg.concurrency.max(1),
            max_attempts: cfg.max_attempts.max(1),
            registry,
            active: Arc::new(ActiveRuns::default()),
            ended: AtomicU64::new(0),
            keeper: LeaseKeeper::new(),
            local: watch::channel(0).0,
            shutdown: watch::channel(false).0,
            noted: Mutex::new(HashSet::new()),
            pump_lock: tokio::sync::Mutex::new(()),
            lease_worker: tokio::sync::OnceCell::new(),
            hold: Mutex::new(None),
            client_only: cfg.client_only,
            background: AtomicBool::new(false),
            fatal: watch::channel(None).0,
            worker_ended: watch::channel(false).0,
            troubles: Troubles::default(),
            parked_tried: Mutex::new(HashMap::new()),
            parked_swept: tokio::sync::Mutex::new(None),
            code_changed: AtomicBool::new(false),
            schedules: Default::default(),
            queues: Arc::new(cfg.queues),
        }
    }

    pub(crate) fn register<W: Workflow>(&self, wf: W) {
        if self.registry.register(wf) {
            self.env.signal_catalog.register(W::NAME, W::SITES);
            // Other code for this name: parked runs may fit it.
            self.code_changed.store(true, Ordering::Release);
            self.bump_local();
        }
    }

    /// Whether this runtime's code tried parked run `id` at checkpoint
    /// `seq` already (so it stays parked as far as this code goes).
    pub(crate) fn tried_parked(&self, id: &str, seq: u64) -> bool {
        lock(&self.parked_tried).get(id) == Some(&seq)
    }

    pub(crate) fn is_registered(&self, name: &str) -> bool {
        self.registry.contains(name)
    }

    fn workflow_names(&self) -> Vec<&'static str> {
        self.registry.names()
    }

    /// Whether a simulated crash fired (tests): the runtime then stops.
    pub(crate) fn crashed(&self) -> bool {
        self.env.crashed()
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    pub(crate) fn stopped(&self) -> bool {
        self.crashed() || self.is_shut_down()
    }

    /// Changes to `true` at shutdown.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub(crate) fn shutdown(&self) {
        self.shutdown.send_replace(true);
        self.active.halt_all(|| Halt::Shutdown);
    }

    pub(crate) fn active_count(&self) -> usize {
        self.active.len()
    }

    pub(crate) fn active_run(&self, id: &str) -> Option<Arc<RunShared>> {
        self.active.get(id)
    }

    fn bump_local(&self) {
        self.local.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(crate) fn subscribe_local(&self) -> watch::Receiver<u64> {
        self.local.subscribe()
    }

    /// The worker id this instance leases runs under. A worker id names a
    /// role; two live processes never execute the same run at once,
    /// whatever ids they were given: the instance that holds the worker id
    /// in the store ([`Store::hold_worker`]) leases under the id itself
    /// (and, as a newer instance, takes the runs of a dead earlier one at
    /// once); a second live instance with the same id leases under
    /// `<id>~<instance>`, its own, and waits for leases like any other
    /// worker.
    async fn lease_worker(&self) -> Result<Arc<str>, Error> {
        self.lease_worker
            .get_or_try_init(|| async {
                match self.env.store.hold_worker(&self.env.worker).await? {
                    Some(hold) => {
                        *lock(&self.hold) = Some(hold);
                        Ok::<_, Error>(self.env.worker.clone())
                    }
                    None => Ok(Arc::from(format!("{}~{}", self.env.worker, self.instance))),
                }
            })
            .await
            .cloned()
    }

    /// Claims runnable runs (all, or only `only`) up to the concurrency limit
    /// and starts executing them. Returns how many were started.
    /// With `revisit_parked`, `only` is taken also when it is parked.
    pub(crate) async fn pump(
        self: &Arc<Self>,
        only: Option<&str>,
        revisit_parked: bool,
    ) -> Result<usize, Error> {
        if self.stopped() || self.client_only {
            return Ok(0);
        }
        self.env.signal_catalog.flush(&*self.env.store).await;
        let _guard = self.pump_lock.lock().await;
        if let Some(id) = only {
            if self.active_run(id).is_some() {
                return Ok(0);
            }
        }
        let capacity = self.concurrency.saturating_sub(self.active_count());
        if capacity == 0 {
            return Ok(0);
        }
        let req = ClaimRequest {
            worker: self.lease_worker().await?,
            instance: self.instance.clone(),
            workflows: self.workflow_names(),
            ttl: self.ttl,
            limit: capacity,
            only: only.map(str::to_owned),
            revisit_parked,
            clock_now: self.env.clock.now(),
            queues: self.queues.clone(),
        };
        // The store computes the leases' expiry after this, never before.
        let asked = std::time::Instant::now();
        let res = self.env.store.claim(&req).await?;
        for (id, workflow) in res.unregistered {
            let first = lock(&self.noted).insert(id.clone());
            if first {
                let on = format!(
                    "workflow `{workflow}` is not registered on worker `{}`",
                    self.env.worker
                );
                // History is informational; a failure to record it changes nothing.
                let _ = self
                    .env
                    .store
                    .append_event(&id, Event::Suspended { on })
                    .await;
            }
        }
        let n = res.claimed.len();
        for claimed in res.claimed {
            if rules::cancel_due(&claimed.run, req.clock_now) {
                // Asked to cancel, and its grace period is over: cancelled
                // hard instead of executed (a store that fails now leaves
                // the lease to expire; the next claim cancels it).
                let _ = self.env.store.cancel(&claimed.run.id).await;
                continue;
            }
            let workflow = self
                .registry
                .name(&claimed.run.workflow)
                .unwrap_or("<unregistered>");
            let shared = Arc::new(
                RunShared::new(
                    &claimed.run.id,
                    workflow,
                    self.env.clone(),
                    claimed.lease.clone(),
                    claimed.run.attempt,
                    claimed.run.latest_seq,
                )
                .with_lease_ttl(self.ttl),
            );
            shared.note_lease_set(asked);
            let replaced = self.active.insert(shared.clone());
            if let Some(old) = replaced {
                // Our own earlier execution whose lease lapsed: it is fenced off now.
                old.halt(Halt::Stop);
            }
            if let Some(cancel) = &claimed.run.cancel {
                shared.note_cancel(cancel);
            }
            let id = shared.id.clone();
            tokio::spawn(crate::run::CURRENT_RUN.scope(id, drive(self.clone(), shared, claimed)));
        }
        if n > 0 {
            self.keeper.claimed(
                &self.active,
                self.env.store.clone(),
                self.ttl,
                self.shutdown.subscribe(),
            );
        }
        Ok(n)
    }

    /// Tries each parked run of a workflow registered here once with this
    /// runtime's code: a run parked by other code (another version, before
    /// a rollback or a fix) resumes here if this code fits it, and is parked
    /// again, untouched, if not. A run is tried again only once its latest
    /// checkpoint changed or this runtime's code did (a registration), so
    /// workers whose code does not fit never pass a run back and forth.
    /// Looked for at most every [`PARKED_SWEEP`], and at once after a
    /// registration.
    async fn revisit_parked(self: &Arc<Self>) -> Result<(), Error> {
        let mut swept = self.parked_swept.lock().await;
        let changed = self.code_changed.swap(false, Ordering::AcqRel);
        if changed {
            lock(&self.parked_tried).clear();
        } else if swept.is_some_and(|t| t.elapsed() < PARKED_SWEEP) {
            return Ok(());
        }
        *swept = Some(std::time::Instant::now());
        for run in self.env.store.parked_runs().await? {
            if !self.is_registered(&run.workflow) || self.stopped() {
                continue;
            }
            let tried = lock(&self.parked_tried).insert(run.id.clone(), run.latest_seq);
            if tried != Some(run.latest_seq) {
                self.pump(Some(&run.id), true).await?;
            }
        }
        Ok(())
    }

    /// Waits until something may have changed: a store notification, an
    /// execution ending on this runtime, or `max_wait`.
    async fn wait_change(
        &self,
        store_rx: &mut watch::Receiver<u64>,
        local_rx: &mut watch::Receiver<u64>,
        max_wait: Duration,
    ) {
        tokio::select! {
            r = store_rx.changed() => { if r.is_err() { tokio::time::sleep(max_wait).await } }
            r = local_rx.changed() => { if r.is_err() { tokio::time::sleep(max_wait).await } }
            _ = tokio::time::sleep(max_wait) => {}
        }
    }

    pub(crate) async fn run_until_idle(self: &Arc<Self>) -> Result<(), Error> {
        if self.client_only {
            return Err(Error::ClientOnly {
                operation: "run_until_idle".to_owned(),
            });
        }
        let mut store_rx = self.env.store.subscribe();
        let mut local_rx = self.subscribe_local();
        // Failures before this call were reported to whoever waited then.
        self.troubles.recount();
        loop {
            store_rx.borrow_and_update();
            local_rx.borrow_and_update();
            if self.stopped() {
                // A crashed or shut-down runtime still lets its executions wind down.
                if self.active_count() == 0 {
                    return Ok(());
                }
            } else {
                self.troubles.retry(&*self.env.store).await;
                if let Some(stuck) = self.troubles.stuck() {
                    return Err(stuck);
                }
                self.revisit_parked().await?;
                // Idle only if no execution was in flight at any moment of
                // the claim: none before it, and none started or ended
                // since. An execution that ends during the claim may hand
                // its run back for a retry (a panic) after the claim looked:
                // returning then left a runnable run behind (seen as a
                // flaky test under load).
                let (busy, ended) = (self.active_count(), self.ended.load(Ordering::Acquire));
                let started = self.pump(None, false).await?;
                // A conclusion the store has not taken (a full disk met by
                // an execution before this call) leaves its run leased to
                // this runtime and going nowhere: not idle, but retried
                // until written or reported as stuck (it returned `Ok`
                // with the run left `Running`).
                if started == 0
                    && busy == 0
                    && self.active_count() == 0
                    && self.ended.load(Ordering::Acquire) == ended
                    && !self.troubles.has_pending()
                {
                    // Idle. On a clock that skips (a test clock), time
                    // jumps to the earliest timer ahead, and that run goes
                    // on: timers fire at once, in deadline order.
                    if self.skip_to_next_timer().await? {
                        continue;
                    }
                    return Ok(());
                }
            }
            self.wait_change(&mut store_rx, &mut local_rx, POLL).await;
        }
    }

    /// On a clock that [skips](crate::Clock::skips), with nothing to run:
    /// moves the clock to the earliest timer ahead of it, if any, and says
    /// whether it did.
    async fn skip_to_next_timer(&self) -> Result<bool, Error> {
        let clock = &self.env.clock;
        if !clock.skips() {
            return Ok(false);
        }
        let next = self.env.store.next_wakeup(clock.now()).await?;
        Ok(next.timer.is_some_and(|t| clock.skip_to(t)))
    }

    /// Whether this runtime's clock skips to the earliest timer when it
    /// waits with nothing to run (a test clock), so that a handle waiting
    /// for a run's result drives the runtime (see `WorkflowHandle::result`).
    pub(crate) fn clock_skips(&self) -> bool {
        self.env.clock.skips() && !self.client_only
    }

    /// Starts the worker loop in the background, once: on a runtime that
    /// executes, inside a tokio runtime (a call outside one starts nothing;
    /// the next call inside one does).
    pub(crate) fn ensure_background(self: &Arc<Self>) {
        if self.client_only || self.stopped() || self.background.load(Ordering::Acquire) {
            return;
        }
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.background.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio.spawn(self.clone().worker_loop());
    }

    /// Waits until the worker loop ends (shutdown: `Ok`) or reports an
    /// error it cannot get past (`Err`; the loop goes on).
    pub(crate) async fn run_worker(self: &Arc<Self>) -> Result<(), Error> {
        if self.client_only {
            return Err(Error::ClientOnly {
                operation: "run_worker".to_owned(),
            });
        }
        let mut fatal_rx = self.fatal.subscribe();
        fatal_rx.borrow_and_update();
        let mut ended_rx = self.worker_ended.subscribe();
        self.ensure_background();
        loop {
            if *ended_rx.borrow_and_update()
                || (self.stopped() && !self.background.load(Ordering::Acquire))
            {
                return Ok(());
            }
            tokio::select! {
                r = fatal_rx.changed() => {
                    if r.is_err() {
                        return Ok(());
                    }
                    if let Some(e) = fatal_rx.borrow_and_update().clone() {
                        return Err(e);
                    }
                }
                r = ended_rx.changed() => {
                    if r.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Shuts down and waits until the worker loop ended and no execution
    /// of this runtime is left.
    pub(crate) async fn close(self: &Arc<Self>) {
        self.shutdown();
        let mut ended_rx = self.worker_ended.subscribe();
        let mut local_rx = self.subscribe_local();
        while self.background.load(Ordering::Acquire) && !*ended_rx.borrow_and_update() {
            let _ = tokio::time::timeout(POLL, ended_rx.changed()).await;
        }
        self.wind_down(&mut local_rx).await;
    }

    /// Reports an error the worker loop cannot get past to `run_worker`.
    fn report(&self, e: Error) {
        self.fatal.send_replace(Some(e));
    }

    /// Tells about a run that store errors keep from progressing (a full
    /// disk, a read-only file): on stderr, once per distinct error, and
    /// again when it is resolved. A store error is not `run_worker`'s end
    /// (it returns only on shutdown or an error retrying cannot cure: the
    /// store may come back), so only another kind is reported to it.
    fn note_stuck(&self, said: &mut Option<String>) {
        match self.troubles.stuck() {
            Some(e @ Error::Store { .. }) => {
                let text = e.to_string();
                if said.as_deref() != Some(text.as_str()) {
                    eprintln!("checkpoint-runtime: worker `{}`: {text}", self.env.worker);
                    *said = Some(text);
                }
            }
            Some(other) => self.report(other),
            None => {
                if said.take().is_some() {
                    eprintln!(
                        "checkpoint-runtime: worker `{}`: the store takes this runtime's writes again",
                        self.env.worker
                    );
                }
            }
        }
    }

    /// The worker loop: claims runnable runs, executes them, hands back
    /// what the store did not take, until shutdown.
    async fn worker_loop(self: Arc<Self>) {
        let mut store_rx = self.env.store.subscribe();
        let mut local_rx = self.subscribe_local();
        let mut shutdown_rx = self.shutdown.subscribe();
        let mut failures = 0u32;
        let mut stuck_said = None;
        loop {
            store_rx.borrow_and_update();
            local_rx.borrow_and_update();
            if self.stopped() {
                break;
            }
            self.troubles.retry(&*self.env.store).await;
            self.note_stuck(&mut stuck_said);
            // A store error is retried with a growing pause.
            let step = async {
                self.revisit_parked().await?;
                self.pump(None, false).await?;
                // Something changed meanwhile: the loop goes round again at
                // once, and the next timer is not needed. (Under load, a
                // change comes with nearly every pump; on PostgreSQL the
                // query reads every unfinished run, 0.3 ms of server time
                // each, about 5 % of the statements' time in the bench's
                // throughput case.)
                let changed = |rx: &watch::Receiver<u64>| rx.has_changed().unwrap_or(false);
                if changed(&store_rx) || changed(&local_rx) {
                    return Ok(Wakeup::default());
                }
                self.env.store.next_wakeup(self.env.clock.now()).await
            };
            // Failures are reported on stderr (the 1st, 2nd, 4th, 8th ... in
            // a row), and so is the first success after them:
            // `checkpoint-runtime: worker `ID`: the store failed (N times in
            // a row), trying again: ERROR` / `... the store works again`.
            let next = match step.await {
                Ok(next) => {
                    if failures > 0 {
                        eprintln!(
                            "checkpoint-runtime: worker `{}`: the store works again (after \
                             {failures} failures in a row)",
                            self.env.worker
                        );
                    }
                    failures = 0;
                    next
                }
                Err(e) => {
                    failures += 1;
                    if failures.is_power_of_two() {
                        eprintln!(
                            "checkpoint-runtime: worker `{}`: the store failed ({failures} \
                             times in a row), trying again: {e}",
                            self.env.worker
                        );
                    }
                    // A store that cannot be reached (a server restart, a
                    // dropped connection: `Error::Store`) is waited for: the
                    // store reconnects and the worker takes up its runs again.
                    // Another error that keeps coming is reported to
                    // `run_worker`, and retried still.
                    let transient = matches!(e, Error::Store { .. });
                    if !transient && failures >= MAX_STORE_FAILURES {
                        self.report(e);
                        failures = 0;
                    }
                    Wakeup {
                        lease: Some(
                            SystemTime::now() + Duration::from_millis(50 << failures.min(6)),
                        ),
                        timer: None,
                    }
                }
            };
            // A lease expiry already past belongs to a run this worker
            // could not take (not registered here, or no free slot: a slot
            // freeing up notifies). Leases are on the system's time; the
            // next timer is on the runtime's clock, waited for on it (a
            // test clock's time comes when the test moves it).
            let now = SystemTime::now();
            let wait = match next.lease {
                Some(t) if t > now => t
                    .duration_since(now)
                    .unwrap_or(Duration::ZERO)
                    .min(POLL * 4),
                _ => POLL * 4,
            };
            let timer = async {
                match next.timer {
                    Some(t) => self.env.clock.wait_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.wait_change(&mut store_rx, &mut local_rx, wait) => {}
                _ = timer => {}
                _ = shutdown_rx.changed() => {}
            }
        }
        self.wind_down(&mut local_rx).await;
        self.background.store(false, Ordering::Release);
        self.worker_ended.send_replace(true);
    }

    /// Waits for the (halted) executions to hand their runs back.
    async fn wind_down(&self, local_rx: &mut watch::Receiver<u64>) {
        while self.active_count() > 0 {
            local_rx.borrow_and_update();
            if self.active_count() == 0 {
                break;
            }
            let _ = tokio::time::timeout(POLL, local_rx.changed()).await;
        }
    }
}

enum End {
    Finished(Finished),
    Halted(Halt),
    Panicked(String),
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Polls the workflow future until it ends or the run is halted (its lease
/// is renewed meanwhile by the [`LeaseKeeper`]), or the grace period of a
/// cancel request noted on it ends ([`RunShared::grace_over`], on the
/// runtime's clock): the future is then dropped unpolled and the run
/// cancelled hard ([`Halt::CancelHard`]), whichever way the request came
/// (the claim, a lease renewal, this runtime's `request_cancel`).
///
/// Before each poll the lease's local deadline is checked
/// ([`RunShared::lease_lapsed`]): a renewal failing is one way to get
/// there, but a process frozen past its lease (SIGSTOP) wakes with its
/// workflow task and its keeper's timer due together, and the task may be
/// polled first. Once the deadline has passed, the future is dropped
/// unpolled; the run is claimed again (by this worker or another) from its
/// latest checkpoint.
async fn run_to_end(run: &RunShared, fut: BoxFuture<'static, Result<Finished, Error>>) -> End {
    let mut fut = AssertUnwindSafe(fut).catch_unwind();
    let mut fut = std::future::poll_fn(|cx| {
        if run.lease_lapsed(std::time::Instant::now()) {
            return Poll::Ready(None);
        }
        Pin::new(&mut fut).poll(cx).map(Some)
    });
    let grace_over = run.grace_over();
    let mut grace_over = std::pin::pin!(grace_over);
    loop {
        tokio::select! {
            biased;
            _ = run.halted() => {
                if let Some(h) = run.take_halt() {
                    return End::Halted(h);
                }
            }
            () = &mut grace_over => return End::Halted(Halt::CancelHard),
            r = &mut fut => {
                return match r {
                    None => {
                        observe::lease_lapsed(run.lease.epoch);
                        End::Halted(Halt::Stop)
                    }
                    Some(Ok(Ok(fin))) => End::Finished(fin),
                    Some(Ok(Err(e))) => End::Halted(Halt::Failed(e)),
                    Some(Err(p)) => End::Panicked(panic_message(&*p)),
                };
            }
        }
    }
}

/// Executes a claimed run, in its `checkpoint.run` span (see
/// [`crate::observe`]), joined to the trace the run was started in.
async fn drive(rt: Arc<Inner>, run: Arc<RunShared>, claimed: Claimed) {
    let span = observe::run_span(
        run.workflow,
        &run.id,
        claimed.run.attempt,
        &rt.env.worker,
        claimed.checkpoint.as_ref().map_or(0, |cp| cp.seq),
    );
    if let Some(propagation) = &rt.env.trace {
        if let Some(context) = started_trace(&*rt.env.store, &run.id).await {
            propagation.attach(&span, &context);
        }
    }
    drive_in_span(rt, run, claimed).instrument(span).await
}

/// The trace context run `id` was started in (its `Started` event's).
async fn started_trace(store: &dyn crate::store::Store, id: &str) -> Option<String> {
    let history = store.history(id).await.ok()?;
    match history.into_iter().next()?.event {
        Event::Started { trace, .. } => trace,
        _ => None,
    }
}

async fn drive_in_span(rt: Arc<Inner>, run: Arc<RunShared>, claimed: Claimed) {
    let picked = rt
        .registry
        .pick(&rt.env, &claimed.run, claimed.checkpoint.clone(), false)
        .await;
    let end = match picked {
        None => End::Halted(Halt::Shutdown),
        Some(Err(refusal)) => {
            observe::record_version(&tracing::Span::current(), claimed.run.version);
            End::Halted(Halt::Park(refusal))
        }
        Some(Ok(launcher)) => {
            observe::record_version(&tracing::Span::current(), launcher.version());
            if claimed.checkpoint.is_none() && claimed.run.attempt > 1 {
                let _ = rt
                    .env
                    .store
                    .append_event(
                        &run.id,
                        Event::Resumed {
                            worker: rt.env.worker.to_string(),
                            from_seq: 0,
                            version: claimed.run.version,
                        },
                    )
                    .await;
            }
            rt.env.streams.register(&run.id, &run.emitted);
            match crate::streams::flush::begin(&run, &claimed).await {
                Err(e) => End::Halted(Halt::from_error(e, false)),
                Ok(()) => match launcher.launch(run.clone(), &claimed) {
                    Launch::Refuse(h) => End::Halted(h),
                    Launch::Run(fut) => stored_stream(&run, run_to_end(&run, fut).await).await,
                },
            }
        }
    };
    // A simulated crash recorded while the future was finishing still wins.
    let end = match run.take_halt() {
        Some(Halt::Crash) => End::Halted(Halt::Crash),
        _ => end,
    };
    if let End::Halted(Halt::Park(_)) = end {
        // Parked by this very code: not worth a try of its own.
        let seq = run.seq.load(Ordering::Acquire);
        lock(&rt.parked_tried).insert(run.id.to_string(), seq);
    }
    conclude(&rt, &run, end).await;
    rt.env.streams.unregister(&run.id, &run.emitted);
    rt.ended.fetch_add(1, Ordering::AcqRel);
    rt.active.remove(&run);
    rt.bump_local();
}

/// A finished execution's end once what it emitted (and its progress) is
/// stored: before the run ends, so that a reader that sees it ended has
/// every item.
async fn stored_stream(run: &RunShared, end: End) -> End {
    match end {
        End::Finished(fin) => match crate::streams::flush::flush(run, true).await {
            Ok(()) => End::Finished(fin),
            Err(e) => End::Halted(Halt::from_error(e, false)),
        },
        other => other,
    }
}

/// What an execution's end is, for the events and metrics.
fn outcome_of(end: &End) -> (observe::Outcome, Option<String>) {
    use observe::Outcome as O;
    match end {
        End::Finished(fin) => match &fin.error {
            Some(e) => (O::Failed, Some(e.clone())),
            None => (O::Completed, None),
        },
        End::Panicked(message) => (O::Panicked, Some(message.clone())),
        End::Halted(h) => match h {
            Halt::Suspended | Halt::RejectSignal(_) => (O::Suspended, None),
            Halt::Failed(e) => (O::Failed, Some(e.to_string())),
            Halt::Park(e) => (O::Parked, Some(e.to_string())),
            Halt::Retry(e) => (O::Retried, Some(e.to_string())),
            Halt::Shutdown => (O::Shutdown, None),
            Halt::Crash | Halt::Stop | Halt::Fits => (O::Stopped, None),
            Halt::CancelHard => (
                O::Stopped,
                Some("cancelled: its cancel request's grace period ended".to_owned()),
            ),
        },
    }
}

async fn conclude(rt: &Inner, run: &RunShared, end: End) {
    let (outcome, detail) = outcome_of(&end);
    observe::ended(run.workflow, outcome, detail.as_deref());
    let store_error = match &end {
        End::Halted(Halt::Retry(e)) => Some(e),
        _ => None,
    };
    let pause = rt.troubles.note_end(run, store_error);
    if !pause.is_zero() {
        // Not at once: a store that keeps failing is not hammered. (Below a
        // third of the lease, which would lapse otherwise.)
        tokio::time::sleep(pause.min(rt.ttl / 3)).await;
    }
    let conclusion = match end {
        End::Finished(fin) => Some(Conclusion::of_output(fin)),
        End::Panicked(message) => {
            let attempt = run.attempt.load(Ordering::Acquire);
            Some(if attempt >= rt.max_attempts {
                Conclusion::Finish(Outcome::Failed {
                    error: Error::Panicked {
                        workflow: run.workflow.to_owned(),
                        run: run.id.to_string(),
                        message: format!("{message} (attempt {attempt} of {})", rt.max_attempts),
                    },
                })
            } else {
                Conclusion::Release(Release::Retry {
                    reason: format!("panicked: {message}"),
                })
            })
        }
        End::Halted(h) => Conclusion::of_halt(h),
    };
    let Some(conclusion) = conclusion else { return };
    if let Err(e) = conclusion.write(&*rt.env.store, &run.id, &run.lease).await {
        // Kept and written again by the worker loop: the run is handed back
        // the moment the store takes writes again, not when its lease lapses.
        rt.troubles.keep(run, conclusion, e);
    }
}
