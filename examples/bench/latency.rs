//! The sequential latency row of the bench table (`BENCH_ONLY=latency`):
//! one run at a time taking durable checkpoints of a ~700-byte state one
//! after the other on an SQLite file, against one raw `INSERT` + `COMMIT`
//! of the same bytes (both floors, see `floor.rs`), in alternating rounds.
//! Its median is kept for the checksum row (`checksum.rs`).

use std::path::Path;
use std::time::Duration;

use checkpoint_runtime::prelude::*;

use super::checksum::DURABLE_MEDIAN;
use super::disk::{settle, WalWatch};
use super::floor::{raw_conn, raw_sequential, Floor};
use super::process::{cpu_split, thread_ticks};
use super::stats::{median_of, met, mib, pct, scaled, us};
use super::workloads::{durable_loop, open_rt, Probe};
use super::BoxError;

/// The state of the sequential latency row: about 700 bytes, as the
/// target asks (its payload is a few bytes more, the loop's counters).
const LATENCY_STATE: u32 = 700;

pub(crate) async fn latency_row(d: &Path, scale: f64) -> Result<String, BoxError> {
    // Sequential latency: one run at a time taking checkpoints one after the
    // other, vs INSERT + COMMIT of as many bytes; alternating rounds of each
    // (so that a disturbance of the disk hits both alike). The target is
    // checked on the medians; means are shown too.
    let (rounds, per_round) = (8usize, scaled(500, scale) as u32);
    let payload = {
        let rt = Runtime::in_memory();
        rt.start(durable_loop, "size", (per_round, LATENCY_STATE))
            .await?
            .result()
            .await?;
        let cps = rt.checkpoints("size").await?;
        cps.last().map(|c| c.size).unwrap_or(LATENCY_STATE as usize)
    };
    eprintln!(
        "sequential latency: {rounds} rounds of {per_round} checkpoints and {per_round} raw commits ..."
    );
    // Both floors' connections: SQLite's defaults (the main floor) and the
    // store's settings (a second line).
    let floors = [Floor::Defaults, Floor::Store];
    let raws = [
        raw_conn(&d.join("raw-seq.db"), floors[0])?,
        raw_conn(&d.join("raw-seq-store.db"), floors[1])?,
    ];
    let probe = Probe::default();
    let seq_path = d.join("seq.db");
    let seq_rt = open_rt(&seq_path, &probe, 64).await?;
    let wal = WalWatch::start(&seq_path);
    let mut raw_times = [Vec::new(), Vec::new()];
    let mut our_times = Vec::new();
    let bytes: Vec<u8> = (0..payload).map(|i| i as u8).collect();
    // CPU us (writer thread, executor thread) of the runtime's rounds, and
    // of the raw rounds (on the main thread).
    let (mut our_cpu, mut raw_cpu) = ((0f64, 0f64), [0f64; 2]);
    settle();
    for round in 0..rounds {
        let id = format!("seq-{round}");
        let h = seq_rt
            .start(durable_loop, &id, (per_round, LATENCY_STATE))
            .await?;
        let ticks = thread_ticks();
        h.result().await?;
        let (w, m) = cpu_split(&ticks, &thread_ticks());
        our_cpu = (our_cpu.0 + w, our_cpu.1 + m);
        let marks = probe.take();
        our_times.extend(marks.windows(2).map(|w| w[1] - w[0]));
        for (i, raw) in raws.iter().enumerate() {
            let ticks = thread_ticks();
            raw_times[i].extend(raw_sequential(raw, &bytes, per_round as usize)?);
            raw_cpu[i] += cpu_split(&ticks, &thread_ticks()).1;
        }
    }
    let total = (rounds * per_round as usize) as f64;
    let wal_max = wal.stop();
    drop(seq_rt);
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / (v.len().max(1) as u32);
    let ours_mean = mean(&our_times);
    let ours_med = median_of(&mut our_times);
    let ours_p99 = pct(&mut our_times, 0.99);
    let ratio_to = |d: Duration| ours_med.as_secs_f64() / d.as_secs_f64().max(1e-12);
    let mut floor_text = Vec::new();
    let mut ratio_text = Vec::new();
    let mut main_ratio = 0f64;
    for (i, times) in raw_times.iter_mut().enumerate() {
        let raw_mean = mean(times);
        let (raw_med, raw_p99) = (median_of(times), pct(times, 0.99));
        let ratio = ratio_to(raw_med);
        let mean_ratio = ours_mean.as_secs_f64() / raw_mean.as_secs_f64().max(1e-12);
        if i == 0 {
            main_ratio = ratio;
        }
        floor_text.push(format!(
            "{}: median {:.0} us, mean {:.0} us, p99 {:.0} us ({:.0} us CPU)",
            floors[i].name(),
            us(raw_med),
            us(raw_mean),
            us(raw_p99),
            raw_cpu[i] / total,
        ));
        ratio_text.push(format!(
            "{}{ratio:.2}x (means {mean_ratio:.2}x)",
            if i == 0 { "" } else { "store's settings: " }
        ));
    }
    let _ = DURABLE_MEDIAN.set(ours_med);
    Ok(format!(
        "| sequential durable checkpoint, {payload} B state ({rounds} runs x {per_round} checkpoints, alternating with the raw rounds) | median {:.0} us, mean {:.0} us, p99 {:.0} us (CPU per checkpoint: writer thread {:.0} us, executor thread {:.0} us; WAL file at most {:.1} MiB) | raw INSERT + COMMIT of {payload} B ({rounds} x {per_round}), {} | {} | <= 1.3x (to SQLite defaults) | {} |",
        us(ours_med),
        us(ours_mean),
        us(ours_p99),
        our_cpu.0 / total,
        our_cpu.1 / total,
        mib(wal_max),
        floor_text.join("; "),
        ratio_text.join("; "),
        met(main_ratio <= 1.3),
    ))
}
