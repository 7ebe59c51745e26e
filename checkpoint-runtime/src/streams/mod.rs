//! Progress and streams: `ctx.set_progress` and `ctx.emit` inside a
//! workflow, [`WorkflowHandle::progress`](crate::WorkflowHandle::progress)
//! and [`Runtime::stream`](crate::Runtime::stream) outside it.
//!
//! An emitted item gets the run's next index at once, reaches readers in
//! this process at once, and is stored soon after by a background flush,
//! and at the latest before the next checkpoint is stored (so it is
//! durable with it). After a crash, a resumed execution first discards the
//! items stored since the checkpoint it resumes from; its segment runs
//! again and emits them again under the same indexes, so a reader that
//! reconnects from its next index sees each index once. The progress is
//! stored with the next checkpoint (and at the run's end).

mod ctx;
pub(crate) mod flush;
pub(crate) mod live;
mod reader;

pub use reader::RunStream;
