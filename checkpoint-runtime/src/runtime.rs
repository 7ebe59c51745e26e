//! [`Runtime`] and [`RuntimeBuilder`]: the entry points.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::error::validate_id;
use crate::executor::{CrashPlan, Halt, Inner, InnerConfig, Resources};
use crate::handle::WorkflowHandle;
use crate::history::{CheckpointInfo, Event, HistoryEntry};
use crate::schema::FieldJson;
use crate::status::{RunFilter, RunInfo, Status};
use crate::store::{Created, GcReport, MemoryStore, NewRun, RunRecord, Store};
use crate::workflow::{IntoWorkflow, Workflow};
use crate::Error;

/// The worker id used when none is set: a restarted process with the default
/// id resumes its own unfinished runs at once.
pub const DEFAULT_WORKER_ID: &str = "local";

/// Runs workflows: starts them, executes and resumes them, delivers signals,
/// and answers questions about runs.
///
/// A `Runtime` is a cheap handle (an `Arc`): clone it into tasks freely. All
/// methods take `&self`. Executions happen in tokio tasks spawned by
/// [`run_until_idle`](Runtime::run_until_idle), [`run_worker`](Runtime::run_worker)
/// or [`WorkflowHandle::result`], so those must be called inside a tokio runtime.
///
/// ```
/// use checkpoint_runtime::{Runtime, RunFilter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), checkpoint_runtime::Error> {
/// let rt = Runtime::in_memory();
/// rt.run_until_idle().await?; // nothing to do yet
/// assert!(rt.runs(RunFilter::new()).await?.is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("worker_id", &&*self.inner.worker)
            .field("store", &self.inner.store.kind())
            .field("lease_ttl", &self.inner.ttl)
            .field("active", &self.inner.active_count())
            .finish()
    }
}

/// Configures a [`Runtime`].
///
/// ```
/// use std::time::Duration;
/// use checkpoint_runtime::Runtime;
///
/// struct HttpClient;
///
/// let rt = Runtime::builder()
///     .worker_id("worker-b")
///     .lease_ttl(Duration::from_secs(30))
///     .resource(HttpClient)
///     .keep_checkpoints(100)
///     .in_memory();
/// # let _ = rt;
/// ```
pub struct RuntimeBuilder {
    worker: String,
    ttl: Duration,
    keep: Option<usize>,
    concurrency: usize,
    max_attempts: u32,
    resources: Resources,
    store: Option<Arc<dyn Store>>,
    crash: Option<CrashPlan>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("worker_id", &self.worker)
            .field("lease_ttl", &self.ttl)
            .field("keep_checkpoints", &self.keep)
            .field("concurrency", &self.concurrency)
            .field("max_attempts", &self.max_attempts)
            .field("resources", &self.resources.len())
            .finish()
    }
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder {
            worker: DEFAULT_WORKER_ID.to_owned(),
            ttl: Duration::from_secs(30),
            keep: None,
            concurrency: 64,
            max_attempts: 3,
            resources: Resources::default(),
            store: None,
            crash: None,
        }
    }
}

impl RuntimeBuilder {
    /// This worker's id (default [`DEFAULT_WORKER_ID`]): a role, not a
    /// process. Runs leased by a previous, dead process with the same id are
    /// taken over at once. A second live process with the same id never
    /// takes runs from the first: it leases under an id of its own
    /// (`<id>~<instance>`, shown as the lease holder) and waits for leases
    /// like any other worker (the SQLite store keeps a lock file per worker
    /// id next to the database, PostgreSQL a session advisory lock).
    ///
    /// ```
    /// let rt = checkpoint_runtime::Runtime::builder().worker_id("worker-b").in_memory();
    /// # let _ = rt;
    /// ```
    pub fn worker_id(mut self, id: &str) -> Self {
        self.worker = id.to_owned();
        self
    }

