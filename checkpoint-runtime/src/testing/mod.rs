//! A harness that checks a workflow survives a crash at every checkpoint.
//!
//! [`check_every_checkpoint`] (or the configurable [`Harness`]) runs the
//! workflow once without interruption on a fresh in-memory store and records
//! its output and the number `N` of checkpoints it took. Then, for every `k` in
//! `1..=N`, it runs the workflow again on a fresh store, *crashes* it right
//! after its `k`-th checkpoint is stored (the workflow future is dropped, the
//! runtime discarded, only the store survives), resumes it on a brand-new
//! runtime over that store, and checks that the final output equals the
//! uninterrupted one (compared as JSON), and so does the run's stream
//! (`ctx.emit`): each index once, with the uninterrupted run's item.
//!
//! Side effects: register nothing, just call
//! `ctx.resource::<SideEffects>().record("charge-card:42")` in the workflow
//! (the harness provides the resource). The [`Report`] lists, per crash point,
//! effects that ran more often (or less often) than in the uninterrupted run.
//!
//! Signals are scripted with [`Harness::signal`] and delivered whenever the
//! run waits for a signal of that name (a scripted signal always comes
//! before the wait's deadline). Sleeps and `wait_for_timeout` deadlines are
//! waited out in real time, unless [`Harness::virtual_time`] puts every
//! runtime of the check on a [`TestClock`]: then each timer fires at once,
//! and a workflow with a 30-day timeout runs through every crash point in
//! milliseconds.
//!
//! ```
//! use checkpoint_runtime::prelude::*;
//! use checkpoint_runtime::testing::{self, Harness, SideEffects};
//!
//! #[workflow]
//! async fn onboarding(ctx: &Ctx, user: String) -> Vec<String> {
//!     let mut done = Vec::new();
//!     for step in ["account", "mailbox", "badge"] {
//!         ctx.resource::<SideEffects>().record(format!("{step}:{user}"));
//!         done.push(step.to_owned());
//!         checkpoint!("step_done");
//!     }
//!     let approved: bool = ctx.wait_for("manager_ok").await;
//!     if approved {
//!         done.push("approved".into());
//!     }
//!     done
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Error> {
//! let report = Harness::new(onboarding)
//!     .input("ada".into())
//!     .signal("manager_ok", &true)
//!     .run()
//!     .await?;
//! println!("{report}");
//! assert_eq!(report.checkpoints, 4); // 3 labelled + the implicit one of wait_for
//! assert!(report.duplicated_effects().is_empty());
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

pub(crate) mod crash;
mod streams;

pub use crash::SimulatedCrash;

use crate::builder::RuntimeBuilder;
use crate::clock::TestClock;
use crate::run::{lock, Resources};
use crate::runtime::Runtime;
use crate::status::RunFilter;
use crate::store::{rules, MemoryStore, RunState, Store, JOIN_SIGNAL_PREFIX};
use crate::workflow::{IntoWorkflow, Workflow};
use crate::Error;

impl SimulatedCrash {
    /// Makes the runtime `builder` builds crash here.
    pub fn install(&self, builder: RuntimeBuilder) -> RuntimeBuilder {
        builder.save_hook(Arc::new(self.clone()))
    }
}

/// A log of side effects, shared by the executions of one check. Workflows
/// reach it as a resource: `ctx.resource::<SideEffects>().record("...")`
/// (the harness registers it; outside the harness register it yourself with
/// [`RuntimeBuilder::resource`] or use [`Ctx::try_resource`](crate::Ctx::try_resource)).
///
/// ```
/// use checkpoint_runtime::testing::SideEffects;
///
/// let fx = SideEffects::new();
/// fx.record("email:alice");
/// fx.record("email:alice");
/// assert_eq!(fx.count("email:alice"), 2);
/// assert_eq!(fx.all(), vec!["email:alice".to_owned(), "email:alice".to_owned()]);
/// ```
#[derive(Clone, Default)]
pub struct SideEffects {
    log: Arc<Mutex<Vec<Recorded>>>,
}

/// One recorded effect, with the run whose execution recorded it (`None`
/// outside one).
type Recorded = (Option<Arc<str>>, String);

impl std::fmt::Debug for SideEffects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(lock(&self.log).iter().map(|(_, e)| e))
            .finish()
    }
}

