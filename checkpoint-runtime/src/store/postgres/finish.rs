//! The end of a top-level run (`Store::finish`) in one round trip: the
//! fenced write of its row and its last event ([`FINISH`]), then a guard
//! ([`NO_WAITER`]), as one transaction sent in one flight
//! ([`Pooled::pipelined`]). The fenced transaction of `ops::do_finish`
//! (lock, check, write, the run's children and waiters, five round trips
//! with the row locked) stays the way every other end goes, and the
//! fallback whenever this one writes nothing.
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

use std::sync::Arc;
use std::time::SystemTime;

use tokio_postgres::types::ToSql;

use super::conn::{to_json, ts, Pooled};
use super::tables::runs::Bound;
use crate::store::{rules, Lease, Outcome, RunRecord, RunState};
use crate::Error;

/// The fenced end of run `$1`: its row takes the state, the output and the
/// error (`$2`–`$6`, see [`Bound::finished`]) and `updated_at` (`$7`), and
/// loses its lease; its last event (`$11`, JSON) is appended at `$7`.
/// Fenced as `save::statement` fences a save: the lease (`$8`–`$10`) must
/// be held, and the row must decode as `RunRow::into_record` decodes it,
/// so that it is written exactly as the fenced transaction would write it
/// (every column this statement keeps is one `write_run` writes back
/// unchanged). Only for a run without a parent: a child's end may start a
/// held sibling. One row back when it wrote, none when it refused.
const FINISH: &str = "WITH r AS (UPDATE cp_runs SET state = $2, signal = $3, due = $4, \
     output = $5, error = $6, updated_at = $7, \
     lease_worker = NULL, lease_instance = NULL, lease_expires = NULL \
     WHERE id = $1 AND epoch = $8 AND lease_worker = $9 AND lease_instance = $10 \
       AND lease_expires IS NOT NULL AND parent IS NULL \
       AND (state = 0 OR (state = 1 AND signal IS NOT NULL) \
            OR (state = 2 AND due IS NOT NULL)) \
       AND latest_seq >= 0 AND attempt >= 0 AND (wake_seq IS NULL OR wake_seq >= 0) \
     RETURNING id) \
     INSERT INTO cp_history (run, at, event) SELECT id, $7, $11::text::jsonb FROM r \
     RETURNING 1";

/// Fails (and so rolls back the transaction) when a run waits for run `$1`
/// to end (see the module docs): the waiter's id does not read as an
/// integer, and the error names it. No row, no error, otherwise.
const NO_WAITER: &str = "SELECT ('run ' || waiter || ' joins this run')::integer \
     FROM cp_joins WHERE child = $1 LIMIT 1";

/// Ends run `id` under `lease` with `outcome` at `now` in one round trip
/// (see the module docs): whether it did. `false`: nothing was written,
/// the fenced transaction decides.
pub(super) async fn finish_in_one(
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
    let (ended, event) = ended_run(id, outcome, now);
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
fn ended_run(id: &str, outcome: &Outcome, now: SystemTime) -> (RunRecord, crate::history::Event) {
    let mut rec = RunRecord {
        id: id.to_owned(),
        workflow: String::new(),
        input: Arc::from(&[][..]),
        state: RunState::Ready,
        lease: None,
        epoch: 0,
        attempt: 0,
        latest_seq: 0,
        wake: None,
        created_at: now,
        updated_at: now,
        version: 1,
        parent: None,
    };
    let event = rules::finish(&mut rec, outcome.clone(), now);
    (rec, event)
}
