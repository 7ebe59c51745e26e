//! [`RuntimeBuilder`] and the constructors of [`Runtime`]: how a runtime is
//! configured and opened. (The runtime's operations are in `runtime.rs`;
//! this module depends on it, not the other way round.)

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::executor::{Engine, Inner, InnerConfig};
use crate::observe::TracePropagation;
use crate::run::Resources;
use crate::store::{MemoryStore, Store};
use crate::testing::crash::SaveHook;
use crate::{Error, Runtime};

/// The worker id used when none is set: a restarted process with the default
/// id resumes its own unfinished runs at once.
pub const DEFAULT_WORKER_ID: &str = "local";

/// How many runs a runtime executes at once unless
/// [`RuntimeBuilder::concurrency`] says otherwise: enough that a thousand
/// started runs proceed together. An execution that waits (for a signal, a
/// timer) holds no slot.
pub const DEFAULT_CONCURRENCY: usize = 1024;

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
    save_hook: Option<Arc<dyn SaveHook>>,
    client_only: bool,
    trace: Option<Arc<dyn TracePropagation>>,
    clock: Arc<dyn Clock>,
    queues: std::collections::BTreeMap<String, crate::Queue>,
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
            .field("client_only", &self.client_only)
            .field("trace_propagation", &self.trace.is_some())
            .field("clock", &self.clock)
            .field("queues", &self.queues)
            .finish()
    }
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        RuntimeBuilder {
            worker: DEFAULT_WORKER_ID.to_owned(),
            ttl: Duration::from_secs(30),
            keep: None,
            concurrency: DEFAULT_CONCURRENCY,
            max_attempts: 3,
            resources: Resources::default(),
            store: None,
            save_hook: None,
            client_only: false,
            trace: None,
            clock: Arc::new(SystemClock),
            queues: Default::default(),
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

    /// At most `n` runs execute at once on this runtime (default
    /// [`DEFAULT_CONCURRENCY`], 1,024); more wait their turn as `Queued`.
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

    /// A runtime that starts, signals, cancels and inspects runs but never
    /// executes them (the CLI and other clients of a store that workers
    /// serve). [`run_until_idle`](Runtime::run_until_idle) and
    /// [`run_worker`](Runtime::run_worker) are [`Error::ClientOnly`] on it;
    /// [`WorkflowHandle::result`](crate::WorkflowHandle::result) waits for a worker to finish the run.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn double(ctx: &Ctx, n: u32) -> u32 {
    ///     n * 2
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let store = std::sync::Arc::new(checkpoint_runtime::store::MemoryStore::new());
    /// let client = Runtime::builder().store(store.clone()).client_only().in_memory();
    /// let h = client.start(double, "d-1", 21).await?;
    /// assert_eq!(h.status().await?, Status::Queued); // nobody executes it yet
    /// // A worker over the same store executes it.
    /// let worker = Runtime::builder().store(store).in_memory();
    /// worker.register(double);
    /// assert_eq!(h.result().await?, 42);
    /// # Ok(()) }
    /// ```
    pub fn client_only(mut self) -> Self {
        self.client_only = true;
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

    /// Carries each run's trace context across executions: the context a
    /// run is started in is stored with it, and every execution's span
    /// (`checkpoint.run`, see [`crate::observe`]) joins it, on whichever
    /// worker and however much later it resumes. With the `otel` feature,
    /// `otel::W3cPropagation` (feature `otel`) does this for OpenTelemetry.
    ///
    /// ```
    /// use checkpoint_runtime::observe::TracePropagation;
    /// struct Nothing;
    /// impl TracePropagation for Nothing {
    ///     fn current(&self) -> Option<String> { None }
    ///     fn attach(&self, _: &tracing::Span, _: &str) {}
    /// }
    /// let rt = checkpoint_runtime::Runtime::builder().trace_propagation(Nothing).in_memory();
    /// # let _ = rt;
    /// ```
    pub fn trace_propagation(mut self, propagation: impl TracePropagation) -> Self {
        self.trace = Some(Arc::new(propagation));
        self
    }

    /// The clock of durable time (default [`SystemClock`]): the deadlines
    /// `ctx.sleep` and `ctx.wait_for_timeout` store and when they are due.
    /// Tests give a [`TestClock`](crate::TestClock), on which timers fire at
    /// once, in deadline order, or when the test advances it. Leases stay
    /// on the system's time (see [`crate::clock`]). Every runtime on one
    /// store should use the same clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn reminder(ctx: &Ctx) -> String {
    ///     ctx.sleep(Duration::from_secs(7 * 86_400)).await;
    ///     "a week later".to_owned()
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let clock = TestClock::new();
    /// let rt = Runtime::builder().clock(clock.clone()).in_memory();
    /// let h = rt.start(reminder, "r", ()).await?;
    /// assert_eq!(h.result().await?, "a week later");
    /// # Ok(()) }
    /// ```
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Installs a hook around checkpoint writes (a simulated crash; see
    /// [`SimulatedCrash::install`](crate::testing::SimulatedCrash::install)).
    pub(crate) fn save_hook(mut self, hook: Arc<dyn SaveHook>) -> Self {
        self.save_hook = Some(hook);
        self
    }

    #[doc(hidden)]
    pub fn resources_from(mut self, other: &Runtime) -> Self {
        self.resources = other.inner.env.resources.clone();
        self
    }

    /// Declares queue `name` with its limits (see [`Queue`](crate::Queue)):
    /// this runtime's claims take runs started in it
    /// ([`StartOptions::queue`](crate::StartOptions::queue)) only within
    /// them. Declare it alike on every worker of the store. Declaring a name
    /// again replaces its limits.
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn summarize(n: u32) -> u32 {
    ///     n
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::builder().queue("llm", Queue::new().concurrency(2)).in_memory();
    /// for i in 0..5 {
    ///     let opts = StartOptions::new().queue("llm");
    ///     rt.start_with(summarize, &format!("s-{i}"), i, opts).await?;
    /// }
    /// rt.run_until_idle().await?; // at most two at once
    /// assert!(rt.runs(RunFilter::new()).await?.iter().all(|r| r.status == Status::Completed));
    /// # Ok(()) }
    /// ```
    pub fn queue(mut self, name: &str, queue: crate::Queue) -> Self {
        self.queues.insert(name.to_owned(), queue);
        self
    }

    pub(crate) fn with_resources(mut self, resources: Resources) -> Self {
        self.resources = resources;
        self
    }

    fn build(self, store: Arc<dyn Store>) -> Runtime {
        Runtime {
            inner: Arc::new(Engine::new(Inner::new(InnerConfig {
                store,
                worker: self.worker,
                ttl: self.ttl,
                keep: self.keep,
                concurrency: self.concurrency,
                max_attempts: self.max_attempts,
                resources: self.resources,
                save_hook: self.save_hook,
                client_only: self.client_only,
                trace: self.trace,
                clock: self.clock,
                queues: self.queues,
            }))),
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

    /// Like [`open`](RuntimeBuilder::open), but only a store that already
    /// exists at this build's schema version: it never creates an SQLite
    /// file, a PostgreSQL schema or their tables, and never upgrades them
    /// ([`store::open_existing`](crate::store::open_existing)). For tools
    /// that read or operate runs: a mistyped path is an
    /// [`Error::Store`] saying it is "not a checkpoint store",
    /// not an empty store, and a store of an older version stays as the
    /// workers using it left it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// use checkpoint_runtime::{Error, Runtime};
    /// let opened = Runtime::builder().client_only().open_existing("no-such-store.db").await;
    /// assert!(matches!(opened, Err(Error::Store { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn open_existing(mut self, url: &str) -> Result<Runtime, Error> {
        if let Some(store) = self.store.take() {
            return Ok(self.build(store));
        }
        let store = crate::store::open_existing(url).await?;
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
}
