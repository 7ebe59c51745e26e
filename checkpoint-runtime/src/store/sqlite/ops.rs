//! The write operations of [`SqliteStore`](super::SqliteStore): each runs
//! inside the writer's batch transaction, through a [`TxnCtx`], and applies a
//! rule of [`rules`] to the run's head.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rusqlite::params;

use super::checkpoints::ahead::Ahead;
use super::checkpoints::chain::{load_seq, prune};
use super::checkpoints::refs::Shape;
use super::checkpoints::seal::PartialSeal;
use super::children::{cancel_children, child_ended, join, running_children};
use super::error::{Fail, R};
use super::runs::{
    consume_signal, delete_signal, error_text, fetch_run, insert_run, oldest_signal, run_ord,
};
use super::writer::cache::Head;
use super::writer::deferred::HeadUpdate;
use super::writer::txn::{checkpoint_row, TxnCtx};
use crate::history::Event;
use crate::store::rules;
use crate::store::sql::run_row::{state_code, ErrorCol, FAILED, PARKED};
use crate::store::sql::{from_ts, to_i64, ts, ts_after};
use crate::store::{
    CheckpointRecord, ClaimRequest, ClaimResult, Claimed, Created, Lease, NewRun, Outcome, Release,
    RunState, SignalRecord, Suspend,
};
use crate::Error;

pub(super) fn op_create(cx: &mut TxnCtx<'_>, run: NewRun) -> R<Created> {
    if let Some((_, rec)) = fetch_run(cx.conn, &run.id)? {
        return Ok(Created::Existing(Box::new(rec)));
    }
    let running = match &run.parent {
        Some(parent) if rules::counts_siblings(&run) => running_children(cx, parent)?,
        _ => 0,
    };
    cx.begin()?;
    let now = SystemTime::now();
    let (mut rec, change) = rules::create(run, running, now);
    let ord = insert_run(cx.conn, &rec)?;
    if let Some(started) = &change.event {
        cx.event(ord, now, started)?;
    }
    if let Some((parent, spawned)) = &change.elsewhere {
        let parent = ord_of(cx, parent)?;
        cx.event(parent, now, spawned)?;
    }
    rec.input = Arc::from(&[][..]);
    let key: Arc<str> = Arc::from(rec.id.as_str());
    cx.put(
        key,
        Head {
            ord,
            stored: state_code(&rec.state),
            rec,
            latest_id: 0,
            floor: 1,
            pruned: 1,
            prev: None,
            lost_latest: false,
        },
    );
    cx.bump = true;
    Ok(Created::New)
}

/// A run whose lease a claim may take (`?1` now, `?2` worker, `?3`
/// instance): none, expired, or this worker's older instance's.
macro_rules! takeable {
    () => {
        "(lease_worker IS NULL OR lease_expires <= ?1 \
         OR (lease_worker = ?2 AND lease_instance < ?3))"
    };
}

/// A run a claim may take, for a claim of one run (by its id, the
/// primary key): runnable, under a lease it may take.
pub(super) const CLAIMABLE: &str = concat!(
    "state < 3 AND ",
    takeable!(),
    " AND (state = 0 \
          OR (state = 2 AND due <= ?1) \
          OR (state = 1 AND (due <= ?1 OR EXISTS \
              (SELECT 1 FROM signals s WHERE s.run = runs.ord AND s.name = runs.signal))))"
);

/// The runs [`CLAIMABLE`] accepts, in creation order, as three branches,
/// one per way a run becomes runnable, each read from an index of its own
/// (see the schema's version 6) so that a claim never reads the runs that
/// are waiting and not due: ready runs, waiting or sleeping runs whose
/// deadline has passed, and waiting runs whose signal has arrived (found
/// from `signals`; not due, so that no run is in two branches). Without
/// statistics, SQLite would rather scan the table in creation order than
/// sort what an index finds: `INDEXED BY` holds each branch to its index
/// (and makes the statement fail to prepare should the index be missing).
pub(super) const RUNNABLE: &str = concat!(
    "SELECT id, workflow, ord FROM runs INDEXED BY runs_ready WHERE state = 0 AND ",
    takeable!(),
    " UNION ALL SELECT id, workflow, ord FROM runs INDEXED BY runs_due \
       WHERE state IN (1, 2) AND due <= ?1 AND ",
    takeable!(),
    " UNION ALL SELECT id, workflow, ord FROM runs \
       WHERE state = 1 AND (due IS NULL OR due > ?1) \
       AND ord IN (SELECT run FROM signals) \
       AND EXISTS (SELECT 1 FROM signals s WHERE s.run = runs.ord AND s.name = runs.signal) \
       AND ",
    takeable!(),
    " ORDER BY ord"
);

