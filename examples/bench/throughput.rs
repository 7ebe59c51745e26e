//! The throughput rows of the bench table (`BENCH_ONLY=throughput`,
//! `BENCH_RUNS`, `BENCH_ROUNDS`): 1, 64, 1,000 and 50 concurrent runs of
//! durable checkpoints on a fresh SQLite file, each case alternating with
//! its raw floors (batched inserts of the same bytes, see `floor.rs`) over
//! several rounds, with the CPU and bytes written per checkpoint beside.

use std::path::Path;
use std::time::Instant;

use super::disk::{disk_size, settle, WalWatch};
use super::floor::{raw_floor, Floor};
use super::process::{cpu_split, cpu_total, thread_ticks, written_bytes};
use super::stats::{met, mib, scaled};
use super::workloads::{open_rt, start_loops, Probe};
use super::BoxError;

/// One measured throughput run.
struct Throughput {
    /// Checkpoints per second from the first `start` to the end of
    /// `run_until_idle` (starts, claims and completions included).
    wall: f64,
    /// Checkpoints per second between the first and the last checkpoint.
    steady: f64,
    /// CPU time per checkpoint (user + system) of the busiest store thread
    /// (the SQLite writer) and of the main thread (the tokio executor: the
    /// workflows, encoding, the runtime), in microseconds.
    writer_us: f64,
    main_us: f64,
    /// The same, all the process's threads together.
    all_us: f64,
    /// Bytes this process wrote (write syscalls: WAL frames, WAL checkpoints
    /// into the main file) per checkpoint.
    written: f64,
    /// The WAL file's largest size while the runs executed, and the file
    /// plus its WAL at the end (the runtime still open), in bytes.
    wal_max: u64,
    disk: u64,
}

/// `runs` concurrent runs × `n` checkpoints of `size` bytes on a fresh file.
async fn throughput(
    dir: &Path,
    name: &str,
    runs: usize,
    n: u32,
    size: u32,
) -> Result<Throughput, BoxError> {
    let path = dir.join(format!("{name}.db"));
    let probe = Probe::default();
    let rt = open_rt(&path, &probe, runs.max(64)).await?;
    // Timed from the starts: the runs execute in the background from then.
    let ticks = thread_ticks();
    let wrote = written_bytes();
    let wal = WalWatch::start(&path);
    let start = Instant::now();
    start_loops(&rt, name, runs, n, size).await?;
    rt.run_until_idle().await?;
    let wall = start.elapsed();
    let (wal_max, disk) = (wal.stop(), disk_size(&path));
    let after = thread_ticks();
    let (writer, main) = cpu_split(&ticks, &after);
    let all = cpu_total(&ticks, &after);
    let wrote = written_bytes().saturating_sub(wrote);
    let marks = probe.take();
    let total = runs as f64 * f64::from(n);
    assert_eq!(marks.len() as f64, total, "every checkpoint recorded");
    let first = marks.iter().min().copied().unwrap_or(start);
    let last = marks.iter().max().copied().unwrap_or(start);
    let steady = (total - 1.0) / (last - first).as_secs_f64().max(1e-9);
    // Rounds of the 1,000-run case leave 400 MB files: not kept around.
    drop(rt);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(Throughput {
        wall: total / wall.as_secs_f64(),
        steady,
        writer_us: writer / total,
        main_us: main / total,
        all_us: all / total,
        written: wrote as f64 / total,
        wal_max,
        disk,
    })
}

