//! Prints one table of the project's speed figures, each next to a baseline
//! measured in the same run:
//!
//! ```text
//! cargo run --release --example bench
//! ```
//!
//! The first two rows use the in-memory store. The others use an SQLite file
//! in the temp dir (WAL, `synchronous=FULL`: every checkpoint is durable) and
//! compare with raw rusqlite on the same disk, with the store's pragmas:
//! sequential latency vs one `INSERT` + `COMMIT` of the same bytes,
//! throughput vs batched inserts (many rows per transaction), resume latency
//! with a short vs a long history, bytes on disk per checkpoint vs the
//! payload, and the peak RSS of a process driving 1,000 runs vs an idle one
//! (each measured in a child process: this binary run with `--child`).
//!
//! Progress goes to stderr; stdout is the table (columns: the project's
//! figure with a breakdown, the baseline or raw floor measured in the same
//! run, their ratio, the target, whether it is met). About half a minute on
//! a 2-core machine. Knobs:
//!
//! - `BENCH_SCALE` scales the SQLite counts (default 1.0; `0.1` for a quick
//!   look); the counts used are printed in each row;
//! - `BENCH_ONLY=memory,latency,throughput,resume,bytes,rss` picks sections;
//! - `BENCH_RUNS=1000` picks the throughput cases by run count (of 1, 64,
//!   1000, 50; default all), e.g. to profile one of them;
//! - `BENCH_ROUNDS` sets how many times each throughput case alternates
//!   its raw floor and its own run (default 3; the median round is shown);
//! - `BENCH_HISTORY_ON_DISK=1` builds the 100,000-checkpoint history on the
//!   temp dir's disk instead of on tmpfs (slow: one fsync per checkpoint).
//!
//! The disk is shared with whatever else runs on the machine: compare each
//! figure with the raw floor next to it (measured alongside), not with
//! another run's. The criterion versions live in `checkpoint-runtime/benches/`
//! (`checkpoint` for the in-memory store, `sqlite` for the durable latency and
//! 64-run throughput).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use rusqlite::Connection;

/// Any error (runtime, raw SQLite, I/O).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn state() -> Vec<u8> {
    (0..1000u32).map(|i| i as u8).collect()
}

#[workflow]
async fn thousand_checkpoints(ctx: &Ctx, n: u32) -> u64 {
    let mut state = state();
    let mut sum = 0u64;
    for i in 0..n {
        state[(i % 1000) as usize] = state[(i % 1000) as usize].wrapping_add(1);
        sum += state[(i % 1000) as usize] as u64;
        checkpoint!("step");
    }
    sum
}

async fn thousand_plain(n: u32) -> u64 {
    let mut state = state();
    let mut sum = 0u64;
    for i in 0..n {
        state[(i % 1000) as usize] = state[(i % 1000) as usize].wrapping_add(1);
        sum += state[(i % 1000) as usize] as u64;
        black_box(&state);
    }
    sum
}

#[workflow]
async fn compute_transformed(ctx: &Ctx, n: u64) -> u64 {
    let mut acc = 0u64;
    let mut i = 0u64;
    while i < n {
        acc = acc.wrapping_mul(6364136223846793005).wrapping_add(i);
        if acc == u64::MAX {
            checkpoint!("never");
        }
        i += 1;
    }
    acc
}

async fn compute_plain(n: u64) -> u64 {
    let mut acc = 0u64;
    let mut i = 0u64;
    while i < n {
        acc = acc.wrapping_mul(6364136223846793005).wrapping_add(i);
        if acc == u64::MAX {
            black_box(acc);
        }
        i += 1;
    }
    acc
}

/// Median of `rounds` timings of `f`.
async fn median<F, Fut>(rounds: usize, mut f: F) -> Duration
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut times = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let start = Instant::now();
        f(i).await;
        times.push(start.elapsed());
    }
    times.sort();
    times[rounds / 2]
}

// ---------------------------------------------------------------------------
// SQLite workloads

/// A runtime resource the workflows below record instants into (right after
/// each checkpoint returns, or at the first statement after a resume).
#[derive(Clone, Default)]
struct Probe(Arc<Mutex<Vec<Instant>>>);

impl Probe {
    fn mark(&self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
    }