impl SideEffects {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that an effect ran (use a stable description, e.g. `"charge:42"`).
    pub fn record(&self, effect: impl Into<String>) {
        let run = crate::run::CURRENT_RUN.try_with(Arc::clone).ok();
        lock(&self.log).push((run, effect.into()));
    }

    /// Every recorded effect, in order.
    pub fn all(&self) -> Vec<String> {
        lock(&self.log).iter().map(|(_, e)| e.clone()).collect()
    }

    /// How often `effect` was recorded.
    pub fn count(&self, effect: &str) -> usize {
        lock(&self.log).iter().filter(|(_, e)| e == effect).count()
    }

    /// How often each effect was recorded.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (_, e) in lock(&self.log).iter() {
            *out.entry(e.clone()).or_insert(0) += 1;
        }
        out
    }

    /// How often each effect was recorded by runs other than `run` (and not
    /// outside a run).
    fn counts_of_other_runs(&self, run: &str) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (r, e) in lock(&self.log).iter() {
            if r.as_deref().is_some_and(|r| r != run) {
                *out.entry(e.clone()).or_insert(0) += 1;
            }
        }
        out
    }
}

/// Where a crash was simulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashMode {
    /// Right after the checkpoint was stored: nothing runs twice in a correct
    /// workflow (the default).
    AfterCheckpoint,
    /// Right before the checkpoint was stored: the code since the previous
    /// checkpoint runs again on resume (at-least-once), so its effects repeat.
    BeforeCheckpoint,
}

/// An effect whose count differs from the uninterrupted run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectCount {
    /// The effect.
    pub effect: String,
    /// How often it ran without a crash.
    pub expected: usize,
    /// How often it ran with this crash.
    pub got: usize,
}

/// The outcome at one crash point (the run's output matched).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CrashPoint {
    /// The checkpoint number (1-based) the crash was placed at.
    pub k: u64,
    /// Before or after storing it.
    pub mode: CrashMode,
    /// Its label, if any.
    pub label: Option<String>,
    /// Its site key.
    pub site: String,
    /// Effects that ran more often than without a crash.
    pub duplicated: Vec<EffectCount>,
    /// Effects that ran less often than without a crash.
    pub missing: Vec<EffectCount>,
    /// After a checkpoint (`AfterCheckpoint`): effects that ran again in
    /// *other* runs (children, a parent) which were between two of their
    /// own checkpoints when the crash hit. Their segment runs again on
    /// resume, at least once as documented, like any code between
    /// checkpoints; `duplicated` only lists what the run that took the
    /// checkpoint ran twice, which a correct workflow never does.
    pub rerun_in_flight: Vec<EffectCount>,
}

/// What [`Harness::run`] found. `Display` prints one line per crash point.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Report {
    /// The workflow name.
    pub workflow: String,
    /// How many checkpoints the uninterrupted run took.
    pub checkpoints: u64,
    /// The uninterrupted run's output, JSON.
    pub output: serde_json::Value,
    /// The uninterrupted run's side effects, in order.
    pub effects: Vec<String>,
    /// One entry per simulated crash, all with the expected output.
    pub crash_points: Vec<CrashPoint>,
}

impl Report {
    /// All `(crash point, effect)` pairs where an effect ran more often than
    /// without a crash.
    pub fn duplicated_effects(&self) -> Vec<(&CrashPoint, &EffectCount)> {
        self.crash_points
            .iter()
            .flat_map(|p| p.duplicated.iter().map(move |e| (p, e)))
            .collect()
    }
}

