//! [`apply`]: the one place the SQLite store writes a transition. Each
//! write operation (`ops`, `claim`) loads the records, calls one rule of
//! [`rules`], which changes the run's record in place and returns a
//! [`Change`], and hands both here: the run's row, its history event,
//! another run's event, a queued signal, and what the run's end changes
//! elsewhere (the runs joining it, a held sibling, its descendants), each
//! of those again one rule applied here. So what a transition does is
//! decided once, in `rules`, for every backend, and how this backend
//! stores one is written once, in this file (the writes themselves are in
//! `write`, the queries about children in `children`).

use std::sync::Arc;
use std::time::SystemTime;

use super::children::{child_records, children_of, held_sibling, joiners_done, wait_for};
use super::error::R;
use super::write::{insert_run, ord_of, queue_signal, record_event, write_blank, write_head};
use super::writer::cache::Head;
use super::writer::txn::TxnCtx;
use crate::history::Event;
use crate::store::rules::{self, Change, Ended};
use crate::store::{RunRecord, Suspend};

/// The run a change is applied to, as the operation loaded it.
pub(super) enum Target {
    /// A run the store has: its head, taken from the writer's cache (see
    /// `TxnCtx::head`); `apply` gives it back, unless the run ended (a
    /// finished run is rarely written again).
    Run(Box<Head>),
    /// A run to create (`rules::create`, `rules::fork`): its row is
    /// inserted, and its head cached.
    New(RunRecord),
    /// A run whose row does not load (row `ord`), changed as a blank record
    /// (see [`rules::blank_run`]): only the columns a rule sets on it are
    /// written (see [`write_blank`]).
    Unreadable { ord: i64, rec: RunRecord },
}

impl Target {
    /// The record the rule changes.
    pub(super) fn rec_mut(&mut self) -> &mut RunRecord {
        match self {
            Target::Run(h) => &mut h.rec,
            Target::New(rec) | Target::Unreadable { rec, .. } => rec,
        }
    }

    fn rec(&self) -> &RunRecord {
        match self {
            Target::Run(h) => &h.rec,
            Target::New(rec) | Target::Unreadable { rec, .. } => rec,
        }
    }
}

/// Stores `change`, which a rule returned for `target` (whose record it
/// already changed), at `now`; returns the run's `ord`.
///
/// The request's savepoint is opened unless this is one statement (a
/// failing statement undoes itself); an operation that wrote before (a
/// claim or a take consumed a signal) opened it already. A
/// `CheckpointSaved` event is not stored: the checkpoint's row is that
/// event (see the module docs of `sqlite`). The change wakes the store's
/// subscribers (`bump`) when it may make a run claimable or ended: a row
/// left without a lease, a queued signal, an end.
pub(super) fn apply(
    cx: &mut TxnCtx<'_>,
    target: Target,
    change: Change,
    now: SystemTime,
) -> R<i64> {
    let Change {
        row,
        event,
        elsewhere,
        signal,
        ended,
        ..
    } = change;
    let event = event.filter(|e| !matches!(e, Event::CheckpointSaved { .. }));
    let statements = match &target {
        Target::New(_) => 2,
        _ => usize::from(row),
    } + usize::from(event.is_some())
        + usize::from(elsewhere.is_some())
        + usize::from(signal.is_some())
        + if ended.is_some() { 2 } else { 0 };
    if statements > 1 {
        cx.begin()?;
    }
    let unleased = target.rec().lease.is_none();
    // The run's id, for walking its descendants (only a cancel does).
    let id = ended
        .filter(|e| e.cancels_descendants)
        .map(|_| target.rec().id.clone());
    let ord = match target {
        Target::Run(mut h) => {
            if row {
                write_head(cx.conn, &mut h)?;
            }
            let ord = h.ord;
            if ended.is_none() {
                cx.put(Arc::from(h.rec.id.as_str()), h);
            }
            ord
        }
        Target::New(mut rec) => {
            let ord = insert_run(cx.conn, &rec)?;
            // The writer keeps no input (see `Head`).
            rec.input = Arc::from(&[][..]);
            cx.put(Arc::from(rec.id.as_str()), Head::new(ord, rec));
            ord
        }
        Target::Unreadable { ord, rec } => {
            if row {
                write_blank(cx.conn, ord, &rec)?;
            }
            ord
        }
    };
    if let Some(event) = &event {
        record_event(cx, ord, now, event)?;
    }
    // As in the memory store, an event for a run the store does not have
    // is dropped (a child created under a parent that is gone).
    if let Some((other, event)) = &elsewhere {
        if let Some(other) = ord_of(cx, other)? {
            record_event(cx, other, now, event)?;
        }
    }
    if let Some(signal) = &signal {
        queue_signal(cx.conn, ord, signal)?;
    }
    cx.bump |= (row && unleased) || signal.is_some() || ended.is_some();
    if let Some(ended) = ended {
        end(cx, ord, id.as_deref(), ended, now)?;
    }
    Ok(ord)
}

