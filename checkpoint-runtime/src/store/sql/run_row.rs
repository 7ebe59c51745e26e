//! A run record as the flat row the SQL backends keep it in (`runs` in
//! SQLite, `cp_runs` in PostgreSQL): the state codes, the columns a record
//! is written as ([`RunCols`]) and a row read back into a record
//! ([`RunRow`]). Each backend binds and reads the columns its own way (and
//! PostgreSQL scrubs the texts it binds); what they mean is decided here, once.

use std::collections::BTreeMap;

use super::{from_ts, to_i64, to_u64, ts, Corrupt};
use crate::status::StatusKind;
use crate::store::{CancelRequest, LeaseInfo, RunRecord, RunState, Wake, WakeValue};
use crate::Error;

/// A state code as an SQL literal, for the statements the SQL backends
/// write as `concat!`ed constants: `state_sql!(WAITING)` is `"1"`. The one
/// table of codes besides the constants below; `state_sql_matches_the_codes`
/// checks that they agree. (The schema's history, its `CREATE INDEX ...
/// WHERE state = 0` of past versions, keeps its literals: it is frozen.)
macro_rules! state_sql {
    (READY) => {
        "0"
    };
    (WAITING) => {
        "1"
    };
    (SLEEPING) => {
        "2"
    };
    (COMPLETED) => {
        "3"
    };
    (FAILED) => {
        "4"
    };
    (CANCELLED) => {
        "5"
    };
    (PARKED) => {
        "6"
    };
    (HELD) => {
        "7"
    };
}
pub(crate) use state_sql;

// State codes of the `state` column.
pub(crate) const READY: i64 = 0;
pub(crate) const WAITING: i64 = 1;
pub(crate) const SLEEPING: i64 = 2;
pub(crate) const COMPLETED: i64 = 3;
pub(crate) const FAILED: i64 = 4;
pub(crate) const CANCELLED: i64 = 5;
/// Above the terminal codes, so that every `state < 3` (runnable) query
/// leaves a parked run alone, and no terminal-state query counts it.
pub(crate) const PARKED: i64 = 6;
/// A child waiting for a free slot among its parent's running children:
/// above the terminal codes too, so that no runnable query takes it.
pub(crate) const HELD: i64 = 7;

/// The code a run in `state` is stored with.
pub(crate) fn state_code(state: &RunState) -> i64 {
    match state {
        RunState::Ready => READY,
        RunState::Waiting { .. } => WAITING,
        RunState::Sleeping { .. } => SLEEPING,
        RunState::Completed { .. } => COMPLETED,
        RunState::Failed { .. } => FAILED,
        RunState::Cancelled => CANCELLED,
        RunState::Parked { .. } => PARKED,
        RunState::Held => HELD,
    }
}

/// The status kind of stored runs counted together (see
/// `Store::count_runs`): their state code, whether they have an error
/// (a completed run with one counts as failed), a live lease (a runnable
/// run under one is running, else queued), and a join's signal name (a
/// run waiting for its children is joining). Mirrors
/// [`RunRecord::status`]; `None` for a code no build writes.
pub(crate) fn counted_kind(
    state: i64,
    has_error: bool,
    leased: bool,
    joining: bool,
) -> Option<StatusKind> {
    Some(match state {
        READY if leased => StatusKind::Running,
        READY => StatusKind::Queued,
        WAITING if joining => StatusKind::Joining,
        WAITING => StatusKind::Waiting,
        SLEEPING => StatusKind::Sleeping,
        COMPLETED if has_error => StatusKind::Failed,
        COMPLETED => StatusKind::Completed,
        FAILED => StatusKind::Failed,
        CANCELLED => StatusKind::Cancelled,
        PARKED => StatusKind::Incompatible,
        HELD => StatusKind::Held,
        _ => return None,
    })
}

/// The code of the runs a status filter asks for (a completed run with an
/// error counts as failed: the queries check the `error` column for that).
pub(crate) fn status_code(kind: StatusKind) -> i64 {
    match kind {
        StatusKind::Queued | StatusKind::Running => READY,
        StatusKind::Waiting | StatusKind::Joining => WAITING,
        StatusKind::Sleeping => SLEEPING,
        StatusKind::Completed => COMPLETED,
        StatusKind::Failed => FAILED,
        StatusKind::Cancelled => CANCELLED,
        StatusKind::Incompatible => PARKED,
        StatusKind::Held => HELD,
    }
}

