//! The executor: claims runnable runs from the store, runs each workflow future
//! in a tokio task, renews leases, and turns the way an execution ends (output,
//! suspension, failure, panic, crash, cancellation) into store updates.
//!
//! A workflow future never returns on suspension or failure: the frame records
//! a [`Halt`] on the run's [`RunShared`], wakes the driver and pends forever;
//! the driver notices, drops the future and acts on the halt.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::FutureExt;
use serde::Serialize;
use tokio::sync::{watch, Notify};

use crate::frame::{Frame, SiteKind};
use crate::history::Event;
use crate::store::{ClaimRequest, Claimed, Lease, Outcome, Release, Store, Suspend, WakeValue};
use crate::workflow::Workflow;
use crate::Error;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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

/// Why an execution stopped before its workflow returned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Halt {
    /// Suspended durably (waiting, sleeping): release the lease.
    Suspended,
    /// The run cannot go on: record the failure.
    Failed(Error),
    /// The delivered signal's payload was unusable: reject it, keep waiting.
    RejectSignal(String),
    /// Simulated crash: leave everything in the store as it is.
    Crash,
    /// Cancelled, or the lease was lost: nothing to write.
    Stop,
    /// Transient failure (store error): give the run back for a retry.
    Retry(String),
    /// The worker shuts down: give the run back untouched.
    Shutdown,
}

