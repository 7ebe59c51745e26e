//! Group commit of checkpoint saves: the saves of the runs of one store
//! instance that wait at the same time share one statement (or one
//! transaction) and its one WAL flush.
//!
//! A save that finds no other save of this store in flight is done at once
//! by its caller, as one statement ([`save::statement`](super::save)): a
//! lone save waits for nothing (no timer, no hand-over to a task). A save
//! that finds [`WRITERS`] saves or batches in flight, or saves already
//! queued, joins the queue; whenever a writer is free, it takes everything
//! queued (up to [`MAX_BATCH`]) and sends the saves without retention as
//! one statement in autocommit ([`save_batch::BATCH`](super::save_batch)),
//! and those with retention as one pipelined transaction of their own
//! statements ([`Pooled::pipelined`]: `BEGIN`, the statements, `COMMIT` in
//! one flight). Either way a transaction is open only while the server
//! works through it (the connection is taken before, nothing of ours is
//! awaited inside). The writers of queued saves are tasks of their own, so
//! a caller that goes away (a cancelled run) never strands the others'
//! saves.
//!
//! Each save is fenced by its own run's lease epoch, as a lone save is, and
//! answers for its own run: a save the statement refuses (lease lost, wrong
//! seq, a run gone, a row it leaves to the fenced transaction) changes
//! nothing and is done again on its own after the batch committed
//! ([`save::save_locked`](super::save::save_locked)), which gives exactly
//! the error a lone save gives. A statement that fails (e.g. a value the
//! server refuses) writes nothing of its saves, which are then done on
//! their own, so one bad save fails alone. Both lock the runs' rows in the
//! order of the run ids, so two batches (of two workers) never wait for
//! each other in a cycle.

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::conn::{Pool, Pooled};
use super::save::{save_in_one, save_locked, saved_run, sqlstate_class, Save};
use super::save_batch::{Columns, BATCH};
use super::tables::checkpoints::segments::RowPlan;
use crate::store::{CheckpointRecord, Lease};
use crate::Error;
use tokio_postgres::types::ToSql;

/// Saves or batches of one store in flight at most at a time (the rest
/// queue). Two: one batch is sent while the server flushes the other's
/// commit. (Four measured no better in the bench's throughput row.)
const WRITERS: usize = 2;

/// Saves in one batch at most.
const MAX_BATCH: usize = 512;

/// The group commit of one store (see the module docs).
pub(super) struct GroupCommit {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Arc<Pool>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    queue: Vec<Queued>,
    /// Saves done by their callers and writer tasks, in flight.
    writers: usize,
    /// Batches of more than one save committed, their saves, and those of
    /// their saves that appended fields and were written by the batch
    /// statement (no retention) (for tests).
    #[cfg(test)]
    batches: (u64, u64, u64),
}

/// A save waiting in the queue, and where its result goes.
struct Queued {
    lease: Lease,
    cp: Arc<CheckpointRecord>,
    keep: Option<usize>,
    plan: Option<Arc<RowPlan>>,
    done: oneshot::Sender<Result<bool, Error>>,
}

