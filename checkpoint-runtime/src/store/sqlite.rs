//! The SQLite backend: one file, durable, shareable by several processes on
//! one machine.
//!
//! # Layout
//!
//! - **Connections.** One writer connection lives on a dedicated thread fed by
//!   a channel; two reader connections live on their own threads. A poller
//!   thread watches `PRAGMA data_version` to notice commits made by other
//!   processes. No SQLite call ever runs on an async executor thread.
//! - **Group commit.** The writer takes every queued write request, opens one
//!   `BEGIN IMMEDIATE` transaction, applies each request inside its own
//!   `SAVEPOINT` (a failing request is rolled back alone), commits once with
//!   `synchronous=FULL`, and only then answers the requests. Concurrent runs
//!   therefore share one fsync while each call still returns only once durable.
//! - **Cross-process coordination** goes through the database only: claims,
//!   leases and fencing epochs are read and written inside the writer's
//!   `IMMEDIATE` transaction, so two processes never both claim a run.
//! - **Checkpoint storage.** A checkpoint row holds the metadata and, per
//!   field, a reference `(chunk id, offset, len)` into a `chunks` row of the
//!   same run. A checkpoint's own chunk holds only the bytes of the fields that
//!   changed since the run's previous checkpoint; an unchanged field points at
//!   the chunk that already holds its bytes. Chunks carry a reference count
//!   (the number of stored checkpoints pointing into them), so retention can
//!   delete old checkpoints without ever dropping bytes a kept one still uses.
//!   Field names and types are interned in `layouts` (one row per distinct
//!   field list), so they are not repeated in every checkpoint.
//! - **History** rows are appended in one global order and chained per run
//!   (`prev`, `runs.last_event`), so the events of a group commit share pages.
//! - **Schema versions** live in `PRAGMA user_version`; `MIGRATIONS` (in this
//!   file) lists one function per version, applied in order on open.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};
use tokio::sync::{oneshot, watch};

use super::{
    CheckpointRecord, ClaimRequest, ClaimResult, Claimed, Created, FieldRecord, Lease, LeaseInfo,
    NewRun, Outcome, Release, RunRecord, RunState, SignalRecord, Store, Suspend, Wake, WakeValue,
};
use crate::history::{Event, HistoryEntry};
use crate::status::{RunFilter, StatusKind};
use crate::Error;

/// How long one SQLite call waits for a lock held by another connection.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a transaction is retried (with backoff) while the database stays
/// busy or locked, before the error is returned.
const BUSY_RETRY_FOR: Duration = Duration::from_secs(60);
/// At most this many write requests share one transaction.
const MAX_BATCH: usize = 4096;
/// The writer connection's page cache, in KiB.
const WRITER_CACHE_KIB: i64 = 32 << 10;
/// Reader threads (each with its own connection).
const READERS: usize = 2;
/// How often the poller looks for commits by other processes.
const POLL_EVERY: Duration = Duration::from_millis(200);
/// The writer keeps the latest checkpoint of at most this many runs in memory
/// (to compare fields against without reading them back) ...
const CACHE_RUNS: usize = 4096;
/// ... holding at most this many bytes of checkpoint data.
const CACHE_BYTES: usize = 32 << 20;

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
        -- Times are nanoseconds since the Unix epoch.
        CREATE TABLE runs (
            ord            INTEGER PRIMARY KEY AUTOINCREMENT,
            id             TEXT    NOT NULL UNIQUE,
            workflow       TEXT    NOT NULL,
            input          BLOB    NOT NULL,
            state          INTEGER NOT NULL,
            signal         TEXT,
            due            INTEGER,
            output         BLOB,
            error          TEXT,
            lease_worker   TEXT,
            lease_instance TEXT,
            lease_expires  INTEGER,
            epoch          INTEGER NOT NULL DEFAULT 0,
            attempt        INTEGER NOT NULL DEFAULT 0,
            latest_seq     INTEGER NOT NULL DEFAULT 0,
            wake_seq       INTEGER,
            wake_signal    TEXT,
            wake_payload   BLOB,
            created_at     INTEGER NOT NULL,
            updated_at     INTEGER NOT NULL,
            last_event     INTEGER
        );
        CREATE INDEX runs_active ON runs (ord) WHERE state < 3;

        -- Interned field lists: postcard Vec<(name, type name)>.
        CREATE TABLE layouts (
            id   INTEGER PRIMARY KEY,
            body BLOB NOT NULL UNIQUE
        );

        -- Checkpoint metadata; `refs` is postcard `StoredRefs`: where each
        -- field's bytes are (chunk id, offset, len).
        CREATE TABLE checkpoints (
            run        INTEGER NOT NULL REFERENCES runs (ord),
            seq        INTEGER NOT NULL,
            site_key   TEXT    NOT NULL,
            label      TEXT,
            site_index INTEGER NOT NULL,
            loops      BLOB,
            suspend    TEXT,
            layout     INTEGER NOT NULL REFERENCES layouts (id),
            refs       BLOB    NOT NULL,
            size       INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (run, seq)
        ) WITHOUT ROWID;

        -- Field bytes first stored by a checkpoint of run `run`; `refs`
        -- counts the stored checkpoints that point into this chunk. New
        -- chunks append to the table's last page, which concurrent saves in
        -- one group commit share.
        CREATE TABLE chunks (
            id   INTEGER PRIMARY KEY,
            run  INTEGER NOT NULL REFERENCES runs (ord),
            refs INTEGER NOT NULL,
            data BLOB    NOT NULL
        );

        -- Signals not yet consumed, in arrival order.
        CREATE TABLE signals (
            id          INTEGER PRIMARY KEY,
            run         INTEGER NOT NULL REFERENCES runs (ord),
            name        TEXT    NOT NULL,
            payload     BLOB    NOT NULL,
            received_at INTEGER NOT NULL
        );
        CREATE INDEX signals_by_run ON signals (run, name, id);

        -- The append-only history; `event` is the Event as JSON. Rows are
        -- appended in one global order (concurrent runs' events share
        -- pages) and chained per run: `prev` is the run's previous event,
        -- `runs.last_event` its latest.
        CREATE TABLE history (
            id    INTEGER PRIMARY KEY,
            run   INTEGER NOT NULL REFERENCES runs (ord),
            prev  INTEGER,
            at    INTEGER NOT NULL,
            event TEXT    NOT NULL
        );
        "#,
    )
}

// State codes of `runs.state`.
const READY: i64 = 0;
const WAITING: i64 = 1;
const SLEEPING: i64 = 2;
const COMPLETED: i64 = 3;
const FAILED: i64 = 4;
const CANCELLED: i64 = 5;

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

/// Nanoseconds since the Unix epoch (saturating; negative before it).
fn ts(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos())
            .map(|n| -n)
            .unwrap_or(i64::MIN),
    }
}

fn from_ts(n: i64) -> SystemTime {
    let d = Duration::from_nanos(n.unsigned_abs());
    let t = if n >= 0 {
        UNIX_EPOCH.checked_add(d)
    } else {
        UNIX_EPOCH.checked_sub(d)
    };
    t.unwrap_or(UNIX_EPOCH)
}

fn dur_nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn to_i64(v: u64, what: &str) -> R<i64> {
    i64::try_from(v).map_err(|_| Fail::from(Error::internal(format!("{what} {v} is too large"))))
}

fn to_u64(v: i64, what: &str) -> R<u64> {
    u64::try_from(v).map_err(|_| corrupt(format_args!("negative {what} {v}")))
}

fn to_json<T: Serialize>(v: &T) -> R<String> {
    serde_json::to_string(v)
        .map_err(|e| Fail::from(Error::internal(format!("cannot encode for the store: {e}"))))
}

fn to_postcard<T: Serialize + ?Sized>(v: &T) -> R<Vec<u8>> {
    postcard::to_allocvec(v)
        .map_err(|e| Fail::from(Error::internal(format!("cannot encode for the store: {e}"))))
}

// ---------------------------------------------------------------------------
// Runs

/// The columns of [`RawRun`], in order. `input` is left out of fenced reads.
const RUN_COLS: &str = "ord, id, workflow, input, state, signal, due, output, error, \
     lease_worker, lease_instance, lease_expires, epoch, attempt, latest_seq, \
     wake_seq, wake_signal, wake_payload, created_at, updated_at";
const RUN_COLS_NO_INPUT: &str = "ord, id, workflow, x'', state, signal, due, output, error, \
     lease_worker, lease_instance, lease_expires, epoch, attempt, latest_seq, \
     wake_seq, wake_signal, wake_payload, created_at, updated_at";

struct RawRun {
    ord: i64,
    id: String,
    workflow: String,
    input: Vec<u8>,
    state: i64,
    signal: Option<String>,
    due: Option<i64>,
    output: Option<Vec<u8>>,
    error: Option<String>,
    lease_worker: Option<String>,
    lease_instance: Option<String>,
    lease_expires: Option<i64>,
    epoch: i64,
    attempt: i64,
    latest_seq: i64,
    wake_seq: Option<i64>,
    wake_signal: Option<String>,
    wake_payload: Option<Vec<u8>>,
    created_at: i64,
    updated_at: i64,
}

impl RawRun {
    fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
        Ok(RawRun {
            ord: r.get(0)?,
            id: r.get(1)?,
            workflow: r.get(2)?,
            input: r.get(3)?,
            state: r.get(4)?,
            signal: r.get(5)?,
            due: r.get(6)?,
            output: r.get(7)?,
            error: r.get(8)?,
            lease_worker: r.get(9)?,
            lease_instance: r.get(10)?,
            lease_expires: r.get(11)?,
            epoch: r.get(12)?,
            attempt: r.get(13)?,
            latest_seq: r.get(14)?,
            wake_seq: r.get(15)?,
            wake_signal: r.get(16)?,
            wake_payload: r.get(17)?,
            created_at: r.get(18)?,
            updated_at: r.get(19)?,
        })
    }

    fn into_record(self) -> R<(i64, RunRecord)> {
        let state = match self.state {
            READY => RunState::Ready,
            WAITING => RunState::Waiting {
                signal: self.signal.ok_or_else(|| {
                    corrupt(format_args!("run `{}` waits for no signal", self.id))
                })?,
                deadline: self.due.map(from_ts),
            },
            SLEEPING => RunState::Sleeping {
                until: from_ts(
                    self.due
                        .ok_or_else(|| corrupt(format_args!("run `{}` sleeps forever", self.id)))?,
                ),
            },
            COMPLETED => RunState::Completed {
                output: self.output.unwrap_or_default().into(),
                error: self.error,
            },
            FAILED => {
                let text = self.error.unwrap_or_default();
                // The runtime's error as JSON; an error this build does not
                // know (a newer version wrote it) is kept as text.
                let error = serde_json::from_str(&text).unwrap_or(Error::Store { message: text });
                RunState::Failed { error }
            }
            CANCELLED => RunState::Cancelled,
            other => return Err(corrupt(format_args!("run `{}` has state {other}", self.id))),
        };
        let lease = match (self.lease_worker, self.lease_instance) {
            (Some(worker), Some(instance)) => Some(LeaseInfo {
                worker,
                instance,
                expires_at: from_ts(self.lease_expires.unwrap_or(0)),
            }),
            _ => None,
        };
        let wake = match self.wake_seq {
            None => None,
            Some(seq) => Some(Wake {
                seq: to_u64(seq, "wake seq")?,
                value: match self.wake_signal {
                    Some(name) => WakeValue::Signal {
                        name,
                        payload: self.wake_payload.unwrap_or_default().into(),
                    },
                    None => WakeValue::TimedOut,
                },
            }),
        };
        let rec = RunRecord {
            id: self.id,
            workflow: self.workflow,
            input: self.input.into(),
            state,
            lease,
            epoch: to_u64(self.epoch, "epoch")?,
            attempt: u32::try_from(self.attempt).unwrap_or(u32::MAX),
            latest_seq: to_u64(self.latest_seq, "seq")?,
            wake,
            created_at: from_ts(self.created_at),
            updated_at: from_ts(self.updated_at),
        };
        Ok((self.ord, rec))
    }
}

/// Loads a run by id, with or without its input.
fn fetch_run(conn: &Connection, id: &str, input: bool) -> R<Option<(i64, RunRecord)>> {
    let sql = if input {
        format!("SELECT {RUN_COLS} FROM runs WHERE id = ?1")
    } else {
        format!("SELECT {RUN_COLS_NO_INPUT} FROM runs WHERE id = ?1")
    };
    let raw = conn
        .prepare_cached(&sql)?
        .query_row([id], RawRun::from_row)
        .optional()?;
    raw.map(RawRun::into_record).transpose()
}

