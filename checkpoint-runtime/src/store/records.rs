//! The records the store exchanges with the executor: runs, their state,
//! leases, checkpoints, signals and what each call returns. Plain data: the
//! bottom of the store (`records ← rules ← backends ← store::open`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::status::Status;
use crate::Error;
use crate::StartOptions;

/// What the parts of a damaged record that could not be read are named
/// in errors and listings.
pub(crate) const UNREADABLE: &str = "<unreadable>";

/// How the signal that wakes a joining run begins (see
/// [`Suspend::Joining::token`]): `join#{seq}`.
pub(crate) const JOIN_SIGNAL_PREFIX: &str = "join#";

/// Refuses a signal name the store keeps for joins: a signal sent with it
/// would wake a joining run with outcomes no child produced, and a wait on
/// it would look like a join.
pub(crate) fn user_signal_name(run: &str, name: &str) -> Result<(), crate::Error> {
    if name.starts_with(JOIN_SIGNAL_PREFIX) {
        return Err(crate::Error::Misuse {
            run: run.to_owned(),
            detail: format!(
                "signal names starting with `{JOIN_SIGNAL_PREFIX}` are reserved for joins \
                 (`ctx.join`); `{name}` cannot be sent or waited for"
            ),
        });
    }
    Ok(())
}

/// A run as stored.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunRecord {
    /// The run id.
    pub id: String,
    /// The workflow name.
    pub workflow: String,
    /// The input, JSON.
    pub input: Arc<[u8]>,
    /// The run's state.
    pub state: RunState,
    /// The current lease, if any (it may have expired).
    pub lease: Option<LeaseInfo>,
    /// The fencing epoch: incremented by every claim.
    pub epoch: u64,
    /// Executions started since the latest checkpoint (see [`Ctx::attempt`](crate::Ctx::attempt)).
    pub attempt: u32,
    /// The sequence number of the latest checkpoint (0: none).
    pub latest_seq: u64,
    /// The resumption value delivered to the latest checkpoint, when it is a
    /// wait site whose signal was consumed (or whose deadline passed).
    pub wake: Option<Wake>,
    /// Creation time.
    pub created_at: SystemTime,
    /// Time of the last change.
    pub updated_at: SystemTime,
    /// The version of the workflow that started the run
    /// (`#[workflow(version = N)]`, 1 by default): a run without a
    /// checkpoint starts on it. Once it has one, the checkpoint decides.
    pub version: u32,
    /// The run that spawned this one (`ctx.spawn`), for a child run.
    pub parent: Option<String>,
    /// A pending cancel request ([`Runtime::request_cancel`](crate::Runtime::request_cancel)),
    /// set by [`rules::request_cancel`](super::rules::request_cancel) and
    /// never cleared: the run ends `Cancelled` once it is set.
    pub cancel: Option<CancelRequest>,
    /// Its tags ([`StartOptions::tags`]), set when it was created.
    pub tags: BTreeMap<String, String>,
    /// Its queue ([`StartOptions::queue`]), set when it was created.
    pub queue: Option<String>,
    /// Its priority in its queue ([`StartOptions::priority`]).
    pub priority: i32,
}

/// A cancel request stored on a run (see [`RunRecord::cancel`]): the run's
/// body reads `reason` ([`Ctx::cancel_requested`](crate::Ctx::cancel_requested)),
/// its suspension sites with a deadline return at once, and once the
/// runtime's clock passes `deadline` the run is cancelled hard, as
/// [`Store::cancel`](super::Store::cancel) cancels it.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use checkpoint_runtime::store::CancelRequest;
///
/// let now = SystemTime::now();
/// let req = CancelRequest::new("customer cancelled", now, Duration::from_secs(30), true);
/// assert_eq!(req.deadline, now + Duration::from_secs(30));
/// let json = req.to_json();
/// assert_eq!(CancelRequest::from_json(&json).unwrap(), req);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CancelRequest {
    /// Why, as the requester said.
    pub reason: String,
    /// When it was requested, on the requesting runtime's clock.
    pub requested_at: SystemTime,
    /// When the grace period ends (on the runtime's clock): past it the run
    /// is cancelled hard.
    pub deadline: SystemTime,
    /// Whether the run's children are asked to cancel too
    /// ([`CancelChildren::Cascade`](crate::CancelChildren::Cascade)), and
    /// cancelled with it when it ends.
    pub cascade: bool,
}