/// What goes into the `error` column.
pub(crate) enum ErrorCol<'a> {
    /// A completed run's error text, as it is.
    Text(&'a str),
    /// A failed run's error, stored as JSON.
    Json(&'a Error),
}

/// The columns a run's record is written as (all but `id`, `workflow` and
/// `input`, which never change).
pub(crate) struct RunCols<'a> {
    pub state: i64,
    pub signal: Option<&'a str>,
    pub due: Option<i64>,
    pub output: Option<&'a [u8]>,
    pub error: Option<ErrorCol<'a>>,
    pub lease_worker: Option<&'a str>,
    pub lease_instance: Option<&'a str>,
    pub lease_expires: Option<i64>,
    pub epoch: i64,
    pub attempt: i64,
    /// Kept in the row by PostgreSQL; SQLite reads it from the latest
    /// checkpoint.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub latest_seq: i64,
    pub wake_seq: Option<i64>,
    pub wake_signal: Option<&'a str>,
    pub wake_payload: Option<&'a [u8]>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Written by SQLite's updates; PostgreSQL writes it only with the run.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub version: i64,
}

impl<'a> RunCols<'a> {
    /// The columns of `rec`.
    pub(crate) fn of(rec: &'a RunRecord) -> Result<RunCols<'a>, Error> {
        let (signal, due, output, error) = match &rec.state {
            RunState::Ready | RunState::Cancelled | RunState::Held => (None, None, None, None),
            RunState::Waiting { signal, deadline } => {
                (Some(signal.as_str()), deadline.map(ts), None, None)
            }
            RunState::Sleeping { until } => (None, Some(ts(*until)), None, None),
            RunState::Completed { output, error } => (
                None,
                None,
                Some(&output[..]),
                error.as_deref().map(ErrorCol::Text),
            ),
            RunState::Failed { error } | RunState::Parked { error } => {
                (None, None, None, Some(ErrorCol::Json(error)))
            }
        };
        let (wake_seq, wake_signal, wake_payload) = match &rec.wake {
            None => (None, None, None),
            Some(w) => {
                let seq = Some(to_i64(w.seq, "seq")?);
                match &w.value {
                    WakeValue::Signal { name, payload } => {
                        (seq, Some(name.as_str()), Some(&payload[..]))
                    }
                    WakeValue::TimedOut => (seq, None, None),
                }
            }
        };
        let lease = rec.lease.as_ref();
        Ok(RunCols {
            state: state_code(&rec.state),
            signal,
            due,
            output,
            error,
            lease_worker: lease.map(|l| l.worker.as_str()),
            lease_instance: lease.map(|l| l.instance.as_str()),
            lease_expires: lease.map(|l| ts(l.expires_at)),
            epoch: to_i64(rec.epoch, "epoch")?,
            attempt: i64::from(rec.attempt),
            latest_seq: to_i64(rec.latest_seq, "seq")?,
            wake_seq,
            wake_signal,
            wake_payload,
            created_at: ts(rec.created_at),
            updated_at: ts(rec.updated_at),
            version: i64::from(rec.version),
        })
    }
}

/// A run's row as read back.
pub(crate) struct RunRow {
    pub id: String,
    pub workflow: String,
    pub input: Vec<u8>,
    pub state: i64,
    pub signal: Option<String>,
    pub due: Option<i64>,
    pub output: Option<Vec<u8>>,
    pub error: Option<String>,
    pub lease_worker: Option<String>,
    pub lease_instance: Option<String>,
    pub lease_expires: Option<i64>,
    pub epoch: i64,
    pub attempt: i64,
    pub latest_seq: i64,
    pub wake_seq: Option<i64>,
    pub wake_signal: Option<String>,
    pub wake_payload: Option<Vec<u8>>,
    pub created_at: i64,
    pub updated_at: i64,
    pub version: i64,
    /// Written once, with the run; read where a backend needs it.
    pub parent: Option<String>,
    /// The cancel request, as [`CancelRequest::to_json`] writes it; written
    /// only by a request (see `rules::request_cancel`).
    pub cancel: Option<String>,
    /// The tags, as [`tags_col`] writes them; written once, with the run.
    pub tags: Option<String>,
    /// The queue; written once, with the run.
    pub queue: Option<String>,
    /// The priority; written once, with the run.
    pub priority: i64,
}

impl RunRow {
    /// The record the row holds, or what about the row does not make sense
    /// (each backend reports it as a corrupt database).
    ///
    /// A failed run's row always reads back: the run is terminal, so what
    /// else its row says (the counters, the wake value) no longer drives
    /// anything, and a row marked failed because it did not decode (see
    /// `rules::damaged`) must still answer `status` with its error. Such
    /// numbers that do not make sense read as 0 (a wake value: none).
    pub(crate) fn into_record(self) -> Result<RunRecord, Corrupt> {
        let lenient = self.state == FAILED;
        let num = |v: i64, what: &str| match to_u64(v, what) {
            Err(_) if lenient => Ok(0),
            other => other,
        };
        let id = self.id;
        let state = match self.state {
            HELD => RunState::Held,
            READY => RunState::Ready,
            WAITING => RunState::Waiting {
                signal: self
                    .signal
                    .ok_or_else(|| Corrupt(format!("run `{id}` waits for no signal")))?,
                deadline: self.due.map(from_ts),
            },
            SLEEPING => RunState::Sleeping {
                until: from_ts(
                    self.due
                        .ok_or_else(|| Corrupt(format!("run `{id}` sleeps forever")))?,
                ),
            },
            COMPLETED => RunState::Completed {
                output: self.output.unwrap_or_default().into(),
                error: self.error,
            },
            FAILED => {
                let text = self.error.unwrap_or_default();
                // The runtime's error as JSON; one this build does not know
                // (a newer version wrote it) is kept as text.
                let error = serde_json::from_str(&text).unwrap_or(Error::store(text));
                RunState::Failed { error }
            }
            CANCELLED => RunState::Cancelled,
            PARKED => RunState::Parked {
                error: serde_json::from_str(self.error.as_deref().unwrap_or_default()).map_err(
                    |e| {
                        Corrupt(format!(
                            "run `{id}` is parked for a reason that does not decode: {e}"
                        ))
                    },
                )?,
            },
            other => return Err(Corrupt(format!("run `{id}` has state {other}"))),
        };
        let lease = match (self.lease_worker, self.lease_instance) {
            (Some(worker), Some(instance)) => Some(LeaseInfo {
                worker,
                instance,
                expires_at: from_ts(self.lease_expires.unwrap_or(0)),
            }),
            _ => None,
        };
        let wake = match self.wake_seq {
            None => None,
            Some(seq) if lenient && seq < 0 => None,
            Some(seq) => Some(Wake {
                seq: to_u64(seq, "wake seq")?,
                value: match self.wake_signal {
                    Some(name) => WakeValue::Signal {
                        name,
                        payload: self.wake_payload.unwrap_or_default().into(),
                    },
                    None => WakeValue::TimedOut,
                },
            }),
        };
        let cancel = cancel_request(&id, self.cancel)?;
        let tags = match tags_from_col(&id, self.tags) {
            Err(_) if lenient => Default::default(),
            other => other?,
        };
        Ok(RunRecord {
            id,
            workflow: self.workflow,
            input: self.input.into(),
            state,
            lease,
            epoch: num(self.epoch, "epoch")?,
            attempt: u32::try_from(self.attempt).unwrap_or(u32::MAX),
            latest_seq: num(self.latest_seq, "seq")?,
            wake,
            created_at: from_ts(self.created_at),
            updated_at: from_ts(self.updated_at),
            version: u32::try_from(self.version).unwrap_or(1).max(1),
            parent: self.parent,
            cancel,
            tags,
            queue: self.queue,
            priority: i32::try_from(self.priority).unwrap_or(0),
        })
    }
}

/// Run `id`'s cancel request column (see [`RunRow::cancel`]) as a request.
pub(crate) fn cancel_request(
    id: &str,
    col: Option<String>,
) -> Result<Option<CancelRequest>, Corrupt> {
    match col {
        None => Ok(None),
        Some(text) => CancelRequest::from_json(&text).map(Some).ok_or_else(|| {
            Corrupt(format!(
                "run `{id}` has a cancel request that does not read: {text}"
            ))
        }),
    }
}

/// The `tags` column of a run with `tags`: a JSON object of strings, NULL
/// when it has none. A filter's tags are bound the same way (a run matches
/// when its object holds every pair of the filter's).
pub(crate) fn tags_col(tags: &BTreeMap<String, String>) -> Result<Option<String>, Error> {
    if tags.is_empty() {
        return Ok(None);
    }
    super::to_json(tags).map(Some)
}

/// Run `id`'s `tags` column (see [`tags_col`]) as tags.
pub(crate) fn tags_from_col(
    id: &str,
    col: Option<String>,
) -> Result<BTreeMap<String, String>, Corrupt> {
    match col {
        None => Ok(BTreeMap::new()),
        Some(text) => serde_json::from_str(&text).map_err(|e| {
            Corrupt(format!(
                "run `{id}` has tags that do not read ({e}): {text}"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_sql_matches_the_codes() {
        let pairs = [
            (state_sql!(READY), READY),
            (state_sql!(WAITING), WAITING),
            (state_sql!(SLEEPING), SLEEPING),
            (state_sql!(COMPLETED), COMPLETED),
            (state_sql!(FAILED), FAILED),
            (state_sql!(CANCELLED), CANCELLED),
            (state_sql!(PARKED), PARKED),
            (state_sql!(HELD), HELD),
        ];
        for (literal, code) in pairs {
            assert_eq!(literal.parse::<i64>().ok(), Some(code), "{literal}");
        }
    }
}