fn run_ord(conn: &Connection, id: &str) -> R<i64> {
    conn.prepare_cached("SELECT ord FROM runs WHERE id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .ok_or_else(|| Fail::from(Error::unknown_run(id)))
}

/// The state columns `(state, signal, due, output, error)` of a run state.
type StateCols<'a> = (
    i64,
    Option<&'a str>,
    Option<i64>,
    Option<&'a [u8]>,
    Option<String>,
);

fn state_code(state: &RunState) -> i64 {
    match state {
        RunState::Ready => READY,
        RunState::Waiting { .. } => WAITING,
        RunState::Sleeping { .. } => SLEEPING,
        RunState::Completed { .. } => COMPLETED,
        RunState::Failed { .. } => FAILED,
        RunState::Cancelled => CANCELLED,
    }
}

fn state_cols(state: &RunState) -> R<StateCols<'_>> {
    Ok(match state {
        RunState::Ready => (READY, None, None, None, None),
        RunState::Waiting { signal, deadline } => {
            (WAITING, Some(signal.as_str()), deadline.map(ts), None, None)
        }
        RunState::Sleeping { until } => (SLEEPING, None, Some(ts(*until)), None, None),
        RunState::Completed { output, error } => {
            (COMPLETED, None, None, Some(&output[..]), error.clone())
        }
        RunState::Failed { error } => (FAILED, None, None, None, Some(to_json(error)?)),
        RunState::Cancelled => (CANCELLED, None, None, None, None),
    })
}

/// Writes every mutable column of `rec` back to run `ord`, whose state code
/// was `before`. The `state` column is left alone when it does not change, so
/// that the index of active runs is not rewritten on every checkpoint.
fn write_run(conn: &Connection, ord: i64, rec: &RunRecord, before: i64) -> R<()> {
    let (state, signal, due, output, error) = state_cols(&rec.state)?;
    let (lw, li, le) = match &rec.lease {
        Some(l) => (
            Some(l.worker.as_str()),
            Some(l.instance.as_str()),
            Some(ts(l.expires_at)),
        ),
        None => (None, None, None),
    };
    let (wseq, wsig, wpay) = match &rec.wake {
        None => (None, None, None),
        Some(w) => match &w.value {
            WakeValue::Signal { name, payload } => (
                Some(to_i64(w.seq, "seq")?),
                Some(name.as_str()),
                Some(&payload[..]),
            ),
            WakeValue::TimedOut => (Some(to_i64(w.seq, "seq")?), None, None),
        },
    };
    let sql = if state == before {
        "UPDATE runs SET signal = ?3, due = ?4, output = ?5, error = ?6, \
         lease_worker = ?7, lease_instance = ?8, lease_expires = ?9, epoch = ?10, \
         attempt = ?11, latest_seq = ?12, wake_seq = ?13, wake_signal = ?14, \
         wake_payload = ?15, updated_at = ?16 WHERE ord = ?1 AND state = ?2"
    } else {
        "UPDATE runs SET state = ?2, signal = ?3, due = ?4, output = ?5, error = ?6, \
         lease_worker = ?7, lease_instance = ?8, lease_expires = ?9, epoch = ?10, \
         attempt = ?11, latest_seq = ?12, wake_seq = ?13, wake_signal = ?14, \
         wake_payload = ?15, updated_at = ?16 WHERE ord = ?1"
    };
    let n = conn.prepare_cached(sql)?.execute(params![
        ord,
        state,
        signal,
        due,
        output,
        error,
        lw,
        li,
        le,
        to_i64(rec.epoch, "epoch")?,
        i64::from(rec.attempt),
        to_i64(rec.latest_seq, "seq")?,
        wseq,
        wsig,
        wpay,
        ts(rec.updated_at),
    ])?;
    if n != 1 {
        return Err(
            Error::internal(format!("run `{}` changed under its transaction", rec.id)).into(),
        );
    }
    Ok(())
}

/// Inserts a new run (no lease, no wake value); returns its `ord`.
fn insert_run(conn: &Connection, rec: &RunRecord) -> R<i64> {
    let (state, signal, due, output, error) = state_cols(&rec.state)?;
    conn.prepare_cached(
        "INSERT INTO runs (id, workflow, input, state, signal, due, output, error, epoch, \
         attempt, latest_seq, created_at, updated_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(params![
        rec.id,
        rec.workflow,
        &rec.input[..],
        state,
        signal,
        due,
        output,
        error,
        to_i64(rec.epoch, "epoch")?,
        i64::from(rec.attempt),
        to_i64(rec.latest_seq, "seq")?,
        ts(rec.created_at),
        ts(rec.updated_at),
    ])?;
    Ok(conn.last_insert_rowid())
}

fn add_event(conn: &Connection, ord: i64, at: SystemTime, event: &Event) -> R<()> {
    let n = conn
        .prepare_cached(
            "INSERT INTO history (run, prev, at, event) \
             SELECT ?1, last_event, ?2, ?3 FROM runs WHERE ord = ?1",
        )?
        .execute(params![ord, ts(at), to_json(event)?])?;
    if n != 1 {
        return Err(corrupt(format_args!("run {ord} vanished")));
    }
    conn.prepare_cached("UPDATE runs SET last_event = ?2 WHERE ord = ?1")?
        .execute(params![ord, conn.last_insert_rowid()])?;
    Ok(())
}

/// The fencing check of [`MemoryStore`](super::MemoryStore), on the stored run.
fn fenced(conn: &Connection, id: &str, lease: &Lease) -> R<(i64, RunRecord)> {
    let (ord, rec) = fetch_run(conn, id, false)?.ok_or_else(|| Error::unknown_run(id))?;
    if matches!(rec.state, RunState::Cancelled) {
        return Err(Error::Cancelled { run: id.to_owned() }.into());
    }
    let holds = rec.epoch == lease.epoch
        && !rec.state.is_terminal()
        && rec
            .lease
            .as_ref()
            .is_some_and(|l| *l.instance == *lease.instance && *l.worker == *lease.worker);
    if !holds {
        return Err(Error::LeaseLost {
            run: id.to_owned(),
            worker: lease.worker.to_string(),
        }
        .into());
    }
    Ok((ord, rec))
}

fn describe_suspension(state: &RunState) -> String {
    match state {
        RunState::Waiting {
            signal,
            deadline: None,
        } => format!("waiting for signal `{signal}`"),
        RunState::Waiting {
            signal,
            deadline: Some(d),
        } => match d.duration_since(SystemTime::now()) {
            Ok(left) => format!(
                "waiting for signal `{signal}` (times out in {:.3}s)",
                left.as_secs_f64()
            ),
            Err(_) => format!("waiting for signal `{signal}` (deadline passed)"),
        },
        RunState::Sleeping { until } => match until.duration_since(SystemTime::now()) {
            Ok(left) => format!("sleeping for {:.3}s", left.as_secs_f64()),
            Err(_) => "sleeping (timer due)".to_owned(),
        },
        other => format!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Checkpoints

/// Where one field's bytes are: `(chunk id, offset in the chunk, len)`.
/// Empty fields are `(0, 0, 0)` (chunk ids start at 1).
type Loc = (u64, u64, u64);

/// The `checkpoints.refs` column.
#[derive(Serialize, Deserialize)]
struct StoredRefs {
    /// When the record's data is not the plain concatenation of its fields,
    /// the whole data is stored as chunk `raw` (0: empty) and each `Loc`
    /// offset is the field's offset in it.
    raw: Option<u64>,
    fields: Vec<Loc>,
}

impl StoredRefs {
    /// The chunks (by id) this checkpoint holds a reference to.
    fn chunks(&self) -> BTreeSet<u64> {
        match self.raw {
            Some(0) => BTreeSet::new(),
            Some(id) => BTreeSet::from([id]),
            None => self
                .fields
                .iter()
                .filter(|(_, _, len)| *len > 0)
                .map(|(id, _, _)| *id)
                .collect(),
        }
    }
}

/// A stored checkpoint together with where its fields' bytes live.
struct Located {
    cp: Arc<CheckpointRecord>,
    locs: Vec<Loc>,
}

const CP_COLS: &str = "c.seq, c.site_key, c.label, c.site_index, c.loops, c.suspend, c.refs, \
                       c.size, c.created_at, l.body";

struct CpRow {
    seq: i64,
    site_key: String,
    label: Option<String>,
    site_index: i64,
    loops: Option<Vec<u8>>,
    suspend: Option<String>,
    refs: Vec<u8>,
    size: i64,
    created_at: i64,
    layout: Vec<u8>,
}

impl CpRow {
    fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<CpRow> {
        Ok(CpRow {
            seq: r.get(0)?,
            site_key: r.get(1)?,
            label: r.get(2)?,
            site_index: r.get(3)?,
            loops: r.get(4)?,
            suspend: r.get(5)?,
            refs: r.get(6)?,
            size: r.get(7)?,
            created_at: r.get(8)?,
            layout: r.get(9)?,
        })
    }
}

/// Chunk bytes read so far in one operation, by chunk id.
type Chunks = HashMap<u64, Vec<u8>>;

fn chunk<'c>(conn: &Connection, ord: i64, id: u64, chunks: &'c mut Chunks) -> R<&'c [u8]> {
    if let std::collections::hash_map::Entry::Vacant(slot) = chunks.entry(id) {
        let data: Vec<u8> = conn
            .prepare_cached("SELECT data FROM chunks WHERE id = ?1 AND run = ?2")?
            .query_row(params![to_i64(id, "chunk id")?, ord], |r| r.get(0))
            .optional()?
            .ok_or_else(|| corrupt(format_args!("chunk {id} of run {ord} is missing")))?;
        slot.insert(data);
    }
    chunks
        .get(&id)
        .map(Vec::as_slice)
        .ok_or_else(|| corrupt("chunk vanished"))
}

/// Rebuilds a checkpoint record from its row and chunks.
fn decode_checkpoint(
    conn: &Connection,
    ord: i64,
    run: &Arc<str>,
    row: CpRow,
    chunks: &mut Chunks,
) -> R<Located> {
    let seq = to_u64(row.seq, "seq")?;
    let bad = |what: &str| corrupt(format_args!("checkpoint #{seq} of run `{run}`: {what}"));
    let layout: Vec<(String, String)> =
        postcard::from_bytes(&row.layout).map_err(|_| bad("undecodable field list"))?;
    let refs: StoredRefs =
        postcard::from_bytes(&row.refs).map_err(|_| bad("undecodable field references"))?;
    if layout.len() != refs.fields.len() {
        return Err(bad("field list and references differ in length"));
    }
    let size = usize::try_from(row.size).map_err(|_| bad("bad size"))?;
    let mut fields = Vec::with_capacity(layout.len());
    let data = if let Some(raw) = refs.raw {
        let data = if raw != 0 {
            chunk(conn, ord, raw, chunks)?.to_vec()
        } else {
            Vec::new()
        };
        for ((name, type_name), &(_, off, len)) in layout.into_iter().zip(&refs.fields) {
            fields.push(FieldRecord {
                name: Cow::Owned(name),
                type_name: Cow::Owned(type_name),
                offset: usize::try_from(off).map_err(|_| bad("bad offset"))?,
                len: usize::try_from(len).map_err(|_| bad("bad length"))?,
            });
        }
        data
    } else {
        let mut data = Vec::with_capacity(size);
        for ((name, type_name), &(cid, off, len)) in layout.into_iter().zip(&refs.fields) {
            let offset = data.len();
            if len > 0 {
                let bytes = chunk(conn, ord, cid, chunks)?;
                let start = usize::try_from(off).map_err(|_| bad("bad offset"))?;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|l| start.checked_add(l))
                    .ok_or_else(|| bad("bad length"))?;
                let slice = bytes
                    .get(start..end)
                    .ok_or_else(|| bad("field reference out of its chunk"))?;
                data.extend_from_slice(slice);
            }
            fields.push(FieldRecord {
                name: Cow::Owned(name),
                type_name: Cow::Owned(type_name),
                offset,
                len: data.len() - offset,
            });
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
    let cp = CheckpointRecord::new(
        run.clone(),
        seq,
        Cow::Owned(row.site_key),
        row.label.map(Cow::Owned),
        u32::try_from(row.site_index).map_err(|_| bad("bad site index"))?,
        loops,
        fields,
        data,
        suspend,
        from_ts(row.created_at),
    );
    Ok(Located {
        cp: Arc::new(cp),
        locs: refs.fields,
    })
}

fn load_checkpoint(conn: &Connection, ord: i64, run: &Arc<str>, seq: u64) -> R<Option<Located>> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {CP_COLS} FROM checkpoints c JOIN layouts l ON l.id = c.layout \
             WHERE c.run = ?1 AND c.seq = ?2"
        ))?
        .query_row(params![ord, to_i64(seq, "seq")?], CpRow::from_row)
        .optional()?;
    match row {
        None => Ok(None),
        Some(row) => decode_checkpoint(conn, ord, run, row, &mut Chunks::new()).map(Some),
    }
}