impl CancelRequest {
    /// A request made at `now` with `grace` to clean up.
    pub fn new(reason: impl Into<String>, now: SystemTime, grace: Duration, cascade: bool) -> Self {
        CancelRequest {
            reason: reason.into(),
            requested_at: now,
            deadline: now.checked_add(grace).unwrap_or(now),
            cascade,
        }
    }

    /// How the SQL backends store it: one JSON text column (times in
    /// nanoseconds since the Unix epoch).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "reason": self.reason,
            "requested_at": nanos(self.requested_at),
            "deadline": nanos(self.deadline),
            "cascade": self.cascade,
        })
        .to_string()
    }

    /// Reads what [`CancelRequest::to_json`] wrote; `None` when it does not
    /// read as one.
    pub fn from_json(text: &str) -> Option<CancelRequest> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let at = |k: &str| {
            let n = v.get(k)?.as_u64()?;
            Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(n))
        };
        Some(CancelRequest {
            reason: v.get("reason")?.as_str()?.to_owned(),
            requested_at: at("requested_at")?,
            deadline: at("deadline")?,
            cascade: v.get("cascade")?.as_bool()?,
        })
    }
}

/// What a lease renewal ([`Store::renew`](super::Store::renew),
/// [`Store::renew_many`](super::Store::renew_many)) reports to the worker
/// executing the run, as [`rules::renewed`](super::rules::renewed) decides:
/// the cancel request stored on the run, if any, so that a request made by
/// another process reaches a body that never suspends (its
/// [`Ctx::cancel_requested`](crate::Ctx::cancel_requested) turns true, and
/// past the request's deadline the executing worker cancels it hard).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use checkpoint_runtime::store::{CancelRequest, Renewed};
///
/// let quiet = Renewed::default();
/// assert!(quiet.cancel.is_none());
/// let req = CancelRequest::new("superseded", SystemTime::now(), Duration::from_secs(5), true);
/// let asked = Renewed::with_cancel(Some(req.clone()));
/// assert_eq!(asked.cancel, Some(req));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Renewed {
    /// The run's cancel request ([`RunRecord::cancel`]), when one was made.
    pub cancel: Option<CancelRequest>,
}

