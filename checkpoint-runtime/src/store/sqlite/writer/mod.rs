//! The writer thread: group commit. It takes every queued write request,
//! applies each inside one `BEGIN IMMEDIATE` transaction (see [`txn`]),
//! writes the deferred checkpoint rows ([`deferred`]), commits once and
//! answers. [`cache`] is what it remembers between transactions.

pub(super) mod cache;
pub(super) mod deferred;
pub(super) mod txn;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::{oneshot, watch};

use self::cache::Cache;
use self::txn::TxnCtx;
use super::checkpoints::chain::gc_compact;
use super::checkpoints::Located;
use super::error::{retry_busy, sql_error, Fail, R};
use crate::store::GcReport;
use crate::Error;

/// At most this many write requests share one transaction.
pub(in crate::store::sqlite) const MAX_BATCH: usize = 4096;

/// How long the idle writer looks for a next request before it sleeps ...
pub(in crate::store::sqlite) const SPIN: Duration = Duration::from_micros(100);

/// ... after a batch of at most this many requests.
pub(in crate::store::sqlite) const SPIN_BATCH: usize = 2;

/// A batch of at least this many requests that piled up while the writer
/// slept is committed in two halves. With many concurrent runs, callers and
/// writer otherwise settle into taking turns: every run's request in one
/// batch, the writer idle while the callers prepare the next round and the
/// callers idle while it commits. Two halves make two groups of runs that
/// keep the writer busy with one while the other prepares; a busy writer
/// does not sleep, so the groups stay apart.
pub(in crate::store::sqlite) const SPLIT_AT: usize = 256;

/// Batches of more requests are answered by another thread.
pub(in crate::store::sqlite) const ANSWER_INLINE: usize = 16;

/// How long `gc` retries truncating the WAL while another connection is
/// using it.
pub(in crate::store::sqlite) const GC_TRUNCATE_FOR: Duration = Duration::from_secs(2);

/// `gc` rewrites the file when at least this many pages (and a quarter of
/// the file) are free.
pub(in crate::store::sqlite) const GC_VACUUM_PAGES: i64 = 256;

/// A queued write request.
pub(in crate::store::sqlite) trait Job: Send {
    /// Applies the request; `true` if it succeeded.
    fn apply(&mut self, cx: &mut TxnCtx<'_>) -> bool;
    /// Answers the request once the batch's commit finished with `commit`.
    fn complete(self: Box<Self>, commit: Result<(), Error>);
    /// Whether the request may run while other requests' checkpoint rows are
    /// still deferred (see [`deferred`]): it reads neither `checkpoints` nor
    /// `heads` except through [`TxnCtx`], which flushes when needed.
    fn keeps_deferred(&self) -> bool;
}

pub(in crate::store::sqlite) struct Pending<T, F> {
    pub(in crate::store::sqlite) f: Option<F>,
    pub(in crate::store::sqlite) out: Option<Result<T, Error>>,
    pub(in crate::store::sqlite) tx: oneshot::Sender<Result<T, Error>>,
    pub(in crate::store::sqlite) keeps_deferred: bool,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send,
    F: FnOnce(&mut TxnCtx<'_>) -> R<T> + Send,
{
    fn apply(&mut self, cx: &mut TxnCtx<'_>) -> bool {
        let Some(f) = self.f.take() else {
            return false;
        };
        let out = f(cx).map_err(Fail::into_error);
        let ok = out.is_ok();
        self.out = Some(out);
        ok
    }

    fn complete(self: Box<Self>, commit: Result<(), Error>) {
        let res = match (self.out, commit) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(v)), Ok(())) => Ok(v),
            (_, Err(e)) => Err(e),
            (None, Ok(())) => Err(Error::internal("sqlite: write request was not applied")),
        };
        // The caller may have gone away; nothing to do then.
        let _ = self.tx.send(res);
    }

