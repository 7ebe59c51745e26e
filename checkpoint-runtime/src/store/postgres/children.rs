//! Child runs in the PostgreSQL store (see [`crate::child`]): a joining
//! run's pending count and `cp_joins` rows, the signal that wakes it when
//! the last child it waits for ends, and the cancellation of a run's
//! descendants. Each function runs inside the caller's transaction, so a
//! child's end and its parent's wake-up commit together.
//!
//! Row locks are taken children first, parents after, everywhere: a join
//! locks the children it names (`FOR SHARE`, in descending id order)
//! before its own row, a child's end locks its own row before its
//! waiters', and a cancellation locks the descendants (descending id
//! order, so a grandchild before its parent) before the run. So none of
//! these waits for another in a circle, and a join never misses the end
//! of a child that commits while it is being saved: the child's end waits
//! for the join's lock, and then sees its `cp_joins` row.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use super::conn::{get, ts, Cx};
use super::tables::history;
use super::tables::runs::{decode_run, lock_run, write_run, LOAD_PLAIN_MANY};
use crate::history::Event;
use crate::store::sql::run_row::{CANCELLED, COMPLETED, FAILED};
use crate::store::{rules, RunRecord, RunState, Suspend};
use crate::Error;

/// Locks the rows of `children` for a join (see the module docs); returns
/// which of them have ended (or do not exist).
pub(super) async fn lock_children(
    cx: &mut Cx<'_>,
    children: &[String],
) -> Result<Vec<String>, Error> {
    let rows = cx
        .query(
            "SELECT id, state FROM cp_runs WHERE id = ANY($1) ORDER BY id DESC FOR SHARE",
            &[&children],
        )
        .await?;
    let mut live = Vec::with_capacity(rows.len());
    for row in &rows {
        let state = i64::from(get::<i16>(row, 1)?);
        if ![COMPLETED, FAILED, CANCELLED].contains(&state) {
            live.push(get::<String>(row, 0)?);
        }
    }
    Ok(live)
}

/// Run `waiter` suspended on `children` with signal `token`, their rows
/// locked by [`lock_children`] (`live`: those that have not ended):
/// records the ones it waits for, or wakes it at once.
pub(super) async fn join(
    cx: &mut Cx<'_>,
    waiter: &str,
    children: &[String],
    token: &str,
    live: &[String],
) -> Result<(), Error> {
    let live: HashSet<&str> = live.iter().map(String::as_str).collect();
    let pending = rules::join_pending(children, |c| !live.contains(c));
    if pending.is_empty() {
        return joined(cx, waiter, children, token).await;
    }
    let pending: Vec<String> = pending.into_iter().map(str::to_owned).collect();
    cx.execute(
        "INSERT INTO cp_joins (child, waiter) SELECT c, $2 FROM unnest($1::text[]) AS c \
         ON CONFLICT DO NOTHING",
        &[&pending, &waiter],
    )
    .await?;
    let n = i32::try_from(pending.len()).unwrap_or(i32::MAX);
    cx.execute(
        "UPDATE cp_runs SET join_pending = $2 WHERE id = $1",
        &[&waiter, &n],
    )
    .await?;
    Ok(())
}

/// Wakes run `waiter`: stores the signal `token` its join waits for, with
/// the outcomes of `children` ([`rules::joined_payload`]).
async fn joined(
    cx: &mut Cx<'_>,
    waiter: &str,
    children: &[String],
    token: &str,
) -> Result<(), Error> {
    let mut records: HashMap<String, RunRecord> = HashMap::with_capacity(children.len());
    for rec in load_many(cx, children).await? {
        records.insert(rec.id.clone(), rec);
    }
    let lookup = |c: &str| records.get(c);
    let payload = rules::joined_payload(children, lookup);
    cx.execute(
        "INSERT INTO cp_signals (run, name, payload, received_at) VALUES ($1, $2, $3, $4)",
        &[&waiter, &token, &payload, &ts(SystemTime::now())],
    )
    .await?;
    cx.execute(
        "UPDATE cp_runs SET join_pending = 0 WHERE id = $1",
        &[&waiter],
    )
    .await?;
    let joined = Event::Joined {
        children: children.len(),
    };
    history::insert(cx, waiter, SystemTime::now(), &joined).await?;
    Ok(())
}

/// Locks the row of run `parent` (a spawn with a bound, see
/// `NewRun::max_running`) and counts its running children (not ended, not
/// held). The lock orders the spawn against a child's end, which takes it
/// too before it looks for a held child to start: neither misses the other.
pub(super) async fn lock_parent_and_count(cx: &mut Cx<'_>, parent: &str) -> Result<usize, Error> {
    cx.query_opt("SELECT 1 FROM cp_runs WHERE id = $1 FOR UPDATE", &[&parent])
        .await?;
    let row = cx
        .query_one(
            "SELECT count(*) FROM cp_runs WHERE parent = $1 AND state IN (0, 1, 2, 6)",
            &[&parent],
        )
        .await?;
    Ok(usize::try_from(get::<i64>(&row, 0)?).unwrap_or(usize::MAX))
}

