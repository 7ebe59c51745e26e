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
//! - **Schema versions** live in `PRAGMA user_version`; `MIGRATIONS` (in this
//!   file) lists one function per version, applied in order on open.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, watch};

use super::rules;
use super::sql::run_row::{
    state_code, status_code, ErrorCol, RunCols, RunRow, COMPLETED, FAILED, READY, SLEEPING, WAITING,
};
use super::{
    CheckpointRecord, ClaimRequest, ClaimResult, Claimed, Created, FieldRecord, GcReport, Lease,
    NewRun, Outcome, Release, RunRecord, RunState, SignalRecord, Store, Suspend,
};
use crate::history::{Event, HistoryEntry};
use crate::status::RunFilter;
use crate::Error;

mod deferred;

use deferred::{CheckpointRow, Deferred, DeferredMark, HeadUpdate, RowData};

/// How long one SQLite call waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a transaction is retried (with backoff) while the database stays
/// busy or locked, before the error is returned.
const BUSY_RETRY_FOR: Duration = Duration::from_secs(60);
/// At most this many write requests share one transaction.
const MAX_BATCH: usize = 4096;
/// The writer connection's page cache, in KiB (a group commit of 1,000 runs
/// of ~1 KB dirties about 1.3 MiB with this schema; pages beyond that are
/// only read again to resume runs).
const WRITER_CACHE_KIB: i64 = 4 << 10;
/// The page size of new files.
const PAGE_SIZE: i64 = 8192;
/// Reader threads (each with its own connection).
const READERS: usize = 2;
/// How long the idle writer looks for a next request before it sleeps ...
const SPIN: Duration = Duration::from_micros(100);
/// ... after a batch of at most this many requests.
const SPIN_BATCH: usize = 2;
/// A batch of at least this many requests that piled up while the writer
/// slept is committed in two halves. With many concurrent runs, callers and
/// writer otherwise settle into taking turns: every run's request in one
/// batch, the writer idle while the callers prepare the next round and the
/// callers idle while it commits. Two halves make two groups of runs that
/// keep the writer busy with one while the other prepares; a busy writer
/// does not sleep, so the groups stay apart.
const SPLIT_AT: usize = 256;
/// Batches of more requests are answered by another thread.
const ANSWER_INLINE: usize = 16;
/// How long `gc` retries truncating the WAL while another connection is
/// using it.
const GC_TRUNCATE_FOR: Duration = Duration::from_secs(2);
/// `gc` rewrites the file when at least this many pages (and a quarter of
/// the file) are free.
const GC_VACUUM_PAGES: i64 = 256;
/// How often the poller looks for commits by other processes.
const POLL_EVERY: Duration = Duration::from_millis(200);
/// The writer remembers at most this many runs (state and latest checkpoint,
/// to check leases and compare fields without reading them back) ...
const CACHE_RUNS: usize = 4096;
/// ... holding at most this many bytes of checkpoint data.
const CACHE_BYTES: usize = 16 << 20;
/// The writer keeps at most this many spare field location lists.
const SPARE_LOCS: usize = 1024;

/// The schema migrations: `MIGRATIONS[i]` upgrades a database at version `i`
/// to version `i + 1`. The current version is `MIGRATIONS.len()`. To change
/// the schema, append a function; never edit one that has shipped.
const MIGRATIONS: &[fn(&Connection) -> rusqlite::Result<()>] = &[migrate_v1];

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

fn migrate_v1(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        r#"
        -- One row per run. `ord` is the creation order (never reused).
        -- state: 0 ready, 1 waiting (signal, due = deadline), 2 sleeping
        -- (due = until), 3 completed (output, error = Err text), 4 failed
        -- (error = the runtime's Error as JSON), 5 cancelled.
        -- Times are nanoseconds since the Unix epoch. The latest checkpoint
        -- is `heads.latest`; `updated_at` is the later of this column and
        -- that checkpoint's `created_at`.
        CREATE TABLE runs (
            ord            INTEGER PRIMARY KEY AUTOINCREMENT,
            id             TEXT    NOT NULL UNIQUE,
            workflow       TEXT    NOT NULL,
            state          INTEGER NOT NULL,
            signal         TEXT,
            due            INTEGER,
            error          TEXT,
            lease_worker   TEXT,
            lease_instance TEXT,
            lease_expires  INTEGER,
            epoch          INTEGER NOT NULL DEFAULT 0,
            attempt        INTEGER NOT NULL DEFAULT 0,
            wake_seq       INTEGER,
            wake_signal    TEXT,
            wake_payload   BLOB,
            created_at     INTEGER NOT NULL,
            updated_at     INTEGER NOT NULL,
            output         BLOB,
            input          BLOB    NOT NULL
        );
        CREATE INDEX runs_active ON runs (ord) WHERE state < 3;

        -- Interned checkpoint shapes: postcard `Shape` (site key, label,
        -- site index, field names and types, schema keys).
        CREATE TABLE shapes (
            id   INTEGER PRIMARY KEY,
            body BLOB NOT NULL UNIQUE
        );

        -- One row per checkpoint, appended under an increasing `id` shared
        -- with `history` (so concurrent runs' rows share the last pages,
        -- and a run's history is both tables merged by `id`). `prev` is the
        -- run's previous checkpoint row: a run's rows form a chain from
        -- `heads.latest`, and every 64th seq is indexed, so checkpoint `n`
        -- is at most 63 steps from an indexed one (or from the latest).
        -- `floor`: the oldest seq the run keeps as of this checkpoint (NULL:
        -- 1); rows of the run below the latest row's floor are hidden.
        -- `quiet`: 1 for a fork's copy (no `CheckpointSaved` event).
        -- `refs`: postcard `StoredRefs`, where each field's bytes are;
        -- `data`: the bytes first stored by this checkpoint (NULL: none).
        -- A hidden row still holding bytes a kept checkpoint uses keeps
        -- `refs`/`data`; after `gc` it may be packed (`size` NULL, `refs` the
        -- postcard `Packed` segments, `data` only those bytes). Other hidden
        -- rows are stubs: `refs`, `data`, `size` NULL.
        CREATE TABLE checkpoints (
            id         INTEGER PRIMARY KEY,
            run        INTEGER NOT NULL,
            seq        INTEGER NOT NULL,
            prev       INTEGER,
            shape      INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            floor      INTEGER,
            quiet      INTEGER,
            loops      BLOB,
            suspend    TEXT,
            size       INTEGER,
            refs       BLOB,
            data       BLOB
        );
        CREATE INDEX checkpoint_anchors ON checkpoints (run, seq) WHERE seq % 64 = 0;

        -- Per run: its latest checkpoint row, and the seq below which
        -- hidden rows have been cut down (see `prune`). Small rows, so that
        -- the heads of many runs share a page.
        CREATE TABLE heads (
            run    INTEGER PRIMARY KEY,
            latest INTEGER,
            pruned INTEGER NOT NULL DEFAULT 1
        );

        -- Signals not yet consumed, in arrival order.
        CREATE TABLE signals (
            id          INTEGER PRIMARY KEY,
            run         INTEGER NOT NULL,
            name        TEXT    NOT NULL,
            payload     BLOB    NOT NULL,
            received_at INTEGER NOT NULL
        );
        CREATE INDEX signals_by_run ON signals (run, name, id);

        -- History events other than `CheckpointSaved`, as JSON.
        CREATE TABLE history (
            id    INTEGER PRIMARY KEY,
            run   INTEGER NOT NULL,
            at    INTEGER NOT NULL,
            event TEXT    NOT NULL
        );
        CREATE INDEX history_by_run ON history (run, id);

        -- Schema documents (JSON) by key; see `Store::put_schemas`.
        CREATE TABLE schemas (
            key  TEXT PRIMARY KEY,
            body TEXT NOT NULL
        ) WITHOUT ROWID;
        "#,
    )
}

// ---------------------------------------------------------------------------
// Errors

/// An internal failure: a SQLite error (kept, so that busy/locked can be
/// retried) or a runtime error.
#[derive(Debug)]
enum Fail {
    Sql(rusqlite::Error),
    Err(Box<Error>),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Sql(e)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Err(Box::new(e))
    }
}

impl Fail {
    fn is_busy(&self) -> bool {
        matches!(self, Fail::Sql(e) if is_busy(e))
    }

    fn into_error(self) -> Error {
        match self {
            Fail::Sql(e) => sql_error(&e),
            Fail::Err(e) => *e,
        }
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

fn sql_error(e: &rusqlite::Error) -> Error {
    Error::Store {
        message: format!("sqlite: {e}"),
    }
}

fn corrupt(what: impl std::fmt::Display) -> Fail {
    Fail::from(Error::Store {
        message: format!("sqlite: corrupt database: {what}"),
    })
}

type R<T> = Result<T, Fail>;

/// Runs `f` until it succeeds or fails with something other than busy/locked,
/// backing off between tries, for at most [`BUSY_RETRY_FOR`].
fn retry_busy<T>(mut f: impl FnMut() -> R<T>) -> R<T> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match f() {
            Err(e) if e.is_busy() && start.elapsed() < BUSY_RETRY_FOR => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            other => return other,
        }
    }
}

// ---------------------------------------------------------------------------
// Conversions

use super::sql::{from_ts, to_i64, to_json, ts, ts_after};

/// A stored value read back as `u64`; a negative one is a corrupt database.
fn to_u64(v: i64, what: &str) -> R<u64> {
    super::sql::to_u64(v, what).map_err(corrupt)
}

fn to_postcard<T: Serialize + ?Sized>(v: &T) -> R<Vec<u8>> {
    // Most values written here are small: one allocation, not a few growths.
    let mut buf = Vec::with_capacity(64);
    append_postcard(v, &mut buf)?;
    Ok(buf)
}

