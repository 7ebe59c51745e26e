//! Starting runs with [`StartOptions`]: [`Runtime::start_with`] and
//! [`Ctx::spawn_with`].

use crate::child::Child;
use crate::handle::WorkflowHandle;
use crate::workflow::{IntoWorkflow, Workflow};
use crate::{Ctx, Error, Runtime, StartOptions};

impl Runtime {
    /// [`Runtime::start`] with [`StartOptions`]: tags, a queue, a priority,
    /// a start time, stored with the run. Returns what `start` returns;
    /// like it, idempotent per id (a run that exists keeps the options it
    /// was created with). Options that a store cannot keep (an empty tag
    /// key or queue name, control characters) are refused with
    /// [`Error::Misuse`] naming the run, and nothing is started.
    ///
    /// A run with a start time in the future is
    /// [`Status::Sleeping`](crate::Status::Sleeping) until then (on the
    /// runtime's [`Clock`](crate::Clock)) and holds no worker; any worker of
    /// the store starts it once the time has come.
    ///
    /// ```
    /// use std::time::Duration;
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn review(doc: String) -> usize {
    ///     doc.len()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let clock = TestClock::manual();
    /// let rt = Runtime::builder().clock(clock.clone()).in_memory();
    /// let when = Clock::now(&clock) + Duration::from_secs(3600);
    /// let opts = StartOptions::new().tag("tenant", "acme").queue("llm").priority(2).start_at(when);
    /// let h = rt.start_with(review, "review-9", "four".into(), opts).await?;
    /// assert!(matches!(h.status().await?, Status::Sleeping { until } if until == when));
    /// clock.advance(Duration::from_secs(3600));
    /// assert_eq!(h.result().await?, 4);
    /// let info = &rt.runs(RunFilter::new().tag("tenant", "acme")).await?[0];
    /// assert_eq!((info.queue.as_deref(), info.priority), (Some("llm"), 2));
    /// # Ok(()) }
    /// ```
    pub async fn start_with<I: IntoWorkflow>(
        &self,
        workflow: I,
        id: &str,
        input: <I::Workflow as Workflow>::Input,
        options: StartOptions,
    ) -> Result<WorkflowHandle<I::Workflow>, Error> {
        type W<I> = <I as IntoWorkflow>::Workflow;
        let json = serde_json::to_vec(&input).map_err(|e| Error::Encode {
            workflow: W::<I>::NAME.to_owned(),
            run: id.to_owned(),
            site: "<input>".to_owned(),
            field: "input".to_owned(),
            detail: e.to_string().into(),
        })?;
        self.start_encoded_with(workflow.into_workflow(), id, json, options)
            .await
    }
}

impl Ctx {
    /// [`Ctx::spawn`] with [`StartOptions`] for the child: its tags,
    /// queue, priority and start time (a child with a start time in the
    /// future sleeps until then; a join waits for it as for any child).
    /// Spawning a key that exists returns the existing child, with the
    /// options it was created with. Options a store cannot keep stop the
    /// execution with [`Error::Misuse`], as any spawn error does.
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn square(n: u64) -> u64 {
    ///     n * n
    /// }
    ///
    /// #[workflow]
    /// async fn squares(ctx: &Ctx, n: u64) -> u64 {
    ///     let mut children = Vec::new();
    ///     for i in 1..=n {
    ///         let opts = StartOptions::new().tag("batch", "squares").priority(i as i32);
    ///         children.push(ctx.spawn_with(square, &i.to_string(), i, opts).await);
    ///     }
    ///     let results = ctx.join_all(children).await;
    ///     results.into_iter().map(|r| r.unwrap_or(0)).sum()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// assert_eq!(rt.start(squares, "s", 3).await?.result().await?, 14);
    /// assert_eq!(rt.runs(RunFilter::new().tag("batch", "squares")).await?.len(), 3);
    /// # Ok(()) }
    /// ```
    pub async fn spawn_with<I: IntoWorkflow>(
        &self,
        workflow: I,
        key: &str,
        input: <I::Workflow as Workflow>::Input,
        options: StartOptions,
    ) -> Child<I::Workflow> {
        let spawned = self.try_spawn(workflow.into_workflow(), key, input, None, options);
        self.or_halt(spawned.await).await
    }
}
