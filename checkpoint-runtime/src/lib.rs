//! Checkpointed async workflows: write an ordinary `async fn`, mark it
//! `#[workflow]`, put `checkpoint!()` where state is worth saving, and the
//! runtime resumes it from its latest checkpoint after a crash, a restart, a
//! pause for human approval or a move to another worker.
//!
//! ```
//! use checkpoint_runtime::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Serialize, Deserialize)]
//! struct Vendor { name: String, tasks: Vec<String> }
//! #[derive(Serialize, Deserialize)]
//! struct Approval { approved: bool, reason: String }
//! #[derive(Debug, PartialEq, Serialize, Deserialize)]
//! enum Decision { Approved { security: String, done: Vec<String> }, Rejected(String) }
//! #[derive(Debug, PartialEq, Serialize, Deserialize)]
//! struct ReviewError(String);
//!
//! async fn security_review(v: &Vendor) -> Result<String, ReviewError> {
//!     Ok(format!("{}: no findings", v.name))
//! }
//! async fn run_task(task: &str) -> Result<String, ReviewError> {
//!     Ok(format!("{task}: done"))
//! }
//!
//! #[workflow]
//! async fn vendor_approval(ctx: &Ctx, vendor: Vendor) -> Result<Decision, ReviewError> {
//!     let security = security_review(&vendor).await?;
//!     checkpoint!("security_reviewed");
//!     let approval: Approval = ctx.wait_for("finance_approval").await; // suspends durably
//!     if !approval.approved {
//!         return Ok(Decision::Rejected(approval.reason));
//!     }
//!     let mut done = Vec::new();
//!     for task in &vendor.tasks {
//!         done.push(run_task(task).await?);
//!         checkpoint!("task_done");
//!     }
//!     Ok(Decision::Approved { security, done })
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Error> {
//! let rt = Runtime::in_memory();
//! let vendor = Vendor { name: "acme".into(), tasks: vec!["contract".into(), "bank details".into()] };
//! let h = rt.start(vendor_approval, "vendor-42", vendor).await?;
//! rt.run_until_idle().await?; // runs until it waits for the approval
//! assert_eq!(h.status().await?, Status::Waiting { signal: "finance_approval".into(), deadline: None });
//!
//! // Later, perhaps in another process: a fresh runtime over the same store.
//! let rt = Runtime::builder().store(rt.store()).in_memory();
//! rt.register(vendor_approval);
//! rt.signal("vendor-42", "finance_approval", &Approval { approved: true, reason: String::new() }).await?;
//! let decision = rt.handle(vendor_approval, "vendor-42").result().await?; // resumes, finishes
//! assert!(matches!(decision, Ok(Decision::Approved { .. })));
//! assert_eq!(rt.checkpoints("vendor-42").await?.len(), 4);
//! # Ok(()) }
//! ```
//!
//! # How runs behave
//!
//! - **Execution.** A runtime executes the runnable runs of the workflows
//!   registered on it (or started through it) in the background, in tokio
//!   tasks: [`Runtime::start`] begins a run at once, and a runtime that opens
//!   a store and [registers](Runtime::register) a workflow resumes that
//!   workflow's unfinished runs with no further call.
//!   [`WorkflowHandle::result`] only waits; [`Runtime::run_until_idle`]
//!   (tests, scripts) returns once nothing this runtime may take is runnable,
//!   [`Runtime::run_worker`] keeps going until shutdown. A
//!   [`client_only`](RuntimeBuilder::client_only) runtime never executes.
//! - **Checkpoints** are stored before `checkpoint!()` returns. After a crash
//!   the run resumes from its latest checkpoint, so code since then runs again
//!   (at least once per segment); use [`Ctx::idempotency_key`] to deduplicate
//!   external calls. [`Ctx::attempt`] tells whether a segment is re-running.
//!   Every version is kept unless [`RuntimeBuilder::keep_checkpoints`] says
//!   otherwise.
//! - **Signals** ([`Runtime::signal`]) are stored as JSON and kept until a
//!   `ctx.wait_for` of that name consumes them, oldest first, each exactly once.
//!   A name that no wait site of the run's workflow takes is refused
//!   ([`Error::UnknownSignal`], nothing stored) unless sent with
//!   [`Runtime::force_signal`]. A signal to a run that has ended is refused
//!   ([`Error::RunEnded`], naming its status), never stored to wait forever.
//!   A payload the waiting site cannot decode is refused when sent
//!   ([`Error::SignalPayload`]) as far as its type is known then; one that
//!   gets through and does not decode as the awaited type is rejected (an
//!   [`Event::SignalRejected`] in the history) and the run keeps waiting.
//! - **Timers** (`ctx.sleep`, `ctx.wait_for_timeout`) are durable: the run is
//!   suspended and resumed by any worker once due, by the runtime's
//!   [`Clock`]. Tests give the runtime a [`TestClock`]
//!   ([`RuntimeBuilder::clock`], [`testing::Harness::virtual_time`]): timers
//!   then fire at once, in deadline order, or when the test advances it.
//! - **Workers and leases.** A claimed run is leased to its worker and the
//!   lease is renewed while it executes; another worker takes it over when the
//!   lease expires, and every write is fenced by an epoch so the old worker can
//!   no longer change it. A restarted runtime with the same worker id (a newer
//!   instance) takes its old runs over at once.
//! - **Outcomes.** A workflow returning `Result::Err` is a *failed* run
//!   ([`Status::Failed`] with the error as text) whose output is still stored:
//!   [`WorkflowHandle::result`] gives `Ok(Err(e))`. A run stopped by the
//!   runtime (an undecodable checkpoint, panics through every attempt, a
//!   misused API) is also `Failed`, and `result()` gives that [`Error`]. A
//!   panic is retried from the latest checkpoint up to
//!   [`RuntimeBuilder::max_attempts`] times.
//! - **Compatibility.** Before resuming, the stored site, loop depth and the
//!   names and types of the saved fields are checked against the code,
//!   before any user code runs. A checkpoint that no registered version of
//!   the workflow can resume *parks* the run ([`Status::Incompatible`],
//!   naming the workflow, site and field; `result()` gives
//!   [`Error::Incompatible`]): nothing of it changes, and it resumes by
//!   itself once matching code is registered (a rollback or a fix).
//!   [`Runtime::check_compatibility`] lists such runs before a deploy.
//! - **Encodings.** Checkpoint fields are postcard; inputs, outputs and signal
//!   payloads are JSON.
//!
//! # Stores and features
//!
//! [`Runtime::open`] picks the store from a URL ([`store::StoreUrl`]): a file
//! path is an SQLite file (feature `sqlite`, on by default), `postgres://...`
//! a PostgreSQL database (feature `postgres`, off by default), `":memory:"`
//! the in-memory store (always built). A URL whose backend this build leaves
//! out is an [`Error::UnsupportedStore`] naming the feature. The `cli`
//! feature (on by default) builds the `checkpoint` command; the `http`
//! feature (off by default) the module `http`: a JSON API and a web page
//! over a store as one axum router, which `checkpoint serve` serves.
//!
//! Modules: [`store`] (the storage boundary and its backends), [`clock`]
//! (durable time, and what stays on real time), [`testing`]
//! (a harness that crashes a workflow after every checkpoint and checks that
//! it resumes to the same result), `http` (feature `http`) and `json` (the
//! JSON shapes the command line and the HTTP API share; features `cli` or
//! `http`); the rest is re-exported at the crate root and in [`prelude`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod abi;
mod builder;
mod cancel;
mod child;
pub mod clock;
mod codec;
mod compatibility;
mod conclude;
mod ctx;
mod error;
mod exactness;
mod executor;
mod frame;
mod handle;
mod history;
#[cfg(feature = "http")]
pub mod http;
mod inspect;
mod iteration;
#[cfg(any(feature = "cli", feature = "http"))]
pub mod json;
mod launch;
mod lease_keeper;
pub mod observe;
#[cfg(feature = "otel")]
pub mod otel;
mod queue;
mod registry;
mod retry;
mod run;
mod runtime;
mod save;
mod schedule;
mod schedule_registry;
mod scheduler;
pub mod schema;
mod signal_catalog;
mod signal_types;
mod start_options;
mod start_with;
mod status;
pub mod store;
mod streams;
pub mod testing;
mod type_names;
mod workflow;

pub use builder::{RuntimeBuilder, DEFAULT_CONCURRENCY, DEFAULT_WORKER_ID};
pub use cancel::CancelChildren;
pub use child::{Child, ChildError};
pub use clock::{Clock, SystemClock, TestClock};
pub use compatibility::Incompatibility;
pub use ctx::{AwaitInWorkflowBody, Ctx, InWorkflowBody};
pub use error::Error;
pub use handle::WorkflowHandle;
pub use history::{CheckpointInfo, Event, FieldInfo, HistoryEntry};
pub use queue::Queue;
pub use retry::{RetryError, RetryPolicy};
pub use runtime::Runtime;
pub use schedule::{CatchUp, Overlap, Schedule, ScheduleInfo, Tick, MISSED_AFTER};
pub use schema::FieldJson;
pub use start_options::StartOptions;
pub use status::{RunFilter, RunInfo, Status, StatusKind};
pub use streams::RunStream;
pub use type_names::readable_type_name;
pub use workflow::{IntoWorkflow, Workflow};

pub use checkpoint_macros::{checkpoint, workflow};

/// Everything a workflow author needs: `use checkpoint_runtime::prelude::*;`.
///
/// ```
/// use checkpoint_runtime::prelude::*;
/// let rt: Runtime = Runtime::in_memory();
/// # let _ = rt;
/// ```
pub mod prelude {
    pub use crate::RunStream;
    pub use crate::{
        checkpoint, workflow, CancelChildren, CatchUp, CheckpointInfo, Child, ChildError, Clock,
        Ctx, Error, Event, FieldInfo, FieldJson, IntoWorkflow, Overlap, RetryError, RetryPolicy,
        RunFilter, RunInfo, Runtime, RuntimeBuilder, Schedule, Status, StatusKind, SystemClock,
        TestClock, Tick, Workflow, WorkflowHandle,
    };
    pub use crate::{Queue, StartOptions};
}

/// The interface generated code uses. Not a public API: it may change in any
/// release.
#[doc(hidden)]
pub mod __private {
    pub use crate::abi::{
        encode, encode_typed, Encoded, Encoder, FieldPlan, SiteInfo, SiteKind, Slot,
    };
    pub use crate::exactness::{transient_probe, IteratorTransient, NotAnIterator};
    pub use crate::frame::join::{load_join, load_join_all};
    pub use crate::frame::resume::{load, load_signal, load_signal_timeout};
    pub use crate::frame::{diverged, missing_input, Frame};
    pub use crate::iteration::{
        advance_writing_back, bind_through, order_probe, restore_through, save_through,
        CanonicalIfHashed, Fingerprinted, HashOrdered, ItemPart, ItemProbe, KeepsOrder,
        NotFingerprinted, Reborrow, SourceOrdered, WrittenItems, LOOP_ITEMS,
    };
    pub use crate::save::{type_of, type_of_slot, Save, SaveOps, TypeOf};
    pub use crate::workflow::{ErrOutput, OutputProbe, PlainOutput, WorkflowToken};
    pub use futures;
    pub use futures::future::BoxFuture;
    pub use serde;
    pub use serde_json;
}

// The runtime's tests write `#[workflow]` functions, whose expansion names
// this crate as `::checkpoint_runtime`.
#[cfg(test)]
extern crate self as checkpoint_runtime;
#[cfg(test)]
mod tests;
