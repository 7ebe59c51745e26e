//! The end of a run (`Store::finish`), fused: the rule is `rules::finish`
//! (fenced by `rules::check_lease`), its columns and event computed by
//! applying it to a blank record ([`ended_run`]), and what its end changes
//! elsewhere (joiners, a held sibling) left to the generic end, which
//! `apply` writes: a top-level run's in one round trip
//! ([`FINISH`], then a guard, [`NO_WAITER`], as one transaction sent in one
//! flight, [`Pooled::pipelined`]), and the ends of several top-level runs
//! that wait at the same time in one ([`FINISH_MANY`] and [`NO_WAITERS`]),
//! shared by a [`Batcher`]: a thousand runs that end together commit in a
//! few transactions, where a transaction each queued them behind each
//! other's commits on the pool's connections. The fenced transaction
//! ([`finish_locked`]: lock, check, the rule applied with the run's
//! children and waiters, several round trips with the row locked) is how
//! every other end goes, and
//! the fallback whenever the others write nothing: it tells why with the
//! errors of every fenced write.
//!
//! Why a guard, and why a statement of its own: a run that ends must wake
//! any run joining it (`cp_joins`, see [`children`](super::children)). A
//! join locks the rows of the runs it waits for (`FOR SHARE`) before it
//! records itself, and commits. [`FINISH`] waits for that lock, but a
//! statement sees the database as it was when it began, so a `cp_joins`
//! row committed while it waited would be invisible to it. The guard is
//! the next statement of the same transaction, so it sees every join that
//! committed before the run's row was locked (a join after it waits for
//! this commit and then sees the run ended). Should there be one, the
//! guard fails, which rolls the whole transaction back, and the fenced
//! transaction ends the run and wakes its waiters.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use futures::future::BoxFuture;
use tokio_postgres::types::ToSql;

use super::batcher::{held_once, together_then_alone, Batcher};
use crate::history::Event;
use crate::store::postgres::conn::{get, to_json, ts, Pool, Pooled};
use crate::store::postgres::locked::finish_locked;
use crate::store::postgres::tables::runs::{Bound, StateColumns};
use crate::store::rules::{self, Change};
use crate::store::{Lease, Outcome, RunRecord};
use crate::Error;

/// Ends in one transaction at most.
const MAX_BATCH: usize = 512;

/// The fenced end of run `$1`: its row takes the state, the output and the
/// error (`$2`–`$6`, see [`Bound::finished`]) and `updated_at` (`$7`), and
/// loses its lease; its last event (`$11`, JSON) is appended at `$7`.
/// Fenced as `save::statement` fences a save: the lease (`$8`–`$10`) must
/// be held, and the row must decode as `RunRow::into_record` decodes it,
/// so that it is written exactly as the fenced transaction would write it
/// (every column this statement keeps is one `write_run` writes back
/// unchanged). Only for a run without a parent: a child's end may start a
/// held sibling. One row back when it wrote, none when it refused.
const FINISH: &str = concat!(
    "WITH r AS (UPDATE cp_runs SET state = $2, signal = $3, due = $4, \
     output = $5, error = $6, updated_at = $7, \
     lease_worker = NULL, lease_instance = NULL, lease_expires = NULL \
     WHERE id = $1 AND epoch = $8 AND lease_worker = $9 AND lease_instance = $10 \
       AND lease_expires IS NOT NULL AND parent IS NULL AND ",
    decodable!(""),
    " AND latest_seq >= 0 AND attempt >= 0 AND (wake_seq IS NULL OR wake_seq >= 0) \
     RETURNING id) \
     INSERT INTO cp_history (run, at, event) SELECT id, $7, $11::text::jsonb FROM r \
     RETURNING 1"
);

/// Fails (and so rolls back the transaction) when a run waits for run `$1`
/// to end (see the module docs): the waiter's id does not read as an
/// integer, and the error names it. No row, no error, otherwise.
const NO_WAITER: &str = "SELECT ('run ' || waiter || ' joins this run')::integer \
     FROM cp_joins WHERE child = $1 LIMIT 1";

