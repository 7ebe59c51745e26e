//! The status of a run as users see it, and run listings.

use std::collections::BTreeMap;
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
/// let s = Status::Waiting { signal: "finance_approval".into(), deadline: None };
/// assert!(!s.is_finished());
/// assert!(Status::Completed.is_finished());
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Status {
    /// Runnable, and no worker holds it: not executed yet, handed back for
    /// a retry, or left by a worker whose lease expired (a crash). The next
    /// worker with a free slot takes it.
    Queued,
    /// Executing: a worker holds its lease ([`RunInfo::worker`] and
    /// [`RunInfo::lease_expires_at`] say which, and until when).
    Running,
    /// Suspended until the named signal arrives, or the deadline passes.
    Waiting {
        /// The signal name.
        signal: String,
        /// When waiting ends without the signal (`wait_for_timeout`); `None`: never.
        deadline: Option<SystemTime>,
    },
    /// Suspended on a durable timer.
    Sleeping {
        /// When the timer is due.
        until: SystemTime,
    },
    /// Finished with its output.
    Completed,
    /// Failed: returned `Err`, or was stopped by the runtime (undecodable
    /// state, panics through every attempt, a misused API, ...). A checkpoint
    /// the registered code cannot resume is not a failure: the run is
    /// parked ([`Status::Incompatible`]).
    Failed {
        /// The error, as text.
        error: String,
    },
    /// Cancelled by [`Runtime::cancel`](crate::Runtime::cancel).
    Cancelled,
    /// Parked: the code that claimed the run cannot resume its latest
    /// checkpoint (a site, a field or a field's type changed). Nothing of
    /// the run changed; it resumes by itself, on any worker, once code that
    /// matches is registered (a rollback, or a fixed deploy).
    Incompatible {
        /// The workflow name.
        workflow: String,
        /// The checkpoint's site.
        site: String,
        /// The field that does not fit (`-` when the site itself does not).
        field: String,
        /// Why.
        detail: String,
    },
    /// Suspended in `ctx.join` / `ctx.join_all` until the children it
    /// joins have all ended.
    Joining,
    /// A child run created beyond its parent's bound on running children
    /// ([`Ctx::spawn_limited`](crate::Ctx::spawn_limited)): it starts, in
    /// spawn order, when one of its running siblings ends.
    Held {
        /// The parent run.
        parent: String,
    },
    /// Runnable, started in queue `queue`
    /// ([`StartOptions::queue`](crate::StartOptions::queue)), and no worker
    /// holds it: it waits for a free slot of its queue (see
    /// [`Queue`](crate::Queue)) or for a worker, holding none. Its
    /// [`kind`](Status::kind) is [`StatusKind::Queued`].
    InQueue {
        /// The queue.
        queue: String,
    },
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
            Status::Queued => StatusKind::Queued,
            Status::Running => StatusKind::Running,
            Status::Waiting { .. } => StatusKind::Waiting,
            Status::Sleeping { .. } => StatusKind::Sleeping,
            Status::Completed => StatusKind::Completed,
            Status::Failed { .. } => StatusKind::Failed,
            Status::Cancelled => StatusKind::Cancelled,
            Status::Incompatible { .. } => StatusKind::Incompatible,
            Status::Held { .. } => StatusKind::Held,
            Status::Joining => StatusKind::Joining,
            Status::InQueue { .. } => StatusKind::Queued,
        }
    }
}

