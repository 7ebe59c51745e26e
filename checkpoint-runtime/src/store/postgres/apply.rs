//! Applies what a rule decided ([`rules::Change`]) inside the caller's
//! transaction: the one place this backend stores a transition, as
//! `MemoryStore::apply` is the memory store's. A write of `ops` (or of the
//! claim) loads the run's row (locked), calls one rule, and hands the
//! change here: the run's row written back, its history event, the event
//! of another run's history, the signal it queues and, when the run ended
//! ([`rules::Ended`]), what that changes elsewhere: the runs joining it
//! count it and the last one it waited for is woken ([`rules::joined`]),
//! its oldest held sibling is started ([`rules::promote`]), and a cancel's
//! unfinished descendants are cancelled ([`rules::cancel`]), each applied
//! here again. The rows it reads for that come from [`children`]'s
//! queries (which keep the lock order), the writes from [`write`].
//!
//! The fused statements of [`fused`](super::fused) write what this writes
//! for their rule, in one statement; `tests/fused.rs` compares them.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use futures::future::BoxFuture;

use super::children;
use super::conn::Cx;
use super::tables::checkpoints;
use super::tables::runs::lock_run;
use super::write;
use crate::store::rules::{self, Change};
use crate::store::{CheckpointRecord, RunRecord};
use crate::Error;

/// How the run's row is written (see [`apply`]).
#[derive(Clone, Copy)]
pub(super) enum Row<'a> {
    /// The record loaded and changed in place: written back whole when the
    /// change says the row changed.
    Update(&'a RunRecord),
    /// A new run (`rules::create`, `rules::fork`): inserted, unless its id
    /// exists; then nothing is written.
    Insert(&'a RunRecord),
    /// `rules::save_checkpoint` on the record, for checkpoint `cp`: its row
    /// is inserted holding the `CheckpointSaved` event (`event_id`, see the
    /// schema's version 5), so the event is no `cp_history` row.
    Saved(&'a RunRecord, &'a CheckpointRecord),
    /// `rules::set_aside` on a `rules::blank_run` of a run whose row does
    /// not decode: only the columns the set-aside sets are written.
    SetAside(&'a RunRecord),
    /// Run `id`, not loaded: for a change that leaves the row as it is (a
    /// join's wake-up).
    Unloaded(&'a str),
}

impl Row<'_> {
    fn id(&self) -> &str {
        match self {
            Row::Update(rec) | Row::Insert(rec) | Row::Saved(rec, _) | Row::SetAside(rec) => {
                &rec.id
            }
            Row::Unloaded(id) => id,
        }
    }

    fn rec(&self) -> Option<&RunRecord> {
        match self {
            Row::Update(rec) | Row::Insert(rec) | Row::Saved(rec, _) | Row::SetAside(rec) => {
                Some(rec)
            }
            Row::Unloaded(_) => None,
        }
    }
}

/// Applies `change` to run `row` at `now` (see the module docs). `false`
/// only for [`Row::Insert`] of an id that exists: nothing was written.
pub(super) fn apply<'a>(
    cx: &'a mut Cx<'_>,
    row: Row<'a>,
    change: Change,
    now: SystemTime,
) -> BoxFuture<'a, Result<bool, Error>> {
    Box::pin(async move {
        let Change {
            row: changed,
            event,
            elsewhere,
            signal,
            ended,
            ..
        } = change;
        let id = row.id();
        if let Row::Insert(rec) = row {
            if !write::insert_run(cx, rec).await? {
                return Ok(false);
            }
        }
        if let Row::Unloaded(_) = row {
            if changed || ended.is_some() {
                return Err(Error::internal(format!(
                    "run `{id}`: a change of its row applied without its record"
                )));
            }
        }
        // The event of a saved checkpoint is its row's (see `Row::Saved`).
        let event = match row {
            Row::Saved(_, cp) => {
                debug_assert_eq!(
                    event,
                    Some(rules::checkpoint_saved(cp.seq, cp.label.as_deref()))
                );
                None
            }
            _ => event,
        };
        {
            // Independent writes, sent together (one round trip).
            let (mut a, mut b, mut c, mut d) = (cx.fork()?, cx.fork()?, cx.fork()?, cx.fork()?);
            let mut e = cx.fork()?;
            let saved = async {
                match row {
                    Row::Saved(_, cp) => checkpoints::insert_saved(&mut e, cp).await,
                    _ => Ok(()),
                }
            };
            let run = async {
                match row {
                    Row::Update(rec) | Row::Saved(rec, _) if changed => {
                        write::write_run(&mut a, rec).await
                    }
                    Row::SetAside(rec) => write::set_aside(&mut a, rec).await,
                    _ => Ok(()),
                }
            };
            let event = async {
                match &event {
                    Some(event) => write::event(&mut b, id, now, event).await,
                    None => Ok(()),
                }
            };
            let elsewhere = async {
                match &elsewhere {
                    Some((other, event)) => write::event(&mut c, other, now, event).await,
                    None => Ok(()),
                }
            };
            let signal = async {
                match &signal {
                    Some(signal) => write::signal(&mut d, id, signal).await,
                    None => Ok(()),
                }
            };
            futures::try_join!(saved, run, event, elsewhere, signal)?;
        }
        if let (Some(ended), Some(rec)) = (ended, row.rec()) {
            child_ended(cx, rec, ended.freed_slot, now).await?;
            if ended.cancels_descendants {
                cancel_children(cx, id, now).await?;
            }
        }
        Ok(true)
    })
}

