//! Child runs (fan-out): [`Ctx::spawn`] starts a run of another workflow
//! as a child of the running one, and `ctx.join(child)` /
//! `ctx.join_all(children)` wait durably for children to end.
//!
//! A child is an ordinary run with id `"{parent}/{key}"`: spawning a key
//! again returns the same child, so a segment of the parent that runs again
//! after a crash starts nothing twice. A join is a suspension point: the
//! parent's execution ends, and the store wakes it (with its children's
//! outcomes, read in the transaction that ends the last of them) when they
//! have all ended, in whichever process.

use std::marker::PhantomData;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ctx::{AwaitInWorkflowBody, Ctx, InWorkflowBody};
use crate::error::validate_id;
use crate::registry::Registry;
use crate::run::Halt;
use crate::store::{Created, NewRun};
use crate::workflow::{IntoWorkflow, Workflow};
use crate::Error;

/// A child run spawned by [`Ctx::spawn`]: its id, typed by its workflow,
/// so that joining it yields that workflow's output. Serializable (as the
/// id), so it may be a live local across checkpoints.
pub struct Child<W> {
    id: String,
    _workflow: PhantomData<fn() -> W>,
}

impl<W> Child<W> {
    pub(crate) fn new(id: String) -> Self {
        Child {
            id,
            _workflow: PhantomData,
        }
    }

    /// The child's run id, `"{parent}/{key}"`.
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn double(n: u64) -> u64 {
    ///     n * 2
    /// }
    ///
    /// #[workflow]
    /// async fn parent(ctx: &Ctx) -> String {
    ///     let child = ctx.spawn(double, "a", 21).await;
    ///     child.id().to_owned()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// assert_eq!(rt.start(parent, "p", ()).await?.result().await?, "p/a");
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl<W> Clone for Child<W> {
    fn clone(&self) -> Self {
        Child::new(self.id.clone())
    }
}

impl<W> PartialEq for Child<W> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl<W> Eq for Child<W> {}

impl<W> std::fmt::Debug for Child<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Child").field(&self.id).finish()
    }
}

impl<W> Serialize for Child<W> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.id.serialize(s)
    }
}

impl<'de, W> Deserialize<'de> for Child<W> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Child::new)
    }
}

/// Why a joined child has no output of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum ChildError {
    /// The runtime stopped the child (it panicked, or could not be
    /// loaded). A child whose workflow returned `Err` has an output: the
    /// join yields `Ok(Err(..))`.
    #[error("child run `{run}` failed: {error}")]
    Failed {
        /// The child's run id.
        run: String,
        /// Why.
        error: String,
    },
    /// The child was cancelled.
    #[error("child run `{run}` was cancelled")]
    Cancelled {
        /// The child's run id.
        run: String,
    },
    /// The store has no such run (it was never spawned, or was deleted).
    #[error("child run `{run}` does not exist")]
    Missing {
        /// The child's run id.
        run: String,
    },
}

impl Ctx {
    /// Starts a child run of `workflow` with `input`, with id
    /// `"{this run's id}/{key}"`, and returns it; any worker that has the
    /// workflow registered may execute it (this runtime registers it).
    /// Spawning a key that exists returns the existing child and starts
    /// nothing, so a crash between the spawn and the next checkpoint does
    /// not start a child twice. Join it with `ctx.join(child).await` or
    /// `ctx.join_all(children).await`; cancelling the parent cancels its
    /// unfinished children.
    ///
    /// A store error, or a key taken by a run of another workflow or
    /// another parent, stops the execution as any store error does (it is
    /// retried, or the run fails with that error).
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
    /// async fn sum_of_squares(ctx: &Ctx, n: u64) -> u64 {
    ///     let mut children = Vec::new();
    ///     for i in 1..=n {
    ///         children.push(ctx.spawn(square, &i.to_string(), i).await);
    ///     }
    ///     let results = ctx.join_all(children).await; // suspends until all ended
    ///     results.into_iter().map(|r| r.unwrap_or(0)).sum()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// assert_eq!(rt.start(sum_of_squares, "s", 3).await?.result().await?, 14);
    /// # Ok(()) }
    /// ```
    pub async fn spawn<I: IntoWorkflow>(
        &self,
        workflow: I,
        key: &str,
        input: <I::Workflow as Workflow>::Input,
    ) -> Child<I::Workflow> {
        let spawned = self.try_spawn(
            workflow.into_workflow(),
            key,
            input,
            None,
            Default::default(),
        );
        self.or_halt(spawned.await).await
    }