fn latest_seq_stored(conn: &Connection, ord: i64) -> R<Option<u64>> {
    let seq: Option<i64> = conn
        .prepare_cached("SELECT max(seq) FROM checkpoints WHERE run = ?1")?
        .query_row([ord], |r| r.get(0))?;
    seq.map(|s| to_u64(s, "seq")).transpose()
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

/// Stores `cp` as checkpoint `cp.seq` of run `ord`, sharing the bytes of
/// fields that equal the same field of `prev` (the run's previous checkpoint).
/// Returns where each field's bytes are.
fn insert_checkpoint(
    cx: &mut Ctx<'_>,
    ord: i64,
    cp: &CheckpointRecord,
    prev: Option<&Located>,
) -> R<Vec<Loc>> {
    /// Stands for the new chunk's id until it is known.
    const OWN: u64 = 0;
    let tiled = is_tiled(cp);
    let mut own: Vec<u8> = Vec::new();
    let mut locs: Vec<Loc> = Vec::with_capacity(cp.fields.len());
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
                Some(loc) => locs.push(loc),
                None => {
                    locs.push((OWN, own.len() as u64, bytes.len() as u64));
                    own.extend_from_slice(bytes);
                }
            }
        }
    } else {
        own.extend_from_slice(&cp.data);
        for f in &cp.fields {
            locs.push((OWN, f.offset as u64, f.len as u64));
        }
    }
    let mut own_id = 0;
    if !own.is_empty() {
        cx.conn
            .prepare_cached("INSERT INTO chunks (run, refs, data) VALUES (?1, 1, ?2)")?
            .execute(params![ord, own])?;
        own_id = to_u64(cx.conn.last_insert_rowid(), "chunk id")?;
    }
    for loc in &mut locs {
        if loc.0 == OWN && (loc.2 > 0 || !tiled) {
            loc.0 = own_id;
        }
    }
    let refs = StoredRefs {
        raw: (!tiled).then_some(own_id),
        fields: locs,
    };
    for cid in refs.chunks() {
        if cid == own_id {
            continue;
        }
        let n = cx
            .conn
            .prepare_cached("UPDATE chunks SET refs = refs + 1 WHERE id = ?1 AND run = ?2")?
            .execute(params![to_i64(cid, "chunk id")?, ord])?;
        if n != 1 {
            return Err(corrupt(format_args!(
                "chunk {cid} of run `{}` is missing",
                cp.run
            )));
        }
    }
    let layout = cx.layout_id(cp)?;
    let loops = if cp.loops.is_empty() {
        None
    } else {
        Some(to_postcard(&cp.loops)?)
    };
    let suspend = cp.suspend.as_ref().map(to_json).transpose()?;
    cx.conn
        .prepare_cached(
            "INSERT INTO checkpoints (run, seq, site_key, label, site_index, loops, suspend, \
             layout, refs, size, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )?
        .execute(params![
            ord,
            to_i64(cp.seq, "seq")?,
            cp.site_key.as_ref(),
            cp.label.as_deref(),
            i64::from(cp.site_index),
            loops,
            suspend,
            layout,
            to_postcard(&refs)?,
            cp.data.len() as i64,
            ts(cp.created_at),
        ])?;
    Ok(refs.fields)
}

/// Deletes the checkpoints of run `ord` up to `upto` (inclusive), and the
/// chunks no remaining checkpoint refers to.
fn prune(conn: &Connection, ord: i64, upto: u64) -> R<()> {
    let upto = to_i64(upto, "seq")?;
    let doomed: Vec<(i64, Vec<u8>)> = conn
        .prepare_cached("SELECT seq, refs FROM checkpoints WHERE run = ?1 AND seq <= ?2")?
        .query_map(params![ord, upto], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    if doomed.is_empty() {
        return Ok(());
    }
    for (seq, refs) in doomed {
        let refs: StoredRefs = postcard::from_bytes(&refs).map_err(|_| {
            corrupt(format_args!(
                "checkpoint #{seq} of run {ord}: undecodable field references"
            ))
        })?;
        for cid in refs.chunks() {
            let cid = to_i64(cid, "chunk id")?;
            conn.prepare_cached("UPDATE chunks SET refs = refs - 1 WHERE id = ?1")?
                .execute([cid])?;
            conn.prepare_cached("DELETE FROM chunks WHERE id = ?1 AND refs <= 0")?
                .execute([cid])?;
        }
    }
    conn.prepare_cached("DELETE FROM checkpoints WHERE run = ?1 AND seq <= ?2")?
        .execute(params![ord, upto])?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The writer

/// What the writer remembers across transactions. Everything here is either
/// immutable once committed (layouts, a run's checkpoint `seq`) or checked
/// against the database before use, and is rolled back with the transaction.
#[derive(Default)]
struct Cache {
    /// Interned field lists: body -> `layouts.id`.
    layouts: HashMap<Vec<u8>, i64>,
    /// The latest checkpoint this writer stored, per run `ord`.
    latest: HashMap<i64, Located>,
    latest_bytes: usize,
    /// Entries added by the open transaction (undone if it rolls back).
    new_layouts: Vec<Vec<u8>>,
    touched: Vec<i64>,
}

impl Cache {
    fn mark(&self) -> (usize, usize) {
        (self.new_layouts.len(), self.touched.len())
    }

    fn undo_to(&mut self, (layouts, touched): (usize, usize)) {
        for body in self.new_layouts.split_off(layouts) {
            self.layouts.remove(&body);
        }
        for ord in self.touched.split_off(touched) {
            self.forget(ord);
        }
    }

    fn committed(&mut self) {
        self.new_layouts.clear();
        self.touched.clear();
    }

    fn forget(&mut self, ord: i64) {
        if let Some(old) = self.latest.remove(&ord) {
            self.latest_bytes = self.latest_bytes.saturating_sub(old.cp.data.len());
        }
    }

    fn put_latest(&mut self, ord: i64, located: Located) {
        self.forget(ord);
        let size = located.cp.data.len();
        if self.latest.len() >= CACHE_RUNS || self.latest_bytes + size > CACHE_BYTES {
            self.latest.clear();
            self.latest_bytes = 0;
        }
        if size <= CACHE_BYTES {
            self.latest_bytes += size;
            self.latest.insert(ord, located);
            self.touched.push(ord);
        }
    }

    fn latest(&self, ord: i64, seq: u64) -> Option<&Located> {
        self.latest.get(&ord).filter(|l| l.cp.seq == seq)
    }
}

/// What a write request sees: the writer's connection (inside the batch
/// transaction, inside the request's savepoint) and its cache.
struct Ctx<'a> {
    conn: &'a Connection,
    cache: &'a mut Cache,
    /// Set by requests whose commit may make a run runnable or finished.
    bump: bool,
}

impl Ctx<'_> {
    fn layout_id(&mut self, cp: &CheckpointRecord) -> R<i64> {
        let names: Vec<(&str, &str)> = cp
            .fields
            .iter()
            .map(|f| (f.name.as_ref(), f.type_name.as_ref()))
            .collect();
        let body = to_postcard(&names)?;
        if let Some(id) = self.cache.layouts.get(&body) {
            return Ok(*id);
        }
        let found: Option<i64> = self
            .conn
            .prepare_cached("SELECT id FROM layouts WHERE body = ?1")?
            .query_row([&body], |r| r.get(0))
            .optional()?;
        let id = match found {
            Some(id) => id,
            None => {
                self.conn
                    .prepare_cached("INSERT INTO layouts (body) VALUES (?1)")?
                    .execute([&body])?;
                self.conn.last_insert_rowid()
            }
        };
        self.cache.new_layouts.push(body.clone());
        self.cache.layouts.insert(body, id);
        Ok(id)
    }

    /// The checkpoint `seq` of run `ord`, from the cache or the database.
    fn located(&mut self, ord: i64, run: &Arc<str>, seq: u64) -> R<Option<Located>> {
        if let Some(l) = self.cache.latest(ord, seq) {
            return Ok(Some(Located {
                cp: l.cp.clone(),
                locs: l.locs.clone(),
            }));
        }
        load_checkpoint(self.conn, ord, run, seq)
    }
}

