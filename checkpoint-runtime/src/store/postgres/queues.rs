//! The queue limits of a claim ([`crate::Queue`]): the runs of limited
//! queues that the claim query locked are set aside ([`bounded`]), then per
//! queue, under a transaction-scoped advisory lock of that queue (so two
//! claims, of any process, never both count the same free slot or rate
//! allowance: the second counts once the first committed its leases and
//! admissions), the slots held and the admissions of the rate's window are
//! counted and `rules::admit_queued` says which of them are taken.

use std::collections::BTreeMap;
use std::time::SystemTime;

use tokio_postgres::Row;

use super::conn::{get, scrub, ts, Cx};
use crate::store::rules;
use crate::store::sql::run_row::state_sql;
use crate::store::ClaimRequest;
use crate::Error;

/// The column of `run_cols!` that holds the queue, and the priority's.
const QUEUE_COL: usize = 22;
const PRIORITY_COL: usize = 23;

/// Whether `row` (of the claim query) is a run of a queue `req` bounds.
pub(super) fn bounded(req: &ClaimRequest, row: &Row) -> bool {
    let queue: Option<String> = get(row, QUEUE_COL).ok().flatten();
    rules::queue_limits(req, queue.as_deref()).is_some()
}

/// Of `rows` (runs of bounded queues, locked by this claim, in the order
/// the claim met them), the ones admitted, queue by queue in name order
/// (the order every claim takes the queues' locks in), at most `room` in
/// all.
pub(super) async fn admit(
    cx: &mut Cx<'_>,
    schema: &str,
    req: &ClaimRequest,
    rows: Vec<Row>,
    mut room: usize,
) -> Result<Vec<Row>, Error> {
    let mut by_queue: BTreeMap<String, Vec<(i32, usize, Row)>> = BTreeMap::new();
    for (i, row) in rows.into_iter().enumerate() {
        let queue: Option<String> = get(&row, QUEUE_COL)?;
        let priority: i32 = get(&row, PRIORITY_COL)?;
        by_queue
            .entry(queue.unwrap_or_default())
            .or_default()
            .push((priority, i, row));
    }
    let mut admitted = Vec::new();
    for (queue, candidates) in by_queue {
        let Some(limits) = rules::queue_limits(req, Some(&queue)) else {
            continue;
        };
        if room == 0 {
            break;
        }
        let key = scrub(&format!("{schema}/queue/{queue}")).into_owned();
        cx.query_one(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[&key],
        )
        .await?;
        // The time is read after the lock: leases that expired while this
        // claim waited for it are free.
        let now = SystemTime::now();
        let held = match limits.concurrency {
            None => 0,
            Some(_) => slots_held(cx, &queue, now, req).await?,
        };
        let window = limits.rate.map(|(_, per)| rules::rate_window(per, now));
        let recent = match window {
            None => 0,
            Some((since, _)) => admitted_since(cx, &queue, since).await?,
        };
        let took = rules::admit_queued(limits, held, recent, room, candidates);
        room -= took.len();
        if let (Some((_, until)), false) = (window, took.is_empty()) {
            record(cx, &queue, took.len(), now, until).await?;
        }
        admitted.extend(took);
    }
    Ok(admitted)
}

/// Stores `n` admissions of `queue` at `now`, counting until `until`, and
/// drops the queue's admissions that no longer count. (Written before the
/// runs are claimed, in the same transaction: a claim that fails writes
/// neither.)
async fn record(
    cx: &mut Cx<'_>,
    queue: &str,
    n: usize,
    now: SystemTime,
    until: SystemTime,
) -> Result<(), Error> {
    let (now, until) = (ts(now), ts(until));
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    cx.execute(
        "DELETE FROM cp_queue_admissions WHERE queue = $1 AND until <= $2",
        &[&queue, &now],
    )
    .await?;
    cx.execute(
        "INSERT INTO cp_queue_admissions (queue, at, until) \
         SELECT $1, $2, $3 FROM generate_series(1::bigint, $4::bigint)",
        &[&queue, &now, &until, &n],
    )
    .await?;
    Ok(())
}

/// How many runs of `queue` were admitted after `since`.
async fn admitted_since(cx: &mut Cx<'_>, queue: &str, since: SystemTime) -> Result<usize, Error> {
    let row = cx
        .query_one(
            "SELECT count(*) FROM cp_queue_admissions WHERE queue = $1 AND at > $2",
            &[&queue, &ts(since)],
        )
        .await?;
    let n: i64 = get(&row, 0)?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// How many runs of `queue` hold a slot of it (`rules::holds_slot`: a
/// live lease, by the system's time, that this claim could not take).
async fn slots_held(
    cx: &mut Cx<'_>,
    queue: &str,
    now: SystemTime,
    req: &ClaimRequest,
) -> Result<usize, Error> {
    const SQL: &str = concat!(
        "SELECT count(*) FROM cp_runs WHERE queue = $1 AND lease_worker IS NOT NULL \
         AND lease_expires > $2 AND state NOT IN (",
        state_sql!(COMPLETED),
        ", ",
        state_sql!(FAILED),
        ", ",
        state_sql!(CANCELLED),
        ") AND NOT (lease_worker = $3 AND lease_instance < $4)"
    );
    let worker: &str = &req.worker;
    let instance: &str = &req.instance;
    let row = cx
        .query_one(SQL, &[&queue, &ts(now), &worker, &instance])
        .await?;
    let n: i64 = get(&row, 0)?;
    Ok(usize::try_from(n).unwrap_or(0))
}