impl Renewed {
    /// A report carrying `cancel` (what a backend outside this crate builds
    /// when it does not call [`rules::renewed`](super::rules::renewed)).
    pub fn with_cancel(cancel: Option<CancelRequest>) -> Self {
        Renewed { cancel }
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl RunRecord {
    /// The user-facing status of this record.
    pub fn status(&self) -> Status {
        match &self.state {
            RunState::Ready => match &self.lease {
                Some(lease) if lease.expires_at > SystemTime::now() => Status::Running,
                _ => match &self.queue {
                    Some(queue) => Status::InQueue {
                        queue: queue.clone(),
                    },
                    None => Status::Queued,
                },
            },
            RunState::Waiting { signal, .. } if signal.starts_with(JOIN_SIGNAL_PREFIX) => {
                Status::Joining
            }
            RunState::Waiting { signal, deadline } => Status::Waiting {
                signal: signal.clone(),
                deadline: *deadline,
            },
            RunState::Sleeping { until } => Status::Sleeping { until: *until },
            RunState::Completed { error: None, .. } => Status::Completed,
            RunState::Completed {
                error: Some(error), ..
            } => Status::Failed {
                error: error.clone(),
            },
            RunState::Failed { error } => Status::Failed {
                error: error.to_string(),
            },
            RunState::Cancelled => Status::Cancelled,
            RunState::Held => Status::Held {
                parent: self.parent.clone().unwrap_or_default(),
            },
            RunState::Parked { error } => {
                let (site, field, detail) = error.refused_at();
                Status::Incompatible {
                    workflow: self.workflow.clone(),
                    site,
                    field,
                    detail,
                }
            }
        }
    }
}

/// The state machine of a run, as stored.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RunState {
    /// May be executed: new, executing under a lease, released for a retry, or
    /// left behind by a crashed worker (its lease then expires).
    Ready,
    /// Suspended until a signal with this name is stored, or the deadline passes.
    Waiting {
        /// The signal name.
        signal: String,
        /// The durable deadline of `wait_for_timeout`.
        deadline: Option<SystemTime>,
    },
    /// Suspended until the timer is due.
    Sleeping {
        /// When it is due.
        until: SystemTime,
    },
    /// Finished. `error` is set when the output is a `Result::Err` (the run
    /// counts as failed, the output is still stored).
    Completed {
        /// The output, JSON.
        output: Arc<[u8]>,
        /// The error text of an `Err` output.
        error: Option<String>,
    },
    /// Stopped by the runtime.
    Failed {
        /// Why.
        error: Error,
    },
    /// Cancelled.
    Cancelled,
    /// A child run waiting for a free slot among its parent's running
    /// children (see [`NewRun::max_running`]); not runnable until the store
    /// makes it `Ready`, when a running sibling ends.
    Held,
    /// Parked: runnable, but the code that claimed it last refused its
    /// latest checkpoint with `error` ([`Error::Incompatible`], or an
    /// [`Error::Decode`] of a field or of the input). Claimed only to be
    /// tried again by a runtime whose code may differ (see
    /// [`ClaimRequest::revisit_parked`]); a wake value it was claimed with
    /// stays in [`RunRecord::wake`].
    Parked {
        /// Why the code refused it.
        error: Error,
    },
}

impl RunState {
    /// `true` for completed, failed and cancelled runs.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            RunState::Completed { .. } | RunState::Failed { .. } | RunState::Cancelled
        )
    }
}

/// Who holds a run, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The worker id.
    pub worker: String,
    /// The runtime instance inside that worker. Instance ids sort by the
    /// instance's start time (`"{start nanos, 20 digits}-{pid}-{counter}"`), so a
    /// restarted process with the same worker id, a newer instance, may take
    /// its old runs at once.
    pub instance: String,
    /// When the lease expires unless renewed.
    pub expires_at: SystemTime,
}

/// The proof of ownership a worker presents with every fenced write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The worker id.
    pub worker: Arc<str>,
    /// The runtime instance.
    pub instance: Arc<str>,
    /// The fencing epoch handed out by the claim.
    pub epoch: u64,
}

/// What a suspension site stores with its checkpoint, so that the run's state
/// can be rebuilt from the checkpoint alone (by a fork, for example).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Suspend {
    /// `ctx.wait_for` / `ctx.wait_for_timeout`.
    Waiting {
        /// The signal name.
        signal: String,
        /// The deadline, for `wait_for_timeout`.
        deadline: Option<SystemTime>,
        /// The key of the stored schema of the payload type the site
        /// decodes (see [`crate::schema`]), if it could be traced: another
        /// process checks a signal's payload against it before storing it
        /// ([`Runtime::signal`](crate::Runtime::signal)). Absent in
        /// checkpoints stored before it existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        payload_schema: Option<String>,
        /// See [`Suspend::Sleeping::sites_before`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sites_before: Option<Vec<String>>,
    },
    /// `ctx.sleep`.
    Sleeping {
        /// When the timer is due.
        until: SystemTime,
        /// The keys of the code's sites before this one in source order,
        /// when the checkpoint was taken: a resume refuses code that added
        /// a wait or sleep before it (the run would skip it) or moved one
        /// of these after it (the run would do it again). Absent in
        /// checkpoints stored before it existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sites_before: Option<Vec<String>>,
        /// At a `ctx.retry` site: the attempts made so far and, once the
        /// retry ended, its outcome (see [`RetryMark`]). Absent for
        /// `ctx.sleep` and in checkpoints stored before retries existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry: Option<RetryMark>,
    },
    /// `ctx.join` / `ctx.join_all`: the run waits until every run in
    /// `children` has ended. Its state is `Waiting` for the signal `token`,
    /// which the store delivers itself, in the transaction that ends the
    /// last of them (or in the one storing this checkpoint, when they all
    /// ended already): see [`Store::save_checkpoint`](super::Store::save_checkpoint).
    Joining {
        /// The ids of the runs joined, in the order the join returns them.
        children: Vec<String>,
        /// The name of the signal that wakes the run: `join#{seq}`, unique
        /// per checkpoint of the run.
        token: String,
        /// See [`Suspend::Sleeping::sites_before`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sites_before: Option<Vec<String>>,
    },
}

