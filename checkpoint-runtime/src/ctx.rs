//! [`Ctx`]: what a workflow body knows about its run.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::retry::{RetryError, RetryPolicy};
use crate::run::RunShared;

/// The context of a running workflow: its run id, attempt, idempotency keys,
/// shared resources, and the suspension points `wait_for`, `wait_for_timeout`
/// and `sleep`.
///
/// A `Ctx` is handed to a `#[workflow]` function as its optional first
/// parameter `ctx: &Ctx`; it is cheap to clone (an `Arc`) and never serialized.
///
/// ```
/// use std::time::Duration;
/// use checkpoint_runtime::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// /// A client shared by all runs (registered on the runtime, never saved).
/// struct Payments;
/// impl Payments {
///     async fn charge(&self, cents: u64, idempotency_key: &str) -> String {
///         format!("receipt for {cents} ({idempotency_key})")
///     }
/// }
///
/// #[derive(Serialize, Deserialize)]
/// struct Approval {
///     approved: bool,
/// }
///
/// #[workflow]
/// async fn charge(ctx: &Ctx, cents: u64) -> Option<String> {
///     let approval: Approval = ctx.wait_for("manager_approval").await; // suspends durably
///     if !approval.approved {
///         return None;
///     }
///     // The same key is used if this segment runs again after a crash.
///     let receipt = ctx.resource::<Payments>().charge(cents, &ctx.idempotency_key()).await;
///     checkpoint!("charged");
///     ctx.sleep(Duration::from_millis(10)).await; // a durable timer
///     Some(receipt)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let rt = Runtime::builder().resource(Payments).in_memory();
/// let h = rt.start(charge, "order-7", 1250).await?;
/// rt.run_until_idle().await?;
/// assert_eq!(h.status().await?, Status::Waiting { signal: "manager_approval".into(), deadline: None });
/// rt.signal("order-7", "manager_approval", &Approval { approved: true }).await?;
/// assert_eq!(h.result().await?.as_deref(), Some("receipt for 1250 (order-7:1:0)"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Ctx {
    pub(crate) run: Arc<RunShared>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("id", &&*self.run.id)
            .field("workflow", &self.run.workflow)
            .field("attempt", &self.attempt())
            .finish()
    }
}

impl Ctx {
    pub(crate) fn new(run: Arc<RunShared>) -> Self {
        Ctx { run }
    }

    /// The run id.
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn whoami(ctx: &Ctx) -> String {
    ///     format!("{} {} {} {}", ctx.id(), ctx.workflow(), ctx.worker_id(), ctx.attempt())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let out = rt.start(whoami, "w-1", ()).await?.result().await?;
    /// assert_eq!(out, "w-1 whoami local 1");
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> &str {
        &self.run.id
    }

    /// The workflow name.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow(name = "vendor-approval")]
    /// async fn vendor_approval(ctx: &Ctx) -> String {
    ///     ctx.workflow().to_owned()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// # let rt = Runtime::in_memory();
    /// # assert_eq!(rt.start(vendor_approval, "v", ()).await?.result().await?, "vendor-approval");
    /// # Ok(()) }
    /// ```
    pub fn workflow(&self) -> &str {
        self.run.workflow
    }

    /// The id of the worker executing the run.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn where_am_i(ctx: &Ctx) -> String {
    ///     ctx.worker_id().to_owned()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::builder().worker_id("worker-b").in_memory();
    /// assert_eq!(rt.start(where_am_i, "w", ()).await?.result().await?, "worker-b");
    /// # Ok(()) }
    /// ```
    pub fn worker_id(&self) -> &str {
        &self.run.env.worker
    }

    /// How many times the code since the latest checkpoint has been started:
    /// 1 normally, more after a crash, a lost worker or a panic retry. Reset to
    /// 1 by every checkpoint.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn careful(ctx: &Ctx) -> bool {
    ///     // `true` when this segment already ran (at least partly) before a crash.
    ///     ctx.attempt() > 1
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// # let rt = Runtime::in_memory();
    /// # assert!(!rt.start(careful, "c", ()).await?.result().await?);
    /// # Ok(()) }
    /// ```
    pub fn attempt(&self) -> u32 {
        self.run.attempt.load(Ordering::Acquire)
    }

    /// A key for deduplicating external calls: `"{run}:{seq}:{n}"`, where `seq`
    /// is the latest checkpoint's sequence number and `n` counts the keys asked
    /// for since it. When the segment runs again after a crash it asks for the
    /// same keys in the same order, so an external service that deduplicates on
    /// the key sees the same request.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn keys(ctx: &Ctx) -> Vec<String> {
    ///     let first = ctx.idempotency_key();
    ///     checkpoint!("one");
    ///     let second = ctx.idempotency_key();
    ///     let third = ctx.idempotency_key();
    ///     vec![first, second, third]
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let out = rt.start(keys, "k-1", ()).await?.result().await?;
    /// assert_eq!(out, ["k-1:0:0", "k-1:1:0", "k-1:1:1"]);
    /// # Ok(()) }
    /// ```
    pub fn idempotency_key(&self) -> String {
        let n = self.run.calls.fetch_add(1, Ordering::AcqRel);
        let seq = self.run.seq.load(Ordering::Acquire);
        format!("{}:{seq}:{n}", self.run.id)
    }

    /// The resource of type `T` registered with
    /// [`RuntimeBuilder::resource`](crate::RuntimeBuilder::resource).
    ///
    /// # Panics
    ///
    /// If no resource of type `T` was registered on the runtime (a setup
    /// mistake; the message names the type). Use [`Ctx::try_resource`] to
    /// check instead.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// struct Greeter(&'static str);
    ///
    /// #[workflow]
    /// async fn greet(ctx: &Ctx, name: String) -> String {
    ///     format!("{}, {name}", ctx.resource::<Greeter>().0)
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::builder().resource(Greeter("hello")).in_memory();
    /// assert_eq!(rt.start(greet, "g", "ada".into()).await?.result().await?, "hello, ada");
    /// # Ok(()) }
    /// ```
    pub fn resource<T: Send + Sync + 'static>(&self) -> &T {
        match self.try_resource::<T>() {
            Some(r) => r,
            None => panic!(
                "no resource of type `{}` is registered on this runtime (register it with \
                 `Runtime::builder().resource(value)`)",
                std::any::type_name::<T>()
            ),
        }
    }

