//! The execution history (an append-only event log, for people) and the
//! description of stored checkpoint versions.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// One event in a run's history. Resuming never reads the history.
///
/// ```
/// # use checkpoint_runtime::prelude::*;
/// # #[workflow]
/// # async fn two_steps(ctx: &Ctx) { checkpoint!("a"); checkpoint!("b"); }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// # let rt = Runtime::in_memory();
/// # rt.start(two_steps, "vendor-42", ()).await?.result().await?;
/// let events = rt.history("vendor-42").await?;
/// let saved = events
///     .iter()
///     .filter(|e| matches!(e, Event::CheckpointSaved { .. }))
///     .count();
/// assert_eq!(saved, 2);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Event {
    /// The run was created.
    Started {
        /// The workflow name.
        workflow: String,
        /// The trace context the run was started in, when the runtime
        /// carries one (see [`crate::observe::TracePropagation`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
    },
    /// A checkpoint was stored.
    CheckpointSaved {
        /// Its sequence number.
        seq: u64,
        /// Its label, if the site has one.
        label: Option<String>,
    },
    /// The run stopped executing until something happens.
    Suspended {
        /// What it waits for, in words (a signal, a timer, a worker that has
        /// the workflow registered).
        on: String,
    },
    /// A signal was stored for the run (not consumed yet: see
    /// [`Event::SignalConsumed`]).
    SignalReceived {
        /// The signal name.
        name: String,
    },
    /// The run took a stored signal at its wait site and goes on with it.
    SignalConsumed {
        /// The signal name.
        name: String,
    },
    /// A signal was discarded because its payload did not decode as the type
    /// the workflow waits for; the run keeps waiting.
    SignalRejected {
        /// The signal name.
        name: String,
        /// The decoder's message.
        reason: String,
    },
    /// A worker resumed the run from a checkpoint (`from_seq` 0: from the start).
    Resumed {
        /// The worker id.
        worker: String,
        /// The checkpoint it resumed from.
        from_seq: u64,
        /// The workflow version that runs from there
        /// (`#[workflow(version = N)]`; 1 in histories from before versions).
        #[serde(default = "first_version")]
        version: u32,
    },
    /// A worker instance claimed the run while another instance's lease was
    /// still on it (that lease had expired, or belonged to a dead earlier
    /// instance of the same worker id): a takeover, naming both instances.
    TakenOver {
        /// The worker id that took the run (as it leases it).
        worker: String,
        /// Its runtime instance.
        instance: String,
        /// The worker id of the lease it replaced.
        from_worker: String,
        /// The instance of the lease it replaced.
        from_instance: String,
    },
    /// Workflow code panicked; the run is retried from its latest checkpoint.
    Retried {
        /// The attempt that failed.
        attempt: u32,
        /// Why.
        reason: String,
    },
    /// The run failed (an `Err` output, or stopped by the runtime).
    Failed {
        /// The error, as text.
        error: String,
    },
    /// The run finished.
    Completed,
    /// The run was cancelled.
    Cancelled,
    /// A cancel was requested ([`Runtime::request_cancel`](crate::Runtime::request_cancel)):
    /// the body sees `reason`, and has `grace_ms` to end before it is
    /// cancelled hard.
    CancelRequested {
        /// Why.
        reason: String,
        /// The grace period, in milliseconds.
        grace_ms: u64,
        /// Whether its children are asked to cancel too.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cascade: bool,
    },
    /// A run was forked from a checkpoint of another (recorded in both runs).
    Forked {
        /// The source run.
        from: String,
        /// The checkpoint of the source that was copied.
        seq: u64,
        /// The new run.
        to: String,
    },
    /// The run spawned a child run (`ctx.spawn`); recorded in the parent's
    /// history, in the transaction that creates the child.
    ChildSpawned {
        /// The child's run id.
        child: String,
        /// The child's workflow.
        workflow: String,
        /// It was created held: its parent's bound on running children was
        /// reached (`ctx.spawn_limited`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        held: bool,
    },
    /// The children a join waited for have all ended: the run is woken.
    Joined {
        /// How many children the join named.
        children: usize,
    },
    /// An attempt of `ctx.retry(name, ..)` failed (recorded once its
    /// outcome is stored: the attempt never runs again).
    RetryAttemptFailed {
        /// The retry's name.
        name: String,
        /// Which attempt (from 1).
        attempt: u32,
        /// Its error, as text (`Display`), or `timed out`.
        error: String,
        /// The backoff before the next attempt, in milliseconds; `None`
        /// when there is none (the retry ended with this attempt).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_in_ms: Option<u64>,
    },
    /// The code that claimed the run could not resume its latest
    /// checkpoint: the run is parked until code that matches is registered.
    Parked {
        /// The worker whose code refused it.
        worker: String,
        /// Why (the refusal, naming the site and field).
        reason: String,
    },
}