/// What a `ctx.retry` site stores with each of its checkpoints (on
/// [`Suspend::Sleeping`]): a backoff after a failed attempt, or the
/// retry's outcome once it ended (then the run sleeps until at once, and is
/// woken in the same execution). A run resumed there runs attempt
/// `attempts + 1`, or returns the stored outcome: no stored attempt runs
/// again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryMark {
    /// The retry's name (`ctx.retry(name, ..)`).
    pub name: String,
    /// How many attempts were made, the one whose outcome this checkpoint
    /// stores included.
    pub attempts: u32,
    /// The outcome once the retry ended; `None` during a backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RetryOutcome>,
}

/// How a `ctx.retry` ended (see [`RetryMark`]); values as JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryOutcome {
    /// The attempt's value.
    Ok(String),
    /// [`RetryError::Exhausted`](crate::RetryError::Exhausted): the last error.
    Exhausted(String),
    /// [`RetryError::NotRetryable`](crate::RetryError::NotRetryable): its error.
    NotRetryable(String),
    /// [`RetryError::TimedOut`](crate::RetryError::TimedOut).
    TimedOut,
    /// [`RetryError::Cancelled`](crate::RetryError::Cancelled): the
    /// request's reason.
    Cancelled(String),
}

impl Suspend {
    /// [`Suspend::Sleeping::sites_before`], of any kind.
    pub fn sites_before(&self) -> Option<&[String]> {
        match self {
            Suspend::Waiting { sites_before, .. }
            | Suspend::Sleeping { sites_before, .. }
            | Suspend::Joining { sites_before, .. } => sites_before.as_deref(),
        }
    }
}

/// One saved field of a checkpoint: its bytes are
/// `data[offset..offset + len]` of the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRecord {
    /// The local's name.
    pub name: Cow<'static, str>,
    /// `std::any::type_name` of its type.
    pub type_name: Cow<'static, str>,
    /// Where its bytes start in [`CheckpointRecord::data`].
    pub offset: usize,
    /// How many bytes it has.
    pub len: usize,
}

/// Separates the loop positions of a checkpoint's stored loops from the
/// fingerprints of the loops' current items that follow them. (`i64::MAX`:
/// stored loops are `bigint`s in PostgreSQL; positions never get there.)
pub const LOOP_ITEMS: u64 = i64::MAX as u64;

/// One checkpoint, as stored. Immutable once stored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckpointRecord {
    /// The run id.
    pub run: Arc<str>,
    /// Sequence number within the run: 1, 2, ...
    pub seq: u64,
    /// The site key (label, or position when unlabelled).
    pub site_key: Cow<'static, str>,
    /// The site's label.
    pub label: Option<Cow<'static, str>>,
    /// Positions of the enclosing `for` loops, outermost first; then, after
    /// [`LOOP_ITEMS`], the fingerprints of their current items.
    pub loops: Vec<u64>,
    /// The fields, in order.
    pub fields: Vec<FieldRecord>,
    /// The fields' postcard bytes, concatenated.
    pub data: Vec<u8>,
    /// Set for suspension sites: the state the run enters with this checkpoint.
    pub suspend: Option<Suspend>,
    /// When it was stored.
    pub created_at: SystemTime,
    /// The schema key of each field, in the order of `fields` (see
    /// [`Store::put_schemas`](super::Store::put_schemas)); `None`, or missing at the end, for a field
    /// saved without a schema (its type could not be traced, it was saved by
    /// hand-written code, or by a backend or version that did not keep them).
    pub schemas: SchemaKeys,
    /// Set on a version that [`Store::list_checkpoints`](super::Store::list_checkpoints)
    /// found damaged (its bytes or what locates them do not match their
    /// checksum, or do not decode): why, as an [`Error::Decode`] naming the
    /// run, site and field. Such a record keeps its `seq`, its time and, as
    /// far as they could be read, its site and label; it has no fields and
    /// no bytes (see [`CheckpointRecord::damaged`]). Every other read of it
    /// (resume, inspect, fork) fails with that error.
    pub damage: Option<Box<Error>>,
}

