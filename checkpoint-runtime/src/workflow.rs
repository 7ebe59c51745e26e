//! The [`Workflow`] trait, implemented by `#[workflow]`.

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::frame::{Frame, SiteInfo};

/// A workflow: a resumable `async fn`. Implemented by the `#[workflow]` macro
/// on a zero-sized value named like the function, so that the function's name
/// can be passed to [`Runtime::start`](crate::Runtime::start) and
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
/// // The function's name is a value implementing `Workflow`.
/// fn name_of<W: Workflow>(_: W) -> &'static str {
///     W::NAME
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
