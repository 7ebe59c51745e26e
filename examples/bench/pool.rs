//! The `pool` rows of the bench table (`BENCH_ONLY=pool`, with a
//! PostgreSQL server: `--postgres URL` or `CHECKPOINT_TEST_POSTGRES_URL`):
//! the PostgreSQL store's own pool (`store/postgres/conn/pool.rs`) against
//! `deadpool-postgres` and `bb8` (+ `bb8-postgres`) on the checkpoint
//! path's connection step, in the same run, on the same server, with the
//! same statements.
//!
//! The step, as a lone checkpoint save takes it: a connection from the pool,
//! one statement prepared once per connection and executed in autocommit,
//! the connection given back. Each pool holds at most 8 connections (the
//! store's default `pool_size`), opened before the measurement, and checks
//! nothing but `is_closed` when it hands one out, as the store's does:
//!
//! - the store's pool, through `PostgresStore::__pooled_query_opt` (its
//!   `pool.get()` and `plain().query_opt(..)`, as `fused/save.rs` calls
//!   them);
//! - `deadpool-postgres`: `RecyclingMethod::Fast` (its default),
//!   `prepare_cached`, and `QueueMode::Lifo`;
//! - `bb8` with `QueueStrategy::Lifo`, `test_on_check_out(false)` and the
//!   statement kept per connection beside the client (`bb8-postgres`'
//!   manager caches none: a plain `query(&str)` would prepare on every
//!   call, one round trip more).
//!
//! The store's pool hands out the connection given back last; the crates
//! do so only when asked (`Lifo`): by default they hand out the one given
//! back first, so that a single task goes round all 8 connections, and bb8
//! also sends a test query (`""`) on every checkout. Both crates are
//! measured with their defaults too, beside the row's figures.
//!
//! Three statements: none (the checkout alone: the pool's own cost), `SELECT
//! $1::bigint` (one round trip, nothing written: the largest share a pool
//! can take of a statement), and an `INSERT` of the checkpoint's payload
//! committed on its own (a WAL flush, as a save). Each with 1 task, and the
//! two statements with 32 tasks sharing the 8 connections (saves of many
//! runs waiting for a connection). The pools take turns sample by sample
//! (a sample: one operation with 1 task, 1,000 checkouts alone, 10 or 4
//! operations per task with 32), the first of each turn rotating, so that
//! a burst of the machine's other load falls on all of them alike; the row
//! gives each pool's median time per operation and the crates' ratios to
//! the store's (above 1: the crate costs more), with one client and no
//! pool beside them (its statements one at a time, under a lock, with 32
//! tasks). Target: the store's pool costs at most 1.05x the cheaper crate,
//! else a crate should replace it. `BENCH_POOL=0,1,..` picks cases by
//! their index (all by default).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bb8::ManageConnection;
use bb8::QueueStrategy;
use bb8_postgres::PostgresConnectionManager;
use checkpoint_runtime::store::postgres::PostgresStore;
use deadpool_postgres::{ManagerConfig, QueueMode, RecyclingMethod};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement};

use super::postgres::{connect, same_transport, schema_name};
use super::stats::{median_of, met, scaled, us};
use super::BoxError;

/// Connections per pool: the store's default `pool_size`.
const POOL_SIZE: usize = 8;

/// Tasks sharing a pool in the concurrent cases.
const TASKS: usize = 32;

/// `bb8-postgres`' manager, with the statements prepared on each connection
/// kept beside it (as the store's pool and deadpool's `prepare_cached` do).
struct Cached(PostgresConnectionManager<NoTls>);

struct CachedConn {
    client: Client,
    stmts: HashMap<&'static str, Statement>,
}

impl CachedConn {
    /// `sql` with `params`, its statement prepared once per connection.
    async fn query_cached(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<(), tokio_postgres::Error> {
        let st = match self.stmts.get(sql) {
            Some(st) => st.clone(),
            None => {
                let st = self.client.prepare(sql).await?;
                self.stmts.insert(sql, st.clone());
                st
            }
        };
        self.client.query_opt(&st, params).await?;
        Ok(())
    }
}

impl ManageConnection for Cached {
    type Connection = CachedConn;
    type Error = tokio_postgres::Error;

    async fn connect(&self) -> Result<CachedConn, tokio_postgres::Error> {
        Ok(CachedConn {
            client: self.0.connect().await?,
            stmts: HashMap::new(),
        })
    }

    async fn is_valid(&self, conn: &mut CachedConn) -> Result<(), tokio_postgres::Error> {
        self.0.is_valid(&mut conn.client).await
    }