    /// How long a claimed run stays leased without renewal (default 30 s;
    /// leases are renewed every third of it while a run executes). Another
    /// worker takes a run over once its lease expires. Clamped to between
    /// 30 ms and one year.
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = checkpoint_runtime::Runtime::builder().lease_ttl(Duration::from_secs(5)).in_memory();
    /// # let _ = rt;
    /// ```
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Registers a shared, non-serialized dependency, available to workflows as
    /// [`Ctx::resource::<T>()`](crate::Ctx::resource). One value per type; a
    /// later one replaces an earlier one.
    ///
    /// ```
    /// struct Db { url: String }
    /// let rt = checkpoint_runtime::Runtime::builder()
    ///     .resource(Db { url: "postgres://...".into() })
    ///     .in_memory();
    /// # let _ = rt;
    /// ```
    pub fn resource<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.resources.insert(value);
        self
    }

    /// Keeps at most `n` checkpoint versions per run (the latest is always
    /// kept). By default every version is kept.
    ///
    /// ```
    /// let rt = checkpoint_runtime::Runtime::builder().keep_checkpoints(10).in_memory();
    /// # let _ = rt;
    /// ```
    pub fn keep_checkpoints(mut self, n: usize) -> Self {
        self.keep = Some(n.max(1));
        self
    }

    /// At most `n` runs execute at once on this runtime (default 64).
    ///
    /// ```
    /// let rt = checkpoint_runtime::Runtime::builder().concurrency(8).in_memory();
    /// # let _ = rt;
    /// ```
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// How many times workflow code may panic, counting from its latest
    /// checkpoint, before the run is failed with [`Error::Panicked`]
    /// (default 3). Each panic is followed by a retry from the latest checkpoint.
    ///
    /// ```
    /// let rt = checkpoint_runtime::Runtime::builder().max_attempts(1).in_memory();
    /// # let _ = rt;
    /// ```
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// Uses this store (for a custom backend, or to share one store between
    /// runtimes). [`in_memory`](RuntimeBuilder::in_memory) then builds over it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use checkpoint_runtime::{store::MemoryStore, Runtime};
    /// let store = Arc::new(MemoryStore::new());
    /// let rt = Runtime::builder().store(store).in_memory();
    /// # let _ = rt;
    /// ```
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Test hook: the runtime "crashes" right after its `k`-th stored
    /// checkpoint (the execution is dropped, its lease is left behind and the
    /// runtime stops executing). Used by [`crate::testing`].
    #[doc(hidden)]
    pub fn crash_after_checkpoints(mut self, k: u64) -> Self {
        self.crash = Some(CrashPlan {
            at: k,
            before: false,
        });
        self
    }

    /// Test hook: the runtime "crashes" right before storing its `k`-th
    /// checkpoint (the code since the previous one then runs again on resume).
    #[doc(hidden)]
    pub fn crash_before_checkpoint(mut self, k: u64) -> Self {
        self.crash = Some(CrashPlan {
            at: k,
            before: true,
        });
        self
    }

    #[doc(hidden)]
    pub fn resources_from(mut self, other: &Runtime) -> Self {
        self.resources = other.inner.resources.clone();
        self
    }

    pub(crate) fn with_resources(mut self, resources: Resources) -> Self {
        self.resources = resources;
        self
    }

    fn build(self, store: Arc<dyn Store>) -> Runtime {
        Runtime {
            inner: Arc::new(Inner::new(InnerConfig {
                store,
                worker: self.worker,
                ttl: self.ttl,
                keep: self.keep,
                concurrency: self.concurrency,
                max_attempts: self.max_attempts,
                resources: self.resources,
                crash: self.crash,
            })),
        }
    }

    /// Builds a runtime over a fresh in-memory store (or the store given with
    /// [`store`](RuntimeBuilder::store)).
    ///
    /// ```
    /// let rt = checkpoint_runtime::Runtime::builder().in_memory();
    /// # let _ = rt;
    /// ```
    pub fn in_memory(mut self) -> Runtime {
        let store = self
            .store
            .take()
            .unwrap_or_else(|| Arc::new(MemoryStore::new()));
        self.build(store)
    }

    /// Builds a runtime over the store named by `url`.
    ///
    /// - `":memory:"`, `"memory:"` or `"memory://"`: a fresh in-memory store;
    /// - `postgres://...` or `postgresql://...`: a PostgreSQL database shared
    ///   by many workers on many machines (see
    ///   [`PostgresStore`](crate::store::postgres::PostgresStore) for the
    ///   URL's options, such as `?schema=NAME`); the tables are created or
    ///   upgraded on open. A server that cannot be reached is an
    ///   [`Error::Store`] naming the URL (its password hidden);
    /// - anything else is an SQLite file path, optionally written
    ///   `sqlite://path` (created if missing; several processes may share it).
    ///
    /// A store set with [`store`](RuntimeBuilder::store) takes precedence over
    /// the URL.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// let rt = checkpoint_runtime::Runtime::builder()
    ///     .worker_id("worker-a")
    ///     .open(":memory:")
    ///     .await?;
    /// # let _ = rt; Ok(()) }
    /// ```
    pub async fn open(mut self, url: &str) -> Result<Runtime, Error> {
        if let Some(store) = self.store.take() {
            return Ok(self.build(store));
        }
        let store = crate::store::open(url).await?;
        Ok(self.build(store))
    }
}