    /// The resource of type `T`, or `None` if none was registered.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// struct Metrics;
    ///
    /// #[workflow]
    /// async fn measured(ctx: &Ctx) -> bool {
    ///     ctx.try_resource::<Metrics>().is_some()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory(); // no Metrics registered
    /// assert!(!rt.start(measured, "m", ()).await?.result().await?);
    /// # Ok(()) }
    /// ```
    pub fn try_resource<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.run.env.resources.get::<T>()
    }

    /// Suspends the run until a signal named `name` arrives and returns its
    /// payload (sent with [`Runtime::signal`](crate::Runtime::signal) as JSON).
    ///
    /// Only where the macro rewrites it: awaited directly in a `#[workflow]`
    /// body, where it becomes an implicit checkpoint. Awaited anywhere else
    /// (a helper `async fn`, a closure) it is a compile error (see
    /// [`AwaitInWorkflowBody`]).
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn approve(ctx: &Ctx) -> bool {
    ///     let approved: bool = ctx.wait_for("approved").await;
    ///     approved
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(approve, "a-1", ()).await?;
    /// rt.signal("a-1", "approved", &true).await?;
    /// assert!(h.result().await?);
    /// # Ok(()) }
    /// ```
    pub fn wait_for<T: DeserializeOwned>(&self, name: &str) -> AwaitInWorkflowBody<T>
    where
        for<'a> AwaitInWorkflowBody<&'a ()>: InWorkflowBody,
    {
        let _ = name;
        AwaitInWorkflowBody(PhantomData)
    }

    /// Like [`Ctx::wait_for`] with a durable deadline: `None` if no signal
    /// arrived within `timeout`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn ask(ctx: &Ctx) -> String {
    ///     let reply: Option<String> = ctx.wait_for_timeout("reply", Duration::from_millis(20)).await;
    ///     reply.unwrap_or_else(|| "no reply".to_owned())
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// assert_eq!(rt.start(ask, "q-1", ()).await?.result().await?, "no reply");
    /// # Ok(()) }
    /// ```
    pub fn wait_for_timeout<T: DeserializeOwned>(
        &self,
        name: &str,
        timeout: Duration,
    ) -> AwaitInWorkflowBody<Option<T>>
    where
        for<'a> AwaitInWorkflowBody<&'a ()>: InWorkflowBody,
    {
        let _ = (name, timeout);
        AwaitInWorkflowBody(PhantomData)
    }

    /// The reason of a cancel requested of this run
    /// ([`Runtime::request_cancel`](crate::Runtime::request_cancel)), or
    /// `None`. Once it is set, `ctx.sleep` and `ctx.wait_for_timeout`
    /// return at once (the wait as timed out), so that the body can clean
    /// up (compensate, notify) and return; the run then ends
    /// [`Status::Cancelled`](crate::Status::Cancelled), whatever it returns.
    /// Read when the execution starts, at once for a request made on the
    /// runtime executing it, and with the next lease renewal (every third
    /// of the lease TTL) for one made by another process: a body that
    /// never suspends sees it too.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn trip(ctx: &Ctx) -> String {
    ///     let paid: Option<bool> = ctx.wait_for_timeout("paid", Duration::from_secs(3600)).await;
    ///     match ctx.cancel_requested() {
    ///         Some(reason) => format!("released the room: {reason}"),
    ///         None => format!("paid: {paid:?}"),
    ///     }
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(trip, "t-1", ()).await?;
    /// rt.run_until_idle().await?; // waiting for `paid`, for an hour
    /// rt.request_cancel("t-1", "customer changed plans", Duration::from_secs(30)).await?;
    /// rt.run_until_idle().await?; // the wait returns at once, the body cleans up
    /// assert_eq!(h.status().await?, Status::Cancelled);
    /// let info = &rt.runs(RunFilter::new().id_prefix("t-1")).await?[0];
    /// assert_eq!(info.cancel_reason.as_deref(), Some("customer changed plans"));
    /// # Ok(()) }
    /// ```
    pub fn cancel_requested(&self) -> Option<String> {
        crate::run::lock(&self.run.cancel).clone()
    }

    /// A durable timer: the run is suspended and resumed (by any worker) when
    /// it is due. Like [`Ctx::wait_for`], only in a `#[workflow]` body.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn remind(ctx: &Ctx) -> String {
    ///     ctx.sleep(Duration::from_millis(20)).await;
    ///     "reminded".to_owned()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(remind, "r-1", ()).await?;
    /// rt.run_until_idle().await?;
    /// assert!(matches!(h.status().await?, Status::Sleeping { .. }));
    /// assert_eq!(h.result().await?, "reminded"); // waits for the timer, then resumes
    /// # Ok(()) }
    /// ```
    pub fn sleep(&self, duration: Duration) -> AwaitInWorkflowBody<()>
    where
        for<'a> AwaitInWorkflowBody<&'a ()>: InWorkflowBody,
    {
        let _ = duration;
        AwaitInWorkflowBody(PhantomData)
    }

    /// Runs `op` until it succeeds, with durable backoff between attempts:
    /// a suspension point, like [`Ctx::sleep`], only in a `#[workflow]`
    /// body (at any depth of blocks, `if`, `match` and loops).
    ///
    /// - Each attempt's outcome is stored before the next starts: after a
    ///   failed attempt the run stores a checkpoint and sleeps (status
    ///   `Sleeping`, no worker held; any worker resumes it when the backoff
    ///   is due, on the runtime's clock). A crash during the backoff
    ///   resumes the backoff; an attempt whose error was stored never runs
    ///   again. The end (success or not) is stored too: a crash after it
    ///   returns the stored outcome without running `op` again.
    /// - The history has an [`Event::RetryAttemptFailed`](crate::Event::RetryAttemptFailed)
    ///   per failed attempt, naming the retry, the attempt and its error.
    /// - [`Ctx::idempotency_key`] inside `op` is the same when the same
    ///   attempt runs again after a crash, and differs from one attempt to
    ///   the next (each attempt starts after a checkpoint).
    /// - The value and the error go through JSON (they are stored), so
    ///   `T` and `E` are `Serialize + DeserializeOwned`; `E` is `Display`
    ///   (the history's text). Both paths return the decoded value.
    /// - `Err(RetryError::Exhausted { attempts, last })` once the policy's
    ///   attempts are used up, `NotRetryable { attempt, error }` at once for
    ///   an error its `retry_if` refuses, `TimedOut { attempts }` when the
    ///   last attempt took longer than its `attempt_timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use checkpoint_runtime::prelude::*;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Debug, Serialize, Deserialize)]
    /// enum FetchError { Busy, Gone }
    /// impl std::fmt::Display for FetchError {
    ///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    ///         write!(f, "{self:?}")
    ///     }
    /// }
    ///
    /// /// Busy twice, then an answer (a stand-in for a flaky service).
    /// async fn fetch(key: String) -> Result<String, FetchError> {
    ///     match key.rsplit(':').nth(1) {
    ///         Some("0") | Some("1") => Err(FetchError::Busy),
    ///         _ => Ok(format!("page ({key})")),
    ///     }
    /// }
    ///
    /// #[workflow]
    /// async fn crawl(ctx: &Ctx) -> Result<String, String> {
    ///     // Not data: re-created on resume (or build it in the call).
    ///     #[transient]
    ///     let policy = RetryPolicy::exponential(Duration::from_millis(5))
    ///         .max_attempts(5)
    ///         .retry_if(|e: &FetchError| matches!(e, FetchError::Busy));
    ///     let page = ctx
    ///         .retry("fetch", policy, || fetch(ctx.idempotency_key()))
    ///         .await
    ///         .map_err(|e| e.to_string())?;
    ///     Ok(page)
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(crawl, "c-1", ()).await?;
    /// // Keys: attempt 1 after checkpoint 0, attempt 2 after 1, attempt 3 after 2.
    /// assert_eq!(h.result().await?, Ok("page (c-1:2:0)".to_owned()));
    /// let failed = rt.history("c-1").await?.into_iter()
    ///     .filter(|e| matches!(e, Event::RetryAttemptFailed { .. }))
    ///     .count();
    /// assert_eq!(failed, 2);
    /// # Ok(()) }
    /// ```
    pub fn retry<T, E, Op, Fut>(
        &self,
        name: &str,
        policy: RetryPolicy<E>,
        op: Op,
    ) -> AwaitInWorkflowBody<Result<T, RetryError<E>>>
    where
        Op: Fn() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        for<'a> AwaitInWorkflowBody<&'a ()>: InWorkflowBody,
    {
        let _ = (name, policy, op);
        AwaitInWorkflowBody(PhantomData)
    }
}

