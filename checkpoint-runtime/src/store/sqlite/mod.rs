//! The SQLite backend: one file, durable, shareable by several processes on
//! one machine.
//!
//! # Layout
//!
//! - **Connections.** One writer connection lives on a dedicated thread fed by
//!   a channel; two reader connections live on their own threads. A poller
//!   thread watches `PRAGMA data_version` to notice commits made by other
//!   processes and, while the load is light, copies committed WAL frames into
//!   the main file in the background (so the WAL starts over and commits
//!   overwrite it instead of growing the file). No SQLite call ever runs on an
//!   async executor thread. The file uses 8 KiB pages.
//! - **A bounded WAL.** Under any load the writer folds the WAL into the file
//!   once it holds `WAL_CHECKPOINT_PAGES` (2 MiB), and the next transaction
//!   starts it over: after a crash, the next open recovers at most that much
//!   (SQLite reads every frame written since the WAL last started over), so
//!   resuming does not depend on how long the process ran.
//! - **Group commit.** The writer takes every queued write request, opens one
//!   `BEGIN IMMEDIATE` transaction, applies each request (inside its own
//!   `SAVEPOINT` when it writes more than one statement, so that a failing
//!   request is rolled back alone), commits once with `synchronous=FULL`, and
//!   only then answers the requests (a large batch on a helper thread, while
//!   the writer goes on with the next one). The rows and head pointers of
//!   plain checkpoints are written together by multi-row statements at the
//!   end of the batch (see `deferred`). Concurrent runs therefore share
//!   one fsync while each call still returns only once durable. After a small
//!   batch the writer polls its queue for a moment before sleeping: the next
//!   request of a sequential caller usually comes within microseconds. A
//!   large pile of requests found on waking is committed in two halves, so
//!   that many concurrent runs form two groups that take turns (one prepares
//!   its next checkpoints while the other's commit runs) instead of one
//!   group that waits for the writer and a writer that waits for the group.
//! - **Cross-process coordination** goes through the database only: claims,
//!   leases and fencing epochs are read and written inside the writer's
//!   `IMMEDIATE` transaction, so two processes never both claim a run. The
//!   writer keeps what it knows of each run (state, lease, epoch, latest
//!   checkpoint) in memory, and drops all of it whenever `PRAGMA
//!   data_version` shows that another connection committed since its own
//!   last transaction.
//! - **A checkpoint is one row**, appended to `checkpoints` under an
//!   increasing integer key, so the checkpoints of all the runs in one group
//!   commit share the table's last pages. The row holds the bytes of the
//!   fields that changed since the run's previous checkpoint and, per field, a
//!   reference `(row, offset, len)` to where its bytes are: this row, or an
//!   earlier checkpoint row of the same run. The site, the field names and
//!   types and their schema keys are interned in `shapes`. Each row points at
//!   the run's previous one (`prev`), and a small `heads` row per run at its
//!   latest: a plain checkpoint writes its row and rewrites the 20-byte head,
//!   nothing else (no per-run index entry, whose page would differ for every
//!   run of a group commit; only every 64th seq goes into an index, so any
//!   checkpoint is at most 63 steps down the chain from an indexed one or the
//!   latest). The run row is only rewritten when the state, the attempt
//!   counter or the wake value changes; the run's latest seq and update time
//!   are read from its latest checkpoint. Resuming reads the head, one row
//!   and the rows it references: its cost does not depend on the history.
//! - **Fields that grow by appending** (a conversation history, a list of
//!   results) are stored as what they appended (see `checkpoints::delta`):
//!   a short header inline, the previous version's body where it already
//!   is, and the tail as a row of `segments`; every 64 tails are folded
//!   into one segment (and every 1,024 of those into one of the next
//!   level), so that a version reads a bounded number of segments and the
//!   bytes are stored about once. Storage and bytes written grow with what
//!   was appended, not with the field's size times its versions, and every
//!   version still loads.
//! - **History.** `CheckpointSaved` is not stored as an event: the checkpoint
//!   rows are the events. Other events go to `history`. Both tables draw
//!   their keys from one counter, so a run's history is the two merged by key.
//! - **Retention.** Each checkpoint row records the oldest sequence number
//!   kept (`floor`); older rows are hidden. A hidden row whose bytes no kept
//!   checkpoint uses is cut down to a stub (sequence number, site, time: its
//!   history event), in steps of a quarter of `keep`; one whose bytes are
//!   still used keeps them (only the oldest kept checkpoint needs to be
//!   consulted: references are copied from one checkpoint to the next, so any
//!   older row a kept checkpoint uses is used by the oldest kept one too).
//!   Freed pages are reused by later checkpoints; [`gc`](Store::gc) also
//!   shrinks such rows to the bytes still used and, when a good part of the
//!   file is free, rewrites it.
//! - **Code**, dependencies pointing down: `error` (SQLite's errors, kept for
//!   busy/locked retries) and `migrations` at the bottom; `runs` (the `runs`
//!   and `signals` tables); `checkpoints/{refs,delta,rows,chain}` (what a
//!   row references, fields stored by appending, a row read back into a
//!   record, a run's chain of rows and retention); `writer` (the group-commit thread, its `cache` and the
//!   per-request transaction context `txn::TxnCtx`, the `deferred` rows);
//!   `write` (the single-row writes of a transition: a run's row, an event,
//!   a signal) and `children` (queries: a run's children, who joins whom);
//!   `apply` (the one place a transition is stored: the change a rule of
//!   `store::rules` returned, and what a run's end changes elsewhere);
//!   `ops` and `claim` (each write operation, inside the batch: load the
//!   records, call one rule, `apply` its change; the claim's candidates
//!   are chosen in SQL), `reads` (reader threads) and `poller`; this file
//!   (`SqliteStore`) on top.
//! - **Schema versions** live in `PRAGMA user_version`; `MIGRATIONS` (in
//!   `migrations`) lists one function per version, applied in order on open.