/// The schema key of each field of a checkpoint (see
/// [`CheckpointRecord::schemas`]); shared between checkpoints.
pub type SchemaKeys = Arc<[Option<Cow<'static, str>>]>;

impl CheckpointRecord {
    /// Builds a record (for backends that load checkpoints from storage).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        run: Arc<str>,
        seq: u64,
        site_key: Cow<'static, str>,
        label: Option<Cow<'static, str>>,
        loops: Vec<u64>,
        fields: Vec<FieldRecord>,
        data: Vec<u8>,
        suspend: Option<Suspend>,
        created_at: SystemTime,
    ) -> Self {
        CheckpointRecord {
            run,
            seq,
            site_key,
            label,
            loops,
            fields,
            data,
            suspend,
            created_at,
            schemas: SchemaKeys::default(),
            damage: None,
        }
    }

    /// The stand-in for damaged version `seq` of run `run` in a listing:
    /// `error` says what is wrong with it ([`CheckpointRecord::damage`]);
    /// `site` and `label` are what could still be read (the site is
    /// `<unreadable>` otherwise).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::SystemTime;
    /// use checkpoint_runtime::{store::CheckpointRecord, Error};
    ///
    /// let error = Error::Decode {
    ///     workflow: "tally".into(),
    ///     run: "t-2".into(),
    ///     site: "counted".into(),
    ///     field: "total".into(),
    ///     detail: "checkpoint #3 is damaged".into(),
    /// };
    /// let cp = CheckpointRecord::damaged(
    ///     Arc::from("t-2"), 3, Some("counted".into()), None, SystemTime::now(), error.clone(),
    /// );
    /// assert!(cp.is_damaged() && cp.fields.is_empty());
    /// assert_eq!(cp.damage.as_deref(), Some(&error));
    /// ```
    pub fn damaged(
        run: Arc<str>,
        seq: u64,
        site: Option<String>,
        label: Option<String>,
        created_at: SystemTime,
        error: Error,
    ) -> Self {
        let site = site.unwrap_or_else(|| UNREADABLE.to_owned());
        let mut cp = CheckpointRecord::new(
            run,
            seq,
            Cow::Owned(site),
            label.map(Cow::Owned),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            None,
            created_at,
        );
        cp.damage = Some(Box::new(error));
        cp
    }

    /// Whether this is the stand-in for a damaged version (see
    /// [`CheckpointRecord::damage`]).
    ///
    /// ```
    /// # use std::{borrow::Cow, sync::Arc, time::SystemTime};
    /// # use checkpoint_runtime::store::CheckpointRecord;
    /// let cp = CheckpointRecord::new(
    ///     Arc::from("r"), 1, Cow::Borrowed("site"), None, vec![], vec![], vec![], None,
    ///     SystemTime::now(),
    /// );
    /// assert!(!cp.is_damaged());
    /// ```
    pub fn is_damaged(&self) -> bool {
        self.damage.is_some()
    }

    /// Sets the schema keys of the fields (see [`CheckpointRecord::schemas`]).
    pub fn with_schemas(mut self, schemas: impl Into<SchemaKeys>) -> Self {
        self.schemas = schemas.into();
        self
    }

    /// The schema key of field `i`, if one was recorded.
    pub fn schema_key(&self, i: usize) -> Option<&str> {
        self.schemas.get(i).and_then(|k| k.as_deref())
    }

    /// The bytes of field `i`, or `None` if there is no such field or the
    /// record is inconsistent.
    pub fn field_bytes(&self, i: usize) -> Option<&[u8]> {
        let f = self.fields.get(i)?;
        let end = f.offset.checked_add(f.len)?;
        self.data.get(f.offset..end)
    }

    /// The state the run enters when this checkpoint is stored.
    pub fn state(&self) -> RunState {
        match &self.suspend {
            None => RunState::Ready,
            Some(Suspend::Waiting {
                signal, deadline, ..
            }) => RunState::Waiting {
                signal: signal.clone(),
                deadline: *deadline,
            },
            Some(Suspend::Sleeping { until, .. }) => RunState::Sleeping { until: *until },
            Some(Suspend::Joining { token, .. }) => RunState::Waiting {
                signal: token.clone(),
                deadline: None,
            },
        }
    }

    /// The positions part of [`CheckpointRecord::loops`], outermost first.
    pub fn loop_positions(&self) -> &[u64] {
        match self.loops.iter().position(|&l| l == LOOP_ITEMS) {
            Some(end) => &self.loops[..end],
            None => &self.loops,
        }
    }

    /// The fingerprint of the current item of the `depth`-th enclosing loop
    /// (0 = outermost), if the checkpoint stored one (0: none).
    pub fn loop_item(&self, depth: usize) -> u64 {
        let positions = self.loop_positions().len();
        self.loops.get(positions + 1 + depth).copied().unwrap_or(0)
    }

    /// A public description of this checkpoint.
    pub fn info(&self) -> crate::CheckpointInfo {
        crate::CheckpointInfo {
            seq: self.seq,
            label: self.label.as_ref().map(|l| l.to_string()),
            site: self.site_key.to_string(),
            created_at: self.created_at,
            size: self.data.len(),
            loops: self.loop_positions().to_vec(),
            fields: self
                .fields
                .iter()
                .enumerate()
                .map(|(i, f)| crate::FieldInfo {
                    name: f.name.to_string(),
                    type_name: f.type_name.to_string(),
                    size: f.len,
                    schema: self.schema_key(i).map(str::to_owned),
                })
                .collect(),
            damaged: self.damage.as_ref().map(|e| e.to_string()),
        }
    }
}

