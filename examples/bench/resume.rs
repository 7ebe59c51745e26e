//! The resume rows of the bench table (`BENCH_ONLY=resume`): the latency
//! of resuming a run after a short and a long history, first as a crash
//! left it (a child process, this binary run with `--crash-history`,
//! aborts right after its last checkpoint, WAL unfolded), then once folded
//! as after a clean close. Building the crashed history and the timed
//! resumes belong together, so they live here.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use rusqlite::Connection;

use super::disk::{
    copy_db, db_size, file_len, remove_db, settle, wal_live_frames, wal_path, WalWatch,
};
use super::stats::{median_of, met, mib, ms, scaled};
use super::workloads::{long_history, open_rt, CrashAt, Probe};
use super::BoxError;

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
pub(crate) async fn crash_history(path: &str, n: u32) -> Result<(), BoxError> {
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

pub(crate) async fn resume_rows(d: &Path, scale: f64) -> Result<Vec<String>, BoxError> {
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
