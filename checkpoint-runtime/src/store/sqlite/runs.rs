//! The `runs` table (one row per run, without its checkpoints) and the
//! `signals` table (stored signals, per run, in arrival order), as read;
//! and a stored signal consumed, which a claim or a take does while it
//! loads what its rule needs. A transition's writes are `write`'s.

use rusqlite::{params, Connection, OptionalExtension};

use super::error::{corrupt, Fail, R};
use crate::store::sql::from_ts;
use crate::store::sql::run_row::{RunRow, FAILED};
use crate::store::{RunRecord, SignalRecord};
use crate::Error;

/// The columns of [`RawRun`], in order, over `runs r`. The latest checkpoint's
/// `seq` and `created_at` are appended by the query (see [`RUN_SELECT`]).
pub(super) const RUN_COLS: &str =
    "r.ord, r.id, r.workflow, r.state, r.signal, r.due, r.output, r.error, \
     r.lease_worker, r.lease_instance, r.lease_expires, r.epoch, r.attempt, \
     r.wake_seq, r.wake_signal, r.wake_payload, r.created_at, r.updated_at, r.version, \
     r.cancel_request";

/// A run row with its input and its latest checkpoint's `seq` and
/// `created_at`.
pub(super) const RUN_SELECT: &str =
    "SELECT r.ord, r.id, r.workflow, r.state, r.signal, r.due, r.output, \
     r.error, r.lease_worker, r.lease_instance, r.lease_expires, r.epoch, r.attempt, \
     r.wake_seq, r.wake_signal, r.wake_payload, r.created_at, r.updated_at, r.version, \
     r.cancel_request, r.input, c.seq, c.created_at, r.parent, r.tags, r.queue, r.priority \
     FROM runs r LEFT JOIN heads h ON h.run = r.ord LEFT JOIN checkpoints c ON c.id = h.latest";

/// A run row as read: the shared columns ([`RunRow`]), its key, and when
/// its latest checkpoint was taken (a plain checkpoint leaves the run row
/// alone: its latest seq and time are read from the checkpoint).
pub(super) struct RawRun {
    pub(super) ord: i64,
    pub(super) row: RunRow,
    pub(super) latest_at: Option<i64>,
}