/// Starts the oldest held child of the parent of run `child`, if any: a
/// running child of it ended.
async fn promote_sibling(cx: &mut Cx<'_>, child: &str) -> Result<(), Error> {
    let parent = cx
        .query_opt("SELECT parent FROM cp_runs WHERE id = $1", &[&child])
        .await?;
    let Some(parent) = parent
        .map(|r| get::<Option<String>>(&r, 0))
        .transpose()?
        .flatten()
    else {
        return Ok(());
    };
    cx.query_opt("SELECT 1 FROM cp_runs WHERE id = $1 FOR UPDATE", &[&parent])
        .await?;
    cx.execute(
        "UPDATE cp_runs SET state = 0, updated_at = $2 WHERE id = \
         (SELECT id FROM cp_runs WHERE parent = $1 AND state = 7 ORDER BY ord LIMIT 1)",
        &[&parent, &ts(SystemTime::now())],
    )
    .await?;
    Ok(())
}

/// The records of `ids` that exist (without their inputs), in one query.
async fn load_many(cx: &mut Cx<'_>, ids: &[String]) -> Result<Vec<RunRecord>, Error> {
    let rows = cx.query(LOAD_PLAIN_MANY, &[&ids]).await?;
    rows.iter().map(decode_run).collect()
}

/// Run `child` ended (its row locked and written by the caller): a held
/// sibling takes its slot when it held one (`freed_slot`: it was not held
/// itself), each run joining it counts it, and the one it was the last
/// pending child of is woken.
pub(super) async fn child_ended(
    cx: &mut Cx<'_>,
    child: &str,
    freed_slot: bool,
) -> Result<(), Error> {
    if freed_slot {
        promote_sibling(cx, child).await?;
    }
    let waiters = cx
        .query(
            "DELETE FROM cp_joins WHERE child = $1 RETURNING waiter",
            &[&child],
        )
        .await?;
    let mut waiters: Vec<String> = waiters
        .iter()
        .map(|r| get::<String>(r, 0))
        .collect::<Result<_, _>>()?;
    waiters.sort();
    for waiter in waiters {
        let left = cx
            .query_opt(
                "UPDATE cp_runs SET join_pending = greatest(join_pending - 1, 0) \
                 WHERE id = $1 AND state < 3 RETURNING join_pending",
                &[&waiter],
            )
            .await?;
        let Some(left) = left else { continue };
        if get::<i32>(&left, 0)? != 0 {
            continue;
        }
        let suspend = cx
            .query_opt(
                "SELECT c.suspend::text FROM cp_runs r JOIN cp_checkpoints c \
                 ON c.run = r.id AND c.seq = r.latest_seq WHERE r.id = $1",
                &[&waiter],
            )
            .await?;
        let suspend: Option<String> = match &suspend {
            Some(row) => get(row, 0)?,
            None => None,
        };
        // A waiter whose checkpoint cannot be read is set aside by the
        // claim that meets it; its children go on.
        let Some(Ok(Suspend::Joining {
            children, token, ..
        })) = suspend.map(|s| serde_json::from_str::<Suspend>(&s))
        else {
            continue;
        };
        joined(cx, &waiter, &children, &token).await?;
    }
    Ok(())
}

/// Cancels the unfinished descendants of run `parent` (its children,
/// theirs, ...), each with its `Cancelled` event; call it before locking
/// `parent` itself (see the module docs).
pub(super) async fn cancel_descendants(
    cx: &mut Cx<'_>,
    parent: &str,
    now: SystemTime,
) -> Result<(), Error> {
    let mut all: Vec<String> = Vec::new();
    let mut parents = vec![parent.to_owned()];
    while !parents.is_empty() {
        let rows = cx
            .query("SELECT id FROM cp_runs WHERE parent = ANY($1)", &[&parents])
            .await?;
        parents = rows
            .iter()
            .map(|r| get::<String>(r, 0))
            .collect::<Result<_, _>>()?;
        all.extend(parents.iter().cloned());
    }
    all.sort_by(|a, b| b.cmp(a));
    for id in all {
        let Some(mut rec) = lock_run(cx, &id).await? else {
            continue;
        };
        let was_held = rec.state == RunState::Held;
        if let Some(event) = rules::cancel(&mut rec, now) {
            write_run(cx, &rec).await?;
            history::insert(cx, &id, now, &event).await?;
            child_ended(cx, &id, !was_held).await?;
        }
    }
    Ok(())
}
