//! The peak-RSS row of the bench table (`BENCH_ONLY=rss`): a child
//! process (this binary run with `--child`) driving 1,000 concurrent runs
//! against an idle one, each reporting its `VmHWM`, `VmRSS` and SQLite's
//! heap peak. Measured in children so that nothing else this process did
//! counts.

use std::path::Path;

use checkpoint_runtime::prelude::*;

use super::stats::{met, scaled};
use super::workloads::{durable_loop, start_loops};
use super::BoxError;

/// `VmHWM` and `VmRSS` of this process, in KiB.
fn mem_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// The peak of SQLite's own heap in this process (all connections: the
/// store links the same bundled SQLite), in KiB.
fn sqlite_heap_peak_kib() -> u64 {
    // SAFETY: a plain query of SQLite's global memory statistics; no
    // pointers are involved.
    let peak = unsafe { rusqlite::ffi::sqlite3_memory_highwater(0) };
    u64::try_from(peak).unwrap_or(0) / 1024
}

/// Child process: an idle runtime (`runs = 0`) or one driving `runs`
/// concurrent runs of `n` checkpoints of a `size`-byte state (`--child PATH
/// RUNS N [SIZE]`; SIZE defaults to 1000). Prints `VmHWM VmRSS
/// SQLite-heap-peak` (KiB).
pub(crate) async fn child(path: &str, runs: usize, n: u32, size: u32) -> Result<(), BoxError> {
    // No probe here: its list of instants would count against the runtime.
    let rt = Runtime::builder()
        .concurrency(runs.max(64))
        .open(path)
        .await?;
    rt.register(durable_loop);
    if runs > 0 {
        start_loops(&rt, "rss", runs, n, size).await?;
    }
    rt.run_until_idle().await?;
    let (hwm, rss) = mem_kib();
    println!("{hwm} {rss} {}", sqlite_heap_peak_kib());
    Ok(())
}

/// Runs this binary as a child; returns its (VmHWM, VmRSS, SQLite heap
/// peak) in KiB.
fn spawn_child(path: &Path, runs: usize, n: u32) -> (u64, u64, u64) {
    let exe = std::env::current_exe().expect("current exe");
    let out = std::process::Command::new(exe)
        .arg("--child")
        .arg(path)
        .arg(runs.to_string())
        .arg(n.to_string())
        .output()
        .expect("spawn child");
    assert!(
        out.status.success(),
        "child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text
        .split_whitespace()
        .map(|v| v.parse::<u64>().unwrap_or(0));
    (
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

pub(crate) fn rss_row(d: &Path, scale: f64) -> String {
    // Peak RSS of a process driving 1,000 concurrent runs vs an idle runtime.
    let (rss_runs, rss_n) = (1000usize, scaled(60, scale) as u32);
    eprintln!(
        "peak RSS: idle child, then a child driving {rss_runs} runs x {rss_n} checkpoints ..."
    );
    let (idle_hwm, idle_rss, idle_sql) = spawn_child(&d.join("rss-idle.db"), 0, 0);
    let (busy_hwm, busy_rss, busy_sql) = spawn_child(&d.join("rss-busy.db"), rss_runs, rss_n);
    let above = busy_hwm.saturating_sub(idle_hwm) as f64 / 1024.0;
    format!(
        "| peak RSS driving {rss_runs} concurrent runs x {rss_n} checkpoints of ~1 KB (child process, VmHWM) | {:.1} MiB (RSS at end {:.1} MiB; SQLite heap peak {:.1} MiB) | idle runtime: {:.1} MiB (RSS {:.1} MiB; SQLite heap peak {:.1} MiB) | +{above:.1} MiB | <= +20 MB | {} |",
        busy_hwm as f64 / 1024.0,
        busy_rss as f64 / 1024.0,
        busy_sql as f64 / 1024.0,
        idle_hwm as f64 / 1024.0,
        idle_rss as f64 / 1024.0,
        idle_sql as f64 / 1024.0,
        met(above * 1.048_576 <= 20.0),
    )
}
