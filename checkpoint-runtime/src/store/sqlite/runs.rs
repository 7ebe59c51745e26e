//! The `runs` table (one row per run, without its checkpoints) and the
//! `signals` table (stored signals, per run, in arrival order).

use rusqlite::{params, Connection, OptionalExtension};

use super::error::{corrupt, Fail, R};
use crate::store::sql::run_row::{ErrorCol, RunCols, RunRow, FAILED};
use crate::store::sql::{from_ts, to_json};
use crate::store::{RunRecord, SignalRecord};
use crate::Error;

/// The columns of [`RawRun`], in order, over `runs r`. The latest checkpoint's
/// `seq` and `created_at` are appended by the query (see [`RUN_SELECT`]).
pub(super) const RUN_COLS: &str =
    "r.ord, r.id, r.workflow, r.state, r.signal, r.due, r.output, r.error, \
     r.lease_worker, r.lease_instance, r.lease_expires, r.epoch, r.attempt, \
     r.wake_seq, r.wake_signal, r.wake_payload, r.created_at, r.updated_at, r.version";

/// A run row with its input and its latest checkpoint's `seq` and
/// `created_at`.
pub(super) const RUN_SELECT: &str =
    "SELECT r.ord, r.id, r.workflow, r.state, r.signal, r.due, r.output, \
     r.error, r.lease_worker, r.lease_instance, r.lease_expires, r.epoch, r.attempt, \
     r.wake_seq, r.wake_signal, r.wake_payload, r.created_at, r.updated_at, r.version, \
     r.input, c.seq, c.created_at, r.parent \
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
            },
            latest_at: None,
        })
    }

    /// Reads a [`RUN_SELECT`] row.
    pub(super) fn from_full_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
        let mut raw = RawRun::from_row(r)?;
        let failed = raw.row.state == FAILED;
        match r.get(19) {
            Ok(input) => raw.row.input = input,
            Err(_) if failed => {}
            Err(e) => return Err(e),
        }
        raw.set_latest(r.get(20)?, r.get(21)?);
        raw.row.parent = r.get(22).unwrap_or(None);
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

/// The `error` column's text.
pub(super) fn error_text(col: Option<ErrorCol<'_>>) -> R<Option<String>> {
    Ok(match col {
        None => None,
        Some(ErrorCol::Text(text)) => Some(text.to_owned()),
        Some(ErrorCol::Json(error)) => Some(to_json(error)?),
    })
}

/// Writes every mutable column of `rec` back to run `ord`, whose stored state
/// code is `before`. The `state` column is left alone when it does not change,
/// so that the index of active runs is not rewritten.
pub(super) fn write_run(conn: &Connection, ord: i64, rec: &RunRecord, before: i64) -> R<()> {
    let cols = RunCols::of(rec)?;
    let sql = if cols.state == before {
        "UPDATE runs SET signal = ?3, due = ?4, output = ?5, error = ?6, \
         lease_worker = ?7, lease_instance = ?8, lease_expires = ?9, epoch = ?10, \
         attempt = ?11, wake_seq = ?12, wake_signal = ?13, wake_payload = ?14, \
         updated_at = ?15 WHERE ord = ?1 AND state = ?2"
    } else {
        "UPDATE runs SET state = ?2, signal = ?3, due = ?4, output = ?5, error = ?6, \
         lease_worker = ?7, lease_instance = ?8, lease_expires = ?9, epoch = ?10, \
         attempt = ?11, wake_seq = ?12, wake_signal = ?13, wake_payload = ?14, \
         updated_at = ?15 WHERE ord = ?1"
    };
    let n = conn.prepare_cached(sql)?.execute(params![
        ord,
        cols.state,
        cols.signal,
        cols.due,
        cols.output,
        error_text(cols.error)?,
        cols.lease_worker,
        cols.lease_instance,
        cols.lease_expires,
        cols.epoch,
        cols.attempt,
        cols.wake_seq,
        cols.wake_signal,
        cols.wake_payload,
        cols.updated_at,
    ])?;
    if n != 1 {
        return Err(
            Error::internal(format!("run `{}` changed under its transaction", rec.id)).into(),
        );
    }
    Ok(())
}

/// Inserts a new run (no lease, no wake value, no checkpoint); returns its
/// `ord`. Two statements.
pub(super) fn insert_run(conn: &Connection, rec: &RunRecord) -> R<i64> {
    let cols = RunCols::of(rec)?;
    conn.prepare_cached(
        "INSERT INTO runs (id, workflow, input, state, signal, due, output, error, epoch, \
         attempt, created_at, updated_at, version, parent) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?
    .execute(params![
        rec.id,
        rec.workflow,
        &rec.input[..],
        cols.state,
        cols.signal,
        cols.due,
        cols.output,
        error_text(cols.error)?,
        cols.epoch,
        cols.attempt,
        cols.created_at,
        cols.updated_at,
        cols.version,
        rec.parent,
    ])?;
    let ord = conn.last_insert_rowid();
    conn.prepare_cached("INSERT INTO heads (run) VALUES (?1)")?
        .execute([ord])?;
    Ok(ord)
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
