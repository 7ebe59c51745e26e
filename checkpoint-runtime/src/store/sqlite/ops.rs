//! The write operations of [`SqliteStore`](super::SqliteStore) but the
//! claim (see `claim`): each runs inside the writer's batch transaction,
//! through a [`TxnCtx`], and is the same three steps: load the run's
//! records (its head, from the writer's cache or the database), call one
//! rule of [`rules`], and store the change it returns with
//! [`apply`]. What is written for a transition is decided by the rule;
//! what is left here is loading, and storing a checkpoint itself (its row,
//! in this backend's layout; see `checkpoints`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::apply::{apply, join, Target};
use super::checkpoints::ahead::Ahead;
use super::checkpoints::chain::{load_seq, prune};
use super::checkpoints::seal::PartialSeal;
use super::children::running_children;
use super::error::{Fail, R};
use super::runs::{delete_signal, fetch_run, oldest_signal};
use super::write::{ord_of, record_event};
use super::writer::deferred::HeadUpdate;
use super::writer::txn::{checkpoint_row, TxnCtx};
use crate::history::Event;
use crate::store::rules;
use crate::store::sql::{from_ts, to_i64, ts_after};
use crate::store::{
    CancelRequest, CheckpointRecord, Created, Lease, NewRun, Outcome, Release, Renewed,
    SignalRecord, Suspend,
};
use crate::Error;

pub(super) fn op_create(cx: &mut TxnCtx<'_>, run: NewRun) -> R<Created> {
    if let Some((_, rec)) = fetch_run(cx.conn, &run.id)? {
        return Ok(Created::Existing(Box::new(rec)));
    }
    let running = match &run.parent {
        Some(parent) if rules::counts_siblings(&run) => running_children(cx.conn, parent)?,
        _ => 0,
    };
    let now = SystemTime::now();
    let (rec, change) = rules::create(run, running, now);
    apply(cx, Target::New(rec), change, now)?;
    Ok(Created::New)
}

pub(super) fn op_renew(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease, ttl: Duration) -> R<Renewed> {
    let mut h = cx.fenced(id, lease)?;
    let now = SystemTime::now();
    let (change, renewed) = rules::renew(&mut h.rec, from_ts(ts_after(now, ttl)));
    apply(cx, Target::Run(h), change, now)?;
    Ok(renewed)
}

pub(super) fn op_release(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease, how: Release) -> R<()> {
    let now = SystemTime::now();
    let (h, change) = match cx.fenced(id, lease) {
        Ok(mut h) => {
            let change = rules::release(&mut h.rec, how, now);
            (h, change)
        }
        Err(Fail::Err(e)) if matches!(*e, Error::Cancelled { .. }) => {
            let mut h = cx.head(id)?;
            let change = rules::release_cancelled(&mut h.rec);
            (h, change)
        }
        Err(e) => return Err(e),
    };
    apply(cx, Target::Run(h), change, now)?;
    Ok(())
}