/// What `ctx.wait_for(..)`, `ctx.wait_for_timeout(..)` and `ctx.sleep(..)`
/// return where `#[workflow]` did not rewrite them: a value that cannot be
/// awaited, so that a suspension point hidden in a helper `async fn` or a
/// closure (which could not be resumed) is a compile error rather than a run
/// that fails when it gets there.
///
/// ```compile_fail
/// use checkpoint_runtime::prelude::*;
///
/// async fn wait_in_a_helper(ctx: &Ctx) -> bool {
///     ctx.wait_for::<bool>("approved").await // error: only in a #[workflow] body
/// }
/// ```
///
/// In the body itself the same call is a durable suspension point:
///
/// ```
/// use checkpoint_runtime::prelude::*;
///
/// #[workflow]
/// async fn approve(ctx: &Ctx) -> bool {
///     let ok: bool = ctx.wait_for("approved").await;
///     ok
/// }
/// ```
#[must_use = "a suspension point does nothing unless awaited directly in a #[workflow] body"]
pub struct AwaitInWorkflowBody<T>(PhantomData<fn() -> T>);

impl<T> AwaitInWorkflowBody<T> {
    pub(crate) fn new() -> Self {
        AwaitInWorkflowBody(PhantomData)
    }
}

impl<T> std::fmt::Debug for AwaitInWorkflowBody<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AwaitInWorkflowBody")
    }
}

