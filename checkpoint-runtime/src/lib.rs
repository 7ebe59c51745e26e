//! Checkpointed async workflows: write an ordinary `async fn`, mark it
//! `#[workflow]`, put `checkpoint!()` where state is worth saving, and the
//! runtime resumes it from its latest checkpoint after a crash, a restart, a
//! pause for human approval or a move to another worker.
//!
//! ```ignore
//! use checkpoint_runtime::prelude::*;
//!
//! #[workflow]
//! async fn vendor_approval(ctx: &Ctx, vendor: Vendor) -> Result<Decision, ReviewError> {
//!     let security = security_review(&vendor).await?;
//!     checkpoint!("security_reviewed");
//!     let approval: Approval = ctx.wait_for("finance_approval").await; // suspends durably
//!     if !approval.approved {
//!         return Ok(Decision::Rejected(approval.reason));
//!     }
//!     Ok(Decision::Approved { security })
//! }
//!
//! let rt = Runtime::in_memory();
//! let h = rt.start(vendor_approval, "vendor-42", vendor).await?;
//! rt.run_until_idle().await?;                        // runs until it waits
//! rt.signal("vendor-42", "finance_approval", &approval).await?;
//! let decision = h.result().await?;                  // resumes and finishes
//! ```
//!
//! Modules: [`store`] (the storage boundary and its backends), [`testing`]
//! (a harness that crashes a workflow after every checkpoint and checks that
//! it resumes to the same result); the rest is re-exported at the crate root
//! and in [`prelude`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod ctx;
mod error;
mod executor;
mod frame;
mod handle;
mod history;
mod runtime;
mod status;
pub mod store;
pub mod testing;
mod workflow;

pub use ctx::Ctx;
pub use error::Error;
pub use handle::WorkflowHandle;
pub use history::{CheckpointInfo, Event, FieldInfo, HistoryEntry};
pub use runtime::{Runtime, RuntimeBuilder, DEFAULT_WORKER_ID};
pub use status::{RunFilter, RunInfo, Status, StatusKind};
pub use workflow::Workflow;

pub use checkpoint_macros::{checkpoint, workflow};

/// Everything a workflow author needs: `use checkpoint_runtime::prelude::*;`.
///
/// ```
/// use checkpoint_runtime::prelude::*;
/// let rt: Runtime = Runtime::in_memory();
/// # let _ = rt;
/// ```
pub mod prelude {
    pub use crate::{
        checkpoint, workflow, CheckpointInfo, Ctx, Error, Event, FieldInfo, RunFilter, RunInfo,
        Runtime, RuntimeBuilder, Status, StatusKind, Workflow, WorkflowHandle,
    };
}

/// The interface generated code uses. Not a public API: it may change in any
/// release.
#[doc(hidden)]
pub mod __private {
    pub use crate::frame::{
        diverged, encode, load, load_signal, load_signal_timeout, missing_input, Encoded, Encoder,
        Frame, SiteInfo, SiteKind, Slot,
    };
    pub use futures;
    pub use futures::future::BoxFuture;
    pub use serde;
    pub use serde_json;
}

#[cfg(test)]
mod tests;
