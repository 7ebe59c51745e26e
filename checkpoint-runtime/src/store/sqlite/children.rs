//! Child runs in the SQLite store (see [`crate::child`]): a joining run's
//! pending count and `joins` rows, the signal that wakes it when the last
//! child it waits for ends, and the cancellation of a run's descendants.
//! Each function runs inside the request's transaction (the writer's
//! batch), so a child's end and its parent's wake-up are one commit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use rusqlite::{params, OptionalExtension};

use super::error::R;
use super::runs::fetch_run;
use super::writer::txn::TxnCtx;
use crate::history::Event;
use crate::store::rules;
use crate::store::sql::run_row::{
    CANCELLED, COMPLETED, FAILED, HELD, PARKED, READY, SLEEPING, WAITING,
};
use crate::store::sql::ts;
use crate::store::{RunRecord, RunState, Suspend};

/// Run `waiter` (row `ord`) suspended on `children` with signal `token`:
/// records the children it still waits for, or wakes it at once when they
/// all ended.
pub(super) fn join(cx: &mut TxnCtx<'_>, ord: i64, children: &[String], token: &str) -> R<()> {
    let mut states: HashMap<&str, (i64, i64)> = HashMap::with_capacity(children.len());
    for child in children {
        let row: Option<(i64, i64)> = cx
            .conn
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
    if pending.is_empty() {
        return joined(cx, ord, children, token);
    }
    for child in &pending {
        let Some((child_ord, _)) = states.get(child) else {
            continue;
        };
        cx.conn
            .prepare_cached("INSERT OR IGNORE INTO joins (child, waiter) VALUES (?1, ?2)")?
            .execute(params![child_ord, ord])?;
    }
    cx.conn
        .prepare_cached("UPDATE runs SET join_pending = ?2 WHERE ord = ?1")?
        .execute(params![ord, pending.len() as i64])?;
    Ok(())
}

/// Wakes run `ord`: stores the signal `token` its join waits for, with the
/// outcomes of `children` ([`rules::joined_payload`]).
fn joined(cx: &mut TxnCtx<'_>, ord: i64, children: &[String], token: &str) -> R<()> {
    let mut records: HashMap<&str, RunRecord> = HashMap::with_capacity(children.len());
    for child in children {
        if let Some((_, rec)) = fetch_run(cx.conn, child)? {
            records.insert(child, rec);
        }
    }
    let lookup = |c: &str| records.get(c);
    let payload = rules::joined_payload(children, lookup);
    cx.conn
        .prepare_cached(
            "INSERT INTO signals (run, name, payload, received_at) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![ord, token, payload, ts(SystemTime::now())])?;
    cx.conn
        .prepare_cached("UPDATE runs SET join_pending = 0 WHERE ord = ?1")?
        .execute([ord])?;
    let joined = Event::Joined {
        children: children.len(),
    };
    cx.event(ord, SystemTime::now(), &joined)?;
    cx.bump = true;
    Ok(())
}

/// How many children of run `parent` are running (not ended, not held).
pub(super) fn running_children(cx: &mut TxnCtx<'_>, parent: &str) -> R<usize> {
    let n: i64 = cx
        .conn
        .prepare_cached(&format!(
            "SELECT count(*) FROM runs WHERE parent = ?1 AND state IN ({READY}, {WAITING}, \
             {SLEEPING}, {PARKED})"
        ))?
        .query_row([parent], |r| r.get(0))?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// Starts the oldest held child of the parent of run `ord`, if any: a
/// running child of it ended.
fn promote_sibling(cx: &mut TxnCtx<'_>, ord: i64) -> R<()> {
    let next: Option<String> = cx
        .conn
        .prepare_cached(&format!(
            "SELECT s.id FROM runs c JOIN runs s ON s.parent = c.parent AND s.state = {HELD} \
             WHERE c.ord = ?1 ORDER BY s.ord LIMIT 1"
        ))?
        .query_row([ord], |r| r.get(0))
        .optional()?;
    let Some(id) = next else { return Ok(()) };
    let mut h = cx.head(&id)?;
    rules::promote(&mut h.rec, SystemTime::now());
    cx.save_run(&mut h)?;
    cx.put(Arc::from(id.as_str()), h);
    cx.bump = true;
    Ok(())
}

/// Run `child` (row `ord`) ended: a held sibling takes its slot when it
/// held one (`freed_slot`: it was not held itself), each run joining it
/// counts it, and the one it was the last pending child of is woken.
pub(super) fn child_ended(cx: &mut TxnCtx<'_>, ord: i64, freed_slot: bool) -> R<()> {
    if freed_slot {
        promote_sibling(cx, ord)?;
    }
    let waiters: Vec<i64> = cx
        .conn
        .prepare_cached("DELETE FROM joins WHERE child = ?1 RETURNING waiter")?
        .query_map([ord], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for waiter in waiters {
        let left: Option<(i64, String)> = cx
            .conn
            .prepare_cached(
                "UPDATE runs SET join_pending = max(join_pending - 1, 0) WHERE ord = ?1 \
                 RETURNING join_pending, id",
            )?
            .query_row([waiter], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((0, id)) = left else { continue };
        let mut h = cx.head(&id)?;
        let terminal = h.rec.state.is_terminal();
        let join = match cx.latest(&mut h) {
            Ok(Some(latest)) => match &latest.cp.suspend {
                Some(Suspend::Joining {
                    children, token, ..
                }) if !terminal => Some((children.clone(), token.clone())),
                _ => None,
            },
            // A waiter whose checkpoint cannot be read is set aside by
            // the claim that meets it; its children go on.
            Ok(None) | Err(_) => None,
        };
        let ord = h.ord;
        cx.put(Arc::from(id.as_str()), h);
        if let Some((children, token)) = join {
            joined(cx, ord, &children, &token)?;
        }
    }
    Ok(())
}

/// Cancels the unfinished descendants of run `parent` (its children,
/// theirs, ...), each with its `Cancelled` event.
pub(super) fn cancel_children(cx: &mut TxnCtx<'_>, parent: &str, now: SystemTime) -> R<()> {
    let mut parents = vec![parent.to_owned()];
    while let Some(parent) = parents.pop() {
        let children: Vec<String> = cx
            .conn
            .prepare_cached("SELECT id FROM runs WHERE parent = ?1 ORDER BY ord")?
            .query_map([&parent], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for child in children {
            let mut h = cx.head(&child)?;
            let was_held = h.rec.state == RunState::Held;
            match rules::cancel(&mut h.rec, now) {
                Some(change) => {
                    cx.save_run(&mut h)?;
                    if let Some(event) = &change.event {
                        cx.event(h.ord, now, event)?;
                    }
                    child_ended(cx, h.ord, !was_held)?;
                }
                None => cx.put(Arc::from(child.as_str()), h),
            }
            parents.push(child);
        }
    }
    Ok(())
}
