//! The PostgreSQL backend: one database shared by many workers on many
//! machines.
//!
//! # Layout
//!
//! - **Connections** (`conn`): a pool of at most `pool_size` connections
//!   (default 8), opened on demand; each prepares its statements once. The
//!   connections' I/O runs in tasks on the tokio runtime that opened the
//!   store. Every method is one transaction (or one statement). No
//!   transaction waits for anything but the database while it is open: a
//!   method takes its connection before it begins, and its future is
//!   polled by the task that awaits it (the executor never leaves a
//!   workflow's checkpoint unpolled while it renews a lease). Lease
//!   renewals do not use the pool: they go over one connection of their own
//!   (`conn::Side`), one statement each, skipping a locked row instead of
//!   waiting for it, so that no load of checkpoints and claims can hold
//!   them up.
//! - **TLS** (`tls`): libpq's `sslmode` and `sslrootcert` over rustls
//!   (`ring` provider), read with the URL in `conn::Target::parse` into one
//!   connector that every connection of the store uses.
//! - **Tables** (`schema`): `cp_runs`, `cp_checkpoints`, `cp_signals`,
//!   `cp_history`, `cp_schemas`, `cp_joins`, `cp_signal_sites`, and `cp_schema_version` with the version of
//!   the others, created or migrated forward on open. They live in the
//!   connection's current schema (normally `public`), or in the schema named
//!   by `?schema=NAME` in the URL / [`PostgresStore::open_in_schema`]
//!   (created if missing), so that several independent stores can share a
//!   database.
//! - **Code** (rules decide, this backend applies; see `store::rules`):
//!   - `ops`: the generic writes: each loads the run's row (locked, fenced
//!     by its lease where the write presents one), calls one rule, and
//!     applies the change it returns;
//!   - `locked`: the generic save and end (what the fused paths fall back
//!     to, and how a join's checkpoint and a child's end go);
//!   - `claim`: the claim (its query, `rules::claim` per run, the runs it
//!     cannot load set aside);
//!   - `apply`: the one place a transition is written: the run's row, its
//!     event, another run's event, a queued signal, and what an end changes
//!     elsewhere (joiners counted and woken, a held sibling started,
//!     descendants cancelled, each through `apply` again);
//!   - `write`: the low-level writes `apply` makes;
//!   - `children`: the queries of child runs (joins, the bound on running
//!     children, descendants) and the lock order they keep;
//!   - `fused/`: the speed paths, one statement for what a rule and `apply`
//!     would write: `save`, `save_batch`, `group_commit`, `create_batch`,
//!     `finish`, `renew`, and the `batcher` they share; each names its
//!     rule, and `tests/fused.rs` shows it writes what the generic path
//!     writes;
//!   - `reads`: the reads (no rule);
//!   - `tables/{runs,checkpoints,signals,history}`: each table's SQL,
//!     never importing each other;
//!   - `conn`, `schema`, `notify`, `hold` and `tls` sit below.
//! - **Claims and fencing** (`tables::runs`, `claim`, `ops`): a claim selects runnable runs with
//!   `FOR NO KEY UPDATE SKIP LOCKED` (so concurrent workers never wait for,
//!   nor both take, the same run), bumps the fencing epoch and sets the
//!   lease. Every write that presents a [`Lease`] locks the run's row and
//!   checks worker, instance and epoch in the same transaction (a
//!   checkpoint save: in the `WHERE` of the `UPDATE` that locks it); a
//!   worker whose lease was taken over gets [`Error::LeaseLost`] and
//!   changes nothing, so a paused or partitioned worker cannot overwrite
//!   the new owner's checkpoint.
//! - **Checkpoints** (`tables::checkpoints`): one row per version, inserted with the
//!   run's state change in one statement (`fused::save`), the row holding the
//!   checkpoint's history event;
//!   retention (`keep`) deletes the oldest rows in the same statement
//!   (`fused::save`), never the latest. Saves of several runs waiting at
//!   the same time are sent as one statement (`fused::save_batch`), fenced
//!   each by its own run's lease (`fused::group_commit`).
//! - **Starts and ends** (`fused::create_batch`, `fused::finish`): the starts of runs made
//!   at the same time are one statement, and the ends of top-level runs one
//!   transaction, through a `batcher::Batcher` (a lone write goes at once;
//!   the rest queue for a writer task); each answers as it would alone. A
//!   lone end is one round trip; a child's end, and an end that another run
//!   joins, take the fenced transaction (`locked::finish_locked`).
//! - **Signals** (`tables::signals`) are consumed exactly once, under the run's lock.
//! - **History** (`tables::history`): an append-only table of JSON events,
//!   read together with the `CheckpointSaved` events that the kept
//!   checkpoints' rows hold (`event_id`: a save writes two rows, not three).
//! - **Wake-ups** (`notify`): `LISTEN`/`NOTIFY`, the `NOTIFY` sent right
//!   after the write's commit from a connection of its own (inside the
//!   transaction it would serialize every notifying commit of every worker
//!   behind a database-wide lock); due timers and expiring leases are found
//!   by [`Store::next_wakeup`]'s query.
//! - **Round trips** (`conn`): a checkpoint is one statement in autocommit,
//!   so one round trip and one WAL flush: a data-modifying `WITH` whose
//!   fenced `UPDATE` of the run's row gates the checkpoint row (holding its
//!   history event) and retention (`fused::save`); a save it refuses is done again as
//!   a transaction, which tells why. Elsewhere `BEGIN` is sent with a
//!   transaction's first statement, and independent statements of one
//!   transaction are sent together (`Cx::fork`).
//! - **Worker ids** (`hold`): [`Store::hold_worker`] is a session advisory
//!   lock on a connection of its own, taken again by a task when that
//!   connection ends (a server restart, a terminated session).
//!
//! # Reconnection
//!
//! Every connection is replaced when it failed: the pool drops closed
//! connections and opens new ones on demand, the renewal connection and the
//! listener reconnect by themselves, and the worker-id hold is taken again
//! (see `hold`). A method that failed because the server went away returns
//! [`Error::Store`]; the worker tries again.
//!
//! One thing is written to stderr: a line starting
//! `checkpoint-runtime: postgres: worker id` when a worker id's hold was
//! taken by another live instance while this one's connection was down.
//!
//! Times (timers, leases) come from the workers' clocks, which should be kept
//! in sync (NTP): a worker whose clock runs ahead takes over expired leases
//! early (the fencing epoch still keeps the old owner's writes out).

