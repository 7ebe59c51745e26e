//! The [`Workflow`] trait, implemented by `#[workflow]`.

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::abi::SiteInfo;
use crate::frame::Frame;

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
    /// The version (`#[workflow(version = N)]`, 1 by default). Versions of
    /// one name can be registered side by side: a run starts on the version
    /// that started it and resumes on the highest registered version its
    /// latest checkpoint fits.
    const VERSION: u32 = 1;
    /// The checkpoint sites, in source order.
    #[doc(hidden)]
    const SITES: &'static [SiteInfo];

    /// Runs (or resumes) one execution of the workflow. `input` is `Some` on a
    /// fresh start and `None` when resuming from a checkpoint held by `frame`.
    #[doc(hidden)]
    fn run(self, frame: Frame, input: Option<Self::Input>) -> BoxFuture<'static, Self::Output>;

    /// For an output that is a `Result`, the text of its `Err` (the run's
    /// status is then `Failed` with it), otherwise `None`. `#[workflow]`
    /// generates it from the output type, so that aliases such as
    /// `anyhow::Result<T>` count too; a hand-written impl of a `Result`
    /// output may override it (the default: never an error).
    #[doc(hidden)]
    fn output_error(output: &Self::Output) -> Option<String> {
        let _ = output;
        None
    }
}

/// An output, for method resolution to pick [`ErrOutput`] when it is a
/// `Result` and [`PlainOutput`] otherwise (the code `#[workflow]` generates
/// for [`Workflow::output_error`]: `(&OutputProbe(output)).output_error()`).
#[doc(hidden)]
pub struct OutputProbe<'a, T>(pub &'a T);

/// The error text of a `Result` output: a string error as it is, any other
/// as its JSON.
#[doc(hidden)]
pub trait ErrOutput {
    /// `Some(text)` for `Err`, `None` for `Ok`.
    fn output_error(&self) -> Option<String>;
}

impl<T, E: Serialize> ErrOutput for OutputProbe<'_, Result<T, E>> {
    fn output_error(&self) -> Option<String> {
        let Err(e) = self.0 else { return None };
        Some(match serde_json::to_value(e) {
            Ok(serde_json::Value::String(s)) => s,
            Ok(other) => other.to_string(),
            Err(err) => format!("<an error that does not serialize: {err}>"),
        })
    }
}

/// Any output that is not a `Result`: never an error.
#[doc(hidden)]
pub trait PlainOutput {
    /// `None`.
    fn output_error(&self) -> Option<String> {
        None
    }
}

impl<T> PlainOutput for &OutputProbe<'_, T> {}

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
