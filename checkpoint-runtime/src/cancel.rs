//! Cancellation a workflow sees: what a cancel request does to a run's
//! children ([`CancelChildren`]). The request itself is a field of the
//! run's record (`store::CancelRequest`), set by
//! [`Runtime::request_cancel`](crate::Runtime::request_cancel) through
//! `store::rules::request_cancel`.

/// What a cancel request does to the run's children
/// ([`Runtime::request_cancel_with`](crate::Runtime::request_cancel_with)).
///
/// ```
/// # use std::time::Duration;
/// # use checkpoint_runtime::prelude::*;
/// #[workflow]
/// async fn parent(ctx: &Ctx) -> u32 {
///     let _: Option<u32> = ctx.wait_for_timeout("go", Duration::from_secs(60)).await;
///     1
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let rt = Runtime::in_memory();
/// rt.start(parent, "p-1", ()).await?;
/// rt.run_until_idle().await?;
/// // Children keep running; only `p-1` is asked to cancel.
/// rt.request_cancel_with("p-1", "superseded", Duration::from_secs(5), CancelChildren::Abandon)
///     .await?;
/// rt.run_until_idle().await?;
/// assert_eq!(rt.status("p-1").await?, Status::Cancelled);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CancelChildren {
    /// Each unfinished child (and theirs) is asked to cancel too, with the
    /// same reason and grace; a hard cancel of the run cancels them.
    #[default]
    Cascade,
    /// The children go on running, even when the run is cancelled hard.
    Abandon,
}