/// Appends `v` (postcard) to `buf`.
fn append_postcard<T: Serialize + ?Sized>(v: &T, buf: &mut Vec<u8>) -> R<()> {
    crate::codec::append(v, buf)
        .map_err(|e| Fail::from(Error::internal(format!("cannot encode for the store: {e}"))))
}

// ---------------------------------------------------------------------------
// Runs

/// The columns of [`RawRun`], in order, over `runs r`. The latest checkpoint's
/// `seq` and `created_at` are appended by the query (see [`RUN_SELECT`]).
const RUN_COLS: &str = "r.ord, r.id, r.workflow, r.state, r.signal, r.due, r.output, r.error, \
     r.lease_worker, r.lease_instance, r.lease_expires, r.epoch, r.attempt, \
     r.wake_seq, r.wake_signal, r.wake_payload, r.created_at, r.updated_at";

/// A run row with its input and its latest checkpoint's `seq` and
/// `created_at`.
const RUN_SELECT: &str = "SELECT r.ord, r.id, r.workflow, r.state, r.signal, r.due, r.output, \
     r.error, r.lease_worker, r.lease_instance, r.lease_expires, r.epoch, r.attempt, \
     r.wake_seq, r.wake_signal, r.wake_payload, r.created_at, r.updated_at, r.input, \
     c.seq, c.created_at \
     FROM runs r LEFT JOIN heads h ON h.run = r.ord LEFT JOIN checkpoints c ON c.id = h.latest";

/// A run row as read: the shared columns ([`RunRow`]), its key, and when
/// its latest checkpoint was taken (a plain checkpoint leaves the run row
/// alone: its latest seq and time are read from the checkpoint).
struct RawRun {
    ord: i64,
    row: RunRow,
    latest_at: Option<i64>,
}

impl RawRun {
    /// Reads the [`RUN_COLS`] columns; the input and latest checkpoint are
    /// left empty.
    fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
        Ok(RawRun {
            ord: r.get(0)?,
            row: RunRow {
                id: r.get(1)?,
                workflow: r.get(2)?,
                input: Vec::new(),
                state: r.get(3)?,
                signal: r.get(4)?,
                due: r.get(5)?,
                output: r.get(6)?,
                error: r.get(7)?,
                lease_worker: r.get(8)?,
                lease_instance: r.get(9)?,
                lease_expires: r.get(10)?,
                epoch: r.get(11)?,
                attempt: r.get(12)?,
                latest_seq: 0,
                wake_seq: r.get(13)?,
                wake_signal: r.get(14)?,
                wake_payload: r.get(15)?,
                created_at: r.get(16)?,
                updated_at: r.get(17)?,
            },
            latest_at: None,
        })
    }

    /// Reads a [`RUN_SELECT`] row.
    fn from_full_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
        let mut raw = RawRun::from_row(r)?;
        raw.row.input = r.get(18)?;
        raw.set_latest(r.get(19)?, r.get(20)?);
        Ok(raw)
    }

    /// The latest checkpoint's `seq` and `created_at`, if there is one.
    fn set_latest(&mut self, seq: Option<i64>, at: Option<i64>) {
        self.row.latest_seq = seq.unwrap_or(0);
        self.latest_at = at;
    }

    fn into_record(self) -> R<(i64, RunRecord)> {
        let mut row = self.row;
        row.updated_at = row.updated_at.max(self.latest_at.unwrap_or(i64::MIN));
        let rec = row.into_record().map_err(corrupt)?;
        Ok((self.ord, rec))
    }
}

/// Loads a run by id, with its input (what readers return).
fn fetch_run(conn: &Connection, id: &str) -> R<Option<(i64, RunRecord)>> {
    let raw = conn
        .prepare_cached(&format!("{RUN_SELECT} WHERE r.id = ?1"))?
        .query_row([id], RawRun::from_full_row)
        .optional()?;
    raw.map(RawRun::into_record).transpose()
}

fn run_ord(conn: &Connection, id: &str) -> R<i64> {
    conn.prepare_cached("SELECT ord FROM runs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .ok_or_else(|| Fail::from(Error::unknown_run(id)))
}

/// The `error` column's text.
fn error_text(col: Option<ErrorCol<'_>>) -> R<Option<String>> {
    Ok(match col {
        None => None,
        Some(ErrorCol::Text(text)) => Some(text.to_owned()),
        Some(ErrorCol::Json(error)) => Some(to_json(error)?),
    })
}

/// Writes every mutable column of `rec` back to run `ord`, whose stored state
/// code is `before`. The `state` column is left alone when it does not change,
/// so that the index of active runs is not rewritten.
fn write_run(conn: &Connection, ord: i64, rec: &RunRecord, before: i64) -> R<()> {
    let cols = RunCols::of(rec)?;
    let sql = if cols.state == before {
        "UPDATE runs SET signal = ?3, due = ?4, output = ?5, error = ?6, \
         lease_worker = ?7, lease_instance = ?8, lease_expires = ?9, epoch = ?10, \
         attempt = ?11, wake_seq = ?12, wake_signal = ?13, wake_payload = ?14, \
         updated_at = ?15 WHERE ord = ?1 AND state = ?2"
    } else {
        "UPDATE runs SET state = ?2, signal = ?3, due = ?4, output = ?5, error = ?6, \
         lease_worker = ?7, lease_instance = ?8, lease_expires = ?9, epoch = ?10, \
         attempt = ?11, wake_seq = ?12, wake_signal = ?13, wake_payload = ?14, \
         updated_at = ?15 WHERE ord = ?1"
    };
    let n = conn.prepare_cached(sql)?.execute(params![
        ord,
        cols.state,
        cols.signal,
        cols.due,
        cols.output,
        error_text(cols.error)?,
        cols.lease_worker,
        cols.lease_instance,
        cols.lease_expires,
        cols.epoch,
        cols.attempt,
        cols.wake_seq,
        cols.wake_signal,
        cols.wake_payload,
        cols.updated_at,
    ])?;
    if n != 1 {
        return Err(
            Error::internal(format!("run `{}` changed under its transaction", rec.id)).into(),
        );
    }
    Ok(())
}

/// Inserts a new run (no lease, no wake value, no checkpoint); returns its
/// `ord`. Two statements.
fn insert_run(conn: &Connection, rec: &RunRecord) -> R<i64> {
    let cols = RunCols::of(rec)?;
    conn.prepare_cached(
        "INSERT INTO runs (id, workflow, input, state, signal, due, output, error, epoch, \
         attempt, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?
    .execute(params![
        rec.id,
        rec.workflow,
        &rec.input[..],
        cols.state,
        cols.signal,
        cols.due,
        cols.output,
        error_text(cols.error)?,
        cols.epoch,
        cols.attempt,
        cols.created_at,
        cols.updated_at,
    ])?;
    let ord = conn.last_insert_rowid();
    conn.prepare_cached("INSERT INTO heads (run) VALUES (?1)")?
        .execute([ord])?;
    Ok(ord)
}

// ---------------------------------------------------------------------------
// Checkpoints

/// Where one field's bytes are: `(checkpoint row id, offset in its data, len)`.
/// In [`StoredRefs`] the row id 0 stands for the row itself; in [`Located`]
/// it is resolved. Empty fields are `(0, 0, 0)`.
type Loc = (u64, u64, u64);

/// The `refs` column of a full checkpoint row.
#[derive(Serialize, Deserialize)]
struct StoredRefs {
    /// The record's data is not the plain concatenation of its fields: the
    /// row's `data` is the whole record data, and each `Loc` offset is the
    /// field's offset in it.
    raw: bool,
    fields: Vec<Loc>,
}

/// [`StoredRefs`] as written for row `own`, from the resolved locations of
/// its fields (the row's own id becomes 0): the same bytes, without building
/// the list.
struct RefsOf<'a> {
    raw: bool,
    locs: &'a [Loc],
    own: u64,
}

impl Serialize for RefsOf<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        /// `StoredRefs::fields`.
        struct Fields<'a>(&'a RefsOf<'a>);
        impl Serialize for Fields<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let own = self.0.own;
                s.collect_seq(
                    self.0
                        .locs
                        .iter()
                        .map(|&(src, off, len)| (if src == own { 0 } else { src }, off, len)),
                )
            }
        }
        let mut st = s.serialize_struct("StoredRefs", 2)?;
        st.serialize_field("raw", &self.raw)?;
        st.serialize_field("fields", &Fields(self))?;
        st.end()
    }
}

impl StoredRefs {
    /// The rows (ids) whose bytes this checkpoint uses, itself included.
    fn sources(&self, own: u64) -> BTreeSet<u64> {
        let mut out = BTreeSet::from([own]);
        if !self.raw {
            out.extend(
                self.fields
                    .iter()
                    .filter(|(src, _, len)| *len > 0 && *src != 0)
                    .map(|(src, _, _)| *src),
            );
        }
        out
    }
}

/// The `refs` column of a packed row (see [`gc_compact`]): its `data` holds
/// only these `(offset, len)` ranges of the original data, in order.
#[derive(Serialize, Deserialize)]
struct Packed {
    segments: Vec<(u64, u64)>,
}

/// A checkpoint's site, field list and schema keys, interned in `shapes`.
#[derive(Serialize, Deserialize)]
struct Shape<'a> {
    site_key: Cow<'a, str>,
    label: Option<Cow<'a, str>>,
    site_index: u32,
    fields: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    schemas: Vec<Option<Cow<'a, str>>>,
}

