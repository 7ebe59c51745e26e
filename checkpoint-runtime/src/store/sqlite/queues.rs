//! The queue limits of [`SqliteStore`](super::SqliteStore)'s claim (see
//! `rules::queues`): what a limited queue holds and was admitted, counted
//! in the claim's transaction (the writer's, which
//! holds the database's write lock: no other claim, of this process or
//! another, counts or takes a slot meanwhile).

use std::time::SystemTime;

use rusqlite::params;

use super::error::R;
use super::writer::txn::TxnCtx;
use crate::store::rules;
use crate::store::sql::run_row::state_sql;
use crate::store::sql::ts;
use crate::store::ClaimRequest;
use crate::Queue;

/// What a claim counts of a limited queue, in its transaction.
pub(super) struct Counted {
    /// The runs that hold a slot (with a concurrency; else 0).
    pub(super) held: usize,
    /// The admissions within the rate's window (with a rate; else 0).
    pub(super) recent: usize,
    /// With a rate: when an admission made now stops counting.
    pub(super) until: Option<i64>,
}

/// Counts what `limits` need of `queue` at `now` (see [`Counted`]).
pub(super) fn count(
    cx: &TxnCtx<'_>,
    req: &ClaimRequest,
    queue: &str,
    limits: &Queue,
    now: SystemTime,
) -> R<Counted> {
    let held = match limits.concurrency {
        None => 0,
        Some(_) => slots_held(cx, queue, now, req)?,
    };
    let window = limits.rate.map(|(_, per)| rules::rate_window(per, now));
    let recent = match window {
        None => 0,
        Some((since, _)) => admitted_since(cx, queue, since)?,
    };
    Ok(Counted {
        held,
        recent,
        until: window.map(|(_, until)| ts(until)),
    })
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
