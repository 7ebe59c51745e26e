//! The low-level writes of a transition, which only [`apply`](super::apply)
//! calls: a run's row (inserted, written back whole, or, for a run whose
//! row does not decode, the columns a set-aside sets), an event, a queued
//! signal, and the bookkeeping of joins (`cp_joins` and a joining run's
//! `join_pending`). Each runs inside the caller's transaction and decides
//! nothing: what to write is the rule's ([`rules::Change`](crate::store::rules::Change)).
//! The table modules hold what they share with the fused statements
//! (`write_run`, `insert_run`, `history::insert`); the rest is here.

use std::time::SystemTime;

use super::conn::{get, scrub, to_json, ts, Cx};
use super::tables::history;
use super::tables::runs::code;
use crate::history::Event;
use crate::store::sql::run_row::{state_code, state_sql};
use crate::store::{RunRecord, RunState, SignalRecord};
use crate::Error;

pub(super) use super::tables::runs::{insert_run, write_run, write_runs};

/// Appends `event` to run `id`'s history at `at`.
pub(super) async fn event(
    cx: &mut Cx<'_>,
    id: &str,
    at: SystemTime,
    event: &Event,
) -> Result<(), Error> {
    history::insert(cx, id, at, event).await
}

/// Queues `signal` for run `id`.
pub(super) async fn signal(cx: &mut Cx<'_>, id: &str, signal: &SignalRecord) -> Result<(), Error> {
    cx.execute(
        "INSERT INTO cp_signals (run, name, payload, received_at) VALUES ($1, $2, $3, $4)",
        &[
            &id,
            &scrub(&signal.name),
            &&signal.payload[..],
            &ts(signal.received_at),
        ],
    )
    .await?;
    Ok(())
}

/// Writes what `rules::set_aside` sets of a run whose row does not decode
/// (`rec`: the rule applied to a `rules::blank_run`): its state (failed,
/// with the error), no lease, the time. The other columns are left as the
/// damaged row has them.
pub(super) async fn set_aside(cx: &mut Cx<'_>, rec: &RunRecord) -> Result<(), Error> {
    let RunState::Failed { error } = &rec.state else {
        return Err(Error::internal(format!(
            "run `{}`: only a failed run is written over a damaged row",
            rec.id
        )));
    };
    let state = code(state_code(&rec.state));
    cx.execute(
        "UPDATE cp_runs SET state = $2, error = $3, lease_worker = NULL, \
         lease_instance = NULL, lease_expires = NULL, updated_at = $4 WHERE id = $1",
        &[&rec.id, &state, &to_json(error)?, &ts(rec.updated_at)],
    )
    .await?;
    Ok(())
}

/// Records that run `waiter` waits for `pending` (children that have not
/// ended): a `cp_joins` row each, and their number.
pub(super) async fn join_pending(
    cx: &mut Cx<'_>,
    waiter: &str,
    pending: &[String],
) -> Result<(), Error> {
    if !pending.is_empty() {
        cx.execute(
            "INSERT INTO cp_joins (child, waiter) SELECT c, $2 FROM unnest($1::text[]) AS c \
             ON CONFLICT DO NOTHING",
            &[&pending, &waiter],
        )
        .await?;
    }
    let n = i32::try_from(pending.len()).unwrap_or(i32::MAX);
    cx.execute(
        "UPDATE cp_runs SET join_pending = $2 WHERE id = $1",
        &[&waiter, &n],
    )
    .await?;
    Ok(())
}

/// Deletes the `cp_joins` rows of child `child`: the runs that waited for
/// it, in id order (the order their rows are locked in).
pub(super) async fn take_waiters(cx: &mut Cx<'_>, child: &str) -> Result<Vec<String>, Error> {
    let rows = cx
        .query(
            "DELETE FROM cp_joins WHERE child = $1 RETURNING waiter",
            &[&child],
        )
        .await?;
    let mut waiters: Vec<String> = rows
        .iter()
        .map(|r| get::<String>(r, 0))
        .collect::<Result<_, _>>()?;
    waiters.sort();
    Ok(waiters)
}

/// Counts one of the children run `waiter` waits for as ended: how many
/// it still waits for, and whether it has not ended itself (only such a
/// run is woken). `None`: no such run.
pub(super) async fn count_down(
    cx: &mut Cx<'_>,
    waiter: &str,
) -> Result<Option<(i32, bool)>, Error> {
    const SQL: &str = concat!(
        "UPDATE cp_runs SET join_pending = greatest(join_pending - 1, 0) \
         WHERE id = $1 RETURNING join_pending, state NOT IN (",
        state_sql!(COMPLETED),
        ", ",
        state_sql!(FAILED),
        ", ",
        state_sql!(CANCELLED),
        ")"
    );
    let left = cx.query_opt(SQL, &[&waiter]).await?;
    left.map(|row| Ok((get::<i32>(&row, 0)?, get::<bool>(&row, 1)?)))
        .transpose()
}
