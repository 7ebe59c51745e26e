//! The claim of [`SqliteStore`](super::SqliteStore): the one rule written
//! a second time, in SQL (the runs [`rules::lease_free`] and
//! [`rules::runnable`] accept, read from indexes, see [`RUNNABLE`]), then
//! per run picked: load it, call [`rules::claim`], apply the change. A run
//! that cannot be loaded is set aside by [`rules::set_aside`] instead, so
//! that one damaged run does not make every claim (and every worker) fail.

use std::sync::Arc;
use std::time::SystemTime;

use rusqlite::params;

use super::apply::{apply, Target};
use super::checkpoints::refs::Shape;
use super::checkpoints::Located;
use super::error::{Fail, R};
use super::queues;
use super::runs::consume_signal;
use super::writer::cache::Head;
use super::writer::txn::TxnCtx;
use crate::store::rules;
use crate::store::sql::run_row::state_sql;
use crate::store::sql::{from_ts, ts, ts_after};
use crate::store::{CheckpointRecord, ClaimRequest, ClaimResult, Claimed, RunState};
use crate::Error;

/// A run whose lease a claim may take (`?1` now, `?2` worker, `?3`
/// instance): none, expired, or this worker's older instance's.
macro_rules! takeable {
    () => {
        "(lease_worker IS NULL OR lease_expires <= ?1 \
         OR (lease_worker = ?2 AND lease_instance < ?3))"
    };
}

/// A run a claim may take, for a claim of one run (by its id, the
/// primary key): runnable at `?6` (the runtime's clock, see
/// `ClaimRequest::clock_now`), under a lease it may take.
macro_rules! claimable {
    () => {
        concat!(
            "state < ",
            state_sql!(COMPLETED),
            " AND ",
            takeable!(),
            " AND (state = ",
            state_sql!(READY),
            " OR (state = ",
            state_sql!(SLEEPING),
            " AND due <= ?6) OR (state = ",
            state_sql!(WAITING),
            " AND (due <= ?6 OR EXISTS \
               (SELECT 1 FROM signals s WHERE s.run = runs.ord AND s.name = runs.signal))))"
        )
    };
}

/// A run in none of the queues a claim limits (`$queues`, a JSON array of
/// their names): those are claimed by [`QUEUE_CLAIM`], in their own order.
macro_rules! unlimited {
    ($queues:literal) => {
        concat!(
            "(queue IS NULL OR queue NOT IN (SELECT value FROM json_each(",
            $queues,
            ")))"
        )
    };
}

/// The claim of run `?4` by name: [`claimable!`], or parked and revisited
/// (`?5`, see [`rules::claimable`]).
const CLAIMABLE_BY_ID: &str = concat!(
    "SELECT id, workflow FROM runs WHERE ((",
    claimable!(),
    ") OR (state = ",
    state_sql!(PARKED),
    " AND ?5)) AND id = ?4 AND ",
    unlimited!("?7")
);

/// The runs of queue `?4` a claim may take ([`claimable!`], of the
/// workflows `?7`, a JSON array, and only run `?5`, or NULL), in the order
/// `rules::admit_queued` admits them (higher priority first, then oldest),
/// at most `?8`. Read from `runs_queue_order`.
const QUEUE_CLAIM: &str = concat!(
    "SELECT id FROM runs INDEXED BY runs_queue_order WHERE queue = ?4 AND ",
    claimable!(),
    " AND (?5 IS NULL OR id = ?5) AND workflow IN (SELECT value FROM json_each(?7)) \
     ORDER BY priority DESC, ord LIMIT ?8"
);