    fn has_broken(&self, conn: &mut CachedConn) -> bool {
        self.0.has_broken(&mut conn.client)
    }
}

/// The pools measured.
struct Pools {
    store: PostgresStore,
    /// Handing out the connection given back last, as the store's pool.
    deadpool: deadpool_postgres::Pool,
    /// Likewise, and no test query on checkout.
    bb8: bb8::Pool<Cached>,
    /// deadpool as built by default: the connection given back first.
    deadpool_default: deadpool_postgres::Pool,
    /// bb8 as built by default: likewise, and a test query on every
    /// checkout.
    bb8_default: bb8::Pool<Cached>,
    /// No pool: one client and its statements, the floor.
    raw: tokio::sync::Mutex<CachedConn>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Which {
    Store,
    Deadpool,
    Bb8,
    DeadpoolDefault,
    Bb8Default,
    Raw,
}

const ALL: [Which; 6] = [
    Which::Store,
    Which::Deadpool,
    Which::Bb8,
    Which::DeadpoolDefault,
    Which::Bb8Default,
    Which::Raw,
];

/// What is sent on the connection once it is taken.
#[derive(Clone, Copy)]
enum Stmt<'a> {
    None,
    Select(&'static str),
    Insert(&'static str, &'a [u8]),
}

impl Stmt<'_> {
    fn sql(&self) -> Option<&'static str> {
        match self {
            Stmt::None => None,
            Stmt::Select(sql) | Stmt::Insert(sql, _) => Some(sql),
        }
    }
}

impl Pools {
    /// One checkout, `stmt` on the connection, the connection given back.
    async fn op(&self, which: Which, stmt: Stmt<'_>, n: i64) -> Result<(), BoxError> {
        let select: [&(dyn ToSql + Sync); 1] = [&n];
        let params: &[&(dyn ToSql + Sync)] = match &stmt {
            Stmt::None => &[],
            Stmt::Select(_) => &select,
            Stmt::Insert(_, data) => &[data],
        };
        match which {
            Which::Store => {
                self.store.__pooled_query_opt(stmt.sql(), params).await?;
            }
            Which::Deadpool | Which::DeadpoolDefault => {
                let pool = if which == Which::Deadpool {
                    &self.deadpool
                } else {
                    &self.deadpool_default
                };
                let client = pool.get().await?;
                if let Some(sql) = stmt.sql() {
                    let st = client.prepare_cached(sql).await?;
                    client.query_opt(&st, params).await?;
                }
            }
            Which::Raw => {
                let mut conn = self.raw.lock().await;
                if let Some(sql) = stmt.sql() {
                    conn.query_cached(sql, params).await?;
                }
            }
            Which::Bb8 | Which::Bb8Default => {
                let pool = if which == Which::Bb8 {
                    &self.bb8
                } else {
                    &self.bb8_default
                };
                let mut conn = pool.get().await.map_err(|e| format!("bb8: {e:?}"))?;
                if let Some(sql) = stmt.sql() {
                    conn.query_cached(sql, params).await?;
                }
            }
        }
        Ok(())
    }

    /// `ops` operations on `which`, by `tasks` tasks at once; the time per
    /// operation.
    async fn round(
        &self,
        which: Which,
        stmt: Stmt<'_>,
        tasks: usize,
        ops: usize,
    ) -> Result<Duration, BoxError> {
        let each = ops.div_ceil(tasks);
        let started = Instant::now();
        let lanes = (0..tasks).map(|t| async move {
            for i in 0..each {
                self.op(which, stmt, (t * each + i) as i64).await?;
            }
            Ok::<(), BoxError>(())
        });
        for r in futures::future::join_all(lanes).await {
            r?;
        }
        Ok(started.elapsed() / (each * tasks) as u32)
    }
}

