//! The [`Workflow`] trait, implemented by `#[workflow]`.

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::frame::{Frame, SiteInfo};

/// A workflow: a resumable `async fn`. Implemented by the `#[workflow]` macro
/// on a hidden zero-sized type; the function's name becomes a function item
/// implementing [`IntoWorkflow`], which can be passed to
/// [`Runtime::start`](crate::Runtime::start) and
/// [`Runtime::register`](crate::Runtime::register).
///
/// Implementing it by hand is possible but means writing the resumable state
/// machine yourself against the (hidden, unstable) `__private` interface; use
/// the macro:
///
/// ```
/// use checkpoint_runtime::prelude::*;
///
/// #[workflow]
/// async fn count(ctx: &Ctx, n: u64) -> u64 {
///     let mut total = 0;
///     for i in 0..n {
///         total += i;
///         checkpoint!("step");
///     }
///     total
/// }
///
/// // The function's name is a value naming the workflow.
/// fn name_of<I: IntoWorkflow>(_: I) -> &'static str {
///     <I::Workflow as Workflow>::NAME
/// }
/// assert_eq!(name_of(count), "count");
/// ```
pub trait Workflow: Copy + Send + Sync + 'static {
    /// The workflow's input: its parameters after `ctx` (one bare, several as a tuple).
    type Input: Serialize + DeserializeOwned + Send + 'static;
    /// The workflow's output (its return type).
    type Output: Serialize + DeserializeOwned + Send + 'static;
    /// The name runs are stored under.
    const NAME: &'static str;
    /// The checkpoint sites, in source order.
    #[doc(hidden)]
    const SITES: &'static [SiteInfo];

    /// Runs (or resumes) one execution of the workflow. `input` is `Some` on a
    /// fresh start and `None` when resuming from a checkpoint held by `frame`.
    #[doc(hidden)]
    fn run(self, frame: Frame, input: Option<Self::Input>) -> BoxFuture<'static, Self::Output>;
}

/// Something that names a workflow, as accepted by [`Runtime::start`](crate::Runtime::start),
/// [`Runtime::register`](crate::Runtime::register), [`Runtime::handle`](crate::Runtime::handle)
/// and the [`testing`](crate::testing) harness.
///
/// `#[workflow] async fn vendor_approval(..)` turns `vendor_approval` into a
/// function item that implements this trait, so the function's name is the
/// value that names the workflow: `rt.start(vendor_approval, "id", input)`.
/// (A function rather than a unit struct, so that a local variable elsewhere
/// in the module may still be called `vendor_approval`.)
///
/// A type that implements [`Workflow`] by hand implements this trait with
/// `type Workflow = Self`.
///
/// ```
/// use checkpoint_runtime::prelude::*;
///
/// #[workflow]
/// async fn greet(ctx: &Ctx, name: String) -> String {
///     format!("hello {name}")
/// }
///
/// assert_eq!(IntoWorkflow::name(greet), "greet");
/// ```
pub trait IntoWorkflow: Copy {
    /// The workflow named.
    type Workflow: Workflow;

    /// The workflow value.
    fn into_workflow(self) -> Self::Workflow;

    /// The name runs of this workflow are stored under.
    fn name(self) -> &'static str {
        <Self::Workflow as Workflow>::NAME
    }
}

/// Proof that a call comes from the runtime: the function `#[workflow]`
/// generates takes one, so user code cannot call it by mistake expecting the
/// original `async fn`.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct WorkflowToken(pub(crate) ());

impl<F, W> IntoWorkflow for F
where
    F: Fn(WorkflowToken) -> W + Copy,
    W: Workflow,
{
    type Workflow = W;

    fn into_workflow(self) -> W {
        self(WorkflowToken(()))
    }
}