fn describe_point(k: u64, mode: CrashMode, n: u64, label: &Option<String>, site: &str) -> String {
    let when = match mode {
        CrashMode::AfterCheckpoint => "after",
        CrashMode::BeforeCheckpoint => "before",
    };
    match label {
        Some(l) => format!("crash {when} checkpoint {k}/{n} (`{l}`)"),
        None => format!("crash {when} checkpoint {k}/{n} (site `{site}`)"),
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "workflow `{}`: {} checkpoint(s), output {}",
            self.workflow, self.checkpoints, self.output
        )?;
        for p in &self.crash_points {
            write!(
                f,
                "  {}: same output",
                describe_point(p.k, p.mode, self.checkpoints, &p.label, &p.site)
            )?;
            for d in &p.duplicated {
                write!(
                    f,
                    "; `{}` ran {}x (expected {})",
                    d.effect, d.got, d.expected
                )?;
            }
            for d in &p.missing {
                write!(
                    f,
                    "; `{}` ran {}x (expected {})",
                    d.effect, d.got, d.expected
                )?;
            }
            for d in &p.rerun_in_flight {
                write!(
                    f,
                    "; `{}` ran {}x (expected {}: another run was between checkpoints, at least once)",
                    d.effect, d.got, d.expected
                )?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Runs a workflow uninterrupted, then crashed at each checkpoint, and
/// compares. See the [module docs](self).
///
/// ```
/// # use checkpoint_runtime::prelude::*;
/// # use checkpoint_runtime::testing::Harness;
/// #[workflow]
/// async fn count(ctx: &Ctx, n: u64) -> u64 {
///     let mut total = 0;
///     for i in 0..n {
///         total += i;
///         checkpoint!("step");
///     }
///     total
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let report = Harness::new(count).input(10).run().await?;
/// assert_eq!(report.checkpoints, 10);
/// assert_eq!(report.output, serde_json::json!(45));
/// # Ok(()) }
/// ```
pub struct Harness<W: Workflow> {
    workflow: W,
    input: Option<Result<Vec<u8>, Error>>,
    resources: Resources,
    signals: Vec<(String, Result<Vec<u8>, Error>)>,
    timeout: Duration,
    modes: Vec<CrashMode>,
    run_id: String,
    /// Registers the other workflows the run needs (its children's).
    also: Vec<Registration>,
    /// Runs every runtime on a test clock (see [`Harness::virtual_time`]).
    virtual_time: bool,
}

/// Registers a workflow on a runtime (see [`Harness::register`]).
type Registration = Arc<dyn Fn(&Runtime) + Send + Sync>;

impl<W: Workflow> std::fmt::Debug for Harness<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("workflow", &W::NAME)
            .field("signals", &self.signals.len())
            .field("timeout", &self.timeout)
            .field("modes", &self.modes)
            .field("virtual_time", &self.virtual_time)
            .finish()
    }
}

/// Delivers scripted signals in order, per name.
#[derive(Clone)]
struct Script(HashMap<String, VecDeque<Vec<u8>>>);

impl Script {
    fn next(&mut self, name: &str) -> Option<Vec<u8>> {
        self.0.get_mut(name).and_then(|q| q.pop_front())
    }
}

enum Ended {
    Finished,
    Crashed,
}

/// Runs the check with default settings: no signals, no extra resources.
///
/// ```
/// # use checkpoint_runtime::prelude::*;
/// #[workflow]
/// async fn count(ctx: &Ctx, n: u64) -> u64 {
///     let mut total = 0;
///     for i in 0..n {
///         total += i;
///         checkpoint!("step");
///     }
///     total
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// checkpoint_runtime::testing::check_every_checkpoint(count, 10).await?;
/// # Ok(()) }
/// ```
pub async fn check_every_checkpoint<I: IntoWorkflow>(
    workflow: I,
    input: <I::Workflow as Workflow>::Input,
) -> Result<Report, Error> {
    Harness::new(workflow).input(input).run().await
}

fn failed(message: String) -> Error {
    Error::CheckFailed { message }
}

impl<W: Workflow> Harness<W> {
    /// A harness for `workflow`; give it an [`input`](Harness::input).
    pub fn new<I: IntoWorkflow<Workflow = W>>(workflow: I) -> Self {
        Harness {
            workflow: workflow.into_workflow(),
            input: None,
            resources: Resources::default(),
            signals: Vec::new(),
            timeout: Duration::from_secs(30),
            modes: vec![CrashMode::AfterCheckpoint],
            run_id: "harness-run".to_owned(),
            also: Vec::new(),
            virtual_time: false,
        }
    }

    /// Registers another workflow on every runtime the harness makes: the
    /// workflow of the children the run spawns (`ctx.spawn`), so that a
    /// runtime that resumes the run after its spawns can execute them.
    /// Their checkpoints count as crash points too.
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    /// use checkpoint_runtime::testing::Harness;
    ///
    /// #[workflow]
    /// async fn double(n: u64) -> u64 {
    ///     checkpoint!("doubling");
    ///     n * 2
    /// }
    ///
    /// #[workflow]
    /// async fn fan_out(ctx: &Ctx, n: u64) -> u64 {
    ///     let mut kids = Vec::new();
    ///     for i in 0..n {
    ///         kids.push(ctx.spawn(double, &i.to_string(), i).await);
    ///     }
    ///     let outs = ctx.join_all(kids).await;
    ///     outs.into_iter().map(|o| o.unwrap_or(0)).sum()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let out = Harness::new(fan_out).register(double).input(3).assert_exact().await;
    /// assert_eq!(out, 6);
    /// # Ok(()) }
    /// ```
    pub fn register<I: IntoWorkflow>(mut self, workflow: I) -> Self {
        let workflow = workflow.into_workflow();
        self.also
            .push(Arc::new(move |rt: &Runtime| rt.register_workflow(workflow)));
        self
    }

    /// The workflow's input.
    pub fn input(mut self, input: W::Input) -> Self {
        self.input = Some(serde_json::to_vec(&input).map_err(|e| Error::Encode {
            workflow: W::NAME.to_owned(),
            run: String::new(),
            site: "<input>".to_owned(),
            field: "input".to_owned(),
            detail: e.to_string().into(),
        }));
        self
    }

    /// A resource shared by every runtime the harness creates (see
    /// [`RuntimeBuilder::resource`]).
    pub fn resource<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.resources.insert(value);
        self
    }

    /// Scripts a signal: delivered when the run waits for `name` (signals of
    /// one name are delivered in the order scripted, one per wait).
    pub fn signal<T: Serialize + ?Sized>(mut self, name: &str, payload: &T) -> Self {
        let json = serde_json::to_vec(payload).map_err(|e| Error::SignalPayload {
            run: String::new(),
            signal: name.to_owned(),
            detail: e.to_string(),
        });
        self.signals.push((name.to_owned(), json));
        self
    }

    /// The longest any single execution of the check may take (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs the check on virtual time: each execution of it (the
    /// uninterrupted run, and each crash point with the runtime that
    /// resumes it) gets a [`TestClock`] of its own, which the harness moves
    /// to a sleep's end or a wait's deadline as soon as the run waits for
    /// it and nothing else is left to do. Durable timers fire at once, in
    /// deadline order; a scripted signal still comes before the deadline of
    /// the wait it answers. The check's [`timeout`](Harness::timeout) stays
    /// real time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use checkpoint_runtime::prelude::*;
    /// use checkpoint_runtime::testing::Harness;
    ///
    /// #[workflow]
    /// async fn approval(ctx: &Ctx, amount: u64) -> String {
    ///     checkpoint!("requested");
    ///     let answer: Option<bool> =
    ///         ctx.wait_for_timeout("approved", Duration::from_secs(30 * 86_400)).await;
    ///     match answer {
    ///         Some(true) => format!("paid {amount}"),
    ///         Some(false) => "refused".to_owned(),
    ///         None => "expired".to_owned(),
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// // Nobody answers: the 30-day timeout fires at every crash point, at once.
    /// let out = Harness::new(approval).input(40).virtual_time().assert_exact().await;
    /// assert_eq!(out, "expired");
    /// // Answered: the signal wins over the deadline.
    /// let out = Harness::new(approval)
    ///     .input(40)
    ///     .signal("approved", &true)
    ///     .virtual_time()
    ///     .assert_exact()
    ///     .await;
    /// assert_eq!(out, "paid 40");
    /// # }
    /// ```
    pub fn virtual_time(mut self) -> Self {
        self.virtual_time = true;
        self
    }

    /// Also crash right *before* each checkpoint is stored, so that the code
    /// since the previous checkpoint runs twice; the report then shows which
    /// side effects are repeated (at-least-once segments).
    pub fn also_crash_before_checkpoints(mut self) -> Self {
        if !self.modes.contains(&CrashMode::BeforeCheckpoint) {
            self.modes.push(CrashMode::BeforeCheckpoint);
        }
        self
    }

    fn runtime(
        &self,
        store: Arc<dyn Store>,
        fx: &SideEffects,
        clock: Option<&TestClock>,
    ) -> RuntimeBuilder {
        let mut resources = self.resources.clone();
        resources.insert(fx.clone());
        let builder = Runtime::builder().store(store).with_resources(resources);
        match clock {
            Some(clock) => builder.clock(clock.clone()),
            None => builder,
        }
    }

    /// The clock of one execution of the check: a manual test clock on
    /// virtual time (the harness moves it, after delivering the scripted
    /// signals), none (the system's) otherwise.
    fn clock(&self) -> Option<TestClock> {
        self.virtual_time.then(TestClock::manual)
    }

    async fn drive(
        &self,
        rt: &Runtime,
        script: &mut Script,
        clock: Option<&TestClock>,
    ) -> Result<Ended, Error> {
        let started = Instant::now();
        let id = self.run_id.as_str();
        loop {
            if started.elapsed() > self.timeout {
                return Err(failed(format!(
                    "run did not finish within {:?} (status: {})",
                    self.timeout,
                    rt.status(id).await?
                )));
            }
            rt.run_until_idle().await?;
            if rt.inner.crashed() {
                return Ok(Ended::Crashed);
            }
            let run = rt.load(id).await?;
            let wait_until = match &run.state {
                // A parked run goes no further with this code: its refusal
                // is the output's error.
                RunState::Completed { .. }
                | RunState::Failed { .. }
                | RunState::Cancelled
                | RunState::Parked { .. } => return Ok(Ended::Finished),
                // Its children end by themselves (this runtime runs them).
                RunState::Waiting { signal, .. } if signal.starts_with(JOIN_SIGNAL_PREFIX) => {
                    SystemTime::now() + Duration::from_millis(5)
                }
                RunState::Waiting { signal, deadline } => {
                    if let Some(payload) = script.next(signal) {
                        rt.store().put_signal(id, signal, payload).await?;
                        continue;
                    }
                    match deadline {
                        Some(d) => *d,
                        None => {
                            return Err(failed(format!(
                                "run waits for signal `{signal}` but no (more) such signal is \
                                 scripted: add `.signal(\"{signal}\", &payload)` to the harness"
                            )))
                        }
                    }
                }
                RunState::Sleeping { until } => *until,
                RunState::Held => SystemTime::now() + Duration::from_millis(5),
                RunState::Ready => match &run.lease {
                    Some(l) => l.expires_at,
                    None => SystemTime::now() + Duration::from_millis(5),
                },
            };
            // On virtual time, the earliest timer of any run of the check
            // (this one's, or a child's it joins) fires now:
            // `run_until_idle` took every run as far as it goes, and the
            // scripted signals were delivered first.
            if let Some(clock) = clock {
                if let Some(t) = self.next_timer(rt, clock.now()).await? {
                    clock.advance_to(t);
                    continue;
                }
            }
            let wait = wait_until
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
                .max(Duration::from_millis(1));
            tokio::time::sleep(wait.min(self.timeout)).await;
        }
    }

    /// The earliest timer later than `after` of the check's runs (the run
    /// and its children), whoever holds them: after a simulated crash, the
    /// crashed runtime's lease is still on the run, and the runtime that
    /// resumes it (a newer instance of its worker) takes it once it is due.
    async fn next_timer(
        &self,
        rt: &Runtime,
        after: SystemTime,
    ) -> Result<Option<SystemTime>, Error> {
        let runs = rt
            .store()
            .list_runs(&RunFilter::new().id_prefix(&self.run_id))
            .await?;
        Ok(runs
            .iter()
            .filter_map(|r| rules::timer(&r.state))
            .filter(|t| *t > after)
            .min())
    }

    /// Starts the run on `rt`.
    async fn start(&self, rt: &Runtime, input: &[u8]) -> Result<(), Error> {
        for register in &self.also {
            register(rt);
        }
        rt.start_encoded(self.workflow, &self.run_id, input.to_vec())
            .await
            .map(drop)
    }

    /// The final output of the run, or why there is none.
    async fn output(&self, rt: &Runtime) -> Result<serde_json::Value, Error> {
        let run = rt.load(&self.run_id).await?;
        match run.state {
            RunState::Completed { output, .. } => serde_json::from_slice(&output)
                .map_err(|e| Error::internal(format!("stored output is not JSON: {e}"))),
            RunState::Failed { error } | RunState::Parked { error } => Err(error),
            RunState::Cancelled => Err(Error::Cancelled {
                run: self.run_id.clone(),
            }),
            other => Err(Error::internal(format!("run ended in state {other:?}"))),
        }
    }

    /// Runs the check and returns the uninterrupted output, panicking (with
    /// the report) unless every crash point resumed to the same output with
    /// every side effect run exactly as often, and the workflow took at least
    /// one checkpoint (a check without one checks nothing): the one line a
    /// test needs.
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    /// use checkpoint_runtime::testing::Harness;
    ///
    /// #[workflow]
    /// async fn double_all(ctx: &Ctx, mut v: Vec<u32>) -> Vec<u32> {
    ///     for x in v.iter_mut() {
    ///         *x *= 2;
    ///         checkpoint!("doubled");
    ///     }
    ///     v
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let out = Harness::new(double_all).input(vec![1, 2, 3]).assert_exact().await;
    /// assert_eq!(out, vec![2, 4, 6]);
    /// # }
    /// ```
    pub async fn assert_exact(self) -> W::Output {
        let report = self.run().await.unwrap_or_else(|e| panic!("{e}"));
        assert!(
            report.checkpoints > 0,
            "workflow `{}` took no checkpoint: {report}",
            W::NAME
        );
        assert!(
            report.duplicated_effects().is_empty(),
            "side effects of workflow `{}` ran more or less often after a crash: {report}",
            W::NAME
        );
        serde_json::from_value(report.output.clone()).unwrap_or_else(|e| {
            panic!(
                "the output of workflow `{}` does not decode from its JSON: {e}",
                W::NAME
            )
        })
    }

    /// Runs the check.
    pub async fn run(self) -> Result<Report, Error> {
        let (input, script) = self.inputs()?;
        let baseline = self.uninterrupted(&input, &script).await?;
        let mut points = Vec::new();
        for &mode in &self.modes {
            for k in 1..=baseline.checkpoints {
                points.push(self.crash_at(k, mode, &baseline, &input, &script).await?);
            }
        }
        Ok(Report {
            workflow: W::NAME.to_owned(),
            checkpoints: baseline.checkpoints,
            output: baseline.output,
            effects: baseline.effects,
            crash_points: points,
        })
    }

    /// The run's input as JSON and the signals to deliver, or why not.
    fn inputs(&self) -> Result<(Vec<u8>, Script), Error> {
        let input = match &self.input {
            Some(Ok(json)) => json.clone(),
            Some(Err(e)) => return Err(e.clone()),
            None => {
                return Err(failed(format!(
                    "no input for workflow `{}`: call `.input(..)` on the harness",
                    W::NAME
                )))
            }
        };
        let mut script = HashMap::<String, VecDeque<Vec<u8>>>::new();
        for (name, payload) in &self.signals {
            let payload = payload.clone()?;
            script.entry(name.clone()).or_default().push_back(payload);
        }
        Ok((input, Script(script)))
    }

    /// Runs the workflow without a crash: what every crash point must match.
    async fn uninterrupted(&self, input: &[u8], script: &Script) -> Result<Baseline, Error> {
        let store = Arc::new(MemoryStore::new());
        let fx = SideEffects::new();
        let clock = self.clock();
        let rt = self.runtime(store.clone(), &fx, clock.as_ref()).in_memory();
        self.start(&rt, input).await?;
        self.drive(&rt, &mut script.clone(), clock.as_ref()).await?;
        let output = self.output(&rt).await?;
        // With its children's (`ctx.spawn`): a crash point is the k-th
        // checkpoint stored by any run of the runtime.
        let children = RunFilter::new().id_prefix(&format!("{}/", self.run_id));
        let checkpoints = rt.load(&self.run_id).await?.latest_seq
            + store
                .list_runs(&children)
                .await?
                .iter()
                .map(|r| r.latest_seq)
                .sum::<u64>();
        let sites = store
            .list_checkpoints(&self.run_id)
            .await?
            .iter()
            .map(|c| {
                let label = c.label.as_ref().map(|l| l.to_string());
                (c.seq, (label, c.site_key.to_string()))
            })
            .collect();
        let stream = streams::stored(&*store, &self.run_id).await?;
        Ok(Baseline {
            stream,
            output,
            counts: fx.counts(),
            effects: fx.all(),
            fx: fx.clone(),
            checkpoints,
            sites,
        })
    }

    /// Crashes a fresh run at checkpoint `k` (`mode`: right after storing
    /// it or right before), resumes it on another runtime over the same
    /// store, and compares the output and the side effects with `baseline`.
    async fn crash_at(
        &self,
        k: u64,
        mode: CrashMode,
        baseline: &Baseline,
        input: &[u8],
        script: &Script,
    ) -> Result<CrashPoint, Error> {
        let n = baseline.checkpoints;
        let (label, site) = baseline.sites.get(&k).cloned().unwrap_or_default();
        let what = describe_point(k, mode, n, &label, &site);
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let fx = SideEffects::new();
        let mut script = script.clone();
        let crash = match mode {
            CrashMode::AfterCheckpoint => SimulatedCrash::after_checkpoint(k),
            CrashMode::BeforeCheckpoint => SimulatedCrash::before_checkpoint(k),
        };
        let clock = self.clock();
        let first = crash
            .install(self.runtime(store.clone(), &fx, clock.as_ref()))
            .in_memory();
        self.start(&first, input).await?;
        let ended = self
            .drive(&first, &mut script, clock.as_ref())
            .await
            .map_err(|e| failed(format!("{what}: before the crash: {e}")))?;
        if let Ended::Finished = ended {
            return Err(failed(format!(
                "{what}: the run finished without reaching checkpoint {k} (it took {n} \
                 uninterrupted; is the workflow deterministic in its checkpoints?)"
            )));
        }
        drop(first);
        let second = self.runtime(store, &fx, clock.as_ref()).in_memory();
        second.register_workflow(self.workflow);
        for register in &self.also {
            register(&second);
        }
        self.drive(&second, &mut script, clock.as_ref())
            .await
            .map_err(|e| failed(format!("{what}: after resuming: {e}")))?;
        let got = self
            .output(&second)
            .await
            .map_err(|e| failed(format!("{what}: the resumed run did not complete: {e}")))?;
        if got != baseline.output {
            return Err(failed(format!(
                "{what}: resumed run returned {got}, expected {} (the output of the \
                 uninterrupted run)",
                baseline.output
            )));
        }
        let stream = streams::stored(&*second.store(), &self.run_id).await?;
        if let Some(d) = streams::differs(&stream, &baseline.stream) {
            return Err(failed(format!("{what}: {d}")));
        }
        let (mut duplicated, missing) = effect_changes(&baseline.counts, &fx.counts());
        // After a checkpoint, an effect that ran again in another run that
        // was mid-segment is at-least-once, not a duplicate of the crashed
        // run's: as many extra runs as other runs account for move over.
        let mut rerun_in_flight = Vec::new();
        if let Some(crashed) = crash.crashed_run() {
            let others = fx.counts_of_other_runs(&crashed);
            let others_before = baseline.other_runs(&crashed);
            duplicated.retain(|d| {
                let extra_elsewhere = others
                    .get(&d.effect)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(others_before.get(&d.effect).copied().unwrap_or(0));
                if extra_elsewhere >= d.got - d.expected {
                    rerun_in_flight.push(d.clone());
                    false
                } else {
                    true
                }
            });
        }
        Ok(CrashPoint {
            k,
            mode,
            label,
            site,
            duplicated,
            missing,
            rerun_in_flight,
        })
    }
}