/// The runs [`claimable!`] accepts (`?1` now, for leases, `?2` worker, `?3`
/// instance, `?4` the runtime's clock, for timers), in creation order, as three branches,
/// one per way a run becomes runnable, each read from an index of its own
/// (see the schema's version 6) so that a claim never reads the runs that
/// are waiting and not due: ready runs, waiting or sleeping runs whose
/// deadline has passed, and waiting runs whose signal has arrived (found
/// from `signals`; not due, so that no run is in two branches). Without
/// statistics, SQLite would rather scan the table in creation order than
/// sort what an index finds: `INDEXED BY` holds each branch to its index
/// (and makes the statement fail to prepare should the index be missing).
pub(super) const RUNNABLE: &str = concat!(
    "SELECT id, workflow, ord FROM runs INDEXED BY runs_ready WHERE state = ",
    state_sql!(READY),
    " AND ",
    takeable!(),
    " AND ",
    unlimited!("?5"),
    " UNION ALL SELECT id, workflow, ord FROM runs INDEXED BY runs_due \
       WHERE state IN (",
    state_sql!(WAITING),
    ", ",
    state_sql!(SLEEPING),
    ") AND due <= ?4 AND ",
    takeable!(),
    " AND ",
    unlimited!("?5"),
    " UNION ALL SELECT id, workflow, ord FROM runs \
       WHERE state = ",
    state_sql!(WAITING),
    " AND (due IS NULL OR due > ?4) \
       AND ord IN (SELECT run FROM signals) \
       AND EXISTS (SELECT 1 FROM signals s WHERE s.run = runs.ord AND s.name = runs.signal) \
       AND ",
    takeable!(),
    " AND ",
    unlimited!("?5"),
    " ORDER BY ord"
);

