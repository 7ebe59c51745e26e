//! The schema and its versions (`PRAGMA user_version`), and the pragmas the
//! writer connection is opened with.

use rusqlite::{Connection, TransactionBehavior};

use super::error::{retry_busy, Fail, R};
use crate::Error;

/// The writer connection's page cache, in KiB (a group commit of 1,000 runs
/// of ~1 KB dirties about 1.3 MiB with this schema; pages beyond that are
/// only read again to resume runs).
pub(super) const WRITER_CACHE_KIB: i64 = 4 << 10;

/// The page size of new files.
pub(super) const PAGE_SIZE: i64 = 8192;

/// The schema migrations: `MIGRATIONS[i]` upgrades a database at version `i`
/// to version `i + 1`. The current version is `MIGRATIONS.len()`. To change
/// the schema, append a function; never edit one that has shipped.
pub(super) const MIGRATIONS: &[fn(&Connection) -> rusqlite::Result<()>] = &[migrate_v1];

/// The schema version this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Version 1: the tables and indexes. One SQL script, longer than a function
/// would otherwise be.
pub(super) fn migrate_v1(conn: &Connection) -> rusqlite::Result<()> {
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

/// Sets the writer connection's pragmas (WAL, `synchronous=FULL`, ...) and
/// migrates the schema forward to [`SCHEMA_VERSION`].
pub(super) fn prepare_writer(conn: &mut Connection) -> R<()> {
    // 8 KiB pages (for a new file; an existing one keeps its own): rows
    // of a few KiB waste less of a page than with 4 KiB (a 2 KiB state
    // plus the row's ~50 bytes takes a whole 4 KiB page), and a commit
    // of a checkpoint still writes about two pages.
    conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    let mode: String =
        retry_busy(
            || Ok(conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?),
        )?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Fail::from(Error::store(format!(
            "sqlite: cannot switch to WAL mode (journal mode is `{mode}`)"
        ))));
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
            return Err(Fail::from(Error::store(format!(
                "sqlite: the database has schema version {version}, newer than this \
                     build's {SCHEMA_VERSION}; upgrade checkpoint-runtime"
            ))));
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
