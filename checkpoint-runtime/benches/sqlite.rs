//! Criterion benchmarks of durable checkpoints on the SQLite store (a file in
//! a temp dir; WAL, `synchronous=FULL`), each next to its raw rusqlite floors
//! on the same disk: SQLite's defaults plus WAL mode (the main floor, `raw_*`;
//! see `Floor` in `examples/bench.rs` for why WAL) and the store's own
//! settings (`raw_*_store_settings`):
//!
//! - `sqlite/latency`: one run taking checkpoints of a ~1 KB state one after
//!   the other (time per checkpoint) vs one `INSERT` + `COMMIT` of as many
//!   bytes;
//! - `sqlite/throughput_64_runs`, `sqlite/throughput_1000_runs`: 64 and
//!   1,000 concurrent runs (group commit; time per checkpoint, so elements/s
//!   is checkpoints/s) vs `sqlite/throughput/raw_batched_1000_rows_per_tx`,
//!   batched inserts of 1,000 rows per transaction.
//!
//! ```text
//! cargo bench -p checkpoint-runtime --bench sqlite
//! ```
//!
//! `cargo run --release --example bench` prints the same figures (and more)
//! as one table.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rusqlite::Connection;

/// The state each checkpoint saves: ~1 KB plus a few bytes of counters.
const STATE: u32 = 1000;
/// Concurrent runs in the throughput benchmarks.
const RUNS: [u64; 2] = [64, 1000];

#[workflow]
async fn save_loop(ctx: &Ctx, args: (u32, u32)) -> u64 {
    let (n, size) = args;
    let mut state: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut sum = 0u64;
    for i in 0..n {
        let at = (i % size.max(1)) as usize;
        state[at] = state[at].wrapping_add(1);
        sum += state[at] as u64;
        checkpoint!("step");
    }
    sum
}