impl<'a> Shape<'a> {
    fn of(cp: &'a CheckpointRecord) -> Shape<'a> {
        Shape {
            site_key: Cow::Borrowed(&cp.site_key),
            label: cp.label.as_deref().map(Cow::Borrowed),
            site_index: cp.site_index,
            fields: cp
                .fields
                .iter()
                .map(|f| (Cow::Borrowed(&*f.name), Cow::Borrowed(&*f.type_name)))
                .collect(),
            schemas: cp
                .schemas
                .iter()
                .map(|k| k.as_deref().map(Cow::Borrowed))
                .collect(),
        }
    }
}

/// Whether two checkpoints have the same shape.
fn same_shape(a: &CheckpointRecord, b: &CheckpointRecord) -> bool {
    a.site_key == b.site_key
        && a.label == b.label
        && a.site_index == b.site_index
        && a.schemas == b.schemas
        && a.fields.len() == b.fields.len()
        && a.fields
            .iter()
            .zip(&b.fields)
            .all(|(x, y)| x.name == y.name && x.type_name == y.type_name)
}

/// A stored checkpoint together with its row and where its fields' bytes are.
struct Located {
    cp: Arc<CheckpointRecord>,
    /// The row id.
    id: u64,
    /// The shape id.
    shape: i64,
    /// Resolved: the row id is never 0 for a non-empty field.
    locs: Vec<Loc>,
}

/// The bytes of one checkpoint row, as other rows reference them.
struct Source {
    data: Vec<u8>,
    /// Set for a packed row: the original `(offset, len)` ranges it keeps.
    segments: Option<Vec<(u64, u64)>>,
}

impl Source {
    /// Bytes `off..off + len` of the row's original data.
    fn slice(&self, off: u64, len: u64) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        let (start, end) = match &self.segments {
            None => (off, end),
            Some(segments) => {
                let mut at = 0u64;
                let mut found = None;
                for &(s_off, s_len) in segments {
                    if s_off <= off && end <= s_off.checked_add(s_len)? {
                        found = Some(at + (off - s_off));
                        break;
                    }
                    at = at.checked_add(s_len)?;
                }
                let start = found?;
                (start, start.checked_add(len)?)
            }
        };
        self.data
            .get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
    }
}

/// The `size, refs, data` columns of a checkpoint row.
type SourceRow = (Option<i64>, Option<Vec<u8>>, Option<Vec<u8>>);

/// Rows read so far in one operation, by id.
#[derive(Default)]
struct Sources {
    rows: HashMap<u64, Source>,
    bytes: usize,
}

/// Reads kept past this many bytes are dropped (and read again if needed).
const SOURCES_BYTES: usize = 16 << 20;

impl Sources {
    fn insert(&mut self, id: u64, src: Source) {
        if self.bytes + src.data.len() > SOURCES_BYTES {
            self.rows.clear();
            self.bytes = 0;
        }
        self.bytes += src.data.len();
        self.rows.insert(id, src);
    }