    fn take(&self) -> Vec<Instant> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// `n` durable checkpoints of a `size`-byte state (plus a few bytes of
/// counters), one byte of it changing each time.
#[workflow]
async fn durable_loop(ctx: &Ctx, args: (u32, u32)) -> u64 {
    let (n, size) = args;
    let mut state: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut sum = 0u64;
    for i in 0..n {
        let at = (i % size.max(1)) as usize;
        state[at] = state[at].wrapping_add(1);
        sum += state[at] as u64;
        checkpoint!("step");
        if let Some(p) = ctx.try_resource::<Probe>() {
            p.mark();
        }
    }
    sum
}

/// `n` checkpoints of a ~1 KB state, then waits for `go` signals; the first
/// statement after each wait records when it ran. `go = 0` ends the run.
#[workflow]
async fn long_history(ctx: &Ctx, n: u32) -> u32 {
    let mut state = state();
    let mut i = 0u32;
    while i < n {
        let at = (i % 1000) as usize;
        state[at] = state[at].wrapping_add(1);
        i += 1;
        checkpoint!("step");
    }
    loop {
        let go: u32 = ctx.wait_for("go").await;
        if let Some(p) = ctx.try_resource::<Probe>() {
            p.mark();
        }
        if go == 0 {
            break;
        }
    }
    i + u32::from(state[0])
}

fn scaled(n: usize, scale: f64) -> usize {
    ((n as f64 * scale).round() as usize).max(1)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median_of(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let i = ((v.len().saturating_sub(1)) as f64 * p).round() as usize;
    v.get(i).copied().unwrap_or_default()
}

fn met(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "**no**"
    }
}

/// Opens an SQLite runtime at `path` with a [`Probe`] and this concurrency.
async fn open_rt(path: &Path, probe: &Probe, concurrency: usize) -> Result<Runtime, BoxError> {
    let rt = Runtime::builder()
        .concurrency(concurrency)
        .resource(probe.clone())
        .open(path.to_str().expect("utf-8 temp path"))
        .await?;
    rt.register(durable_loop);
    rt.register(long_history);
    Ok(rt)
}

/// Starts `runs` runs of [`durable_loop`] at once (their creations share
/// group commits).
async fn start_loops(
    rt: &Runtime,
    prefix: &str,
    runs: usize,
    n: u32,
    size: u32,
) -> Result<(), BoxError> {
    let mut set = tokio::task::JoinSet::new();
    for r in 0..runs {
        let rt = rt.clone();
        let id = format!("{prefix}-{r}");
        set.spawn(async move { rt.start(durable_loop, &id, (n, size)).await.map(|_| ()) });
    }
    while let Some(res) = set.join_next().await {
        res??;
    }
    Ok(())
}

/// One measured throughput run.
struct Throughput {
    /// Checkpoints per second over the whole `run_until_idle` (claims and
    /// completions included).
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
}

/// Bytes this process has passed to write syscalls (`wchar` of /proc/self/io).
fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("wchar:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system, in clock ticks) of each thread of this process,
/// by thread id, with the thread's name.
fn thread_ticks() -> Vec<(u32, String, u64)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(tid) = task.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_owned();
        // Fields after the name: state(3) ... utime(14) stime(15).
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let tick = |i: usize| rest.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        out.push((tid, name, tick(11) + tick(12)));
    }
    out
}

/// CPU microseconds spent between two [`thread_ticks`] samples by the
/// busiest `checkpoint-sqlite-*` thread and by the main thread.
fn cpu_split(before: &[(u32, String, u64)], after: &[(u32, String, u64)]) -> (f64, f64) {
    let tick_us = 1e6 / 100.0; // USER_HZ
    let main = std::process::id();
    let spent = |tid: u32, now: u64| {
        let was = before.iter().find(|b| b.0 == tid).map_or(0, |b| b.2);
        now.saturating_sub(was) as f64 * tick_us
    };
    let mut writer = 0f64;
    let mut main_us = 0f64;
    for (tid, name, now) in after {
        let us = spent(*tid, *now);
        if *tid == main {
            main_us = us;
        } else if name.starts_with("checkpoint-sql") {
            writer = writer.max(us);
        }
    }
    (writer, main_us)
}