mod apply;
mod children;
mod claim;
mod conn;
mod fused;
mod hold;
mod locked;
mod notify;
mod ops;
mod queues;
mod reads;
mod schedules;
mod schema;
mod signal_sites;
mod streams;
mod tables;
#[cfg(test)]
mod tests;
mod tls;
mod write;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicI32;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::{oneshot, watch};

use self::conn::{get, Pool, Side, Target};
use self::fused::{batcher, create_batch, finish, group_commit};
use super::{
    CheckpointRecord, ClaimRequest, ClaimResult, Created, GcReport, Lease, NewRun, Outcome,
    Release, Renewed, RunRecord, SignalRecord, SignalSite, Store, Wakeup, WorkerHold,
};
use crate::history::{Event, HistoryEntry};
use crate::status::{RunFilter, StatusKind};
use crate::Error;

pub use self::schema::SCHEMA_VERSION;

/// A [`Store`] in a PostgreSQL database, for many workers on many machines.
///
/// Most programs open it through [`Runtime::open`](crate::Runtime::open) with
/// a `postgres://` or `postgresql://` URL. Besides the usual parameters of
/// `tokio-postgres` (`connect_timeout`, `application_name`, `options`, ...),
/// the URL accepts:
///
/// - `schema=NAME`: keep the tables in PostgreSQL schema `NAME` (ASCII
///   letters, digits and `_`), created if missing; by default they go to the
///   connection's current schema (normally `public`);
/// - `pool_size=N`: open at most `N` connections (1 to 1024, default 8),
///   plus one that listens for notifications, one that sends them, one for
///   lease renewals and one per worker id held;
/// - `sslmode` and `sslrootcert`, as in libpq: TLS through rustls (with
///   the `ring` provider). `sslmode=disable`: never; `prefer` (the
///   default): when the server offers it, else (or when the handshake
///   fails) plain TCP; `require`: always, with no certificate check (the
///   handshake's signatures are checked, the certificate is not: any one
///   is accepted, self-signed included); `verify-ca`: the certificate must
///   chain up to a root; `verify-full`: and name the host. The roots are
///   the CA certificates in the PEM file `sslrootcert=/path/ca.pem`, or,
///   without it, the system's (`sslrootcert=system` says so, and means
///   `verify-full`). As in libpq, `require` with a `sslrootcert` checks
///   the chain like `verify-ca`, and `sslmode` does not apply over a
///   Unix-domain socket. Unlike libpq, `~/.postgresql/root.crt` is not
///   read unasked. All the store's connections, and each reconnection,
///   use these settings.
///
/// The same parameters work in a `key=value` connection string
/// (`host=db sslmode=verify-full sslrootcert=/etc/ca.pem`). A bad
/// `pool_size`, `schema`, `sslmode` or `sslrootcert` (an unknown mode, a
/// file that cannot be read or holds no CA certificate) is
/// [`Error::UnsupportedStore`] naming the parameter and its value, before
/// any connection is tried:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use checkpoint_runtime::{store::postgres::PostgresStore, Error};
///
/// let url = "postgres://app@db.internal/workflows?sslmode=verify-full&sslrootcert=/no/ca.pem";
/// let err = PostgresStore::open(url).await.err().unwrap();
/// assert!(matches!(err, Error::UnsupportedStore { .. }));
/// assert!(err.to_string().contains("invalid sslrootcert `/no/ca.pem`: cannot read it"), "{err}");
///
/// let err = PostgresStore::open("postgres://app@db/w?sslmode=verify").await.err().unwrap();
/// assert!(err.to_string().contains("invalid sslmode `verify`"), "{err}");
/// # }
/// ```
///
/// ```no_run
/// use std::sync::Arc;
/// use checkpoint_runtime::{store::postgres::PostgresStore, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), checkpoint_runtime::Error> {
/// // Usually: Runtime::open("postgres://app@db.internal/workflows?schema=billing")
/// let store = PostgresStore::open(
///     "postgres://app@db.internal/workflows?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem",
/// )
/// .await?;
/// let rt = Runtime::builder().worker_id("worker-a").store(Arc::new(store)).in_memory();
/// # let _ = rt; Ok(()) }
/// ```
pub struct PostgresStore {
    pool: Arc<Pool>,
    /// The group commit of checkpoint saves.
    group: group_commit::GroupCommit,
    /// The starts of top-level runs, batched (see `create_batch`).
    creates: batcher::Batcher<create_batch::NewTop, Created>,
    /// The ends of runs, batched (see `finish`).
    finishes: batcher::Batcher<finish::Ending, ()>,
    /// A connection of its own for lease renewals (see [`Side`]).
    side: Side,
    /// The PostgreSQL schema holding the tables (the payload of this store's
    /// notifications).
    schema: String,
    changes: Arc<watch::Sender<u64>>,
    /// Bumped when a run's stream items were stored, here or (through a
    /// notification) elsewhere; its notifier sends those notifications.
    stream_changes: Arc<watch::Sender<u64>>,
    stream_notifier: notify::Notifier,
    /// Dropping it stops the listener.
    _stop: oneshot::Sender<()>,
    /// The server process id of the listening connection (for tests).
    #[cfg_attr(not(test), allow(dead_code))]
    listener_pid: Arc<AtomicI32>,
    /// The worker ids this store holds for its runtimes.
    holds: hold::Holds,
    /// The latest checkpoint of each run this store executes, which the
    /// run's next save may append to (see `tables::checkpoints::segments`).
    heads: tables::checkpoints::segments::Heads,
    /// See [`PostgresStore::bytes_written`].
    written: std::sync::atomic::AtomicU64,
    /// When claims last looked for what they look for only now and then
    /// (see `ops::UNREGISTERED_EVERY`).
    looked: Looked,
}