impl Runtime {
    /// A runtime over a fresh in-memory store, with default settings. Not
    /// async; for tests and examples.
    ///
    /// ```
    /// let rt = checkpoint_runtime::Runtime::in_memory();
    /// # let _ = rt;
    /// ```
    pub fn in_memory() -> Runtime {
        RuntimeBuilder::default().in_memory()
    }

    /// A builder for a configured runtime.
    ///
    /// ```
    /// let rt = checkpoint_runtime::Runtime::builder().worker_id("a").in_memory();
    /// # let _ = rt;
    /// ```
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// A runtime with default settings over the store named by `url` (see
    /// [`RuntimeBuilder::open`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// let path = std::env::temp_dir().join(format!("checkpoint-doc-{}.db", std::process::id()));
    /// let rt = checkpoint_runtime::Runtime::open(&path.to_string_lossy()).await?; // SQLite file
    /// let mem = checkpoint_runtime::Runtime::open(":memory:").await?;
    /// # drop((rt, mem));
    /// # for ext in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{ext}", path.to_string_lossy()));
    /// # }
    /// # Ok(()) }
    /// ```
    ///
    /// A PostgreSQL database, shared by workers on several machines:
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// let rt = checkpoint_runtime::Runtime::open("postgres://app@db.internal/workflows").await?;
    /// # let _ = rt; Ok(()) }
    /// ```
    pub async fn open(url: &str) -> Result<Runtime, Error> {
        RuntimeBuilder::default().open(url).await
    }

    /// This runtime's worker id.
    ///
    /// ```
    /// let rt = checkpoint_runtime::Runtime::in_memory();
    /// assert_eq!(rt.worker_id(), checkpoint_runtime::DEFAULT_WORKER_ID);
    /// ```
    pub fn worker_id(&self) -> &str {
        &self.inner.worker
    }

    /// The store this runtime uses (to share it with another runtime).
    ///
    /// ```
    /// use checkpoint_runtime::Runtime;
    /// let a = Runtime::in_memory();
    /// let b = Runtime::builder().worker_id("b").store(a.store()).in_memory();
    /// # let _ = b;
    /// ```
    pub fn store(&self) -> Arc<dyn Store> {
        self.inner.store.clone()
    }

    /// Registers a workflow so this runtime can execute and resume its runs
    /// by name. [`start`](Runtime::start) registers too. Registering another
    /// workflow under the same name replaces the earlier one.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn nightly(ctx: &Ctx, day: u32) -> u32 {
    ///     checkpoint!();
    ///     day
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let first = Runtime::in_memory();
    /// first.start(nightly, "n-1", 3).await?;
    ///
    /// // Another runtime over the same store (another process, later): it can
    /// // execute the run only once it knows the workflow by name.
    /// let second = Runtime::builder().store(first.store()).in_memory();
    /// second.register(nightly);
    /// second.run_until_idle().await?;
    /// assert_eq!(second.status("n-1").await?, Status::Completed);
    /// # Ok(()) }
    /// ```
    pub fn register<I: IntoWorkflow>(&self, workflow: I) {
        self.inner.register(workflow.into_workflow());
    }

