//! Test helper for `tests/queues.rs`: a worker process executing `slot`
//! runs of queue `llm`, bounded to `--bound` runs at once across every
//! worker of the store, while this process alone could run 8.
//!
//! Each `slot` run, while its body executes, keeps a file named after it
//! in `--dir`, and appends to `--dir/seen` how many such files it saw
//! (its own included): a body that ran while `n` others did sees at least
//! `n + 1`. The test reads the largest number seen.
//!
//! ```text
//! checkpoint-queue-worker --db URL --dir DIR --bound N --runs COUNT
//! ```
//!
//! Prints `READY` once it works, and `DONE` (exit 0) once `COUNT` runs of
//! `slot` have completed in the store; `TIMEOUT` and exit 1 after 60 s.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;

/// The directory the bodies record themselves in (a resource).
struct Dir(PathBuf);

/// Marks run `n` as running in `dir` and records how many were (its own
/// marker included); returns its marker.
fn enter(dir: &Path, n: u32) -> PathBuf {
    let mine = dir.join(format!("running-{n}"));
    std::fs::write(&mine, b"").expect("the marker is written");
    let running = std::fs::read_dir(dir)
        .expect("the dir reads")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("running-"))
        .count();
    let mut seen = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("seen"))
        .expect("the log opens");
    // One write, so that the lines of two processes never interleave.
    seen.write_all(format!("{running}\n").as_bytes())
        .expect("the log takes a line");
    mine
}

#[workflow]
async fn slot(ctx: &Ctx, n: u32) -> u32 {
    let mine = enter(&ctx.resource::<Dir>().0, n);
    tokio::time::sleep(Duration::from_millis(150)).await;
    std::fs::remove_file(&mine).expect("the marker is removed");
    checkpoint!("done");
    n
}

fn arg(args: &[String], name: &str) -> String {
    args.windows(2)
        .find(|w| w[0] == name)
        .map(|w| w[1].clone())
        .unwrap_or_else(|| {
            eprintln!(
                "usage: checkpoint-queue-worker --db URL --dir DIR --bound N --runs COUNT \
                 (missing {name})"
            );
            std::process::exit(2)
        })
}

fn say(line: &str) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let db = arg(&args, "--db");
    let dir = PathBuf::from(arg(&args, "--dir"));
    let bound: u32 = arg(&args, "--bound").parse().expect("--bound is a number");
    let runs: usize = arg(&args, "--runs").parse().expect("--runs is a number");
    let rt = Runtime::builder()
        .worker_id("queue-worker")
        .concurrency(8)
        .queue("llm", Queue::new().concurrency(bound))
        .resource(Dir(dir))
        .open(&db)
        .await
        .expect("the store opens");
    rt.register(slot);
    let worker = {
        let rt = rt.clone();
        tokio::spawn(async move { rt.run_worker().await })
    };
    say("READY");
    let began = Instant::now();
    loop {
        let done = RunFilter::new()
            .workflow("slot")
            .status(StatusKind::Completed);
        let n = rt.runs(done).await.expect("the runs list").len();
        if n >= runs {
            say("DONE");
            break;
        }
        if began.elapsed() > Duration::from_secs(60) {
            say(&format!("TIMEOUT {n} of {runs}"));
            std::process::exit(1);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    rt.shutdown();
    let _ = worker.await;
}