/// When claims last looked for something they look for only now and then,
/// by key (a worker's instance; `""`: the store's).
#[derive(Default)]
struct Looked(std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>);

impl Looked {
    /// Whether a look for `key` is due: none was in the last `every`. If
    /// so, this one counts as made now.
    fn due(&self, key: &str, every: std::time::Duration) -> bool {
        let mut at = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        match at.get_mut(key) {
            Some(t) if now.duration_since(*t) < every => false,
            Some(t) => {
                *t = now;
                true
            }
            None => {
                at.insert(key.to_owned(), now);
                true
            }
        }
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.pool.target().shown)
            .field("schema", &self.schema)
            .finish()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (see the type's docs for the
    /// accepted URLs), creates or upgrades the tables, and starts listening
    /// for other workers' notifications. Must be called inside a tokio
    /// runtime: the connections run in tasks on it.
    ///
    /// Fails with [`Error::UnsupportedStore`] for a malformed URL or tables
    /// newer than this build, and [`Error::Store`] (naming the URL, without
    /// its password) when the database cannot be reached.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// use checkpoint_runtime::store::postgres::PostgresStore;
    /// let store = PostgresStore::open("postgres://app@localhost/workflows?schema=orders").await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn open(url: &str) -> Result<PostgresStore, Error> {
        Self::open_target(Target::parse(url, None)?, false).await
    }