/// A caller's place among the writers (see [`State::writers`]), given back
/// when dropped (also when the caller goes away); should saves have queued
/// meanwhile, the place goes to a writer task for them instead.
struct Slot(Arc<Inner>);

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        if state.queue.is_empty() {
            state.writers -= 1;
            return;
        }
        drop(state);
        self.0.pool.handle().spawn(write_queued(self.0.clone()));
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl GroupCommit {
    pub(super) fn new(pool: Arc<Pool>) -> GroupCommit {
        GroupCommit {
            inner: Arc::new(Inner {
                pool,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Saves `cp` under `lease` (see the module docs), stored as `plan`
    /// says or whole: the result of `PostgresStore::save_checkpoint`, and
    /// whether it was stored as planned.
    pub(super) async fn save(
        &self,
        lease: &Lease,
        cp: Arc<CheckpointRecord>,
        keep: Option<usize>,
        plan: Option<Arc<RowPlan>>,
    ) -> Result<bool, Error> {
        let queued = {
            let mut state = self.inner.lock();
            if state.writers < WRITERS && state.queue.is_empty() {
                state.writers += 1;
                None
            } else {
                let (done, result) = oneshot::channel();
                state.queue.push(Queued {
                    lease: lease.clone(),
                    cp: cp.clone(),
                    keep,
                    plan: plan.clone(),
                    done,
                });
                // A free place: a writer task for the queue.
                let spawn = state.writers < WRITERS;
                if spawn {
                    state.writers += 1;
                }
                Some((result, spawn))
            }
        };
        match queued {
            None => {
                let _slot = Slot(self.inner.clone());
                save_alone(&self.inner.pool, lease, &cp, keep, plan.as_deref()).await
            }
            Some((result, spawn)) => {
                if spawn {
                    let inner = self.inner.clone();
                    self.inner.pool.handle().spawn(write_queued(inner));
                }
                result.await.unwrap_or_else(|_| {
                    Err(Error::store(
                        "postgres: the checkpoint save's writer ended before it answered",
                    ))
                })
            }
        }
    }

    /// Batches of more than one save committed so far, their saves, and
    /// their saves that appended fields in the batch statement.
    #[cfg(test)]
    pub(super) fn batches(&self) -> (u64, u64, u64) {
        self.inner.lock().batches
    }
}

/// A save on its own: one statement, or the fenced transaction when the
/// statement refuses it (see `PostgresStore::do_save`), which stores the
/// checkpoint whole. Whether it was stored as `plan` says.
async fn save_alone(
    pool: &Pool,
    lease: &Lease,
    cp: &CheckpointRecord,
    keep: Option<usize>,
    plan: Option<&RowPlan>,
) -> Result<bool, Error> {
    let mut conn = pool.get().await?;
    save_alone_on(&mut conn, lease, cp, keep, plan).await
}

/// A writer task, holding a place among the writers: writes what is
/// queued, batch after batch, until the queue is empty; then gives its
/// place back. (Dropped unpolled, at the runtime's shutdown, it keeps the
/// place: the store goes with the runtime.)
async fn write_queued(inner: Arc<Inner>) {
    loop {
        let batch: Vec<Queued> = {
            let mut state = inner.lock();
            if state.queue.is_empty() {
                state.writers -= 1;
                return;
            }
            let n = state.queue.len().min(MAX_BATCH);
            state.queue.drain(..n).collect()
        };
        write_batch(&inner, batch).await;
    }
}

/// Writes `batch` (see the module docs) and answers each of its saves.
async fn write_batch(inner: &Inner, mut batch: Vec<Queued>) {
    let pool = &*inner.pool;
    if batch.len() == 1 {
        if let Some(q) = batch.pop() {
            let result = save_alone(pool, &q.lease, &q.cp, q.keep, q.plan.as_deref()).await;
            let _ = q.done.send(result);
        }
        return;
    }
    batch.sort_by(|a, b| a.cp.run.cmp(&b.cp.run));
    let mut conn = match pool.get().await {
        Ok(conn) => conn,
        Err(e) => {
            for q in batch {
                let _ = q.done.send(Err(e.clone()));
            }
            return;
        }
    };
    let outcome = send_batch(&mut conn, &batch).await;
    #[cfg(test)]
    {
        let saved = outcome
            .iter()
            .filter(|o| matches!(o, Outcome::Saved))
            .count();
        let appended = outcome
            .iter()
            .zip(&batch)
            .filter(|(o, q)| matches!(o, Outcome::Saved) && q.keep.is_none() && q.plan.is_some())
            .count();
        if saved > 1 {
            let mut state = inner.lock();
            state.batches.0 += 1;
            state.batches.1 += saved as u64;
            state.batches.2 += appended as u64;
        }
    }
    for (q, outcome) in batch.into_iter().zip(outcome) {
        let result = match outcome {
            Outcome::Saved => Ok(q.plan.is_some()),
            Outcome::Failed(e) => Err(e),
            Outcome::Alone => {
                // Refused by its statement, or the batch was not written:
                // the save on its own tells why, or saves it.
                save_alone_on(&mut conn, &q.lease, &q.cp, q.keep, q.plan.as_deref()).await
            }
        };
        let _ = q.done.send(result);
    }
}

/// [`save_alone`] on a connection already taken.
async fn save_alone_on(
    conn: &mut Pooled<'_>,
    lease: &Lease,
    cp: &CheckpointRecord,
    keep: Option<usize>,
    plan: Option<&RowPlan>,
) -> Result<bool, Error> {
    if save_in_one(conn, lease, cp, keep, plan).await? {
        return Ok(plan.is_some());
    }
    save_locked(conn, lease, cp, keep).await?;
    Ok(false)
}

/// What became of one save of a batch.
enum Outcome {
    /// Written and committed.
    Saved,
    /// The batch's outcome is unknown (its connection failed while it was
    /// in flight): the error a lone save gets then.
    Failed(Error),
    /// Not written: to be done on its own.
    Alone,
}

/// Sends `batch`: the saves without retention as one statement
/// ([`save_batch::BATCH`](super::save_batch)) in autocommit (one round
/// trip, one transaction), then those with retention as one pipelined
/// transaction of their own statements ([`Save::statement`]); what became
/// of each save. (Two transactions, each locking its runs in id order.)
async fn send_batch(conn: &mut Pooled<'_>, batch: &[Queued]) -> Vec<Outcome> {
    let after: Vec<_> = batch.iter().map(|q| saved_run(&q.cp)).collect();
    let saves: Vec<Option<Save<'_>>> = batch
        .iter()
        .zip(&after)
        .map(|(q, after)| Save::of(&q.lease, &q.cp, after, q.keep, q.plan.as_deref()))
        .collect();
    let mut outcomes: Vec<Outcome> = batch.iter().map(|_| Outcome::Alone).collect();
    let mut columns = Columns::default();
    let mut pruning = Vec::new();
    for (idx, save) in saves.iter().enumerate() {
        match save {
            Some(save) if save.below.is_some() => pruning.push((idx, save)),
            Some(save) => {
                if let Ok(i) = i32::try_from(idx) {
                    columns.push(i, save);
                }
            }
            None => {}
        }
    }
    if !columns.is_empty() {
        let params = columns.params();
        let sent = if columns.replan() {
            conn.plain().query_planned(BATCH, &params).await
        } else {
            conn.plain().query(BATCH, &params).await
        };
        match sent {
            Ok(rows) => {
                for row in rows {
                    let saved = row.try_get::<_, i32>(0).ok();
                    if let Some(o) = saved.and_then(|i| outcomes.get_mut(usize::try_from(i).ok()?))
                    {
                        *o = Outcome::Saved;
                    }
                }
            }
            // Refused by the server (it rolled the statement back): nothing
            // was written.
            Err(e) if sqlstate_class(&e).is_some() => {}
            // The connection failed with the statement in flight: whether
            // it committed is unknown.
            Err(e) => {
                for (o, save) in outcomes.iter_mut().zip(&saves) {
                    if save.as_ref().is_some_and(|s| s.below.is_none()) {
                        *o = Outcome::Failed(e.clone());
                    }
                }
            }
        }
    }
    if !pruning.is_empty() {
        for (idx, outcome) in send_pipelined(conn, &pruning).await {
            outcomes[idx] = outcome;
        }
    }
    outcomes
}

/// Sends `saves` (by their index in the batch) as one pipelined
/// transaction of their own statements; what became of each.
async fn send_pipelined(
    conn: &mut Pooled<'_>,
    saves: &[(usize, &Save<'_>)],
) -> Vec<(usize, Outcome)> {
    let statements: Vec<(&'static str, Vec<&(dyn ToSql + Sync)>)> =
        saves.iter().map(|(_, save)| save.statement()).collect();
    let refs: Vec<(&'static str, &[&(dyn ToSql + Sync)])> = statements
        .iter()
        .map(|(sql, params)| (*sql, &params[..]))
        .collect();
    let alone = || saves.iter().map(|(i, _)| (*i, Outcome::Alone)).collect();
    let (replies, committed) = match conn.pipelined(&refs).await {
        Ok(done) => done,
        // Not sent (a statement could not be prepared): nothing written.
        Err(_) => return alone(),
    };
    // A statement refused by the server aborted the transaction: nothing
    // was written.
    if replies.iter().any(Result::is_err) {
        return alone();
    }
    saves
        .iter()
        .zip(replies)
        .map(|((i, _), reply)| {
            let outcome = match (reply, &committed) {
                (Ok(Some(_)), Ok(())) => Outcome::Saved,
                (Ok(Some(_)), Err(e)) => Outcome::Failed(e.clone()),
                _ => Outcome::Alone,
            };
            (*i, outcome)
        })
        .collect()
}