fn first_version() -> u32 {
    1
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Started { workflow, .. } => write!(f, "started (workflow `{workflow}`)"),
            Event::CheckpointSaved { seq, label } => match label {
                Some(l) => write!(f, "checkpoint #{seq} saved ({l})"),
                None => write!(f, "checkpoint #{seq} saved"),
            },
            Event::Suspended { on } => write!(f, "suspended: {on}"),
            Event::Parked { worker, reason } => {
                write!(
                    f,
                    "parked by worker `{worker}` (its code cannot resume it): {reason}"
                )
            }
            Event::SignalReceived { name } => write!(f, "signal `{name}` stored"),
            Event::SignalConsumed { name } => write!(f, "signal `{name}` consumed"),
            Event::SignalRejected { name, reason } => {
                write!(f, "signal `{name}` rejected: {reason}")
            }
            Event::Resumed {
                worker,
                from_seq,
                version,
            } => write!(
                f,
                "resumed by `{worker}` from checkpoint #{from_seq} (version {version})"
            ),
            Event::TakenOver {
                worker,
                instance,
                from_worker,
                from_instance,
            } => write!(
                f,
                "taken over by `{worker}` (instance {instance}) from `{from_worker}` \
                 (instance {from_instance})"
            ),
            Event::Retried { attempt, reason } => {
                write!(f, "attempt {attempt} failed, retrying: {reason}")
            }
            Event::RetryAttemptFailed {
                name,
                attempt,
                error,
                retry_in_ms,
            } => match retry_in_ms {
                Some(ms) => write!(
                    f,
                    "retry `{name}`: attempt {attempt} failed, next in {ms} ms: {error}"
                ),
                None => write!(
                    f,
                    "retry `{name}`: attempt {attempt} failed, no more attempts: {error}"
                ),
            },
            Event::Failed { error } => write!(f, "failed: {error}"),
            Event::Completed => f.write_str("completed"),
            Event::Cancelled => f.write_str("cancelled"),
            Event::CancelRequested {
                reason,
                grace_ms,
                cascade,
            } => {
                let children = if *cascade { ", children too" } else { "" };
                write!(
                    f,
                    "cancel requested: {reason} (grace {:.3}s{children})",
                    *grace_ms as f64 / 1000.0
                )
            }
            Event::Forked { from, seq, to } => {
                write!(f, "`{to}` forked from `{from}` checkpoint #{seq}")
            }
            Event::ChildSpawned {
                child,
                workflow,
                held,
            } => {
                write!(f, "spawned child `{child}` (workflow `{workflow}`)")?;
                if *held {
                    f.write_str(", held until a running child ends")?;
                }
                Ok(())
            }
            Event::Joined { children: 1 } => f.write_str("joined its child: it ended"),
            Event::Joined { children } => write!(f, "joined {children} children: all ended"),
        }
    }
}

/// An [`Event`] with the time it was recorded.
///
/// ```
/// # use checkpoint_runtime::prelude::*;
/// # #[workflow]
/// # async fn noop(ctx: &Ctx) {}
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// # let rt = Runtime::in_memory();
/// # rt.start(noop, "vendor-42", ()).await?.result().await?;
/// for entry in rt.history_entries("vendor-42").await? {
///     println!("{:?} {}", entry.at, entry.event);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// When it was recorded.
    pub at: SystemTime,
    /// What happened.
    pub event: Event,
}

/// One stored checkpoint version of a run.
///
/// ```
/// # use checkpoint_runtime::prelude::*;
/// # #[workflow]
/// # async fn steps(ctx: &Ctx) { let done = vec![1u32]; checkpoint!("one"); drop(done); }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// # let rt = Runtime::in_memory();
/// # rt.start(steps, "vendor-42", ()).await?.result().await?;
/// for cp in rt.checkpoints("vendor-42").await? {
///     let fields: Vec<_> = cp.fields.iter().map(|f| format!("{}: {}", f.name, f.type_name)).collect();
///     println!("#{} {:?} {} bytes [{}]", cp.seq, cp.label, cp.size, fields.join(", "));
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CheckpointInfo {
    /// Sequence number within the run (1, 2, ...).
    pub seq: u64,
    /// The site's label (`checkpoint!("label")`), if any.
    pub label: Option<String>,
    /// The site key matched on resume (the label, or the site's position).
    pub site: String,
    /// When it was stored.
    pub created_at: SystemTime,
    /// Total size of the encoded fields, in bytes.
    pub size: usize,
    /// Saved positions of the enclosing `for` loops, outermost first.
    pub loops: Vec<u64>,
    /// The saved fields (live locals), in order.
    pub fields: Vec<FieldInfo>,
    /// Set when the stored version is damaged (its bytes, or what locates
    /// them, do not match their checksum, or cannot be read): what is wrong.
    /// It is listed so the intact versions around it can still be inspected
    /// and forked; resuming or forking this one is refused.
    #[serde(default)]
    pub damaged: Option<String>,
}

/// One saved field of a checkpoint.
///
/// ```
/// use checkpoint_runtime::FieldInfo;
/// let f = FieldInfo {
///     name: "done".into(),
///     type_name: "alloc::vec::Vec<u32>".into(),
///     size: 4,
///     schema: None,
/// };
/// assert_eq!(f.name, "done");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldInfo {
    /// The local's name.
    pub name: String,
    /// Its Rust type (`std::any::type_name`).
    pub type_name: String,
    /// Its encoded size in bytes.
    pub size: usize,
    /// The key of its schema in the store, when one was recorded: the field
    /// can then be shown as JSON without the workflow's code
    /// ([`Runtime::checkpoint_fields_json`](crate::Runtime::checkpoint_fields_json)).
    #[serde(default)]
    pub schema: Option<String>,
}
