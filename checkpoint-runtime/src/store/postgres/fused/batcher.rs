//! Writes of one kind that wait at the same time share one statement and
//! its one commit (its one WAL flush): a [`Batcher`]. It implements no
//! rule of its own: it queues the fused writes of the others (checkpoint saves,
//! see [`group_commit`](super::group_commit); the starts of runs,
//! [`create_batch`](super::create_batch); their ends,
//! [`finish`](super::finish)).
//!
//! A write that finds no other of its kind in flight is done at once by
//! its caller, on its own: a lone write waits for nothing (no timer, no
//! hand-over to a task). One that finds [`WRITERS`] in flight, or writes
//! already queued, joins the queue; whenever a writer is free, a task of
//! its own takes everything queued (up to `max` writes) and writes it as
//! one batch. The writer is a task, so a caller that goes away never
//! strands the others' writes.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::oneshot;

use crate::store::postgres::conn::{Pool, Pooled};
use crate::Error;

/// Writes (or batches) of one batcher in flight at most at a time (the
/// rest queue): one is sent while the server flushes the other's commit.
const WRITERS: usize = 2;

/// Writes a batch of jobs: one answer per job, in the batch's order.
pub(in crate::store::postgres) type WriteBatch<J, O> =
    Box<dyn Fn(Vec<J>) -> BoxFuture<'static, Vec<Result<O, Error>>> + Send + Sync>;

/// The group commit of one kind of write (see the module docs): jobs `J`,
/// each answered with an `O`.
pub(in crate::store::postgres) struct Batcher<J, O> {
    inner: Arc<Inner<J, O>>,
}

struct Inner<J, O> {
    pool: Arc<Pool>,
    write: WriteBatch<J, O>,
    max: usize,
    state: Mutex<State<J, O>>,
}

struct State<J, O> {
    queue: Vec<(J, oneshot::Sender<Result<O, Error>>)>,
    /// Lone writes and writer tasks in flight.
    writers: usize,
    /// Jobs handed to the write in batches of more than one (for tests).
    #[cfg(test)]
    batched: u64,
}

/// A caller's place among the writers, given back when dropped (also when
/// the caller goes away); should jobs have queued meanwhile, the place
/// goes to a writer task for them instead.
struct Slot<J: Send + 'static, O: Send + 'static>(Arc<Inner<J, O>>);

impl<J: Send + 'static, O: Send + 'static> Drop for Slot<J, O> {
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

impl<J, O> Inner<J, O> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<J, O>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<J: Send + 'static, O: Send + 'static> Batcher<J, O> {
    /// A batcher that writes batches of up to `max` jobs with `write`, in
    /// tasks on the runtime of `pool`'s connections.
    pub(in crate::store::postgres) fn new(
        pool: Arc<Pool>,
        max: usize,
        write: WriteBatch<J, O>,
    ) -> Self {
        Batcher {
            inner: Arc::new(Inner {
                pool,
                write,
                max: max.max(1),
                state: Mutex::new(State {
                    queue: Vec::new(),
                    writers: 0,
                    #[cfg(test)]
                    batched: 0,
                }),
            }),
        }
    }

    /// Does `job`: at once with `alone` when nothing else is in flight,
    /// else in the next batch (see the module docs).
    pub(in crate::store::postgres) async fn run<F, Fut>(&self, job: J, alone: F) -> Result<O, Error>
    where
        F: FnOnce(J) -> Fut,
        Fut: Future<Output = Result<O, Error>>,
    {
        let queued = {
            let mut state = self.inner.lock();
            if state.writers < WRITERS && state.queue.is_empty() {
                state.writers += 1;
                Err(job)
            } else {
                let (done, answer) = oneshot::channel();
                state.queue.push((job, done));
                // A free place: a writer task for the queue.
                let spawn = state.writers < WRITERS;
                if spawn {
                    state.writers += 1;
                }
                Ok((answer, spawn))
            }
        };
        match queued {
            Err(job) => {
                let _slot = Slot(self.inner.clone());
                alone(job).await
            }
            Ok((answer, spawn)) => {
                if spawn {
                    let inner = self.inner.clone();
                    self.inner.pool.handle().spawn(write_queued(inner));
                }
                answer.await.unwrap_or_else(|_| {
                    Err(Error::store(
                        "postgres: the batch's writer ended before it answered",
                    ))
                })
            }
        }
    }
}

impl<J, O> Batcher<J, O> {
    /// Jobs handed to the write in batches of more than one so far.
    #[cfg(test)]
    pub(in crate::store::postgres) fn batched(&self) -> u64 {
        self.inner.lock().batched
    }
}

/// Writes `batch` on one connection: first those of its jobs that
/// `together` writes as one (it returns their keys, or an error when
/// whether it committed is unknown: then every job answers with it), then
/// each other one `alone`, in the batch's order. The jobs written together
/// answer `written()`, and have the store's notification sent.
pub(in crate::store::postgres) async fn together_then_alone<J, O>(
    pool: &Pool,
    batch: &[J],
    key: impl Fn(&J) -> &str,
    written: impl Fn() -> O,
    together: impl AsyncFnOnce(&mut Pooled<'_>, &[J]) -> Result<HashSet<String>, Error>,
    alone: impl AsyncFn(&mut Pooled<'_>, &J) -> Result<O, Error>,
) -> Vec<Result<O, Error>> {
    let mut conn = match pool.get().await {
        Ok(conn) => conn,
        Err(e) => return batch.iter().map(|_| Err(e.clone())).collect(),
    };
    let done = match together(&mut conn, batch).await {
        Ok(done) => done,
        Err(e) => return batch.iter().map(|_| Err(e.clone())).collect(),
    };
    if !done.is_empty() {
        pool.notify_committed();
    }
    let mut answers = Vec::with_capacity(batch.len());
    for job in batch {
        answers.push(if done.contains(key(job)) {
            Ok(written())
        } else {
            alone(&mut conn, job).await
        });
    }
    answers
}

/// The jobs of `batch` whose key no other job of it has, in order: those a
/// statement can write as one row each (the others go on their own).
pub(in crate::store::postgres) fn held_once<J>(batch: &[J], key: impl Fn(&J) -> &str) -> Vec<&J> {
    let mut count: HashMap<&str, usize> = HashMap::with_capacity(batch.len());
    for job in batch {
        *count.entry(key(job)).or_default() += 1;
    }
    batch
        .iter()
        .filter(|j| count.get(key(j)) == Some(&1))
        .collect()
}

/// A writer task, holding a place among the writers: writes what is
/// queued, batch after batch, until the queue is empty; then gives its
/// place back.
async fn write_queued<J: Send + 'static, O: Send + 'static>(inner: Arc<Inner<J, O>>) {
    loop {
        let (jobs, answers): (Vec<J>, Vec<_>) = {
            let mut state = inner.lock();
            if state.queue.is_empty() {
                state.writers -= 1;
                return;
            }
            let n = state.queue.len().min(inner.max);
            #[cfg(test)]
            if n > 1 {
                state.batched += n as u64;
            }
            state.queue.drain(..n).unzip()
        };
        let n = answers.len();
        let mut results = (inner.write)(jobs).await.into_iter();
        for done in answers {
            let result = results.next().unwrap_or_else(|| {
                Err(Error::internal(format!(
                    "postgres: a batch of {n} writes gave fewer answers"
                )))
            });
            let _ = done.send(result);
        }
    }
}