/// What the end of run `ord` (`id`, given when it cancels its
/// descendants) changes elsewhere, in the same transaction (see
/// [`Ended`]): the oldest held sibling starts when it freed a slot, each
/// run joining it counts it and the one it was the last pending child of
/// is woken, and a cancel cancels its unfinished descendants.
fn end(cx: &mut TxnCtx<'_>, ord: i64, id: Option<&str>, ended: Ended, now: SystemTime) -> R<()> {
    if ended.freed_slot {
        if let Some(sibling) = held_sibling(cx.conn, ord)? {
            let mut h = cx.head(&sibling)?;
            let change = rules::promote(&mut h.rec, now);
            apply(cx, Target::Run(h), change, now)?;
        }
    }
    for waiter in joiners_done(cx.conn, ord)? {
        wake_joiner(cx, &waiter, now)?;
    }
    if let (true, Some(id)) = (ended.cancels_descendants, id) {
        cancel_descendants(cx, id, now)?;
    }
    Ok(())
}

/// Run `id` (row `ord`) suspended joining `children` (a checkpoint saved
/// or forked): it waits for those that have not ended, or is woken now
/// when none is left.
pub(super) fn join(
    cx: &mut TxnCtx<'_>,
    id: &str,
    ord: i64,
    children: &[String],
    now: SystemTime,
) -> R<()> {
    if wait_for(cx.conn, ord, children)? {
        wake_joiner(cx, id, now)?;
    }
    Ok(())
}

/// Wakes run `id`, the children its join waits for having all ended (see
/// [`rules::joined`]): unless it ended itself, or its latest checkpoint,
/// which names them, does not load (the claim that meets it sets it aside;
/// its children go on).
fn wake_joiner(cx: &mut TxnCtx<'_>, id: &str, now: SystemTime) -> R<()> {
    let mut h = cx.head(id)?;
    let join = match h.rec.state.is_terminal() {
        true => None,
        false => match cx.latest(&mut h) {
            Ok(Some(latest)) => match &latest.cp.suspend {
                Some(Suspend::Joining {
                    children, token, ..
                }) => Some((children.clone(), token.clone())),
                _ => None,
            },
            Ok(None) | Err(_) => None,
        },
    };
    let Some((children, token)) = join else {
        cx.put(Arc::from(id), h);
        return Ok(());
    };
    let records = child_records(cx.conn, &children)?;
    let change = rules::joined(&children, &token, |c| records.get(c), now);
    apply(cx, Target::Run(h), change, now)?;
    Ok(())
}

/// Cancels the unfinished descendants of run `id` (its children, theirs,
/// ...): each child's cancel is applied (which cancels its own
/// descendants); the walk goes on only through children that had ended.
fn cancel_descendants(cx: &mut TxnCtx<'_>, id: &str, now: SystemTime) -> R<()> {
    let mut parents = vec![id.to_owned()];
    while let Some(parent) = parents.pop() {
        for child in children_of(cx.conn, &parent)? {
            let mut h = cx.head(&child)?;
            match rules::cancel(&mut h.rec, now) {
                Some(change) => {
                    apply(cx, Target::Run(h), change, now)?;
                }
                None => {
                    cx.put(Arc::from(child.as_str()), h);
                    parents.push(child);
                }
            }
        }
    }
    Ok(())
}