/// Ends run `id` under `lease` with `outcome` at `now` in one round trip
/// (see the module docs): whether it did. `false`: nothing was written,
/// the fenced transaction decides.
pub(in crate::store::postgres) async fn finish_in_one(
    conn: &mut Pooled<'_>,
    id: &str,
    lease: &Lease,
    outcome: &Outcome,
    now: SystemTime,
) -> Result<bool, Error> {
    // A NUL cannot be bound as text: such a worker holds no lease.
    if lease.worker.contains('\0') || lease.instance.contains('\0') {
        return Ok(false);
    }
    let Some((ended, event)) = ended_run(id, outcome, now) else {
        return Ok(false);
    };
    let (Ok(bound), Ok(epoch), Ok(event)) = (
        Bound::of(&ended),
        i64::try_from(lease.epoch),
        to_json(&event),
    ) else {
        return Ok(false);
    };
    let (at, worker, instance) = (ts(now), &*lease.worker, &*lease.instance);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&id];
    params.extend(bound.finished());
    params.extend([
        &at as &(dyn ToSql + Sync),
        &epoch,
        &worker,
        &instance,
        &event,
    ]);
    let guard: [&(dyn ToSql + Sync); 1] = [&id];
    let sent = conn
        .pipelined(&[(FINISH, &params[..]), (NO_WAITER, &guard[..])])
        .await;
    // Not sent (a statement could not be prepared): nothing was written.
    let Ok((replies, committed)) = sent else {
        return Ok(false);
    };
    // A statement that failed (the guard, or a value the server refused)
    // rolled the transaction back: nothing was written.
    if replies.iter().any(Result::is_err) {
        return Ok(false);
    }
    let wrote = matches!(replies.first(), Some(Ok(Some(_))));
    committed?;
    Ok(wrote)
}

/// What `rules::finish` makes of a run's row, as far as [`FINISH`] sets
/// it, and the event it records: the rule applied to a blank record.
/// `None` for a change this statement cannot write alone (none today: an
/// end's change is the row, the event and the end, whose joiners and held
/// sibling the statement leaves to the fenced end, see the module docs).
fn ended_run(id: &str, outcome: &Outcome, now: SystemTime) -> Option<(RunRecord, Event)> {
    let mut rec = rules::blank_run(id, now);
    let change = rules::finish(&mut rec, outcome.clone(), now);
    match change {
        Change {
            row: true,
            event: Some(event),
            elsewhere: None,
            signal: None,
            ..
        } => Some((rec, event)),
        _ => None,
    }
}

/// The ends of several top-level runs: [`FINISH`] for each of them at once
/// (`$1`–`$11`: the columns of [`FINISH`]'s parameters, one element per
/// end), their rows locked in the order of their ids first (`k`, as the
/// batch of saves locks them: see `save_batch`). One row back: the ids of
/// the runs it ended (an end it refused wrote nothing).
///
/// The checks of the run's row alone are one condition with `u` (whose
/// `run` is never NULL), so that the planner keeps them with the join:
/// as conditions on `cp_runs` alone, it took them for selective (one row
/// of a thousand unfinished runs) and compared every unfinished run with
/// every end (a nested loop: 161 ms for 300 ends; 7.6 ms this way).
const FINISH_MANY: &str = concat!(
    "WITH k AS MATERIALIZED (SELECT id FROM cp_runs \
       WHERE id IN (SELECT unnest($1::text[])) ORDER BY id FOR UPDATE), \
     r AS (UPDATE cp_runs SET state = u.state, signal = u.signal, due = u.due, \
       output = u.output, error = u.error, updated_at = u.at, \
       lease_worker = NULL, lease_instance = NULL, lease_expires = NULL \
       FROM unnest($1::text[], $2::smallint[], $3::text[], $4::bigint[], $5::bytea[], \
         $6::text[], $7::bigint[], $8::bigint[], $9::text[], $10::text[], $11::text[]) \
         AS u (run, state, signal, due, output, error, at, epoch, worker, instance, event) \
       WHERE (SELECT count(*) FROM k) >= 0 AND cp_runs.id = u.run \
         AND cp_runs.epoch = u.epoch AND lease_worker = u.worker \
         AND lease_instance = u.instance \
         AND (u.run IS NULL OR (lease_expires IS NOT NULL AND parent IS NULL AND ",
    decodable!("cp_runs."),
    " AND cp_runs.latest_seq >= 0 AND cp_runs.attempt >= 0 \
           AND (cp_runs.wake_seq IS NULL OR cp_runs.wake_seq >= 0))) \
       RETURNING u.run, u.at, u.event), \
     h AS (INSERT INTO cp_history (run, at, event) \
       SELECT run, at, event::jsonb FROM r ORDER BY run RETURNING run) \
     SELECT coalesce(array_agg(run), '{}') FROM h"
);

