//! The database schema and its forward migrations.
//!
//! `cp_schema_version` holds one row: the version of the tables in this
//! PostgreSQL schema. [`MIGRATIONS`]`[i]` upgrades version `i` to `i + 1`;
//! [`migrate`] applies the missing ones on open, in one transaction, under an
//! advisory lock (so that workers starting together migrate once). A
//! database newer than this build is refused. To change the schema, append a
//! migration; never edit one that has shipped.

use super::conn::{get, quote_ident, Pooled};
use crate::Error;

/// The tables, version 1. Times are nanoseconds since the Unix epoch
/// (`bigint`), taken from the clocks of the workers.
const V1: &str = r#"
-- One row per run. `ord` is the creation order.
-- state: 0 ready, 1 waiting (signal; due = deadline), 2 sleeping (due =
-- until), 3 completed (output; error = the `Err` text), 4 failed (error =
-- the runtime's Error as JSON), 5 cancelled.
-- The lease (worker, instance, expiry) and the fencing epoch are checked
-- under the row's lock by every fenced write.
CREATE TABLE cp_runs (
    id             text     PRIMARY KEY,
    ord            bigint   GENERATED ALWAYS AS IDENTITY UNIQUE,
    workflow       text     NOT NULL,
    input          bytea    NOT NULL,
    state          smallint NOT NULL,
    signal         text,
    due            bigint,
    output         bytea,
    error          text,
    lease_worker   text,
    lease_instance text     COLLATE "C",
    lease_expires  bigint,
    epoch          bigint   NOT NULL DEFAULT 0,
    attempt        integer  NOT NULL DEFAULT 0,
    latest_seq     bigint   NOT NULL DEFAULT 0,
    wake_seq       bigint,
    wake_signal    text,
    wake_payload   bytea,
    created_at     bigint   NOT NULL,
    updated_at     bigint   NOT NULL
);
CREATE INDEX cp_runs_active ON cp_runs (ord) WHERE state < 3;

-- Every kept checkpoint version. Field i of a checkpoint is named
-- field_names[i], has type field_types[i] and schema key field_schemas[i]
-- (see cp_schemas), and its postcard bytes are
-- substring(data from field_offsets[i] + 1 for field_lens[i]).
-- suspend: JSON of the suspension the checkpoint carries (NULL: none).
CREATE TABLE cp_checkpoints (
    run           text     NOT NULL REFERENCES cp_runs (id) ON DELETE CASCADE,
    seq           bigint   NOT NULL,
    site_key      text     NOT NULL,
    label         text,
    site_index    integer  NOT NULL,
    loops         bigint[] NOT NULL,
    field_names   text[]   NOT NULL,
    field_types   text[]   NOT NULL,
    field_offsets bigint[] NOT NULL,
    field_lens    bigint[] NOT NULL,
    field_schemas text[]   NOT NULL,
    data          bytea    NOT NULL,
    suspend       jsonb,
    created_at    bigint   NOT NULL,
    PRIMARY KEY (run, seq)
);

-- Signals stored and not yet consumed, in arrival order (id).
CREATE TABLE cp_signals (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run         text   NOT NULL REFERENCES cp_runs (id) ON DELETE CASCADE,
    name        text   NOT NULL,
    payload     bytea  NOT NULL,
    received_at bigint NOT NULL
);
CREATE INDEX cp_signals_by_run ON cp_signals (run, name, id);

-- The history: every event of every run, as JSON, in order (id).
CREATE TABLE cp_history (
    id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run   text   NOT NULL REFERENCES cp_runs (id) ON DELETE CASCADE,
    at    bigint NOT NULL,
    event jsonb  NOT NULL
);
CREATE INDEX cp_history_by_run ON cp_history (run, id);

-- Field schema documents (JSON) by key; see `Store::put_schemas`.
CREATE TABLE cp_schemas (
    key  text PRIMARY KEY,
    body text NOT NULL
);
"#;

/// Version 2: each checkpoint's seal (see `store::integrity`): the CRC-32 of
/// its metadata and of each field's bytes. Rows written before have NULL
/// and are read unchecked.
const V2: &str = "ALTER TABLE cp_checkpoints ADD COLUMN checksum bytea;";

/// Version 3: each run's `version`, the workflow version that started it
/// (see `RunRecord::version`); runs from before are version 1.
/// The parked runs every worker looks for (state 6), from an index.
const V3: &str = "ALTER TABLE cp_runs ADD COLUMN version integer NOT NULL DEFAULT 1; \
                  CREATE INDEX cp_runs_parked ON cp_runs (ord) WHERE state = 6;";

/// Version 4: no foreign keys on the tables every checkpoint writes to
/// (`cp_checkpoints`, `cp_history`), and no primary key on `cp_history`.
/// Measured on a save (one statement: the run's row, a checkpoint row, an
/// event row): the two foreign-key checks (a trigger each, querying and
/// locking the run's row) and the identity's index were about a fifth of
/// the server's time (see examples/bench/postgres.rs).
///
/// What the foreign keys guaranteed holds without them: the store never
/// deletes a run, and it inserts a run's checkpoints and events only in
/// the statement or transaction that has just created or locked the run's
/// row (the save's fenced `UPDATE`, `fenced`, `lock_run`, `must_exist`,
/// `insert_run`), so no row can name a missing run. What `ON DELETE
/// CASCADE` did for a run deleted by hand, a statement trigger on `cp_runs`
/// does (it costs nothing on the hot path). Events are read by run in `id`
/// order from `cp_history_by_run (run, id)`; the identity still numbers
/// them, nothing needs a unique index over `id` alone.
const V4: &str = r#"
ALTER TABLE cp_checkpoints DROP CONSTRAINT IF EXISTS cp_checkpoints_run_fkey;
ALTER TABLE cp_history DROP CONSTRAINT IF EXISTS cp_history_run_fkey;
ALTER TABLE cp_history DROP CONSTRAINT IF EXISTS cp_history_pkey;
CREATE OR REPLACE FUNCTION cp_runs_deleted() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM cp_checkpoints c USING cp_deleted_runs d WHERE c.run = d.id;
    DELETE FROM cp_history h USING cp_deleted_runs d WHERE h.run = d.id;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS cp_runs_deleted ON cp_runs;
CREATE TRIGGER cp_runs_deleted AFTER DELETE ON cp_runs
REFERENCING OLD TABLE AS cp_deleted_runs
FOR EACH STATEMENT EXECUTE FUNCTION cp_runs_deleted();
"#;

/// Version 5: a checkpoint's `CheckpointSaved` event is no row of
/// `cp_history` but `event_id` in the checkpoint's row: its place in the
/// history, drawn from the numbering of `cp_history`'s ids when the
/// checkpoint is saved, so the history (`cp_history` and these, in id
/// order) reads as before. When retention deletes the checkpoint, its
/// event moves to `cp_history` under that id. A save then writes two
/// rows, not three (measured in examples/bench/postgres.rs). NULL: no
/// event here (rows written before, whose events are rows of `cp_history`;
/// copies made by a fork).
const V5: &str = "ALTER TABLE cp_checkpoints ADD COLUMN IF NOT EXISTS event_id bigint;";

/// Version 6: `cp_runs` pages half full. Every checkpoint updates its run's
/// row; an update that finds no room on the row's page is not HOT and adds
/// an entry to each of the table's indexes (id, ord, the active runs). In
/// the bench's throughput case (1,000 runs) a third of the saves' updates
/// were HOT with full pages. Applies to pages written from now on.
const V6: &str = "ALTER TABLE cp_runs SET (fillfactor = 50);";

/// Version 7: child runs (`ctx.spawn`, see `crate::child`). A run's
/// `parent` (NULL for runs started by `Runtime::start`, and for every run
/// from before), and for a run suspended on a join, `join_pending`: how
/// many of its children have not ended. `cp_joins` has a row per child a
/// joining run waits for, deleted when that child ends.
const V7: &str = "ALTER TABLE cp_runs ADD COLUMN parent text; \
                  ALTER TABLE cp_runs ADD COLUMN join_pending integer NOT NULL DEFAULT 0; \
                  CREATE INDEX cp_runs_parent ON cp_runs (parent, state, ord) \
                      WHERE parent IS NOT NULL; \
                  CREATE TABLE cp_joins (child text NOT NULL, waiter text NOT NULL, \
                                         PRIMARY KEY (child, waiter));";

/// Version 8: fields that grow by appending are stored as what they
/// appended (see `tables::segments`). A checkpoint row that does so has
/// `appended` (its descriptors) and `chains` (the chains they name); the
/// appended bytes are rows of `cp_segments`, stream bytes `lo..hi` of a
/// chain of a run, keyed by where they end (a fold's segment starts where
/// the first segment it folds does, in the statement that deletes that
/// one). The trigger that stands in for `ON DELETE CASCADE` deletes a
/// deleted run's segments too.
const V8: &str = r#"
ALTER TABLE cp_checkpoints ADD COLUMN IF NOT EXISTS appended bytea;
ALTER TABLE cp_checkpoints ADD COLUMN IF NOT EXISTS chains bigint[];
CREATE TABLE IF NOT EXISTS cp_segments (
    run   text   NOT NULL,
    chain bigint NOT NULL,
    lo    bigint NOT NULL,
    hi    bigint NOT NULL,
    bytes bytea  NOT NULL,
    PRIMARY KEY (run, chain, hi)
);
CREATE OR REPLACE FUNCTION cp_runs_deleted() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM cp_checkpoints c USING cp_deleted_runs d WHERE c.run = d.id;
    DELETE FROM cp_history h USING cp_deleted_runs d WHERE h.run = d.id;
    DELETE FROM cp_segments s USING cp_deleted_runs d WHERE s.run = d.id;
    RETURN NULL;
END
$$;
"#;

/// Version 9: claims and the next wake-up read only the runs that can be
/// due, never every unfinished one. Before, both walked `cp_runs_active`
/// (every run not finished) and filtered: with 70,000 runs waiting for a
/// signal or a far timer (approvals waiting days), a claim that found 10
/// ready runs read 2,400 pages, 12–25 ms; with thousands of runs executing
/// on many workers, every claim of every worker walked all of them. Now
/// each way a run becomes claimable has an index of its own (see
/// `tables::runs::CLAIM`): ready runs under no lease, by creation order
/// (`cp_runs_queued`); ready runs under a lease, by its expiry
/// (`cp_runs_expiring`) and by holder (`cp_runs_holder`, for a worker that
/// takes over its older instance's runs); waiting and sleeping runs by
/// their deadline (`cp_runs_due`); waiting ones still under a lease, which
/// a crash between their suspending checkpoint and the lease's release
/// leaves behind (`cp_runs_held`). A waiting run's signal is found from
/// `cp_signals`. No checkpoint changes a column of these indexes, so its
/// update of the run's row stays HOT; a lease renewal (once a third of the
/// TTL per run) no longer is. `cp_runs_active` served only the claim and
/// goes.
const V9: &str = "DROP INDEX IF EXISTS cp_runs_active; \
                  CREATE INDEX IF NOT EXISTS cp_runs_queued ON cp_runs (ord) \
                      WHERE state = 0 AND lease_worker IS NULL; \
                  CREATE INDEX IF NOT EXISTS cp_runs_expiring ON cp_runs (lease_expires) \
                      WHERE state = 0 AND lease_worker IS NOT NULL; \
                  CREATE INDEX IF NOT EXISTS cp_runs_holder ON cp_runs (lease_worker, lease_instance) \
                      WHERE state = 0 AND lease_worker IS NOT NULL; \
                  CREATE INDEX IF NOT EXISTS cp_runs_due ON cp_runs (due) WHERE state IN (1, 2); \
                  CREATE INDEX IF NOT EXISTS cp_runs_held ON cp_runs (ord) \
                      WHERE state IN (1, 2) AND lease_worker IS NOT NULL;";

/// Version 10: what names and locates a checkpoint's fields (and its loop
/// positions) is one `bytea`, `meta` (see `tables::checkpoints::meta`),
/// no longer six arrays: binding and building them was about a tenth of a
/// lone save's server time, and a batch parsed them as array literals per
/// row. Rows written before keep their arrays, renamed `v9_*` (NULL in the
/// rows written after): an older build still running against these tables
/// then fails on the missing columns, instead of reading a new row's NULL
/// arrays as a damaged checkpoint and setting its run aside.
const V10: &str = "ALTER TABLE cp_checkpoints ADD COLUMN IF NOT EXISTS meta bytea; \
                   ALTER TABLE cp_checkpoints RENAME COLUMN loops TO v9_loops; \
                   ALTER TABLE cp_checkpoints RENAME COLUMN field_names TO v9_field_names; \
                   ALTER TABLE cp_checkpoints RENAME COLUMN field_types TO v9_field_types; \
                   ALTER TABLE cp_checkpoints RENAME COLUMN field_offsets TO v9_field_offsets; \
                   ALTER TABLE cp_checkpoints RENAME COLUMN field_lens TO v9_field_lens; \
                   ALTER TABLE cp_checkpoints RENAME COLUMN field_schemas TO v9_field_schemas; \
                   ALTER TABLE cp_checkpoints ALTER COLUMN v9_loops DROP NOT NULL, \
                       ALTER COLUMN v9_field_names DROP NOT NULL, \
                       ALTER COLUMN v9_field_types DROP NOT NULL, \
                       ALTER COLUMN v9_field_offsets DROP NOT NULL, \
                       ALTER COLUMN v9_field_lens DROP NOT NULL, \
                       ALTER COLUMN v9_field_schemas DROP NOT NULL;";

/// Version 11: `cp_signal_sites`, what each workflow's wait sites take
/// (see `Store::put_signal_sites`): a signal is checked against it when
/// sent. `''` stands for a computed name or an unknown schema.
const V11: &str = "CREATE TABLE IF NOT EXISTS cp_signal_sites ( \
                       workflow text NOT NULL, \
                       signal text NOT NULL, \
                       payload_schema text NOT NULL, \
                       PRIMARY KEY (workflow, signal, payload_schema));";

/// Version 12: a run's pending cancel request (`Runtime::request_cancel`),
/// as JSON (`CancelRequest::to_json`); NULL when none was made. The fused
/// saves and ends leave a run that has one to the fenced transaction,
/// whose rules read it.
const V12: &str = "ALTER TABLE cp_runs ADD COLUMN IF NOT EXISTS cancel_request text;";

/// Version 13: `cp_schedules` (see `Store::put_schedule`): a schedule's
/// definition (JSON), pause, and the last tick it handled (nanoseconds
/// since the epoch, as every time here).
const V13: &str = "CREATE TABLE IF NOT EXISTS cp_schedules ( \
                       name text PRIMARY KEY, \
                       workflow text NOT NULL, \
                       spec text NOT NULL, \
                       paused boolean NOT NULL DEFAULT false, \
                       last_tick bigint, \
                       last_run text, \
                       created_at bigint NOT NULL);";

/// Version 14: a run's stream (`ctx.emit`: one row per item, with the
/// checkpoint seq it was emitted after, which a resume discards from) and
/// progress (`ctx.set_progress`, the latest value), apart from its
/// checkpoints and history.
const V14: &str = "CREATE TABLE IF NOT EXISTS cp_stream_items ( \
                       run text NOT NULL REFERENCES cp_runs (id) ON DELETE CASCADE, \
                       idx bigint NOT NULL, \
                       after_seq bigint NOT NULL, \
                       value bytea NOT NULL, \
                       PRIMARY KEY (run, idx)); \
                   CREATE TABLE IF NOT EXISTS cp_run_progress ( \
                       run text PRIMARY KEY REFERENCES cp_runs (id) ON DELETE CASCADE, \
                       value bytea NOT NULL);";

/// Version 15: a run's start options (`StartOptions`): its tags, a
/// `jsonb` object of strings (NULL: none; a filter asks for runs whose
/// object contains the filter's, `@>`, which the GIN index answers), its
/// queue and its priority. Written once, with the run. `cp_runs_queue`:
/// a claim counts the slots of a queue (its runs under a lease) from it;
/// `cp_runs_queue_order`: it reads the queue's runs in admission order.
/// `cp_queue_admissions`: the claims of the runs of queues with a rate,
/// when (`at`) and until when they count (`until`), kept until then.
const V15: &str = "ALTER TABLE cp_runs ADD COLUMN IF NOT EXISTS tags jsonb; \
                   ALTER TABLE cp_runs ADD COLUMN IF NOT EXISTS queue text; \
                   ALTER TABLE cp_runs ADD COLUMN IF NOT EXISTS priority integer NOT NULL DEFAULT 0; \
                   CREATE INDEX IF NOT EXISTS cp_runs_tags ON cp_runs USING gin (tags) \
                       WHERE tags IS NOT NULL; \
                   CREATE INDEX IF NOT EXISTS cp_runs_queue ON cp_runs (queue, lease_expires) \
                       WHERE queue IS NOT NULL AND lease_worker IS NOT NULL; \
                   CREATE INDEX IF NOT EXISTS cp_runs_queue_order \
                       ON cp_runs (queue, priority DESC, ord) \
                       WHERE queue IS NOT NULL AND state < 3; \
                   CREATE TABLE IF NOT EXISTS cp_queue_admissions ( \
                       queue text NOT NULL, at bigint NOT NULL, until bigint NOT NULL); \
                   CREATE INDEX IF NOT EXISTS cp_queue_admissions_by_queue \
                       ON cp_queue_admissions (queue, at); \
                   CREATE INDEX IF NOT EXISTS cp_queue_admissions_by_until \
                       ON cp_queue_admissions (until);";

/// The migrations, in order.
const MIGRATIONS: &[&str] = &[
    V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11, V12, V13, V14, V15,
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// Checks, reading only, that the tables of a store at this build's version
/// are in schema `schema` (else the first schema of the search path): an
/// [`Error::Store`] saying what is there otherwise. After it,
/// [`migrate`] finds nothing to do.
pub(super) async fn check_existing(
    conn: &mut Pooled<'_>,
    schema: Option<&str>,
    shown: &str,
) -> Result<(), Error> {
    let refuse = |reason: String| Error::store(format!("postgres: `{shown}`: {reason}"));
    let mut cx = conn.plain();
    let row = cx
        .query_one(
            "SELECT s.name, to_regclass(format('%I.cp_schema_version', s.name)) IS NOT NULL \
             FROM (SELECT coalesce($1::text, current_schema()::text) AS name) s",
            &[&schema],
        )
        .await?;
    let (Some(name), true) = (get::<Option<String>>(&row, 0)?, get::<bool>(&row, 1)?) else {
        return Err(refuse(format!(
            "not a checkpoint store: schema `{}` holds none of its tables; a store is \
             created by a worker opening it, never by a command that reads it (check \
             the database and `?schema=`)",
            schema.unwrap_or("(the search path's first)")
        )));
    };
    // The connection's search path is the store's schema (see `connect`).
    let version: Option<i32> = cx
        .query_opt("SELECT version FROM cp_schema_version", &[])
        .await?
        .map(|row| get(&row, 0))
        .transpose()?;
    match version {
        Some(v) if v == SCHEMA_VERSION => Ok(()),
        Some(v) if v > SCHEMA_VERSION => Err(refuse(format!(
            "the tables in schema `{name}` are at version {v}, newer than this build \
             supports ({SCHEMA_VERSION}); upgrade checkpoint-runtime"
        ))),
        Some(v) => Err(refuse(format!(
            "the tables in schema `{name}` are at version {v}, older than this build's \
             {SCHEMA_VERSION}: commands that read or operate runs do not upgrade a \
             store; a worker of this build upgrades it when it opens it (or use the \
             command line of the version the workers run)"
        ))),
        None => Err(refuse(format!(
            "not a checkpoint store: schema `{name}` has no schema version recorded"
        ))),
    }
}

/// Creates the PostgreSQL schema `schema` if asked to, then the tables, or
/// upgrades them. Returns the name of the schema holding the tables.
pub(super) async fn migrate(
    conn: &mut Pooled<'_>,
    schema: Option<&str>,
    shown: &str,
) -> Result<String, Error> {
    let mut cx = conn.begin().await?;
    let name: String = match schema {
        Some(s) => s.to_owned(),
        None => {
            let row = cx.query_one("SELECT current_schema()::text", &[]).await?;
            get::<Option<String>>(&row, 0)?.ok_or_else(|| Error::UnsupportedStore {
                url: shown.to_owned(),
                reason: "no schema to create the tables in: the search_path names no \
                         existing schema (add `?schema=NAME` to the URL)"
                    .to_owned(),
            })?
        }
    };
    // One migrator per schema at a time; the lock ends with the transaction.
    let key = format!("checkpoint-runtime:{name}");
    cx.query("SELECT pg_advisory_xact_lock(hashtext($1))", &[&key])
        .await?;
    // Created only when missing: a user without the right to create them
    // can still use existing ones.
    let exists = cx
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&name])
        .await?
        .is_some();
    if !exists {
        cx.batch(&format!("CREATE SCHEMA {}", quote_ident(&name)))
            .await?;
    }
    let versioned = cx
        .query_one(
            "SELECT to_regclass(format('%I.cp_schema_version', $1::text)) IS NOT NULL",
            &[&name],
        )
        .await?;
    if !get::<bool>(&versioned, 0)? {
        cx.batch("CREATE TABLE cp_schema_version (version integer NOT NULL)")
            .await?;
    }
    let found = cx
        .query_opt("SELECT version FROM cp_schema_version", &[])
        .await?;
    let version: i32 = match &found {
        Some(row) => get(row, 0)?,
        None => 0,
    };
    if version > SCHEMA_VERSION {
        return Err(Error::UnsupportedStore {
            url: shown.to_owned(),
            reason: format!(
                "the tables in schema `{name}` are at version {version}, newer than this \
                 build supports ({SCHEMA_VERSION}); upgrade checkpoint-runtime"
            ),
        });
    }
    for sql in &MIGRATIONS[usize::try_from(version).unwrap_or(0)..] {
        cx.batch(sql).await?;
    }
    if found.is_none() {
        cx.execute(
            "INSERT INTO cp_schema_version (version) VALUES ($1)",
            &[&SCHEMA_VERSION],
        )
        .await?;
    } else if version < SCHEMA_VERSION {
        cx.execute(
            "UPDATE cp_schema_version SET version = $1",
            &[&SCHEMA_VERSION],
        )
        .await?;
    }
    cx.commit().await?;
    Ok(name)
}