/// CPU microseconds spent between two [`thread_ticks`] samples by all the
/// threads alive at the second one.
fn cpu_total(before: &[(u32, String, u64)], after: &[(u32, String, u64)]) -> f64 {
    let tick_us = 1e6 / 100.0; // USER_HZ
    after
        .iter()
        .map(|(tid, _, now)| {
            let was = before.iter().find(|b| b.0 == *tid).map_or(0, |b| b.2);
            now.saturating_sub(was) as f64 * tick_us
        })
        .sum()
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
    start_loops(&rt, name, runs, n, size).await?;
    let ticks = thread_ticks();
    let wrote = written_bytes();
    let start = Instant::now();
    rt.run_until_idle().await?;
    let wall = start.elapsed();
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
    })
}

/// The file-level settings of a database the store creates (`page_size`,
/// `auto_vacuum`), read by [`store_file_settings`]; the raw floors' files
/// get the same.
static FILE_SETTINGS: std::sync::OnceLock<(i64, i64)> = std::sync::OnceLock::new();

/// Creates a store file in `dir` and reads its page size and auto-vacuum
/// mode into [`FILE_SETTINGS`].
async fn store_file_settings(dir: &Path) -> Result<(i64, i64), BoxError> {
    let path = dir.join("settings.db");
    drop(open_rt(&path, &Probe::default(), 1).await?);
    let conn = Connection::open(&path)?;
    let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let vacuum: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    let _ = FILE_SETTINGS.set((page, vacuum));
    Ok((page, vacuum))
}

/// A raw connection with the store's settings and one table of blobs: the
/// file's page size and auto-vacuum mode as the store creates them
/// ([`FILE_SETTINGS`]), and the writer connection's pragmas (as
/// `prepare_writer` in `checkpoint-runtime/src/store/sqlite.rs` sets them).
fn raw_conn(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    if let Some((page, vacuum)) = FILE_SETTINGS.get() {
        // Before anything is written: they only apply to a new file.
        conn.pragma_update(None, "page_size", page)?;
        conn.pragma_update(None, "auto_vacuum", vacuum)?;
    }
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    assert!(mode.eq_ignore_ascii_case("wal"), "WAL mode");
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -(8i64 << 10))?;
    conn.pragma_update(None, "wal_autocheckpoint", 16384)?;
    conn.pragma_update(None, "journal_size_limit", 64i64 << 20)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    )?;
    Ok(conn)
}

/// `n` durable transactions of one INSERT each; the time of each.
fn raw_sequential(conn: &Connection, bytes: &[u8], n: usize) -> rusqlite::Result<Vec<Duration>> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        conn.prepare_cached("INSERT INTO t (data) VALUES (?1)")?
            .execute([bytes])?;
        conn.execute_batch("COMMIT")?;
        times.push(t.elapsed());
    }
    Ok(times)
}

/// Rows per second of `txs` durable transactions of `per_tx` INSERTs each.
fn raw_batched(
    conn: &Connection,
    bytes: &[u8],
    per_tx: usize,
    txs: usize,
) -> rusqlite::Result<f64> {
    let start = Instant::now();
    for _ in 0..txs {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        {
            let mut stmt = conn.prepare_cached("INSERT INTO t (data) VALUES (?1)")?;
            for _ in 0..per_tx {
                stmt.execute([bytes])?;
            }
        }
        conn.execute_batch("COMMIT")?;
    }
    Ok((per_tx * txs) as f64 / start.elapsed().as_secs_f64())
}