    fn get(&mut self, conn: &Connection, ord: i64, id: u64) -> R<&Source> {
        if !self.rows.contains_key(&id) {
            let row: Option<SourceRow> = conn
                .prepare_cached(
                    "SELECT size, refs, data FROM checkpoints WHERE id = ?1 AND run = ?2",
                )?
                .query_row(params![to_i64(id, "row id")?, ord], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?;
            let Some((size, refs, data)) = row else {
                return Err(corrupt(format_args!(
                    "checkpoint row {id} of run {ord} is missing"
                )));
            };
            let refs = refs.ok_or_else(|| {
                corrupt(format_args!(
                    "the bytes of checkpoint row {id} of run {ord} were pruned while in use"
                ))
            })?;
            let segments = match size {
                Some(_) => None,
                None => Some(
                    postcard::from_bytes::<Packed>(&refs)
                        .map_err(|_| corrupt(format_args!("checkpoint row {id}: bad segments")))?
                        .segments,
                ),
            };
            self.insert(
                id,
                Source {
                    data: data.unwrap_or_default(),
                    segments,
                },
            );
        }
        self.rows
            .get(&id)
            .ok_or_else(|| corrupt("checkpoint row vanished"))
    }
}

const CP_COLS: &str = "c.id, c.seq, c.shape, c.created_at, c.loops, c.suspend, c.size, c.refs, \
                       c.data, s.body";
const CP_FROM: &str = "FROM checkpoints c JOIN shapes s ON s.id = c.shape";

struct CpRow {
    id: i64,
    seq: i64,
    shape: i64,
    created_at: i64,
    loops: Option<Vec<u8>>,
    suspend: Option<String>,
    size: Option<i64>,
    refs: Option<Vec<u8>>,
    data: Option<Vec<u8>>,
    body: Vec<u8>,
}

impl CpRow {
    fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<CpRow> {
        Ok(CpRow {
            id: r.get(0)?,
            seq: r.get(1)?,
            shape: r.get(2)?,
            created_at: r.get(3)?,
            loops: r.get(4)?,
            suspend: r.get(5)?,
            size: r.get(6)?,
            refs: r.get(7)?,
            data: r.get(8)?,
            body: r.get(9)?,
        })
    }
}

/// Rebuilds a checkpoint record from its row and the rows it references.
fn decode_checkpoint(
    conn: &Connection,
    ord: i64,
    run: &Arc<str>,
    row: CpRow,
    sources: &mut Sources,
) -> R<Located> {
    let seq = to_u64(row.seq, "seq")?;
    let bad = |what: &str| corrupt(format_args!("checkpoint #{seq} of run `{run}`: {what}"));
    let shape: Shape<'_> = postcard::from_bytes(&row.body).map_err(|_| bad("undecodable shape"))?;
    let (Some(size), Some(refs)) = (row.size, row.refs) else {
        return Err(bad("its bytes were pruned"));
    };
    let refs: StoredRefs =
        postcard::from_bytes(&refs).map_err(|_| bad("undecodable field references"))?;
    if shape.fields.len() != refs.fields.len() {
        return Err(bad("field list and references differ in length"));
    }
    let size = usize::try_from(size).map_err(|_| bad("bad size"))?;
    let own_id = to_u64(row.id, "row id")?;
    let own = row.data.unwrap_or_default();
    let mut fields = Vec::with_capacity(refs.fields.len());
    let mut locs = Vec::with_capacity(refs.fields.len());
    let data = if refs.raw {
        for ((name, type_name), &(_, off, len)) in shape.fields.into_iter().zip(&refs.fields) {
            fields.push(FieldRecord {
                name: Cow::Owned(name.into_owned()),
                type_name: Cow::Owned(type_name.into_owned()),
                offset: usize::try_from(off).map_err(|_| bad("bad offset"))?,
                len: usize::try_from(len).map_err(|_| bad("bad length"))?,
            });
            locs.push((own_id, off, len));
        }
        own
    } else {
        let mut data = Vec::with_capacity(size);
        for ((name, type_name), &(src, off, len)) in shape.fields.into_iter().zip(&refs.fields) {
            let offset = data.len();
            if len > 0 {
                let src = if src == 0 { own_id } else { src };
                let bytes = if src == own_id {
                    let start = usize::try_from(off).map_err(|_| bad("bad offset"))?;
                    let end = usize::try_from(len)
                        .ok()
                        .and_then(|l| start.checked_add(l))
                        .ok_or_else(|| bad("bad length"))?;
                    own.get(start..end)
                } else {
                    sources.get(conn, ord, src)?.slice(off, len)
                };
                data.extend_from_slice(bytes.ok_or_else(|| bad("field reference out of range"))?);
                locs.push((src, off, len));
            } else {
                locs.push((0, 0, 0));
            }
            fields.push(FieldRecord {
                name: Cow::Owned(name.into_owned()),
                type_name: Cow::Owned(type_name.into_owned()),
                offset,
                len: data.len() - offset,
            });
        }
        if !own.is_empty() {
            sources.insert(
                own_id,
                Source {
                    data: own,
                    segments: None,
                },
            );
        }
        data
    };
    if data.len() != size {
        return Err(bad("size does not match the stored bytes"));
    }
    let loops: Vec<u64> = match &row.loops {
        None => Vec::new(),
        Some(b) => postcard::from_bytes(b).map_err(|_| bad("undecodable loop positions"))?,
    };
    let suspend: Option<Suspend> = match &row.suspend {
        None => None,
        Some(s) => Some(serde_json::from_str(s).map_err(|_| bad("undecodable suspension"))?),
    };
    let mut cp = CheckpointRecord::new(
        run.clone(),
        seq,
        Cow::Owned(shape.site_key.into_owned()),
        shape.label.map(|l| Cow::Owned(l.into_owned())),
        shape.site_index,
        loops,
        fields,
        data,
        suspend,
        from_ts(row.created_at),
    );
    if !shape.schemas.is_empty() {
        let keys: Vec<Option<Cow<'static, str>>> = shape
            .schemas
            .into_iter()
            .map(|k| k.map(|k| Cow::Owned(k.into_owned())))
            .collect();
        cp = cp.with_schemas(keys);
    }
    Ok(Located {
        cp: Arc::new(cp),
        id: own_id,
        shape: row.shape,
        locs,
    })
}

/// Every this many seqs, a checkpoint is in the `checkpoint_anchors` index.
const ANCHOR_EVERY: u64 = 64;

/// The run's chain of checkpoint rows, from row `?1` back to the row with
/// seq `?2` (inclusive, if it exists), newest first: `walk(id, seq)`.
const WALK: &str = "WITH RECURSIVE walk (id, seq, prev) AS ( \
         SELECT id, seq, prev FROM checkpoints WHERE id = ?1 \
         UNION ALL \
         SELECT c.id, c.seq, c.prev FROM walk w JOIN checkpoints c ON c.id = w.prev \
         WHERE w.seq > ?2) ";

/// The latest checkpoint row of run `ord`: `(id, seq, floor)`.
fn read_head(conn: &Connection, ord: i64) -> R<Option<(i64, u64, u64)>> {
    let row: Option<(i64, i64, Option<i64>)> = conn
        .prepare_cached(
            "SELECT c.id, c.seq, c.floor FROM heads h JOIN checkpoints c ON c.id = h.latest \
             WHERE h.run = ?1",
        )?
        .query_row([ord], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    row.map(|(id, seq, floor)| {
        Ok((
            id,
            to_u64(seq, "seq")?,
            to_u64(floor.unwrap_or(1), "floor")?,
        ))
    })
    .transpose()
}

/// The id of checkpoint `seq` of run `ord` (hidden or not): from the nearest
/// anchor at or above it (or the latest), at most 63 steps down the chain.
fn find_row(conn: &Connection, ord: i64, seq: u64) -> R<Option<i64>> {
    let seq = to_i64(seq, "seq")?;
    let start: Option<i64> = conn
        .prepare_cached(&format!(
            "SELECT coalesce( \
                 (SELECT id FROM checkpoints WHERE run = ?1 AND seq >= ?2 \
                  AND seq % {ANCHOR_EVERY} = 0 ORDER BY seq LIMIT 1), \
                 (SELECT latest FROM heads WHERE run = ?1))"
        ))?
        .query_row(params![ord, seq], |r| r.get(0))?;
    let Some(start) = start else {
        return Ok(None);
    };
    Ok(conn
        .prepare_cached(&format!("{WALK} SELECT id FROM walk WHERE seq = ?2"))?
        .query_row(params![start, seq], |r| r.get(0))
        .optional()?)
}

/// Checkpoint row `id` of run `ord`.
fn load_id(conn: &Connection, ord: i64, run: &Arc<str>, id: i64) -> R<Option<Located>> {
    let row = conn
        .prepare_cached(&format!("SELECT {CP_COLS} {CP_FROM} WHERE c.id = ?1"))?
        .query_row([id], CpRow::from_row)
        .optional()?;
    match row {
        None => Ok(None),
        Some(row) => decode_checkpoint(conn, ord, run, row, &mut Sources::default()).map(Some),
    }
}

/// The latest checkpoint of run `ord`.
fn load_latest(conn: &Connection, ord: i64, run: &Arc<str>) -> R<Option<Located>> {
    match read_head(conn, ord)? {
        None => Ok(None),
        Some((id, _, _)) => load_id(conn, ord, run, id),
    }
}

/// Checkpoint `seq` of run `ord`, hidden or not.
fn load_seq(conn: &Connection, ord: i64, run: &Arc<str>, seq: u64) -> R<Option<Located>> {
    match find_row(conn, ord, seq)? {
        None => Ok(None),
        Some(id) => load_id(conn, ord, run, id),
    }
}

/// Whether `cp`'s data is exactly its fields, concatenated in order.
fn is_tiled(cp: &CheckpointRecord) -> bool {
    let mut at = 0usize;
    for f in &cp.fields {
        if f.offset != at {
            return false;
        }
        match at.checked_add(f.len) {
            Some(end) => at = end,
            None => return false,
        }
    }
    at == cp.data.len()
}

/// The row that stores `cp` as checkpoint `cp.seq` of run `ord` with shape
/// `shape`, after `prev` (the run's previous checkpoint, whose bytes it
/// shares for fields that did not change), and where its fields' bytes will
/// be. The caller queues the row and the run's new head (see [`deferred`]).
fn checkpoint_row(
    cx: &mut Ctx<'_>,
    ord: i64,
    cp: &Arc<CheckpointRecord>,
    prev: Option<&Located>,
    shape: i64,
    floor: u64,
    quiet: bool,
) -> R<(CheckpointRow, Located)> {
    let id = cx.next_id()?;
    let own_id = to_u64(id, "row id")?;
    let tiled = is_tiled(cp);
    let (mut own_len, mut shares) = (0u64, false);
    let mut locs = cx.cache.spare_locs.pop().unwrap_or_default();
    locs.reserve(cp.fields.len());
    if tiled {
        for (i, f) in cp.fields.iter().enumerate() {
            let bytes = cp.field_bytes(i).unwrap_or_default();
            if bytes.is_empty() {
                locs.push((0, 0, 0));
                continue;
            }
            let shared = prev.and_then(|p| {
                let j = match p.cp.fields.get(i) {
                    Some(pf) if pf.name == f.name => i,
                    _ => p.cp.fields.iter().position(|pf| pf.name == f.name)?,
                };
                (p.cp.field_bytes(j) == Some(bytes))
                    .then(|| p.locs.get(j).copied())
                    .flatten()
            });
            match shared {
                Some(loc) => {
                    locs.push(loc);
                    shares = true;
                }
                None => {
                    let (off, len) = (own_len, bytes.len() as u64);
                    locs.push((own_id, off, len));
                    own_len += len;
                }
            }
        }
    } else {
        own_len = cp.data.len() as u64;
        for f in &cp.fields {
            locs.push((own_id, f.offset as u64, f.len as u64));
        }
    }
    // The row stores the fields that changed, in order; when all did (or
    // the record is not tiled), that is the record's data as it is. Its own
    // bytes go to the batch's buffer, where the row is about to be queued.
    let arena = cx.cache.deferred.arena();
    let data = if own_len == 0 {
        RowData::None
    } else if !tiled || !shares {
        RowData::Whole(cp.clone())
    } else {
        let start = arena.len();
        for (i, (src, _, len)) in locs.iter().enumerate() {
            if *src == own_id && *len > 0 {
                arena.extend_from_slice(cp.field_bytes(i).unwrap_or_default());
            }
        }
        RowData::Own(start..arena.len())
    };
    let meta_start = arena.len();
    let refs = RefsOf {
        raw: !tiled,
        locs: &locs,
        own: own_id,
    };
    append_postcard(&refs, arena)?;
    let refs_len = arena.len() - meta_start;
    if !cp.loops.is_empty() {
        append_postcard(&cp.loops, arena)?;
    }
    let meta = meta_start..arena.len();
    let suspend = cp.suspend.as_ref().map(to_json).transpose()?;
    let floor = if floor > 1 {
        Some(to_i64(floor, "floor")?)
    } else {
        None
    };
    let row = CheckpointRow {
        id,
        run: ord,
        seq: to_i64(cp.seq, "seq")?,
        prev: prev.map(|p| to_i64(p.id, "row id")).transpose()?,
        shape,
        created_at: ts(cp.created_at),
        floor,
        quiet: quiet.then_some(1i64),
        suspend,
        size: cp.data.len() as i64,
        meta,
        refs_len,
        data,
    };
    let located = Located {
        cp: cp.clone(),
        id: own_id,
        shape,
        locs,
    };
    Ok((row, located))
}

/// Cuts every hidden checkpoint row of run `ord` whose bytes no kept
/// checkpoint uses down to a stub, given that this was last done when the
/// oldest kept seq was `pruned` and it now is `floor`.
///
/// A checkpoint only references rows its predecessor references, or itself.
/// So the hidden rows still holding bytes are those the checkpoint at
/// `pruned` uses and those from `pruned` to `floor`; after this call, only
/// those the checkpoint at `floor` uses.
fn prune(conn: &Connection, ord: i64, pruned: u64, floor: u64) -> R<()> {
    if floor <= pruned {
        return Ok(());
    }
    let start = find_row(conn, ord, floor)?
        .ok_or_else(|| corrupt(format_args!("run {ord} lost checkpoint #{floor}")))?;
    let rows: Vec<(i64, i64, Option<Vec<u8>>)> = conn
        .prepare_cached(&format!(
            "{WALK} SELECT w.id, w.seq, c.refs FROM walk w JOIN checkpoints c ON c.id = w.id"
        ))?
        .query_map(params![start, to_i64(pruned, "seq")?], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let sources = |id: i64, refs: &Option<Vec<u8>>| -> R<BTreeSet<u64>> {
        let refs = refs
            .as_deref()
            .ok_or_else(|| corrupt(format_args!("checkpoint row {id} lost its bytes")))?;
        let refs: StoredRefs = postcard::from_bytes(refs)
            .map_err(|_| corrupt(format_args!("checkpoint row {id}: undecodable references")))?;
        Ok(refs.sources(to_u64(id, "row id")?))
    };
    let mut used = BTreeSet::new();
    let mut doomed = BTreeSet::new();
    for (id, seq, refs) in &rows {
        let seq = to_u64(*seq, "seq")?;
        if seq == floor {
            used = sources(*id, refs)?;
            continue;
        }
        if seq == pruned {
            doomed.extend(sources(*id, refs)?);
        }
        doomed.insert(to_u64(*id, "row id")?);
    }
    for id in doomed.difference(&used) {
        conn.prepare_cached(
            "UPDATE checkpoints SET loops = NULL, suspend = NULL, size = NULL, refs = NULL, \
             data = NULL WHERE id = ?1 AND refs IS NOT NULL",
        )?
        .execute([to_i64(*id, "row id")?])?;
    }
    Ok(())
}

/// Prunes every run fully (see [`prune`]), then shrinks every hidden row
/// that kept checkpoints still use to the bytes they use. Returns (rows
/// shrunk, bytes dropped).
fn gc_compact(conn: &Connection) -> R<(u64, u64)> {
    let runs: Vec<(i64, i64)> = conn
        .prepare("SELECT run, pruned FROM heads WHERE latest IS NOT NULL ORDER BY run")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let (mut rows, mut bytes) = (0u64, 0u64);
    for (ord, pruned) in runs {
        let Some((_, _, floor)) = read_head(conn, ord)? else {
            continue;
        };
        if floor <= 1 {
            continue;
        }
        let pruned = to_u64(pruned, "seq")?;
        if pruned < floor {
            prune(conn, ord, pruned, floor)?;
            conn.prepare_cached("UPDATE heads SET pruned = ?2 WHERE run = ?1")?
                .execute(params![ord, to_i64(floor, "seq")?])?;
        }
        let floor_id = find_row(conn, ord, floor)?
            .ok_or_else(|| corrupt(format_args!("run {ord} lost checkpoint #{floor}")))?;
        let refs: Option<Vec<u8>> = conn
            .prepare_cached("SELECT refs FROM checkpoints WHERE id = ?1")?
            .query_row([floor_id], |r| r.get(0))?;
        let refs: StoredRefs = postcard::from_bytes(refs.as_deref().unwrap_or_default())
            .map_err(|_| corrupt(format_args!("checkpoint row {floor_id}: bad references")))?;
        if refs.raw {
            continue;
        }
        // The ranges used of each older row.
        let mut used: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
        for &(src, off, len) in &refs.fields {
            if len > 0 && src != 0 && src != to_u64(floor_id, "row id")? {
                used.entry(src).or_default().push((off, len));
            }
        }
        let mut sources = Sources::default();
        for (src, mut ranges) in used {
            ranges.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (off, len) in ranges {
                match merged.last_mut() {
                    Some((m_off, m_len)) if off <= *m_off + *m_len => {
                        *m_len = (*m_len).max(off + len - *m_off);
                    }
                    _ => merged.push((off, len)),
                }
            }
            let source = sources.get(conn, ord, src)?;
            let mut packed = Vec::new();
            for &(off, len) in &merged {
                packed.extend_from_slice(source.slice(off, len).ok_or_else(|| {
                    corrupt(format_args!("checkpoint row {src}: reference out of range"))
                })?);
            }
            if packed.len() >= source.data.len() {
                continue;
            }
            rows += 1;
            bytes += (source.data.len() - packed.len()) as u64;
            conn.prepare_cached(
                "UPDATE checkpoints SET loops = NULL, suspend = NULL, size = NULL, refs = ?2, \
                 data = ?3 WHERE id = ?1",
            )?
            .execute(params![
                to_i64(src, "row id")?,
                to_postcard(&Packed { segments: merged })?,
                packed,
            ])?;
        }
    }
    Ok((rows, bytes))
}

// ---------------------------------------------------------------------------
// The writer

/// What the writer knows of a run: its row (without the input) and its latest
/// checkpoint. Kept in sync with the database by every write.
struct Head {
    ord: i64,
    /// The run, with `latest_seq` and `updated_at` as readers compute them;
    /// the input is left out.
    rec: RunRecord,
    /// `runs.state` as stored.
    stored: i64,
    /// The latest checkpoint row (0: none).
    latest_id: i64,
    /// The oldest kept seq.
    floor: u64,
    /// `heads.pruned`.
    pruned: u64,
    /// The latest checkpoint, when loaded.
    prev: Option<Located>,
}

impl Head {
    fn load(conn: &Connection, id: &str) -> R<Option<Head>> {
        let raw = conn
            .prepare_cached(&format!("SELECT {RUN_COLS} FROM runs r WHERE r.id = ?1"))?
            .query_row([id], RawRun::from_row)
            .optional()?;
        let Some(mut raw) = raw else {
            return Ok(None);
        };
        type Latest = (Option<i64>, i64, Option<i64>, Option<i64>, Option<i64>);
        let (latest_id, pruned, seq, floor, at): Latest = conn
            .prepare_cached(
                "SELECT h.latest, h.pruned, c.seq, c.floor, c.created_at \
                 FROM heads h LEFT JOIN checkpoints c ON c.id = h.latest WHERE h.run = ?1",
            )?
            .query_row([raw.ord], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .optional()?
            .ok_or_else(|| corrupt(format_args!("run `{id}` has no head")))?;
        raw.set_latest(seq, at);
        let stored = raw.row.state;
        let (ord, rec) = raw.into_record()?;
        Ok(Some(Head {
            ord,
            rec,
            stored,
            latest_id: latest_id.unwrap_or(0),
            floor: to_u64(floor.unwrap_or(1), "floor")?,
            pruned: to_u64(pruned, "seq")?,
            prev: None,
        }))
    }

    fn bytes(&self) -> usize {
        self.prev.as_ref().map_or(0, |p| p.cp.data.len())
    }
}

/// What the writer remembers across transactions: interned shapes (immutable
/// once committed) and what it knows of runs, which is dropped whenever another
/// connection commits (see [`Writer::run_batch`]) and, run by run, whenever a
/// request that touched it is rolled back.
#[derive(Default)]
struct Cache {
    /// Interned shapes: body -> `shapes.id`.
    shapes: HashMap<Vec<u8>, i64>,
    /// Shapes added by the open transaction (undone if it rolls back).
    new_shapes: Vec<Vec<u8>>,
    /// Boxed: a request takes its run's head out and puts it back, and a
    /// head is a few hundred bytes.
    heads: HashMap<Arc<str>, Box<Head>, std::hash::BuildHasherDefault<FastHash>>,
    /// Checkpoint bytes held by `heads`.
    bytes: usize,
    /// Runs whose head the open transaction changed.
    touched: Vec<Arc<str>>,
    /// The next id of a `checkpoints` or `history` row.
    next_id: Option<i64>,
    /// `PRAGMA data_version` when the writer last looked.
    data_version: Option<i64>,
    /// Checkpoints replaced in the cache, dropped by the thread that answers
    /// the batch (freeing a thousand records takes a while).
    garbage: Vec<Located>,
    /// Emptied field location lists of replaced checkpoints, for the next
    /// rows: the writer allocates as little as it can, since what it
    /// allocates is mostly freed by other threads (slow for both).
    spare_locs: Vec<Vec<Loc>>,
    /// Checkpoint rows and heads of the open transaction not written yet.
    deferred: Deferred,
}

/// What [`Cache::undo_to`] takes a failed request's changes back to.
#[derive(Clone, Copy, Default)]
struct CacheMark {
    shapes: usize,
    touched: usize,
    deferred: DeferredMark,
}

/// A quick hash for the writer's map of runs (FxHash's mixing).
#[derive(Default, Clone, Copy)]
struct FastHash(u64);

impl std::hash::Hasher for FastHash {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let word = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            self.add(word);
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.add(u64::from(b));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl FastHash {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Cache {
    fn mark(&self) -> CacheMark {
        CacheMark {
            shapes: self.new_shapes.len(),
            touched: self.touched.len(),
            deferred: self.deferred.mark(),
        }
    }

    fn undo_to(&mut self, mark: CacheMark) {
        for body in self.new_shapes.split_off(mark.shapes) {
            self.shapes.remove(&body);
        }
        for id in self.touched.split_off(mark.touched) {
            self.forget(&id);
        }
        self.deferred.undo_to(mark.deferred);
    }

    /// Forgets everything the open transaction did (it was rolled back).
    fn rolled_back(&mut self) {
        self.undo_to(CacheMark::default());
        self.deferred.clear();
        self.reset_runs();
    }

    fn committed(&mut self) {
        self.new_shapes.clear();
        self.touched.clear();
    }

    /// Forgets everything about runs (another connection may have changed them).
    fn reset_runs(&mut self) {
        self.heads.clear();
        self.bytes = 0;
        self.touched.clear();
        self.next_id = None;
    }

    fn recycle_locs(&mut self, mut locs: Vec<Loc>) {
        if self.spare_locs.len() < SPARE_LOCS {
            locs.clear();
            self.spare_locs.push(locs);
        }
    }

    fn take(&mut self, id: &str) -> Option<Box<Head>> {
        let h = self.heads.remove(id)?;
        self.bytes = self.bytes.saturating_sub(h.bytes());
        Some(h)
    }

    fn forget(&mut self, id: &str) {
        self.take(id);
    }

    fn put(&mut self, id: Arc<str>, head: impl Into<Box<Head>>) {
        let mut head = head.into();
        let size = head.bytes();
        if size > CACHE_BYTES {
            head.prev = None;
        }
        if self.heads.len() >= CACHE_RUNS || self.bytes + head.bytes() > CACHE_BYTES {
            self.heads.clear();
            self.bytes = 0;
        }
        self.bytes += head.bytes();
        self.touched.push(id.clone());
        self.heads.insert(id, head);
    }
}

/// What a write request sees: the writer's connection (inside the batch
/// transaction) and its cache.
struct Ctx<'a> {
    conn: &'a Connection,
    cache: &'a mut Cache,
    /// Set by requests whose commit may make a run runnable or finished.
    bump: bool,
    /// Whether the request's savepoint is open.
    savepoint: bool,
    /// Set when a request without a savepoint could not undo a partial
    /// write: the whole batch is rolled back.
    abort: bool,
}

impl Ctx<'_> {
    /// Opens the request's savepoint, so that its writes can be rolled back
    /// alone. A request calls this before its first write unless it writes
    /// one statement only and nothing can fail after it (a failing statement
    /// undoes itself).
    ///
    /// The rows other requests left deferred are written first, so that a
    /// rollback to the savepoint never takes them back.
    fn begin(&mut self) -> R<()> {
        if !self.savepoint {
            self.flush()?;
            self.conn.prepare_cached("SAVEPOINT job")?.execute([])?;
            self.savepoint = true;
        }
        Ok(())
    }

    /// Writes the deferred checkpoint rows and heads now. If that fails
    /// outside a savepoint, part of them may be written: the whole batch is
    /// rolled back.
    fn flush(&mut self) -> R<()> {
        if self.cache.deferred.is_empty() {
            return Ok(());
        }
        let res = self.cache.deferred.flush(self.conn);
        if res.is_err() && !self.savepoint {
            self.abort = true;
        }
        res
    }

    /// The next id for a `checkpoints` or `history` row (one counter for both,
    /// so that a run's history is the two merged by id).
    fn next_id(&mut self) -> R<i64> {
        let id = match self.cache.next_id {
            Some(id) => id,
            None => self
                .conn
                .prepare_cached(
                    "SELECT max(coalesce((SELECT max(id) FROM checkpoints), 0), \
                                coalesce((SELECT max(id) FROM history), 0)) + 1",
                )?
                .query_row([], |r| r.get(0))?,
        };
        self.cache.next_id = Some(id + 1);
        Ok(id)
    }

    /// Takes run `id`'s head out of the cache (or loads it); give it back
    /// with [`Ctx::put`] once changed.
    fn head(&mut self, id: &str) -> R<Box<Head>> {
        match self.cache.take(id) {
            Some(h) => Ok(h),
            None => {
                // The run's head may be among the deferred ones.
                self.flush()?;
                Head::load(self.conn, id)?
                    .map(Box::new)
                    .ok_or_else(|| Error::unknown_run(id).into())
            }
        }
    }

    fn put(&mut self, id: Arc<str>, head: impl Into<Box<Head>>) {
        self.cache.put(id, head);
    }

    /// The head of run `id`, if `lease` still holds it.
    fn fenced(&mut self, id: &str, lease: &Lease) -> R<Box<Head>> {
        let h = self.head(id)?;
        match super::rules::check_lease(id, &h.rec, lease) {
            Ok(()) => Ok(h),
            Err(e) => {
                self.put(Arc::from(id), h);
                Err(e.into())
            }
        }
    }

    /// Writes a head's run row back.
    fn save_run(&mut self, h: &mut Head) -> R<()> {
        write_run(self.conn, h.ord, &h.rec, h.stored)?;
        h.stored = state_code(&h.rec.state);
        Ok(())
    }

    /// The latest checkpoint of a head, loaded if needed.
    fn latest<'h>(&mut self, h: &'h mut Head) -> R<Option<&'h Located>> {
        if h.rec.latest_seq == 0 {
            return Ok(None);
        }
        if h.prev.as_ref().map(|p| p.cp.seq) != Some(h.rec.latest_seq) {
            let run: Arc<str> = Arc::from(h.rec.id.as_str());
            h.prev = load_id(self.conn, h.ord, &run, h.latest_id)?;
            if h.prev.as_ref().map(|p| p.cp.seq) != Some(h.rec.latest_seq) {
                return Err(corrupt(format_args!(
                    "run `{}` lost its latest checkpoint",
                    h.rec.id
                )));
            }
        }
        Ok(h.prev.as_ref())
    }

    /// The shape id of `cp` if known without touching the database.
    fn known_shape(&self, cp: &CheckpointRecord, prev: Option<&Located>) -> Option<(i64, Vec<u8>)> {
        if let Some(p) = prev {
            if same_shape(cp, &p.cp) {
                return Some((p.shape, Vec::new()));
            }
        }
        let body = to_postcard(&Shape::of(cp)).ok()?;
        self.cache.shapes.get(&body).map(|id| (*id, body))
    }

    /// The shape id of `cp`, interned if new.
    fn shape_id(&mut self, cp: &CheckpointRecord) -> R<i64> {
        let body = to_postcard(&Shape::of(cp))?;
        if let Some(id) = self.cache.shapes.get(&body) {
            return Ok(*id);
        }
        let found: Option<i64> = self
            .conn
            .prepare_cached("SELECT id FROM shapes WHERE body = ?1")?
            .query_row([&body], |r| r.get(0))
            .optional()?;
        let id = match found {
            Some(id) => id,
            None => {
                self.begin()?;
                self.conn
                    .prepare_cached("INSERT INTO shapes (body) VALUES (?1)")?
                    .execute([&body])?;
                self.conn.last_insert_rowid()
            }
        };
        self.cache.new_shapes.push(body.clone());
        self.cache.shapes.insert(body, id);
        Ok(id)
    }

    fn event(&mut self, ord: i64, at: SystemTime, event: &Event) -> R<()> {
        let id = self.next_id()?;
        self.conn
            .prepare_cached("INSERT INTO history (id, run, at, event) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![id, ord, ts(at), to_json(event)?])?;
        Ok(())
    }
}

/// A queued write request.
trait Job: Send {
    /// Applies the request; `true` if it succeeded.
    fn apply(&mut self, cx: &mut Ctx<'_>) -> bool;
    /// Answers the request once the batch's commit finished with `commit`.
    fn complete(self: Box<Self>, commit: Result<(), Error>);
    /// Whether the request may run while other requests' checkpoint rows are
    /// still deferred (see [`deferred`]): it reads neither `checkpoints` nor
    /// `heads` except through [`Ctx`], which flushes when needed.
    fn keeps_deferred(&self) -> bool;
}

struct Pending<T, F> {
    f: Option<F>,
    out: Option<Result<T, Error>>,
    tx: oneshot::Sender<Result<T, Error>>,
    keeps_deferred: bool,
}

impl<T, F> Job for Pending<T, F>
where
    T: Send,
    F: FnOnce(&mut Ctx<'_>) -> R<T> + Send,
{
    fn apply(&mut self, cx: &mut Ctx<'_>) -> bool {
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
enum Msg {
    /// A write request, applied in the next group commit.
    Job(Box<dyn Job>),
    /// Work that runs between group commits, with the connection to itself
    /// (outside any transaction).
    Alone(Box<dyn FnOnce(&mut Writer) + Send>),
}

struct Writer {
    conn: Connection,
    cache: Cache,
    changes: Arc<watch::Sender<u64>>,
    /// Where large batches are answered (see [`Writer::run_batch`]).
    answers: mpsc::Sender<Answers>,
    /// The size of the last batch.
    last_batch: usize,
    /// The same, for the poller.
    batch_size: Arc<AtomicUsize>,
}

/// A committed (or failed) batch, to answer, and what to drop.
type Answers = (Vec<Box<dyn Job>>, Result<(), Error>, Vec<Located>);

/// Answers batches handed over by the writer.
fn answer_loop(rx: mpsc::Receiver<Answers>) {
    for (batch, outcome, garbage) in rx {
        for job in batch {
            job.complete(outcome.clone());
        }
        drop(garbage);
    }
}

impl Writer {
    fn new(
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
        }
    }

    fn run(mut self, rx: mpsc::Receiver<Msg>) {
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
    fn wait(rx: &mpsc::Receiver<Msg>) -> Option<Msg> {
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
    fn exec(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    /// Starts a write transaction; forgets what the cache knows of runs if
    /// another connection committed since this one last looked.
    fn begin(&mut self) -> R<()> {
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

    /// One transaction for the whole batch; a request that writes more than
    /// one statement gets its own savepoint.
    fn run_batch(&mut self, mut batch: Vec<Box<dyn Job>>) {
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
            if !job.keeps_deferred() && !self.cache.deferred.is_empty() {
                if let Err(e) = self.cache.deferred.flush(&self.conn) {
                    broken = Some(e.into_error());
                    break;
                }
            }
            let mark = self.cache.mark();
            let mut cx = Ctx {
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
                broken = Some(Error::Store {
                    message: "sqlite: the transaction was rolled back".to_owned(),
                });
                break;
            }
            let end = match (ok, savepoint) {
                (_, false) => Ok(()),
                (true, true) => self.exec("RELEASE job"),
                (false, true) => self
                    .exec("ROLLBACK TO job")
                    .and_then(|()| self.exec("RELEASE job")),
            };
            if let Err(e) = end {
                broken = Some(sql_error(&e));
                break;
            }
            bump |= ok && job_bump;
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
            Ok(()) => self.cache.committed(),
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
            batch
        };
        for job in batch {
            job.complete(outcome.clone());
        }
    }

    /// [`Store::gc`]: compaction in one transaction, then free pages back to
    /// the file system and the WAL folded into the main file and truncated.
    fn gc(&mut self, path: &Path) -> R<GcReport> {
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

// ---------------------------------------------------------------------------
// Readers and poller

type ReadJob = Box<dyn FnOnce(&mut Connection) + Send>;

fn reader_loop(mut conn: Connection, rx: Arc<Mutex<mpsc::Receiver<ReadJob>>>) {
    loop {
        let job = {
            let guard = rx.lock().unwrap_or_else(|e| e.into_inner());
            match guard.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        job(&mut conn);
    }
}

fn data_version(conn: &Connection) -> Option<i64> {
    conn.query_row("PRAGMA data_version", [], |r| r.get(0)).ok()
}

/// Bumps `changes` when another connection (another process, or this
/// store's writer) committed since the last look. Looks only while someone
/// subscribes; the first look after a quiet period compares with the last
/// value seen, so a change is never missed (at worst, one bump is spurious).
///
/// While the writer's batches are small (`batch`, see [`FOLD_BATCH`]), also
/// copies committed WAL frames into the main file after commits (`PRAGMA
/// wal_checkpoint(PASSIVE)`, which never blocks the writer): the writer's
/// next transaction then starts the WAL over, and its commits overwrite the
/// file instead of growing it (an fsync that does not change the file's size
/// is cheaper). Under a heavy load the copying is left to the writer's own
/// automatic checkpoint, so as not to take CPU from it.
fn poller_loop(
    conn: Connection,
    changes: Arc<watch::Sender<u64>>,
    stop: mpsc::Receiver<()>,
    mut last: Option<i64>,
    fold: Arc<AtomicBool>,
    batch: Arc<AtomicUsize>,
) {
    let mut folded = last;
    loop {
        match stop.recv_timeout(POLL_EVERY) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let now = data_version(&conn);
        let light = batch.load(Ordering::Relaxed) <= FOLD_BATCH;
        if now.is_some() && now != folded && light && fold.load(Ordering::Relaxed) {
            // Busy (another checkpoint runs) or failed: the next look retries.
            let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            folded = now;
        }
        if changes.receiver_count() == 0 {
            continue;
        }
        if let Some(now) = now {
            if last != Some(now) {
                changes.send_modify(|n| *n = n.wrapping_add(1));
                last = Some(now);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The store

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
}

/// The poller folds the WAL into the main file while the writer's batches
/// have at most this many requests.
const FOLD_BATCH: usize = 4;

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
        .map_err(|e| Error::Store {
            message: format!("sqlite: cannot start the {name} thread: {e}"),
        })
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, migrating its schema
    /// forward to [`SCHEMA_VERSION`].
    ///
    /// Fails with [`Error::Store`] if the file cannot be opened, is not a
    /// database, or was written by a newer version of this crate.
    ///
    /// ```no_run
    /// let store = checkpoint_runtime::store::sqlite::SqliteStore::open("runs.db")?;
    /// # let _ = store;
    /// # Ok::<(), checkpoint_runtime::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, Error> {
        let path = path.as_ref().to_path_buf();
        let context = |e: Error| match e {
            Error::Store { message } => Error::Store {
                message: format!("{message} (opening `{}`)", path.display()),
            },
            other => other,
        };
        let mut conn = connect(&path).map_err(|e| context(e.into_error()))?;
        Self::prepare_writer(&mut conn).map_err(|e| context(e.into_error()))?;
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let c = connect(&path).map_err(|e| context(e.into_error()))?;
            c.pragma_update(None, "query_only", true)
                .map_err(|e| context(sql_error(&e)))?;
            readers.push(c);
        }
        let poll_conn = connect(&path).map_err(|e| context(e.into_error()))?;
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

    /// The path the store was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn prepare_writer(conn: &mut Connection) -> R<()> {
        // 8 KiB pages (for a new file; an existing one keeps its own): rows
        // of a few KiB waste less of a page than with 4 KiB (a 2 KiB state
        // plus the row's ~50 bytes takes a whole 4 KiB page), and a commit
        // of a checkpoint still writes about two pages.
        conn.pragma_update(None, "page_size", PAGE_SIZE)?;
        let mode: String = retry_busy(|| {
            Ok(conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?)
        })?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Fail::from(Error::Store {
                message: format!("sqlite: cannot switch to WAL mode (journal mode is `{mode}`)"),
            }));
        }
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // Room for the pages a large group commit touches (in KiB).
        conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
        // Checkpoint the WAL every 128 MiB rather than SQLite's 4 MiB: a page
        // rewritten by several commits between two WAL checkpoints (the last
        // page of `checkpoints`, a head page) is copied back once. The poller
        // copies frames in the background; this checkpoint copies the rest
        // and lets the next transaction start the WAL over.
        conn.pragma_update(None, "wal_autocheckpoint", 16384)?;
        conn.pragma_update(None, "journal_size_limit", 64i64 << 20)?;
        conn.set_prepared_statement_cache_capacity(64);
        retry_busy(|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
            if version > SCHEMA_VERSION {
                return Err(Fail::from(Error::Store {
                    message: format!(
                        "sqlite: the database has schema version {version}, newer than this \
                         build's {SCHEMA_VERSION}; upgrade checkpoint-runtime"
                    ),
                }));
            }
            let from = usize::try_from(version).unwrap_or(0);
            for migrate in MIGRATIONS.iter().skip(from) {
                migrate(&tx)?;
            }
            if version != SCHEMA_VERSION {
                tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// Queues a write request; it is applied in the next group commit.
    fn write<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, Error>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Ctx<'_>) -> R<T> + Send + 'static,
    {
        self.queue(false, f)
    }

    /// Queues a write request that leaves its checkpoint row to be written
    /// with the others of the batch (see [`deferred`]).
    fn write_deferred<T, F>(&self, f: F) -> BoxFuture<'static, Result<T, Error>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Ctx<'_>) -> R<T> + Send + 'static,
    {
        self.queue(true, f)
    }

    fn queue<T, F>(&self, keeps_deferred: bool, f: F) -> BoxFuture<'static, Result<T, Error>>
    where
        T: Send + 'static,
        F: FnOnce(&mut Ctx<'_>) -> R<T> + Send + 'static,
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
    Error::Store {
        message: "sqlite: the store's worker threads have stopped".to_owned(),
    }
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

// ---------------------------------------------------------------------------
// Operations (each runs inside the writer's transaction)

fn op_create(cx: &mut Ctx<'_>, run: NewRun) -> R<Created> {
    if let Some((_, rec)) = fetch_run(cx.conn, &run.id)? {
        return Ok(Created::Existing(Box::new(rec)));
    }
    cx.begin()?;
    let now = SystemTime::now();
    let (mut rec, started) = rules::create(run, now);
    let ord = insert_run(cx.conn, &rec)?;
    cx.event(ord, now, &started)?;
    rec.input = Arc::from(&[][..]);
    let key: Arc<str> = Arc::from(rec.id.as_str());
    cx.put(
        key,
        Head {
            ord,
            rec,
            stored: READY,
            latest_id: 0,
            floor: 1,
            pruned: 1,
            prev: None,
        },
    );
    cx.bump = true;
    Ok(Created::New)
}

const CLAIMABLE: &str = "state < 3 \
     AND (lease_worker IS NULL OR lease_expires <= ?1 \
          OR (lease_worker = ?2 AND lease_instance < ?3)) \
     AND (state = 0 \
          OR (state = 2 AND due <= ?1) \
          OR (state = 1 AND (due <= ?1 OR EXISTS \
              (SELECT 1 FROM signals s WHERE s.run = runs.ord AND s.name = runs.signal))))";

fn op_claim(cx: &mut Ctx<'_>, req: ClaimRequest) -> R<ClaimResult> {
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
            Some(_) => format!("SELECT id, workflow FROM runs WHERE {CLAIMABLE} AND id = ?4"),
            None => format!("SELECT id, workflow FROM runs WHERE {CLAIMABLE} ORDER BY ord"),
        };
        let mut stmt = cx.conn.prepare_cached(&sql)?;
        let mut rows = match &req.only {
            Some(only) => stmt.query(params![now_i, &*req.worker, &*req.instance, only])?,
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
        let mut h = cx.head(&id)?;
        let input: Vec<u8> = cx
            .conn
            .prepare_cached("SELECT input FROM runs WHERE ord = ?1")?
            .query_row([h.ord], |r| r.get(0))?;
        // The query picked the run as the claim rules define it; a waiting
        // run consumes the oldest signal it waits for.
        let signal = match &h.rec.state {
            RunState::Waiting { signal, .. } => consume_signal(cx.conn, h.ord, signal)?,
            _ => None,
        };
        let wake = rules::claim_wake(&h.rec.state, signal);
        let lease = rules::claim(&mut h.rec, &req, wake, expires, now);
        cx.save_run(&mut h)?;
        let checkpoint = cx.latest(&mut h)?.map(|l| l.cp.clone());
        let mut run = h.rec.clone();
        run.input = input.into();
        out.claimed.push(Claimed {
            lease,
            run,
            checkpoint,
        });
        cx.put(Arc::from(id.as_str()), h);
    }
    Ok(out)
}

fn op_renew(cx: &mut Ctx<'_>, id: &str, lease: &Lease, ttl: Duration) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    rules::renew(&mut h.rec, from_ts(ts_after(SystemTime::now(), ttl)));
    // One statement: no savepoint.
    cx.save_run(&mut h)?;
    cx.put(Arc::from(id), h);
    Ok(())
}

fn op_release(cx: &mut Ctx<'_>, id: &str, lease: &Lease, how: Release) -> R<()> {
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
    if let Some(event) = rules::release(&mut h.rec, how, now) {
        cx.event(h.ord, now, &event)?;
    }
    cx.save_run(&mut h)?;
    cx.put(Arc::from(id), h);
    cx.bump = true;
    Ok(())
}

fn op_save(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    cp: Arc<CheckpointRecord>,
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
    let (row, located) = checkpoint_row(cx, h.ord, &cp, h.prev.as_ref(), shape, floor, false)?;
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
    cx.put(cp.run.clone(), h);
    Ok(())
}

fn op_take_signal(
    cx: &mut Ctx<'_>,
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

/// The row id of the oldest stored signal `name` of run `ord`.
fn oldest_signal(conn: &Connection, ord: i64, name: &str) -> R<Option<i64>> {
    Ok(conn
        .prepare_cached("SELECT id FROM signals WHERE run = ?1 AND name = ?2 ORDER BY id LIMIT 1")?
        .query_row(params![ord, name], |r| r.get(0))
        .optional()?)
}

/// Deletes signal row `sid` and returns it.
fn delete_signal(conn: &Connection, sid: i64) -> R<SignalRecord> {
    let (name, payload, received_at): (String, Vec<u8>, i64) = conn
        .prepare_cached("DELETE FROM signals WHERE id = ?1 RETURNING name, payload, received_at")?
        .query_row([sid], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(SignalRecord {
        name,
        payload: payload.into(),
        received_at: from_ts(received_at),
    })
}

/// Deletes and returns the oldest stored signal `name` of run `ord`.
fn consume_signal(conn: &Connection, ord: i64, name: &str) -> R<Option<SignalRecord>> {
    match oldest_signal(conn, ord, name)? {
        Some(sid) => delete_signal(conn, sid).map(Some),
        None => Ok(None),
    }
}

fn op_time_out(cx: &mut Ctx<'_>, id: &str, lease: &Lease) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    rules::time_out(&mut h.rec, SystemTime::now());
    // One statement: no savepoint.
    cx.save_run(&mut h)?;
    cx.put(Arc::from(id), h);
    Ok(())
}

fn op_reject(cx: &mut Ctx<'_>, id: &str, lease: &Lease, reason: String) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    cx.begin()?;
    let now = SystemTime::now();
    let latest = cx.latest(&mut h)?.map(|l| l.cp.clone());
    if let Some(event) = rules::reject_signal(&mut h.rec, reason, latest.as_deref(), now) {
        cx.event(h.ord, now, &event)?;
    }
    cx.save_run(&mut h)?;
    cx.put(Arc::from(id), h);
    Ok(())
}

fn op_finish(cx: &mut Ctx<'_>, id: &str, lease: &Lease, outcome: Outcome) -> R<()> {
    let mut h = cx.fenced(id, lease)?;
    cx.begin()?;
    let now = SystemTime::now();
    let event = rules::finish(&mut h.rec, outcome, now);
    cx.save_run(&mut h)?;
    cx.event(h.ord, now, &event)?;
    // A finished run is not written again: its head is not kept.
    cx.bump = true;
    Ok(())
}

fn op_cancel(cx: &mut Ctx<'_>, id: &str) -> R<bool> {
    let mut h = cx.head(id)?;
    if h.rec.state.is_terminal() {
        return Ok(false);
    }
    cx.begin()?;
    let now = SystemTime::now();
    let Some(event) = rules::cancel(&mut h.rec, now) else {
        return Ok(false);
    };
    cx.save_run(&mut h)?;
    cx.event(h.ord, now, &event)?;
    cx.bump = true;
    Ok(true)
}

/// The `ord` of run `id`, from the cache when it is there.
fn ord_of(cx: &Ctx<'_>, id: &str) -> R<i64> {
    match cx.cache.heads.get(id) {
        Some(h) => Ok(h.ord),
        None => run_ord(cx.conn, id),
    }
}

fn op_put_signal(cx: &mut Ctx<'_>, id: &str, name: &str, payload: &[u8]) -> R<()> {
    let ord = ord_of(cx, id)?;
    cx.begin()?;
    let now = SystemTime::now();
    cx.conn
        .prepare_cached(
            "INSERT INTO signals (run, name, payload, received_at) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![ord, name, payload, ts(now)])?;
    cx.event(
        ord,
        now,
        &Event::SignalReceived {
            name: name.to_owned(),
        },
    )?;
    cx.bump = true;
    Ok(())
}

fn op_append_event(cx: &mut Ctx<'_>, id: &str, event: &Event) -> R<()> {
    let ord = ord_of(cx, id)?;
    // One statement: no savepoint.
    cx.event(ord, SystemTime::now(), event)
}

fn op_fork(cx: &mut Ctx<'_>, from: &str, seq: u64, new_id: &str) -> R<()> {
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
    let (mut rec, copy, forked) = rules::fork(from, &cp, new_id, workflow, input.into(), now);
    cx.event(src_ord, now, &forked)?;
    let id = copy.run.clone();
    let ord = insert_run(cx.conn, &rec)?;
    let copy = Arc::new(copy);
    let shape = cx.shape_id(&copy)?;
    let (row, located) = checkpoint_row(cx, ord, &copy, None, shape, 1, true)?;
    let latest_id = row.id;
    cx.cache.deferred.push_row(row);
    cx.cache.deferred.push_head(HeadUpdate {
        run: ord,
        latest: latest_id,
        pruned: 1,
    });
    cx.event(ord, now, &forked)?;
    rec.input = Arc::from(&[][..]);
    let stored = state_code(&rec.state);
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
        },
    );
    cx.bump = true;
    Ok(())
}

// ---------------------------------------------------------------------------
// Reads (each runs in one read transaction on a reader connection)

fn read_list_runs(conn: &Connection, filter: &RunFilter) -> R<Vec<RunRecord>> {
    // A completed run with an `Err` output counts as failed.
    let sql = format!(
        "{RUN_SELECT} \
         WHERE (?1 IS NULL OR r.workflow = ?1) \
           AND (?2 IS NULL OR substr(r.id, 1, length(?2)) = ?2) \
           AND (?3 IS NULL OR (CASE WHEN r.state = {COMPLETED} AND r.error IS NOT NULL \
                                    THEN {FAILED} ELSE r.state END) = ?3) \
         ORDER BY r.ord LIMIT ?4"
    );
    let limit = filter
        .limit
        .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
    let raws: Vec<RawRun> = conn
        .prepare_cached(&sql)?
        .query_map(
            params![
                filter.workflow,
                filter.id_prefix,
                filter.status.map(status_code),
                limit
            ],
            RawRun::from_full_row,
        )?
        .collect::<rusqlite::Result<_>>()?;
    raws.into_iter()
        .map(|r| r.into_record().map(|(_, rec)| rec))
        .collect()
}

fn read_signals(conn: &Connection, id: &str) -> R<Vec<SignalRecord>> {
    let ord = run_ord(conn, id)?;
    let rows: Vec<(String, Vec<u8>, i64)> = conn
        .prepare_cached(
            "SELECT name, payload, received_at FROM signals WHERE run = ?1 ORDER BY id",
        )?
        .query_map([ord], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows
        .into_iter()
        .map(|(name, payload, at)| SignalRecord {
            name,
            payload: payload.into(),
            received_at: from_ts(at),
        })
        .collect())
}

fn read_latest(conn: &Connection, id: &str) -> R<Option<Arc<CheckpointRecord>>> {
    let ord = run_ord(conn, id)?;
    Ok(load_latest(conn, ord, &Arc::from(id))?.map(|l| l.cp))
}

fn read_checkpoint(conn: &Connection, id: &str, seq: u64) -> R<Option<Arc<CheckpointRecord>>> {
    let ord = run_ord(conn, id)?;
    let kept = match read_head(conn, ord)? {
        Some((_, latest, floor)) => (floor..=latest).contains(&seq),
        None => false,
    };
    if !kept {
        return Ok(None);
    }
    Ok(load_seq(conn, ord, &Arc::from(id), seq)?.map(|l| l.cp))
}

fn read_checkpoints(conn: &Connection, id: &str) -> R<Vec<Arc<CheckpointRecord>>> {
    let ord = run_ord(conn, id)?;
    let Some((latest, _, floor)) = read_head(conn, ord)? else {
        return Ok(Vec::new());
    };
    let run: Arc<str> = Arc::from(id);
    let rows: Vec<CpRow> = conn
        .prepare_cached(&format!(
            "{WALK} SELECT {CP_COLS} FROM walk w JOIN checkpoints c ON c.id = w.id \
             JOIN shapes s ON s.id = c.shape WHERE c.seq >= ?2 ORDER BY c.seq"
        ))?
        .query_map(params![latest, to_i64(floor, "seq")?], CpRow::from_row)?
        .collect::<rusqlite::Result<_>>()?;
    let mut sources = Sources::default();
    rows.into_iter()
        .map(|row| decode_checkpoint(conn, ord, &run, row, &mut sources).map(|l| l.cp))
        .collect()
}

/// `(at, event JSON)` of a `history` row, or `(at, seq, shape)` of a
/// checkpoint row.
type HistoryRow = (i64, Option<String>, Option<i64>, Option<i64>);

fn read_history(conn: &Connection, id: &str) -> R<Vec<HistoryEntry>> {
    let ord = run_ord(conn, id)?;
    // `CheckpointSaved` events are the checkpoint rows (kept, hidden or stubs).
    let latest: Option<i64> = conn
        .prepare_cached("SELECT latest FROM heads WHERE run = ?1")?
        .query_row([ord], |r| r.get(0))
        .optional()?
        .flatten();
    let rows: Vec<HistoryRow> = conn
        .prepare_cached(&format!(
            "{WALK} SELECT id, at, event, NULL, NULL FROM history WHERE run = ?3 \
             UNION ALL \
             SELECT c.id, c.created_at, NULL, c.seq, c.shape \
             FROM walk w JOIN checkpoints c ON c.id = w.id WHERE c.quiet IS NULL \
             ORDER BY 1"
        ))?
        .query_map(params![latest, 0, ord], |r| {
            Ok((r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut labels: HashMap<i64, Option<String>> = HashMap::new();
    let mut out = Vec::with_capacity(rows.len());
    for (at, event, seq, shape) in rows {
        let event = match (event, seq, shape) {
            (Some(event), _, _) => serde_json::from_str(&event)
                .map_err(|e| corrupt(format_args!("run `{id}`: undecodable history event: {e}")))?,
            (None, Some(seq), Some(shape)) => {
                let label = match labels.get(&shape) {
                    Some(label) => label.clone(),
                    None => {
                        let body: Vec<u8> = conn
                            .prepare_cached("SELECT body FROM shapes WHERE id = ?1")?
                            .query_row([shape], |r| r.get(0))?;
                        let s: Shape<'_> = postcard::from_bytes(&body)
                            .map_err(|_| corrupt(format_args!("shape {shape} is undecodable")))?;
                        let label = s.label.map(Cow::into_owned);
                        labels.insert(shape, label.clone());
                        label
                    }
                };
                Event::CheckpointSaved {
                    seq: to_u64(seq, "seq")?,
                    label,
                }
            }
            _ => return Err(corrupt(format_args!("run `{id}`: bad history row"))),
        };
        out.push(HistoryEntry {
            at: from_ts(at),
            event,
        });
    }
    Ok(out)
}

fn read_next_wakeup(conn: &Connection) -> R<Option<SystemTime>> {
    let t: Option<i64> = conn
        .prepare_cached(&format!(
            "SELECT min(CASE WHEN lease_worker IS NOT NULL THEN lease_expires \
                             WHEN state IN ({WAITING}, {SLEEPING}) THEN due END) \
             FROM runs WHERE state < 3"
        ))?
        .query_row([], |r| r.get(0))?;
    Ok(t.map(from_ts))
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

    fn claim<'a>(&'a self, req: &'a ClaimRequest) -> BoxFuture<'a, Result<ClaimResult, Error>> {
        let req = req.clone();
        self.write(move |cx| op_claim(cx, req))
    }

    fn renew<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), Error>> {
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
        self.write_deferred(move |cx| op_save(cx, &lease, checkpoint, keep))
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

    fn next_wakeup(&self) -> BoxFuture<'_, Result<Option<SystemTime>, Error>> {
        self.read(read_next_wakeup)
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
}

#[cfg(test)]
mod tests;