pub(super) fn op_claim(cx: &mut TxnCtx<'_>, req: ClaimRequest) -> R<ClaimResult> {
    let mut out = ClaimResult::default();
    if req.limit == 0 {
        return Ok(out);
    }
    let now = SystemTime::now();
    let now_i = ts(now);
    // The candidates, in creation order, up to `limit` the caller can run.
    let mut picked: Vec<String> = Vec::new();
    {
        let sql = match req.only {
            // A parked run only when revisited by name (`?5`).
            Some(_) => format!(
                "SELECT id, workflow FROM runs \
                 WHERE (({CLAIMABLE}) OR (state = {PARKED} AND ?5)) AND id = ?4"
            ),
            None => RUNNABLE.to_owned(),
        };
        let mut stmt = cx.conn.prepare_cached(&sql)?;
        let mut rows = match &req.only {
            Some(only) => stmt.query(params![
                now_i,
                &*req.worker,
                &*req.instance,
                only,
                req.revisit_parked
            ])?,
            None => stmt.query(params![now_i, &*req.worker, &*req.instance])?,
        };
        while let Some(row) = rows.next()? {
            let id: String = row.get(0)?;
            let workflow: String = row.get(1)?;
            if !req.workflows.iter().any(|w| *w == workflow) {
                out.unregistered.push((id, workflow));
                continue;
            }
            picked.push(id);
            if picked.len() >= req.limit {
                break;
            }
        }
    }
    if picked.is_empty() {
        return Ok(out);
    }
    cx.begin()?;
    let expires = from_ts(ts_after(now, req.ttl));
    for id in picked {
        // A run that cannot be loaded or decoded is marked and skipped: it
        // must not make every claim (and every worker) fail.
        match claim_run(cx, &req, &id, expires, now) {
            Ok(claimed) => out.claimed.push(claimed),
            Err(fail) if fail.is_damage() => mark_damaged(cx, &id, fail, now)?,
            Err(fail) => return Err(fail),
        }
    }
    Ok(out)
}

/// Claims run `id`, which the claim query picked. Everything is read (and
/// decoded) before anything is written.
fn claim_run(
    cx: &mut TxnCtx<'_>,
    req: &ClaimRequest,
    id: &str,
    expires: SystemTime,
    now: SystemTime,
) -> R<Claimed> {
    let mut h = cx.head(id)?;
    let input: Vec<u8> = cx
        .conn
        .prepare_cached("SELECT input FROM runs WHERE ord = ?1")?
        .query_row([h.ord], |r| r.get(0))?;
    // Never started over without the checkpoint it had (see the rule).
    let checkpoint = cx.latest(&mut h)?.map(|l| l.cp.clone());
    rules::latest_checkpoint(&h.rec, checkpoint.as_deref())?;
    // The query picked the run as the claim rules define it; a waiting
    // run consumes the oldest signal it waits for.
    let signal = match &h.rec.state {
        RunState::Waiting { signal, .. } => consume_signal(cx.conn, h.ord, signal)?,
        _ => None,
    };
    let (lease, change) = rules::claim(&mut h.rec, req, signal, expires, now);
    cx.save_run(&mut h)?;
    if let Some(event) = change.event {
        cx.event(h.ord, now, &event)?;
    }
    let mut run = h.rec.clone();
    run.input = input.into();
    cx.put(Arc::from(id), h);
    Ok(Claimed {
        lease,
        run,
        checkpoint,
    })
}