/// The rows: each case's medians and ratios.
pub(crate) async fn rows(url: &str, scale: f64, payload: usize) -> Result<Vec<String>, BoxError> {
    let url = same_transport(url);
    let schema = schema_name("pool");
    let store = PostgresStore::open_in_schema(&url, &schema).await?;
    let config: tokio_postgres::Config = url.parse()?;
    let deadpool = |mode: QueueMode| {
        let manager = deadpool_postgres::Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        deadpool_postgres::Pool::builder(manager)
            .max_size(POOL_SIZE)
            .queue_mode(mode)
            .build()
    };
    let bb8 =
        |builder: bb8::Builder<Cached>| {
            builder.max_size(POOL_SIZE as u32).build_unchecked(Cached(
                PostgresConnectionManager::new(config.clone(), NoTls),
            ))
        };
    let pools = Pools {
        store,
        deadpool: deadpool(QueueMode::Lifo)?,
        bb8: bb8(bb8::Pool::builder()
            .queue_strategy(QueueStrategy::Lifo)
            .test_on_check_out(false)),
        deadpool_default: deadpool(QueueMode::default())?,
        bb8_default: bb8(bb8::Pool::builder()),
        raw: tokio::sync::Mutex::new(CachedConn {
            client: connect(&url).await?,
            stmts: HashMap::new(),
        }),
    };
    let setup = connect(&url).await?;
    setup
        .batch_execute(&format!(
            "CREATE TABLE {schema}.pool_t (id bigserial PRIMARY KEY, data bytea NOT NULL)"
        ))
        .await?;
    // The store's statement cache is keyed by `&'static str`.
    let insert: &'static str = Box::leak(
        format!("INSERT INTO {schema}.pool_t (data) VALUES ($1) RETURNING id").into_boxed_str(),
    );
    let data = vec![7u8; payload];
    let select = Stmt::Select("SELECT $1::bigint");
    let write = Stmt::Insert(insert, &data);

    // BENCH_POOL=0,1 picks cases by their index (all by default).
    let picked = std::env::var("BENCH_POOL").unwrap_or_default();
    let pick = |i: usize| picked.is_empty() || picked.split(',').any(|p| p.trim() == i.to_string());
    // (what, statement, tasks, operations per sample, samples): the pools
    // take turns sample by sample, so that a burst of the machine's other
    // load falls on all of them.
    let cases: [(&str, Stmt, usize, usize, usize); 5] = [
        ("checkout alone", Stmt::None, 1, 1_000, scaled(200, scale)),
        ("checkout + `SELECT $1`", select, 1, 1, scaled(5_000, scale)),
        (
            "checkout + `SELECT $1`",
            select,
            TASKS,
            TASKS * 10,
            scaled(200, scale),
        ),
        (
            "checkout + `INSERT` committed",
            write,
            1,
            1,
            scaled(1_000, scale),
        ),
        (
            "checkout + `INSERT` committed",
            write,
            TASKS,
            TASKS * 4,
            scaled(100, scale),
        ),
    ];
    // Every pool's connections open and its statements prepared.
    for which in ALL {
        for stmt in [select, write] {
            pools.round(which, stmt, TASKS, TASKS * 4).await?;
        }
    }
    let mut rows = Vec::new();
    for (i, (what, stmt, tasks, ops, samples)) in cases.into_iter().enumerate() {
        if !pick(i) {
            continue;
        }
        let mut times: HashMap<&str, Vec<Duration>> = HashMap::new();
        for r in 0..samples {
            for k in 0..ALL.len() {
                let which = ALL[(r + k) % ALL.len()];
                let t = pools.round(which, stmt, tasks, ops).await?;
                times.entry(name(which)).or_default().push(t);
            }
        }
        let mut median = |w: Which| median_of(times.get_mut(name(w)).unwrap());
        let store = median(Which::Store);
        let dead = median(Which::Deadpool);
        let bb8 = median(Which::Bb8);
        let dead_default = median(Which::DeadpoolDefault);
        let bb8_default = median(Which::Bb8Default);
        let raw = median(Which::Raw);
        let ratio = |d: Duration| d.as_secs_f64() / store.as_secs_f64().max(1e-12);
        let shown = |d: Duration| {
            if d < Duration::from_micros(10) {
                format!("{:.0} ns", d.as_secs_f64() * 1e9)
            } else {
                format!("{:.1} us", us(d))
            }
        };
        let cheaper = dead.min(bb8);
        eprintln!(
            "pool: {what}, {tasks} task(s): store {}, deadpool {}, bb8 {}, deadpool default {}, \
             bb8 default {}, raw {}",
            shown(store),
            shown(dead),
            shown(bb8),
            shown(dead_default),
            shown(bb8_default),
            shown(raw)
        );
        rows.push(format!(
            "| PostgreSQL pool: {what}, {tasks} task{} on {POOL_SIZE} connections (per op, \
             median of {samples} samples of {ops} op{}, the pools taking turns) | {} | \
             deadpool-postgres {}, bb8 {} (last connection back first out, as the store's; \
             with their defaults, first back first out and bb8 testing each checkout: {}, {}; \
             one client, no pool: {}) | {:.2}x, {:.2}x (defaults {:.2}x, {:.2}x) | the store's \
             pool <= 1.05x the cheaper crate | {} |",
            if tasks == 1 { "" } else { "s" },
            if ops == 1 { "" } else { "s" },
            shown(store),
            shown(dead),
            shown(bb8),
            shown(dead_default),
            shown(bb8_default),
            shown(raw),
            ratio(dead),
            ratio(bb8),
            ratio(dead_default),
            ratio(bb8_default),
            met(store.as_secs_f64() <= cheaper.as_secs_f64() * 1.05),
        ));
    }
    drop(pools);
    drop(setup);
    PostgresStore::drop_schema(&url, &schema).await?;
    Ok(rows)
}

fn name(w: Which) -> &'static str {
    match w {
        Which::Store => "store",
        Which::Deadpool => "deadpool",
        Which::Bb8 => "bb8",
        Which::DeadpoolDefault => "deadpool default",
        Which::Bb8Default => "bb8 default",
        Which::Raw => "raw",
    }
}