/// A connection with one table of blobs: with `store` `None`, SQLite's
/// defaults (4 KiB pages, `synchronous` FULL) plus WAL mode; with the page
/// size and auto-vacuum mode of a file the store created (see
/// [`store_file_settings`]), those and the writer connection's pragmas
/// (`prepare_writer` in `src/store/sqlite/migrations.rs`).
fn raw_conn(path: &Path, store: Option<(i64, i64)>) -> Connection {
    let conn = Connection::open(path).expect("open raw db");
    if let Some(file) = store {
        conn.pragma_update(None, "page_size", file.0)
            .expect("page_size");
        conn.pragma_update(None, "auto_vacuum", file.1)
            .expect("auto_vacuum");
    }
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .expect("WAL");
    assert!(mode.eq_ignore_ascii_case("wal"));
    let pragmas = [
        ("synchronous", "FULL"),
        ("foreign_keys", "ON"),
        ("temp_store", "MEMORY"),
        ("cache_size", "-4096"),
        ("wal_autocheckpoint", "256"),
        ("journal_size_limit", "4194304"),
    ];
    for (name, value) in pragmas.iter().filter(|_| store.is_some()) {
        conn.pragma_update(None, name, value).expect("pragma");
    }
    let sync: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .expect("synchronous");
    assert_eq!(sync, 2, "synchronous=FULL");
    conn.execute_batch("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
        .expect("schema");
    conn
}

/// The payload of a `save_loop` checkpoint of a `STATE`-byte state (the last
/// of 2,000, whose counters are the largest these benchmarks reach).
fn payload(tokio: &tokio::runtime::Runtime) -> Vec<u8> {
    let size = tokio.block_on(async {
        let rt = Runtime::in_memory();
        let h = rt
            .start(save_loop, "size", (2000, STATE))
            .await
            .expect("start");
        h.result().await.expect("result");
        let cps = rt.checkpoints("size").await.expect("checkpoints");
        cps.last().map(|c| c.size).unwrap_or(STATE as usize)
    });
    (0..size).map(|i| i as u8).collect()
}

/// The page size and auto-vacuum mode of a file the store creates.
fn store_file_settings(tokio: &tokio::runtime::Runtime, dir: &Path) -> (i64, i64) {
    let path = dir.join("settings.db");
    tokio.block_on(async {
        let rt = Runtime::open(path.to_str().expect("utf-8 path"))
            .await
            .expect("open the SQLite store");
        drop(rt);
    });
    let conn = Connection::open(&path).expect("open settings db");
    let page = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .expect("page_size");
    let vacuum = conn
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .expect("auto_vacuum");
    (page, vacuum)
}

fn bench_sqlite(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let bytes = payload(&tokio);
    let file = store_file_settings(&tokio, dir.path());
    let open = |name: &str, runs: u64| {
        let path = dir.path().join(name);
        tokio.block_on(async {
            Runtime::builder()
                .concurrency(runs.max(64) as usize)
                .open(path.to_str().expect("utf-8 path"))
                .await
                .expect("open the SQLite store")
        })
    };

    let mut group = c.benchmark_group("sqlite");
    group.throughput(Throughput::Elements(1));

    // Sequential latency: one run of `iters` checkpoints, timed end to end
    // (its start and completion are two more commits, so this slightly
    // overstates the time per checkpoint for small `iters`).
    let rt = open("latency.db", 1);
    let mut run = 0u64;
    group.bench_function("latency/checkpoint_1KB", |b| {
        b.to_async(&tokio).iter_custom(|iters| {
            run += 1;
            let (rt, id) = (rt.clone(), format!("lat-{run}"));
            async move {
                let n = u32::try_from(iters).unwrap_or(u32::MAX);
                let h = rt.start(save_loop, &id, (n, STATE)).await.expect("start");
                let start = Instant::now();
                black_box(h.result().await.expect("result"));
                start.elapsed()
            }
        });
    });
    drop(rt);

    for (name, store) in [("", None), ("_store_settings", Some(file))] {
        let raw = raw_conn(&dir.path().join(format!("raw-latency{name}.db")), store);
        group.bench_function(format!("latency/raw_insert_commit_1KB{name}"), |b| {
            b.iter_custom(|iters| {
                let mut stmt = raw
                    .prepare_cached("INSERT INTO t (data) VALUES (?1)")
                    .expect("prepare");
                let start = Instant::now();
                for _ in 0..iters {
                    raw.execute_batch("BEGIN IMMEDIATE").expect("begin");
                    stmt.execute([&bytes]).expect("insert");
                    raw.execute_batch("COMMIT").expect("commit");
                }
                start.elapsed()
            });
        });
    }

    // Throughput: `runs` concurrent runs of ceil(iters / runs) checkpoints
    // each, scaled back to `iters` checkpoints.
    for runs in RUNS {
        let rt = open(&format!("throughput-{runs}.db"), runs);
        let mut round = 0u64;
        group.bench_function(format!("throughput_{runs}_runs/checkpoint_1KB"), |b| {
            b.to_async(&tokio).iter_custom(|iters| {
                round += 1;
                let (rt, round) = (rt.clone(), round);
                async move {
                    let per_run = iters.div_ceil(runs).max(1);
                    let n = u32::try_from(per_run).unwrap_or(u32::MAX);
                    let mut set = tokio::task::JoinSet::new();
                    for r in 0..runs {
                        let rt = rt.clone();
                        let id = format!("tp-{round}-{r}");
                        set.spawn(
                            async move { rt.start(save_loop, &id, (n, STATE)).await.map(|_| ()) },
                        );
                    }
                    while let Some(res) = set.join_next().await {
                        res.expect("start task").expect("start");
                    }
                    let start = Instant::now();
                    rt.run_until_idle().await.expect("run");
                    let took = start.elapsed();
                    took.mul_f64(iters as f64 / (per_run * runs) as f64)
                }
            });
        });
        drop(rt);
    }

    for (name, store) in [("", None), ("_store_settings", Some(file))] {
        let raw = raw_conn(&dir.path().join(format!("raw-batched{name}.db")), store);
        group.bench_function(
            format!("throughput/raw_batched_1000_rows_per_tx{name}"),
            |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    let mut left = iters;
                    while left > 0 {
                        let rows = left.min(1000);
                        raw.execute_batch("BEGIN IMMEDIATE").expect("begin");
                        {
                            let mut stmt = raw
                                .prepare_cached("INSERT INTO t (data) VALUES (?1)")
                                .expect("prepare");
                            for _ in 0..rows {
                                stmt.execute([&bytes]).expect("insert");
                            }
                        }
                        raw.execute_batch("COMMIT").expect("commit");
                        left -= rows;
                    }
                    start.elapsed()
                });
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1));
    targets = bench_sqlite
}
criterion_main!(benches);
