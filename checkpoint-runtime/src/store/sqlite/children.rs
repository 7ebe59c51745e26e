//! Child runs in the SQLite store (see [`crate::child`]): the queries
//! that say who the children of a run are and who joins whom (a joining
//! run's `joins` rows and pending count). They decide no transition: what
//! a child's end or a join changes is a rule of `store::rules`, applied by
//! `apply`, which asks these. Each runs inside the request's transaction
//! (the writer's batch), so a child's end and its parent's wake-up are one
//! commit.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};

use super::error::R;
use super::runs::fetch_run;
use crate::store::rules;
use crate::store::sql::run_row::{state_sql, CANCELLED, COMPLETED, FAILED};
use crate::store::RunRecord;

/// The children of run `parent` (by id) that are running: not ended, not
/// held (see [`rules::is_running`]).
const RUNNING_CHILDREN: &str = concat!(
    "SELECT count(*) FROM runs WHERE parent = ?1 AND state IN (",
    state_sql!(READY),
    ", ",
    state_sql!(WAITING),
    ", ",
    state_sql!(SLEEPING),
    ", ",
    state_sql!(PARKED),
    ")"
);

/// The oldest held sibling of run `ord` (see [`rules::is_held`]).
const HELD_SIBLING: &str = concat!(
    "SELECT s.id FROM runs c JOIN runs s ON s.parent = c.parent AND s.state = ",
    state_sql!(HELD),
    " WHERE c.ord = ?1 ORDER BY s.ord LIMIT 1"
);

/// How many children of run `parent` are running (not ended, not held):
/// what `rules::create` bounds a new child by.
pub(super) fn running_children(conn: &Connection, parent: &str) -> R<usize> {
    let n: i64 = conn
        .prepare_cached(RUNNING_CHILDREN)?
        .query_row([parent], |r| r.get(0))?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// The oldest held child of the parent of run `ord`, if any: the one
/// `rules::promote` starts when a running child of it ends.
pub(super) fn held_sibling(conn: &Connection, ord: i64) -> R<Option<String>> {
    Ok(conn
        .prepare_cached(HELD_SIBLING)?
        .query_row([ord], |r| r.get(0))
        .optional()?)
}

/// The children of run `parent` (by id), in creation order.
pub(super) fn children_of(conn: &Connection, parent: &str) -> R<Vec<String>> {
    Ok(conn
        .prepare_cached("SELECT id FROM runs WHERE parent = ?1 ORDER BY ord")?
        .query_map([parent], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?)
}

/// Run `ord`, suspended joining `children`, waits for those of them that
/// have not ended (see [`rules::join_pending`]): records each (a `joins`
/// row) and how many. Returns `true` when none is left to wait for (the
/// caller wakes it now).
pub(super) fn wait_for(conn: &Connection, ord: i64, children: &[String]) -> R<bool> {
    let mut states: HashMap<&str, (i64, i64)> = HashMap::with_capacity(children.len());
    for child in children {
        let row: Option<(i64, i64)> = conn
            .prepare_cached("SELECT ord, state FROM runs WHERE id = ?1")?
            .query_row([child], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some(row) = row {
            states.insert(child, row);
        }
    }
    let ended = |c: &str| {
        states
            .get(c)
            .is_none_or(|(_, s)| [COMPLETED, FAILED, CANCELLED].contains(s))
    };
    let pending = rules::join_pending(children, ended);
    for child in &pending {
        let Some((child_ord, _)) = states.get(child) else {
            continue;
        };
        conn.prepare_cached("INSERT OR IGNORE INTO joins (child, waiter) VALUES (?1, ?2)")?
            .execute(params![child_ord, ord])?;
    }
    conn.prepare_cached("UPDATE runs SET join_pending = ?2 WHERE ord = ?1")?
        .execute(params![ord, pending.len() as i64])?;
    Ok(pending.is_empty())
}

/// Run `ord` ended: each run joining it counts it (its `joins` rows go).
/// Returns the ids of those it was the last pending child of.
pub(super) fn joiners_done(conn: &Connection, ord: i64) -> R<Vec<String>> {
    let waiters: Vec<i64> = conn
        .prepare_cached("DELETE FROM joins WHERE child = ?1 RETURNING waiter")?
        .query_map([ord], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut done = Vec::new();
    for waiter in waiters {
        let left: Option<(i64, String)> = conn
            .prepare_cached(
                "UPDATE runs SET join_pending = max(join_pending - 1, 0) WHERE ord = ?1 \
                 RETURNING join_pending, id",
            )?
            .query_row([waiter], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((0, id)) = left {
            done.push(id);
        }
    }
    Ok(done)
}

/// The records of `children` the store has, by id (for `rules::joined`).
pub(super) fn child_records(
    conn: &Connection,
    children: &[String],
) -> R<HashMap<String, RunRecord>> {
    let mut records = HashMap::with_capacity(children.len());
    for child in children {
        if let Some((_, rec)) = fetch_run(conn, child)? {
            records.insert(child.clone(), rec);
        }
    }
    Ok(records)
}