/// What one wait site of a workflow takes, as workers record it
/// ([`Store::put_signal_sites`](crate::store::Store::put_signal_sites)):
/// the catalog [`Runtime::signal`](crate::Runtime::signal) checks a signal's
/// name and payload against when it is sent, before the run waits.
///
/// ```
/// use checkpoint_runtime::store::SignalSite;
///
/// // A worker registering a workflow with `ctx.wait_for("approval")`:
/// let named = SignalSite { signal: Some("approval".into()), payload_schema: None };
/// // ...and once that site ran, the key of its payload type's schema:
/// let typed = SignalSite { payload_schema: Some("3f2a..".into()), ..named.clone() };
/// // A wait site whose name is computed at run time takes any name:
/// let open = SignalSite { signal: None, payload_schema: None };
/// assert!(named < typed && open < named);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SignalSite {
    /// The signal name; `None` for a wait site whose name is not a string
    /// literal (computed when it runs): then any name may be awaited.
    pub signal: Option<String>,
    /// The stored schema ([`Store::schemas`](crate::store::Store::schemas))
    /// of the payload type the site decodes, once a worker ran it.
    pub payload_schema: Option<String>,
}

/// A signal stored for a run, not yet consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalRecord {
    /// The signal name.
    pub name: String,
    /// The payload, JSON.
    pub payload: Arc<[u8]>,
    /// When it was stored.
    pub received_at: SystemTime,
}

/// The value a wait site resumes with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeValue {
    /// A consumed signal.
    Signal {
        /// The signal name.
        name: String,
        /// The payload, JSON.
        payload: Arc<[u8]>,
    },
    /// The deadline of `wait_for_timeout` passed.
    TimedOut,
}