/// Stores `cp`, sealed with what `seal` completes (its checksums, taken by
/// the caller, outside the writer thread which every write waits for, but
/// for large fields: see `checkpoints::seal`), with what the caller found
/// out about its large fields meanwhile (`ahead`, see `checkpoints::ahead`).
pub(super) fn op_save(
    cx: &mut TxnCtx<'_>,
    lease: &Lease,
    cp: Arc<CheckpointRecord>,
    (seal, ahead): (PartialSeal, Option<Arc<Ahead>>),
    keep: Option<usize>,
) -> R<()> {
    let mut h = cx.fenced(&cp.run, lease)?;
    if let Err(e) = rules::check_next_seq(&h.rec, &cp) {
        cx.put(cp.run.clone(), h);
        return Err(e.into());
    }
    // The previous checkpoint, to share the bytes of unchanged fields.
    cx.latest(&mut h)?;
    // A plain checkpoint leaves the run row alone: its latest seq and time
    // are read from the checkpoint (and the checkpoint's row is its
    // `CheckpointSaved` event).
    let state = cp.state();
    let row_changes = h.rec.state != state || h.rec.attempt != 1 || h.rec.wake.is_some();
    let floor = match keep {
        Some(keep) => h.floor.max(rules::retention_floor(cp.seq, keep)),
        None => h.floor,
    };
    // Hidden rows are cut down in steps of a quarter of `keep`, so that the
    // chain is walked about twice per checkpoint on average.
    let prunes = keep.is_some_and(|keep| floor - h.pruned >= (keep as u64 / 4).max(1));
    if row_changes || prunes {
        cx.begin()?;
    }
    let shape = match cx.known_shape(&cp, h.prev.as_ref()) {
        Some((id, _)) => id,
        None => cx.shape_id(&cp)?,
    };
    let prev = h.prev.as_ref();
    let ahead = match ahead {
        Some(a) => a.take(&cp, prev.map(|p| &p.cp)),
        None => Vec::new(),
    };
    let sealing = (seal, &ahead[..]);
    let (row, located) = checkpoint_row(cx, h.ord, &cp, sealing, prev, shape, floor, false)?;
    let pruned = if prunes { floor } else { h.pruned };
    let head = HeadUpdate {
        run: h.ord,
        latest: row.id,
        pruned: to_i64(pruned, "seq")?,
    };
    // Nothing fails after this without a savepoint: a plain checkpoint's row
    // and head are written with the batch's (see `deferred`).
    cx.cache.deferred.push_row(row);
    cx.cache.deferred.push_head(head);
    let mut change = rules::save_checkpoint(&mut h.rec, &cp);
    change.row = row_changes;
    let (ord, old_pruned) = (h.ord, h.pruned);
    h.latest_id = to_i64(located.id, "row id")?;
    h.floor = floor;
    h.pruned = pruned;
    if let Some(mut old) = h.prev.replace(located) {
        cx.cache.recycle_locs(std::mem::take(&mut old.locs));
        cx.cache.garbage.push(old);
    }
    apply(cx, Target::Run(h), change, cp.created_at)?;
    if prunes {
        // Pruning walks the run's rows in the table, the new one included.
        cx.flush()?;
        prune(cx.conn, ord, old_pruned, floor)?;
    }
    if let Some(Suspend::Joining { children, .. }) = &cp.suspend {
        join(cx, &cp.run, ord, children, SystemTime::now())?;
    }
    Ok(())
}

pub(super) fn op_take_signal(
    cx: &mut TxnCtx<'_>,
    id: &str,
    lease: &Lease,
    name: &str,
) -> R<Option<SignalRecord>> {
    let mut h = cx.fenced(id, lease)?;
    let Some(sid) = oldest_signal(cx.conn, h.ord, name)? else {
        cx.put(Arc::from(id), h);
        return Ok(None);
    };
    cx.begin()?;
    let sig = delete_signal(cx.conn, sid)?;
    let now = SystemTime::now();
    let change = rules::consume_signal(&mut h.rec, &sig, now);
    apply(cx, Target::Run(h), change, now)?;
    Ok(Some(sig))
}

pub(super) fn op_time_out(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    let now = SystemTime::now();
    let change = rules::time_out(&mut h.rec, now);
    apply(cx, Target::Run(h), change, now)?;
    Ok(())
}

pub(super) fn op_reject(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease, reason: String) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    let now = SystemTime::now();
    let latest = match cx.latest(&mut h) {
        Ok(latest) => latest.map(|l| l.cp.clone()),
        Err(e) => {
            cx.put(Arc::from(id), h);
            return Err(e);
        }
    };
    let change = match rules::reject_signal(&mut h.rec, reason, latest.as_deref(), now) {
        Ok(change) => change,
        Err(e) => {
            // Nothing changed.
            cx.put(Arc::from(id), h);
            return Err(e.into());
        }
    };
    apply(cx, Target::Run(h), change, now)?;
    Ok(())
}

pub(super) fn op_finish(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease, outcome: Outcome) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    let now = SystemTime::now();
    let change = rules::finish(&mut h.rec, outcome, now);
    apply(cx, Target::Run(h), change, now)?;
    Ok(())
}

pub(super) fn op_cancel(cx: &mut TxnCtx<'_>, id: &str) -> R<bool> {
    let mut h = cx.head(id)?;
    let now = SystemTime::now();
    let Some(change) = rules::cancel(&mut h.rec, now) else {
        cx.put(Arc::from(id), h);
        return Ok(false);
    };
    apply(cx, Target::Run(h), change, now)?;
    Ok(true)
}