impl Halt {
    pub(crate) fn from_error(err: Error, at_wait_site_with_signal: bool) -> Halt {
        match err {
            Error::Cancelled { .. } | Error::LeaseLost { .. } => Halt::Stop,
            Error::Store { message, .. } => Halt::Retry(format!("store error: {message}")),
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
    pub(crate) rt: Arc<Inner>,
    pub(crate) lease: Lease,
    pub(crate) attempt: AtomicU32,
    /// The latest checkpoint's sequence number.
    pub(crate) seq: AtomicU64,
    /// Idempotency keys handed out since the latest checkpoint.
    pub(crate) calls: AtomicU64,
    halt: Mutex<Option<Halt>>,
    halted: AtomicBool,
    halt_notify: Notify,
}

impl RunShared {
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

    pub(crate) fn is_halted(&self) -> bool {
        self.halted.load(Ordering::Acquire)
    }

    fn take_halt(&self) -> Option<Halt> {
        lock(&self.halt).take()
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

/// What a launcher makes of a claimed run.
pub(crate) enum Launch {
    Run(BoxFuture<'static, Result<Finished, Error>>),
    Refuse(Halt),
}

/// A finished execution's output, encoded.
pub(crate) struct Finished {
    output: Arc<[u8]>,
    error: Option<String>,
}

/// Type-erased constructor of workflow executions, registered by name.
pub(crate) trait Launcher: Send + Sync {
    fn launch(&self, run: Arc<RunShared>, claimed: &Claimed) -> Launch;
}

pub(crate) struct WorkflowLauncher<W: Workflow>(pub(crate) W, PhantomData<fn() -> W>);

impl<W: Workflow> WorkflowLauncher<W> {
    pub(crate) fn new(wf: W) -> Self {
        WorkflowLauncher(wf, PhantomData)
    }
}

fn incompatible(run: &RunShared, site: &str, field: &str, detail: String) -> Halt {
    Halt::Failed(Error::Incompatible {
        workflow: run.workflow.to_owned(),
        run: run.id.to_string(),
        site: site.to_owned(),
        field: field.to_owned(),
        detail: detail.into(),
    })
}

impl<W: Workflow> Launcher for WorkflowLauncher<W> {
    fn launch(&self, run: Arc<RunShared>, claimed: &Claimed) -> Launch {
        let wf = self.0;
        let Some(cp) = claimed.checkpoint.clone() else {
            // Fresh start (or a restart before the first checkpoint).
            let input: W::Input = match serde_json::from_slice(&claimed.run.input) {
                Ok(i) => i,
                Err(e) => {
                    return Launch::Refuse(Halt::Failed(Error::Decode {
                        workflow: W::NAME.to_owned(),
                        run: run.id.to_string(),
                        site: "<input>".to_owned(),
                        field: "input".to_owned(),
                        detail: e.to_string().into(),
                    }))
                }
            };
            let frame = Frame::new(run.clone(), W::SITES, None, None, None);
            let fut = wf.run(frame, Some(input));
            return Launch::Run(finish_future::<W>(run, fut));
        };
        // Resume: match the stored site against the code before any user code runs.
        let Some(index) = W::SITES.iter().position(|s| s.key == cp.site_key) else {
            let known: Vec<&str> = W::SITES.iter().map(|s| s.key).collect();
            return Launch::Refuse(incompatible(
                &run,
                &cp.site_key,
                "-",
                format!(
                    "no checkpoint site with this key exists in the code any more (sites now: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        };
        let site = &W::SITES[index];
        let positions = crate::iteration::loop_positions(&cp.loops).len();
        if positions != site.loops as usize {
            return Launch::Refuse(incompatible(
                &run,
                site.key,
                "-",
                format!(
                    "the checkpoint holds {positions} loop position(s), the site is now inside {} `for` loop(s)",
                    site.loops
                ),
            ));
        }
        let stored: Vec<&str> = cp.fields.iter().map(|f| &*f.name).collect();
        if stored.as_slice() != site.fields {
            let field = stored
                .iter()
                .zip(site.fields)
                .find(|(a, b)| **a != **b)
                .map(|(a, _)| (*a).to_owned())
                .or_else(|| site.fields.get(stored.len()).map(|f| (*f).to_owned()))
                .or_else(|| stored.get(site.fields.len()).map(|f| (*f).to_owned()))
                .unwrap_or_else(|| "-".to_owned());
            return Launch::Refuse(incompatible(
                &run,
                site.key,
                &field,
                format!(
                    "the checkpoint saved fields [{}], the code now saves [{}]",
                    stored.join(", "),
                    site.fields.join(", ")
                ),
            ));
        }
        let kind_ok = matches!(
            (site.kind, &cp.suspend),
            (SiteKind::Checkpoint, None)
                | (SiteKind::WaitFor, Some(Suspend::Waiting { .. }))
                | (SiteKind::WaitForTimeout, Some(Suspend::Waiting { .. }))
                | (SiteKind::Sleep, Some(Suspend::Sleeping { .. }))
        );
        if !kind_ok {
            return Launch::Refuse(incompatible(
                &run,
                site.key,
                "-",
                format!(
                    "the site is now a {:?} site but the checkpoint was taken at a different kind of site",
                    site.kind
                ),
            ));
        }
        let wake = match site.kind {
            SiteKind::WaitFor | SiteKind::WaitForTimeout => {
                let wake = claimed
                    .run
                    .wake
                    .as_ref()
                    .filter(|w| w.seq == cp.seq)
                    .map(|w| w.value.clone());
                match (site.kind, wake) {
                    (SiteKind::WaitFor, Some(WakeValue::TimedOut)) | (_, None) => {
                        // Nothing to resume with: go back to waiting.
                        return Launch::Refuse(Halt::RejectSignal(
                            "no signal was delivered to this wait site".to_owned(),
                        ));
                    }
                    (_, wake) => wake,
                }
            }
            _ => None,
        };
        let frame = Frame::new(run.clone(), W::SITES, Some(index as u32), Some(cp), wake);
        let fut = wf.run(frame, None);
        Launch::Run(finish_future::<W>(run, fut))
    }
}

fn finish_future<W: Workflow>(
    run: Arc<RunShared>,
    fut: BoxFuture<'static, W::Output>,
) -> BoxFuture<'static, Result<Finished, Error>> {
    Box::pin(async move {
        let out = fut.await;
        encode_output(&out, W::NAME, &run.id)
    })
}

fn is_result_type<T>() -> bool {
    let name = std::any::type_name::<T>();
    name.starts_with("core::result::Result<") || name.starts_with("std::result::Result<")
}

/// Encodes an output as JSON; for a `Result::Err` output also renders the error.
fn encode_output<O: Serialize>(out: &O, workflow: &str, run: &str) -> Result<Finished, Error> {
    let enc_err = |e: serde_json::Error| Error::Encode {
        workflow: workflow.to_owned(),
        run: run.to_owned(),
        site: "<output>".to_owned(),
        field: "output".to_owned(),
        detail: e.to_string().into(),
    };
    let value = serde_json::to_value(out).map_err(enc_err)?;
    let error = if is_result_type::<O>() {
        match &value {
            serde_json::Value::Object(m) if m.len() == 1 => m.get("Err").map(|e| match e {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            }),
            _ => None,
        }
    } else {
        None
    };
    let bytes = serde_json::to_vec(&value).map_err(enc_err)?;
    Ok(Finished {
        output: bytes.into(),
        error,
    })
}

/// The runtime's shared state.
pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) worker: Arc<str>,
    pub(crate) instance: Arc<str>,
    pub(crate) ttl: Duration,
    pub(crate) keep: Option<usize>,
    pub(crate) concurrency: usize,
    pub(crate) max_attempts: u32,
    pub(crate) resources: Resources,
    pub(crate) registry: RwLock<HashMap<&'static str, Arc<dyn Launcher>>>,
    pub(crate) active: Mutex<HashMap<Arc<str>, Arc<RunShared>>>,
    local: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    crash: Option<CrashPlan>,
    saves: AtomicU64,
    crashed: AtomicBool,
    noted: Mutex<HashSet<String>>,
    pump_lock: tokio::sync::Mutex<()>,
    /// The worker id this instance leases runs under, decided at its first
    /// claim (see [`Inner::lease_worker`]).
    lease_worker: tokio::sync::OnceCell<Arc<str>>,
    /// The store's hold of [`Inner::worker`], when this instance has it.
    hold: Mutex<Option<crate::store::WorkerHold>>,
    /// Keys of the schemas this runtime stored (or found stored).
    pub(crate) schemas_stored: Mutex<HashSet<&'static str>>,
}

/// How often the executor re-checks the store even without notifications.
const POLL: Duration = Duration::from_millis(500);

/// Consecutive failures other than [`Error::Store`] (which is retried for
/// as long as it lasts) after which `run_worker` gives up.
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
    pub(crate) crash: Option<CrashPlan>,
}

/// Test hook: where the runtime simulates a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CrashPlan {
    /// The checkpoint (counted over all runs of this runtime, from 1).
    pub(crate) at: u64,
    /// Crash right before storing it instead of right after.
    pub(crate) before: bool,
}

impl Inner {
    pub(crate) fn new(cfg: InnerConfig) -> Self {
        Inner {
            store: cfg.store,
            worker: Arc::from(cfg.worker),
            instance: Arc::from(new_instance_id()),
            // Bounded so that lease arithmetic on times never overflows.
            ttl: cfg.ttl.clamp(
                Duration::from_millis(30),
                Duration::from_secs(365 * 24 * 3600),
            ),
            keep: cfg.keep,
            concurrency: cfg.concurrency.max(1),
            max_attempts: cfg.max_attempts.max(1),
            resources: cfg.resources,
            registry: RwLock::new(HashMap::new()),
            active: Mutex::new(HashMap::new()),
            local: watch::channel(0).0,
            shutdown: watch::channel(false).0,
            crash: cfg.crash,
            saves: AtomicU64::new(0),
            crashed: AtomicBool::new(false),
            noted: Mutex::new(HashSet::new()),
            pump_lock: tokio::sync::Mutex::new(()),
            lease_worker: tokio::sync::OnceCell::new(),
            hold: Mutex::new(None),
            schemas_stored: Mutex::new(HashSet::new()),
        }
    }

    pub(crate) fn register<W: Workflow>(&self, wf: W) {
        let mut reg = self.registry.write().unwrap_or_else(|e| e.into_inner());
        reg.insert(W::NAME, Arc::new(WorkflowLauncher::new(wf)));
    }

    pub(crate) fn is_registered(&self, name: &str) -> bool {
        let reg = self.registry.read().unwrap_or_else(|e| e.into_inner());
        reg.contains_key(name)
    }

    fn launcher(&self, name: &str) -> Option<Arc<dyn Launcher>> {
        let reg = self.registry.read().unwrap_or_else(|e| e.into_inner());
        reg.get(name).cloned()
    }

    fn workflow_names(&self) -> Vec<&'static str> {
        let reg = self.registry.read().unwrap_or_else(|e| e.into_inner());
        reg.keys().copied().collect()
    }

    pub(crate) fn crashed(&self) -> bool {
        self.crashed.load(Ordering::Acquire)
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    fn stopped(&self) -> bool {
        self.crashed() || self.is_shut_down()
    }

    pub(crate) fn shutdown(&self) {
        self.shutdown.send_replace(true);
        for run in lock(&self.active).values() {
            run.halt(Halt::Shutdown);
        }
    }

    /// Numbers a checkpoint about to be stored (from 1).
    pub(crate) fn next_save(&self) -> u64 {
        self.saves.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether the runtime must crash now, before (`before`) or after storing
    /// checkpoint number `n` (test hook). Once crashed, it stays crashed.
    pub(crate) fn crash_point(&self, n: u64, before: bool) -> bool {
        if self.crash == Some(CrashPlan { at: n, before }) {
            self.crashed.store(true, Ordering::Release);
        }
        self.crashed()
    }

    pub(crate) fn active_count(&self) -> usize {
        lock(&self.active).len()
    }

    pub(crate) fn active_run(&self, id: &str) -> Option<Arc<RunShared>> {
        lock(&self.active).get(id).cloned()
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
                match self.store.hold_worker(&self.worker).await? {
                    Some(hold) => {
                        *lock(&self.hold) = Some(hold);
                        Ok::<_, Error>(self.worker.clone())
                    }
                    None => Ok(Arc::from(format!("{}~{}", self.worker, self.instance))),
                }
            })
            .await
            .cloned()
    }

    /// Claims runnable runs (all, or only `only`) up to the concurrency limit
    /// and starts executing them. Returns how many were started.
    pub(crate) async fn pump(self: &Arc<Self>, only: Option<&str>) -> Result<usize, Error> {
        if self.stopped() {
            return Ok(0);
        }
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
        };
        let res = self.store.claim(&req).await?;
        for (id, workflow) in res.unregistered {
            let first = lock(&self.noted).insert(id.clone());
            if first {
                let on = format!(
                    "workflow `{workflow}` is not registered on worker `{}`",
                    self.worker
                );
                // History is informational; a failure to record it changes nothing.
                let _ = self.store.append_event(&id, Event::Suspended { on }).await;
            }
        }
        let n = res.claimed.len();
        for claimed in res.claimed {
            let shared = Arc::new(RunShared {
                id: Arc::from(claimed.run.id.as_str()),
                workflow: self
                    .registry
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_key_value(claimed.run.workflow.as_str())
                    .map(|(k, _)| *k)
                    .unwrap_or("<unregistered>"),
                rt: self.clone(),
                lease: claimed.lease.clone(),
                attempt: AtomicU32::new(claimed.run.attempt.max(1)),
                seq: AtomicU64::new(claimed.run.latest_seq),
                calls: AtomicU64::new(0),
                halt: Mutex::new(None),
                halted: AtomicBool::new(false),
                halt_notify: Notify::new(),
            });
            let replaced = lock(&self.active).insert(shared.id.clone(), shared.clone());
            if let Some(old) = replaced {
                // Our own earlier execution whose lease lapsed: it is fenced off now.
                old.halt(Halt::Stop);
            }
            tokio::spawn(drive(self.clone(), shared, claimed));
        }
        Ok(n)
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
        let mut store_rx = self.store.subscribe();
        let mut local_rx = self.subscribe_local();
        loop {
            store_rx.borrow_and_update();
            local_rx.borrow_and_update();
            if self.stopped() {
                // A crashed or shut-down runtime still lets its executions wind down.
                if self.active_count() == 0 {
                    return Ok(());
                }
            } else {
                let started = self.pump(None).await?;
                if started == 0 && self.active_count() == 0 {
                    return Ok(());
                }
            }
            self.wait_change(&mut store_rx, &mut local_rx, POLL).await;
        }
    }

    pub(crate) async fn run_worker(self: &Arc<Self>) -> Result<(), Error> {
        let mut store_rx = self.store.subscribe();
        let mut local_rx = self.subscribe_local();
        let mut shutdown_rx = self.shutdown.subscribe();
        let mut failures = 0u32;
        loop {
            store_rx.borrow_and_update();
            local_rx.borrow_and_update();
            if self.stopped() {
                break;
            }
            // A store error is retried with a growing pause; only a store that
            // keeps failing ends the worker (with that error).
            let step = async {
                self.pump(None).await?;
                self.store.next_wakeup().await
            };
            let next = match step.await {
                Ok(next) => {
                    failures = 0;
                    next
                }
                Err(e) => {
                    failures += 1;
                    // A store that cannot be reached (a server restart, a
                    // dropped connection: `Error::Store`) is waited for: the
                    // store reconnects and the worker takes up its runs again.
                    // Only an error that retrying cannot cure ends the worker.
                    let transient = matches!(e, Error::Store { .. });
                    if !transient && failures >= MAX_STORE_FAILURES {
                        return Err(e);
                    }
                    Some(SystemTime::now() + Duration::from_millis(50 << failures.min(6)))
                }
            };
            // A time already past belongs to a run this worker could not take
            // (not registered here, or no free slot: a slot freeing up notifies).
            let now = SystemTime::now();
            let wait = match next {
                Some(t) if t > now => t
                    .duration_since(now)
                    .unwrap_or(Duration::ZERO)
                    .min(POLL * 4),
                _ => POLL * 4,
            };
            tokio::select! {
                _ = self.wait_change(&mut store_rx, &mut local_rx, wait) => {}
                _ = shutdown_rx.changed() => {}
            }
        }
        self.wind_down(&mut local_rx).await;
        Ok(())
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

async fn run_to_end(
    rt: &Inner,
    run: &RunShared,
    fut: BoxFuture<'static, Result<Finished, Error>>,
) -> End {
    let mut fut = AssertUnwindSafe(fut).catch_unwind();
    let period = (rt.ttl / 3).max(Duration::from_millis(10));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The renewal in flight. It is polled next to the workflow future, never
    // instead of it: the workflow may be inside a store transaction (a
    // checkpoint locking the run's row, holding a pooled connection), and a
    // renewal awaited while that transaction cannot move waits for its lock
    // or its connection for good (the PostgreSQL stall of issue 11).
    let mut renewal: Option<BoxFuture<'_, Result<(), Error>>> = None;
    loop {
        tokio::select! {
            biased;
            _ = run.halt_notify.notified() => {
                if let Some(h) = run.take_halt() {
                    return End::Halted(h);
                }
            }
            r = &mut fut => {
                return match r {
                    Ok(Ok(fin)) => End::Finished(fin),
                    Ok(Err(e)) => End::Halted(Halt::Failed(e)),
                    Err(p) => End::Panicked(panic_message(&*p)),
                };
            }
            r = async { renewal.as_mut().expect("guarded by the branch condition").await },
                if renewal.is_some() =>
            {
                renewal = None;
                match r {
                    Ok(()) => {}
                    Err(Error::Cancelled { .. }) | Err(Error::LeaseLost { .. }) => {
                        return End::Halted(Halt::Stop);
                    }
                    // Transient: try again at the next tick; the lease outlives a few misses.
                    Err(_) => {}
                }
            }
            _ = tick.tick(), if renewal.is_none() => {
                renewal = Some(rt.store.renew(&run.id, &run.lease, rt.ttl));
            }
        }
    }
}

async fn drive(rt: Arc<Inner>, run: Arc<RunShared>, claimed: Claimed) {
    let end = match rt.launcher(&claimed.run.workflow) {
        None => End::Halted(Halt::Shutdown),
        Some(launcher) => {
            if claimed.checkpoint.is_none() && claimed.run.attempt > 1 {
                let _ = rt
                    .store
                    .append_event(
                        &run.id,
                        Event::Resumed {
                            worker: rt.worker.to_string(),
                            from_seq: 0,
                        },
                    )
                    .await;
            }
            match launcher.launch(run.clone(), &claimed) {
                Launch::Refuse(h) => End::Halted(h),
                Launch::Run(fut) => run_to_end(&rt, &run, fut).await,
            }
        }
    };
    // A simulated crash recorded while the future was finishing still wins.
    let end = match run.take_halt() {
        Some(Halt::Crash) => End::Halted(Halt::Crash),
        _ => end,
    };
    conclude(&rt, &run, end).await;
    {
        // Only our own entry: if the run was claimed again meanwhile (our lease
        // lapsed), the newer execution's entry stays.
        let mut active = lock(&rt.active);
        if active.get(&run.id).is_some_and(|a| Arc::ptr_eq(a, &run)) {
            active.remove(&run.id);
        }
    }
    rt.bump_local();
}

async fn conclude(rt: &Inner, run: &RunShared, end: End) {
    let store = &rt.store;
    let id: &str = &run.id;
    let lease = &run.lease;
    // Failures below are deliberately not propagated: when the store refuses
    // (lease lost, cancelled) there is nothing left to do, and when it is down
    // the lease expires and the run is resumed from its latest checkpoint.
    match end {
        End::Finished(fin) => {
            let _ = store
                .finish(
                    id,
                    lease,
                    Outcome::Completed {
                        output: fin.output,
                        error: fin.error,
                    },
                )
                .await;
        }
        End::Panicked(message) => {
            let attempt = run.attempt.load(Ordering::Acquire);
            if attempt >= rt.max_attempts {
                let error = Error::Panicked {
                    workflow: run.workflow.to_owned(),
                    run: id.to_owned(),
                    message: format!("{message} (attempt {attempt} of {})", rt.max_attempts),
                };
                let _ = store.finish(id, lease, Outcome::Failed { error }).await;
            } else {
                let reason = format!("panicked: {message}");
                let _ = store.release(id, lease, Release::Retry { reason }).await;
            }
        }
        End::Halted(h) => match h {
            Halt::Suspended => {
                let _ = store.release(id, lease, Release::Suspend).await;
            }
            Halt::Failed(error) => {
                let _ = store.finish(id, lease, Outcome::Failed { error }).await;
            }
            Halt::RejectSignal(reason) => {
                if store.reject_signal(id, lease, reason).await.is_ok() {
                    let _ = store.release(id, lease, Release::Suspend).await;
                }
            }
            Halt::Crash | Halt::Stop => {}
            Halt::Retry(reason) => {
                let _ = store.release(id, lease, Release::Retry { reason }).await;
            }
            Halt::Shutdown => {
                let _ = store.release(id, lease, Release::Abandon).await;
            }
        },
    }
}
