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
//! (see [`Floor`]); a second line has the store's own settings (its page
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
//! - `BENCH_ONLY=memory,latency,throughput,short,resume,bytes,rss,checksum,history,children`
//!   picks sections (`short`: 1,000 short runs started and awaited as the
//!   README does, see `examples/bench/short.rs`; `checksum`: the cost of a checkpoint's checksums, as a
//!   share of the durable checkpoint's latency when `latency` runs too;
//!   `history`: an agent appending a message per checkpoint to a growing
//!   history, 4,000 times: store size, bytes written and latency against
//!   the state's size, see `examples/bench/history.rs`);
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
//! `BENCH_PG=latency,throughput,history,crowded` to pick among them).
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

#[path = "bench/children.rs"]
mod children;
#[path = "bench/history.rs"]
mod history;
#[path = "bench/postgres.rs"]
mod postgres;
#[path = "bench/short.rs"]
mod short;

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

/// Called by [`long_history`] once its last checkpoint is stored, when the
/// runtime has one: the crash child's, which aborts the process there.
#[derive(Clone)]
struct CrashAt(Arc<dyn Fn() + Send + Sync>);

/// `n` checkpoints of a ~1 KB state (with a [`CrashAt`], the process
/// aborts right after the last), then waits for `go` signals. The first
/// statement after the loop and after each wait records when it ran (a
/// resume after the crash reaches the one after the loop first). `go = 0`
/// ends the run.
#[workflow]
async fn long_history(ctx: &Ctx, n: u32) -> u32 {
    let mut state = state();
    let mut i = 0u32;
    while i < n {
        let at = (i % 1000) as usize;
        state[at] = state[at].wrapping_add(1);
        i += 1;
        checkpoint!("step");
        if i == n {
            if let Some(crash) = ctx.try_resource::<CrashAt>() {
                (crash.0)();
            }
        }
    }
    if let Some(p) = ctx.try_resource::<Probe>() {
        p.mark();
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

/// The file-level settings of a database the store creates (`page_size`,
/// `auto_vacuum`), read by [`store_file_settings`]; the second floors'
/// files ([`Floor::Store`]) get the same.
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

/// The settings of a raw floor's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Floor {
    /// The main floor: what `rusqlite::Connection::open` gives a user (4 KiB
    /// pages, a 2 MiB cache, a WAL checkpoint every 1,000 pages, `synchronous`
    /// FULL), with one change, `journal_mode=WAL`. WAL, because it is what
    /// a durable writer of many small transactions turns on first, and the
    /// stricter floor: the default rollback journal costs at least two
    /// fsyncs per commit plus creating and deleting the journal, so against
    /// it the store would look faster than it is. `synchronous` stays at its
    /// default, FULL, the store's own: every commit is fsynced, the same
    /// durability on both sides.
    Defaults,
    /// The store's own settings (its page size and auto-vacuum mode, and
    /// the writer connection's pragmas as `prepare_writer` in
    /// `checkpoint-runtime/src/store/sqlite/migrations.rs` sets them): a
    /// second line, to tell what the settings do from what the store does.
    Store,
}

impl Floor {
    fn name(self) -> &'static str {
        match self {
            Floor::Defaults => "SQLite defaults + WAL",
            Floor::Store => "the store's settings",
        }
    }
}

/// A raw connection with `floor`'s settings and one table of blobs.
fn raw_conn(path: &Path, floor: Floor) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    if floor == Floor::Store {
        if let Some((page, vacuum)) = FILE_SETTINGS.get() {
            // Before anything is written: they only apply to a new file.
            conn.pragma_update(None, "page_size", page)?;
            conn.pragma_update(None, "auto_vacuum", vacuum)?;
        }
    }
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    assert!(mode.eq_ignore_ascii_case("wal"), "WAL mode");
    if floor == Floor::Store {
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        conn.pragma_update(None, "cache_size", -(4i64 << 10))?;
        conn.pragma_update(None, "wal_autocheckpoint", STORE_AUTOCHECKPOINT)?;
        conn.pragma_update(None, "journal_size_limit", STORE_JOURNAL_LIMIT)?;
    }
    let sync: i64 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
    assert_eq!(sync, 2, "synchronous=FULL: every commit durable");
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    )?;
    Ok(conn)
}