/// Marks run `id`, which cannot be loaded or decoded (`fail`), failed (see
/// [`rules::damaged`]), naming what can still be read of it.
fn mark_damaged(cx: &mut TxnCtx<'_>, id: &str, fail: Fail, now: SystemTime) -> R<()> {
    let cause = fail.into_error();
    let (ord, workflow): (i64, Option<String>) = cx
        .conn
        .prepare_cached("SELECT ord, CAST(workflow AS TEXT) FROM runs WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1).ok())))?;
    let (site, fields) = readable_site(cx, ord).unwrap_or_default();
    let error = rules::damaged(id, workflow.as_deref(), site.as_deref(), &fields, &cause);
    let event = Event::Failed {
        error: error.to_string(),
    };
    let error = error_text(Some(ErrorCol::Json(&error)))?;
    cx.conn
        .prepare_cached(
            "UPDATE runs SET state = ?2, error = ?3, lease_worker = NULL, \
             lease_instance = NULL, lease_expires = NULL, updated_at = ?4 WHERE ord = ?1",
        )?
        .execute(params![ord, FAILED, error, ts(now)])?;
    cx.event(ord, now, &event)?;
    child_ended(cx, ord, true)?;
    cx.bump = true;
    Ok(())
}

/// The site and field names of run `ord`'s latest checkpoint, if its shape
/// can be read.
fn readable_site(cx: &TxnCtx<'_>, ord: i64) -> Option<(Option<String>, Vec<String>)> {
    let body: Vec<u8> = cx
        .conn
        .prepare_cached(
            "SELECT s.body FROM heads h JOIN checkpoints c ON c.id = h.latest \
             JOIN shapes s ON s.id = c.shape WHERE h.run = ?1",
        )
        .ok()?
        .query_row([ord], |r| r.get(0))
        .ok()?;
    let shape: Shape<'_> = postcard::from_bytes(&body).ok()?;
    let fields = shape.fields.iter().map(|(n, _)| n.to_string()).collect();
    Some((Some(shape.site_key.into_owned()), fields))
}

pub(super) fn op_renew(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease, ttl: Duration) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    rules::renew(&mut h.rec, from_ts(ts_after(SystemTime::now(), ttl)));
    // One statement: no savepoint.
    cx.save_run(&mut h)?;
    cx.put(Arc::from(id), h);
    Ok(())
}

pub(super) fn op_release(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease, how: Release) -> R<()> {
    let mut h = match cx.fenced(id, lease) {
        Ok(h) => h,
        Err(Fail::Err(e)) if matches!(*e, Error::Cancelled { .. }) => {
            let mut h = cx.head(id)?;
            rules::release_cancelled(&mut h.rec);
            cx.save_run(&mut h)?;
            cx.put(Arc::from(id), h);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    cx.begin()?;
    let now = SystemTime::now();
    if let Some(event) = rules::release(&mut h.rec, how, now).event {
        cx.event(h.ord, now, &event)?;
    }
    cx.save_run(&mut h)?;
    cx.put(Arc::from(id), h);
    cx.bump = true;
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
    let state = cp.state();
    // A plain checkpoint leaves the run row alone: its latest seq and time
    // are read from the checkpoint.
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
    rules::save_checkpoint(&mut h.rec, &cp);
    if row_changes {
        cx.save_run(&mut h)?;
    }
    if prunes {
        // Pruning walks the run's rows in the table, the new one included.
        cx.flush()?;
        prune(cx.conn, h.ord, h.pruned, floor)?;
    }
    h.latest_id = to_i64(located.id, "row id")?;
    h.floor = floor;
    h.pruned = pruned;
    if let Some(mut old) = h.prev.replace(located) {
        cx.cache.recycle_locs(std::mem::take(&mut old.locs));
        cx.cache.garbage.push(old);
    }
    let ord = h.ord;
    cx.put(cp.run.clone(), h);
    if let Some(Suspend::Joining {
        children, token, ..
    }) = &cp.suspend
    {
        join(cx, ord, children, token)?;
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
    rules::consume_signal(&mut h.rec, &sig, SystemTime::now());
    cx.save_run(&mut h)?;
    cx.put(Arc::from(id), h);
    Ok(Some(sig))
}

pub(super) fn op_time_out(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    rules::time_out(&mut h.rec, SystemTime::now());
    // One statement: no savepoint.
    cx.save_run(&mut h)?;
    cx.put(Arc::from(id), h);
    Ok(())
}

pub(super) fn op_reject(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease, reason: String) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    cx.begin()?;
    let now = SystemTime::now();
    let latest = match cx.latest(&mut h) {
        Ok(latest) => latest.map(|l| l.cp.clone()),
        Err(e) => {
            cx.put(Arc::from(id), h);
            return Err(e);
        }
    };
    let event = match rules::reject_signal(&mut h.rec, reason, latest.as_deref(), now) {
        Ok(change) => change.event,
        Err(e) => {
            // Nothing changed.
            cx.put(Arc::from(id), h);
            return Err(e.into());
        }
    };
    if let Some(event) = event {
        cx.event(h.ord, now, &event)?;
    }
    cx.save_run(&mut h)?;
    cx.put(Arc::from(id), h);
    Ok(())
}

pub(super) fn op_finish(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease, outcome: Outcome) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    cx.begin()?;
    let now = SystemTime::now();
    let change = rules::finish(&mut h.rec, outcome, now);
    cx.save_run(&mut h)?;
    if let Some(event) = &change.event {
        cx.event(h.ord, now, event)?;
    }
    child_ended(cx, h.ord, true)?;
    // A finished run is not written again: its head is not kept.
    cx.bump = true;
    Ok(())
}

pub(super) fn op_cancel(cx: &mut TxnCtx<'_>, id: &str) -> R<bool> {
    let mut h = cx.head(id)?;
    if h.rec.state.is_terminal() {
        return Ok(false);
    }
    cx.begin()?;
    let now = SystemTime::now();
    let was_held = h.rec.state == RunState::Held;
    let Some(change) = rules::cancel(&mut h.rec, now) else {
        return Ok(false);
    };
    cx.save_run(&mut h)?;
    if let Some(event) = &change.event {
        cx.event(h.ord, now, event)?;
    }
    child_ended(cx, h.ord, !was_held)?;
    cancel_children(cx, id, now)?;
    cx.bump = true;
    Ok(true)
}

pub(super) fn op_retry(cx: &mut TxnCtx<'_>, id: &str) -> R<()> {
    let mut h = cx.head(id)?;
    let now = SystemTime::now();
    let change = rules::retry(&mut h.rec, now)?;
    cx.begin()?;
    cx.save_run(&mut h)?;
    if let Some(event) = &change.event {
        cx.event(h.ord, now, event)?;
    }
    cx.bump = true;
    Ok(())
}

/// The `ord` of run `id`, from the cache when it is there.
pub(super) fn ord_of(cx: &TxnCtx<'_>, id: &str) -> R<i64> {
    match cx.cache.heads.get(id) {
        Some(h) => Ok(h.ord),
        None => run_ord(cx.conn, id),
    }
}

pub(super) fn op_put_signal(cx: &mut TxnCtx<'_>, id: &str, name: &str, payload: &[u8]) -> R<()> {
    let head = cx.head(id)?;
    let now = SystemTime::now();
    let change = rules::accept_signal(&head.rec, name, payload.to_vec(), now)?;
    let (Some(signal), Some(event)) = (change.signal, change.event) else {
        return Err(Error::internal("accept_signal: no signal").into());
    };
    let ord = head.ord;
    cx.put(Arc::from(id), head);
    cx.begin()?;
    cx.conn
        .prepare_cached(
            "INSERT INTO signals (run, name, payload, received_at) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![
            ord,
            signal.name,
            &signal.payload[..],
            ts(signal.received_at)
        ])?;
    cx.event(ord, now, &event)?;
    cx.bump = true;
    Ok(())
}

