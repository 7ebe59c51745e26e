//! Prints one table of the project's speed figures, each next to a baseline
//! measured in the same run:
//!
//! ```text
//! cargo run --release --example bench
//! ```
//!
//! The first two rows use the in-memory store. The others use an SQLite file
//! in the temp dir (WAL, `synchronous=FULL`: every checkpoint is durable) and
//! compare with raw rusqlite on the same disk. The main floor has SQLite's
//! defaults (4 KiB pages, as `Connection::open` gives them) plus WAL mode
//! (see [`Floor`](floor::Floor)); a second line has the store's own settings (its page
//! size and pragmas): sequential latency vs one `INSERT` + `COMMIT` of the
//! same bytes, throughput vs batched inserts (many rows per transaction).
//! Then resume latency with a short vs a long history, left by a crash (a
//! child process aborted, the WAL not folded) and after a clean close;
//! bytes on disk per checkpoint vs the payload, counting the file and its
//! WAL while the runtime is open; and the peak RSS of a process driving
//! 1,000 runs vs an idle one (each measured in a child process: this binary
//! run with `--child`). The rows report the WAL file's size as they go.
//!
//! Progress goes to stderr; stdout is the table (columns: the project's
//! figure with a breakdown, the baseline or raw floor measured in the same
//! run, their ratio, the target, whether it is met). About half a minute on
//! a 2-core machine. Knobs:
//!
//! - `BENCH_SCALE` scales the SQLite counts (default 1.0; `0.1` for a quick
//!   look); the counts used are printed in each row;
//! - `BENCH_ONLY=memory,latency,throughput,short,resume,bytes,rss,checksum,history,children,retry,streams,pool`
//!   picks sections (`short`: 1,000 short runs started and awaited as the
//!   README does, see `examples/bench/short.rs`; `checksum`: the cost of a checkpoint's checksums, as a
//!   share of the durable checkpoint's latency when `latency` runs too;
//!   `history`: an agent appending a message per checkpoint to a growing
//!   history, 4,000 times: store size, bytes written and latency against
//!   the state's size, see `examples/bench/history.rs`; `retry`: one
//!   failed `ctx.retry` attempt beside one plain checkpoint on the same
//!   file, see `examples/bench/retry.rs`);
//! - `BENCH_RUNS=1000` picks the throughput cases by run count (of 1, 64,
//!   1000, 50; default all), e.g. to profile one of them;
//! - `BENCH_ROUNDS` sets how many times each throughput case alternates
//!   its raw floor and its own run (default 3; the median round is shown);
//! - `BENCH_HISTORY_ON_DISK=1` builds the 100,000-checkpoint history on the
//!   temp dir's disk instead of on tmpfs (slow: one fsync per checkpoint).
//!
//! With a PostgreSQL server (`--postgres URL`, or `CHECKPOINT_TEST_POSTGRES_URL`)
//! four more rows compare the PostgreSQL store with raw tokio-postgres:
//! latency, throughput and the growing history, and its throughput beside
//! 20,000 waiting runs with its own in an empty store
//! (`examples/bench/postgres.rs`; `BENCH_ONLY=postgres` for them alone,
//! `BENCH_PG=latency,throughput,history,crowded` to pick among them), and
//! five compare the store's connection pool with `deadpool-postgres` and
//! `bb8` on the checkpoint path's checkout and statement
//! (`examples/bench/pool.rs`; `BENCH_ONLY=pool`).
//!
//! The disk is shared with whatever else runs on the machine: compare each
//! figure with the raw floor next to it (measured alongside), not with
//! another run's. The criterion versions live in `checkpoint-runtime/benches/`
//! (`checkpoint` for the in-memory store, `sqlite` for the durable latency and
//! 64-run throughput).
//!
//! This file keeps the knobs above, `main` and the dispatch to the sections;
//! each section is a file of `examples/bench/` named after it (`memory.rs`,
//! `latency.rs`, `throughput.rs`, `short.rs`, `resume.rs`, `bytes.rs`,
//! `rss.rs`, `checksum.rs`, `history.rs`, `children.rs`, `postgres.rs`,
//! `pool.rs`), and
//! what several share is in `workloads.rs` (the measured workflows),
//! `floor.rs` (the raw SQLite floors), `disk.rs` (the files and their WAL),
//! `process.rs` (CPU and bytes written, from `/proc`) and `stats.rs` (the
//! table's numbers and units).

use std::path::PathBuf;

use checkpoint_runtime::prelude::*;