/// File size of the database at `path` once every connection is closed (the
/// last close checkpoints the WAL into the main file).
fn db_size(path: &Path) -> u64 {
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        // Still open somewhere: fold the WAL in first.
        if let Ok(c) = Connection::open(path) {
            let _ = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Bytes on disk per checkpoint: `runs` × `n` checkpoints of `size` bytes;
/// returns (file growth per checkpoint, payload bytes per checkpoint).
async fn bytes_per_checkpoint(
    dir: &Path,
    name: &str,
    runs: usize,
    n: u32,
    size: u32,
) -> Result<(f64, usize), BoxError> {
    let path = dir.join(format!("{name}.db"));
    let probe = Probe::default();
    {
        let rt = open_rt(&path, &probe, runs.max(64)).await?;
        start_loops(&rt, name, runs, n, size).await?;
    }
    let before = db_size(&path);
    let payload = {
        let rt = open_rt(&path, &probe, runs.max(64)).await?;
        rt.run_until_idle().await?;
        let cps = rt.checkpoints(&format!("{name}-0")).await?;
        cps.last().map(|c| c.size).unwrap_or(0)
    };
    let after = db_size(&path);
    let total = runs as f64 * f64::from(n);
    Ok((after.saturating_sub(before) as f64 / total, payload))
}

/// Builds a run with `n` checkpoints waiting for `go` in the database at
/// `path`; returns the time taken and where it was built.
///
/// Each checkpoint of one run is its own durable commit, so on a busy disk
/// 100,000 of them take minutes. The file is therefore built on tmpfs
/// (`/dev/shm`, where an fsync costs next to nothing) when there is one, and
/// copied into place once closed: the resumes are then timed on the real
/// disk, on the same bytes. `BENCH_HISTORY_ON_DISK=1` builds it in place.
async fn build_history(path: &Path, n: u32) -> Result<(Duration, &'static str), BoxError> {
    let shm = Path::new("/dev/shm");
    let on_disk = std::env::var_os("BENCH_HISTORY_ON_DISK").is_some() || !shm.is_dir();
    let build_at = if on_disk {
        path.to_path_buf()
    } else {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("hist.db");
        shm.join(format!("checkpoint-bench-{}-{name}", std::process::id()))
    };
    let took = {
        let probe = Probe::default();
        let rt = open_rt(&build_at, &probe, 64).await?;
        let start = Instant::now();
        rt.start(long_history, "hist", n).await?;
        rt.run_until_idle().await?;
        let took = start.elapsed();
        rt.signal("hist", "go", &1u32).await?;
        took
    };
    if on_disk {
        return Ok((took, "on disk"));
    }
    db_size(&build_at); // folds a leftover WAL into the file
    std::fs::copy(&build_at, path)?;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", build_at.display()));
    }
    Ok((took, "on tmpfs, then copied to the temp dir"))
}

/// One resume of the run built by [`build_history`]: opens a runtime on the
/// file and times open + claim + load + the first statement after the wait.
/// The run then waits again (signalled for the next round), or, on the
/// `last` round, completes.
async fn resume_once(path: &Path, last: bool) -> Result<Duration, BoxError> {
    let probe = Probe::default();
    let start = Instant::now();
    let rt = open_rt(path, &probe, 64).await?;
    rt.run_until_idle().await?;
    let marks = probe.take();
    let at = *marks.first().expect("the run resumed");
    let go = if last { 0u32 } else { 1 };
    rt.signal("hist", "go", &go).await?;
    if last {
        rt.run_until_idle().await?;
    }
    Ok(at - start)
}

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
async fn child(path: &str, runs: usize, n: u32, size: u32) -> Result<(), BoxError> {
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
    let scale: f64 = std::env::var("BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|s: &f64| *s > 0.0)
        .unwrap_or(1.0);
    // BENCH_ONLY=memory,latency,throughput,resume,bytes,rss picks sections.
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
        rows.push(latency_row(d, scale, payload).await?);
    }
    if want("throughput") {
        rows.extend(throughput_rows(d, scale, payload).await?);
    }
    if want("resume") {
        rows.push(resume_row(d, scale).await?);
    }
    if want("bytes") {
        rows.push(bytes_row(d, scale).await?);
    }
    if want("rss") {
        rows.push(rss_row(d, scale));
    }

    println!("| measure | project | baseline / raw floor (same run) | ratio | target | met |");
    println!("|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    Ok(())
}

/// The in-memory rows: a checkpoint's cost, and the transform's cost when no
/// checkpoint is taken.
async fn memory_rows(rows: &mut Vec<String>) -> Result<(), BoxError> {
    eprintln!("in-memory checkpoints ...");
    const CHECKPOINTS: u32 = 1000;
    const ROUNDS: usize = 31;
    let rt = Runtime::in_memory();

    let with = median(ROUNDS, |i| {
        let rt = rt.clone();
        async move {
            let h = rt
                .start(thousand_checkpoints, &format!("ck-{i}"), CHECKPOINTS)
                .await
                .expect("start");
            black_box(h.result().await.expect("result"));
        }
    })
    .await;
    let plain = median(ROUNDS, |_| async {
        black_box(thousand_plain(black_box(CHECKPOINTS)).await);
    })
    .await;
    let per_checkpoint = with.saturating_sub(plain) / CHECKPOINTS;
    let size = rt
        .checkpoints("ck-0")
        .await?
        .last()
        .map(|c| c.size)
        .unwrap_or(0);

    const WORK: u64 = 2_000_000;
    let transformed = median(ROUNDS, |i| {
        let rt = rt.clone();
        async move {
            let h = rt
                .start(compute_transformed, &format!("c-{i}"), WORK)
                .await
                .expect("start");
            black_box(h.result().await.expect("result"));
        }
    })
    .await;
    let compute = median(ROUNDS, |_| async {
        black_box(compute_plain(black_box(WORK)).await);
    })
    .await;
    drop(rt);

    rows.push(format!(
        "| in-memory checkpoint, {size} B state | {} ns/checkpoint | run of {CHECKPOINTS} checkpoints {:.3} ms vs plain loop {:.3} ms | {:.1}x | <= 2000 ns | {} |",
        per_checkpoint.as_nanos(),
        ms(with),
        ms(plain),
        with.as_secs_f64() / plain.as_secs_f64().max(1e-12),
        met(per_checkpoint <= Duration::from_nanos(2000)),
    ));
    let overhead = transformed.as_secs_f64() / compute.as_secs_f64().max(1e-12);
    rows.push(format!(
        "| transformed fn, no checkpoint taken | {:.3} ms | plain async fn {:.3} ms | {overhead:.3} | <= 1.05 | {} |",
        ms(transformed),
        ms(compute),
        met(overhead <= 1.05),
    ));

    Ok(())
}

async fn latency_row(d: &Path, scale: f64, payload: usize) -> Result<String, BoxError> {
    // Sequential latency: one run at a time taking checkpoints one after the
    // other, vs INSERT + COMMIT of as many bytes; alternating rounds of each
    // (so that a disturbance of the disk hits both alike). The target is
    // checked on the medians; means are shown too.
    let (rounds, per_round) = (8usize, scaled(500, scale) as u32);
    eprintln!(
        "sequential latency: {rounds} rounds of {per_round} checkpoints and {per_round} raw commits ..."
    );
    let raw = raw_conn(&d.join("raw-seq.db"))?;
    let probe = Probe::default();
    let seq_rt = open_rt(&d.join("seq.db"), &probe, 64).await?;
    let mut raw_times = Vec::new();
    let mut our_times = Vec::new();
    let bytes: Vec<u8> = (0..payload).map(|i| i as u8).collect();
    // CPU us (writer thread, executor thread) of the runtime's rounds, and
    // of the raw rounds (on the main thread).
    let (mut our_cpu, mut raw_cpu) = ((0f64, 0f64), 0f64);
    settle();
    for round in 0..rounds {
        let id = format!("seq-{round}");
        let h = seq_rt.start(durable_loop, &id, (per_round, 1000)).await?;
        let ticks = thread_ticks();
        h.result().await?;
        let (w, m) = cpu_split(&ticks, &thread_ticks());
        our_cpu = (our_cpu.0 + w, our_cpu.1 + m);
        let marks = probe.take();
        our_times.extend(marks.windows(2).map(|w| w[1] - w[0]));
        let ticks = thread_ticks();
        raw_times.extend(raw_sequential(&raw, &bytes, per_round as usize)?);
        raw_cpu += cpu_split(&ticks, &thread_ticks()).1;
    }
    let total = (rounds * per_round as usize) as f64;
    drop(seq_rt);
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / (v.len().max(1) as u32);
    let (ours_mean, raw_mean) = (mean(&our_times), mean(&raw_times));
    let ours_med = median_of(&mut our_times);
    let ours_p99 = pct(&mut our_times, 0.99);
    let raw_med = median_of(&mut raw_times);
    let raw_p99 = pct(&mut raw_times, 0.99);
    let ratio = ours_med.as_secs_f64() / raw_med.as_secs_f64().max(1e-12);
    let mean_ratio = ours_mean.as_secs_f64() / raw_mean.as_secs_f64().max(1e-12);
    Ok(format!(
        "| sequential durable checkpoint, {payload} B state ({rounds} runs x {per_round} checkpoints, alternating with the raw rounds) | median {:.0} us, mean {:.0} us, p99 {:.0} us (CPU per checkpoint: writer thread {:.0} us, executor thread {:.0} us) | raw INSERT + COMMIT of {payload} B ({rounds} x {per_round}): median {:.0} us, mean {:.0} us, p99 {:.0} us ({:.0} us CPU) | {ratio:.2}x (means {mean_ratio:.2}x) | <= 1.3x | {} |",
        us(ours_med),
        us(ours_mean),
        us(ours_p99),
        our_cpu.0 / total,
        our_cpu.1 / total,
        us(raw_med),
        us(raw_mean),
        us(raw_p99),
        raw_cpu / total,
        met(ratio <= 1.3),
    ))
}

/// Flushes every dirty page of the machine (`sync`), so that the write-back
/// of one measurement (a closed database's WAL checkpoint, a raw floor's
/// rows) does not slow down the fsyncs of the next.
fn settle() {
    let _ = std::process::Command::new("sync").status();
}

/// Raw batched-insert throughput of the same disk: `txs` transactions of
/// `per_tx` rows of `bytes` into a fresh file (long enough to include the
/// WAL checkpoints it causes). Returns rows/s, CPU us per row, bytes written
/// per row.
fn raw_floor(path: &Path, bytes: &[u8], per_tx: usize, txs: usize) -> Result<[f64; 3], BoxError> {
    let conn = raw_conn(path)?;
    let (ticks, wrote) = (thread_ticks(), written_bytes());
    let rate = raw_batched(&conn, bytes, per_tx, txs)?;
    let rows = (per_tx * txs) as f64;
    let cpu = cpu_split(&ticks, &thread_ticks()).1 / rows;
    let written = written_bytes().saturating_sub(wrote) as f64 / rows;
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok([rate, cpu, written])
}

async fn throughput_rows(d: &Path, scale: f64, payload: usize) -> Result<Vec<String>, BoxError> {
    let mut rows = Vec::new();
    // Each case alternates its raw floor (batched inserts of the same bytes
    // on the same disk) and its own run, `rounds` times after a warm-up,
    // each starting with no write-back pending: the disk's speed drifts by tens of percent over
    // seconds on a shared machine, so one pair is not enough to compare.
    // 200,000 rows: past one WAL checkpoint (the store's 16,384-page
    // interval), as the 1,000-run case is.
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
                "throughput, round {round}/{rounds}: raw floor ({txs} x {per_tx} rows), then {runs} runs x {n} checkpoints ..."
            );
            settle();
            let raw = raw_floor(&d.join("raw-batch.db"), &bytes, per_tx, txs)?;
            settle();
            let t = throughput(d, &format!("tp{runs}-{round}"), runs, n as u32, 1000).await?;
            measured.push((t.wall / raw[0], t, raw));
        }
        // Every round in the order it ran; the one with the median ratio
        // stands for the case.
        let ratios: Vec<String> = measured
            .iter()
            .map(|(ratio, t, raw)| {
                format!(
                    "{:.1}% = {:.0}k/{:.0}k",
                    ratio * 100.0,
                    t.wall / 1e3,
                    raw[0] / 1e3
                )
            })
            .collect();
        measured.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (ratio, t, [raw_rate, raw_cpu, raw_written]) = &measured[measured.len() / 2];
        let (target, ok) = match runs {
            1000 => (">= 50% of raw batched", Some(*ratio >= 0.5)),
            50 => (">= 20000/s", Some(t.wall >= 20_000.0)),
            _ => ("-", None),
        };
        rows.push(format!(
            "| durable checkpoints/s, {runs} concurrent run(s) x {n} checkpoints of {payload} B (median of {rounds} rounds, each with its own raw floor just before) | {:.0}/s (steady {:.0}/s; CPU per checkpoint: {:.1} us, of which writer thread {:.1} us, executor thread {:.1} us; {:.1} KB written per checkpoint) | raw batched inserts ({per_tx} rows/tx, {txs} tx): {raw_rate:.0} rows/s ({raw_cpu:.1} us CPU, {:.1} KB written per row) | {:.1}% (rounds in order: {}) | {target} | {} |",
            t.wall,
            t.steady,
            t.all_us,
            t.writer_us,
            t.main_us,
            t.written / 1e3,
            raw_written / 1e3,
            ratio * 100.0,
            ratios.join(", "),
            ok.map_or("-", met),
        ));
    }
    Ok(rows)
}

