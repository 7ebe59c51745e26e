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

/// The writer folds the WAL into the main file once it holds this many
/// pages (`wal_autocheckpoint`, 2 MiB at 8 KiB pages), and the next
/// transaction starts it over. This bounds what a crash leaves: the next
/// open rebuilds the WAL's index by reading and checksumming every frame
/// written since the WAL last started over, before its first read. With
/// 16,384 pages (128 MiB), a sequential history of 5,000 checkpoints ended
/// by a crash left 90 MiB to recover, and resuming took 76 ms against 12 ms
/// after 10 checkpoints (same disk, same run; about 0.7 ms per MiB), one of
/// 100,000 left 10 to 127 MiB: 4 to 56 ms against 2 to 8 ms. In bench
/// runs alternating with the old setting, sequential commits got faster
/// (the WAL is overwritten in place, and an fsync that does not change a
/// file's size is the cheaper one: median 1.17x the raw floor against
/// 1.38x over six runs each), and 1,000 concurrent runs kept their ratio to
/// the raw floor within the noise (medians 52 % and 49 %, single runs 35 to
/// 63 %) for 0.3 us more CPU and 0.6 KB more written per checkpoint: the
/// copying the old setting left for after the run, at close.
pub(super) const WAL_CHECKPOINT_PAGES: i64 = 256;

/// A WAL file grown past this (a large batch, a checkpoint held back by a
/// long read) is cut back to it when the WAL next starts over
/// (`journal_size_limit`); below it, the file is overwritten in place, and
/// an fsync that does not change a file's size is the cheaper one.
pub(super) const WAL_SIZE_LIMIT: i64 = 4 << 20;

/// The schema migrations: `MIGRATIONS[i]` upgrades a database at version `i`
/// to version `i + 1`. The current version is `MIGRATIONS.len()`. To change
/// the schema, append a function; never edit one that has shipped.
pub(super) const MIGRATIONS: &[fn(&Connection) -> rusqlite::Result<()>] = &[
    migrate_v1,
    migrate_v2,
    migrate_v3,
    migrate_v4,
    migrate_v5,
    migrate_v6,
    migrate_v7,
    migrate_v8,
    migrate_v9,
    migrate_v10,
    migrate_v11,
];

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

/// Version 2: each checkpoint row's seal, `checksum` (see
/// `store::integrity`): the CRC-32 of its metadata and of each field's
/// bytes (wherever the row keeps them). Rows written before have NULL and
/// are read unchecked; a cut-down (hidden) row has NULL too.
pub(super) fn migrate_v2(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("ALTER TABLE checkpoints ADD COLUMN checksum BLOB")
}

/// Version 3: each run's `version`, the workflow version that started it
/// (see `RunRecord::version`); runs from before are version 1.
pub(super) fn migrate_v3(conn: &Connection) -> rusqlite::Result<()> {
    // The parked runs every worker looks for (state 6), from an index.
    conn.execute_batch(
        "ALTER TABLE runs ADD COLUMN version INTEGER NOT NULL DEFAULT 1; \
         CREATE INDEX runs_parked ON runs (ord) WHERE state = 6;",
    )
}

/// Version 4: fields that grow by appending are stored as what they
/// appended (see `checkpoints::delta`). A checkpoint row's `refs` may then
/// be followed by the postcard descriptors of those fields (rows of older
/// versions have none), and their tails are rows of `segments`.
pub(super) fn migrate_v4(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        r#"
        -- Slices of the streams of fields stored by appending (the tails
        -- of one field's versions concatenated): by the run, the field's
        -- chain (the seq of the version that started it << 16 | the
        -- field's index then), the level (0: one version's tail; 1: 64
        -- level-0 segments together; k + 1: 1,024 of level k together; the
        -- segments folded are then deleted) and
        -- `start`, the slice's offset in the stream; `last` is the seq of
        -- the version that wrote it. Written in the transaction of the
        -- checkpoint row that references it first; deleted when folded
        -- into the next level, or by retention once no kept version uses
        -- it. Without a rowid: the segments of a level that a version uses
        -- are one range of the key, read in one scan.
        CREATE TABLE segments (
            run   INTEGER NOT NULL,
            chain INTEGER NOT NULL,
            level INTEGER NOT NULL,
            start INTEGER NOT NULL,
            last  INTEGER NOT NULL,
            data  BLOB    NOT NULL,
            PRIMARY KEY (run, chain, level, start)
        ) WITHOUT ROWID;
        "#,
    )
}

/// Version 5: child runs (`ctx.spawn`, see `crate::child`). A run's
/// `parent` (NULL for runs started by `Runtime::start`, and for every run
/// from before), and for a run suspended on a join, `join_pending`: how
/// many of its children have not ended. `joins` has a row per child a
/// joining run waits for, deleted when that child ends.
pub(super) fn migrate_v5(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "ALTER TABLE runs ADD COLUMN parent TEXT; \
         ALTER TABLE runs ADD COLUMN join_pending INTEGER NOT NULL DEFAULT 0; \
         CREATE INDEX runs_parent ON runs (parent, state, ord) WHERE parent IS NOT NULL; \
         CREATE TABLE joins ( \
             child  INTEGER NOT NULL, \
             waiter INTEGER NOT NULL, \
             PRIMARY KEY (child, waiter) \
         ) WITHOUT ROWID;",
    )
}

