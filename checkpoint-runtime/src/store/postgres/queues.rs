//! The queue limits of a claim ([`crate::Queue`]): the claim query leaves
//! the runs of the queues the claim limits alone; then per queue, under a transaction-scoped advisory lock of that queue (so two
//! claims, of any process, never both count the same free slot or rate
//! allowance: the second counts once the first committed its leases and
//! admissions), the slots held and the admissions of the rate's window are
//! counted, and the runs `rules::queue_room` leaves room for are read in
//! the rule's order ([`QUEUE_CLAIM`]) and admitted by `rules::admit_queued`.

use std::time::SystemTime;

use tokio_postgres::Row;

use super::conn::{get, scrub, ts, Cx};
use super::tables::runs::run_cols;
use crate::store::rules;
use crate::store::sql::run_row::state_sql;
use crate::store::ClaimRequest;
use crate::Error;

/// The runs of queue `$1` a claim may take, in the order
/// `rules::admit_queued` admits them (higher priority first, then oldest),
/// at most `$8`, locked: of the workflows `$2` (and only run `$3`, or
/// NULL), runnable (`rules::runnable`: ready, due at `$7`, the runtime's
/// clock, or signalled) under a lease a claim may take (`$4` now, `$5`
/// worker, `$6` instance). Read from `cp_runs_queue_order`.
const QUEUE_CLAIM: &str = concat!(
    "SELECT ",
    run_cols!(),
    ", r.input FROM cp_runs r \
     WHERE r.queue = $1 AND r.state < ",
    state_sql!(COMPLETED),
    " AND r.workflow = ANY($2) AND ($3::text IS NULL OR r.id = $3) \
       AND (r.lease_worker IS NULL OR r.lease_expires <= $4 \
            OR (r.lease_worker = $5 AND r.lease_instance < $6)) \
       AND (r.state = ",
    state_sql!(READY),
    " OR (r.state IN (",
    state_sql!(WAITING),
    ", ",
    state_sql!(SLEEPING),
    ") AND r.due <= $7) OR (r.state = ",
    state_sql!(WAITING),
    " AND EXISTS (SELECT 1 FROM cp_signals s WHERE s.run = r.id AND s.name = r.signal))) \
     ORDER BY r.priority DESC, r.ord LIMIT $8 FOR NO KEY UPDATE OF r SKIP LOCKED"
);

/// The runs of `queue` this claim admits (at most `room`), locked, under
/// the queue's advisory lock (held until the claim's transaction ends);
/// records their admissions when the queue has a rate.
pub(super) async fn admit(
    cx: &mut Cx<'_>,
    schema: &str,
    req: &ClaimRequest,
    queue: &str,
    room: usize,
) -> Result<Vec<Row>, Error> {
    let Some(limits) = rules::queue_limits(req, Some(queue)) else {
        return Ok(Vec::new());
    };
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
        Some(_) => slots_held(cx, queue, now, req).await?,
    };
    let window = limits.rate.map(|(_, per)| rules::rate_window(per, now));
    let recent = match window {
        None => 0,
        Some((since, _)) => admitted_since(cx, queue, since).await?,
    };
    let want = rules::queue_room(limits, held, recent, room);
    if want == 0 {
        return Ok(Vec::new());
    }
    let workflows: Vec<&str> = req.workflows.to_vec();
    let (worker, instance): (&str, &str) = (&req.worker, &req.instance);
    let limit = i64::try_from(want).unwrap_or(i64::MAX);
    let rows = cx
        .query(
            QUEUE_CLAIM,
            &[
                &queue,
                &workflows,
                &req.only,
                &ts(now),
                &worker,
                &instance,
                &ts(req.clock_now),
                &limit,
            ],
        )
        .await?;
    // In the rule's order already; the rule has the last word.
    let candidates = rows
        .into_iter()
        .enumerate()
        .map(|(i, row)| Ok((get::<i32>(&row, PRIORITY_COL)?, i, row)))
        .collect::<Result<Vec<_>, Error>>()?;
    let took = rules::admit_queued(limits, held, recent, room, candidates);
    if let (Some((_, until)), false) = (window, took.is_empty()) {
        record(cx, queue, took.len(), now, until).await?;
    }
    Ok(took)
}

/// The column of `run_cols!` that holds the priority.
const PRIORITY_COL: usize = 23;

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
