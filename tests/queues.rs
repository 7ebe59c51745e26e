//! Queues across processes: two worker processes (each able to run 8 runs
//! at once) execute 12 runs of queue `llm`, bounded to 2, on one store;
//! no more than 2 bodies ever run at once, as the bodies themselves record
//! (see `src/bin/checkpoint-queue-worker.rs`). On SQLite and PostgreSQL
//! (with `CHECKPOINT_TEST_POSTGRES_URL`; ignored without it). And within
//! one runtime: the bound, the priorities, the status of a waiting run.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use checkpoint_runtime::prelude::*;

#[macro_use]
mod common;
use common::TempDir;

const WORKER: &str = env!("CARGO_BIN_EXE_checkpoint-queue-worker");

#[workflow]
async fn slot(n: u32) -> u32 {
    n
}

/// A worker process, read line by line.
struct WorkerProcess {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl WorkerProcess {
    fn spawn(url: &str, dir: &std::path::Path, bound: u32, runs: usize) -> WorkerProcess {
        let mut child = Command::new(WORKER)
            .args(["--db", url, "--bound", &bound.to_string()])
            .args(["--runs", &runs.to_string()])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the worker starts");
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        WorkerProcess { child, lines }
    }

    fn expect(&self, want: &str) {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(90))
            .expect("a line from the worker");
        assert_eq!(line, want);
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

mod processes {
    use super::*;
    on_stores!("queues", [sqlite, postgres]:
        two_processes_never_exceed_the_queue_bound,
    );
}

async fn two_processes_never_exceed_the_queue_bound(url: &str) {
    const RUNS: usize = 12;
    let client = Runtime::builder().client_only().open(url).await.unwrap();
    for i in 0..RUNS as u32 {
        let opts = StartOptions::new().queue("llm");
        client
            .start_with(slot, &format!("slot-{i:02}"), i, opts)
            .await
            .unwrap();
    }
    let dir = TempDir::new("queues");
    let a = WorkerProcess::spawn(url, &dir.0, 2, RUNS);
    let b = WorkerProcess::spawn(url, &dir.0, 2, RUNS);
    a.expect("READY");
    b.expect("READY");
    a.expect("DONE");
    b.expect("DONE");
    let seen = std::fs::read_to_string(dir.0.join("seen")).unwrap();
    let counts: Vec<usize> = seen.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(counts.len(), RUNS, "each body ran once: {counts:?}");
    let max = counts.iter().copied().max().unwrap();
    assert!(max <= 2, "at most 2 at once across processes: {counts:?}");
    assert_eq!(max, 2, "the bound is used, not 1 at a time: {counts:?}");
}

/// Records the order bodies start in, and how many run at once.
#[derive(Clone, Default)]
struct Seen {
    order: Arc<Mutex<Vec<u32>>>,
    now: Arc<Mutex<(usize, usize)>>,
}

#[workflow]
async fn paced(ctx: &Ctx, n: u32) -> u32 {
    let seen = ctx.resource::<Seen>();
    seen.order.lock().unwrap().push(n);
    {
        let mut now = seen.now.lock().unwrap();
        now.0 += 1;
        now.1 = now.1.max(now.0);
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    seen.now.lock().unwrap().0 -= 1;
    checkpoint!("done");
    n
}

on_stores!("queues", [memory, sqlite, postgres]:
    a_runtime_admits_by_priority_within_the_bound,
    a_rate_spaces_admissions_and_the_worker_wakes_for_them,
);

async fn a_runtime_admits_by_priority_within_the_bound(url: &str) {
    let seen = Seen::default();
    let rt = Runtime::builder().client_only().open(url).await.unwrap();
    let prios = [0, 3, 1, 3, 0, 2];
    for (i, p) in prios.iter().enumerate() {
        let opts = StartOptions::new().queue("one").priority(*p);
        rt.start_with(paced, &format!("p-{i}"), i as u32, opts)
            .await
            .unwrap();
    }
    let info = &rt.runs(RunFilter::new().id_prefix("p-0")).await.unwrap()[0];
    assert_eq!(
        info.status,
        Status::InQueue {
            queue: "one".into()
        }
    );
    let worker = Runtime::builder()
        .concurrency(8)
        .queue("one", Queue::new().concurrency(1))
        .resource(seen.clone())
        .store(rt.store())
        .in_memory();
    worker.register(paced);
    tokio::time::timeout(Duration::from_secs(60), worker.run_until_idle())
        .await
        .expect("idle in time")
        .unwrap();
    assert_eq!(seen.now.lock().unwrap().1, 1, "one at a time");
    // Higher priority first, then oldest.
    assert_eq!(*seen.order.lock().unwrap(), [1, 3, 5, 2, 0, 4]);
}

/// Records when each body started.
#[derive(Clone, Default)]
struct Starts(Arc<Mutex<Vec<std::time::Instant>>>);

#[workflow]
async fn stamped(ctx: &Ctx, n: u32) -> u32 {
    ctx.resource::<Starts>()
        .0
        .lock()
        .unwrap()
        .push(std::time::Instant::now());
    checkpoint!("done");
    n
}

async fn a_rate_spaces_admissions_and_the_worker_wakes_for_them(url: &str) {
    let per = Duration::from_millis(700);
    let starts = Starts::default();
    let rt = Runtime::builder()
        .queue("api", Queue::new().rate(2, per))
        .resource(starts.clone())
        .open(url)
        .await
        .unwrap();
    let began = std::time::Instant::now();
    let mut handles = Vec::new();
    for i in 0..5 {
        let opts = StartOptions::new().queue("api");
        handles.push(
            rt.start_with(stamped, &format!("s-{i}"), i, opts)
                .await
                .unwrap(),
        );
    }
    for h in handles {
        tokio::time::timeout(Duration::from_secs(30), h.result())
            .await
            .expect("every run ends: the worker wakes when a window frees")
            .unwrap();
    }
    let mut at: Vec<Duration> = starts
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|t| t.duration_since(began))
        .collect();
    at.sort();
    assert_eq!(at.len(), 5, "{at:?}");
    // Two per window: the 3rd and 5th body start a window after the 1st
    // and 3rd (less what separates a claim from its body's start).
    let slack = Duration::from_millis(60);
    assert!(at[2] + slack >= at[0] + per, "{at:?}");
    assert!(at[4] + slack >= at[2] + per, "{at:?}");
    assert!(at[1] < at[0] + per, "two in the first window: {at:?}");
}