    /// [`register`](Runtime::register) for a workflow value.
    pub(crate) fn register_workflow<W: Workflow>(&self, workflow: W) {
        self.inner.register(workflow);
    }

    /// Starts a run of `workflow` under `id` with `input` (its parameters
    /// after `ctx`: one bare, several as a tuple) and returns a handle. The run
    /// executes when this runtime (or another worker on the same store) runs:
    /// [`run_until_idle`](Runtime::run_until_idle), [`run_worker`](Runtime::run_worker)
    /// or [`WorkflowHandle::result`].
    ///
    /// Idempotent per id: if a run `id` of the same workflow exists (running or
    /// finished), this returns a handle to it and `input` is ignored. A run of
    /// another workflow under `id` is [`Error::WorkflowMismatch`]. Ids must be
    /// non-empty and at most 255 bytes ([`Error::InvalidId`]).
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn add(ctx: &Ctx, a: u32, b: u32) -> u32 {
    ///     a + b
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(add, "sum-1", (2, 3)).await?; // several parameters: a tuple
    /// assert_eq!(h.id(), "sum-1");
    /// assert_eq!(h.result().await?, 5);
    /// // Idempotent: the same id gives the same run (the new input is ignored).
    /// assert_eq!(rt.start(add, "sum-1", (10, 10)).await?.result().await?, 5);
    /// # Ok(()) }
    /// ```
    pub async fn start<I: IntoWorkflow>(
        &self,
        workflow: I,
        id: &str,
        input: <I::Workflow as Workflow>::Input,
    ) -> Result<WorkflowHandle<I::Workflow>, Error> {
        type W<I> = <I as IntoWorkflow>::Workflow;
        let workflow = workflow.into_workflow();
        validate_id(id)?;
        let json = serde_json::to_vec(&input).map_err(|e| Error::Encode {
            workflow: W::<I>::NAME.to_owned(),
            run: id.to_owned(),
            site: "<input>".to_owned(),
            field: "input".to_owned(),
            detail: e.to_string().into(),
        })?;
        self.start_encoded(workflow, id, json).await
    }

    pub(crate) async fn start_encoded<W: Workflow>(
        &self,
        workflow: W,
        id: &str,
        input_json: Vec<u8>,
    ) -> Result<WorkflowHandle<W>, Error> {
        validate_id(id)?;
        self.inner.register(workflow);
        let created = self
            .inner
            .store
            .create_run(NewRun {
                id: id.to_owned(),
                workflow: W::NAME.to_owned(),
                input: input_json.into(),
            })
            .await?;
        if let Created::Existing(run) = created {
            if run.workflow != W::NAME {
                return Err(Error::WorkflowMismatch {
                    run: id.to_owned(),
                    expected: W::NAME.to_owned(),
                    found: run.workflow,
                });
            }
        }
        Ok(WorkflowHandle::new(self.clone(), workflow, id))
    }

    /// A handle to run `id` of `workflow` (which need not exist yet: the
    /// handle's methods report [`Error::UnknownRun`] then). Not async.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn hello(ctx: &Ctx, name: String) -> String {
    ///     format!("hello, {name}")
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(hello, "h-1", "ada".into()).await?;
    /// let h = rt.handle(hello, "h-1");
    /// assert_eq!(h.result().await?, "hello, ada");
    /// assert!(matches!(
    ///     rt.handle(hello, "nope").status().await,
    ///     Err(Error::UnknownRun { .. })
    /// ));
    /// # Ok(()) }
    /// ```
    pub fn handle<I: IntoWorkflow>(&self, workflow: I, id: &str) -> WorkflowHandle<I::Workflow> {
        WorkflowHandle::new(self.clone(), workflow.into_workflow(), id)
    }

    /// Stores a signal for run `id`; its payload is stored as JSON. A run
    /// waiting for `name` is resumed (by whichever worker runs); a signal that
    /// arrives before the run waits for it is kept until it does. Signals of
    /// one name are consumed in arrival order, each exactly once.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Approval {
    ///     approved: bool,
    ///     reason: Option<String>,
    /// }
    ///
    /// #[workflow]
    /// async fn vendor(ctx: &Ctx, name: String) -> bool {
    ///     let approval: Approval = ctx.wait_for("finance_approval").await;
    ///     approval.approved
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(vendor, "vendor-42", "acme".into()).await?;
    /// rt.signal("vendor-42", "finance_approval", &Approval { approved: true, reason: None }).await?;
    /// assert!(h.result().await?);
    /// # Ok(()) }
    /// ```
    pub async fn signal<T: Serialize + ?Sized>(
        &self,
        id: &str,
        name: &str,
        payload: &T,
    ) -> Result<(), Error> {
        validate_id(name)?;
        let json = serde_json::to_vec(payload).map_err(|e| Error::SignalPayload {
            run: id.to_owned(),
            signal: name.to_owned(),
            detail: e.to_string(),
        })?;
        self.inner.store.put_signal(id, name, json).await
    }

    /// Cancels run `id`: it will not run again, and an execution in progress
    /// is stopped at its next checkpoint (at once on this runtime). Cancelling
    /// a finished run changes nothing.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn approval(ctx: &Ctx) -> bool {
    ///     let ok: bool = ctx.wait_for("ok").await;
    ///     ok
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(approval, "a-1", ()).await?;
    /// rt.run_until_idle().await?; // now waiting
    /// rt.cancel("a-1").await?;
    /// assert_eq!(h.status().await?, Status::Cancelled);
    /// assert!(matches!(h.result().await, Err(Error::Cancelled { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self, id: &str) -> Result<(), Error> {
        self.inner.store.cancel(id).await?;
        if let Some(run) = self.inner.active_run(id) {
            run.halt(Halt::Stop);
        }
        Ok(())
    }