mod apply;
mod checkpoints;
mod children;
mod claim;
mod error;
mod existing;
mod migrations;
mod ops;
mod poller;
mod queues;
mod reads;
mod runs;
mod schedules;
mod signal_sites;
mod streams;
mod write;
mod writer;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::{oneshot, watch};

use self::checkpoints::ahead::{Ahead, Recent};
use self::checkpoints::seal::PartialSeal;
use self::claim::op_claim;
use self::error::{retry_busy, Fail, R};
use self::ops::*;
use self::poller::{data_version, poller_loop};
use self::reads::*;
use self::runs::fetch_run;
use self::writer::txn::TxnCtx;
use self::writer::{answer_loop, Answers, Job, Msg, Pending, Writer};
use super::{
    CheckpointRecord, ClaimRequest, ClaimResult, Created, GcReport, Lease, NewRun, Outcome,
    Release, Renewed, RunRecord, SignalRecord, SignalSite, Store, Wakeup, WorkerHold,
};
use crate::history::{Event, HistoryEntry};
use crate::status::{RunFilter, StatusKind};
use crate::Error;

pub use self::migrations::SCHEMA_VERSION;

/// How long one SQLite call waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Reader threads (each with its own connection).
const READERS: usize = 2;

/// A [`Store`] in one SQLite file (rusqlite, bundled SQLite).
///
/// The file is opened in WAL mode with `synchronous=FULL`: every method
/// returns only once its transaction is durable. Several processes (and
/// several `SqliteStore`s in one process) may open the same file; they
/// coordinate through the database alone (leases, fencing epochs and claims in
/// `IMMEDIATE` transactions). Concurrent writes share commits (group commit),
/// unchanged checkpoint fields are stored once, and a busy or locked database
/// is retried with backoff.
///
/// ```no_run
/// use std::sync::Arc;
/// use checkpoint_runtime::{store::sqlite::SqliteStore, Runtime};
///
/// let store = Arc::new(SqliteStore::open("runs.db")?);
/// let rt = Runtime::builder().worker_id("worker-1").store(store).in_memory();
/// # let _ = rt;
/// # Ok::<(), checkpoint_runtime::Error>(())
/// ```
pub struct SqliteStore {
    path: PathBuf,
    writer: Option<mpsc::Sender<Msg>>,
    readers: Option<mpsc::Sender<ReadJob>>,
    stop_poller: Option<mpsc::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
    changes: Arc<watch::Sender<u64>>,
    /// Whether the poller folds the WAL into the main file (see
    /// [`poller_loop`]).
    fold: Arc<AtomicBool>,
    /// See [`SqliteStore::bytes_written`].
    written: Arc<AtomicU64>,
    /// The latest record with a large field saved per run (see
    /// `checkpoints::ahead`).
    recent: Recent,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn connect(path: &Path) -> R<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    Ok(conn)
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, Error> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .map_err(|e| Error::store(format!("sqlite: cannot start the {name} thread: {e}")))
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, migrating its schema
    /// forward to [`SCHEMA_VERSION`].
    ///
    /// Fails with [`Error::Store`] if the file cannot be opened, is not a
    /// database, or was written by a newer version of this crate. When the
    /// file or its directory is read-only (the store writes even to read:
    /// its write-ahead log sits beside the file), or the directory is
    /// missing, the message says so, names the path and what to do.
    ///
    /// ```no_run
    /// let store = checkpoint_runtime::store::sqlite::SqliteStore::open("runs.db")?;
    /// # let _ = store;
    /// # Ok::<(), checkpoint_runtime::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, Error> {
        let path = path.as_ref().to_path_buf();
        let context = |e: Fail| error::opening_error(&path, e);
        let mut conn = connect(&path).map_err(context)?;
        error::read_write(&conn).map_err(context)?;
        migrations::prepare_writer(&mut conn).map_err(context)?;
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let c = connect(&path).map_err(context)?;
            c.pragma_update(None, "query_only", true)
                .map_err(|e| context(e.into()))?;
            readers.push(c);
        }
        let poll_conn = connect(&path).map_err(context)?;
        // The baseline is taken before `open` returns: any later commit is seen.
        let baseline = data_version(&poll_conn);

        let changes = Arc::new(watch::channel(0u64).0);
        let mut store = SqliteStore {
            path: path.clone(),
            writer: None,
            readers: None,
            stop_poller: None,
            threads: Vec::new(),
            changes: changes.clone(),
            fold: Arc::new(AtomicBool::new(true)),
            written: Arc::new(AtomicU64::new(0)),
            recent: Recent::default(),
        };
        // From here on, dropping `store` on an error stops the threads
        // started so far.
        let (wtx, wrx) = mpsc::channel::<Msg>();
        let (atx, arx) = mpsc::channel::<Answers>();
        store
            .threads
            .push(spawn("checkpoint-sqlite-answers", move || {
                answer_loop(arx)
            })?);
        let writer = Writer::new(conn, changes.clone(), atx);
        let batch = writer.batch_size.clone();
        store.written = writer.written.clone();
        store
            .threads
            .push(spawn("checkpoint-sqlite-writer", move || writer.run(wrx))?);
        store.writer = Some(wtx);

        let (rtx, rrx) = mpsc::channel::<ReadJob>();
        let rrx = Arc::new(Mutex::new(rrx));
        store.readers = Some(rtx);
        for c in readers {
            let rrx = rrx.clone();
            store
                .threads
                .push(spawn("checkpoint-sqlite-reader", move || {
                    reader_loop(c, rrx)
                })?);
        }

        let (stx, srx) = mpsc::channel::<()>();
        store.stop_poller = Some(stx);
        let fold = store.fold.clone();
        store
            .threads
            .push(spawn("checkpoint-sqlite-poller", move || {
                poller_loop(poll_conn, changes, srx, baseline, fold, batch)
            })?);
        Ok(store)
    }

    /// Opens the store at `path` only if it already is one, of this build's
    /// schema version: never creates the file or its tables, never changes
    /// its schema. For tools that read or operate runs (the `checkpoint`
    /// command line uses it): a mistyped path or an empty file is an
    /// [`Error::Store`] saying it is "not a checkpoint store",
    /// and a store of an older version is refused rather than upgraded
    /// under the workers using it (a worker of this build upgrades it with
    /// [`open`](SqliteStore::open)).
    ///
    /// ```
    /// use checkpoint_runtime::{store::sqlite::SqliteStore, Error};
    /// let path = std::env::temp_dir().join(format!("checkpoint-doc-existing-{}.db", std::process::id()));
    /// let err = SqliteStore::open_existing(&path).unwrap_err();
    /// assert!(err.to_string().contains("not a checkpoint store"), "{err}");
    /// assert!(!path.exists()); // nothing was created
    /// drop(SqliteStore::open(&path)?); // a worker creates it
    /// let store = SqliteStore::open_existing(&path)?;
    /// # drop(store);
    /// # for ext in ["", "-wal", "-shm"] {
    /// #     let _ = std::fs::remove_file(format!("{}{ext}", path.to_string_lossy()));
    /// # }
    /// # Ok::<(), Error>(())
    /// ```
    pub fn open_existing(path: impl AsRef<Path>) -> Result<SqliteStore, Error> {
        existing::check_existing(path.as_ref(), BUSY_TIMEOUT)?;
        SqliteStore::open(path)
    }

    /// The path the store was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of checkpoints this store has written since it was
    /// opened, in committed transactions: the blobs and texts of their rows
    /// (the fields' bytes each row stores itself, the references, loop
    /// positions, seals and suspensions) and the segments of fields stored
    /// by appending. What SQLite makes of them on disk (pages, the WAL and
    /// its copy into the file) is more; other writes (runs, signals,
    /// history events, retention) are not counted.
    ///
    /// ```no_run
    /// let store = checkpoint_runtime::store::sqlite::SqliteStore::open("runs.db")?;
    /// assert_eq!(store.bytes_written(), 0);
    /// # Ok::<(), checkpoint_runtime::Error>(())
    /// ```
    pub fn bytes_written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Queues a write request; it is applied in the next group commit.
    fn write<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, Error>>
    where
        T: Send + 'static,
        F: FnOnce(&mut TxnCtx<'_>) -> R<T> + Send + 'static,
    {
        self.queue(false, f)
    }

    /// Queues a write request that leaves its checkpoint row to be written
    /// with the others of the batch (see [`deferred`]).
    fn write_deferred<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, Error>>
    where
        T: Send + 'static,
        F: FnOnce(&mut TxnCtx<'_>) -> R<T> + Send + 'static,
    {
        self.queue(true, f)
    }

    fn queue<T, F>(&self, keeps_deferred: bool, f: F) -> BoxFuture<'static, Result<T, Error>>
    where
        T: Send + 'static,
        F: FnOnce(&mut TxnCtx<'_>) -> R<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Pending {
            f: Some(f),
            out: None,
            tx,
            keeps_deferred,
        });
        let sent = self
            .writer
            .as_ref()
            .is_some_and(|w| w.send(Msg::Job(job)).is_ok());
        Box::pin(async move {
            if !sent {
                return Err(stopped());
            }
            rx.await.unwrap_or_else(|_| Err(stopped()))
        })
    }

    /// Runs `f` on the writer thread between two group commits, outside any
    /// transaction.
    fn alone<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, Error>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Writer) -> R<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let msg = Msg::Alone(Box::new(move |w: &mut Writer| {
            let _ = tx.send(f(w).map_err(Fail::into_error));
        }));
        let sent = self.writer.as_ref().is_some_and(|w| w.send(msg).is_ok());
        Box::pin(async move {
            if !sent {
                return Err(stopped());
            }
            rx.await.unwrap_or_else(|_| Err(stopped()))
        })
    }

    /// Runs a read in one (deferred) transaction on a reader connection.
    fn read<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, Error>>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> R<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: ReadJob = Box::new(move |conn: &mut Connection| {
            let res = retry_busy(|| {
                let txn = conn.transaction()?;
                let v = f(&txn)?;
                txn.commit()?;
                Ok(v)
            });
            let _ = tx.send(res.map_err(Fail::into_error));
        });
        let sent = self.readers.as_ref().is_some_and(|r| r.send(job).is_ok());
        Box::pin(async move {
            if !sent {
                return Err(stopped());
            }
            rx.await.unwrap_or_else(|_| Err(stopped()))
        })
    }
}

