//! `cp_schedules` ([`Store::put_schedule`](crate::store::Store::put_schedule)
//! and the operations after it): one row per schedule.

use std::time::SystemTime;

use super::conn::{from_ts, get, ts, Pool};
use crate::store::ScheduleRecord;
use crate::Error;

macro_rules! columns {
    () => {
        "name, workflow, spec, paused, last_tick, last_run, created_at"
    };
}

const PUT: &str = concat!(
    "INSERT INTO cp_schedules (name, workflow, spec, created_at) VALUES ($1, $2, $3, $4) \
     ON CONFLICT (name) DO UPDATE SET workflow = excluded.workflow, spec = excluded.spec \
     RETURNING ",
    columns!()
);

const LIST: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM cp_schedules ORDER BY name COLLATE \"C\""
);

fn record(row: &tokio_postgres::Row) -> Result<ScheduleRecord, Error> {
    let mut rec = ScheduleRecord::new(
        &get::<String>(row, 0)?,
        &get::<String>(row, 1)?,
        &get::<String>(row, 2)?,
        from_ts(get(row, 6)?),
    );
    rec.paused = get(row, 3)?;
    rec.last_tick = get::<Option<i64>>(row, 4)?.map(from_ts);
    rec.last_run = get(row, 5)?;
    Ok(rec)
}

pub(super) async fn put(pool: &Pool, rec: &ScheduleRecord) -> Result<ScheduleRecord, Error> {
    let mut conn = pool.get().await?;
    let mut cx = conn.plain();
    let row = cx
        .query_one(
            PUT,
            &[&rec.name, &rec.workflow, &rec.spec, &ts(rec.created_at)],
        )
        .await?;
    record(&row)
}

pub(super) async fn list(pool: &Pool) -> Result<Vec<ScheduleRecord>, Error> {
    let mut conn = pool.get().await?;
    let mut cx = conn.plain();
    let rows = cx.query(LIST, &[]).await?;
    rows.iter().map(record).collect()
}

pub(super) async fn set_paused(pool: &Pool, name: &str, paused: bool) -> Result<bool, Error> {
    let mut conn = pool.get().await?;
    let mut cx = conn.plain();
    let n = cx
        .execute(
            "UPDATE cp_schedules SET paused = $2 WHERE name = $1",
            &[&name, &paused],
        )
        .await?;
    Ok(n == 1)
}

pub(super) async fn delete(pool: &Pool, name: &str) -> Result<bool, Error> {
    let mut conn = pool.get().await?;
    let mut cx = conn.plain();
    let n = cx
        .execute("DELETE FROM cp_schedules WHERE name = $1", &[&name])
        .await?;
    Ok(n == 1)
}

/// The compare-and-set: `IS NOT DISTINCT FROM` matches NULL too.
pub(super) async fn advance(
    pool: &Pool,
    name: &str,
    from: Option<SystemTime>,
    to: SystemTime,
    run: Option<&str>,
) -> Result<bool, Error> {
    let mut conn = pool.get().await?;
    let mut cx = conn.plain();
    let n = cx
        .execute(
            "UPDATE cp_schedules SET last_tick = $3, last_run = COALESCE($4, last_run) \
             WHERE name = $1 AND last_tick IS NOT DISTINCT FROM $2",
            &[&name, &from.map(ts), &ts(to), &run],
        )
        .await?;
    Ok(n == 1)
}
