//! [`WorkflowHandle`]: a typed reference to one run.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::executor::Engine;
use crate::status::Status;
use crate::store::{RunRecord, RunState};
use crate::workflow::Workflow;
use crate::Error;

/// A handle to run `id` of workflow `W`, from [`Runtime::start`](crate::Runtime::start) or
/// [`Runtime::handle`](crate::Runtime::handle). Cheap to clone.
///
/// ```
/// use checkpoint_runtime::prelude::*;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// enum Decision {
///     Approved,
///     Rejected(String),
/// }
///
/// #[workflow]
/// async fn review(ctx: &Ctx, amount: u32) -> Result<Decision, String> {
///     if amount > 1_000_000 {
///         return Err("amount too large".into());
///     }
///     checkpoint!("checked");
///     let ok: bool = ctx.wait_for("approval").await;
///     Ok(if ok { Decision::Approved } else { Decision::Rejected("no".into()) })
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let rt = Runtime::in_memory();
/// let h = rt.start(review, "r-1", 500).await?;
/// assert_eq!(h.id(), "r-1");
/// rt.run_until_idle().await?;
/// assert_eq!(h.status().await?, Status::Waiting { signal: "approval".into(), deadline: None });
/// rt.signal("r-1", "approval", &true).await?;
/// let out: Result<Decision, String> = h.result().await?;
/// assert_eq!(out, Ok(Decision::Approved));
/// # Ok(()) }
/// ```
pub struct WorkflowHandle<W: Workflow> {
    pub(crate) rt: Arc<Engine>,
    pub(crate) id: Arc<str>,
    workflow: W,
}

impl<W: Workflow> Clone for WorkflowHandle<W> {
    fn clone(&self) -> Self {
        WorkflowHandle {
            rt: self.rt.clone(),
            id: self.id.clone(),
            workflow: self.workflow,
        }
    }
}

impl<W: Workflow> std::fmt::Debug for WorkflowHandle<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkflowHandle")
            .field("workflow", &W::NAME)
            .field("id", &&*self.id)
            .finish()
    }
}

/// How long `result()` sleeps between checks when nothing notifies it.
const RESULT_POLL: Duration = Duration::from_millis(250);

/// What a run [`WorkflowHandle::result`] waits for may wait for: a timer
/// (the runtime's clock) or another execution's lease (the system's time).
#[derive(Debug, Clone, Copy)]
enum Wait {
    Timer(SystemTime),
    Lease(SystemTime),
}

impl<W: Workflow> WorkflowHandle<W> {
    pub(crate) fn new(rt: Arc<Engine>, workflow: W, id: &str) -> Self {
        WorkflowHandle {
            rt,
            id: Arc::from(id),
            workflow,
        }
    }

    /// The run id.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// # #[workflow]
    /// # async fn vendor_approval(ctx: &Ctx) {}
    /// let rt = Runtime::in_memory();
    /// assert_eq!(rt.handle(vendor_approval, "vendor-42").id(), "vendor-42");
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    async fn load(&self) -> Result<RunRecord, Error> {
        let run = self
            .rt
            .env
            .store
            .load_run(&self.id)
            .await?
            .ok_or_else(|| Error::unknown_run(&self.id))?;
        if run.workflow != W::NAME {
            return Err(Error::WorkflowMismatch {
                run: self.id.to_string(),
                expected: W::NAME.to_owned(),
                found: run.workflow,
            });
        }
        Ok(run)
    }

    /// The run's current status. A workflow that returned `Err` is
    /// [`Status::Failed`] with the error as text.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn check(ctx: &Ctx, n: i32) -> Result<i32, String> {
    ///     if n < 0 { Err(format!("{n} is negative")) } else { Ok(n) }
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(check, "neg", -1).await?;
    /// // Executing in the background from now on: queued, then running.
    /// h.result().await?;
    /// assert_eq!(h.status().await?, Status::Failed { error: "-1 is negative".into() });
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<Status, Error> {
        Ok(self.load().await?.status())
    }