fn stopped() -> Error {
    Error::store("sqlite: the store's worker threads have stopped".to_owned())
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Closing the channels lets each thread finish what is queued and exit.
        self.writer.take();
        self.readers.take();
        self.stop_poller.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Store for SqliteStore {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn create_run(&self, run: NewRun) -> BoxFuture<'_, Result<Created, Error>> {
        self.write(move |cx| op_create(cx, run))
    }

    fn load_run<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<RunRecord>, Error>> {
        let id = id.to_owned();
        self.read(move |c| Ok(fetch_run(c, &id)?.map(|(_, rec)| rec)))
    }

    fn list_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, Error>> {
        let filter = filter.clone();
        self.read(move |c| read_list_runs(c, &filter))
    }

    fn count_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<BTreeMap<StatusKind, u64>, Error>> {
        let filter = filter.clone();
        self.read(move |c| read_count_runs(c, &filter, SystemTime::now()))
    }

    fn parked_runs(&self) -> BoxFuture<'_, Result<Vec<RunRecord>, Error>> {
        self.read(read_parked)
    }

    fn claim<'a>(&'a self, req: &'a ClaimRequest) -> BoxFuture<'a, Result<ClaimResult, Error>> {
        let req = req.clone();
        self.write(move |cx| op_claim(cx, req))
    }

    fn renew<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Renewed, Error>> {
        let (id, lease) = (id.to_owned(), lease.clone());
        self.write(move |cx| op_renew(cx, &id, &lease, ttl))
    }

    fn release<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        how: Release,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let (id, lease) = (id.to_owned(), lease.clone());
        self.write(move |cx| op_release(cx, &id, &lease, how))
    }

    fn save_checkpoint<'a>(
        &'a self,
        lease: &'a Lease,
        checkpoint: Arc<CheckpointRecord>,
        keep: Option<usize>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let lease = lease.clone();
        // Sealed here, on the caller's thread, but for large fields (see
        // `checkpoints::seal`): the writer thread is what every write of
        // the store waits for.
        let seal = PartialSeal::of(&checkpoint);
        let Some(prev) = self.recent.note(&checkpoint) else {
            return self
                .write_deferred(move |cx| op_save(cx, &lease, checkpoint, (seal, None), keep));
        };
        // Sent first: the large fields are compared with the previous
        // version's, half here while the writer wakes up and half by the
        // writer (see `checkpoints::ahead`).
        let (ahead, filler) = Ahead::new();
        let cp = checkpoint.clone();
        let saved = self
            .write_deferred(move |cx| op_save(cx, &lease, checkpoint, (seal, Some(ahead)), keep));
        filler.fill(&cp, &prev);
        saved
    }

    fn take_signal<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<SignalRecord>, Error>> {
        let (id, lease, name) = (id.to_owned(), lease.clone(), name.to_owned());
        self.write(move |cx| op_take_signal(cx, &id, &lease, &name))
    }

    fn time_out<'a>(&'a self, id: &'a str, lease: &'a Lease) -> BoxFuture<'a, Result<(), Error>> {
        let (id, lease) = (id.to_owned(), lease.clone());
        self.write(move |cx| op_time_out(cx, &id, &lease))
    }

    fn reject_signal<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        reason: String,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let (id, lease) = (id.to_owned(), lease.clone());
        self.write(move |cx| op_reject(cx, &id, &lease, reason))
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        outcome: Outcome,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let (id, lease) = (id.to_owned(), lease.clone());
        self.write(move |cx| op_finish(cx, &id, &lease, outcome))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        let id = id.to_owned();
        self.write(move |cx| op_cancel(cx, &id))
    }

    fn retry<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        let id = id.to_owned();
        self.write(move |cx| op_retry(cx, &id))
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a str,
        req: crate::store::CancelRequest,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let id = id.to_owned();
        self.write(move |cx| ops::op_request_cancel(cx, &id, req.clone()))
    }

    fn put_signal<'a>(
        &'a self,
        id: &'a str,
        name: &'a str,
        payload: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let (id, name) = (id.to_owned(), name.to_owned());
        self.write(move |cx| op_put_signal(cx, &id, &name, &payload))
    }

    fn pending_signals<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SignalRecord>, Error>> {
        let id = id.to_owned();
        self.read(move |c| read_signals(c, &id))
    }

    fn latest_checkpoint<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<CheckpointRecord>>, Error>> {
        let id = id.to_owned();
        self.read(move |c| read_latest(c, &id))
    }

    fn checkpoint<'a>(
        &'a self,
        id: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<Option<Arc<CheckpointRecord>>, Error>> {
        let id = id.to_owned();
        self.read(move |c| read_checkpoint(c, &id, seq))
    }

    fn list_checkpoints<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Arc<CheckpointRecord>>, Error>> {
        let id = id.to_owned();
        self.read(move |c| read_checkpoints(c, &id))
    }

    fn append_event<'a>(&'a self, id: &'a str, event: Event) -> BoxFuture<'a, Result<(), Error>> {
        let id = id.to_owned();
        self.write(move |cx| op_append_event(cx, &id, &event))
    }

    fn history<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<HistoryEntry>, Error>> {
        let id = id.to_owned();
        self.read(move |c| read_history(c, &id))
    }

    fn fork<'a>(
        &'a self,
        from: &'a str,
        seq: u64,
        new_id: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let (from, new_id) = (from.to_owned(), new_id.to_owned());
        self.write(move |cx| op_fork(cx, &from, seq, &new_id))
    }

    fn next_wakeup(&self, after: SystemTime) -> BoxFuture<'_, Result<Wakeup, Error>> {
        self.read(move |conn| read_next_wakeup(conn, after))
    }

    fn put_schemas(&self, schemas: Vec<(String, String)>) -> BoxFuture<'_, Result<(), Error>> {
        self.write(move |cx| {
            if schemas.len() > 1 {
                cx.begin()?;
            }
            for (key, body) in &schemas {
                cx.conn
                    .prepare_cached("INSERT OR IGNORE INTO schemas (key, body) VALUES (?1, ?2)")?
                    .execute(params![key, body])?;
            }
            Ok(())
        })
    }

    fn put_signal_sites(
        &self,
        workflow: &str,
        sites: Vec<SignalSite>,
    ) -> BoxFuture<'_, Result<(), Error>> {
        let workflow = workflow.to_owned();
        self.write(move |cx| signal_sites::insert(cx, &workflow, &sites))
    }

    fn signal_sites<'a>(
        &'a self,
        workflow: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SignalSite>, Error>> {
        let workflow = workflow.to_owned();
        self.read(move |c| signal_sites::read(c, &workflow))
    }

    fn put_schedule(
        &self,
        rec: crate::store::ScheduleRecord,
    ) -> BoxFuture<'_, Result<crate::store::ScheduleRecord, Error>> {
        self.write(move |cx| schedules::put(cx, &rec))
    }

    fn schedules(&self) -> BoxFuture<'_, Result<Vec<crate::store::ScheduleRecord>, Error>> {
        self.read(schedules::list)
    }

    fn pause_schedule<'a>(
        &'a self,
        name: &'a str,
        paused: bool,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        let name = name.to_owned();
        self.write(move |cx| schedules::set_paused(cx, &name, paused))
    }

    fn delete_schedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        let name = name.to_owned();
        self.write(move |cx| schedules::delete(cx, &name))
    }

    fn advance_schedule<'a>(
        &'a self,
        name: &'a str,
        from: Option<SystemTime>,
        to: SystemTime,
        run: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        let (name, run) = (name.to_owned(), run.map(str::to_owned));
        let (from, to) = (from.map(crate::store::sql::ts), crate::store::sql::ts(to));
        self.write(move |cx| schedules::advance(cx, &name, from, to, run.as_deref()))
    }

    fn schemas<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<HashMap<String, String>, Error>> {
        let keys = keys.to_vec();
        self.read(move |c| {
            let mut found = HashMap::new();
            let mut stmt = c.prepare_cached("SELECT body FROM schemas WHERE key = ?1")?;
            for key in &keys {
                if let Some(body) = stmt
                    .query_row([key], |r| r.get::<_, String>(0))
                    .optional()?
                {
                    found.insert(key.clone(), body);
                }
            }
            Ok(found)
        })
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Finishes pruning every run, shrinks hidden checkpoint rows that kept
    /// checkpoints still use to the bytes they use, rewrites the file
    /// (`VACUUM`) when at least a quarter of it (and 1 MiB) is free, and folds
    /// the WAL into the main file, truncating it (`PRAGMA
    /// wal_checkpoint(TRUNCATE)`; skipped while another connection reads).
    /// Writes queued meanwhile wait; the rewrite needs free disk space for a
    /// copy of the file.
    fn gc(&self) -> BoxFuture<'_, Result<GcReport, Error>> {
        let path = self.path.clone();
        self.alone(move |w| w.gc(&path))
    }

    /// A lock file per worker id next to the database
    /// (`<file>.worker-<hex of the id>.lock`), an SQLite file of its own
    /// held in an exclusive transaction: the operating system drops the
    /// lock with the process, however it ends.
    fn hold_worker<'a>(
        &'a self,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Option<WorkerHold>, Error>> {
        let hex: String = worker.bytes().map(|b| format!("{b:02x}")).collect();
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".worker-{hex}.lock"));
        let path = PathBuf::from(name);
        Box::pin(async move {
            let task = tokio::task::spawn_blocking(move || hold_lock_file(&path));
            task.await
                .map_err(|e| Error::internal(format!("sqlite worker lock task: {e}")))?
        })
    }

    fn write_stream<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        write: super::StreamWrite,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let (id, lease) = (id.to_owned(), lease.clone());
        self.write(move |cx| streams::write(cx, &id, &lease, write))
    }

    fn stream_items<'a>(
        &'a self,
        id: &'a str,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<super::StreamItem>, Error>> {
        let id = id.to_owned();
        self.read(move |c| streams::items(c, &id, from, limit))
    }

    fn discard_stream<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        from_seq: u64,
    ) -> BoxFuture<'a, Result<u64, Error>> {
        let (id, lease) = (id.to_owned(), lease.clone());
        self.write(move |cx| streams::discard(cx, &id, &lease, from_seq))
    }

    fn progress<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, Error>> {
        let id = id.to_owned();
        self.read(move |c| streams::progress(c, &id))
    }
}