/// A queued write request.
trait Job: Send {
    /// Applies the request; `true` if it succeeded.
    fn apply(&mut self, cx: &mut Ctx<'_>) -> bool;
    /// Answers the request once the batch's commit finished with `commit`.
    fn complete(self: Box<Self>, commit: Result<(), Error>);
}

struct Pending<T, F> {
    f: Option<F>,
    out: Option<Result<T, Error>>,
    tx: oneshot::Sender<Result<T, Error>>,
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
}

struct Writer {
    conn: Connection,
    cache: Cache,
    changes: Arc<watch::Sender<u64>>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Box<dyn Job>>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.run_batch(batch);
        }
    }

    /// One transaction for the whole batch, one savepoint per request.
    fn run_batch(&mut self, mut batch: Vec<Box<dyn Job>>) {
        let begun = retry_busy(|| Ok(self.conn.execute_batch("BEGIN IMMEDIATE")?));
        if let Err(e) = begun {
            let e = e.into_error();
            for job in batch {
                job.complete(Err(e.clone()));
            }
            return;
        }
        let mut bump = false;
        let mut broken: Option<Error> = None;
        for job in batch.iter_mut() {
            let mark = self.cache.mark();
            if let Err(e) = self.conn.execute_batch("SAVEPOINT job") {
                broken = Some(sql_error(&e));
                break;
            }
            let mut cx = Ctx {
                conn: &self.conn,
                cache: &mut self.cache,
                bump: false,
            };
            let ok = job.apply(&mut cx);
            let job_bump = cx.bump;
            let end = if ok {
                bump |= job_bump;
                self.conn.execute_batch("RELEASE job")
            } else {
                self.cache.undo_to(mark);
                self.conn.execute_batch("ROLLBACK TO job; RELEASE job")
            };
            if let Err(e) = end {
                broken = Some(sql_error(&e));
                break;
            }
        }
        let outcome = match broken {
            Some(e) => Err(e),
            None => retry_busy(|| Ok(self.conn.execute_batch("COMMIT")?)).map_err(Fail::into_error),
        };
        match &outcome {
            Ok(()) => self.cache.committed(),
            Err(_) => {
                if !self.conn.is_autocommit() {
                    // Nothing more can be done if the rollback fails too; the
                    // connection rolls back when it is next used or closed.
                    let _ = self.conn.execute_batch("ROLLBACK");
                }
                self.cache.undo_to((0, 0));
            }
        }
        if outcome.is_ok() && bump {
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
        for job in batch {
            job.complete(outcome.clone());
        }
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
fn poller_loop(
    conn: Connection,
    changes: Arc<watch::Sender<u64>>,
    stop: mpsc::Receiver<()>,
    mut last: Option<i64>,
) {
    loop {
        match stop.recv_timeout(POLL_EVERY) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        if changes.receiver_count() == 0 {
            continue;
        }
        if let Some(now) = data_version(&conn) {
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
    writer: Option<mpsc::Sender<Box<dyn Job>>>,
    readers: Option<mpsc::Sender<ReadJob>>,
    stop_poller: Option<mpsc::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
    changes: Arc<watch::Sender<u64>>,
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
        };
        // From here on, dropping `store` on an error stops the threads
        // started so far.
        let (wtx, wrx) = mpsc::channel::<Box<dyn Job>>();
        let writer = Writer {
            conn,
            cache: Cache::default(),
            changes: changes.clone(),
        };
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
        store
            .threads
            .push(spawn("checkpoint-sqlite-poller", move || {
                poller_loop(poll_conn, changes, srx, baseline)
            })?);
        Ok(store)
    }

    /// The path the store was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn prepare_writer(conn: &mut Connection) -> R<()> {
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
        // Room for the pages a large group commit touches (in KiB; SQLite's
        // default of 2 MiB makes a batch of 1,000 runs re-read its pages).
        conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
        // Checkpoint the WAL every 64 MiB rather than SQLite's 4 MiB: a group
        // commit of many runs writes several MiB, and a page rewritten by
        // several commits between two WAL checkpoints is copied back once.
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
        let (tx, rx) = oneshot::channel();
        let job: Box<dyn Job> = Box::new(Pending {
            f: Some(f),
            out: None,
            tx,
        });
        let sent = self.writer.as_ref().is_some_and(|w| w.send(job).is_ok());
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
    if let Some((_, rec)) = fetch_run(cx.conn, &run.id, true)? {
        return Ok(Created::Existing(Box::new(rec)));
    }
    let now = SystemTime::now();
    let rec = RunRecord {
        id: run.id,
        workflow: run.workflow,
        input: run.input,
        state: RunState::Ready,
        lease: None,
        epoch: 0,
        attempt: 0,
        latest_seq: 0,
        wake: None,
        created_at: now,
        updated_at: now,
    };
    let ord = insert_run(cx.conn, &rec)?;
    add_event(
        cx.conn,
        ord,
        now,
        &Event::Started {
            workflow: rec.workflow,
        },
    )?;
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
    let expires = from_ts(now_i.saturating_add(dur_nanos(req.ttl)));
    for id in picked {
        let Some((ord, mut rec)) = fetch_run(cx.conn, &id, true)? else {
            continue;
        };
        let before = state_code(&rec.state);
        if let RunState::Waiting { signal, .. } = &rec.state {
            let sig: Option<(i64, String, Vec<u8>)> = cx
                .conn
                .prepare_cached(
                    "SELECT id, name, payload FROM signals WHERE run = ?1 AND name = ?2 \
                     ORDER BY id LIMIT 1",
                )?
                .query_row(params![ord, signal], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()?;
            let value = match sig {
                Some((sid, name, payload)) => {
                    cx.conn
                        .prepare_cached("DELETE FROM signals WHERE id = ?1")?
                        .execute([sid])?;
                    WakeValue::Signal {
                        name,
                        payload: payload.into(),
                    }
                }
                None => WakeValue::TimedOut,
            };
            rec.wake = Some(Wake {
                seq: rec.latest_seq,
                value,
            });
        }
        rec.state = RunState::Ready;
        rec.epoch += 1;
        rec.attempt = rec.attempt.saturating_add(1);
        rec.lease = Some(LeaseInfo {
            worker: req.worker.to_string(),
            instance: req.instance.to_string(),
            expires_at: expires,
        });
        rec.updated_at = now;
        write_run(cx.conn, ord, &rec, before)?;
        let run_id: Arc<str> = Arc::from(rec.id.as_str());
        let checkpoint = match latest_seq_stored(cx.conn, ord)? {
            None => None,
            Some(seq) => cx.located(ord, &run_id, seq)?.map(|l| l.cp),
        };
        out.claimed.push(Claimed {
            lease: Lease {
                worker: req.worker.clone(),
                instance: req.instance.clone(),
                epoch: rec.epoch,
            },
            run: rec,
            checkpoint,
        });
    }
    Ok(out)
}

fn op_renew(cx: &mut Ctx<'_>, id: &str, lease: &Lease, ttl: Duration) -> R<()> {
    let (ord, mut rec) = fenced(cx.conn, id, lease)?;
    let before = state_code(&rec.state);
    if let Some(l) = rec.lease.as_mut() {
        l.expires_at = from_ts(ts(SystemTime::now()).saturating_add(dur_nanos(ttl)));
    }
    write_run(cx.conn, ord, &rec, before)
}

fn op_release(cx: &mut Ctx<'_>, id: &str, lease: &Lease, how: Release) -> R<()> {
    let (ord, mut rec) = match fenced(cx.conn, id, lease) {
        Ok(found) => found,
        Err(Fail::Err(e)) if matches!(*e, Error::Cancelled { .. }) => {
            if let Some((ord, mut rec)) = fetch_run(cx.conn, id, false)? {
                let before = state_code(&rec.state);
                rec.lease = None;
                write_run(cx.conn, ord, &rec, before)?;
            }
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let before = state_code(&rec.state);
    let now = SystemTime::now();
    rec.lease = None;
    rec.updated_at = now;
    match how {
        Release::Suspend => {
            rec.attempt = 0;
            let on = describe_suspension(&rec.state);
            add_event(cx.conn, ord, now, &Event::Suspended { on })?;
        }
        Release::Retry { reason } => {
            rec.state = RunState::Ready;
            let attempt = rec.attempt;
            add_event(cx.conn, ord, now, &Event::Retried { attempt, reason })?;
        }
        Release::Abandon => {}
    }
    write_run(cx.conn, ord, &rec, before)?;
    cx.bump = true;
    Ok(())
}

fn op_save(
    cx: &mut Ctx<'_>,
    lease: &Lease,
    cp: Arc<CheckpointRecord>,
    keep: Option<usize>,
) -> R<()> {
    let (ord, mut rec) = fenced(cx.conn, &cp.run, lease)?;
    let before = state_code(&rec.state);
    if cp.seq != rec.latest_seq + 1 {
        return Err(Error::internal(format!(
            "run `{}`: checkpoint #{} stored out of order (latest is #{})",
            cp.run, cp.seq, rec.latest_seq
        ))
        .into());
    }
    let prev = if rec.latest_seq > 0 {
        cx.located(ord, &cp.run, rec.latest_seq)?
    } else {
        None
    };
    let locs = insert_checkpoint(cx, ord, &cp, prev.as_ref())?;
    drop(prev);
    rec.latest_seq = cp.seq;
    rec.state = cp.state();
    rec.attempt = 1;
    rec.wake = None;
    rec.updated_at = cp.created_at;
    write_run(cx.conn, ord, &rec, before)?;
    add_event(
        cx.conn,
        ord,
        cp.created_at,
        &Event::CheckpointSaved {
            seq: cp.seq,
            label: cp.label.as_ref().map(|l| l.to_string()),
        },
    )?;
    if let Some(keep) = keep {
        let keep = keep.max(1) as u64;
        if cp.seq > keep {
            prune(cx.conn, ord, cp.seq - keep)?;
        }
    }
    cx.cache.put_latest(ord, Located { cp, locs });
    Ok(())
}

fn op_take_signal(
    cx: &mut Ctx<'_>,
    id: &str,
    lease: &Lease,
    name: &str,
) -> R<Option<SignalRecord>> {
    let (ord, mut rec) = fenced(cx.conn, id, lease)?;
    let before = state_code(&rec.state);
    let sig: Option<(i64, String, Vec<u8>, i64)> = cx
        .conn
        .prepare_cached(
            "SELECT id, name, payload, received_at FROM signals WHERE run = ?1 AND name = ?2 \
             ORDER BY id LIMIT 1",
        )?
        .query_row(params![ord, name], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    let Some((sid, name, payload, received_at)) = sig else {
        return Ok(None);
    };
    cx.conn
        .prepare_cached("DELETE FROM signals WHERE id = ?1")?
        .execute([sid])?;
    let sig = SignalRecord {
        name,
        payload: payload.into(),
        received_at: from_ts(received_at),
    };
    rec.wake = Some(Wake {
        seq: rec.latest_seq,
        value: WakeValue::Signal {
            name: sig.name.clone(),
            payload: sig.payload.clone(),
        },
    });
    rec.state = RunState::Ready;
    rec.updated_at = SystemTime::now();
    write_run(cx.conn, ord, &rec, before)?;
    Ok(Some(sig))
}

fn op_time_out(cx: &mut Ctx<'_>, id: &str, lease: &Lease) -> R<()> {
    let (ord, mut rec) = fenced(cx.conn, id, lease)?;
    let before = state_code(&rec.state);
    rec.wake = Some(Wake {
        seq: rec.latest_seq,
        value: WakeValue::TimedOut,
    });
    rec.state = RunState::Ready;
    rec.updated_at = SystemTime::now();
    write_run(cx.conn, ord, &rec, before)
}

fn op_reject(cx: &mut Ctx<'_>, id: &str, lease: &Lease, reason: String) -> R<()> {
    let (ord, mut rec) = fenced(cx.conn, id, lease)?;
    let before = state_code(&rec.state);
    let now = SystemTime::now();
    if let Some(Wake {
        value: WakeValue::Signal { name, .. },
        ..
    }) = rec.wake.take()
    {
        add_event(cx.conn, ord, now, &Event::SignalRejected { name, reason })?;
    }
    let suspend: Option<Option<String>> = cx
        .conn
        .prepare_cached("SELECT suspend FROM checkpoints WHERE run = ?1 AND seq = ?2")?
        .query_row(params![ord, to_i64(rec.latest_seq, "seq")?], |r| r.get(0))
        .optional()?;
    if let Some(suspend) = suspend {
        rec.state = match suspend {
            None => RunState::Ready,
            Some(s) => {
                let s: Suspend = serde_json::from_str(&s)
                    .map_err(|_| corrupt(format_args!("run `{id}`: undecodable suspension")))?;
                match s {
                    Suspend::Waiting { signal, deadline } => RunState::Waiting { signal, deadline },
                    Suspend::Sleeping { until } => RunState::Sleeping { until },
                }
            }
        };
    }
    rec.updated_at = now;
    write_run(cx.conn, ord, &rec, before)
}

fn op_finish(cx: &mut Ctx<'_>, id: &str, lease: &Lease, outcome: Outcome) -> R<()> {
    let (ord, mut rec) = fenced(cx.conn, id, lease)?;
    let before = state_code(&rec.state);
    let now = SystemTime::now();
    let (state, event) = match outcome {
        Outcome::Completed { output, error } => {
            let event = match &error {
                None => Event::Completed,
                Some(err) => Event::Failed { error: err.clone() },
            };
            (RunState::Completed { output, error }, event)
        }
        Outcome::Failed { error } => (
            RunState::Failed {
                error: error.clone(),
            },
            Event::Failed {
                error: error.to_string(),
            },
        ),
    };
    rec.state = state;
    rec.lease = None;
    rec.updated_at = now;
    write_run(cx.conn, ord, &rec, before)?;
    add_event(cx.conn, ord, now, &event)?;
    cx.cache.forget(ord);
    cx.bump = true;
    Ok(())
}

fn op_cancel(cx: &mut Ctx<'_>, id: &str) -> R<bool> {
    let (ord, mut rec) = fetch_run(cx.conn, id, false)?.ok_or_else(|| Error::unknown_run(id))?;
    let before = state_code(&rec.state);
    if rec.state.is_terminal() {
        return Ok(false);
    }
    let now = SystemTime::now();
    rec.state = RunState::Cancelled;
    rec.lease = None;
    rec.updated_at = now;
    write_run(cx.conn, ord, &rec, before)?;
    add_event(cx.conn, ord, now, &Event::Cancelled)?;
    cx.cache.forget(ord);
    cx.bump = true;
    Ok(true)
}

fn op_put_signal(cx: &mut Ctx<'_>, id: &str, name: &str, payload: &[u8]) -> R<()> {
    let ord = run_ord(cx.conn, id)?;
    let now = SystemTime::now();
    cx.conn
        .prepare_cached(
            "INSERT INTO signals (run, name, payload, received_at) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![ord, name, payload, ts(now)])?;
    add_event(
        cx.conn,
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
    let ord = run_ord(cx.conn, id)?;
    add_event(cx.conn, ord, SystemTime::now(), event)
}

fn op_fork(cx: &mut Ctx<'_>, from: &str, seq: u64, new_id: &str) -> R<()> {
    if run_ord(cx.conn, new_id).is_ok() {
        return Err(Error::AlreadyExists {
            run: new_id.to_owned(),
        }
        .into());
    }
    let (src_ord, src) = fetch_run(cx.conn, from, true)?.ok_or_else(|| Error::unknown_run(from))?;
    let src_id: Arc<str> = Arc::from(from);
    let found = match i64::try_from(seq) {
        Ok(_) => cx.located(src_ord, &src_id, seq)?,
        Err(_) => None,
    };
    let cp = found
        .ok_or_else(|| Error::UnknownCheckpoint {
            run: from.to_owned(),
            seq,
        })?
        .cp;
    let now = SystemTime::now();
    let forked = Event::Forked {
        from: from.to_owned(),
        seq,
        to: new_id.to_owned(),
    };
    add_event(cx.conn, src_ord, now, &forked)?;
    let id: Arc<str> = Arc::from(new_id);
    let mut copy = (*cp).clone();
    copy.run = id;
    copy.seq = 1;
    copy.created_at = now;
    let rec = RunRecord {
        id: new_id.to_owned(),
        workflow: src.workflow,
        input: src.input,
        state: copy.state(),
        lease: None,
        epoch: 0,
        attempt: 0,
        latest_seq: 1,
        wake: None,
        created_at: now,
        updated_at: now,
    };
    let ord = insert_run(cx.conn, &rec)?;
    let copy = Arc::new(copy);
    let locs = insert_checkpoint(cx, ord, &copy, None)?;
    add_event(cx.conn, ord, now, &forked)?;
    cx.cache.put_latest(ord, Located { cp: copy, locs });
    cx.bump = true;
    Ok(())
}

fn status_code(kind: StatusKind) -> i64 {
    match kind {
        StatusKind::Running => READY,
        StatusKind::Waiting => WAITING,
        StatusKind::Sleeping => SLEEPING,
        StatusKind::Completed => COMPLETED,
        StatusKind::Failed => FAILED,
        StatusKind::Cancelled => CANCELLED,
    }
}

fn read_list_runs(conn: &Connection, filter: &RunFilter) -> R<Vec<RunRecord>> {
    // A completed run with an `Err` output counts as failed.
    let sql = format!(
        "SELECT {RUN_COLS} FROM runs \
         WHERE (?1 IS NULL OR workflow = ?1) \
           AND (?2 IS NULL OR substr(id, 1, length(?2)) = ?2) \
           AND (?3 IS NULL OR (CASE WHEN state = {COMPLETED} AND error IS NOT NULL \
                                    THEN {FAILED} ELSE state END) = ?3) \
         ORDER BY ord LIMIT ?4"
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
            RawRun::from_row,
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

fn read_checkpoints(conn: &Connection, id: &str) -> R<Vec<Arc<CheckpointRecord>>> {
    let ord = run_ord(conn, id)?;
    let run: Arc<str> = Arc::from(id);
    let rows: Vec<CpRow> = conn
        .prepare_cached(&format!(
            "SELECT {CP_COLS} FROM checkpoints c JOIN layouts l ON l.id = c.layout \
             WHERE c.run = ?1 ORDER BY c.seq"
        ))?
        .query_map([ord], CpRow::from_row)?
        .collect::<rusqlite::Result<_>>()?;
    let mut chunks = Chunks::new();
    rows.into_iter()
        .map(|row| decode_checkpoint(conn, ord, &run, row, &mut chunks).map(|l| l.cp))
        .collect()
}

fn read_history(conn: &Connection, id: &str) -> R<Vec<HistoryEntry>> {
    let ord = run_ord(conn, id)?;
    let rows: Vec<(i64, String)> = conn
        .prepare_cached(
            "WITH RECURSIVE chain (id) AS ( \
                 SELECT last_event FROM runs WHERE ord = ?1 \
                 UNION ALL \
                 SELECT h.prev FROM history h JOIN chain c ON h.id = c.id \
                 WHERE h.prev IS NOT NULL) \
             SELECT h.at, h.event FROM chain c JOIN history h ON h.id = c.id ORDER BY h.id",
        )?
        .query_map([ord], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    rows.into_iter()
        .map(|(at, event)| {
            let event: Event = serde_json::from_str(&event)
                .map_err(|e| corrupt(format_args!("run `{id}`: undecodable history event: {e}")))?;
            Ok(HistoryEntry {
                at: from_ts(at),
                event,
            })
        })
        .collect()
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
        self.read(move |c| Ok(fetch_run(c, &id, true)?.map(|(_, rec)| rec)))
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
        self.write(move |cx| op_save(cx, &lease, checkpoint, keep))
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
        self.read(move |c| {
            let ord = run_ord(c, &id)?;
            let Some(seq) = latest_seq_stored(c, ord)? else {
                return Ok(None);
            };
            Ok(load_checkpoint(c, ord, &Arc::from(id.as_str()), seq)?.map(|l| l.cp))
        })
    }

    fn checkpoint<'a>(
        &'a self,
        id: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<Option<Arc<CheckpointRecord>>, Error>> {
        let id = id.to_owned();
        self.read(move |c| {
            let ord = run_ord(c, &id)?;
            if i64::try_from(seq).is_err() {
                return Ok(None);
            }
            Ok(load_checkpoint(c, ord, &Arc::from(id.as_str()), seq)?.map(|l| l.cp))
        })
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

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use futures::executor::block_on;

    fn open() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("runs.db")).unwrap();
        (dir, store)
    }

    /// A plain connection on the store's file, for looking inside.
    fn peek(store: &SqliteStore) -> Connection {
        Connection::open(store.path()).unwrap()
    }

    fn count(store: &SqliteStore, sql: &str) -> i64 {
        peek(store).query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn req(worker: &str, instance: &str) -> ClaimRequest {
        ClaimRequest {
            worker: Arc::from(worker),
            instance: Arc::from(instance),
            workflows: vec!["wf"],
            ttl: Duration::from_secs(30),
            limit: 10,
            only: None,
        }
    }

    fn new_run(store: &dyn Store, id: &str) {
        let r = block_on(store.create_run(NewRun {
            id: id.into(),
            workflow: "wf".into(),
            input: Arc::from(&b"null"[..]),
        }))
        .unwrap();
        assert!(matches!(r, Created::New));
    }

    fn cp(run: &str, seq: u64) -> Arc<CheckpointRecord> {
        Arc::new(CheckpointRecord::new(
            Arc::from(run),
            seq,
            Cow::Borrowed("site"),
            None,
            0,
            vec![],
            vec![],
            vec![],
            None,
            SystemTime::now(),
        ))
    }

    /// A checkpoint with these fields (name, bytes), concatenated.
    fn cp_fields(
        run: &str,
        seq: u64,
        fields: &[(&'static str, &[u8])],
        suspend: Option<Suspend>,
    ) -> Arc<CheckpointRecord> {
        let mut data = Vec::new();
        let mut recs = Vec::new();
        for (name, bytes) in fields {
            recs.push(FieldRecord {
                name: Cow::Borrowed(*name),
                type_name: Cow::Borrowed("alloc::vec::Vec<u8>"),
                offset: data.len(),
                len: bytes.len(),
            });
            data.extend_from_slice(bytes);
        }
        Arc::new(CheckpointRecord::new(
            Arc::from(run),
            seq,
            Cow::Borrowed("step"),
            Some(Cow::Borrowed("step")),
            3,
            vec![7, seq],
            recs,
            data,
            suspend,
            SystemTime::now(),
        ))
    }

    fn claim_one(store: &dyn Store, worker: &str, instance: &str) -> Claimed {
        let mut c = block_on(store.claim(&req(worker, instance)))
            .unwrap()
            .claimed;
        assert_eq!(c.len(), 1, "expected one claimable run");
        c.remove(0)
    }

    fn events(store: &dyn Store, id: &str) -> Vec<Event> {
        block_on(store.history(id))
            .unwrap()
            .into_iter()
            .map(|e| e.event)
            .collect()
    }

    // -- The behavioural tests of memory.rs, on SQLite ---------------------

    #[test]
    fn fencing_rejects_stale_lease() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let a = block_on(store.claim(&req("a", "a1"))).unwrap().claimed;
        assert_eq!(a.len(), 1);
        let lease_a = a[0].lease.clone();
        // Not claimable while a's lease is alive.
        assert!(block_on(store.claim(&req("b", "b1")))
            .unwrap()
            .claimed
            .is_empty());
        // Same worker id, new instance (a restart): takes it over at once.
        let a2 = block_on(store.claim(&req("a", "a2"))).unwrap().claimed;
        assert_eq!(a2.len(), 1);
        // ...but an older instance never takes it back.
        assert!(block_on(store.claim(&req("a", "a1")))
            .unwrap()
            .claimed
            .is_empty());
        let err = block_on(store.save_checkpoint(&lease_a, cp("r", 1), None)).unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
        block_on(store.save_checkpoint(&a2[0].lease, cp("r", 1), None)).unwrap();
        // Out-of-order seq is refused.
        assert!(block_on(store.save_checkpoint(&a2[0].lease, cp("r", 5), None)).is_err());
    }

    #[test]
    fn expired_lease_is_taken_over() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let mut short = req("a", "a1");
        short.ttl = Duration::from_millis(0);
        assert_eq!(block_on(store.claim(&short)).unwrap().claimed.len(), 1);
        let b = block_on(store.claim(&req("b", "b1"))).unwrap().claimed;
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].run.epoch, 2);
        assert_eq!(b[0].run.attempt, 2);
    }

    #[test]
    fn retention_keeps_latest() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let c = block_on(store.claim(&req("a", "a1"))).unwrap().claimed;
        for seq in 1..=5 {
            block_on(store.save_checkpoint(&c[0].lease, cp("r", seq), Some(2))).unwrap();
        }
        let kept: Vec<u64> = block_on(store.list_checkpoints("r"))
            .unwrap()
            .iter()
            .map(|c| c.seq)
            .collect();
        assert_eq!(kept, vec![4, 5]);
    }

    #[test]
    fn unregistered_runs_are_reported_not_claimed() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let mut other = req("a", "a1");
        other.workflows = vec!["other"];
        let res = block_on(store.claim(&other)).unwrap();
        assert!(res.claimed.is_empty());
        assert_eq!(res.unregistered, vec![("r".to_owned(), "wf".to_owned())]);
    }

    #[test]
    fn cancel_blocks_fenced_writes() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let c = block_on(store.claim(&req("a", "a1"))).unwrap().claimed;
        assert!(block_on(store.cancel("r")).unwrap());
        assert!(!block_on(store.cancel("r")).unwrap());
        let err = block_on(store.save_checkpoint(&c[0].lease, cp("r", 1), None)).unwrap_err();
        assert!(matches!(err, Error::Cancelled { .. }));
        assert!(matches!(
            block_on(store.cancel("nope")),
            Err(Error::UnknownRun { .. })
        ));
    }

    // -- More of the contract ----------------------------------------------

    #[test]
    fn create_load_and_list_runs() {
        let (_dir, store) = open();
        new_run(&store, "a-1");
        new_run(&store, "a-2");
        block_on(store.create_run(NewRun {
            id: "b-1".into(),
            workflow: "other".into(),
            input: Arc::from(&b"[1,2]"[..]),
        }))
        .unwrap();
        let again = block_on(store.create_run(NewRun {
            id: "b-1".into(),
            workflow: "changed".into(),
            input: Arc::from(&b"0"[..]),
        }))
        .unwrap();
        let Created::Existing(rec) = again else {
            panic!("expected the existing run")
        };
        assert_eq!(rec.workflow, "other");
        assert_eq!(&rec.input[..], b"[1,2]");
        assert_eq!(rec.state, RunState::Ready);
        assert_eq!((rec.epoch, rec.attempt, rec.latest_seq), (0, 0, 0));
        assert!(block_on(store.load_run("nope")).unwrap().is_none());

        let ids = |f: RunFilter| -> Vec<String> {
            block_on(store.list_runs(&f))
                .unwrap()
                .into_iter()
                .map(|r| r.id)
                .collect()
        };
        assert_eq!(ids(RunFilter::new()), ["a-1", "a-2", "b-1"]);
        assert_eq!(ids(RunFilter::new().workflow("wf")), ["a-1", "a-2"]);
        assert_eq!(ids(RunFilter::new().id_prefix("b-")), ["b-1"]);
        assert_eq!(ids(RunFilter::new().limit(2)), ["a-1", "a-2"]);

        // Finish a-1 with an `Err` output: it lists as failed.
        let mut only = req("w", "i");
        only.only = Some("a-1".into());
        let c = block_on(store.claim(&only)).unwrap().claimed.remove(0);
        assert_eq!(c.run.id, "a-1");
        block_on(store.finish(
            "a-1",
            &c.lease,
            Outcome::Completed {
                output: Arc::from(&b"{\"Err\":\"no\"}"[..]),
                error: Some("no".into()),
            },
        ))
        .unwrap();
        assert_eq!(ids(RunFilter::new().status(StatusKind::Failed)), ["a-1"]);
        assert!(ids(RunFilter::new().status(StatusKind::Completed)).is_empty());
        assert_eq!(
            ids(RunFilter::new().status(StatusKind::Running)),
            ["a-2", "b-1"]
        );
    }

    #[test]
    fn checkpoints_round_trip_exactly() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let c = claim_one(&store, "w", "i");
        let first = cp_fields(
            "r",
            1,
            &[("goal", b"ship it"), ("done", b""), ("n", &[3])],
            None,
        );
        block_on(store.save_checkpoint(&c.lease, first.clone(), None)).unwrap();
        let until = SystemTime::now() + Duration::from_secs(3600);
        let second = cp_fields(
            "r",
            2,
            &[("goal", b"ship it"), ("n", &[4]), ("extra", &[9; 40])],
            Some(Suspend::Waiting {
                signal: "approval".into(),
                deadline: Some(until),
            }),
        );
        block_on(store.save_checkpoint(&c.lease, second.clone(), None)).unwrap();
        // Data that is not the plain concatenation of its fields.
        let odd = Arc::new(CheckpointRecord::new(
            Arc::from("r"),
            3,
            Cow::Borrowed("odd"),
            None,
            1,
            vec![],
            vec![FieldRecord {
                name: Cow::Borrowed("x"),
                type_name: Cow::Borrowed("u8"),
                offset: 2,
                len: 1,
            }],
            vec![0, 1, 2, 3],
            None,
            SystemTime::now(),
        ));
        assert_eq!(
            block_on(store.load_run("r")).unwrap().unwrap().state,
            RunState::Waiting {
                signal: "approval".into(),
                deadline: Some(until)
            }
        );
        block_on(store.save_checkpoint(&c.lease, odd.clone(), None)).unwrap();

        assert_eq!(
            *block_on(store.checkpoint("r", 1)).unwrap().unwrap(),
            *first
        );
        assert_eq!(
            *block_on(store.checkpoint("r", 2)).unwrap().unwrap(),
            *second
        );
        assert_eq!(
            *block_on(store.latest_checkpoint("r")).unwrap().unwrap(),
            *odd
        );
        assert!(block_on(store.checkpoint("r", 9)).unwrap().is_none());
        let all = block_on(store.list_checkpoints("r")).unwrap();
        let all: Vec<CheckpointRecord> = all.iter().map(|c| (**c).clone()).collect();
        assert_eq!(
            all,
            vec![(*first).clone(), (*second).clone(), (*odd).clone()]
        );
        assert_eq!(all[1].info().fields[2].size, 40);
        assert!(matches!(
            block_on(store.list_checkpoints("nope")),
            Err(Error::UnknownRun { .. })
        ));
        assert!(matches!(
            block_on(store.latest_checkpoint("nope")),
            Err(Error::UnknownRun { .. })
        ));
        // A claim hands out the latest checkpoint.
        let again = claim_one(&store, "w", "i2");
        assert_eq!(*again.checkpoint.unwrap(), *odd);
    }

    #[test]
    fn signals_wake_waiting_runs_exactly_once() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let c = claim_one(&store, "w", "i");
        let wait = Some(Suspend::Waiting {
            signal: "approval".into(),
            deadline: None,
        });
        block_on(store.save_checkpoint(&c.lease, cp_fields("r", 1, &[], wait), None)).unwrap();
        block_on(store.release("r", &c.lease, Release::Suspend)).unwrap();
        let rec = block_on(store.load_run("r")).unwrap().unwrap();
        assert_eq!((rec.attempt, rec.lease.is_none()), (0, true));
        assert!(block_on(store.claim(&req("w", "i")))
            .unwrap()
            .claimed
            .is_empty());
        // Another signal name does not wake it.
        block_on(store.put_signal("r", "other", b"1".to_vec())).unwrap();
        assert!(block_on(store.claim(&req("w", "i")))
            .unwrap()
            .claimed
            .is_empty());
        block_on(store.put_signal("r", "approval", b"true".to_vec())).unwrap();
        block_on(store.put_signal("r", "approval", b"false".to_vec())).unwrap();
        let c = claim_one(&store, "w", "i");
        assert_eq!(
            c.run.wake,
            Some(Wake {
                seq: 1,
                value: WakeValue::Signal {
                    name: "approval".into(),
                    payload: Arc::from(&b"true"[..]),
                },
            })
        );
        let pending: Vec<(String, Vec<u8>)> = block_on(store.pending_signals("r"))
            .unwrap()
            .into_iter()
            .map(|s| (s.name, s.payload.to_vec()))
            .collect();
        assert_eq!(
            pending,
            vec![
                ("other".to_owned(), b"1".to_vec()),
                ("approval".to_owned(), b"false".to_vec())
            ]
        );
        assert!(matches!(
            block_on(store.put_signal("nope", "x", vec![])),
            Err(Error::UnknownRun { .. })
        ));
        // The payload was unusable: back to waiting, the next signal wakes it.
        block_on(store.reject_signal("r", &c.lease, "bad".into())).unwrap();
        let rec = block_on(store.load_run("r")).unwrap().unwrap();
        assert_eq!(rec.wake, None);
        assert!(matches!(rec.state, RunState::Waiting { .. }));
        let taken = block_on(store.take_signal("r", &c.lease, "approval"))
            .unwrap()
            .unwrap();
        assert_eq!(&taken.payload[..], b"false");
        assert!(block_on(store.take_signal("r", &c.lease, "approval"))
            .unwrap()
            .is_none());
        let rec = block_on(store.load_run("r")).unwrap().unwrap();
        assert_eq!(rec.state, RunState::Ready);
        assert!(matches!(
            rec.wake,
            Some(Wake {
                seq: 1,
                value: WakeValue::Signal { .. }
            })
        ));
        block_on(store.time_out("r", &c.lease)).unwrap();
        let rec = block_on(store.load_run("r")).unwrap().unwrap();
        assert_eq!(
            rec.wake,
            Some(Wake {
                seq: 1,
                value: WakeValue::TimedOut
            })
        );
        let ev = events(&store, "r");
        assert!(ev.contains(&Event::SignalRejected {
            name: "approval".into(),
            reason: "bad".into()
        }));
        assert_eq!(
            ev.iter()
                .filter(|e| matches!(e, Event::SignalReceived { .. }))
                .count(),
            3
        );
    }

    #[test]
    fn timers_and_deadlines_make_runs_claimable() {
        let (_dir, store) = open();
        assert_eq!(block_on(store.next_wakeup()).unwrap(), None);
        new_run(&store, "sleeper");
        new_run(&store, "waiter");
        let soon = SystemTime::now() + Duration::from_millis(300);
        for c in block_on(store.claim(&req("w", "i"))).unwrap().claimed {
            let suspend = if c.run.id == "sleeper" {
                Suspend::Sleeping { until: soon }
            } else {
                Suspend::Waiting {
                    signal: "s".into(),
                    deadline: Some(soon + Duration::from_millis(100)),
                }
            };
            let cp = cp_fields(&c.run.id, 1, &[], Some(suspend));
            block_on(store.save_checkpoint(&c.lease, cp, None)).unwrap();
            // The lease is still held: the wake-up is its expiry or earlier.
            block_on(store.release(&c.run.id, &c.lease, Release::Suspend)).unwrap();
        }
        assert_eq!(block_on(store.next_wakeup()).unwrap(), Some(soon));
        assert!(block_on(store.claim(&req("w", "i")))
            .unwrap()
            .claimed
            .is_empty());
        std::thread::sleep(Duration::from_millis(450));
        let mut got = block_on(store.claim(&req("w", "i"))).unwrap().claimed;
        got.sort_by(|a, b| a.run.id.cmp(&b.run.id));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].run.id, "sleeper");
        assert_eq!(got[0].run.wake, None);
        assert_eq!(
            got[1].run.wake,
            Some(Wake {
                seq: 1,
                value: WakeValue::TimedOut
            })
        );
        // Both are leased now: the next wake-up is a lease expiry.
        let next = block_on(store.next_wakeup()).unwrap().unwrap();
        assert!(next > SystemTime::now() + Duration::from_secs(20));
    }

    #[test]
    fn finish_release_and_history() {
        let (_dir, store) = open();
        new_run(&store, "ok");
        new_run(&store, "bad");
        new_run(&store, "retry");
        let claimed = block_on(store.claim(&req("w", "i"))).unwrap().claimed;
        let lease = |id: &str| {
            claimed
                .iter()
                .find(|c| c.run.id == id)
                .unwrap()
                .lease
                .clone()
        };
        block_on(store.save_checkpoint(&lease("ok"), cp("ok", 1), None)).unwrap();
        block_on(store.finish(
            "ok",
            &lease("ok"),
            Outcome::Completed {
                output: Arc::from(&b"42"[..]),
                error: None,
            },
        ))
        .unwrap();
        let failure = Error::Incompatible {
            workflow: "wf".into(),
            run: "bad".into(),
            site: "step".into(),
            field: "n".into(),
            detail: "type changed".into(),
        };
        block_on(store.finish(
            "bad",
            &lease("bad"),
            Outcome::Failed {
                error: failure.clone(),
            },
        ))
        .unwrap();
        block_on(store.release(
            "retry",
            &lease("retry"),
            Release::Retry {
                reason: "panicked".into(),
            },
        ))
        .unwrap();

        let ok = block_on(store.load_run("ok")).unwrap().unwrap();
        assert_eq!(
            ok.state,
            RunState::Completed {
                output: Arc::from(&b"42"[..]),
                error: None
            }
        );
        assert!(ok.lease.is_none());
        let bad = block_on(store.load_run("bad")).unwrap().unwrap();
        assert_eq!(bad.state, RunState::Failed { error: failure });
        // Finished runs refuse fenced writes and cancellation.
        let err = block_on(store.save_checkpoint(&lease("ok"), cp("ok", 2), None)).unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
        assert!(!block_on(store.cancel("ok")).unwrap());
        assert_eq!(
            events(&store, "ok"),
            vec![
                Event::Started {
                    workflow: "wf".into()
                },
                Event::CheckpointSaved {
                    seq: 1,
                    label: None
                },
                Event::Completed
            ]
        );
        assert_eq!(
            events(&store, "retry").last(),
            Some(&Event::Retried {
                attempt: 1,
                reason: "panicked".into()
            })
        );
        let again = claim_one(&store, "w", "i");
        assert_eq!((again.run.id.as_str(), again.run.attempt), ("retry", 2));
        // Abandon leaves the run as it is, without a lease.
        block_on(store.release("retry", &again.lease, Release::Abandon)).unwrap();
        let rec = block_on(store.load_run("retry")).unwrap().unwrap();
        assert!(rec.lease.is_none());
        assert_eq!(rec.attempt, 2);
        // Releasing a cancelled run clears its lease and succeeds.
        let again = claim_one(&store, "w", "i");
        assert!(block_on(store.cancel("retry")).unwrap());
        block_on(store.release("retry", &again.lease, Release::Suspend)).unwrap();
        block_on(store.append_event("retry", Event::Completed)).unwrap();
        assert_eq!(events(&store, "retry").last(), Some(&Event::Completed));
        assert!(matches!(
            block_on(store.history("nope")),
            Err(Error::UnknownRun { .. })
        ));
        // Renew is fenced too.
        assert!(matches!(
            block_on(store.renew("ok", &lease("ok"), Duration::from_secs(1))),
            Err(Error::LeaseLost { .. })
        ));
    }

    #[test]
    fn renew_extends_the_lease() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let mut short = req("a", "a1");
        short.ttl = Duration::from_millis(200);
        let c = block_on(store.claim(&short)).unwrap().claimed.remove(0);
        block_on(store.renew("r", &c.lease, Duration::from_secs(60))).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(block_on(store.claim(&req("b", "b1")))
            .unwrap()
            .claimed
            .is_empty());
    }

    #[test]
    fn fork_copies_a_checkpoint_into_a_new_run() {
        let (_dir, store) = open();
        new_run(&store, "src");
        let c = claim_one(&store, "w", "i");
        let wait = Suspend::Waiting {
            signal: "go".into(),
            deadline: None,
        };
        block_on(store.save_checkpoint(&c.lease, cp_fields("src", 1, &[("a", b"1")], None), None))
            .unwrap();
        let second = cp_fields("src", 2, &[("a", b"1"), ("b", b"2")], Some(wait.clone()));
        block_on(store.save_checkpoint(&c.lease, second.clone(), None)).unwrap();
        block_on(store.fork("src", 2, "copy")).unwrap();
        assert!(matches!(
            block_on(store.fork("src", 2, "copy")),
            Err(Error::AlreadyExists { .. })
        ));
        assert!(matches!(
            block_on(store.fork("src", 7, "copy2")),
            Err(Error::UnknownCheckpoint { seq: 7, .. })
        ));
        assert!(matches!(
            block_on(store.fork("nope", 1, "copy3")),
            Err(Error::UnknownRun { .. })
        ));
        let copy = block_on(store.load_run("copy")).unwrap().unwrap();
        assert_eq!(copy.latest_seq, 1);
        assert_eq!(
            copy.state,
            RunState::Waiting {
                signal: "go".into(),
                deadline: None
            }
        );
        let cps = block_on(store.list_checkpoints("copy")).unwrap();
        assert_eq!(cps.len(), 1);
        assert_eq!(cps[0].seq, 1);
        assert_eq!(&*cps[0].run, "copy");
        assert_eq!(cps[0].data, second.data);
        assert_eq!(cps[0].fields, second.fields);
        let forked = Event::Forked {
            from: "src".into(),
            seq: 2,
            to: "copy".into(),
        };
        assert_eq!(events(&store, "copy"), vec![forked.clone()]);
        assert_eq!(events(&store, "src").last(), Some(&forked));
    }

    // -- Durability, sharing, group commit, dedup ----------------------------

    #[test]
    fn reopening_finds_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let saved;
        {
            let store = SqliteStore::open(&path).unwrap();
            new_run(&store, "r");
            let c = claim_one(&store, "w", "i");
            saved = cp_fields("r", 1, &[("goal", b"g"), ("n", &[1, 2, 3])], None);
            block_on(store.save_checkpoint(&c.lease, saved.clone(), None)).unwrap();
            block_on(store.put_signal("r", "later", b"\"x\"".to_vec())).unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let rec = block_on(store.load_run("r")).unwrap().unwrap();
        assert_eq!((rec.latest_seq, rec.epoch, rec.attempt), (1, 1, 1));
        assert_eq!(rec.lease.as_ref().map(|l| l.worker.as_str()), Some("w"));
        assert_eq!(
            *block_on(store.latest_checkpoint("r")).unwrap().unwrap(),
            *saved
        );
        assert_eq!(block_on(store.pending_signals("r")).unwrap().len(), 1);
        assert_eq!(events(&store, "r").len(), 3);
        // A restart with the same worker id takes its run back at once.
        let c = claim_one(&store, "w", "i-restarted");
        assert_eq!(*c.checkpoint.unwrap(), *saved);
    }

    #[test]
    fn two_stores_on_one_file_share_leases() {
        let (_dir, one) = open();
        let two = SqliteStore::open(one.path()).unwrap();
        new_run(&one, "r");
        let mut short = req("a", "a1");
        short.ttl = Duration::from_millis(400);
        let a = block_on(one.claim(&short)).unwrap().claimed;
        assert_eq!(a.len(), 1);
        // The other "process" sees the run but cannot take it yet.
        assert!(block_on(two.load_run("r")).unwrap().is_some());
        assert!(block_on(two.claim(&req("b", "b1")))
            .unwrap()
            .claimed
            .is_empty());
        assert!(block_on(one.claim(&req("b", "b1")))
            .unwrap()
            .claimed
            .is_empty());
        std::thread::sleep(Duration::from_millis(500));
        let b = block_on(two.claim(&req("b", "b1"))).unwrap().claimed;
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].run.epoch, 2);
        // Now `a` (paused past its lease) is fenced out, in either store.
        let err = block_on(one.save_checkpoint(&a[0].lease, cp("r", 1), None)).unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
        let err = block_on(one.renew("r", &a[0].lease, Duration::from_secs(9))).unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
        block_on(two.save_checkpoint(&b[0].lease, cp("r", 1), None)).unwrap();
        assert_eq!(block_on(one.load_run("r")).unwrap().unwrap().latest_seq, 1);
    }

    #[test]
    fn stale_epoch_write_is_rejected() {
        let (_dir, one) = open();
        let two = SqliteStore::open(one.path()).unwrap();
        new_run(&one, "r");
        let a = claim_one(&one, "a", "a1");
        block_on(one.save_checkpoint(&a.lease, cp("r", 1), None)).unwrap();
        // Forge a stale lease: right worker, old epoch.
        let mut stale = a.lease.clone();
        stale.epoch -= 1;
        let err = block_on(two.save_checkpoint(&stale, cp("r", 2), None)).unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
        let err = block_on(two.finish(
            "r",
            &stale,
            Outcome::Completed {
                output: Arc::from(&b"1"[..]),
                error: None,
            },
        ))
        .unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
        let rec = block_on(two.load_run("r")).unwrap().unwrap();
        assert_eq!((rec.latest_seq, rec.state), (1, RunState::Ready));
        block_on(two.save_checkpoint(&a.lease, cp("r", 2), None)).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_saves_share_commits() {
        let (_dir, store) = open();
        let store = Arc::new(store);
        let mut leases = Vec::new();
        for i in 0..64 {
            new_run(&*store, &format!("r{i}"));
        }
        let mut r = req("w", "i");
        r.limit = 64;
        for c in store.claim(&r).await.unwrap().claimed {
            leases.push((c.run.id.clone(), c.lease));
        }
        assert_eq!(leases.len(), 64);
        let tasks: Vec<_> = leases
            .into_iter()
            .map(|(id, lease)| {
                let store = store.clone();
                tokio::spawn(async move {
                    for seq in 1..=5u64 {
                        let payload = format!("{id}:{seq}");
                        let cp = cp_fields(&id, seq, &[("v", payload.as_bytes())], None);
                        store.save_checkpoint(&lease, cp, None).await?;
                    }
                    Ok::<_, Error>(id)
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        for i in 0..64 {
            let id = format!("r{i}");
            let cps = store.list_checkpoints(&id).await.unwrap();
            assert_eq!(cps.len(), 5, "{id}");
            for (k, cp) in cps.iter().enumerate() {
                assert_eq!(
                    cp.field_bytes(0).unwrap(),
                    format!("{id}:{}", k + 1).as_bytes()
                );
            }
        }
        assert_eq!(count(&store, "SELECT count(*) FROM checkpoints"), 320);
    }

    #[test]
    fn group_commit_batches_requests() {
        // Queue many writes before the writer can drain them: they commit
        // together, and each still gets its own answer.
        let (_dir, store) = open();
        let futures: Vec<_> = (0..200)
            .map(|i| {
                store.create_run(NewRun {
                    id: format!("r{i}"),
                    workflow: "wf".into(),
                    input: Arc::from(&b"null"[..]),
                })
            })
            .collect();
        let dup = store.create_run(NewRun {
            id: "r0".into(),
            workflow: "wf".into(),
            input: Arc::from(&b"null"[..]),
        });
        for f in futures {
            assert!(matches!(block_on(f).unwrap(), Created::New));
        }
        assert!(matches!(block_on(dup).unwrap(), Created::Existing(_)));
        assert_eq!(count(&store, "SELECT count(*) FROM runs"), 200);
    }

    #[test]
    fn a_failing_request_does_not_abort_its_batch() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let c = claim_one(&store, "w", "i");
        // Queued together: a good save, a bad one (out of order), a good one.
        let one = store.save_checkpoint(&c.lease, cp("r", 1), None);
        let bad = store.save_checkpoint(&c.lease, cp("r", 7), None);
        let two = store.save_checkpoint(&c.lease, cp("r", 2), None);
        block_on(one).unwrap();
        assert!(block_on(bad).is_err());
        block_on(two).unwrap();
        let seqs: Vec<u64> = block_on(store.list_checkpoints("r"))
            .unwrap()
            .iter()
            .map(|c| c.seq)
            .collect();
        assert_eq!(seqs, [1, 2]);
        assert_eq!(
            events(&store, "r")
                .iter()
                .filter(|e| matches!(e, Event::CheckpointSaved { .. }))
                .count(),
            2
        );
    }

    #[test]
    fn unchanged_fields_are_stored_once() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let c = claim_one(&store, "w", "i");
        let big = vec![0xAB; 1024];
        for seq in 1..=100u64 {
            let counter = seq.to_le_bytes();
            let cp = cp_fields("r", seq, &[("big", &big), ("counter", &counter)], None);
            block_on(store.save_checkpoint(&c.lease, cp, None)).unwrap();
        }
        // The 1 KB field is stored once; the counter once per checkpoint.
        let stored = count(&store, "SELECT sum(length(data)) FROM chunks");
        assert_eq!(stored, 1024 + 100 * 8);
        assert_eq!(count(&store, "SELECT count(*) FROM layouts"), 1);
        for cp in block_on(store.list_checkpoints("r")).unwrap() {
            assert_eq!(cp.field_bytes(0).unwrap(), &big[..]);
            assert_eq!(cp.field_bytes(1).unwrap(), &cp.seq.to_le_bytes());
        }
        // A store that did not write them (no cache) dedups the same way.
        let other = SqliteStore::open(store.path()).unwrap();
        let cp = cp_fields("r", 101, &[("big", &big), ("counter", &[1])], None);
        block_on(other.save_checkpoint(&c.lease, cp, None)).unwrap();
        assert_eq!(
            count(&store, "SELECT sum(length(data)) FROM chunks"),
            stored + 1
        );
    }

    #[test]
    fn retention_never_drops_bytes_a_kept_checkpoint_uses() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let c = claim_one(&store, "w", "i");
        let constant = vec![7u8; 500];
        for seq in 1..=50u64 {
            // `slow` changes every 10 checkpoints, `fast` every time.
            let slow = [(seq / 10) as u8; 100];
            let fast = seq.to_le_bytes();
            let cp = cp_fields(
                "r",
                seq,
                &[("constant", &constant), ("slow", &slow), ("fast", &fast)],
                None,
            );
            block_on(store.save_checkpoint(&c.lease, cp, Some(3))).unwrap();
            let kept = block_on(store.list_checkpoints("r")).unwrap();
            assert_eq!(kept.len(), seq.min(3) as usize);
            for k in &kept {
                assert_eq!(k.field_bytes(0).unwrap(), &constant[..]);
                assert_eq!(k.field_bytes(1).unwrap(), &[(k.seq / 10) as u8; 100]);
                assert_eq!(k.field_bytes(2).unwrap(), &k.seq.to_le_bytes());
            }
        }
        // Kept: #48, #49, #50. Chunks are freed whole, once no kept checkpoint
        // uses any of their bytes: #1 (constant, slow 0, fast 1) for the
        // constant, #40 (slow 4, fast 40) for slow 4, #48 and #49 (fast), #50
        // (slow 5, fast 50).
        assert_eq!(count(&store, "SELECT count(*) FROM chunks"), 5);
        assert_eq!(
            count(&store, "SELECT sum(length(data)) FROM chunks"),
            608 + 108 + 8 + 8 + 108
        );
        assert_eq!(count(&store, "SELECT count(*) FROM checkpoints"), 3);
        assert_eq!(count(&store, "SELECT min(refs) > 0 FROM chunks"), 1);
        // Pruning with the latest checkpoint only.
        let cp = cp_fields("r", 51, &[("constant", &constant)], None);
        block_on(store.save_checkpoint(&c.lease, cp, Some(1))).unwrap();
        assert_eq!(count(&store, "SELECT count(*) FROM chunks"), 1);
        assert_eq!(count(&store, "SELECT sum(length(data)) FROM chunks"), 608);
    }

    #[test]
    fn schema_version_is_set_and_newer_is_refused() {
        let (_dir, store) = open();
        assert_eq!(SCHEMA_VERSION, 1);
        assert_eq!(count(&store, "PRAGMA user_version"), SCHEMA_VERSION);
        let mode: String = peek(&store)
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let path = store.path().to_path_buf();
        drop(store);
        // Reopening an up-to-date file runs no migration.
        drop(SqliteStore::open(&path).unwrap());
        peek_path(&path)
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(err.to_string().contains("newer"), "{err}");
    }

    fn peek_path(path: &Path) -> Connection {
        Connection::open(path).unwrap()
    }

    #[test]
    fn not_a_database_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junk.db");
        std::fs::write(&path, vec![0x42; 8192]).unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, Error::Store { .. }), "{err}");
        let err = SqliteStore::open(dir.path().join("no/such/dir/x.db")).unwrap_err();
        assert!(matches!(err, Error::Store { .. }), "{err}");
    }

    #[test]
    fn a_full_disk_surfaces_and_keeps_the_previous_checkpoint() {
        let (_dir, store) = open();
        new_run(&store, "r");
        let c = claim_one(&store, "w", "i");
        let first = cp_fields("r", 1, &[("v", b"first")], None);
        block_on(store.save_checkpoint(&c.lease, first.clone(), None)).unwrap();
        // Cap the file at its current size (SQLITE_FULL on growth).
        let pages = count(&store, "PRAGMA page_count");
        block_on(store.write(move |cx| {
            cx.conn.query_row(
                &format!("PRAGMA max_page_count = {}", pages + 2),
                [],
                |_| Ok(()),
            )?;
            Ok(())
        }))
        .unwrap();
        let huge = vec![1u8; 1 << 20];
        let second = cp_fields("r", 2, &[("v", &huge)], None);
        let err = block_on(store.save_checkpoint(&c.lease, second.clone(), None)).unwrap_err();
        assert!(matches!(err, Error::Store { .. }), "{err}");
        assert!(err.to_string().contains("full"), "{err}");
        let rec = block_on(store.load_run("r")).unwrap().unwrap();
        assert_eq!(rec.latest_seq, 1);
        assert_eq!(
            *block_on(store.latest_checkpoint("r")).unwrap().unwrap(),
            *first
        );
        // Space comes back: the same checkpoint now saves.
        block_on(store.write(|cx| {
            cx.conn
                .query_row("PRAGMA max_page_count = 1073741823", [], |_| Ok(()))?;
            Ok(())
        }))
        .unwrap();
        block_on(store.save_checkpoint(&c.lease, second.clone(), None)).unwrap();
        assert_eq!(
            *block_on(store.latest_checkpoint("r")).unwrap().unwrap(),
            *second
        );
    }

    #[tokio::test]
    async fn subscribers_hear_local_and_remote_changes() {
        let (_dir, one) = open();
        let two = SqliteStore::open(one.path()).unwrap();
        let mut local = one.subscribe();
        let mut remote = two.subscribe();
        local.borrow_and_update();
        remote.borrow_and_update();
        one.create_run(NewRun {
            id: "r".into(),
            workflow: "wf".into(),
            input: Arc::from(&b"null"[..]),
        })
        .await
        .unwrap();
        tokio::time::timeout(Duration::from_millis(100), local.changed())
            .await
            .expect("a local commit notifies at once")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(2), remote.changed())
            .await
            .expect("the poller notices another connection's commit")
            .unwrap();
    }

    #[test]
    fn busy_database_is_retried() {
        let (_dir, store) = open();
        // Another connection holds the write lock for a while.
        let blocker = peek(&store);
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let pending = store.create_run(NewRun {
            id: "r".into(),
            workflow: "wf".into(),
            input: Arc::from(&b"null"[..]),
        });
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            blocker.execute_batch("COMMIT").unwrap();
        });
        assert!(matches!(block_on(pending).unwrap(), Created::New));
        release.join().unwrap();
    }

    /// The same script on a `MemoryStore` and a `SqliteStore` gives the same
    /// results (times aside).
    #[test]
    fn behaves_like_the_memory_store() {
        fn script(store: &dyn Store) -> Vec<String> {
            let mut out = Vec::new();
            let mut log = |what: &str, v: String| out.push(format!("{what}: {v}"));
            let norm = |r: &RunRecord| {
                let mut r = r.clone();
                r.created_at = UNIX_EPOCH;
                r.updated_at = UNIX_EPOCH;
                if let Some(l) = r.lease.as_mut() {
                    l.expires_at = UNIX_EPOCH;
                }
                format!("{r:?}")
            };
            for id in ["a", "b", "c"] {
                new_run(store, id);
            }
            let claimed = block_on(store.claim(&req("w", "i"))).unwrap();
            log("claim", format!("{:?}", claimed.unregistered));
            let lease = |id: &str| {
                claimed
                    .claimed
                    .iter()
                    .find(|c| c.run.id == id)
                    .unwrap()
                    .lease
                    .clone()
            };
            let wait = Some(Suspend::Waiting {
                signal: "go".into(),
                deadline: None,
            });
            let cp_a = cp_fields("a", 1, &[("x", b"1")], wait);
            log(
                "save a",
                format!(
                    "{:?}",
                    block_on(store.save_checkpoint(&lease("a"), cp_a, None))
                ),
            );
            log(
                "release a",
                format!(
                    "{:?}",
                    block_on(store.release("a", &lease("a"), Release::Suspend))
                ),
            );
            log(
                "put",
                format!("{:?}", block_on(store.put_signal("a", "go", b"1".to_vec()))),
            );
            log(
                "save stale",
                format!(
                    "{:?}",
                    block_on(store.save_checkpoint(&lease("a"), cp("a", 2), None))
                ),
            );
            let again = block_on(store.claim(&req("w", "i2"))).unwrap();
            for c in &again.claimed {
                log("reclaimed", norm(&c.run));
            }
            let la = again
                .claimed
                .iter()
                .find(|c| c.run.id == "a")
                .unwrap()
                .lease
                .clone();
            log(
                "reject",
                format!(
                    "{:?}",
                    block_on(store.reject_signal("a", &la, "bad".into()))
                ),
            );
            log(
                "take",
                format!(
                    "{:?}",
                    block_on(store.take_signal("a", &la, "go")).map(|s| s.is_some())
                ),
            );
            log(
                "timeout",
                format!("{:?}", block_on(store.time_out("a", &la))),
            );
            log(
                "finish b",
                format!(
                    "{:?}",
                    block_on(store.finish(
                        "b",
                        &lease("b"),
                        Outcome::Completed {
                            output: Arc::from(&b"2"[..]),
                            error: Some("e".into())
                        }
                    ))
                ),
            );
            log("cancel c", format!("{:?}", block_on(store.cancel("c"))));
            log("cancel c", format!("{:?}", block_on(store.cancel("c"))));
            log(
                "release c",
                format!(
                    "{:?}",
                    block_on(store.release("c", &lease("c"), Release::Abandon))
                ),
            );
            log("fork", format!("{:?}", block_on(store.fork("a", 1, "d"))));
            log(
                "fork again",
                format!("{:?}", block_on(store.fork("a", 1, "d"))),
            );
            log(
                "fork missing",
                format!("{:?}", block_on(store.fork("a", 3, "e"))),
            );
            for r in block_on(store.list_runs(&RunFilter::new())).unwrap() {
                log("run", norm(&r));
            }
            for id in ["a", "b", "c", "d"] {
                let h: Vec<Event> = events(store, id);
                log("history", format!("{h:?}"));
                let cps: Vec<(u64, Vec<u8>)> = block_on(store.list_checkpoints(id))
                    .unwrap()
                    .iter()
                    .map(|c| (c.seq, c.data.clone()))
                    .collect();
                log("checkpoints", format!("{cps:?}"));
                log(
                    "signals",
                    format!("{:?}", block_on(store.pending_signals(id)).map(|s| s.len())),
                );
            }
            log("unknown", format!("{:?}", block_on(store.load_run("zz"))));
            out
        }
        let memory = script(&MemoryStore::new());
        let (_dir, sqlite) = open();
        let sqlite = script(&sqlite);
        assert_eq!(memory, sqlite);
    }

    // -- Measurements (not run by default) ---------------------------------
    //
    // cargo test --release -p checkpoint-runtime --lib sqlite::tests::bench -- --ignored --nocapture --test-threads 1

    /// WAL frames (pages written) so far, from the WAL file's size.
    fn wal_frames(path: &Path) -> u64 {
        let wal = PathBuf::from(format!("{}-wal", path.display()));
        let len = std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0);
        len.saturating_sub(32) / (4096 + 24)
    }

    fn no_autocheckpoint(store: &SqliteStore) {
        block_on(store.write(|cx| {
            cx.conn.pragma_update(None, "wal_autocheckpoint", 0)?;
            Ok(())
        }))
        .unwrap();
        peek(store)
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }

    /// A raw connection with the store's pragmas and a one-table schema.
    fn raw_conn(path: &Path) -> Connection {
        let c = Connection::open(path).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.pragma_update(None, "synchronous", "FULL").unwrap();
        c.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)
            .unwrap();
        c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        c.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, run INTEGER, data BLOB)")
            .unwrap();
        c
    }

    fn state_bytes(i: u64) -> Vec<u8> {
        let mut v: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let at = (i % 1000) as usize;
        v[at] = v[at].wrapping_add(1 + (i / 1000) as u8);
        v
    }

    fn percentile(times: &mut [Duration], p: f64) -> Duration {
        times.sort();
        times[((times.len() - 1) as f64 * p) as usize]
    }

    fn micros(d: Duration) -> f64 {
        d.as_secs_f64() * 1e6
    }

    fn claim_all(store: &SqliteStore, n: usize) -> Vec<(String, Lease)> {
        for i in 0..n {
            new_run(store, &format!("r{i}"));
        }
        let mut r = req("w", "i");
        r.limit = n;
        block_on(store.claim(&r))
            .unwrap()
            .claimed
            .into_iter()
            .map(|c| (c.run.id, c.lease))
            .collect()
    }

    /// Sequential durable saves of a ~1 KB state vs raw INSERT + COMMIT.
    fn bench_sequential(n: u64) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("s.db")).unwrap();
        let runs = claim_all(&store, 1);
        let (id, lease) = &runs[0];
        for seq in 1..=50 {
            let cp = cp_fields(id, seq, &[("state", &state_bytes(seq))], None);
            block_on(store.save_checkpoint(lease, cp, None)).unwrap();
        }
        no_autocheckpoint(&store);
        let f0 = wal_frames(store.path());
        let mut times = Vec::new();
        for seq in 51..=50 + n {
            let cp = cp_fields(id, seq, &[("state", &state_bytes(seq))], None);
            let t = Instant::now();
            block_on(store.save_checkpoint(lease, cp, None)).unwrap();
            times.push(t.elapsed());
        }
        let frames = wal_frames(store.path()) - f0;
        let mean_s = times.iter().sum::<Duration>() / n as u32;
        let med_s = percentile(&mut times, 0.5);

        let raw = raw_conn(&dir.path().join("raw.db"));
        for i in 0..50 {
            raw.execute("INSERT INTO t (run, data) VALUES (1, ?1)", [state_bytes(i)])
                .unwrap();
        }
        let rpath = dir.path().join("raw.db");
        let f0 = wal_frames(&rpath);
        let mut times = Vec::new();
        for i in 0..n {
            let data = state_bytes(i);
            let t = Instant::now();
            raw.execute_batch("BEGIN IMMEDIATE").unwrap();
            raw.prepare_cached("INSERT INTO t (run, data) VALUES (1, ?1)")
                .unwrap()
                .execute([data])
                .unwrap();
            raw.execute_batch("COMMIT").unwrap();
            times.push(t.elapsed());
        }
        let rframes = wal_frames(&rpath) - f0;
        let mean_r = times.iter().sum::<Duration>() / n as u32;
        let med_r = percentile(&mut times, 0.5);
        println!(
            "sequential ({n} saves): store median {:.0} us mean {:.0} us, {:.2} pages/commit | \
             raw median {:.0} us mean {:.0} us, {:.2} pages/commit | ratio median {:.2} mean {:.2}",
            micros(med_s),
            micros(mean_s),
            frames as f64 / n as f64,
            micros(med_r),
            micros(mean_r),
            rframes as f64 / n as f64,
            med_s.as_secs_f64() / med_r.as_secs_f64(),
            mean_s.as_secs_f64() / mean_r.as_secs_f64(),
        );
    }

    /// `runs` concurrent runs, `each` saves each, vs raw batched inserts.
    fn bench_concurrent(runs: usize, each: u64) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(dir.path().join("c.db")).unwrap());
        let leases = claim_all(&store, runs);
        assert_eq!(leases.len(), runs);
        no_autocheckpoint(&store);
        let f0 = wal_frames(store.path());
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let start = Instant::now();
        tokio.block_on(async {
            let tasks: Vec<_> = leases
                .into_iter()
                .map(|(id, lease)| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        for seq in 1..=each {
                            let cp = cp_fields(&id, seq, &[("state", &state_bytes(seq))], None);
                            store.save_checkpoint(&lease, cp, None).await.unwrap();
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        let took = start.elapsed();
        let total = runs as u64 * each;
        let frames = wal_frames(store.path()) - f0;
        let per_s = total as f64 / took.as_secs_f64();

        let rpath = dir.path().join("raw.db");
        let raw = raw_conn(&rpath);
        let f0 = wal_frames(&rpath);
        let start = Instant::now();
        for b in 0..each {
            raw.execute_batch("BEGIN IMMEDIATE").unwrap();
            for r in 0..runs {
                raw.prepare_cached("INSERT INTO t (run, data) VALUES (?1, ?2)")
                    .unwrap()
                    .execute(params![r as i64, state_bytes(b)])
                    .unwrap();
            }
            raw.execute_batch("COMMIT").unwrap();
        }
        let rtook = start.elapsed();
        let rframes = wal_frames(&rpath) - f0;
        let raw_s = total as f64 / rtook.as_secs_f64();
        println!(
            "concurrent {runs} runs x {each}: store {per_s:.0}/s, {:.2} pages/checkpoint | \
             raw batched {raw_s:.0} rows/s, {:.2} pages/row | {:.0}%",
            frames as f64 / total as f64,
            rframes as f64 / total as f64,
            100.0 * per_s / raw_s,
        );
    }

    /// Resume (fresh open, claim with the latest checkpoint, load it) after
    /// `n` prior checkpoints.
    fn bench_resume(n: u64) -> Duration {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        {
            let store = SqliteStore::open(&path).unwrap();
            // Other runs interleaved, so the run's rows are not alone.
            let leases = claim_all(&store, 4);
            let mut seq = 0;
            while seq < n {
                let batch: Vec<_> = (0..1000.min(n - seq))
                    .flat_map(|k| {
                        let s = seq + k + 1;
                        leases
                            .iter()
                            .take(if s % 100 == 0 { 4 } else { 1 })
                            .map(|(id, lease)| {
                                let cs = if id == "r0" { s } else { s / 100 };
                                let cp = cp_fields(id, cs, &[("state", &state_bytes(s))], None);
                                store.save_checkpoint(lease, cp, None)
                            })
                            .collect::<Vec<_>>()
                    })
                    .collect();
                for f in batch {
                    block_on(f).unwrap();
                }
                seq += 1000.min(n - seq);
            }
        }
        let mut times = Vec::new();
        for round in 0..21 {
            let t = Instant::now();
            let store = SqliteStore::open(&path).unwrap();
            let mut r = req("w", &format!("j{round:03}"));
            r.only = Some("r0".into());
            let c = block_on(store.claim(&r)).unwrap().claimed.remove(0);
            assert_eq!(c.checkpoint.as_ref().unwrap().seq, n);
            let latest = block_on(store.latest_checkpoint("r0")).unwrap().unwrap();
            assert_eq!(latest.seq, n);
            times.push(t.elapsed());
        }
        let med = percentile(&mut times, 0.5);
        println!("resume after {n} checkpoints: median {:.0} us", micros(med));
        med
    }

    #[test]
    #[ignore]
    fn bench_1_sequential() {
        bench_sequential(2000);
    }

    #[test]
    #[ignore]
    fn bench_2_concurrent() {
        bench_concurrent(1000, 20);
        bench_concurrent(50, 200);
    }

    #[test]
    #[ignore]
    fn bench_3_resume() {
        let small = bench_resume(10);
        let big = bench_resume(100_000);
        println!(
            "resume ratio 100k/10: {:.2}",
            big.as_secs_f64() / small.as_secs_f64()
        );
    }
}