pub(crate) async fn throughput_rows(
    d: &Path,
    scale: f64,
    payload: usize,
) -> Result<Vec<String>, BoxError> {
    let mut rows = Vec::new();
    // Each case alternates its raw floors (batched inserts of the same bytes
    // on the same disk: SQLite's defaults + WAL, the main floor, then the
    // store's settings) and its own run, `rounds` times after a warm-up,
    // each starting with no write-back pending: the disk's speed drifts by
    // tens of percent over seconds on a shared machine, so one pair is not
    // enough to compare. 200,000 rows: past several WAL checkpoints of
    // either floor, as the 1,000-run case is.
    let (per_tx, txs) = (1000usize, scaled(200, scale));
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(3);
    let bytes: Vec<u8> = (0..payload.max(1)).map(|i| i as u8).collect();
    let fifty_n = scaled(200, scale);
    let picked = std::env::var("BENCH_RUNS").unwrap_or_default();
    let picked: Vec<&str> = picked.split(',').filter(|s| !s.is_empty()).collect();
    for (runs, n) in [
        (1usize, scaled(2000, scale)),
        (64, scaled(300, scale)),
        (1000, scaled(200, scale)),
        (50, fifty_n),
    ] {
        if !picked.is_empty() && !picked.contains(&runs.to_string().as_str()) {
            continue;
        }
        // An untimed warm-up: the first run of a case in a process also pays
        // for growing the heap to its size (page faults), which a worker
        // that has been serving runs for a while does not.
        eprintln!(
            "throughput: warm-up, {runs} runs x {} checkpoints ...",
            (n / 5).max(1)
        );
        throughput(d, &format!("warm{runs}"), runs, (n / 5).max(1) as u32, 1000).await?;
        let mut measured = Vec::new();
        for round in 1..=rounds {
            eprintln!(
                "throughput, round {round}/{rounds}: raw floors ({txs} x {per_tx} rows), then {runs} runs x {n} checkpoints ..."
            );
            settle();
            let raw = raw_floor(
                &d.join("raw-batch.db"),
                Floor::Defaults,
                &bytes,
                per_tx,
                txs,
            )?;
            settle();
            let store_raw = raw_floor(&d.join("raw-batch.db"), Floor::Store, &bytes, per_tx, txs)?;
            settle();
            let t = throughput(d, &format!("tp{runs}-{round}"), runs, n as u32, 1000).await?;
            measured.push((t.wall / raw[0], t, raw, store_raw));
        }
        // Every round in the order it ran; the one with the median ratio
        // stands for the case.
        let ratios: Vec<String> = measured
            .iter()
            .map(|(ratio, t, raw, store_raw)| {
                format!(
                    "{:.1}% = {:.0}k/{:.0}k (store's settings {:.0}k)",
                    ratio * 100.0,
                    t.wall / 1e3,
                    raw[0] / 1e3,
                    store_raw[0] / 1e3
                )
            })
            .collect();
        let wal_max = measured.iter().map(|m| m.1.wal_max).max().unwrap_or(0);
        measured.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (ratio, t, [raw_rate, raw_cpu, raw_written], store_raw) = &measured[measured.len() / 2];
        let store_ratio = t.wall / store_raw[0];
        let (target, ok) = match runs {
            1000 => (
                ">= 50% of raw batched (SQLite defaults)",
                Some(*ratio >= 0.5),
            ),
            50 => (">= 20000/s", Some(t.wall >= 20_000.0)),
            _ => ("-", None),
        };
        rows.push(format!(
            "| durable checkpoints/s, {runs} concurrent run(s) x {n} checkpoints of {payload} B (median of {rounds} rounds, each with its raw floors just before) | {:.0}/s (steady {:.0}/s; CPU per checkpoint: {:.1} us, of which writer thread {:.1} us, executor thread {:.1} us; {:.1} KB written per checkpoint; WAL file at most {:.1} MiB over all rounds, file + WAL {:.1} MiB at the end, runtime open) | raw batched inserts ({per_tx} rows/tx, {txs} tx), SQLite defaults + WAL: {raw_rate:.0} rows/s ({raw_cpu:.1} us CPU, {:.1} KB written per row); the store's settings: {:.0} rows/s | {:.1}% (store's settings: {:.1}%; rounds in order: {}) | {target} | {} |",
            t.wall,
            t.steady,
            t.all_us,
            t.writer_us,
            t.main_us,
            t.written / 1e3,
            mib(wal_max),
            mib(t.disk),
            raw_written / 1e3,
            store_raw[0],
            ratio * 100.0,
            store_ratio * 100.0,
            ratios.join(", "),
            ok.map_or("-", met),
        ));
    }
    Ok(rows)
}
