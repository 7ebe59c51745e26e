//! The queue limits of [`SqliteStore`](super::SqliteStore)'s claim (see
//! `rules::queues`): the runs of limited queues the claim query found are
//! admitted here, counted in the claim's transaction (the writer's, which
//! holds the database's write lock: no other claim, of this process or
//! another, counts or takes a slot meanwhile).

use std::collections::BTreeMap;
use std::time::SystemTime;

use rusqlite::params;

use super::error::R;
use super::writer::txn::TxnCtx;
use crate::store::rules;
use crate::store::sql::run_row::state_sql;
use crate::store::sql::ts;
use crate::store::ClaimRequest;

/// Admissions to record: per run admitted to a queue with a rate, the
/// queue and when the admission stops counting.
pub(super) type Admissions = Vec<(String, i64)>;

/// Of `queued` (per queue, its runs the claim may take, as `(priority,
/// ord, id)`), the ids admitted, queue by queue, at most `room` in all;
/// and the admissions to record (a queue with a rate: its name and when
/// the admission stops counting, one per run admitted).
pub(super) fn admit(
    cx: &TxnCtx<'_>,
    req: &ClaimRequest,
    queued: BTreeMap<String, Vec<(i32, i64, String)>>,
    mut room: usize,
    now: SystemTime,
) -> R<(Vec<String>, Admissions)> {
    let (mut admitted, mut admissions) = (Vec::new(), Vec::new());
    for (queue, candidates) in queued {
        let Some(limits) = rules::queue_limits(req, Some(&queue)) else {
            continue;
        };
        let held = match limits.concurrency {
            None => 0,
            Some(_) => slots_held(cx, &queue, now, req)?,
        };
        let window = limits.rate.map(|(_, per)| rules::rate_window(per, now));
        let recent = match window {
            None => 0,
            Some((since, _)) => admitted_since(cx, &queue, since)?,
        };
        let took = rules::admit_queued(limits, held, recent, room, candidates);
        room -= took.len();
        if let Some((_, until)) = window {
            admissions.extend(took.iter().map(|_| (queue.clone(), ts(until))));
        }
        admitted.extend(took);
    }
    Ok((admitted, admissions))
}

/// Stores `admissions` (see [`admit`]) at `now`, and drops those that no
/// longer count.
pub(super) fn record(cx: &TxnCtx<'_>, admissions: &[(String, i64)], now: SystemTime) -> R<()> {
    if admissions.is_empty() {
        return Ok(());
    }
    let now = ts(now);
    cx.conn
        .prepare_cached("DELETE FROM queue_admissions WHERE until <= ?1")?
        .execute([now])?;
    let mut insert = cx
        .conn
        .prepare_cached("INSERT INTO queue_admissions (queue, at, until) VALUES (?1, ?2, ?3)")?;
    for (queue, until) in admissions {
        insert.execute(params![queue, now, until])?;
    }
    Ok(())
}

/// How many runs of `queue` hold a slot of it (`rules::holds_slot`: a live
/// lease, by the system's time, that this claim could not take).
fn slots_held(cx: &TxnCtx<'_>, queue: &str, now: SystemTime, req: &ClaimRequest) -> R<usize> {
    let n: i64 = cx
        .conn
        .prepare_cached(concat!(
            "SELECT count(*) FROM runs WHERE queue = ?1 AND lease_worker IS NOT NULL \
             AND lease_expires > ?2 AND state NOT IN (",
            state_sql!(COMPLETED),
            ", ",
            state_sql!(FAILED),
            ", ",
            state_sql!(CANCELLED),
            ") AND NOT (lease_worker = ?3 AND lease_instance < ?4)"
        ))?
        .query_row(params![queue, ts(now), &*req.worker, &*req.instance], |r| {
            r.get(0)
        })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// How many runs of `queue` were admitted after `since`.
fn admitted_since(cx: &TxnCtx<'_>, queue: &str, since: SystemTime) -> R<usize> {
    let n: i64 = cx
        .conn
        .prepare_cached("SELECT count(*) FROM queue_admissions WHERE queue = ?1 AND at > ?2")?
        .query_row(params![queue, ts(since)], |r| r.get(0))?;
    Ok(usize::try_from(n).unwrap_or(0))
}