/// What the uninterrupted run did.
struct Baseline {
    output: serde_json::Value,
    counts: BTreeMap<String, usize>,
    /// Its effect log, for the counts per run.
    fx: SideEffects,
    effects: Vec<String>,
    checkpoints: u64,
    /// Per checkpoint number: the site's label and key.
    sites: HashMap<u64, (Option<String>, String)>,
    /// Its stored stream (`ctx.emit`).
    stream: Vec<(u64, Vec<u8>)>,
}

impl Baseline {
    /// [`SideEffects::counts_of_other_runs`] of the uninterrupted run.
    fn other_runs(&self, run: &str) -> BTreeMap<String, usize> {
        self.fx.counts_of_other_runs(run)
    }
}

/// The effects that ran more often (first) and less often (second) than in
/// the uninterrupted run.
fn effect_changes(
    baseline: &BTreeMap<String, usize>,
    counts: &BTreeMap<String, usize>,
) -> (Vec<EffectCount>, Vec<EffectCount>) {
    let mut duplicated = Vec::new();
    let mut missing = Vec::new();
    for (effect, &got) in counts {
        let expected = baseline.get(effect).copied().unwrap_or(0);
        if got > expected {
            duplicated.push(EffectCount {
                effect: effect.clone(),
                expected,
                got,
            });
        }
    }
    for (effect, &expected) in baseline {
        let got = counts.get(effect).copied().unwrap_or(0);
        if got < expected {
            missing.push(EffectCount {
                effect: effect.clone(),
                expected,
                got,
            });
        }
    }
    (duplicated, missing)
}