async fn resume_row(d: &Path, scale: f64) -> Result<String, BoxError> {
    // Resume latency after a short and a long history.
    let long_n = scaled(100_000, scale) as u32;
    let rounds = 15;
    eprintln!("resume: building a run of 10 checkpoints ...");
    let short_db = d.join("hist-10.db");
    build_history(&short_db, 10).await?;
    eprintln!("resume: building a run of {long_n} checkpoints ...");
    let long_db = d.join("hist-long.db");
    let (build_took, built_where) = build_history(&long_db, long_n).await?;
    eprintln!(
        "resume: built in {:.1} s {built_where}; {rounds} resumes of each ...",
        build_took.as_secs_f64()
    );
    // Alternating, so that a disturbance of the disk hits both alike.
    settle();
    let (mut short, mut long) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let last = round + 1 == rounds;
        short.push(resume_once(&short_db, last).await?);
        long.push(resume_once(&long_db, last).await?);
    }
    let (short_med, long_med) = (median_of(&mut short), median_of(&mut long));
    let ratio = long_med.as_secs_f64() / short_med.as_secs_f64().max(1e-12);
    Ok(format!(
        "| resume latency (open, claim, load, first statement) after {long_n} checkpoints of ~1 KB (history built in {:.1} s {built_where}; median of {rounds} resumes, alternating with the short history's) | {:.2} ms | same after 10 checkpoints: {:.2} ms | {ratio:.2} | <= 1.5 | {} |",
        build_took.as_secs_f64(),
        ms(long_med),
        ms(short_med),
        met(ratio <= 1.5),
    ))
}