    /// Opens the store at `url` only if its tables already exist, at this
    /// build's schema version: never creates the schema or the tables, never
    /// upgrades them. For tools that read or operate runs (the `checkpoint`
    /// command line uses it): a database or schema without the tables is an
    /// [`Error::Store`] saying it is "not a checkpoint store",
    /// and tables of an older version are refused rather than upgraded under
    /// the workers using them (a worker of this build upgrades them with
    /// [`open`](PostgresStore::open)).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// use checkpoint_runtime::store::postgres::PostgresStore;
    /// let store = PostgresStore::open_existing("postgres://app@localhost/workflows").await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn open_existing(url: &str) -> Result<PostgresStore, Error> {
        Self::open_target(Target::parse(url, None)?, true).await
    }

    /// Like [`open`](PostgresStore::open), with the tables in PostgreSQL
    /// schema `schema` (created if missing), whatever the URL says.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// use checkpoint_runtime::store::postgres::PostgresStore;
    /// let store = PostgresStore::open_in_schema("postgres://app@localhost/test", "cp_test_1").await?;
    /// # let _ = store; Ok(()) }
    /// ```
    pub async fn open_in_schema(url: &str, schema: &str) -> Result<PostgresStore, Error> {
        Self::open_target(Target::parse(url, Some(schema))?, false).await
    }

    /// Opens the store `target` names; `existing`: only if its tables are
    /// there at this build's version (see [`open_existing`](Self::open_existing)).
    async fn open_target(target: Target, existing: bool) -> Result<PostgresStore, Error> {
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| Error::UnsupportedStore {
                url: target.shown.clone(),
                reason: "the PostgreSQL store must be opened inside a tokio runtime".to_owned(),
            })?;
        let first = conn::connect(&handle, &target).await?;
        let pool = Arc::new(Pool::new(target.clone(), handle.clone(), first));
        let side = Side::new(target.clone(), handle.clone());
        let schema = {
            let mut c = pool.get().await?;
            if existing {
                schema::check_existing(&mut c, target.schema.as_deref(), &target.shown).await?;
            }
            schema::migrate(&mut c, target.schema.as_deref(), &target.shown)
                .await
                .map_err(|e| match e {
                    Error::Store { message, source } => Error::Store {
                        message: format!(
                            "{message} (creating or upgrading the tables of `{}`)",
                            target.shown
                        ),
                        source,
                    },
                    other => other,
                })?
        };
        let notifier = notify::Notifier::start(&handle, target.clone(), schema.clone());
        pool.set_notifier(Box::new(move || notifier.request()));
        let changes = Arc::new(watch::channel(0).0);
        let stream_changes = Arc::new(watch::channel(0).0);
        let stream_payload = format!("{schema}{}", notify::STREAM_SUFFIX);
        let stream_notifier = notify::Notifier::start(&handle, target.clone(), stream_payload);
        let (stop, stop_rx) = oneshot::channel();
        let listener_pid = Arc::new(AtomicI32::new(0));
        notify::start(
            &handle,
            target,
            schema.clone(),
            changes.clone(),
            stream_changes.clone(),
            stop_rx,
            listener_pid.clone(),
        )
        .await?;
        Ok(PostgresStore {
            group: group_commit::GroupCommit::new(pool.clone()),
            creates: create_batch::batcher(pool.clone()),
            finishes: finish::batcher(pool.clone()),
            pool,
            side,
            schema,
            changes,
            stream_changes,
            stream_notifier,
            _stop: stop,
            listener_pid,
            holds: hold::Holds::default(),
            heads: Default::default(),
            written: Default::default(),
            looked: Looked::default(),
        })
    }

    /// The PostgreSQL schema holding this store's tables.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// use checkpoint_runtime::store::postgres::PostgresStore;
    /// let store = PostgresStore::open("postgres://app@localhost/db?schema=orders").await?;
    /// assert_eq!(store.schema(), "orders");
    /// # Ok(()) }
    /// ```
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The bytes of checkpoint fields this store has saved since it was
    /// opened, in committed saves: what each checkpoint row holds of its
    /// fields' bytes itself, and the segments written for fields stored by
    /// appending (folds included). What PostgreSQL makes of them (tuples,
    /// indexes, TOAST, the WAL) is more; the rest of a row and other
    /// writes (runs, signals, history) are not counted.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// use checkpoint_runtime::store::postgres::PostgresStore;
    /// let store = PostgresStore::open("postgres://app@localhost/db").await?;
    /// assert_eq!(store.bytes_written(), 0);
    /// # Ok(()) }
    /// ```
    pub fn bytes_written(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Drops PostgreSQL schema `schema` with everything in it (`DROP SCHEMA
    /// ... CASCADE`), if it exists: the tear-down of a store opened with
    /// [`open_in_schema`](PostgresStore::open_in_schema) or `?schema=`, for
    /// tests. Irreversible.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// use checkpoint_runtime::store::postgres::PostgresStore;
    /// let url = "postgres://postgres@localhost/test";
    /// let store = PostgresStore::open_in_schema(url, "cp_scratch").await?;
    /// drop(store);
    /// PostgresStore::drop_schema(url, "cp_scratch").await?;
    /// # Ok(()) }
    /// ```
    pub async fn drop_schema(url: &str, schema: &str) -> Result<(), Error> {
        let target = Target::parse(url, None)?;
        conn::check_schema_name(url, schema)?;
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| Error::UnsupportedStore {
                url: target.shown.clone(),
                reason: "must be called inside a tokio runtime".to_owned(),
            })?;
        let client = conn::connect(&handle, &target).await?;
        client
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {} CASCADE",
                conn::quote_ident(schema)
            ))
            .await
            .map_err(conn::db_err)
    }

    /// The checkpoint path's connection step, for the bench's `pool`
    /// section (`examples/bench/pool.rs`; not an API): a connection taken
    /// from this store's pool and, with `sql`, one statement on it as a
    /// lone save sends its own (`plain().query_opt`: prepared once per
    /// connection, then executed in autocommit). Whether a row came back.
    #[doc(hidden)]
    pub async fn __pooled_query_opt(
        &self,
        sql: Option<&'static str>,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<bool, Error> {
        let mut conn = self.pool.get().await?;
        match sql {
            Some(sql) => Ok(conn.plain().query_opt(sql, params).await?.is_some()),
            None => Ok(false),
        }
    }

    fn bump(&self) {
        notify::bump(&self.changes);
    }

    async fn do_put_schemas(&self, schemas: Vec<(String, String)>) -> Result<(), Error> {
        let (keys, bodies): (Vec<String>, Vec<String>) = schemas.into_iter().unzip();
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        cx.execute(
            "INSERT INTO cp_schemas (key, body) SELECT * FROM unnest($1::text[], $2::text[]) \
             ON CONFLICT (key) DO NOTHING",
            &[&keys, &bodies],
        )
        .await?;
        Ok(())
    }

    async fn do_schemas(&self, keys: &[String]) -> Result<HashMap<String, String>, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let rows = cx
            .query(
                "SELECT key, body FROM cp_schemas WHERE key = ANY($1)",
                &[&keys],
            )
            .await?;
        rows.iter()
            .map(|row| Ok((get(row, 0)?, get(row, 1)?)))
            .collect()
    }
}

