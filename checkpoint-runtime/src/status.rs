//! The status of a run as users see it, and run listings.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// Where a run stands.
///
/// A workflow whose output is a `Result` and which returned `Err` is reported as
/// [`Status::Failed`] (the design treats an `Err` output as a failed run), with
/// the error rendered as text; its handle's
/// [`result`](crate::WorkflowHandle::result) still gives `Ok(Err(e))`, the
/// workflow's own output.
///
/// ```
/// use checkpoint_runtime::Status;
///
/// let s = Status::Waiting { signal: "finance_approval".into() };
/// assert!(!s.is_finished());
/// assert!(Status::Completed.is_finished());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Status {
    /// Started and not finished: executing, runnable, or held by a worker.
    Running,
    /// Suspended until the named signal arrives (possibly with a deadline).
    Waiting {
        /// The signal name.
        signal: String,
    },
    /// Suspended on a durable timer.
    Sleeping {
        /// When the timer is due.
        until: SystemTime,
    },
    /// Finished with its output.
    Completed,
    /// Failed: returned `Err`, or was stopped by the runtime (incompatible
    /// checkpoint, undecodable state, repeated panics, ...).
    Failed {
        /// The error, as text.
        error: String,
    },
    /// Cancelled by [`Runtime::cancel`](crate::Runtime::cancel).
    Cancelled,
}

impl Status {
    /// `true` for `Completed`, `Failed` and `Cancelled`: the run will not run again.
    ///
    /// ```
    /// use checkpoint_runtime::Status;
    /// assert!(Status::Cancelled.is_finished());
    /// assert!(!Status::Running.is_finished());
    /// ```
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            Status::Completed | Status::Failed { .. } | Status::Cancelled
        )
    }

    /// The variant without its data, for filtering.
    ///
    /// ```
    /// use checkpoint_runtime::{Status, StatusKind};
    /// assert_eq!(Status::Completed.kind(), StatusKind::Completed);
    /// ```
    pub fn kind(&self) -> StatusKind {
        match self {
            Status::Running => StatusKind::Running,
            Status::Waiting { .. } => StatusKind::Waiting,
            Status::Sleeping { .. } => StatusKind::Sleeping,
            Status::Completed => StatusKind::Completed,
            Status::Failed { .. } => StatusKind::Failed,
            Status::Cancelled => StatusKind::Cancelled,
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Running => f.write_str("running"),
            Status::Waiting { signal } => write!(f, "waiting for signal `{signal}`"),
            Status::Sleeping { until } => match until.duration_since(SystemTime::now()) {
                Ok(left) => write!(f, "sleeping ({:.3}s left)", left.as_secs_f64()),
                Err(_) => f.write_str("sleeping (due)"),
            },
            Status::Completed => f.write_str("completed"),
            Status::Failed { error } => write!(f, "failed: {error}"),
            Status::Cancelled => f.write_str("cancelled"),
        }
    }
}

/// A [`Status`] variant without its data.
///
/// ```
/// use checkpoint_runtime::{RunFilter, StatusKind};
/// let only_waiting = RunFilter::new().status(StatusKind::Waiting);
/// # let _ = only_waiting;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum StatusKind {
    /// See [`Status::Running`].
    Running,
    /// See [`Status::Waiting`].
    Waiting,
    /// See [`Status::Sleeping`].
    Sleeping,
    /// See [`Status::Completed`].
    Completed,
    /// See [`Status::Failed`].
    Failed,
    /// See [`Status::Cancelled`].
    Cancelled,
}

/// Which runs [`Runtime::runs`](crate::Runtime::runs) lists. The default lists all.
///
/// ```
/// use checkpoint_runtime::{RunFilter, StatusKind};
///
/// let filter = RunFilter::new()
///     .workflow("vendor_approval")
///     .status(StatusKind::Waiting)
///     .limit(10);
/// assert_eq!(filter.limit, Some(10));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs in this status.
    pub status: Option<StatusKind>,
    /// Only runs whose id starts with this prefix.
    pub id_prefix: Option<String>,
    /// At most this many runs (oldest first).
    pub limit: Option<usize>,
}

impl RunFilter {
    /// A filter that lists every run.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only runs of the workflow stored under `name`.
    pub fn workflow(mut self, name: &str) -> Self {
        self.workflow = Some(name.to_owned());
        self
    }

    /// Only runs whose status is of this kind.
    pub fn status(mut self, kind: StatusKind) -> Self {
        self.status = Some(kind);
        self
    }

    /// Only runs whose id starts with `prefix`.
    pub fn id_prefix(mut self, prefix: &str) -> Self {
        self.id_prefix = Some(prefix.to_owned());
        self
    }

    /// At most `n` runs.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }
}

/// One run in a listing.
///
/// ```
/// # use checkpoint_runtime::prelude::*;
/// # #[workflow]
/// # async fn noop(ctx: &Ctx) {}
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// # let rt = Runtime::in_memory();
/// # rt.start(noop, "n-1", ()).await?;
/// for run in rt.runs(RunFilter::new()).await? {
///     println!("{} {} {}", run.id, run.workflow, run.status);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunInfo {
    /// The run id.
    pub id: String,
    /// The workflow name.
    pub workflow: String,
    /// The current status.
    pub status: Status,
    /// When the run was started.
    pub created_at: SystemTime,
    /// When the run last changed.
    pub updated_at: SystemTime,
    /// The sequence number of the latest checkpoint (0: none yet).
    pub latest_seq: u64,
    /// The worker holding the run's lease, if any (it may have expired).
    pub worker: Option<String>,
}