/// As derived, but with times in RFC 3339 (a `SystemTime` prints its raw
/// seconds and nanoseconds since the epoch):
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use checkpoint_runtime::Status;
///
/// let until = UNIX_EPOCH + Duration::from_secs(1_709_210_096);
/// assert_eq!(
///     format!("{:?}", Status::Sleeping { until }),
///     "Sleeping { until: 2024-02-29T12:34:56.000Z }"
/// );
/// ```
impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        /// A time that debug-prints as RFC 3339.
        struct At(SystemTime);
        impl std::fmt::Debug for At {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&rfc3339(self.0))
            }
        }
        match self {
            Status::Queued => f.write_str("Queued"),
            Status::Running => f.write_str("Running"),
            Status::Waiting { signal, deadline } => f
                .debug_struct("Waiting")
                .field("signal", signal)
                .field("deadline", &deadline.map(At))
                .finish(),
            Status::Sleeping { until } => f
                .debug_struct("Sleeping")
                .field("until", &At(*until))
                .finish(),
            Status::Completed => f.write_str("Completed"),
            Status::Failed { error } => f.debug_struct("Failed").field("error", error).finish(),
            Status::Cancelled => f.write_str("Cancelled"),
            Status::Incompatible {
                workflow,
                site,
                field,
                detail,
            } => f
                .debug_struct("Incompatible")
                .field("workflow", workflow)
                .field("site", site)
                .field("field", field)
                .field("detail", detail)
                .finish(),
            Status::Joining => f.write_str("Joining"),
            Status::Held { parent } => f.debug_struct("Held").field("parent", parent).finish(),
            Status::InQueue { queue } => f.debug_struct("InQueue").field("queue", queue).finish(),
        }
    }
}

/// `t` as an RFC 3339 UTC timestamp with milliseconds, truncated
/// (`2024-05-01T12:30:05.250Z`; see `json::rfc3339`). A time beyond what
/// RFC 3339 can write (years past 9999 or before 0001, only from a damaged
/// record) shows as the nearest one it can (the last one jiff has, or
/// 0001-01-01).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    // 0001-01-01T00:00:00Z: RFC 3339 has no year before 1.
    const FIRST_SECOND: i64 = -62_135_596_800;
    let ts = jiff::Timestamp::try_from(t)
        .ok()
        .filter(|ts| ts.as_second() >= FIRST_SECOND)
        .unwrap_or_else(|| match t < SystemTime::UNIX_EPOCH {
            true => jiff::Timestamp::from_second(FIRST_SECOND).unwrap_or(jiff::Timestamp::MIN),
            false => jiff::Timestamp::MAX,
        });
    ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Queued => f.write_str("queued"),
            Status::Running => f.write_str("running"),
            Status::Waiting {
                signal,
                deadline: None,
            } => write!(f, "waiting for signal `{signal}`"),
            Status::Waiting {
                signal,
                deadline: Some(deadline),
            } => match deadline.duration_since(SystemTime::now()) {
                Ok(left) => write!(
                    f,
                    "waiting for signal `{signal}` ({:.3}s left)",
                    left.as_secs_f64()
                ),
                Err(_) => write!(f, "waiting for signal `{signal}` (deadline passed)"),
            },
            Status::Sleeping { until } => match until.duration_since(SystemTime::now()) {
                Ok(left) => write!(f, "sleeping ({:.3}s left)", left.as_secs_f64()),
                Err(_) => f.write_str("sleeping (due)"),
            },
            Status::Completed => f.write_str("completed"),
            Status::Failed { error } => write!(f, "failed: {error}"),
            Status::Cancelled => f.write_str("cancelled"),
            Status::Incompatible {
                site,
                field,
                detail,
                ..
            } => write!(
                f,
                "incompatible (parked): site `{site}`, field `{field}`: {detail}"
            ),
            Status::Joining => f.write_str("waiting for its children to end"),
            Status::Held { parent } => write!(
                f,
                "held: starts when one of the running children of `{parent}` ends"
            ),
            Status::InQueue { queue } => write!(f, "queued in queue `{queue}`"),
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum StatusKind {
    /// See [`Status::Queued`].
    Queued,
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
    /// See [`Status::Incompatible`].
    Incompatible,
    /// See [`Status::Held`].
    Held,
    /// See [`Status::Joining`].
    Joining,
}

impl StatusKind {
    /// Every kind, in declaration order.
    pub const ALL: [StatusKind; 10] = [
        StatusKind::Queued,
        StatusKind::Running,
        StatusKind::Waiting,
        StatusKind::Sleeping,
        StatusKind::Completed,
        StatusKind::Failed,
        StatusKind::Cancelled,
        StatusKind::Incompatible,
        StatusKind::Held,
        StatusKind::Joining,
    ];