impl RawRun {
    /// Reads the [`RUN_COLS`] columns; the input and latest checkpoint are
    /// left empty. A failed run's row always reads back (see
    /// [`RunRow::into_record`]): a column of the wrong type reads as empty.
    pub(super) fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
        match RawRun::strict(r) {
            Err(_) if matches!(r.get::<_, i64>(3), Ok(FAILED)) => Ok(RawRun::salvaged(r)),
            other => other,
        }
    }

    /// A failed run's row whose columns do not all read as their types.
    fn salvaged(r: &rusqlite::Row<'_>) -> RawRun {
        fn opt<T: rusqlite::types::FromSql>(r: &rusqlite::Row<'_>, i: usize) -> Option<T> {
            r.get::<_, Option<T>>(i).ok().flatten()
        }
        let num = |i| opt::<i64>(r, i).unwrap_or(0);
        RawRun {
            ord: num(0),
            row: RunRow {
                id: opt(r, 1).unwrap_or_default(),
                workflow: opt(r, 2).unwrap_or_default(),
                input: Vec::new(),
                state: FAILED,
                signal: None,
                due: None,
                output: None,
                error: opt(r, 7),
                lease_worker: None,
                lease_instance: None,
                lease_expires: None,
                epoch: num(11),
                attempt: num(12),
                latest_seq: 0,
                wake_seq: None,
                wake_signal: None,
                wake_payload: None,
                created_at: num(16),
                updated_at: num(17),
                version: opt::<i64>(r, 18).unwrap_or(1),
                parent: None,
                cancel: None,
                tags: None,
                queue: None,
                priority: 0,
            },
            latest_at: None,
        }
    }

    fn strict(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
        Ok(RawRun {
            ord: r.get(0)?,
            row: RunRow {
                id: r.get(1)?,
                workflow: r.get(2)?,
                input: Vec::new(),
                state: r.get(3)?,
                signal: r.get(4)?,
                due: r.get(5)?,
                output: r.get(6)?,
                error: r.get(7)?,
                lease_worker: r.get(8)?,
                lease_instance: r.get(9)?,
                lease_expires: r.get(10)?,
                epoch: r.get(11)?,
                attempt: r.get(12)?,
                latest_seq: 0,
                wake_seq: r.get(13)?,
                wake_signal: r.get(14)?,
                wake_payload: r.get(15)?,
                created_at: r.get(16)?,
                updated_at: r.get(17)?,
                version: r.get(18)?,
                parent: None,
                cancel: r.get(19)?,
                tags: None,
                queue: None,
                priority: 0,
            },
            latest_at: None,
        })
    }

    /// Reads a [`RUN_SELECT`] row.
    pub(super) fn from_full_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
        let mut raw = RawRun::from_row(r)?;
        let failed = raw.row.state == FAILED;
        match r.get(20) {
            Ok(input) => raw.row.input = input,
            Err(_) if failed => {}
            Err(e) => return Err(e),
        }
        raw.set_latest(r.get(21)?, r.get(22)?);
        raw.row.parent = r.get(23).unwrap_or(None);
        // The start options; a failed run's that do not read are left out.
        match (r.get(24), r.get(25), r.get(26)) {
            (Ok(tags), Ok(queue), Ok(priority)) => {
                (raw.row.tags, raw.row.queue, raw.row.priority) = (tags, queue, priority);
            }
            (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) if !failed => return Err(e),
            _ => {}
        }
        Ok(raw)
    }

    /// The latest checkpoint's `seq` and `created_at`, if there is one.
    pub(super) fn set_latest(&mut self, seq: Option<i64>, at: Option<i64>) {
        self.row.latest_seq = seq.unwrap_or(0);
        self.latest_at = at;
    }

    pub(super) fn into_record(self) -> R<(i64, RunRecord)> {
        let mut row = self.row;
        row.updated_at = row.updated_at.max(self.latest_at.unwrap_or(i64::MIN));
        let rec = row.into_record().map_err(corrupt)?;
        Ok((self.ord, rec))
    }
}

/// Loads a run by id, with its input (what readers return).
pub(super) fn fetch_run(conn: &Connection, id: &str) -> R<Option<(i64, RunRecord)>> {
    let raw = conn
        .prepare_cached(&format!("{RUN_SELECT} WHERE r.id = ?1"))?
        .query_row([id], RawRun::from_full_row)
        .optional()?;
    raw.map(RawRun::into_record).transpose()
}

pub(super) fn run_ord(conn: &Connection, id: &str) -> R<i64> {
    conn.prepare_cached("SELECT ord FROM runs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .ok_or_else(|| Fail::from(Error::unknown_run(id)))
}

/// The row id of the oldest stored signal `name` of run `ord`.
pub(super) fn oldest_signal(conn: &Connection, ord: i64, name: &str) -> R<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT id FROM signals WHERE run = ?1 AND name = ?2 ORDER BY id LIMIT 1")?
        .query_row(params![ord, name], |r| r.get(0))
        .optional()?)
}

/// Deletes signal row `sid` and returns it.
pub(super) fn delete_signal(conn: &Connection, sid: i64) -> R<SignalRecord> {
    let (name, payload, received_at): (String, Vec<u8>, i64) = conn
        .prepare_cached("DELETE FROM signals WHERE id = ?1 RETURNING name, payload, received_at")?
        .query_row([sid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(SignalRecord {
        name,
        payload: payload.into(),
        received_at: from_ts(received_at),
    })
}

/// Deletes and returns the oldest stored signal `name` of run `ord`.
pub(super) fn consume_signal(conn: &Connection, ord: i64, name: &str) -> R<Option<SignalRecord>> {
    match oldest_signal(conn, ord, name)? {
        Some(sid) => delete_signal(conn, sid).map(Some),
        None => Ok(None),
    }
}