/// `rules::request_cancel`, and the request itself in its column (the one
/// write of it: no other write touches `cancel_request`).
pub(super) fn op_request_cancel(cx: &mut TxnCtx<'_>, id: &str, req: CancelRequest) -> R<()> {
    let mut h = cx.head(id)?;
    let now = SystemTime::now();
    let change = match rules::request_cancel(&mut h.rec, req, now) {
        Ok(change) => change,
        Err(e) => {
            cx.put(Arc::from(id), h);
            return Err(e.into());
        }
    };
    cx.begin()?;
    let text = h.rec.cancel.as_ref().map(CancelRequest::to_json);
    cx.conn
        .prepare_cached("UPDATE runs SET cancel_request = ?2 WHERE ord = ?1")?
        .execute(rusqlite::params![h.ord, text])?;
    apply(cx, Target::Run(h), change, now)?;
    cx.bump = true;
    Ok(())
}

pub(super) fn op_retry(cx: &mut TxnCtx<'_>, id: &str) -> R<()> {
    let mut h = cx.head(id)?;
    let now = SystemTime::now();
    let change = match rules::retry(&mut h.rec, now) {
        Ok(change) => change,
        Err(e) => {
            cx.put(Arc::from(id), h);
            return Err(e.into());
        }
    };
    apply(cx, Target::Run(h), change, now)?;
    Ok(())
}

pub(super) fn op_put_signal(cx: &mut TxnCtx<'_>, id: &str, name: &str, payload: &[u8]) -> R<()> {
    let h = cx.head(id)?;
    let now = SystemTime::now();
    let change = match rules::accept_signal(&h.rec, name, payload.to_vec(), now) {
        Ok(change) => change,
        Err(e) => {
            cx.put(Arc::from(id), h);
            return Err(e.into());
        }
    };
    apply(cx, Target::Run(h), change, now)?;
    Ok(())
}

/// An event the runtime records itself (not a transition of the run).
pub(super) fn op_append_event(cx: &mut TxnCtx<'_>, id: &str, event: &Event) -> R<()> {
    let ord = ord_of(cx, id)?.ok_or_else(|| Error::unknown_run(id))?;
    // One statement: no savepoint.
    record_event(cx, ord, SystemTime::now(), event)
}

pub(super) fn op_fork(cx: &mut TxnCtx<'_>, from: &str, seq: u64, new_id: &str) -> R<()> {
    if ord_of(cx, new_id)?.is_some() {
        return Err(Error::AlreadyExists {
            run: new_id.to_owned(),
        }
        .into());
    }
    let mut src = cx.head(from)?;
    // Only kept checkpoints can be forked.
    let kept = seq >= src.floor && seq <= src.rec.latest_seq && seq > 0;
    let found = if !kept {
        None
    } else if seq == src.rec.latest_seq {
        cx.latest(&mut src)?.map(|l| l.cp.clone())
    } else {
        load_seq(cx.conn, src.ord, &Arc::from(from), seq)?.map(|l| l.cp)
    };
    let (src_ord, workflow) = (src.ord, src.rec.workflow.clone());
    cx.put(Arc::from(from), src);
    let cp = found.ok_or_else(|| Error::UnknownCheckpoint {
        run: from.to_owned(),
        seq,
    })?;
    let input: Vec<u8> = cx
        .conn
        .prepare_cached("SELECT input FROM runs WHERE ord = ?1")?
        .query_row([src_ord], |r| r.get(0))?;
    let now = SystemTime::now();
    let (rec, copy, change) = rules::fork(from, &cp, new_id, workflow, input.into(), now);
    let ord = apply(cx, Target::New(rec), change, now)?;
    // The copy is the new run's first checkpoint row, quiet (its history
    // records `Forked`, not `CheckpointSaved`).
    let copy = Arc::new(copy);
    let shape = cx.shape_id(&copy)?;
    let sealing = (PartialSeal::of(&copy), &[][..]);
    let (row, located) = checkpoint_row(cx, ord, &copy, sealing, None, shape, 1, true)?;
    let latest_id = row.id;
    cx.cache.deferred.push_row(row);
    cx.cache.deferred.push_head(HeadUpdate {
        run: ord,
        latest: latest_id,
        pruned: 1,
    });
    let id: Arc<str> = copy.run.clone();
    if let Some(mut h) = cx.cache.take(&id) {
        h.latest_id = latest_id;
        h.prev = Some(located);
        cx.put(id.clone(), h);
    }
    // The fork joins the same children (they are not run again).
    if let Some(Suspend::Joining { children, .. }) = &copy.suspend {
        join(cx, &id, ord, children, now)?;
    }
    Ok(())
}