    /// The kind in lowercase, as the CLI's `--status` and the metrics name it.
    pub fn label(self) -> &'static str {
        match self {
            StatusKind::Queued => "queued",
            StatusKind::Running => "running",
            StatusKind::Waiting => "waiting",
            StatusKind::Sleeping => "sleeping",
            StatusKind::Completed => "completed",
            StatusKind::Failed => "failed",
            StatusKind::Cancelled => "cancelled",
            StatusKind::Incompatible => "incompatible",
            StatusKind::Held => "held",
            StatusKind::Joining => "joining",
        }
    }

    /// The kind as stores keep it: `Queued` and `Running` are one stored
    /// state (runnable), told apart by the lease at the time of asking;
    /// `Joining` is a wait on a join's signal, told apart by its name.
    pub(crate) fn stored(self) -> StatusKind {
        match self {
            StatusKind::Queued => StatusKind::Running,
            StatusKind::Joining => StatusKind::Waiting,
            other => other,
        }
    }
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
    /// Only the children of this run (spawned with `ctx.spawn`).
    pub parent: Option<String>,
    /// Newest first (by creation), instead of oldest first.
    pub newest_first: bool,
    /// Skips this many matching runs first (paging, with `limit`).
    pub offset: usize,
    /// Only runs tagged with every one of these key/value pairs (see
    /// [`StartOptions::tag`](crate::StartOptions::tag)).
    pub tags: BTreeMap<String, String>,
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

    /// Only the children of run `id` (the runs it spawned with
    /// [`Ctx::spawn`](crate::Ctx::spawn)).
    pub fn parent(mut self, id: &str) -> Self {
        self.parent = Some(id.to_owned());
        self
    }

    /// At most `n` runs.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Newest first (the latest created), instead of oldest first.
    ///
    /// ```
    /// use checkpoint_runtime::RunFilter;
    /// // The second page of 50, newest first.
    /// let page = RunFilter::new().newest_first().offset(50).limit(50);
    /// assert!(page.newest_first);
    /// ```
    pub fn newest_first(mut self) -> Self {
        self.newest_first = true;
        self
    }

    /// Skips the first `n` matching runs (in the listing's order): with
    /// [`limit`](RunFilter::limit), one page of a long listing.
    pub fn offset(mut self, n: usize) -> Self {
        self.offset = n;
        self
    }

    /// Only runs tagged `key` = `value` (see
    /// [`StartOptions::tag`](crate::StartOptions::tag)); several calls
    /// with different keys ask for all of them (a run must carry every
    /// pair), a second call with the same key replaces its value.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// # #[workflow]
    /// # async fn noop(ctx: &Ctx) {}
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let acme = StartOptions::new().tag("tenant", "acme").tag("plan", "pro");
    /// rt.start_with(noop, "a-1", (), acme).await?;
    /// rt.start_with(noop, "b-1", (), StartOptions::new().tag("tenant", "beta")).await?;
    /// let runs = rt.runs(RunFilter::new().tag("tenant", "acme").tag("plan", "pro")).await?;
    /// assert_eq!(runs.len(), 1);
    /// assert_eq!(runs[0].id, "a-1");
    /// assert_eq!(runs[0].tags.get("tenant").map(String::as_str), Some("acme"));
    /// # Ok(()) }
    /// ```
    pub fn tag(mut self, key: &str, value: &str) -> Self {
        self.tags.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Whether a run carrying `tags` has every tag this filter asks for.
    pub(crate) fn tags_match(&self, tags: &BTreeMap<String, String>) -> bool {
        self.tags.iter().all(|(k, v)| tags.get(k) == Some(v))
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
    /// The worker holding the run's lease, if any (it may have expired:
    /// see [`RunInfo::lease_expires_at`]).
    pub worker: Option<String>,
    /// When that lease expires (a run whose lease expired is `Queued`).
    pub lease_expires_at: Option<SystemTime>,
    /// The run that spawned this one, for a child run (`ctx.spawn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The reason of a cancel requested of the run
    /// ([`Runtime::request_cancel`](crate::Runtime::request_cancel)): pending
    /// while the run cleans up, kept once it ended `Cancelled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<String>,
    /// The run's tags (see [`StartOptions::tag`](crate::StartOptions::tag)).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The run's queue (see [`StartOptions::queue`](crate::StartOptions::queue)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The run's priority within its queue (0 unless it was started with one).
    #[serde(default)]
    pub priority: i32,
}
