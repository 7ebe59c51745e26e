//! [`Runtime`]: the entry point (its builder is in `builder.rs`).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::cancel::CancelChildren;
use crate::error::validate_id;
use crate::executor::Engine;
use crate::handle::WorkflowHandle;
use crate::run::Halt;
use crate::signal_catalog;
use crate::signal_types;
use crate::status::RunFilter;
use crate::store::{CancelRequest, Created, GcReport, NewRun, RunRecord, RunState, Store, Suspend};
use crate::workflow::{IntoWorkflow, Workflow};
use crate::{Error, StartOptions};

/// Runs workflows: starts them, executes and resumes them, delivers signals,
/// and answers questions about runs.
///
/// A `Runtime` is a cheap handle (an `Arc`): clone it into tasks freely. All
/// methods take `&self`.
///
/// A runtime executes the runnable runs of every workflow registered on it
/// (or started through it) in the background, in tokio tasks, from the first
/// [`register`](Runtime::register) or [`start`](Runtime::start) inside a
/// tokio runtime until it is [shut down](Runtime::shutdown) or its last clone
/// (and the last [`WorkflowHandle`]) is dropped: at most
/// [`concurrency`](crate::RuntimeBuilder::concurrency) at once. Opening a store and
/// registering its workflows resumes their unfinished runs with no further
/// call. [`run_until_idle`](Runtime::run_until_idle) waits until nothing it
/// may take is runnable, [`run_worker`](Runtime::run_worker) until shutdown;
/// a [`client_only`](crate::RuntimeBuilder::client_only) runtime never executes.
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
    pub(crate) inner: Arc<Engine>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("worker_id", &&*self.inner.env.worker)
            .field("store", &self.inner.env.store.kind())
            .field("lease_ttl", &self.inner.ttl)
            .field("active", &self.inner.active_count())
            .finish()
    }
}

impl Runtime {
    /// This runtime's worker id.
    ///
    /// ```
    /// let rt = checkpoint_runtime::Runtime::in_memory();
    /// assert_eq!(rt.worker_id(), checkpoint_runtime::DEFAULT_WORKER_ID);
    /// ```
    pub fn worker_id(&self) -> &str {
        &self.inner.env.worker
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
        self.inner.env.store.clone()
    }

