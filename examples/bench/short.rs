//! The short-runs row of the bench table (`examples/bench.rs`,
//! `BENCH_ONLY=short`): 1,000 runs of `durable_loop` (start, 20 checkpoints
//! of a ~1 KB state, completion), written as the README writes them: each
//! run's `start` issued concurrently and its `result()` awaited, on a
//! runtime opened with `Runtime::open` and its defaults. Timed end to end,
//! from the first `start` to the last result, and given in checkpoints per
//! second (the starts and completions are work on top, not counted).
//!
//! The floor is raw batched inserts of the same bytes on the same disk,
//! SQLite's defaults + WAL, 64 rows per transaction, as many rows as the
//! runs take checkpoints. Target: at least half of it. Each round runs the
//! floor right before the runs, after an untimed warm-up of both;
//! `BENCH_ROUNDS` sets the rounds (default 3, the median round shown).

use std::path::Path;
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;

use super::disk::{remove_db, settle, WalWatch};
use super::floor::{raw_floor, Floor};
use super::stats::{met, mib, scaled};
use super::workloads::durable_loop;
use super::BoxError;

/// Rows per transaction of the floor.
const PER_TX: usize = 64;

/// One measured round of the runs.
struct Round {
    /// Checkpoints per second, first start to last result.
    rate: f64,
    /// The same span.
    took: Duration,
    /// The WAL file's largest size meanwhile.
    wal_max: u64,
}

/// `runs` runs of `n` checkpoints of a `size`-byte state, README style, on
/// a fresh file.
async fn readme_runs(
    dir: &Path,
    name: &str,
    runs: usize,
    n: u32,
    size: u32,
) -> Result<Round, BoxError> {
    let path = dir.join(format!("{name}.db"));
    let rt = Runtime::open(path.to_str().expect("utf-8 temp path")).await?;
    let wal = WalWatch::start(&path);
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for r in 0..runs {
        let rt = rt.clone();
        let id = format!("{name}-{r}");
        set.spawn(async move {
            let h = rt.start(durable_loop, &id, (n, size)).await?;
            h.result().await.map(drop)
        });
    }
    while let Some(res) = set.join_next().await {
        res??;
    }
    let took = start.elapsed();
    let wal_max = wal.stop();
    rt.close().await;
    drop(rt);
    remove_db(&path);
    Ok(Round {
        rate: runs as f64 * f64::from(n) / took.as_secs_f64(),
        took,
        wal_max,
    })
}

pub(crate) async fn rows(d: &Path, scale: f64, payload: usize) -> Result<Vec<String>, BoxError> {
    let (runs, n) = (scaled(1000, scale), 20u32);
    let rows_total = runs * n as usize;
    let txs = rows_total.div_ceil(PER_TX);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(3);
    let bytes: Vec<u8> = (0..payload.max(1)).map(|i| i as u8).collect();
    let floor_path = d.join("raw-short.db");
    eprintln!("short runs: warm-up ...");
    raw_floor(&floor_path, Floor::Defaults, &bytes, PER_TX, txs)?;
    readme_runs(d, "short-warm", runs, n, 1000).await?;
    let mut measured = Vec::new();
    for round in 1..=rounds {
        eprintln!(
            "short runs, round {round}/{rounds}: raw floor ({txs} x {PER_TX} rows), then {runs} runs x {n} checkpoints ..."
        );
        settle();
        let [raw, _, _] = raw_floor(&floor_path, Floor::Defaults, &bytes, PER_TX, txs)?;
        settle();
        let ours = readme_runs(d, &format!("short-{round}"), runs, n, 1000).await?;
        measured.push((ours.rate / raw, ours, raw));
    }
    let in_order: Vec<String> = measured
        .iter()
        .map(|(ratio, ours, raw)| {
            format!(
                "{:.1}% = {:.0}k/{:.0}k",
                ratio * 100.0,
                ours.rate / 1e3,
                raw / 1e3
            )
        })
        .collect();
    let wal_max = measured.iter().map(|m| m.1.wal_max).max().unwrap_or(0);
    measured.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (ratio, ours, raw) = &measured[measured.len() / 2];
    Ok(vec![format!(
        "| short runs, README style: {runs} concurrent runs of start + {n} checkpoints of {payload} B + completion (each `start` spawned, its `result()` awaited; `Runtime::open` defaults; median of {rounds} rounds, each with its raw floor just before) | {:.0} checkpoints/s ({:.0} ms first start to last result; WAL file at most {:.1} MiB over all rounds) | raw batched inserts ({PER_TX} rows/tx, {txs} tx, SQLite defaults + WAL): {raw:.0} rows/s | {:.1}% (rounds in order: {}) | >= 50% of raw batched (64 rows/tx) | {} |",
        ours.rate,
        ours.took.as_secs_f64() * 1e3,
        mib(wal_max),
        ratio * 100.0,
        in_order.join(", "),
        met(*ratio >= 0.5),
    )])
}