/// The store writer's `wal_autocheckpoint` and `journal_size_limit` (see
/// `migrations.rs`), for [`Floor::Store`].
const STORE_AUTOCHECKPOINT: i64 = 256;
const STORE_JOURNAL_LIMIT: i64 = 4 << 20;

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

/// `path`'s `-wal` file.
fn wal_path(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}-wal", path.display()))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Disk use of the database at `path` as a user sees it now, with its
/// connections open: the file and its `-wal` file (the `-shm` index is
/// memory shared through a file of a few KiB; not counted).
fn disk_size(path: &Path) -> u64 {
    file_len(path) + file_len(&wal_path(path))
}

/// The WAL at `path`: its page size, and the frames that follow its header
/// with the header's salts: those written since the WAL last started over,
/// which a recovery after a crash reads (the rest of the file is stale).
fn wal_live_frames(path: &Path) -> (u64, u64) {
    let wal = std::fs::read(wal_path(path)).unwrap_or_default();
    let Some(page) = wal.get(8..12) else {
        return (0, 0);
    };
    let page = u32::from_be_bytes(page.try_into().expect("4 bytes")) as usize;
    let salts = &wal[16..24];
    let (mut frames, mut at) = (0u64, 32usize);
    while at + 24 + page <= wal.len() && &wal[at + 8..at + 16] == salts {
        frames += 1;
        at += 24 + page;
    }
    (page as u64, frames)
}

/// Watches the size of a database's `-wal` file from a thread of its own
/// (every 2 ms) until stopped.
struct WalWatch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl WalWatch {
    fn start(db: &Path) -> WalWatch {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (wal, flag) = (wal_path(db), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut max = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                max = max.max(file_len(&wal));
                std::thread::sleep(Duration::from_millis(2));
            }
            max.max(file_len(&wal))
        });
        WalWatch { stop, thread }
    }

    /// The largest size seen, in bytes.
    fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// File size of the database at `path` once every connection is closed (the
/// last close checkpoints the WAL into the main file).
fn db_size(path: &Path) -> u64 {
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    // Still open somewhere (a dropped runtime closes its store once its
    // background tasks end): fold the WAL in first, until nothing is left.
    let since = Instant::now();
    while std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0)
        && since.elapsed() < Duration::from_secs(30)
    {
        let busy = Connection::open(path)
            .and_then(|c| {
                c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    r.get::<_, i64>(0)
                })
            })
            .unwrap_or(1);
        if busy != 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Disk use per checkpoint of one case of [`bytes_per_checkpoint`].
struct DiskUse {
    /// Growth of the file plus its WAL per checkpoint, the worker still open.
    open: f64,
    /// Growth of the file per checkpoint once closed (the WAL folded in).
    closed: f64,
    /// The WAL file's size at the end, the worker still open.
    wal: u64,
    /// Payload bytes per checkpoint.
    payload: usize,
}

/// Bytes on disk per checkpoint: `runs` × `n` checkpoints of `size` bytes.
/// The runs are created first by a client-only runtime (their rows are not
/// counted), then executed by a worker, with the file measured while that
/// worker is still open and again once it closed.
async fn bytes_per_checkpoint(
    dir: &Path,
    name: &str,
    runs: usize,
    n: u32,
    size: u32,
) -> Result<DiskUse, BoxError> {
    let path = dir.join(format!("{name}.db"));
    let url = path.to_str().expect("utf-8 temp path");
    {
        let client = Runtime::builder().client_only().open(url).await?;
        for r in 0..runs {
            client
                .start(durable_loop, &format!("{name}-{r}"), (n, size))
                .await?;
        }
        client.close().await;
    }
    let before = db_size(&path);
    let probe = Probe::default();
    let rt = open_rt(&path, &probe, runs.max(64)).await?;
    rt.run_until_idle().await?;
    let (open, wal) = (disk_size(&path), file_len(&wal_path(&path)));
    let cps = rt.checkpoints(&format!("{name}-0")).await?;
    let payload = cps.last().map(|c| c.size).unwrap_or(0);
    rt.close().await;
    drop(rt);
    let closed = db_size(&path);
    let total = runs as f64 * f64::from(n);
    Ok(DiskUse {
        open: open.saturating_sub(before) as f64 / total,
        closed: closed.saturating_sub(before) as f64 / total,
        wal,
        payload,
    })
}