/// [`NO_WAITER`] for the runs `$1`.
const NO_WAITERS: &str = "SELECT ('run ' || waiter || ' joins run ' || child)::integer \
     FROM cp_joins WHERE child = ANY($1::text[]) LIMIT 1";

/// The end of a run, as `Store::finish` is asked for it.
pub(in crate::store::postgres) struct Ending {
    pub(in crate::store::postgres) id: String,
    pub(in crate::store::postgres) lease: Lease,
    pub(in crate::store::postgres) outcome: Outcome,
    pub(in crate::store::postgres) at: SystemTime,
}

/// The batcher of a store's ends.
pub(in crate::store::postgres) fn batcher(pool: Arc<Pool>) -> Batcher<Ending, ()> {
    let writer = pool.clone();
    Batcher::new(
        pool,
        MAX_BATCH,
        Box::new(move |batch| write(writer.clone(), batch)),
    )
}

/// An end on its own: in one round trip, or else the fenced transaction.
pub(in crate::store::postgres) async fn finish_alone(
    conn: &mut Pooled<'_>,
    end: &Ending,
) -> Result<(), Error> {
    if finish_in_one(conn, &end.id, &end.lease, &end.outcome, end.at).await? {
        conn.plain().notify_after_commit("");
        return Ok(());
    }
    finish_locked(conn, &end.id, &end.lease, end.outcome.clone(), end.at).await
}

/// Writes a batch of ends: those [`FINISH_MANY`] takes in one transaction,
/// the others (and all of them, should it write nothing) on their own.
fn write(pool: Arc<Pool>, batch: Vec<Ending>) -> BoxFuture<'static, Vec<Result<(), Error>>> {
    Box::pin(async move {
        fn key(e: &Ending) -> &str {
            &e.id
        }
        together_then_alone(&pool, &batch, key, || (), finish_many, finish_alone).await
    })
}

/// Ends the runs of `batch` that it holds once and whose values bind, as
/// one transaction sent in one flight ([`FINISH_MANY`], then
/// [`NO_WAITERS`]): the ids of the runs it ended. None when it rolled back
/// (a run is joined, or the server refused a value) or was not sent; an
/// error when the connection failed with it in flight (whether it
/// committed is unknown).
pub(in crate::store::postgres) async fn finish_many(
    conn: &mut Pooled<'_>,
    batch: &[Ending],
) -> Result<HashSet<String>, Error> {
    if batch.len() < 2 {
        return Ok(HashSet::new());
    }
    let mut ids = Vec::new();
    let (mut ended, mut events) = (Vec::new(), Vec::new());
    let (mut ats, mut epochs, mut workers, mut instances) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for end in held_once(batch, |e| &e.id) {
        let Some((rec, event)) = ended_run(&end.id, &end.outcome, end.at) else {
            continue;
        };
        let (Ok(event), Ok(epoch)) = (to_json(&event), i64::try_from(end.lease.epoch)) else {
            continue;
        };
        if end.lease.worker.contains('\0') || end.lease.instance.contains('\0') {
            continue;
        }
        ids.push(end.id.as_str());
        ended.push(rec);
        events.push(event);
        ats.push(ts(end.at));
        epochs.push(epoch);
        workers.push(&*end.lease.worker);
        instances.push(&*end.lease.instance);
    }
    let Ok(bound) = ended.iter().map(Bound::of).collect::<Result<Vec<_>, _>>() else {
        return Ok(HashSet::new());
    };
    let mut cols = StateColumns::default();
    for b in &bound {
        cols.push(b);
    }
    let events: Vec<&str> = events.iter().map(String::as_str).collect();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&ids];
    params.extend(cols.params());
    params.extend([
        &ats as &(dyn ToSql + Sync),
        &epochs,
        &workers,
        &instances,
        &events,
    ]);
    let guard: [&(dyn ToSql + Sync); 1] = [&ids];
    let sent = conn
        .pipelined_planned(&[(FINISH_MANY, &params[..]), (NO_WAITERS, &guard[..])])
        .await;
    let Ok((replies, committed)) = sent else {
        return Ok(HashSet::new());
    };
    if replies.iter().any(Result::is_err) {
        return Ok(HashSet::new());
    }
    committed?;
    match replies.into_iter().next() {
        Some(Ok(Some(row))) => Ok(get::<Vec<String>>(&row, 0)?.into_iter().collect()),
        _ => Ok(HashSet::new()),
    }
}