async fn bytes_row(d: &Path, scale: f64) -> Result<String, BoxError> {
    // Bytes on disk per checkpoint at several state sizes. The smallest one
    // gives the fixed overhead per checkpoint (bytes beyond its payload);
    // the target is checked at the others, after taking that off.
    let (b_runs, b_n) = (50usize, scaled(200, scale) as u32);
    let sizes = [16u32, 1000, 2000, 4000];
    eprintln!("bytes on disk: {b_runs} runs x {b_n} checkpoints, states of {sizes:?} B ...");
    let mut points = Vec::new();
    for size in sizes {
        let (per_cp, payload) =
            bytes_per_checkpoint(d, &format!("bytes-{size}"), b_runs, b_n, size).await?;
        // The same payload inserted raw (one table of blobs), for scale.
        let path = d.join(format!("raw-bytes-{size}.db"));
        let conn = raw_conn(&path)?;
        let bytes: Vec<u8> = (0..payload).map(|i| i as u8).collect();
        raw_batched(&conn, &bytes, b_n as usize, b_runs)?;
        drop(conn);
        let raw = db_size(&path) as f64 / (b_runs as f64 * f64::from(b_n));
        points.push((payload, per_cp, raw));
    }
    let (small_payload, small, _) = points[0];
    let fixed = small - small_payload as f64;
    let ratios: Vec<f64> = points[1..]
        .iter()
        .map(|&(p, b, _)| (b - fixed) / p.max(1) as f64)
        .collect();
    let worst = ratios.iter().copied().fold(0f64, f64::max);
    let (p1k, b1k, r1k) = points[1];
    let others: Vec<String> = points[2..]
        .iter()
        .map(|(p, b, _)| format!("{b:.0} B at {p} B"))
        .collect();
    let raw_others: Vec<String> = points[2..]
        .iter()
        .map(|(p, _, r)| format!("{r:.0} B at {p} B"))
        .collect();
    Ok(format!(
        "| bytes on disk per checkpoint ({b_runs} runs x {b_n} per size, file growth after a WAL checkpoint) | {b1k:.0} B at {p1k} B payload ({}); fixed overhead {fixed:.0} B ({small:.0} B at {small_payload} B) | postcard payload {p1k} B; a raw rusqlite row of it: {r1k:.0} B ({}) | (bytes - fixed) / payload: {} | <= 1.5x + fixed | {} |",
        others.join(", "),
        raw_others.join(", "),
        ratios
            .iter()
            .zip(&points[1..])
            .map(|(r, (p, _, _))| format!("{r:.2}x at {p} B"))
            .collect::<Vec<_>>()
            .join(", "),
        met(worst <= 1.5),
    ))
}

fn rss_row(d: &Path, scale: f64) -> String {
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