#[path = "bench/bytes.rs"]
mod bytes;
#[path = "bench/checksum.rs"]
mod checksum;
#[path = "bench/children.rs"]
mod children;
#[path = "bench/disk.rs"]
mod disk;
#[path = "bench/floor.rs"]
mod floor;
#[path = "bench/history.rs"]
mod history;
#[path = "bench/latency.rs"]
mod latency;
#[path = "bench/memory.rs"]
mod memory;
#[path = "bench/pool.rs"]
mod pool;
#[path = "bench/postgres.rs"]
mod postgres;
#[path = "bench/process.rs"]
mod process;
#[path = "bench/resume.rs"]
mod resume;
#[path = "bench/retry.rs"]
mod retry;
#[path = "bench/rss.rs"]
mod rss;
#[path = "bench/short.rs"]
mod short;
#[path = "bench/stats.rs"]
mod stats;
#[path = "bench/streams.rs"]
mod streams;
#[path = "bench/throughput.rs"]
mod throughput;
#[path = "bench/workloads.rs"]
mod workloads;

use bytes::bytes_row;
use checksum::checksum_row;
use floor::store_file_settings;
use latency::latency_row;
use memory::memory_rows;
use resume::{crash_history, resume_rows};
use rss::{child, rss_row};
use throughput::throughput_rows;
use workloads::durable_loop;

/// Any error (runtime, raw SQLite, I/O).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Removes the directory when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let runs = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(0);
        let n = args.get(4).and_then(|v| v.parse().ok()).unwrap_or(0);
        let size = args.get(5).and_then(|v| v.parse().ok()).unwrap_or(1000);
        return child(&args[2], runs, n, size).await;
    }
    if args.get(1).map(String::as_str) == Some("--crash-history") {
        let n = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(10);
        return crash_history(&args[2], n).await;
    }
    if args.get(1).map(String::as_str) == Some("--pg-worker") {
        return postgres::worker(&args[2..]).await;
    }
    let scale: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|s: &f64| *s > 0.0)
        .unwrap_or(1.0);
    // BENCH_ONLY=memory,latency,throughput,resume,bytes,rss,checksum,history,retry,pool
    // picks sections.
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let want = |section: &str| only.is_empty() || only.split(',').any(|s| s.trim() == section);
    let mut rows: Vec<String> = Vec::new();
    if want("memory") {
        memory_rows(&mut rows).await?;
    }

    // -- SQLite file in the temp dir --------------------------------------------
    let dir =
        TempDir(std::env::temp_dir().join(format!("checkpoint-bench-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0)?;
    let d = dir.0.as_path();
    // The payload of a `durable_loop` checkpoint of a 1,000-byte state (its
    // counters at their largest in these runs).
    let payload = {
        let rt = Runtime::in_memory();
        rt.start(durable_loop, "size", (2000, 1000))
            .await?
            .result()
            .await?;
        let cps = rt.checkpoints("size").await?;
        cps.last().map(|c| c.size).unwrap_or(1000)
    };
    let (page, vacuum) = store_file_settings(d).await?;
    eprintln!("store files: page_size {page}, auto_vacuum {vacuum} (the raw floors use the same)");
    if want("latency") {
        rows.push(latency_row(d, scale).await?);
    }
    if want("throughput") {
        rows.extend(throughput_rows(d, scale, payload).await?);
    }
    if want("short") {
        rows.extend(short::rows(d, scale, payload).await?);
    }
    if want("resume") {
        rows.extend(resume_rows(d, scale).await?);
    }
    if want("bytes") {
        rows.push(bytes_row(d, scale).await?);
    }
    if want("rss") {
        rows.push(rss_row(d, scale));
    }
    if want("checksum") {
        rows.push(checksum_row().await?);
    }
    if want("history") {
        rows.extend(history::rows(d, scale).await?);
    }
    if want("retry") {
        rows.extend(retry::rows(d, scale).await?);
    }
    if want("streams") {
        rows.extend(streams::rows(d, scale).await?);
    }
    if want("children") {
        let pg = postgres::url(&args);
        rows.extend(children::rows(d, pg.as_deref(), scale).await?);
    }
    if want("pool") {
        if let Some(url) = postgres::url(&args) {
            rows.extend(pool::rows(&url, scale, payload).await?);
        }
    }
    match postgres::url(&args) {
        Some(url) if want("postgres") => rows.extend(postgres::rows(&url, scale, payload).await?),
        Some(_) => {}
        None => eprintln!("postgres: no server (--postgres URL or CHECKPOINT_TEST_POSTGRES_URL)"),
    }

    println!("| measure | project | baseline / raw floor (same run) | ratio | target | met |");
    println!("|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    Ok(())
}