/// The delta encoding's pure step, for `benches/delta.rs` (not an API):
/// how many bytes `new` appends to `old` when it is `old` with a new short
/// header and bytes after it (see `checkpoints::delta`), `None` when it is
/// not (it would be stored whole).
#[doc(hidden)]
pub fn __appended_tail(new: &[u8], old: &[u8]) -> Option<usize> {
    let planned = checkpoints::delta::plan(new, old, (1, 0, old.len() as u64), None, (0, 1), None)?;
    Some(planned.segment.map_or(0, |s| new.len() - s.at))
}

/// Takes the lock file at `path` (see [`SqliteStore::hold_worker`]);
/// `None` if another live connection holds it.
fn hold_lock_file(path: &Path) -> Result<Option<WorkerHold>, Error> {
    let held = || -> Result<Option<Connection>, rusqlite::Error> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_millis(100))?;
        match conn.execute_batch("CREATE TABLE IF NOT EXISTS held (x); BEGIN EXCLUSIVE") {
            Ok(()) => Ok(Some(conn)),
            Err(e) if error::is_busy(&e) => Ok(None),
            Err(e) => Err(e),
        }
    };
    match held() {
        Ok(conn) => Ok(conn.map(|c| WorkerHold::new(Mutex::new(c)))),
        Err(e) => Err(Error::store(format!(
            "sqlite: cannot take the worker lock file `{}`: {e}",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod damage_tests;
#[cfg(test)]
mod delta_tests;
#[cfg(test)]
mod tests;
