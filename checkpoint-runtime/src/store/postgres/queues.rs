//! The queue bound of a claim ([`crate::Queue`]): the runs of bounded
//! queues that the claim query locked are set aside ([`bounded`]), then per
//! queue, under a transaction-scoped advisory lock of that queue (so two
//! claims, of any process, never both count the same free slot: the
//! second counts once the first committed its leases), the slots held are
//! counted and `rules::admit_queued` says which of them are taken.

use std::collections::BTreeMap;

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
    rules::queue_bound(req, queue.as_deref()).is_some()
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
        let Some(bound) = rules::queue_bound(req, Some(&queue)) else {
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
        let held = slots_held(cx, &queue, req).await?;
        let took = rules::admit_queued(bound, held, room, candidates);
        room -= took.len();
        admitted.extend(took);
    }
    Ok(admitted)
}

/// How many runs of `queue` hold a slot of it (`rules::holds_slot`: a
/// live lease, by the system's time, that this claim could not take).
async fn slots_held(cx: &mut Cx<'_>, queue: &str, req: &ClaimRequest) -> Result<usize, Error> {
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
    // The time is read after the lock: leases that expired while this
    // claim waited for it are free.
    let now = ts(std::time::SystemTime::now());
    let worker: &str = &req.worker;
    let instance: &str = &req.instance;
    let row = cx
        .query_one(SQL, &[&queue, &now, &worker, &instance])
        .await?;
    let n: i64 = get(&row, 0)?;
    Ok(usize::try_from(n).unwrap_or(0))
}