    fn keeps_deferred(&self) -> bool {
        self.keeps_deferred
    }
}

/// A message to the writer thread.
pub(in crate::store::sqlite) enum Msg {
    /// A write request, applied in the next group commit.
    Job(Box<dyn Job>),
    /// Work that runs between group commits, with the connection to itself
    /// (outside any transaction).
    Alone(Box<dyn FnOnce(&mut Writer) + Send>),
}

pub(in crate::store::sqlite) struct Writer {
    pub(in crate::store::sqlite) conn: Connection,
    pub(in crate::store::sqlite) cache: Cache,
    pub(in crate::store::sqlite) changes: Arc<watch::Sender<u64>>,
    /// Where large batches are answered (see [`Writer::run_batch`]).
    pub(in crate::store::sqlite) answers: mpsc::Sender<Answers>,
    /// The size of the last batch.
    pub(in crate::store::sqlite) last_batch: usize,
    /// The same, for the poller.
    pub(in crate::store::sqlite) batch_size: Arc<AtomicUsize>,
    /// What committed batches wrote (see [`SqliteStore::bytes_written`]).
    ///
    /// [`SqliteStore::bytes_written`]: super::SqliteStore::bytes_written
    pub(in crate::store::sqlite) written: Arc<AtomicU64>,
}

/// A committed (or failed) batch, to answer, and what to drop.
pub(in crate::store::sqlite) type Answers = (Vec<Box<dyn Job>>, Result<(), Error>, Vec<Located>);

/// Answers batches handed over by the writer.
pub(in crate::store::sqlite) fn answer_loop(rx: mpsc::Receiver<Answers>) {
    for (batch, outcome, garbage) in rx {
        for job in batch {
            job.complete(outcome.clone());
        }
        drop(garbage);
    }
}

impl Writer {
    pub(in crate::store::sqlite) fn new(
        conn: Connection,
        changes: Arc<watch::Sender<u64>>,
        answers: mpsc::Sender<Answers>,
    ) -> Writer {
        Writer {
            conn,
            cache: Cache::default(),
            changes,
            answers,
            last_batch: 0,
            batch_size: Arc::new(AtomicUsize::new(0)),
            written: Arc::new(AtomicU64::new(0)),
        }
    }