/// Version 6: claims and the next wake-up read only the runs that can be
/// due, never every unfinished one (with tens of thousands of runs
/// waiting for a person's approval, each claim walked them all). Each way
/// a run becomes claimable has an index (see `claim::RUNNABLE`): ready runs
/// by creation order; waiting and sleeping runs by their deadline; waiting
/// ones still under a lease (a crash between their suspending checkpoint
/// and the lease's release). A waiting run's signal is found from
/// `signals`. `runs_active` served only the claim and goes.
pub(super) fn migrate_v6(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "DROP INDEX IF EXISTS runs_active; \
         CREATE INDEX runs_ready ON runs (ord) WHERE state = 0; \
         CREATE INDEX runs_due ON runs (due) WHERE state IN (1, 2); \
         CREATE INDEX runs_held ON runs (ord) WHERE state IN (1, 2) AND lease_worker IS NOT NULL;",
    )
}

/// Version 7: `signal_sites`, what each workflow's wait sites take (see
/// `Store::put_signal_sites`): a signal is checked against it when sent.
/// `''` stands for a computed name or an unknown schema.
pub(super) fn migrate_v7(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE signal_sites (\
             workflow TEXT NOT NULL, \
             signal TEXT NOT NULL, \
             payload_schema TEXT NOT NULL, \
             PRIMARY KEY (workflow, signal, payload_schema)\
         ) WITHOUT ROWID;",
    )
}

/// Version 8: a run's pending cancel request (`Runtime::request_cancel`),
/// as JSON (`CancelRequest::to_json`); NULL when none was made.
pub(super) fn migrate_v8(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("ALTER TABLE runs ADD COLUMN cancel_request TEXT;")
}

/// Version 9: `schedules` (see `Store::put_schedule`): a schedule's
/// definition (JSON), pause, and the last tick it handled (nanoseconds
/// since the epoch, as every time here).
pub(super) fn migrate_v9(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE schedules (\
             name TEXT PRIMARY KEY NOT NULL, \
             workflow TEXT NOT NULL, \
             spec TEXT NOT NULL, \
             paused INTEGER NOT NULL DEFAULT 0, \
             last_tick INTEGER, \
             last_run TEXT, \
             created_at INTEGER NOT NULL\
         ) WITHOUT ROWID;",
    )
}

/// Version 10: a run's stream (`ctx.emit`: one row per item, with the
/// checkpoint seq it was emitted after, which a resume discards from) and
/// progress (`ctx.set_progress`, the latest value), keyed by the run's
/// `ord`, apart from its checkpoints and history.
pub(super) fn migrate_v10(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "CREATE TABLE stream_items (\
             run INTEGER NOT NULL, \
             idx INTEGER NOT NULL, \
             after_seq INTEGER NOT NULL, \
             value BLOB NOT NULL, \
             PRIMARY KEY (run, idx)\
         ); \
         CREATE TABLE run_progress (\
             run INTEGER PRIMARY KEY, \
             value BLOB NOT NULL\
         );",
    )
}

/// Version 11: a run's start options (`StartOptions`): its tags, a JSON
/// object of strings (NULL: none), its queue and its priority. Written
/// once, with the run. `runs_queue`: a claim counts the slots of a queue
/// (its runs under a lease) from it, and reads its runs in admission order
/// from `runs_queue_order`. `queue_admissions`: the claims of the
/// runs of queues with a rate, when (`at`) and until when they count
/// (`until`, the end of the rate's window), kept until then.
pub(super) fn migrate_v11(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "ALTER TABLE runs ADD COLUMN tags TEXT; \
         ALTER TABLE runs ADD COLUMN queue TEXT; \
         ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0; \
         CREATE INDEX runs_queue ON runs (queue, lease_expires) \
             WHERE queue IS NOT NULL AND lease_worker IS NOT NULL; \
         CREATE INDEX runs_queue_order ON runs (queue, priority DESC, ord) \
             WHERE queue IS NOT NULL AND state < 3; \
         CREATE TABLE queue_admissions ( \
             queue TEXT NOT NULL, at INTEGER NOT NULL, until INTEGER NOT NULL); \
         CREATE INDEX queue_admissions_by_queue ON queue_admissions (queue, at); \
         CREATE INDEX queue_admissions_by_until ON queue_admissions (until);",
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
    // The poller copies frames in the background while the load is light;
    // this checkpoint, on the writer's thread after a commit, copies the
    // rest and is what bounds the WAL under any load.
    conn.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)?;
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
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