/// A history of [`long_history`] left by a crash: built by a child process
/// ([`crash_history`]) that aborted right after the run's last checkpoint,
/// the run still leased to it and the WAL as its store kept it.
struct Crashed {
    /// The database (its `-wal` and `-shm` files beside it).
    path: PathBuf,
    took: Duration,
    built_where: &'static str,
    /// The WAL file's largest size during the build.
    wal_max: u64,
    /// The WAL file's size, and its live frames (see [`wal_live_frames`])
    /// and page size, as the crash left it.
    wal_len: u64,
    live_frames: u64,
    page: u64,
}

/// Builds, in a child process, a run with `n` checkpoints and aborts the
/// child right after the last (see [`crash_history`]).
///
/// Each checkpoint of one run is its own durable commit, so on a busy disk
/// 100,000 of them take minutes. The file is therefore built on tmpfs
/// (`/dev/shm`, where an fsync costs next to nothing) when there is one; the
/// resumes copy it to the real disk first, so they are timed on the disk,
/// on the same bytes. `BENCH_HISTORY_ON_DISK=1` builds it in the temp dir.
fn build_crashed(dir: &Path, name: &str, n: u32) -> Result<Crashed, BoxError> {
    let shm = Path::new("/dev/shm");
    let on_disk = std::env::var_os("BENCH_HISTORY_ON_DISK").is_some() || !shm.is_dir();
    let (path, built_where) = if on_disk {
        (dir.join(format!("crashed-{name}.db")), "on disk")
    } else {
        let file = format!("checkpoint-bench-{}-{name}.db", std::process::id());
        (shm.join(file), "on tmpfs")
    };
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new(exe)
        .arg("--crash-history")
        .arg(&path)
        .arg(n.to_string())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<f64> = text
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    if out.status.success() || fields.len() != 5 {
        return Err(format!(
            "the history child did not abort after building ({}): {text} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(Crashed {
        path,
        took: Duration::from_secs_f64(fields[0]),
        built_where,
        wal_max: fields[1] as u64,
        wal_len: fields[2] as u64,
        live_frames: fields[3] as u64,
        page: fields[4] as u64,
    })
}

/// Child process (`--crash-history PATH N`): runs [`long_history`] with `n`
/// checkpoints at `path` on a worker and, right after the last checkpoint
/// is stored, prints `build-seconds WAL-max WAL-len live-frames page-size`
/// and aborts: nothing is closed, the run is still leased to this process
/// (a restarted worker with the same id takes it over at once) and the WAL
/// is what the store kept in it while running.
async fn crash_history(path: &str, n: u32) -> Result<(), BoxError> {
    let db = PathBuf::from(path);
    let wal = Arc::new(Mutex::new(Some(WalWatch::start(&db))));
    let start = Instant::now();
    let crash = CrashAt(Arc::new(move || {
        let took = start.elapsed();
        let watch = wal.lock().unwrap_or_else(|e| e.into_inner()).take();
        let wal_max = watch.map_or(0, WalWatch::stop);
        let wal_len = file_len(&wal_path(&db));
        let (page, frames) = wal_live_frames(&db);
        println!("{} {wal_max} {wal_len} {frames} {page}", took.as_secs_f64());
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        std::process::abort();
    }));
    let rt = Runtime::builder()
        .concurrency(64)
        .resource(crash)
        .open(path)
        .await?;
    rt.register(long_history);
    rt.start(long_history, "hist", n).await?;
    rt.run_until_idle().await?;
    Err("the history run went past its last checkpoint without aborting".into())
}

/// Copies the database at `from` with its `-wal` and `-shm` files to `to`.
fn copy_db(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::copy(from, to)?;
    for suffix in ["-wal", "-shm"] {
        let f = PathBuf::from(format!("{}{suffix}", from.display()));
        if f.exists() {
            std::fs::copy(&f, format!("{}{suffix}", to.display()))?;
        }
    }
    Ok(())
}

fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// SQLite's recovery of a [`Crashed`] history's WAL alone: the first read
/// of a raw connection on a fresh copy next to the image (on tmpfs when the
/// image is: no disk involved), median of 5.
fn recovery_time(image: &Crashed) -> Result<Duration, BoxError> {
    let copy = PathBuf::from(format!("{}.recovery.db", image.path.display()));
    let mut times = Vec::new();
    for _ in 0..5 {
        remove_db(&copy);
        copy_db(&image.path, &copy)?;
        let start = Instant::now();
        let conn = Connection::open(&copy)?;
        conn.query_row("SELECT count(*) FROM heads", [], |r| r.get::<_, i64>(0))?;
        times.push(start.elapsed());
        drop(conn);
    }
    remove_db(&copy);
    Ok(median_of(&mut times))
}

/// One resume of a [`Crashed`] history, on a fresh copy of it at `path`:
/// times open (with SQLite's recovery of the WAL) + taking over the dead
/// process's lease + load + the first statement after the last checkpoint.
async fn resume_crashed(image: &Crashed, path: &Path) -> Result<Duration, BoxError> {
    remove_db(path);
    copy_db(&image.path, path)?;
    settle();
    let probe = Probe::default();
    let start = Instant::now();
    let rt = open_rt(path, &probe, 64).await?;
    rt.run_until_idle().await?;
    let marks = probe.take();
    let at = *marks.first().expect("the run resumed");
    rt.close().await;
    drop(rt);
    remove_db(path);
    Ok(at - start)
}

/// Signals the built run for its next resume, from a runtime that never
/// executes (a worker would resume it at once, in the background).
async fn signal_resume(path: &Path) -> Result<(), BoxError> {
    let client = Runtime::builder()
        .client_only()
        .open(path.to_str().expect("utf-8 temp path"))
        .await?;
    client.signal("hist", "go", &1u32).await?;
    Ok(())
}

/// One resume of a folded history (see [`resume_rows`]): opens a runtime on the
/// file and times open + claim + load + the first statement after the wait.
/// The run then waits again (the next round signals it first), or, on the
/// `last` round, completes.
async fn resume_once(path: &Path, last: bool) -> Result<Duration, BoxError> {
    signal_resume(path).await?;
    let probe = Probe::default();
    let start = Instant::now();
    let rt = open_rt(path, &probe, 64).await?;
    rt.run_until_idle().await?;
    let marks = probe.take();
    let at = *marks.first().expect("the run resumed");
    if last {
        rt.signal("hist", "go", &0u32).await?;
        rt.run_until_idle().await?;
    }
    rt.close().await;
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
    // BENCH_ONLY=memory,latency,throughput,resume,bytes,rss,checksum,history
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
    if want("children") {
        let pg = postgres::url(&args);
        rows.extend(children::rows(d, pg.as_deref(), scale).await?);
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

/// The state of the sequential latency row: about 700 bytes, as the
/// target asks (its payload is a few bytes more, the loop's counters).
const LATENCY_STATE: u32 = 700;

async fn latency_row(d: &Path, scale: f64) -> Result<String, BoxError> {
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
fn raw_floor(
    path: &Path,
    floor: Floor,
    bytes: &[u8],
    per_tx: usize,
    txs: usize,
) -> Result<[f64; 3], BoxError> {
    let conn = raw_conn(path, floor)?;
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

async fn resume_rows(d: &Path, scale: f64) -> Result<Vec<String>, BoxError> {
    // Resume latency after a short and a long history, each left by a
    // crash (the WAL as the store kept it while running), then the same
    // files once folded (as after a clean close).
    let long_n = scaled(100_000, scale) as u32;
    // Fewer after a crash: each copies the whole file (100 MiB) first.
    let (crash_rounds, rounds) = (9, 15);
    eprintln!("resume: building a run of 10 checkpoints in a child, which then aborts ...");
    let short = build_crashed(d, "short", 10)?;
    eprintln!("resume: building a run of {long_n} checkpoints in a child, which then aborts ...");
    let long = build_crashed(d, "long", long_n)?;
    eprintln!(
        "resume: built in {:.1} s {}; {crash_rounds} resumes of each after the crash ...",
        long.took.as_secs_f64(),
        long.built_where
    );
    // Alternating, so that a disturbance of the disk hits both alike; each
    // on a fresh copy in the temp dir.
    let round_db = d.join("resume-crashed.db");
    let (mut short_t, mut long_t) = (Vec::new(), Vec::new());
    for _ in 0..crash_rounds {
        short_t.push(resume_crashed(&short, &round_db).await?);
        long_t.push(resume_crashed(&long, &round_db).await?);
    }
    let (short_med, long_med) = (median_of(&mut short_t), median_of(&mut long_t));
    let ratio = long_med.as_secs_f64() / short_med.as_secs_f64().max(1e-12);
    let wal = |c: &Crashed| -> Result<String, BoxError> {
        Ok(format!(
            "WAL left: {:.2} MiB file, {} live frames = {:.2} MiB, recovered alone in {:.2} ms {}; at most {:.1} MiB while building",
            mib(c.wal_len),
            c.live_frames,
            mib(c.live_frames * (c.page + 24)),
            ms(recovery_time(c)?),
            c.built_where,
            mib(c.wal_max)
        ))
    };
    let mut rows = vec![format!(
        "| resume latency after a crash (child aborted right after its last checkpoint, nothing closed, its lease and WAL left; open with WAL recovery, lease takeover, load, first statement) after {long_n} checkpoints of ~1 KB (history built in {:.1} s {}, then copied to the temp dir for each resume; median of {crash_rounds}, alternating with the short history's) | {:.2} ms ({}) | same after 10 checkpoints: {:.2} ms ({}) | {ratio:.2} | <= 1.5 | {} |",
        long.took.as_secs_f64(),
        long.built_where,
        ms(long_med),
        wal(&long)?,
        ms(short_med),
        wal(&short)?,
        met(ratio <= 1.5),
    )];

    eprintln!(
        "resume: the same histories folded (as after a clean close); {rounds} resumes of each ..."
    );
    let short_db = d.join("hist-10.db");
    let long_db = d.join("hist-long.db");
    for (image, db) in [(&short, &short_db), (&long, &long_db)] {
        copy_db(&image.path, db)?;
        // Resumed once, untimed: the run then waits for `go`, as each
        // round below expects, and the clean close folds the WAL.
        let rt = open_rt(db, &Probe::default(), 64).await?;
        rt.run_until_idle().await?;
        rt.close().await;
        drop(rt);
        db_size(db);
        remove_db(&image.path);
    }
    settle();
    let (mut short_t, mut long_t) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let last = round + 1 == rounds;
        short_t.push(resume_once(&short_db, last).await?);
        long_t.push(resume_once(&long_db, last).await?);
    }
    let (short_med, long_med) = (median_of(&mut short_t), median_of(&mut long_t));
    let ratio = long_med.as_secs_f64() / short_med.as_secs_f64().max(1e-12);
    rows.push(format!(
        "| resume latency after a clean close (open, claim, load, first statement) after {long_n} checkpoints of ~1 KB (the same histories, WAL folded; median of {rounds} resumes, alternating with the short history's) | {:.2} ms | same after 10 checkpoints: {:.2} ms | {ratio:.2} | <= 1.5 | {} |",
        ms(long_med),
        ms(short_med),
        met(ratio <= 1.5),
    ));
    Ok(rows)
}

async fn bytes_row(d: &Path, scale: f64) -> Result<String, BoxError> {
    // Bytes on disk per checkpoint at several state sizes, counted as a
    // user sees them while the worker is open: the file and its WAL. The
    // smallest size gives the fixed overhead per checkpoint (bytes beyond
    // its payload); the target is checked at the others, after taking that
    // off. The size once closed (WAL folded in) is shown beside.
    let (b_runs, b_n) = (50usize, scaled(200, scale) as u32);
    let sizes = [16u32, 1000, 2000, 4000];
    eprintln!("bytes on disk: {b_runs} runs x {b_n} checkpoints, states of {sizes:?} B ...");
    let mut points = Vec::new();
    for size in sizes {
        let used = bytes_per_checkpoint(d, &format!("bytes-{size}"), b_runs, b_n, size).await?;
        // The same payload inserted raw (one table of blobs, SQLite's
        // defaults + WAL), measured the same way: open, then closed.
        let path = d.join(format!("raw-bytes-{size}.db"));
        let conn = raw_conn(&path, Floor::Defaults)?;
        let bytes: Vec<u8> = (0..used.payload).map(|i| i as u8).collect();
        let empty = disk_size(&path);
        raw_batched(&conn, &bytes, b_n as usize, b_runs)?;
        let rows = b_runs as f64 * f64::from(b_n);
        let raw_open = disk_size(&path).saturating_sub(empty) as f64 / rows;
        drop(conn);
        let raw_closed = db_size(&path) as f64 / rows;
        points.push((used, raw_open, raw_closed));
    }
    let small = &points[0].0;
    let fixed = small.open - small.payload as f64;
    let ratios: Vec<f64> = points[1..]
        .iter()
        .map(|(u, _, _)| (u.open - fixed) / u.payload.max(1) as f64)
        .collect();
    let worst = ratios.iter().copied().fold(0f64, f64::max);
    let ours: Vec<String> = points[1..]
        .iter()
        .map(|(u, _, _)| {
            format!(
                "{:.0} B at {} B payload (closed: {:.0} B; WAL {:.1} MiB)",
                u.open,
                u.payload,
                u.closed,
                mib(u.wal)
            )
        })
        .collect();
    let raws: Vec<String> = points[1..]
        .iter()
        .map(|(u, open, closed)| format!("{open:.0} B at {} B (closed: {closed:.0} B)", u.payload))
        .collect();
    Ok(format!(
        "| bytes on disk per checkpoint ({b_runs} runs x {b_n} per size; file + WAL with the worker open) | {}; fixed overhead {fixed:.0} B ({:.0} B at {} B, closed {:.0} B) | a raw row of the payload, SQLite defaults + WAL, file + WAL with the connection open: {} | (bytes - fixed) / payload: {} | <= 1.5x + fixed | {} |",
        ours.join(", "),
        small.open,
        small.payload,
        small.closed,
        raws.join(", "),
        ratios
            .iter()
            .zip(&points[1..])
            .map(|(r, (u, _, _))| format!("{r:.2}x at {} B", u.payload))
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

// ---------------------------------------------------------------------------
// Checksums

/// The median durable checkpoint latency, once `latency_row` measured it.
static DURABLE_MEDIAN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// What the checksums of a durable checkpoint cost (see
/// `checkpoint_runtime::store::checksums`): sealing one (at every write of
/// the SQLite and PostgreSQL stores) and checking it (at every read that
/// rebuilds one), on a real checkpoint of `durable_loop` (1,000-byte state),
/// next to the durable checkpoint's median latency when it was measured.
async fn checksum_row() -> Result<String, BoxError> {
    use checkpoint_runtime::store::{checksums, verify_checksums, MemoryStore, Store};
    eprintln!("checksums: sealing and checking a 1,000-byte-state checkpoint ...");
    let store = Arc::new(MemoryStore::new());
    let rt = Runtime::builder().store(store.clone()).in_memory();
    rt.start(durable_loop, "sum", (10, 1000))
        .await?
        .result()
        .await?;
    let cp = store
        .latest_checkpoint("sum")
        .await?
        .ok_or("no checkpoint")?;
    const N: u32 = 100_000;
    let timed = |f: &dyn Fn()| {
        let mut best = Duration::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            for _ in 0..N {
                f();
            }
            best = best.min(start.elapsed() / N);
        }
        best
    };
    let seal = checksums(&cp);
    let sealing = timed(&|| {
        black_box(checksums(black_box(&cp)));
    });
    let checking = timed(&|| {
        black_box(verify_checksums(black_box(&cp), black_box(&seal)).is_ok());
    });
    let both = sealing + checking;
    let gbps = cp.data.len() as f64 / sealing.as_secs_f64().max(1e-12) / 1e9;
    let (floor, ratio, ok) = match DURABLE_MEDIAN.get() {
        Some(d) => {
            let r = both.as_secs_f64() / d.as_secs_f64().max(1e-12);
            (
                format!("durable checkpoint median {:.0} us", us(*d)),
                format!("{r:.4}x"),
                met(r <= 0.01),
            )
        }
        None => (
            "durable latency not measured (add `latency`)".to_owned(),
            "-".to_owned(),
            "-",
        ),
    };
    Ok(format!(
        "| checkpoint checksums (CRC-32 per field + metadata), {} B in {} fields | seal {} ns ({gbps:.1} GB/s) + check {} ns per checkpoint | {floor} | {ratio} (seal + check / durable) | <= 0.01x | {ok} |",
        cp.data.len(),
        cp.fields.len(),
        sealing.as_nanos(),
        checking.as_nanos(),
    ))
}