/// [`apply`] for the runs a claim took (`Row::Update` each): their rows in
/// one statement, then the rest of each change.
pub(super) async fn apply_all(
    cx: &mut Cx<'_>,
    runs: Vec<(&RunRecord, Change)>,
    now: SystemTime,
) -> Result<(), Error> {
    let rows: Vec<&RunRecord> = runs
        .iter()
        .filter(|(_, change)| change.row)
        .map(|(rec, _)| *rec)
        .collect();
    write::write_runs(cx, &rows).await?;
    for (rec, mut change) in runs {
        change.row = false;
        if change != Change::default() {
            apply(cx, Row::Update(rec), change, now).await?;
        }
    }
    Ok(())
}

/// Run `waiter` suspended on `children` with signal `token`, their rows
/// locked by `children::lock_children` (`live`: those that have not
/// ended): records the ones it waits for (`rules::join_pending`), or wakes
/// it at once.
pub(super) async fn join(
    cx: &mut Cx<'_>,
    waiter: &str,
    children: &[String],
    token: &str,
    live: &[String],
    now: SystemTime,
) -> Result<(), Error> {
    let live: HashSet<&str> = live.iter().map(String::as_str).collect();
    let pending: Vec<String> = rules::join_pending(children, |c| !live.contains(c))
        .into_iter()
        .map(str::to_owned)
        .collect();
    write::join_pending(cx, waiter, &pending).await?;
    if pending.is_empty() {
        wake(cx, waiter, children, token, now).await?;
    }
    Ok(())
}

/// Wakes run `waiter`, whose `children` all ended: [`rules::joined`].
async fn wake(
    cx: &mut Cx<'_>,
    waiter: &str,
    children: &[String],
    token: &str,
    now: SystemTime,
) -> Result<(), Error> {
    let records: HashMap<String, RunRecord> = children::load_many(cx, children)
        .await?
        .into_iter()
        .map(|rec| (rec.id.clone(), rec))
        .collect();
    let change = rules::joined(children, token, |c| records.get(c), now);
    apply(cx, Row::Unloaded(waiter), change, now).await?;
    Ok(())
}

/// What the end of run `rec` changes elsewhere (see [`rules::Ended`]): its
/// oldest held sibling starts when it freed a slot, and each run joining
/// it counts it; the last one it waited for is woken, unless it ended.
async fn child_ended(
    cx: &mut Cx<'_>,
    rec: &RunRecord,
    freed_slot: bool,
    now: SystemTime,
) -> Result<(), Error> {
    if let (true, Some(parent)) = (freed_slot, &rec.parent) {
        if let Some(mut held) = children::held_sibling(cx, parent).await? {
            let change = rules::promote(&mut held, now);
            apply(cx, Row::Update(&held), change, now).await?;
        }
    }
    for waiter in write::take_waiters(cx, &rec.id).await? {
        let Some((left, live)) = write::count_down(cx, &waiter).await? else {
            continue;
        };
        if left == 0 && live {
            if let Some((children, token)) = children::join_of(cx, &waiter).await? {
                wake(cx, &waiter, &children, &token, now).await?;
            }
        }
    }
    Ok(())
}

/// Cancels the unfinished descendants of run `id` (their rows locked
/// first by the caller, see `children::lock_descendants`): each child's
/// cancel is applied (which cancels its own descendants); the walk goes
/// on only through children that had ended.
async fn cancel_children(cx: &mut Cx<'_>, id: &str, now: SystemTime) -> Result<(), Error> {
    let mut parents = vec![id.to_owned()];
    while let Some(parent) = parents.pop() {
        for child in children::children_of(cx, &parent).await? {
            // Read again: an earlier sibling's cancel may have started it.
            let Some(mut child) = lock_run(cx, &child).await? else {
                continue;
            };
            match rules::cancel(&mut child, now) {
                Some(change) => {
                    apply(cx, Row::Update(&child), change, now).await?;
                }
                None => parents.push(child.id),
            }
        }
    }
    Ok(())
}