pub(super) fn op_claim(cx: &mut TxnCtx<'_>, req: ClaimRequest) -> R<ClaimResult> {
    let mut out = ClaimResult::default();
    if req.limit == 0 {
        return Ok(out);
    }
    // Leases on the system's time, timers on the runtime's clock.
    let now = SystemTime::now();
    let now_i = ts(now);
    let clock_i = ts(req.clock_now);
    // The candidates, in creation order, up to `limit` the caller can run.
    let mut picked: Vec<String> = Vec::new();
    // The queues this claim limits: their runs are claimed queue by queue.
    let limited: Vec<&str> = req
        .queues
        .keys()
        .map(String::as_str)
        .filter(|q| rules::queue_limits(&req, Some(q)).is_some())
        .collect();
    let limited_json =
        serde_json::to_string(&limited).map_err(|e| Error::internal(e.to_string()))?;
    {
        let sql = match req.only {
            Some(_) => CLAIMABLE_BY_ID,
            None => RUNNABLE,
        };
        let mut stmt = cx.conn.prepare_cached(sql)?;
        let mut rows = match &req.only {
            Some(only) => stmt.query(params![
                now_i,
                &*req.worker,
                &*req.instance,
                only,
                req.revisit_parked,
                clock_i,
                limited_json,
            ])?,
            None => stmt.query(params![
                now_i,
                &*req.worker,
                &*req.instance,
                clock_i,
                limited_json
            ])?,
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
    let mut admissions = Vec::new();
    for queue in limited {
        let room = req.limit.saturating_sub(picked.len());
        if room == 0 {
            break;
        }
        let (admitted, until) = admit_queue(cx, &req, queue, room, now)?;
        if let Some(until) = until {
            admissions.extend(admitted.iter().map(|_| (queue.to_owned(), until)));
        }
        picked.extend(admitted);
    }
    if picked.is_empty() {
        return Ok(out);
    }
    cx.begin()?;
    queues::record(cx, &admissions, now)?;
    let expires = from_ts(ts_after(now, req.ttl));
    for id in picked {
        match load(cx, &id) {
            Ok(loaded) => out.claimed.push(claim_run(cx, &req, loaded, expires, now)?),
            Err(fail) if fail.is_damage() => set_aside(cx, &id, fail, now)?,
            Err(fail) => return Err(fail),
        }
    }
    Ok(out)
}

/// The runs of `queue` this claim admits (at most `room`; see
/// `rules::queues`), and, for a queue with a rate, when their admissions
/// stop counting.
fn admit_queue(
    cx: &TxnCtx<'_>,
    req: &ClaimRequest,
    queue: &str,
    room: usize,
    now: SystemTime,
) -> R<(Vec<String>, Option<i64>)> {
    let Some(limits) = rules::queue_limits(req, Some(queue)) else {
        return Ok((Vec::new(), None));
    };
    let counted = queues::count(cx, req, queue, limits, now)?;
    let want = rules::queue_room(limits, counted.held, counted.recent, room);
    if want == 0 {
        return Ok((Vec::new(), None));
    }
    let workflows =
        serde_json::to_string(&req.workflows).map_err(|e| Error::internal(e.to_string()))?;
    let ids: Vec<String> = cx
        .conn
        .prepare_cached(QUEUE_CLAIM)?
        .query_map(
            params![
                ts(now),
                &*req.worker,
                &*req.instance,
                queue,
                req.only,
                ts(req.clock_now),
                workflows,
                i64::try_from(want).unwrap_or(i64::MAX),
            ],
            |r| r.get(0),
        )?
        .collect::<rusqlite::Result<_>>()?;
    // In the rule's order already; the rule has the last word.
    let candidates = ids
        .into_iter()
        .enumerate()
        .map(|(i, id)| (0, i, id))
        .collect();
    let took = rules::admit_queued(limits, counted.held, counted.recent, room, candidates);
    Ok((took, counted.until))
}

/// A run the claim query picked, as the claim needs it.
struct Loaded {
    head: Box<Head>,
    input: Vec<u8>,
    checkpoint: Option<Arc<CheckpointRecord>>,
}

/// Run `id`, which the claim query picked, as the claim needs it: its
/// head, its input and its latest checkpoint, all read (and decoded)
/// before anything is written. Never started over without the
/// checkpoint it had (see [`rules::latest_checkpoint`]).
fn load(cx: &mut TxnCtx<'_>, id: &str) -> R<Loaded> {
    let mut head = cx.head(id)?;
    let input: Vec<u8> = cx
        .conn
        .prepare_cached("SELECT input FROM runs WHERE ord = ?1")?
        .query_row([head.ord], |r| r.get(0))?;
    let checkpoint = cx.latest(&mut head)?.map(|l: &Located| l.cp.clone());
    rules::latest_checkpoint(&head.rec, checkpoint.as_deref())?;
    Ok(Loaded {
        head,
        input,
        checkpoint,
    })
}

/// Claims a run, loaded: a waiting run consumes the oldest signal it
/// waits for, and [`rules::claim`] says the rest.
fn claim_run(
    cx: &mut TxnCtx<'_>,
    req: &ClaimRequest,
    loaded: Loaded,
    expires: SystemTime,
    now: SystemTime,
) -> R<Claimed> {
    let Loaded {
        head: mut h,
        input,
        checkpoint,
    } = loaded;
    let signal = match &h.rec.state {
        RunState::Waiting { signal, .. } => consume_signal(cx.conn, h.ord, signal)?,
        _ => None,
    };
    let (lease, change) = rules::claim(&mut h.rec, req, signal, expires, now);
    let mut run = h.rec.clone();
    run.input = input.into();
    apply(cx, Target::Run(h), change, now)?;
    Ok(Claimed {
        lease,
        run,
        checkpoint,
    })
}

/// Sets aside run `id`, which cannot be loaded or decoded (`fail`): marked
/// failed by [`rules::set_aside`] with [`rules::damaged`]'s error, naming
/// what can still be read of it. A run whose row itself does not load is
/// changed as a blank record ([`rules::blank_run`]).
fn set_aside(cx: &mut TxnCtx<'_>, id: &str, fail: Fail, now: SystemTime) -> R<()> {
    let cause = fail.into_error();
    let (ord, workflow): (i64, Option<String>) = cx
        .conn
        .prepare_cached("SELECT ord, CAST(workflow AS TEXT) FROM runs WHERE id = ?1")?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1).ok())))?;
    let (site, fields) = readable_site(cx, ord).unwrap_or_default();
    let error = rules::damaged(id, workflow.as_deref(), site.as_deref(), &fields, &cause);
    let mut target = match cx.head(id) {
        Ok(h) => Target::Run(h),
        Err(fail) if fail.is_damage() => Target::Unreadable {
            ord,
            rec: rules::blank_run(id, now),
        },
        Err(fail) => return Err(fail),
    };
    let change = rules::set_aside(target.rec_mut(), error, now);
    apply(cx, target, change, now)?;
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