/// The resumption value of the checkpoint with sequence number `seq`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake {
    /// The checkpoint it belongs to.
    pub seq: u64,
    /// The value.
    pub value: WakeValue,
}

/// A run to create.
#[derive(Debug, Clone)]
pub struct NewRun {
    /// The run id.
    pub id: String,
    /// The workflow name.
    pub workflow: String,
    /// The input, JSON.
    pub input: Arc<[u8]>,
    /// The version of the workflow that starts it (see [`RunRecord::version`]).
    pub version: u32,
    /// The trace context it is started in, kept in its `Started` event
    /// (see [`crate::observe::TracePropagation`]).
    pub trace: Option<String>,
    /// The run that spawns it (`ctx.spawn`), for a child run.
    pub parent: Option<String>,
    /// For a child: at most this many of its parent's children may be
    /// running (not ended, not held) at once; created beyond it, the run is
    /// [`RunState::Held`] (see [`Ctx::spawn_limited`](crate::Ctx::spawn_limited)).
    pub max_running: Option<u32>,
    /// Its tags, queue, priority and start time (see [`StartOptions`]);
    /// [`StartOptions::default`] for none.
    pub options: StartOptions,
}

/// What [`Store::create_run`](super::Store::create_run) did.
#[derive(Debug, Clone)]
pub enum Created {
    /// The run was created (and `Started` recorded).
    New,
    /// A run with this id already existed; nothing was changed.
    Existing(Box<RunRecord>),
}

/// A request to claim runnable runs.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The claiming worker.
    pub worker: Arc<str>,
    /// The claiming runtime instance.
    pub instance: Arc<str>,
    /// The workflows this worker can execute.
    pub workflows: Vec<&'static str>,
    /// The lease duration.
    pub ttl: Duration,
    /// At most this many runs.
    pub limit: usize,
    /// Only this run (used by a handle driving its own run).
    pub only: Option<String>,
    /// With `only`: take that run also when it is parked
    /// ([`RunState::Parked`]), to try it with this worker's code. Other
    /// claims never take a parked run.
    pub revisit_parked: bool,
    /// The claiming runtime's clock reading ([`Clock::now`](crate::Clock::now)):
    /// a sleeping run is due, and a waiting run's deadline passed, when its
    /// time is at or before this. Leases are not compared with it: a
    /// backend computes and compares lease expiries with the system's time
    /// (see [`crate::clock`] for why).
    pub clock_now: SystemTime,
    /// The queues whose limits this claim applies (see [`crate::Queue`]),
    /// by name: a run of one of them is taken only as
    /// [`rules::admit_queued`](super::rules::admit_queued) admits it.
    pub queues: Arc<BTreeMap<String, crate::Queue>>,
}

/// When a run that is not runnable now may next become runnable without a
/// signal (see [`Store::next_wakeup`](super::Store::next_wakeup)), by the
/// clock each is read on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wakeup {
    /// The earliest expiry of a lease on an unfinished run, or of an
    /// admission to a queue's rate window: the system's time.
    pub lease: Option<SystemTime>,
    /// The earliest deadline, later than the time asked about, of a
    /// sleeping or waiting run under no lease: the runtime's clock.
    pub timer: Option<SystemTime>,
}