    /// Registers a workflow so this runtime can execute and resume its runs
    /// by name: its unfinished runs in the store resume in the background
    /// from now on, with no further call. [`start`](Runtime::start)
    /// registers too. Several versions of one name
    /// (`#[workflow(name = .., version = N)]`) are registered side by side;
    /// another function with the same name and version replaces the earlier
    /// one.
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
        self.register_workflow(workflow.into_workflow());
    }

    /// [`register`](Runtime::register) for a workflow value.
    pub(crate) fn register_workflow<W: Workflow>(&self, workflow: W) {
        self.inner.register(workflow);
        self.inner.ensure_background();
    }

    /// Starts a run of `workflow` under `id` with `input` (its parameters
    /// after `ctx`: one bare, several as a tuple) and returns a handle. The run
    /// begins executing at once, in the background (see [`Runtime`]), on this
    /// runtime or on another worker of the same store; a
    /// [`client_only`](crate::RuntimeBuilder::client_only) runtime leaves it to them.
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
        self.start_encoded_with(workflow, id, input_json, StartOptions::default())
            .await
    }

    /// [`Runtime::start_encoded`] with start options (see `start_with.rs`).
    pub(crate) async fn start_encoded_with<W: Workflow>(
        &self,
        workflow: W,
        id: &str,
        input_json: Vec<u8>,
        options: StartOptions,
    ) -> Result<WorkflowHandle<W>, Error> {
        validate_id(id)?;
        options.validate(id)?;
        self.inner.register(workflow);
        create_run::<W>(&self.inner, id, input_json, options).await?;
        Ok(WorkflowHandle::new(self.inner.clone(), workflow, id))
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
        WorkflowHandle::new(self.inner.clone(), workflow.into_workflow(), id)
    }

    /// Stores a signal for run `id`; its payload is stored as JSON. A run
    /// waiting for `name` is resumed (by whichever worker runs); a signal that
    /// arrives before the run waits for it is kept until it does. Signals of
    /// one name are consumed in arrival order, each exactly once.
    ///
    /// A `name` that no wait site of the run's workflow takes (as the
    /// workers that registered it recorded them) is refused with
    /// [`Error::UnknownSignal`] and nothing is stored: a misspelt name would
    /// never be read. [`force_signal`](Runtime::force_signal) skips that check,
    /// for a wait site that code not deployed yet adds. A run that has ended
    /// refuses signals ([`Error::RunEnded`]).
    ///
    /// When the run is waiting for `name`, a payload its wait site could not
    /// decode is refused with [`Error::SignalPayload`] and nothing is stored:
    /// checked with the site's own type when this process ran the site, and
    /// otherwise against the schema of that type the site stored with the
    /// wait (a one-sided check: it refuses a value of the wrong kind, an
    /// integer out of range or a tuple of the wrong length, and leaves to the
    /// site what serde attributes may allow, such as a missing field).
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
    /// // The run has ended: a signal to it would never be read.
    /// let late = rt.signal("vendor-42", "finance_approval", &Approval { approved: false, reason: None });
    /// assert!(matches!(late.await, Err(Error::RunEnded { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn signal<T: Serialize + ?Sized>(
        &self,
        id: &str,
        name: &str,
        payload: &T,
    ) -> Result<(), Error> {
        self.send_signal(id, name, payload, true).await
    }

    /// [`signal`](Runtime::signal) without the check of `name` against the
    /// names the run's wait sites take: for a wait site that code not
    /// deployed yet adds (the signal is kept until the run waits for it).
    /// The payload is still checked where a site's type is known.
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
    /// rt.start(approval, "a-1", ()).await?;
    /// // No wait site of `approval` takes "escalate": refused...
    /// let refused = rt.signal("a-1", "escalate", &true).await;
    /// assert!(matches!(refused, Err(Error::UnknownSignal { .. })));
    /// // ...unless forced.
    /// rt.force_signal("a-1", "escalate", &true).await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_signal<T: Serialize + ?Sized>(
        &self,
        id: &str,
        name: &str,
        payload: &T,
    ) -> Result<(), Error> {
        self.send_signal(id, name, payload, false).await
    }

    async fn send_signal<T: Serialize + ?Sized>(
        &self,
        id: &str,
        name: &str,
        payload: &T,
        check_name: bool,
    ) -> Result<(), Error> {
        validate_id(name)?;
        crate::store::user_signal_name(id, name)?;
        let json = serde_json::to_vec(payload).map_err(|e| Error::SignalPayload {
            run: id.to_owned(),
            signal: name.to_owned(),
            detail: e.to_string(),
        })?;
        let store = &self.inner.env.store;
        self.inner.env.signal_catalog.flush(&**store).await;
        // An unknown run, or one that has ended: `put_signal` says so.
        if let Some(run) = store.load_run(id).await? {
            if !run.status().is_finished() {
                let schemas = match signal_catalog::check_name(&**store, &run, name).await {
                    Ok(schemas) => schemas,
                    Err(Error::UnknownSignal { .. }) if !check_name => Vec::new(),
                    Err(e) => return Err(e),
                };
                self.check_payload(&run, name, &json, &schemas).await?;
            }
        }
        store.put_signal(id, name, json).await
    }

    /// Refuses a payload that the run could not decode: when it waits for
    /// `name`, with the site's own decoder if this process ran the site, else
    /// with the payload type's schema that the site stored with the wait;
    /// when it does not (yet), against the schemas `schemas` that the
    /// catalog recorded for wait sites of that name (it must fit one). A
    /// schema check is one-sided: see [`crate::schema`]'s `check` for what it
    /// cannot see, which the site then decides.
    async fn check_payload(
        &self,
        run: &RunRecord,
        name: &str,
        json: &[u8],
        schemas: &[String],
    ) -> Result<(), Error> {
        let store = &self.inner.env.store;
        let id = run.id.as_str();
        let refused = |detail: String, site: &str| Error::SignalPayload {
            run: id.to_owned(),
            signal: name.to_owned(),
            detail: format!(
                "{detail}; run `{id}` of workflow `{}` {site}, and the signal was not stored",
                run.workflow
            ),
        };
        let waiting = matches!(&run.state, RunState::Waiting { signal, .. } if signal == name);
        if !waiting {
            let docs = store.schemas(schemas).await?;
            if docs.is_empty() {
                return Ok(()); // no site of that name ran yet: the site decides
            }
            let value: serde_json::Value = serde_json::from_slice(json).map_err(|e| {
                refused(
                    format!("the payload is not JSON: {e}"),
                    "does not wait for it yet",
                )
            })?;
            let mut first_refusal = None;
            for doc in docs.values() {
                match crate::schema::check_json(doc, &value) {
                    Ok(()) => return Ok(()),
                    Err(detail) => {
                        first_refusal.get_or_insert(detail);
                    }
                }
            }
            let detail = first_refusal.unwrap_or_default();
            return Err(refused(
                format!("{detail} (checked against the stored schema of the type its wait sites for `{name}` decode)"),
                "does not wait for it yet",
            ));
        }
        // A checkpoint that cannot be read (damaged) is not checked against:
        // the signal is stored, as for a site whose type is unknown.
        let Ok(Some(cp)) = store.latest_checkpoint(id).await else {
            return Ok(());
        };
        let at_site = format!("waits for it at site `{}`", cp.site_key);
        if let Some(check) = signal_types::check_for(&run.workflow, &cp.site_key) {
            return check(json).map_err(|detail| refused(detail, &at_site));
        }
        let Some(Suspend::Waiting {
            payload_schema: Some(key),
            ..
        }) = &cp.suspend
        else {
            return Ok(());
        };
        let docs = store.schemas(std::slice::from_ref(key)).await?;
        let Some(doc) = docs.get(key) else {
            return Ok(()); // not stored (its write failed): the site decides
        };
        let value: serde_json::Value = serde_json::from_slice(json)
            .map_err(|e| refused(format!("the payload is not JSON: {e}"), &at_site))?;
        crate::schema::check_json(doc, &value).map_err(|detail| {
            refused(
                format!("{detail} (checked against the payload type's stored schema)"),
                &at_site,
            )
        })
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
        self.inner.env.store.cancel(id).await?;
        if let Some(run) = self.inner.active_run(id) {
            run.halt(Halt::Stop);
        }
        Ok(())
    }

    /// Asks run `id` to cancel, with `reason`, giving it `grace` to clean
    /// up; its children are asked too ([`CancelChildren::Cascade`]; see
    /// [`Runtime::request_cancel_with`]). The request is durable (a field of
    /// the run's record, seen by whichever worker or process executes it):
    /// the body reads it with [`Ctx::cancel_requested`](crate::Ctx::cancel_requested),
    /// `ctx.sleep` and `ctx.wait_for_timeout` return at once (a sleeping or
    /// waiting run is woken), and the run ends [`Status::Cancelled`] when
    /// its body returns, whatever it returns. Past `grace` (on the runtime's
    /// clock) it is cancelled hard, as [`Runtime::cancel`] does, by whichever
    /// worker notices: the one executing it (which learns of the request at
    /// once, or with its next lease renewal when it is another process)
    /// stops its body, and a claim cancels it instead of executing it. A
    /// parked run ([`Status::Incompatible`]) is cancelled at once. Recorded as `CancelRequested` in the history;
    /// [`RunInfo::cancel_reason`](crate::RunInfo::cancel_reason) shows it.
    /// [`Error::CancelRefused`] (naming its status) for a finished run,
    /// [`Error::UnknownRun`] for an unknown id.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn booking(ctx: &Ctx) -> String {
    ///     ctx.sleep(Duration::from_secs(86_400)).await; // a day to pay
    ///     match ctx.cancel_requested() {
    ///         Some(reason) => format!("released: {reason}"),
    ///         None => "kept".to_owned(),
    ///     }
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(booking, "b-1", ()).await?;
    /// rt.run_until_idle().await?; // sleeping for a day
    /// rt.request_cancel("b-1", "customer cancelled", Duration::from_secs(30)).await?;
    /// rt.run_until_idle().await?; // woken at once; the body cleans up
    /// assert_eq!(h.status().await?, Status::Cancelled);
    /// // A finished run cannot be asked to cancel.
    /// let err = rt.request_cancel("b-1", "again", Duration::ZERO).await.unwrap_err();
    /// assert!(matches!(err, Error::CancelRefused { .. }));
    /// # Ok(()) }
    /// ```
    pub async fn request_cancel(
        &self,
        id: &str,
        reason: &str,
        grace: Duration,
    ) -> Result<(), Error> {
        self.request_cancel_with(id, reason, grace, CancelChildren::Cascade)
            .await
    }

    /// [`Runtime::request_cancel`], saying what happens to the run's
    /// children: [`CancelChildren::Cascade`] asks each unfinished child
    /// (and theirs) to cancel with the same reason and grace, and cancels
    /// them with the run if it is cancelled hard; [`CancelChildren::Abandon`]
    /// leaves them running, even when the run is cancelled hard.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn report(ctx: &Ctx) -> u32 {
    ///     let _: Option<u32> = ctx.wait_for_timeout("go", Duration::from_secs(60)).await;
    ///     1
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(report, "r-1", ()).await?;
    /// rt.run_until_idle().await?;
    /// rt.request_cancel_with("r-1", "not needed", Duration::from_secs(5), CancelChildren::Abandon)
    ///     .await?;
    /// rt.run_until_idle().await?;
    /// assert_eq!(rt.status("r-1").await?, Status::Cancelled);
    /// # Ok(()) }
    /// ```
    pub async fn request_cancel_with(
        &self,
        id: &str,
        reason: &str,
        grace: Duration,
        children: CancelChildren,
    ) -> Result<(), Error> {
        let now = self.inner.env.clock.now();
        let cascade = matches!(children, CancelChildren::Cascade);
        let req = CancelRequest::new(reason, now, grace, cascade);
        let store = &self.inner.env.store;
        store.request_cancel(id, req.clone()).await?;
        self.note_cancel_request(id, &req);
        if cascade {
            // Each descendant's request is durable on its own: a child
            // that ended meanwhile is skipped, not an error.
            let mut parents = vec![id.to_owned()];
            while let Some(parent) = parents.pop() {
                let children = self.runs(RunFilter::new().parent(&parent)).await?;
                for child in children {
                    if child.status.is_finished() {
                        continue;
                    }
                    match store.request_cancel(&child.id, req.clone()).await {
                        Ok(()) => self.note_cancel_request(&child.id, &req),
                        Err(Error::CancelRefused { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                    parents.push(child.id);
                }
            }
        }
        self.inner.ensure_background();
        Ok(())
    }

    /// Tells an execution of run `id` on this runtime about cancel request
    /// `req` at once (another process's learns of it at its next lease
    /// renewal, or its next claim).
    fn note_cancel_request(&self, id: &str, req: &CancelRequest) {
        if let Some(run) = self.inner.active_run(id) {
            run.note_cancel(req);
        }
    }

    /// Retries run `id` after a fix: a failed run (stopped by the runtime,
    /// or whose workflow returned `Err`) resumes from its latest checkpoint
    /// as a new attempt, with a signal it had consumed; a parked run
    /// ([`Status::Incompatible`]) is made runnable by any worker at once.
    /// Recorded as `Retried` in the history. [`Error::NotRetryable`] for a
    /// run in another state, [`Error::UnknownRun`] for an unknown id.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn flaky(ctx: &Ctx) -> u32 {
    ///     7
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(flaky, "f-1", ()).await?;
    /// assert_eq!(h.result().await?, 7);
    /// // A completed run has nothing to retry.
    /// assert!(matches!(rt.retry("f-1").await, Err(Error::NotRetryable { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn retry(&self, id: &str) -> Result<(), Error> {
        self.inner.env.store.retry(id).await?;
        self.inner.ensure_background();
        Ok(())
    }

    /// Executes runnable runs until this runtime has no run in progress and
    /// none it may take is runnable: each is finished, waiting for a signal,
    /// sleeping with a timer not yet due, held by another worker's live
    /// lease, or of a workflow not registered here. On a clock that skips
    /// ([`TestClock::new`](crate::TestClock::new)), a timer not yet due
    /// does not end it: the clock jumps to the earliest timer ahead and
    /// that run goes on, so it returns once no timer is left ahead.
    ///
    /// A store that keeps refusing this runtime's writes (disk full, a
    /// read-only file) is an [`Error::Store`] naming the run that cannot
    /// progress, not a quiet `Ok`: the run is retried and resumes as soon as
    /// writes succeed again. [`Error::ClientOnly`] on a client-only runtime.
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
    /// the worker reconnects and takes up its runs by itself. Store failures
    /// are told on stderr (`checkpoint-runtime: worker `ID`: ...`): the 1st,
    /// 2nd, 4th, 8th... in a row and the recovery, and a run that a store
    /// refusing writes (a full disk) keeps from progressing, naming it; the
    /// runtime resumes it at once when writes succeed again. It returns an
    /// error of another kind that keeps coming (10 in a row); the runtime
    /// keeps working meanwhile; call `run_worker` again to go on waiting.
    /// [`Error::ClientOnly`] on a client-only runtime.
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

    /// [`shutdown`](Runtime::shutdown), then waits until this runtime's
    /// background work has ended: its executions have handed their runs
    /// back and its worker loop has stopped. Dropping the last clone of the
    /// runtime afterwards closes the store at once (an SQLite file is then
    /// whole by itself, its write-ahead log folded back).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let rt = checkpoint_runtime::Runtime::in_memory();
    /// rt.close().await;
    /// assert!(rt.run_until_idle().await.is_ok()); // nothing runs any more
    /// # }
    /// ```
    pub async fn close(&self) {
        self.inner.close().await;
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
        self.inner.env.store.fork(id, seq, new_id).await
    }

    /// Reclaims storage that the retention policy
    /// ([`RuntimeBuilder::keep_checkpoints`](crate::RuntimeBuilder::keep_checkpoints)) freed but the store still holds:
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
        self.inner.env.store.gc().await
    }
}

/// Creates run `id` of `W` (registered) with `input_json` and `options`
/// (validated) unless it exists:
/// [`Error::WorkflowMismatch`] when a run of another workflow has that id.
/// Executes in the background from then on (unless client-only). Both
/// [`Runtime::start`] and a schedule's tick start runs this way.
pub(crate) async fn create_run<W: Workflow>(
    inner: &std::sync::Arc<crate::executor::Inner>,
    id: &str,
    input_json: Vec<u8>,
    options: StartOptions,
) -> Result<Created, Error> {
    inner.env.signal_catalog.flush(&*inner.env.store).await;
    let created = inner
        .env
        .store
        .create_run(NewRun {
            id: id.to_owned(),
            workflow: W::NAME.to_owned(),
            input: input_json.into(),
            version: W::VERSION,
            trace: inner.env.trace.as_ref().and_then(|p| p.current()),
            parent: None,
            max_running: None,
            options,
        })
        .await?;
    if let Created::Existing(run) = &created {
        if run.workflow != W::NAME {
            return Err(Error::WorkflowMismatch {
                run: id.to_owned(),
                expected: W::NAME.to_owned(),
                found: run.workflow.clone(),
            });
        }
    }
    inner.ensure_background();
    Ok(created)
}
