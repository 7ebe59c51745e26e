//! [`Ctx`]: what a workflow body knows about its run.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::executor::{Halt, RunShared};
use crate::Error;

/// The context of a running workflow: its run id, attempt, idempotency keys,
/// shared resources, and the suspension points `wait_for`, `wait_for_timeout`
/// and `sleep`.
///
/// A `Ctx` is handed to a `#[workflow]` function as its optional first
/// parameter `ctx: &Ctx`; it is cheap to clone (an `Arc`) and never serialized.
///
/// ```ignore
/// use checkpoint_runtime::prelude::*;
///
/// #[workflow]
/// async fn charge(ctx: &Ctx, order: Order) -> Receipt {
///     let payments = ctx.resource::<PaymentsClient>();
///     // The same key is used if this segment runs again after a crash.
///     let receipt = payments.charge(&order, &ctx.idempotency_key()).await;
///     checkpoint!("charged");
///     let approval: Approval = ctx.wait_for("manager_approval").await;
///     ctx.sleep(std::time::Duration::from_secs(60)).await;
///     receipt
/// }
/// ```
#[derive(Clone)]
pub struct Ctx {
    run: Arc<RunShared>,
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
    /// ```ignore
    /// println!("running {}", ctx.id());
    /// ```
    pub fn id(&self) -> &str {
        &self.run.id
    }

    /// The workflow name.
    ///
    /// ```ignore
    /// assert_eq!(ctx.workflow(), "vendor_approval");
    /// ```
    pub fn workflow(&self) -> &str {
        self.run.workflow
    }

    /// The id of the worker executing the run.
    ///
    /// ```ignore
    /// tracing::info!(worker = ctx.worker_id(), "step done");
    /// ```
    pub fn worker_id(&self) -> &str {
        &self.run.rt.worker
    }

    /// How many times the code since the latest checkpoint has been started:
    /// 1 normally, more after a crash, a lost worker or a panic retry. Reset to
    /// 1 by every checkpoint.
    ///
    /// ```ignore
    /// if ctx.attempt() > 1 {
    ///     // This segment already ran (at least partly) before.
    /// }
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
    /// ```ignore
    /// let key = ctx.idempotency_key(); // e.g. "order-7:3:0"
    /// payments.charge(amount, &key).await?;
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
    /// ```ignore
    /// let http = ctx.resource::<reqwest::Client>();
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
    /// ```ignore
    /// if let Some(metrics) = ctx.try_resource::<Metrics>() { metrics.inc(); }
    /// ```
    pub fn try_resource<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.run.rt.resources.get::<T>()
    }

    fn misuse<T>(&self, call: &str) -> impl Future<Output = T> + Send + 'static {
        let err = Error::Misuse {
            run: self.run.id.to_string(),
            detail: format!(
                "`ctx.{call}` must be called directly in a #[workflow] body (as \
                 `ctx.{call}(..).await`), where it becomes a durable suspension point; it was \
                 called from somewhere else (a helper function, closure or nested async block)"
            ),
        };
        let run = self.run.clone();
        async move {
            run.halt(Halt::Failed(err));
            std::future::pending().await
        }
    }

    /// Suspends the run until a signal named `name` arrives and returns its
    /// payload (sent with [`Runtime::signal`](crate::Runtime::signal) as JSON).
    ///
    /// Durable only when written directly in a `#[workflow]` body, which the
    /// macro rewrites into an implicit checkpoint. Reached any other way (from
    /// a helper function), it stops the run with [`Error::Misuse`].
    ///
    /// ```ignore
    /// let approval: Approval = ctx.wait_for("finance_approval").await;
    /// ```
    pub async fn wait_for<T: DeserializeOwned>(&self, name: &str) -> T {
        self.misuse(&format!("wait_for(\"{name}\")")).await
    }

    /// Like [`Ctx::wait_for`] with a durable deadline: `None` if no signal
    /// arrived within `timeout`.
    ///
    /// ```ignore
    /// let answer: Option<Answer> = ctx.wait_for_timeout("reply", Duration::from_secs(3600)).await;
    /// ```
    pub async fn wait_for_timeout<T: DeserializeOwned>(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Option<T> {
        let _ = timeout;
        self.misuse(&format!("wait_for_timeout(\"{name}\", ..)"))
            .await
    }

    /// A durable timer: the run is suspended and resumed (by any worker) when
    /// it is due. Like [`Ctx::wait_for`], only in a `#[workflow]` body.
    ///
    /// ```ignore
    /// ctx.sleep(Duration::from_secs(24 * 3600)).await;
    /// ```
    pub async fn sleep(&self, duration: Duration) {
        let _ = duration;
        self.misuse("sleep").await
    }
}