    pub(in crate::store::sqlite) fn run(mut self, rx: mpsc::Receiver<Msg>) {
        let mut next = rx.recv().ok();
        // Whether the writer slept before `next` arrived (see `SPLIT_AT`).
        let mut slept = true;
        // How many requests the last pile held: the next one is allocated
        // for as many (it is handed over to the answering thread, so its
        // buffer cannot be reused).
        let mut pile = 1;
        while let Some(msg) = next.take() {
            match msg {
                Msg::Alone(f) => f(&mut self),
                Msg::Job(first) => {
                    let mut batch = Vec::with_capacity(pile);
                    batch.push(first);
                    while batch.len() < MAX_BATCH {
                        match rx.try_recv() {
                            Ok(Msg::Job(job)) => batch.push(job),
                            Ok(other) => {
                                next = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    pile = batch.len();
                    if slept && batch.len() >= SPLIT_AT {
                        let second = batch.split_off(batch.len() / 2);
                        self.run_batch(batch);
                        self.run_batch(second);
                    } else {
                        self.run_batch(batch);
                    }
                }
            }
            if next.is_none() {
                (next, slept) = match rx.try_recv() {
                    Ok(msg) => (Some(msg), false),
                    Err(mpsc::TryRecvError::Disconnected) => (None, false),
                    Err(mpsc::TryRecvError::Empty) if self.last_batch <= SPIN_BATCH => {
                        (Self::wait(&rx), true)
                    }
                    Err(mpsc::TryRecvError::Empty) => (rx.recv().ok(), true),
                };
            }
        }
    }

    /// The next message. After a small batch, a caller that just got its
    /// answer often sends its next request within microseconds: the writer
    /// looks for it for a moment before going to sleep, since waking a
    /// sleeping thread takes tens of microseconds on a virtual machine.
    /// (After a large batch, the CPU is better left to the callers.)
    pub(in crate::store::sqlite) fn wait(rx: &mpsc::Receiver<Msg>) -> Option<Msg> {
        let start = Instant::now();
        loop {
            match rx.try_recv() {
                Ok(msg) => return Some(msg),
                Err(mpsc::TryRecvError::Disconnected) => return None,
                Err(mpsc::TryRecvError::Empty) if start.elapsed() < SPIN => {
                    std::hint::spin_loop();
                }
                Err(mpsc::TryRecvError::Empty) => return rx.recv().ok(),
            }
        }
    }

    /// Runs `sql` (a transaction-control statement) from the statement cache.
    pub(in crate::store::sqlite) fn exec(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    /// Starts a write transaction; forgets what the cache knows of runs if
    /// another connection committed since this one last looked.
    pub(in crate::store::sqlite) fn begin(&mut self) -> R<()> {
        retry_busy(|| Ok(self.exec("BEGIN IMMEDIATE")?))?;
        let version: Result<i64, _> = self
            .conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut s| s.query_row([], |r| r.get(0)));
        match version {
            Ok(v) if self.cache.data_version == Some(v) => {}
            Ok(v) => {
                self.cache.reset_runs();
                self.cache.data_version = Some(v);
            }
            Err(e) => {
                let _ = self.exec("ROLLBACK");
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Applies one request of the open batch transaction (in its savepoint,
    /// if it opened one). Returns whether it succeeded and asks for a bump;
    /// an error means the whole batch is lost.
    fn apply(&mut self, job: &mut dyn Job) -> Result<bool, Error> {
        if !job.keeps_deferred() && !self.cache.deferred.is_empty() {
            self.cache
                .deferred
                .flush(&self.conn)
                .map_err(Fail::into_error)?;
        }
        let mark = self.cache.mark();
        let mut cx = TxnCtx {
            conn: &self.conn,
            cache: &mut self.cache,
            bump: false,
            savepoint: false,
            abort: false,
        };
        let ok = job.apply(&mut cx);
        let (job_bump, savepoint, abort) = (cx.bump, cx.savepoint, cx.abort);
        if !ok {
            self.cache.undo_to(mark);
        }
        if abort || self.conn.is_autocommit() {
            // SQLite rolled the whole transaction back (a full disk, an
            // I/O error): nothing of the batch is left.
            return Err(Error::store(
                "sqlite: the transaction was rolled back".to_owned(),
            ));
        }
        let end = match (ok, savepoint) {
            (_, false) => Ok(()),
            (true, true) => self.exec("RELEASE job"),
            (false, true) => self
                .exec("ROLLBACK TO job")
                .and_then(|()| self.exec("RELEASE job")),
        };
        end.map_err(sql_error)?;
        Ok(ok && job_bump)
    }

    /// One transaction for the whole batch; a request that writes more than
    /// one statement gets its own savepoint.
    pub(in crate::store::sqlite) fn run_batch(&mut self, mut batch: Vec<Box<dyn Job>>) {
        if let Err(e) = self.begin() {
            let e = e.into_error();
            for job in batch {
                job.complete(Err(e.clone()));
            }
            return;
        }
        let mut bump = false;
        let mut broken: Option<Error> = None;
        for job in batch.iter_mut() {
            match self.apply(&mut **job) {
                Ok(job_bump) => bump |= job_bump,
                Err(e) => {
                    broken = Some(e);
                    break;
                }
            }
        }
        if broken.is_none() {
            if let Err(e) = self.cache.deferred.flush(&self.conn) {
                broken = Some(e.into_error());
            }
        }
        let outcome = match broken {
            Some(e) => Err(e),
            None => retry_busy(|| Ok(self.exec("COMMIT")?)).map_err(Fail::into_error),
        };
        match &outcome {
            Ok(()) => {
                let written = self.cache.deferred.take_written();
                self.written.fetch_add(written, Ordering::Relaxed);
                self.cache.committed();
            }
            Err(_) => {
                if !self.conn.is_autocommit() {
                    // Nothing more can be done if the rollback fails too; the
                    // connection rolls back when it is next used or closed.
                    let _ = self.exec("ROLLBACK");
                }
                self.cache.rolled_back();
            }
        }
        if outcome.is_ok() && bump {
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
        self.last_batch = batch.len();
        self.batch_size.store(batch.len(), Ordering::Relaxed);
        // Waking a thousand callers takes milliseconds: a large batch is
        // answered by another thread while the next one is applied.
        // The next batch is likely as large as this one: its list is
        // allocated at that size at once (grown from empty, its growth was
        // about a twentieth of the writer's time with 1,000 runs).
        let garbage = std::mem::replace(&mut self.cache.garbage, Vec::with_capacity(batch.len()));
        let batch = if batch.len() > ANSWER_INLINE {
            match self.answers.send((batch, outcome.clone(), garbage)) {
                Ok(()) => Vec::new(),
                Err(mpsc::SendError((batch, _, _))) => batch,
            }
        } else {
            // Before the answers: a caller that reuses the bytes of a
            // record the store let go of (the runtime encodes its next
            // checkpoint into them) finds them free. Dropped after, they
            // were still held when a caller woken at once looked, about
            // one time in three with a 2 MB state, which then cost a
            // fresh buffer (its pages faulted in) per checkpoint.
            drop(garbage);
            batch
        };
        for job in batch {
            job.complete(outcome.clone());
        }
    }

    /// [`Store::gc`]: compaction in one transaction, then free pages back to
    /// the file system and the WAL folded into the main file and truncated.
    pub(in crate::store::sqlite) fn gc(&mut self, path: &Path) -> R<GcReport> {
        let file_size = || {
            let wal = PathBuf::from(format!("{}-wal", path.display()));
            let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            len(path) + len(&wal)
        };
        let mut report = GcReport {
            bytes_before: file_size(),
            ..GcReport::default()
        };
        let (rows, bytes) = retry_busy(|| {
            self.begin()?;
            match gc_compact(&self.conn).and_then(|r| Ok((r, self.exec("COMMIT")?))) {
                Ok((r, ())) => Ok(r),
                Err(e) => {
                    let _ = self.exec("ROLLBACK");
                    Err(e)
                }
            }
        })?;
        self.cache.reset_runs();
        report.checkpoints_compacted = rows;
        report.bytes_compacted = bytes;
        // Pages freed by retention are reused by later checkpoints; the file
        // only shrinks by a rewrite (`VACUUM`), worth it once a good part of
        // it is free.
        let pragma = |name: &str| -> R<i64> {
            Ok(self
                .conn
                .query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))?)
        };
        let (free, pages) = (pragma("freelist_count")?, pragma("page_count")?);
        if free > 0 && pragma("auto_vacuum")? == 2 {
            retry_busy(|| Ok(self.conn.execute_batch("PRAGMA incremental_vacuum")?))?;
        } else if free >= GC_VACUUM_PAGES && free.saturating_mul(4) >= pages {
            retry_busy(|| Ok(self.conn.execute_batch("VACUUM")?))?;
        }
        report.pages_released = u64::try_from(free - pragma("freelist_count")?).unwrap_or(0);
        // The poller may be folding the WAL at this moment, or a reader
        // finishing: tried again for a while before reporting it busy.
        let start = Instant::now();
        report.wal_truncated = loop {
            let busy: i64 = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
            if busy == 0 || start.elapsed() >= GC_TRUNCATE_FOR {
                break busy == 0;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        report.bytes_after = file_size();
        Ok(report)
    }
}
