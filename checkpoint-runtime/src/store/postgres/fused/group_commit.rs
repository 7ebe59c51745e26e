//! Group commit of checkpoint saves (the rule: `rules::save_checkpoint`,
//! written by [`save`](super::save) and [`save_batch`](super::save_batch)):
//! the saves of the runs of one store
//! instance that wait at the same time share one statement (or one
//! transaction) and its one WAL flush, through a [`Batcher`] (see there
//! how saves queue: a lone save is done at once by its caller, as one
//! statement, [`save::statement`](super::save); the others wait for a
//! writer task, up to [`MAX_BATCH`] at a time).
//!
//! A batch sends the saves without retention as one statement in
//! autocommit ([`save_batch::BATCH`](super::save_batch)), and those with
//! retention as one pipelined transaction of their own statements
//! ([`Pooled::pipelined`]: `BEGIN`, the statements, `COMMIT` in one
//! flight). Either way a transaction is open only while the server works
//! through it (the connection is taken before, nothing of ours is awaited
//! inside).
//!
//! Each save is fenced by its own run's lease epoch, as a lone save is, and
//! answers for its own run: a save the statement refuses (lease lost, wrong
//! seq, a run gone, a row it leaves to the fenced transaction) changes
//! nothing and is done again on its own after the batch committed
//! ([`locked::save_locked`](crate::store::postgres::locked::save_locked)), which gives exactly
//! the error a lone save gives. A statement that fails (e.g. a value the
//! server refuses) writes nothing of its saves, which are then done on
//! their own, so one bad save fails alone. Both lock the runs' rows in the
//! order of the run ids, so two batches (of two workers) never wait for
//! each other in a cycle.

use std::sync::Arc;
#[cfg(test)]
use std::sync::Mutex;

use super::batcher::Batcher;
use super::save::{save_in_one, saved_run, Save};
use super::save_batch::{Columns, BATCH};
use crate::store::postgres::conn::{sqlstate_class, Pool, Pooled};
use crate::store::postgres::locked::save_locked;
use crate::store::postgres::tables::checkpoints::segments::RowPlan;
use crate::store::{CheckpointRecord, Lease};
use crate::Error;
use tokio_postgres::types::ToSql;

/// Saves in one batch at most.
const MAX_BATCH: usize = 512;

/// The group commit of one store (see the module docs).
pub(in crate::store::postgres) struct GroupCommit {
    pool: Arc<Pool>,
    batcher: Batcher<Queued, bool>,
    /// Batches of more than one save committed, their saves, and those of
    /// their saves that appended fields and were written by the batch
    /// statement (no retention) (for tests).
    #[cfg(test)]
    batches: Arc<Mutex<(u64, u64, u64)>>,
}

/// A save, as the batcher queues it.
struct Queued {
    lease: Lease,
    cp: Arc<CheckpointRecord>,
    keep: Option<usize>,
    plan: Option<Arc<RowPlan>>,
}

impl GroupCommit {
    pub(in crate::store::postgres) fn new(pool: Arc<Pool>) -> GroupCommit {
        #[cfg(test)]
        let batches = Arc::new(Mutex::new((0, 0, 0)));
        let write = {
            let pool = pool.clone();
            #[cfg(test)]
            let batches = batches.clone();
            Box::new(move |batch: Vec<Queued>| {
                let pool = pool.clone();
                #[cfg(test)]
                let batches = batches.clone();
                Box::pin(async move {
                    let (answers, _counts) = write_batch(&pool, batch).await;
                    #[cfg(test)]
                    if let Some((saved, appended)) = _counts {
                        let mut b = batches.lock().unwrap_or_else(|e| e.into_inner());
                        b.0 += 1;
                        b.1 += saved;
                        b.2 += appended;
                    }
                    answers
                }) as futures::future::BoxFuture<'static, _>
            })
        };
        GroupCommit {
            batcher: Batcher::new(pool.clone(), MAX_BATCH, write),
            pool,
            #[cfg(test)]
            batches,
        }
    }

    /// Saves `cp` under `lease` (see the module docs), stored as `plan`
    /// says or whole: the result of `PostgresStore::save_checkpoint`, and
    /// whether it was stored as planned.
    pub(in crate::store::postgres) async fn save(
        &self,
        lease: &Lease,
        cp: Arc<CheckpointRecord>,
        keep: Option<usize>,
        plan: Option<Arc<RowPlan>>,
    ) -> Result<bool, Error> {
        let queued = Queued {
            lease: lease.clone(),
            cp,
            keep,
            plan,
        };
        let pool = &self.pool;
        self.batcher
            .run(queued, |q| async move {
                save_alone(pool, &q.lease, &q.cp, q.keep, q.plan.as_deref()).await
            })
            .await
    }

    /// Batches of more than one save committed so far, their saves, and
    /// their saves that appended fields in the batch statement.
    #[cfg(test)]
    pub(in crate::store::postgres) fn batches(&self) -> (u64, u64, u64) {
        *self.batches.lock().unwrap_or_else(|e| e.into_inner())
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

/// Writes `batch` (see the module docs): an answer for each of its saves,
/// and, when it wrote more than one in a batch, how many it wrote so and
/// how many of those appended fields (for tests).
async fn write_batch(
    pool: &Pool,
    batch: Vec<Queued>,
) -> (Vec<Result<bool, Error>>, Option<(u64, u64)>) {
    if let [q] = &batch[..] {
        let result = save_alone(pool, &q.lease, &q.cp, q.keep, q.plan.as_deref()).await;
        return (vec![result], None);
    }
    // Locks the runs in the order of their ids; answers in the batch's.
    let mut tagged: Vec<(usize, Queued)> = batch.into_iter().enumerate().collect();
    tagged.sort_by(|(_, a), (_, b)| a.cp.run.cmp(&b.cp.run));
    let (order, batch): (Vec<usize>, Vec<Queued>) = tagged.into_iter().unzip();
    let mut conn = match pool.get().await {
        Ok(conn) => conn,
        Err(e) => return (batch.iter().map(|_| Err(e.clone())).collect(), None),
    };
    let outcome = send_batch(&mut conn, &batch).await;
    let saved = outcome
        .iter()
        .filter(|o| matches!(o, Outcome::Saved))
        .count() as u64;
    let appended = outcome
        .iter()
        .zip(&batch)
        .filter(|(o, q)| matches!(o, Outcome::Saved) && q.keep.is_none() && q.plan.is_some())
        .count() as u64;
    let mut answers = Vec::with_capacity(batch.len());
    for ((i, q), outcome) in order.into_iter().zip(&batch).zip(outcome) {
        let answer = match outcome {
            Outcome::Saved => Ok(q.plan.is_some()),
            Outcome::Failed(e) => Err(e),
            Outcome::Alone => {
                // Refused by its statement, or the batch was not written:
                // the save on its own tells why, or saves it.
                save_alone_on(&mut conn, &q.lease, &q.cp, q.keep, q.plan.as_deref()).await
            }
        };
        answers.push((i, answer));
    }
    answers.sort_by_key(|(i, _)| *i);
    let answers = answers.into_iter().map(|(_, a)| a).collect();
    (answers, (saved > 1).then_some((saved, appended)))
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
