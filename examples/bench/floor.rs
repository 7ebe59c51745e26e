//! The raw SQLite floors the bench table compares the store with: a
//! rusqlite connection with SQLite's defaults + WAL (the main floor) or
//! with the store's own settings (`Floor`), and the raw sequential commits
//! and batched inserts timed on it. Every SQLite section measures its
//! floor with these, so that both sides of a row are written the same way.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::process::{cpu_split, thread_ticks, written_bytes};
use super::workloads::{open_rt, Probe};
use super::BoxError;

/// The file-level settings of a database the store creates (`page_size`,
/// `auto_vacuum`), read by [`store_file_settings`]; the second floors'
/// files ([`Floor::Store`]) get the same.
static FILE_SETTINGS: std::sync::OnceLock<(i64, i64)> = std::sync::OnceLock::new();

/// Creates a store file in `dir` and reads its page size and auto-vacuum
/// mode into [`FILE_SETTINGS`].
pub(crate) async fn store_file_settings(dir: &Path) -> Result<(i64, i64), BoxError> {
    let path = dir.join("settings.db");
    drop(open_rt(&path, &Probe::default(), 1).await?);
    let conn = Connection::open(&path)?;
    let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let vacuum: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    let _ = FILE_SETTINGS.set((page, vacuum));
    Ok((page, vacuum))
}

/// The settings of a raw floor's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Floor {
    /// The main floor: what `rusqlite::Connection::open` gives a user (4 KiB
    /// pages, a 2 MiB cache, a WAL checkpoint every 1,000 pages, `synchronous`
    /// FULL), with one change, `journal_mode=WAL`. WAL, because it is what
    /// a durable writer of many small transactions turns on first, and the
    /// stricter floor: the default rollback journal costs at least two
    /// fsyncs per commit plus creating and deleting the journal, so against
    /// it the store would look faster than it is. `synchronous` stays at its
    /// default, FULL, the store's own: every commit is fsynced, the same
    /// durability on both sides.
    Defaults,
    /// The store's own settings (its page size and auto-vacuum mode, and
    /// the writer connection's pragmas as `prepare_writer` in
    /// `checkpoint-runtime/src/store/sqlite/migrations.rs` sets them): a
    /// second line, to tell what the settings do from what the store does.
    Store,
}

impl Floor {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Floor::Defaults => "SQLite defaults + WAL",
            Floor::Store => "the store's settings",
        }
    }
}

/// A raw connection with `floor`'s settings and one table of blobs.
pub(crate) fn raw_conn(path: &Path, floor: Floor) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    if floor == Floor::Store {
        if let Some((page, vacuum)) = FILE_SETTINGS.get() {
            // Before anything is written: they only apply to a new file.
            conn.pragma_update(None, "page_size", page)?;
            conn.pragma_update(None, "auto_vacuum", vacuum)?;
        }
    }
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    assert!(mode.eq_ignore_ascii_case("wal"), "WAL mode");
    if floor == Floor::Store {
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        conn.pragma_update(None, "cache_size", -(4i64 << 10))?;
        conn.pragma_update(None, "wal_autocheckpoint", STORE_AUTOCHECKPOINT)?;
        conn.pragma_update(None, "journal_size_limit", STORE_JOURNAL_LIMIT)?;
    }
    let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    assert_eq!(sync, 2, "synchronous=FULL: every commit durable");
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    )?;
    Ok(conn)
}

/// The store writer's `wal_autocheckpoint` and `journal_size_limit` (see
/// `migrations.rs`), for [`Floor::Store`].
const STORE_AUTOCHECKPOINT: i64 = 256;
const STORE_JOURNAL_LIMIT: i64 = 4 << 20;

/// `n` durable transactions of one INSERT each; the time of each.
pub(crate) fn raw_sequential(
    conn: &Connection,
    bytes: &[u8],
    n: usize,
) -> rusqlite::Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        conn.prepare_cached("INSERT INTO t (data) VALUES (?1)")?
            .execute([bytes])?;
        conn.execute_batch("COMMIT")?;
        times.push(t.elapsed());
    }
    Ok(times)
}

/// Rows per second of `txs` durable transactions of `per_tx` INSERTs each.
pub(crate) fn raw_batched(
    conn: &Connection,
    bytes: &[u8],
    per_tx: usize,
    txs: usize,
) -> rusqlite::Result<f64> {
    let start = Instant::now();
    for _ in 0..txs {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        {
            let mut stmt = conn.prepare_cached("INSERT INTO t (data) VALUES (?1)")?;
            for _ in 0..per_tx {
                stmt.execute([bytes])?;
            }
        }
        conn.execute_batch("COMMIT")?;
    }
    Ok((per_tx * txs) as f64 / start.elapsed().as_secs_f64())
}

/// Raw batched-insert throughput of the same disk: `txs` transactions of
/// `per_tx` rows of `bytes` into a fresh file (long enough to include the
/// WAL checkpoints it causes). Returns rows/s, CPU us per row, bytes written
/// per row.
pub(crate) fn raw_floor(
    path: &Path,
    floor: Floor,
    bytes: &[u8],
    per_tx: usize,
    txs: usize,
) -> Result<[f64; 3], BoxError> {
    let conn = raw_conn(path, floor)?;
    let (ticks, wrote) = (thread_ticks(), written_bytes());
    let rate = raw_batched(&conn, bytes, per_tx, txs)?;
    let rows = (per_tx * txs) as f64;
    let cpu = cpu_split(&ticks, &thread_ticks()).1 / rows;
    let written = written_bytes().saturating_sub(wrote) as f64 / rows;
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok([rate, cpu, written])
}