pub(super) fn op_append_event(cx: &mut TxnCtx<'_>, id: &str, event: &Event) -> R<()> {
    let ord = ord_of(cx, id)?;
    // One statement: no savepoint.
    cx.event(ord, SystemTime::now(), event)
}

pub(super) fn op_fork(cx: &mut TxnCtx<'_>, from: &str, seq: u64, new_id: &str) -> R<()> {
    if ord_of(cx, new_id).is_ok() {
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
    cx.begin()?;
    let now = SystemTime::now();
    let input: Vec<u8> = cx
        .conn
        .prepare_cached("SELECT input FROM runs WHERE ord = ?1")?
        .query_row([src_ord], |r| r.get(0))?;
    let (mut rec, copy, change) = rules::fork(from, &cp, new_id, workflow, input.into(), now);
    if let Some((_, forked)) = &change.elsewhere {
        cx.event(src_ord, now, forked)?;
    }
    let id = copy.run.clone();
    let ord = insert_run(cx.conn, &rec)?;
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
    if let Some(forked) = &change.event {
        cx.event(ord, now, forked)?;
    }
    rec.input = Arc::from(&[][..]);
    let stored = state_code(&rec.state);
    // The fork joins the same children (they are not run again).
    if let Some(Suspend::Joining {
        children, token, ..
    }) = &copy.suspend
    {
        join(cx, ord, children, token)?;
    }
    cx.put(
        id,
        Head {
            ord,
            rec,
            stored,
            latest_id,
            floor: 1,
            pruned: 1,
            prev: Some(located),
            lost_latest: false,
        },
    );
    cx.bump = true;
    Ok(())
}
