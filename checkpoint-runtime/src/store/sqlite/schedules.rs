//! The `schedules` table ([`Store::put_schedule`](crate::store::Store::put_schedule)
//! and the operations after it): one row per schedule.

use rusqlite::{params, Connection};

use super::error::R;
use super::writer::txn::TxnCtx;
use crate::store::sql::{from_ts, ts};
use crate::store::ScheduleRecord;

const COLUMNS: &str = "name, workflow, spec, paused, last_tick, last_run, created_at";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ScheduleRecord> {
    let mut rec = ScheduleRecord::new(
        &r.get::<_, String>(0)?,
        &r.get::<_, String>(1)?,
        &r.get::<_, String>(2)?,
        from_ts(r.get(6)?),
    );
    rec.paused = r.get::<_, i64>(3)? != 0;
    rec.last_tick = r.get::<_, Option<i64>>(4)?.map(from_ts);
    rec.last_run = r.get(5)?;
    Ok(rec)
}

pub(super) fn put(cx: &mut TxnCtx<'_>, rec: &ScheduleRecord) -> R<ScheduleRecord> {
    cx.begin()?;
    cx.conn
        .prepare_cached(
            "INSERT INTO schedules (name, workflow, spec, created_at) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (name) DO UPDATE SET workflow = excluded.workflow, spec = excluded.spec",
        )?
        .execute(params![
            rec.name,
            rec.workflow,
            rec.spec,
            ts(rec.created_at)
        ])?;
    Ok(cx
        .conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM schedules WHERE name = ?1"))?
        .query_row([&rec.name], row)?)
}

pub(super) fn list(conn: &Connection) -> R<Vec<ScheduleRecord>> {
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {COLUMNS} FROM schedules ORDER BY name"))?;
    let rows = stmt.query_map([], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(super) fn set_paused(cx: &mut TxnCtx<'_>, name: &str, paused: bool) -> R<bool> {
    let n = cx
        .conn
        .prepare_cached("UPDATE schedules SET paused = ?2 WHERE name = ?1")?
        .execute(params![name, paused as i64])?;
    Ok(n == 1)
}

pub(super) fn delete(cx: &mut TxnCtx<'_>, name: &str) -> R<bool> {
    let n = cx
        .conn
        .prepare_cached("DELETE FROM schedules WHERE name = ?1")?
        .execute([name])?;
    Ok(n == 1)
}

/// The compare-and-set: `last_tick IS ?` matches NULL too.
pub(super) fn advance(
    cx: &mut TxnCtx<'_>,
    name: &str,
    from: Option<i64>,
    to: i64,
    run: Option<&str>,
) -> R<bool> {
    let n = cx
        .conn
        .prepare_cached(
            "UPDATE schedules SET last_tick = ?3, last_run = COALESCE(?4, last_run) \
             WHERE name = ?1 AND last_tick IS ?2",
        )?
        .execute(params![name, from, to, run])?;
    Ok(n == 1)
}