impl Store for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn create_run(&self, run: NewRun) -> BoxFuture<'_, Result<Created, Error>> {
        Box::pin(self.do_create(run))
    }

    fn load_run<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<RunRecord>, Error>> {
        Box::pin(self.do_load(id))
    }

    fn list_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<Vec<RunRecord>, Error>> {
        Box::pin(self.do_list(filter))
    }

    fn count_runs<'a>(
        &'a self,
        filter: &'a RunFilter,
    ) -> BoxFuture<'a, Result<BTreeMap<StatusKind, u64>, Error>> {
        Box::pin(self.do_count(filter))
    }

    fn parked_runs(&self) -> BoxFuture<'_, Result<Vec<RunRecord>, Error>> {
        Box::pin(self.do_parked())
    }

    fn claim<'a>(&'a self, req: &'a ClaimRequest) -> BoxFuture<'a, Result<ClaimResult, Error>> {
        Box::pin(async move {
            let req = self.holds.claim_request(self.pool.handle(), req).await?;
            self.do_claim(&req).await
        })
    }

    fn renew<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Renewed, Error>> {
        Box::pin(async move {
            self.holds.check_renew(id, lease)?;
            self.do_renew(id, lease, ttl).await
        })
    }

    fn renew_many<'a>(
        &'a self,
        runs: &'a [(Arc<str>, Lease)],
        ttl: Duration,
    ) -> BoxFuture<'a, Vec<Result<Renewed, Error>>> {
        Box::pin(self.do_renew_many(runs, ttl))
    }

    fn release<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        how: Release,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.do_release(id, lease, how))
    }

    fn save_checkpoint<'a>(
        &'a self,
        lease: &'a Lease,
        checkpoint: Arc<CheckpointRecord>,
        keep: Option<usize>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.do_save(lease, checkpoint, keep))
    }

    fn take_signal<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<SignalRecord>, Error>> {
        Box::pin(self.do_take_signal(id, lease, name))
    }

    fn time_out<'a>(&'a self, id: &'a str, lease: &'a Lease) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.do_time_out(id, lease))
    }

    fn reject_signal<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        reason: String,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.do_reject(id, lease, reason))
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        outcome: Outcome,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.do_finish(id, lease, outcome))
    }

    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(self.do_cancel(id))
    }

    fn retry<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.do_retry(id))
    }

    fn request_cancel<'a>(
        &'a self,
        id: &'a str,
        req: crate::store::CancelRequest,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.do_request_cancel(id, req))
    }

    fn put_signal<'a>(
        &'a self,
        id: &'a str,
        name: &'a str,
        payload: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move { self.do_put_signal(id, name, &payload).await })
    }

    fn pending_signals<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SignalRecord>, Error>> {
        Box::pin(self.do_pending_signals(id))
    }

    fn latest_checkpoint<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<CheckpointRecord>>, Error>> {
        Box::pin(self.do_latest(id))
    }

    fn checkpoint<'a>(
        &'a self,
        id: &'a str,
        seq: u64,
    ) -> BoxFuture<'a, Result<Option<Arc<CheckpointRecord>>, Error>> {
        Box::pin(self.do_checkpoint(id, seq))
    }

    fn list_checkpoints<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Arc<CheckpointRecord>>, Error>> {
        Box::pin(self.do_list_checkpoints(id))
    }

    fn append_event<'a>(&'a self, id: &'a str, event: Event) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move { self.do_append_event(id, &event).await })
    }

    fn history<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<HistoryEntry>, Error>> {
        Box::pin(self.do_history(id))
    }

    fn fork<'a>(
        &'a self,
        from: &'a str,
        seq: u64,
        new_id: &'a str,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.do_fork(from, seq, new_id))
    }

    /// A session advisory lock per worker id (and schema), on a connection
    /// of its own that the hold keeps open: the server drops the lock with
    /// the session, when the process dies or its connection is lost. A
    /// task takes it again after its connection ended; should another live
    /// instance have taken it meanwhile, this store leases under
    /// `<id>~<instance>` from then on (see the `hold` module).
    fn hold_worker<'a>(
        &'a self,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Option<WorkerHold>, Error>> {
        Box::pin(
            self.holds
                .grant(self.pool.handle(), self.pool.target(), &self.schema, worker),
        )
    }

    fn next_wakeup(&self, after: SystemTime) -> BoxFuture<'_, Result<Wakeup, Error>> {
        Box::pin(self.do_next_wakeup(after))
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Runs a plain `VACUUM` on the tables (retention already deleted the
    /// pruned checkpoints; this makes their space reusable without blocking
    /// workers) and reports the tables' size before and after.
    fn gc(&self) -> BoxFuture<'_, Result<GcReport, Error>> {
        Box::pin(self.do_gc())
    }

    fn put_schemas(&self, schemas: Vec<(String, String)>) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.do_put_schemas(schemas))
    }

    fn schemas<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<HashMap<String, String>, Error>> {
        Box::pin(self.do_schemas(keys))
    }

    fn put_signal_sites(
        &self,
        workflow: &str,
        sites: Vec<SignalSite>,
    ) -> BoxFuture<'_, Result<(), Error>> {
        let workflow = workflow.to_owned();
        Box::pin(async move { signal_sites::insert(&self.pool, &workflow, sites).await })
    }

    fn signal_sites<'a>(
        &'a self,
        workflow: &'a str,
    ) -> BoxFuture<'a, Result<Vec<SignalSite>, Error>> {
        Box::pin(signal_sites::read(&self.pool, workflow))
    }

    fn put_schedule(
        &self,
        rec: crate::store::ScheduleRecord,
    ) -> BoxFuture<'_, Result<crate::store::ScheduleRecord, Error>> {
        Box::pin(async move { schedules::put(&self.pool, &rec).await })
    }

    fn schedules(&self) -> BoxFuture<'_, Result<Vec<crate::store::ScheduleRecord>, Error>> {
        Box::pin(schedules::list(&self.pool))
    }

    fn pause_schedule<'a>(
        &'a self,
        name: &'a str,
        paused: bool,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(schedules::set_paused(&self.pool, name, paused))
    }

    fn delete_schedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(schedules::delete(&self.pool, name))
    }

    fn advance_schedule<'a>(
        &'a self,
        name: &'a str,
        from: Option<SystemTime>,
        to: SystemTime,
        run: Option<&'a str>,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(schedules::advance(&self.pool, name, from, to, run))
    }

    fn write_stream<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        write: super::StreamWrite,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            streams::write(&self.pool, id, lease, write).await?;
            // Readers in other processes wake at once (and poll anyway).
            self.stream_notifier.request();
            notify::bump(&self.stream_changes);
            Ok(())
        })
    }

    fn stream_items<'a>(
        &'a self,
        id: &'a str,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<super::StreamItem>, Error>> {
        Box::pin(streams::items(&self.pool, id, from, limit))
    }

    fn discard_stream<'a>(
        &'a self,
        id: &'a str,
        lease: &'a Lease,
        from_seq: u64,
    ) -> BoxFuture<'a, Result<u64, Error>> {
        Box::pin(streams::discard(&self.pool, id, lease, from_seq))
    }

    fn progress<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, Error>> {
        Box::pin(streams::progress(&self.pool, id))
    }

    fn subscribe_streams(&self) -> watch::Receiver<u64> {
        self.stream_changes.subscribe()
    }
}