    /// Suspends the run until `child` has ended and returns its output, or
    /// a [`ChildError`] when it has none (it failed or was cancelled). An
    /// implicit checkpoint; like [`Ctx::wait_for`], only where `#[workflow]`
    /// rewrites it, directly in the body.
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn review(doc: String) -> usize {
    ///     doc.len()
    /// }
    ///
    /// #[workflow]
    /// async fn one_review(ctx: &Ctx, doc: String) -> Result<usize, ChildError> {
    ///     let child = ctx.spawn(review, "review", doc).await;
    ///     let out: Result<usize, ChildError> = ctx.join(child).await;
    ///     out
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(one_review, "r", "four".to_owned()).await?;
    /// assert_eq!(h.result().await?, Ok(4));
    /// # Ok(()) }
    /// ```
    pub fn join<W: Workflow>(
        &self,
        child: Child<W>,
    ) -> AwaitInWorkflowBody<Result<W::Output, ChildError>>
    where
        for<'a> AwaitInWorkflowBody<&'a ()>: InWorkflowBody,
    {
        let _ = child;
        AwaitInWorkflowBody::new()
    }

    /// Suspends the run until every one of `children` has ended and returns
    /// their outcomes in the same order (see [`Ctx::join`]). An implicit
    /// checkpoint, only directly in a `#[workflow]` body.
    ///
    /// See [`Ctx::spawn`] for an example.
    pub fn join_all<W: Workflow>(
        &self,
        children: impl IntoIterator<Item = Child<W>>,
    ) -> AwaitInWorkflowBody<Vec<Result<W::Output, ChildError>>>
    where
        for<'a> AwaitInWorkflowBody<&'a ()>: InWorkflowBody,
    {
        let _ = children.into_iter();
        AwaitInWorkflowBody::new()
    }

    /// Like [`Ctx::spawn`], with a bound: at most `max_running` of this
    /// run's children run at once (those not ended; whatever bound each
    /// was spawned with). A child spawned beyond it is
    /// [`Status::Held`](crate::Status::Held): it holds no worker slot and
    /// starts, in spawn order, when a running one ends. The parent itself,
    /// waiting in a join, holds none either.
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn process(item: u64) -> u64 {
    ///     item + 1
    /// }
    ///
    /// #[workflow]
    /// async fn batch(ctx: &Ctx, items: Vec<u64>) -> u64 {
    ///     let mut children = Vec::new();
    ///     for item in items {
    ///         // Two at a time; the others wait, held, for a free slot.
    ///         children.push(ctx.spawn_limited(process, &item.to_string(), item, 2).await);
    ///     }
    ///     let outcomes = ctx.join_all(children).await;
    ///     outcomes.into_iter().map(|o| o.unwrap_or(0)).sum()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(batch, "b", (1..=10).collect()).await?;
    /// assert_eq!(h.result().await?, (2..=11).sum::<u64>());
    /// # Ok(()) }
    /// ```
    pub async fn spawn_limited<I: IntoWorkflow>(
        &self,
        workflow: I,
        key: &str,
        input: <I::Workflow as Workflow>::Input,
        max_running: u32,
    ) -> Child<I::Workflow> {
        let spawned = self.try_spawn(
            workflow.into_workflow(),
            key,
            input,
            Some(max_running),
            Default::default(),
        );
        self.or_halt(spawned.await).await
    }

    /// The spawned child, or the execution stops with the error (as any
    /// store error stops it).
    pub(crate) async fn or_halt<W>(&self, spawned: Result<Child<W>, Error>) -> Child<W> {
        match spawned {
            Ok(child) => child,
            Err(e) => {
                self.run.halt(Halt::from_error(e, false));
                std::future::pending().await
            }
        }
    }

    pub(crate) async fn try_spawn<W: Workflow>(
        &self,
        workflow: W,
        key: &str,
        input: W::Input,
        max_running: Option<u32>,
        options: crate::StartOptions,
    ) -> Result<Child<W>, Error> {
        let parent = &*self.run.id;
        let id = format!("{parent}/{key}");
        if key.is_empty() {
            return Err(Error::InvalidId {
                id,
                reason: "a child's key must not be empty".to_owned(),
            });
        }
        validate_id(&id)?;
        options.validate(&id)?;
        let json = serde_json::to_vec(&input).map_err(|e| Error::Encode {
            workflow: W::NAME.to_owned(),
            run: id.clone(),
            site: "<input>".to_owned(),
            field: "input".to_owned(),
            detail: e.to_string().into(),
        })?;
        if let Some(registry) = self.run.env.registry.downcast_ref::<Registry>() {
            if registry.register(workflow) {
                self.run.env.signal_catalog.register(W::NAME, W::SITES);
            }
        }
        self.run
            .env
            .signal_catalog
            .flush(&*self.run.env.store)
            .await;
        let created = self
            .run
            .env
            .store
            .create_run(NewRun {
                id: id.clone(),
                workflow: W::NAME.to_owned(),
                input: json.into(),
                version: W::VERSION,
                trace: None,
                parent: Some(parent.to_owned()),
                max_running,
                options,
            })
            .await?;
        if let Created::Existing(run) = created {
            if run.workflow != W::NAME {
                return Err(Error::WorkflowMismatch {
                    run: id,
                    expected: W::NAME.to_owned(),
                    found: run.workflow,
                });
            }
            if run.parent.as_deref() != Some(parent) {
                return Err(Error::AlreadyExists { run: id });
            }
        }
        Ok(Child::new(id))
    }
}