    /// Executes runnable runs until this runtime has no run in progress and
    /// none it may take is runnable: each is finished, waiting for a signal,
    /// sleeping with a timer not yet due, held by another worker's live
    /// lease, or of a workflow not registered here.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// let rt = checkpoint_runtime::Runtime::in_memory();
    /// rt.run_until_idle().await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_until_idle(&self) -> Result<(), Error> {
        self.inner.run_until_idle().await
    }

    /// Keeps executing runnable runs (new ones, signalled ones, due timers,
    /// runs whose lease expired) until [`shutdown`](Runtime::shutdown); at most
    /// the configured concurrency at once. On shutdown, executions in progress
    /// are stopped and their runs handed back (they resume from their latest
    /// checkpoint elsewhere or on restart). A store that cannot be reached
    /// ([`Error::Store`]: a database restart, a dropped connection) is
    /// retried with a growing pause (at most 3.2 s) for as long as it lasts:
    /// the worker reconnects and takes up its runs by itself. Any other error
    /// is retried too; after 10 consecutive ones it returns the last one
    /// (executions in progress go on; call it again to resume serving).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// let rt = checkpoint_runtime::Runtime::in_memory();
    /// let worker = tokio::spawn({
    ///     let rt = rt.clone();
    ///     async move { rt.run_worker().await }
    /// });
    /// rt.shutdown();
    /// worker.await.expect("worker task")?;
    /// # Ok(()) }
    /// ```
    pub async fn run_worker(&self) -> Result<(), Error> {
        self.inner.run_worker().await
    }

    /// Stops this runtime for good: `run_worker` returns, executions in
    /// progress are stopped and their runs handed back, nothing new is executed.
    ///
    /// ```
    /// let rt = checkpoint_runtime::Runtime::in_memory();
    /// rt.shutdown();
    /// ```
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }

    /// `true` once the crash hook fired (test support).
    #[doc(hidden)]
    pub fn crashed(&self) -> bool {
        self.inner.crashed()
    }

    /// Lists runs, oldest first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// use checkpoint_runtime::{RunFilter, Runtime, StatusKind};
    /// let rt = Runtime::in_memory();
    /// let waiting = rt.runs(RunFilter::new().status(StatusKind::Waiting)).await?;
    /// assert!(waiting.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn runs(&self, filter: RunFilter) -> Result<Vec<RunInfo>, Error> {
        let runs = self.inner.store.list_runs(&filter).await?;
        Ok(runs.into_iter().map(run_info).collect())
    }

    /// The status of run `id`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let rt = checkpoint_runtime::Runtime::in_memory();
    /// assert!(rt.status("nope").await.is_err());
    /// # }
    /// ```
    pub async fn status(&self, id: &str) -> Result<Status, Error> {
        Ok(self.load(id).await?.status())
    }

    pub(crate) async fn load(&self, id: &str) -> Result<RunRecord, Error> {
        self.inner
            .store
            .load_run(id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))
    }

    /// The kept checkpoint versions of run `id`, oldest first.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn steps(ctx: &Ctx, n: u32) -> Vec<u32> {
    ///     let mut done = Vec::new();
    ///     for i in 0..n {
    ///         done.push(i);
    ///         checkpoint!("step");
    ///     }
    ///     done
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(steps, "s-1", 3).await?.result().await?;
    /// let cps = rt.checkpoints("s-1").await?;
    /// assert_eq!(cps.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2, 3]);
    /// assert_eq!(cps[0].label.as_deref(), Some("step"));
    /// assert!(cps[0].fields.iter().any(|f| f.name == "done"));
    /// # Ok(()) }
    /// ```
    pub async fn checkpoints(&self, id: &str) -> Result<Vec<CheckpointInfo>, Error> {
        let cps = self.inner.store.list_checkpoints(id).await?;
        Ok(cps.iter().map(|c| c.info()).collect())
    }

    /// The fields of checkpoint `seq` of run `id`, each decoded as JSON, in
    /// order. Only the store is needed: the workflow need not be registered
    /// in this runtime, nor its code be in this program (each field was saved
    /// with a schema of its type; see [`crate::schema`]). A field that cannot
    /// be shown (its type had no traceable schema, its bytes do not decode)
    /// has `value: None` and a `note` saying why; that is not an error.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// use std::sync::Arc;
    /// use checkpoint_runtime::store::MemoryStore;
    /// use serde_json::json;
    ///
    /// #[workflow]
    /// async fn tally(ctx: &Ctx, items: Vec<String>) -> usize {
    ///     let mut seen = Vec::new();
    ///     for item in items {
    ///         seen.push(item);
    ///         checkpoint!("item");
    ///     }
    ///     seen.len()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let store = Arc::new(MemoryStore::new());
    /// let rt = Runtime::builder().store(store.clone()).in_memory();
    /// let input = vec!["a".to_owned(), "b".to_owned()];
    /// rt.start(tally, "t-1", input).await?.result().await?;
    ///
    /// // Another runtime over the same store, which does not know `tally`:
    /// let viewer = Runtime::builder().store(store).in_memory();
    /// let fields = viewer.checkpoint_fields_json("t-1", 2).await?;
    /// let seen = fields.iter().find(|f| f.name == "seen").unwrap();
    /// assert_eq!(seen.value, Some(json!(["a", "b"])));
    /// # Ok(()) }
    /// ```
    pub async fn checkpoint_fields_json(
        &self,
        id: &str,
        seq: u64,
    ) -> Result<Vec<FieldJson>, Error> {
        let store = &self.inner.store;
        let cp = match store.checkpoint(id, seq).await? {
            Some(cp) => cp,
            None => {
                if store.load_run(id).await?.is_none() {
                    return Err(Error::unknown_run(id));
                }
                return Err(Error::UnknownCheckpoint {
                    run: id.to_owned(),
                    seq,
                });
            }
        };
        let mut keys: Vec<String> = cp.schemas.iter().flatten().map(|k| k.to_string()).collect();
        keys.sort_unstable();
        keys.dedup();
        let docs = if keys.is_empty() {
            Default::default()
        } else {
            store.schemas(&keys).await?
        };
        Ok(crate::schema::fields_json(&cp, &docs))
    }

    /// The history of run `id`, oldest first.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn once(ctx: &Ctx) -> u8 {
    ///     checkpoint!("only");
    ///     7
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(once, "o-1", ()).await?.result().await?;
    /// let events = rt.history("o-1").await?;
    /// assert_eq!(events.first(), Some(&Event::Started { workflow: "once".into() }));
    /// assert!(events.contains(&Event::CheckpointSaved { seq: 1, label: Some("only".into()) }));
    /// assert_eq!(events.last(), Some(&Event::Completed));
    /// # Ok(()) }
    /// ```
    pub async fn history(&self, id: &str) -> Result<Vec<Event>, Error> {
        let h = self.inner.store.history(id).await?;
        Ok(h.into_iter().map(|e| e.event).collect())
    }

    /// The history of run `id` with timestamps, oldest first.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// # #[workflow]
    /// # async fn noop(ctx: &Ctx) {}
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// # let rt = Runtime::in_memory();
    /// # rt.start(noop, "vendor-42", ()).await?.result().await?;
    /// for entry in rt.history_entries("vendor-42").await? {
    ///     println!("{:?} {}", entry.at, entry.event);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn history_entries(&self, id: &str) -> Result<Vec<HistoryEntry>, Error> {
        self.inner.store.history(id).await
    }

    /// Creates run `new_id` from checkpoint `seq` of run `id`: same workflow
    /// and input, its only checkpoint (seq 1) a copy of that one, so it
    /// resumes from there (a wait site waits for a new signal). `Forked` is
    /// recorded in both histories.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn count(ctx: &Ctx, n: u32) -> u32 {
    ///     let mut total = 0;
    ///     for i in 0..n {
    ///         total += i;
    ///         checkpoint!("step");
    ///     }
    ///     total
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// assert_eq!(rt.start(count, "c-1", 5).await?.result().await?, 10);
    /// // Re-run from the state after the second step.
    /// rt.fork("c-1", 2, "c-1-retry").await?;
    /// assert_eq!(rt.handle(count, "c-1-retry").result().await?, 10);
    /// # Ok(()) }
    /// ```
    pub async fn fork(&self, id: &str, seq: u64, new_id: &str) -> Result<(), Error> {
        validate_id(new_id)?;
        self.inner.store.fork(id, seq, new_id).await
    }

    /// Reclaims storage that the retention policy
    /// ([`RuntimeBuilder::keep_checkpoints`]) freed but the store still holds:
    /// compacts pruned checkpoints' shared bytes, gives free pages back to the
    /// file system and truncates the SQLite write-ahead log. Runs keep every
    /// checkpoint retention kept; nothing visible changes. A no-op on the
    /// in-memory store.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn long(ctx: &Ctx, n: u32) -> u32 {
    ///     let mut total = 0;
    ///     for i in 0..n {
    ///         total += i;
    ///         checkpoint!("step");
    ///     }
    ///     total
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let path = std::env::temp_dir().join(format!("checkpoint-doc-gc-{}.db", std::process::id()));
    /// let rt = Runtime::builder().keep_checkpoints(5).open(&path.to_string_lossy()).await?;
    /// rt.start(long, "long-1", 200).await?.result().await?;
    /// assert_eq!(rt.checkpoints("long-1").await?.len(), 5);
    /// let report = rt.gc().await?;
    /// assert!(report.bytes_after <= report.bytes_before);
    /// # drop(rt);
    /// # for ext in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{ext}", path.to_string_lossy()));
    /// # }
    /// # Ok(()) }
    /// ```
    pub async fn gc(&self) -> Result<GcReport, Error> {
        self.inner.store.gc().await
    }
}

pub(crate) fn run_info(r: RunRecord) -> RunInfo {
    RunInfo {
        status: r.status(),
        worker: r.lease.as_ref().map(|l| l.worker.clone()),
        id: r.id,
        workflow: r.workflow,
        created_at: r.created_at,
        updated_at: r.updated_at,
        latest_seq: r.latest_seq,
    }
}