impl Wakeup {
    /// The earlier of the two times, for a caller whose clock is the
    /// system's.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use checkpoint_runtime::store::Wakeup;
    ///
    /// let t = SystemTime::UNIX_EPOCH + Duration::from_secs(60);
    /// let w = Wakeup { lease: Some(t), timer: Some(t + Duration::from_secs(1)) };
    /// assert_eq!(w.earliest(), Some(t));
    /// assert_eq!(Wakeup::default().earliest(), None);
    /// ```
    pub fn earliest(&self) -> Option<SystemTime> {
        match (self.lease, self.timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A claimed run, with everything needed to execute it.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The run (after the claim: state `Ready`, lease set).
    pub run: RunRecord,
    /// The lease to present with fenced writes.
    pub lease: Lease,
    /// The latest checkpoint, if any.
    pub checkpoint: Option<Arc<CheckpointRecord>>,
}

/// What [`Store::claim`](super::Store::claim) found.
#[derive(Debug, Clone, Default)]
pub struct ClaimResult {
    /// Runs now leased to the caller.
    pub claimed: Vec<Claimed>,
    /// Runnable runs the caller cannot execute: `(run id, workflow name)`.
    /// A backend may look for them on some claims only (PostgreSQL: at
    /// most every half second per store, and on every claim of one run,
    /// `only`), so that a worker that claims often under load does not read
    /// every unfinished run each time; such a run is reported by a later
    /// claim.
    pub unregistered: Vec<(String, String)>,
}

/// How an execution gives its run back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The run suspended (its state was set by the checkpoint); the attempt
    /// counter is reset and `Suspended` recorded.
    Suspend,
    /// The execution failed in a retryable way; the run stays `Ready` and
    /// `Retried` is recorded.
    Retry {
        /// Why.
        reason: String,
    },
    /// The worker stops (shutdown); the run stays as it is, for anyone to take.
    Abandon,
    /// The code cannot resume the run's latest checkpoint (`error` says
    /// why): the run is parked ([`RunState::Parked`]), nothing else of it
    /// changes, and `Parked` is recorded.
    Park {
        /// Why.
        error: Error,
    },
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Outcome {
    /// The workflow returned.
    Completed {
        /// The output, JSON.
        output: Arc<[u8]>,
        /// The error text of a `Result::Err` output.
        error: Option<String>,
    },
    /// The runtime stopped the run.
    Failed {
        /// Why.
        error: Error,
    },
}

/// What [`Store::gc`](super::Store::gc) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcReport {
    /// Pruned checkpoints whose stored bytes were cut down to the part that
    /// kept checkpoints still share.
    pub checkpoints_compacted: u64,
    /// Bytes dropped by that compaction.
    pub bytes_compacted: u64,
    /// Free pages given back to the file system.
    pub pages_released: u64,
    /// Whether the write-ahead log was folded into the main file and truncated.
    pub wal_truncated: bool,
    /// Size of the store's files before, in bytes (0 for a store without files).
    pub bytes_before: u64,
    /// Size of the store's files after, in bytes.
    pub bytes_after: u64,
}

/// A worker id held by one live runtime instance (see
/// [`Store::hold_worker`](super::Store::hold_worker)): the store keeps it
/// held for as long as this value lives, and no later than the process.
pub struct WorkerHold(#[allow(dead_code)] Option<Box<dyn std::any::Any + Send + Sync>>);

impl WorkerHold {
    /// A hold kept by `guard` (a lock, a connection) until it is dropped.
    pub fn new(guard: impl std::any::Any + Send + Sync) -> WorkerHold {
        WorkerHold(Some(Box::new(guard)))
    }

    /// A hold of a store that cannot tell live processes apart (in memory:
    /// one process).
    pub fn unchecked() -> WorkerHold {
        WorkerHold(None)
    }
}

impl std::fmt::Debug for WorkerHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "WorkerHold"
        } else {
            "WorkerHold(unchecked)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_loops(loops: Vec<u64>) -> CheckpointRecord {
        let site = Cow::Borrowed("s");
        CheckpointRecord::new(
            Arc::from("r"),
            1,
            site,
            None,
            loops,
            Vec::new(),
            Vec::new(),
            None,
            SystemTime::UNIX_EPOCH,
        )
    }

    /// Loop positions come first; the items' fingerprints follow
    /// [`LOOP_ITEMS`], and an older checkpoint has none.
    #[test]
    fn stored_loops_split_into_positions_and_items() {
        let cp = with_loops(vec![3, 1, LOOP_ITEMS, 11, 0]);
        assert_eq!(cp.loop_positions(), &[3, 1]);
        assert_eq!(cp.loop_item(0), 11);
        assert_eq!(cp.loop_item(1), 0);
        let older = with_loops(vec![3, 1]);
        assert_eq!(older.loop_positions(), &[3, 1]);
        assert_eq!(older.loop_item(0), 0, "an older checkpoint has none");
    }
}