/// A pre-deploy check for CI: panics, listing them, when the code registered
/// on `rt` could not resume some unfinished runs of its store (see
/// [`Runtime::check_compatibility`]). Run it with the new code against a
/// copy of the production store, or against the store itself from a
/// client-only runtime: the check writes nothing.
///
/// ```no_run
/// # use checkpoint_runtime::prelude::*;
/// # #[workflow]
/// # async fn vendor_approval(ctx: &Ctx) {}
/// #[tokio::test]
/// async fn the_new_code_resumes_every_run_in_production() {
///     let url = std::env::var("PRODUCTION_STORE").unwrap();
///     let rt = Runtime::builder().client_only().open(&url).await.unwrap();
///     rt.register(vendor_approval); // every workflow the new build runs
///     checkpoint_runtime::testing::assert_compatible(&rt).await;
/// }
/// ```
pub async fn assert_compatible(rt: &Runtime) {
    let refused = match rt.check_compatibility().await {
        Ok(refused) => refused,
        Err(e) => panic!("the compatibility check could not read the store: {e}"),
    };
    if !refused.is_empty() {
        let lines: Vec<String> = refused.iter().map(|r| format!("  - {r}")).collect();
        panic!(
            "the registered code would park {} unfinished run(s):\n{}",
            refused.len(),
            lines.join("\n")
        );
    }
}