/// Never implemented: the bound on `ctx.wait_for` and the other suspension
/// calls that makes each one a compile error, with this message, wherever
/// `#[workflow]` did not rewrite it (the macro turns the calls in a body into
/// calls of the run's frame, so this bound is only ever checked outside one).
/// On the method rather than on `.await`: rustc reports an `.await` whose
/// `IntoFuture` bound fails as "is not a future", with a hint to remove the
/// `.await`, and never shows this message.
#[diagnostic::on_unimplemented(
    message = "`ctx.wait_for`, `ctx.wait_for_timeout`, `ctx.sleep`, `ctx.join`, `ctx.join_all` and `ctx.retry` can only be awaited directly in a #[workflow] body",
    label = "awaited outside the body of a #[workflow] fn",
    note = "a suspension point must be written in the workflow body itself (at any depth of blocks, `if`, `match` and loops), where #[workflow] turns it into a durable checkpoint; a helper `async fn`, closure or `async` block cannot be resumed there: return what the helper needs to the body and wait there"
)]
pub trait InWorkflowBody {}

impl<T> IntoFuture for AwaitInWorkflowBody<T> {
    type Output = T;
    type IntoFuture = std::future::Pending<T>;

    fn into_future(self) -> Self::IntoFuture {
        std::future::pending()
    }
}