    /// Waits for the run to end and returns the workflow's output.
    ///
    /// It only waits: the run executes in the background, on this runtime
    /// (which registers the workflow if it was not) or on another worker of
    /// the store, through its signals and timers. If the run waits
    /// for a signal that never comes, this keeps waiting: wrap it in
    /// `tokio::time::timeout` where that matters.
    ///
    /// - A workflow returning `Result<T, E>` that returned `Err(e)` gives
    ///   `Ok(Err(e))` here (its status is `Failed`);
    /// - a cancelled run gives [`Error::Cancelled`];
    /// - a run the runtime failed gives that error (for example
    ///   [`Error::Panicked`]);
    /// - on a runtime whose clock skips ([`TestClock::new`](crate::TestClock::new)),
    ///   waiting lets time jump: the runtime runs until it is idle,
    ///   skipping to each earliest timer (the run's, its children's), as
    ///   [`Runtime::run_until_idle`](crate::Runtime::run_until_idle) does;
    /// - a run parked because this runtime's code cannot resume its latest
    ///   checkpoint ([`Status::Incompatible`](crate::Status::Incompatible))
    ///   gives the refusal ([`Error::Incompatible`], [`Error::Decode`]) once
    ///   this code was tried on it (at once on a client-only runtime). The
    ///   run is not finished: it resumes by itself where matching code is
    ///   registered, and `result()` called after that waits for it.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn slow(ctx: &Ctx) -> u32 {
    ///     ctx.sleep(Duration::from_millis(10)).await;
    ///     42
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(slow, "s-1", ()).await?;
    /// // The runtime executes the run in the background; this waits out the timer.
    /// let out = tokio::time::timeout(Duration::from_secs(10), h.result()).await??;
    /// assert_eq!(out, 42);
    /// # Ok(()) }
    /// ```
    pub async fn result(&self) -> Result<W::Output, Error> {
        let inner = &self.rt;
        let mut store_rx = inner.env.store.subscribe();
        let mut local_rx = inner.subscribe_local();
        loop {
            store_rx.borrow_and_update();
            local_rx.borrow_and_update();
            let run = self.load().await?;
            let wait_until = match &run.state {
                RunState::Completed { output, .. } => {
                    return serde_json::from_slice(output).map_err(|e| Error::Decode {
                        workflow: W::NAME.to_owned(),
                        run: self.id.to_string(),
                        site: "<output>".to_owned(),
                        field: "output".to_owned(),
                        detail: e.to_string().into(),
                    });
                }
                RunState::Failed { error } => return Err(error.clone()),
                // Not finished: it resumes once code that matches is
                // registered. Once this runtime's code was tried on it (or
                // it cannot try: client-only), what keeps it is reported
                // rather than waited out.
                RunState::Parked { error }
                    if inner.client_only || inner.tried_parked(&run.id, run.latest_seq) =>
                {
                    return Err(error.clone())
                }
                RunState::Parked { .. } | RunState::Held => None,
                RunState::Cancelled => {
                    return Err(Error::Cancelled {
                        run: self.id.to_string(),
                    })
                }
                // A timer is on the runtime's clock, a lease on the system's.
                RunState::Sleeping { until } => Some(Wait::Timer(*until)),
                RunState::Waiting { deadline, .. } => deadline.map(Wait::Timer),
                RunState::Ready => run.lease.as_ref().map(|l| Wait::Lease(l.expires_at)),
            };
            if !inner.client_only && !inner.is_registered(W::NAME) {
                // The handle knows the workflow: make it executable here.
                inner.register(self.workflow);
            }
            // Executions happen in the background; this only waits.
            inner.ensure_background();
            let clock = &inner.env.clock;
            if inner.clock_skips() {
                // On a clock that skips (a test clock), waiting for a result
                // is what lets time jump: the runtime runs until it is idle,
                // skipping to each earliest timer (see `TestClock`): this
                // run's, or a child's it joins. Its
                // errors are those of other runs; this run's outcome is
                // read from the store. Then the wait below returns at once
                // if the run changed (or its timer is due), and never spins.
                let _ = inner.run_until_idle().await;
            }
            let wait = match wait_until {
                Some(Wait::Lease(t)) => t
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO),
                Some(Wait::Timer(t)) => t.duration_since(clock.now()).unwrap_or(Duration::ZERO),
                None => RESULT_POLL,
            }
            .clamp(Duration::from_millis(5), RESULT_POLL);
            let timer = async {
                match wait_until {
                    Some(Wait::Timer(t)) => clock.wait_until(t).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = store_rx.changed() => {}
                _ = local_rx.changed() => {}
                _ = timer => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}
