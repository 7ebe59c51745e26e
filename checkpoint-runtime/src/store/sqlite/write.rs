//! The single-row writes that [`apply`](super::apply::apply) is made of: a
//! run's row (written back, inserted, or, for a row that does not load,
//! its end), a history event of a run, a queued signal, and a run's `ord`
//! by id. Nothing here decides anything: what to write is the change a rule
//! returned, and only `apply` calls these for a transition (the runtime's
//! own events, [`Store::append_event`](crate::store::Store::append_event),
//! go through [`record_event`] too).

use std::time::SystemTime;

use rusqlite::{params, Connection, OptionalExtension};

use super::error::R;
use super::writer::cache::Head;
use super::writer::txn::TxnCtx;
use crate::history::Event;
use crate::store::sql::run_row::{state_code, tags_col, ErrorCol, RunCols};
use crate::store::sql::{to_json, ts};
use crate::store::{RunRecord, SignalRecord};
use crate::Error;

/// The `error` column's text.
fn error_text(col: Option<ErrorCol<'_>>) -> R<Option<String>> {
    Ok(match col {
        None => None,
        Some(ErrorCol::Text(text)) => Some(text.to_owned()),
        Some(ErrorCol::Json(error)) => Some(to_json(error)?),
    })
}

/// Writes a head's run row back (see [`write_run`]) and notes the state
/// code it now has.
pub(super) fn write_head(conn: &Connection, h: &mut Head) -> R<()> {
    write_run(conn, h.ord, &h.rec, h.stored)?;
    h.stored = state_code(&h.rec.state);
    Ok(())
}

/// Writes every mutable column of `rec` back to run `ord`, whose stored state
/// code is `before`. The `state` column is left alone when it does not change,
/// so that the index of active runs is not rewritten.
fn write_run(conn: &Connection, ord: i64, rec: &RunRecord, before: i64) -> R<()> {
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

/// Writes what a rule sets on a blank record (see `rules::blank_run`) to
/// run `ord`, whose row does not load: its state (with the error), its
/// lease and its update time, nothing else (the other columns are what
/// could not be read).
pub(super) fn write_blank(conn: &Connection, ord: i64, rec: &RunRecord) -> R<()> {
    let cols = RunCols::of(rec)?;
    conn.prepare_cached(
        "UPDATE runs SET state = ?2, error = ?3, lease_worker = ?4, \
         lease_instance = ?5, lease_expires = ?6, updated_at = ?7 WHERE ord = ?1",
    )?
    .execute(params![
        ord,
        cols.state,
        error_text(cols.error)?,
        cols.lease_worker,
        cols.lease_instance,
        cols.lease_expires,
        cols.updated_at,
    ])?;
    Ok(())
}

/// Inserts a new run (no lease, no wake value, no checkpoint); returns its
/// `ord`. Two statements.
pub(super) fn insert_run(conn: &Connection, rec: &RunRecord) -> R<i64> {
    let cols = RunCols::of(rec)?;
    conn.prepare_cached(
        "INSERT INTO runs (id, workflow, input, state, signal, due, output, error, epoch, \
         attempt, created_at, updated_at, version, parent, tags, queue, priority) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
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
        tags_col(&rec.tags)?,
        rec.queue,
        rec.priority,
    ])?;
    let ord = conn.last_insert_rowid();
    conn.prepare_cached("INSERT INTO heads (run) VALUES (?1)")?
        .execute([ord])?;
    Ok(ord)
}

/// Records `event` in the history of run `ord`, at `at`.
pub(super) fn record_event(cx: &mut TxnCtx<'_>, ord: i64, at: SystemTime, event: &Event) -> R<()> {
    let id = cx.next_id()?;
    cx.conn
        .prepare_cached("INSERT INTO history (id, run, at, event) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![id, ord, ts(at), to_json(event)?])?;
    Ok(())
}

/// Stores `signal` for run `ord`, after the ones it has.
pub(super) fn queue_signal(conn: &Connection, ord: i64, signal: &SignalRecord) -> R<()> {
    conn.prepare_cached(
        "INSERT INTO signals (run, name, payload, received_at) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        ord,
        signal.name,
        &signal.payload[..],
        ts(signal.received_at)
    ])?;
    Ok(())
}

/// The `ord` of run `id`, from the cache when it is there; `None` when the
/// store has no such run.
pub(super) fn ord_of(cx: &TxnCtx<'_>, id: &str) -> R<Option<i64>> {
    if let Some(h) = cx.cache.heads.get(id) {
        return Ok(Some(h.ord));
    }
    Ok(cx
        .conn
        .prepare_cached("SELECT ord FROM runs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?)
}
