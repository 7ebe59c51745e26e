//! Test helper for `tests/crash.rs`: runs one workflow on an SQLite file in a
//! child process that the test can step, SIGKILL, SIGSTOP and SIGCONT.
//!
//! The workflow (`story`) processes a list of items with a checkpoint per
//! item, waits for an `approval` signal, sleeps durably, takes a last
//! checkpoint and returns. Every side effect is appended (and fsynced) to a
//! log file as `<unix nanos> <worker id> <text>`.
//!
//! Deterministic stepping: at every point where the run's state is durable
//! (right after each `checkpoint!()` returns, and right after a resumed
//! `wait_for` / `sleep` returns) the workflow prints
//! `CHECKPOINT <n> <label> <detail>` and, with `--step`, blocks until the
//! parent writes a line `go` on stdin (or kills the process). The wait runs
//! on the side (a reader thread), so the runtime keeps renewing the run's
//! lease meanwhile. With `--step-blocking` instead, the workflow reads stdin
//! synchronously inside its own poll: the execution is frozen mid-segment and
//! renews nothing until the line arrives, then runs on at once (a process
//! that paused in the middle of user code). Other lines on stdout:
//!
//! - `WAITING <signal>`: the run waits for a signal; the process exits 0;
//! - `SLEEPING`: the run sleeps; this process waits for the timer;
//! - `RESULT <json>`: the run completed with this output; the process exits 0;
//! - `FAILED <error>` / `CANCELLED`: exit 2;
//! - `SIGNALLED`: `signal` stored the signal.
//!
//! ```text
//! checkpoint-test-worker start  --db F --id ID --log L [--items N] [--step|--step-blocking] [--worker-id W] [--lease-ttl-ms N] [--sleep-ms N]
//! checkpoint-test-worker resume --db F --id ID --log L [--step|--step-blocking] [--worker-id W] [--lease-ttl-ms N]
//! checkpoint-test-worker signal --db F --id ID --name NAME --json JSON
//! checkpoint-test-worker result --db F --id ID
//! checkpoint-test-worker load   --db URL --runs N --items K [--start] [--worker-id W] [--lease-ttl-ms N]
//! ```
//!
//! `load` is the load mode of `tests/load.rs`: it registers `load_steps` (a
//! loop of `--items` checkpoints, no side effects), with `--start` starts
//! runs `load-0` .. `load-{N-1}` (`--runs`), prints `READY`, and then works
//! (`run_worker`) until killed; `--db` may be any store URL (PostgreSQL
//! too). If `run_worker` returns, it prints `WORKER_ENDED <result>` and
//! exits 1: a worker must only stop when shut down.
#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use checkpoint_runtime::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, Mutex};

/// The workflow's input.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct StoryInput {
    items: Vec<String>,
    sleep_ms: u64,
}

/// The approval signal's payload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Approval {
    approved: bool,
    by: String,
}

/// The workflow's output.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct StoryOutput {
    /// `"<item> by <worker>"`, one per item, in order.
    processed: Vec<String>,
    approved_by: String,
    /// Which worker executed the part after the sleep.
    finished_by: String,
}

/// The process's environment, shared with the workflow as a resource.
struct Env {
    log: PathBuf,
    step: Stepping,
    stdin: Option<Mutex<mpsc::UnboundedReceiver<String>>>,
    steps: AtomicU64,
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    // The parent reads these lines; if it is gone, there is nobody to talk to.
    if writeln!(stdout, "{line}")
        .and_then(|_| stdout.flush())
        .is_err()
    {
        std::process::exit(3);
    }
}

impl Env {
    /// Appends one side effect to the log and makes it durable.
    fn effect(&self, worker: &str, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.log.display()));
        let line = format!("{} {worker} {text}\n", now_nanos());
        f.write_all(line.as_bytes())
            .expect("writing the side-effect log");
        f.sync_all().expect("syncing the side-effect log");
    }

    /// Announces a durable point and, when stepping, waits for `go`.
    async fn step(&self, label: &str, detail: &str) {
        let n = self.steps.fetch_add(1, Ordering::AcqRel) + 1;
        out(&format!("CHECKPOINT {n} {label} {detail}"));
        let line = match (&self.step, &self.stdin) {
            (Stepping::No, _) => return,
            (Stepping::Async, Some(stdin)) => stdin.lock().await.recv().await,
            (Stepping::Async, None) => None,
            (Stepping::Blocking, _) => {
                // Deliberately blocks the executor thread that polls this run.
                let mut line = String::new();
                match std::io::stdin().read_line(&mut line) {
                    Ok(n) if n > 0 => Some(line),
                    _ => None,
                }
            }
        };
        match line.as_deref().map(str::trim) {
            Some("go") => {}
            // The parent closed stdin (or went away): stop here, as if killed.
            _ => std::process::exit(4),
        }
    }
}

/// Records a side effect of the workflow (the resource is fetched anew each
/// time: a reference may not live across a checkpoint).
fn effect(ctx: &Ctx, text: &str) {
    ctx.resource::<Env>().effect(ctx.worker_id(), text);
}

/// A durable point: announce it and, when stepping, wait for the parent.
async fn step(ctx: &Ctx, label: &str, detail: &str) {
    ctx.resource::<Env>().step(label, detail).await;
}

#[workflow]
async fn story(ctx: &Ctx, input: StoryInput) -> StoryOutput {
    effect(ctx, "begin");
    let mut processed = Vec::new();
    for item in &input.items {
        effect(ctx, &format!("process {item}"));
        processed.push(format!("{item} by {}", ctx.worker_id()));
        checkpoint!("item");
        step(ctx, "item", item).await;
    }
    let approval: Approval = ctx.wait_for("approval").await;
    // The wait site's checkpoint and the consumed signal are both stored.
    step(ctx, "approved", &approval.by).await;
    effect(ctx, &format!("after approval by {}", approval.by));
    ctx.sleep(Duration::from_millis(input.sleep_ms)).await;
    step(ctx, "slept", "-").await;
    effect(ctx, "after sleep");
    let finished_by = ctx.worker_id().to_owned();
    checkpoint!("final");
    step(ctx, "final", "-").await;
    effect(ctx, "end");
    StoryOutput {
        processed,
        approved_by: approval.by,
        finished_by,
    }
}

/// The load mode's workflow: `steps` checkpoints in a loop.
#[workflow]
async fn load_steps(steps: u32) -> u64 {
    let mut sum = 0u64;
    for i in 0..steps {
        sum += u64::from(i);
        checkpoint!("step");
    }
    sum
}

/// The load mode (see the module docs).
async fn load_mode(a: &Args) -> Result<i32, Error> {
    let rt = open(a, None).await?;
    rt.register(load_steps);
    if a.start {
        let steps = u32::try_from(a.items).unwrap_or(u32::MAX);
        let ids: Vec<String> = (0..a.runs).map(|i| format!("load-{i}")).collect();
        for chunk in ids.chunks(50) {
            let starts: Vec<_> = chunk
                .iter()
                .map(|id| {
                    let (rt, id) = (rt.clone(), id.clone());
                    tokio::spawn(async move { rt.start(load_steps, &id, steps).await.map(drop) })
                })
                .collect();
            for start in starts {
                start
                    .await
                    .unwrap_or_else(|e| panic!("a start task failed: {e}"))?;
            }
        }
    }
    out("READY");
    let ended = rt.run_worker().await;
    out(&format!("WORKER_ENDED {ended:?}"));
    Ok(1)
}

/// How a workflow waits at its durable points.
#[derive(Default, Clone, Copy, PartialEq)]
enum Stepping {
    /// It does not.
    #[default]
    No,
    /// For a line read by a thread on the side (leases are renewed).
    Async,
    /// For a line read inside the workflow's poll (nothing else of the run moves).
    Blocking,
}

/// Parsed command line.
#[derive(Default)]
struct Args {
    command: String,
    db: Option<String>,
    id: Option<String>,
    log: Option<PathBuf>,
    step: Stepping,
    worker_id: Option<String>,
    lease_ttl_ms: Option<u64>,
    items: usize,
    sleep_ms: u64,
    name: Option<String>,
    json: Option<String>,
    runs: usize,
    start: bool,
}

fn usage(msg: &str) -> ! {
    eprintln!("checkpoint-test-worker: {msg}");
    eprintln!(
        "usage: checkpoint-test-worker start|resume|signal|result --db FILE --id ID \
         [--log FILE] [--step|--step-blocking] [--worker-id W] [--lease-ttl-ms N] [--items N] [--sleep-ms N] \
         [--name NAME --json JSON]"
    );
    std::process::exit(64);
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        command: it.next().unwrap_or_else(|| usage("missing command")),
        items: 3,
        sleep_ms: 300,
        ..Args::default()
    };
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--db" => a.db = Some(value()),
            "--id" => a.id = Some(value()),
            "--log" => a.log = Some(PathBuf::from(value())),
            "--step" => a.step = Stepping::Async,
            "--step-blocking" => a.step = Stepping::Blocking,
            "--worker-id" => a.worker_id = Some(value()),
            "--lease-ttl-ms" => {
                a.lease_ttl_ms = Some(value().parse().unwrap_or_else(|_| usage("bad ttl")))
            }
            "--items" => a.items = value().parse().unwrap_or_else(|_| usage("bad --items")),
            "--sleep-ms" => a.sleep_ms = value().parse().unwrap_or_else(|_| usage("bad sleep")),
            "--name" => a.name = Some(value()),
            "--json" => a.json = Some(value()),
            "--runs" => a.runs = value().parse().unwrap_or_else(|_| usage("bad --runs")),
            "--start" => a.start = true,
            other => usage(&format!("unknown flag {other}")),
        }
    }
    a
}

/// Reads stdin lines on a plain thread (never blocking the async runtime, and
/// never keeping the process alive at exit).
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
        // Dropping `tx` closes the channel: a stepping workflow then exits.
    });
    rx
}

async fn open(a: &Args, env: Option<Env>) -> Result<Runtime, Error> {
    let db = a.db.as_deref().unwrap_or_else(|| usage("--db is required"));
    let mut b = Runtime::builder();
    if let Some(w) = &a.worker_id {
        b = b.worker_id(w);
    }
    if let Some(ms) = a.lease_ttl_ms {
        b = b.lease_ttl(Duration::from_millis(ms));
    }
    if let Some(env) = env {
        b = b.resource(env);
    }
    let rt = b.open(db).await?;
    rt.register(story);
    Ok(rt)
}

/// Executes the run until it completes or waits for a signal. A run held by
/// another worker's live lease is polled until this worker may take it.
async fn drive(rt: &Runtime, id: &str) -> Result<i32, Error> {
    let mut said_sleeping = false;
    loop {
        rt.run_until_idle().await?;
        match rt.status(id).await? {
            Status::Completed => {
                let output = rt.handle(story, id).result().await?;
                let json = serde_json::to_string(&output).expect("output encodes");
                out(&format!("RESULT {json}"));
                return Ok(0);
            }
            Status::Waiting { signal } => {
                out(&format!("WAITING {signal}"));
                return Ok(0);
            }
            Status::Sleeping { until } => {
                if !said_sleeping {
                    out("SLEEPING");
                    said_sleeping = true;
                }
                let left = until
                    .duration_since(SystemTime::now())
                    .unwrap_or(Duration::ZERO);
                tokio::time::sleep(left.clamp(Duration::from_millis(1), Duration::from_secs(1)))
                    .await;
            }
            Status::Failed { error } => {
                out(&format!("FAILED {error}"));
                return Ok(2);
            }
            Status::Cancelled => {
                out("CANCELLED");
                return Ok(2);
            }
            // Runnable but held by another worker's live lease: poll.
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn main_async(a: Args) -> Result<i32, Error> {
    if a.command == "load" {
        return load_mode(&a).await;
    }
    let id = a.id.clone().unwrap_or_else(|| usage("--id is required"));
    match a.command.as_str() {
        "start" | "resume" => {
            let log = a.log.clone().unwrap_or_else(|| usage("--log is required"));
            let env = Env {
                log,
                step: a.step,
                stdin: (a.step == Stepping::Async).then(|| Mutex::new(stdin_lines())),
                steps: AtomicU64::new(0),
            };
            let rt = open(&a, Some(env)).await?;
            if a.command == "start" {
                let input = StoryInput {
                    items: (1..=a.items).map(|i| format!("item-{i}")).collect(),
                    sleep_ms: a.sleep_ms,
                };
                rt.start(story, &id, input).await?;
                out("STARTED");
            }
            drive(&rt, &id).await
        }
        "signal" => {
            let name = a.name.as_deref().unwrap_or_else(|| usage("--name needed"));
            let json = a.json.as_deref().unwrap_or_else(|| usage("--json needed"));
            let payload: serde_json::Value =
                serde_json::from_str(json).unwrap_or_else(|e| usage(&format!("bad --json: {e}")));
            let rt = open(&a, None).await?;
            rt.signal(&id, name, &payload).await?;
            out("SIGNALLED");
            Ok(0)
        }
        "result" => {
            let rt = open(&a, None).await?;
            match rt.status(&id).await? {
                Status::Completed => {
                    let output = rt.handle(story, &id).result().await?;
                    let json = serde_json::to_string(&output).expect("output encodes");
                    out(&format!("RESULT {json}"));
                    Ok(0)
                }
                other => {
                    out(&format!("STATUS {other}"));
                    Ok(1)
                }
            }
        }
        other => usage(&format!("unknown command {other}")),
    }
}

fn main() {
    let args = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = match rt.block_on(main_async(args)) {
        Ok(code) => code,
        Err(e) => {
            out(&format!("ERROR {e}"));
            1
        }
    };
    // Exit without waiting for the stdin thread or the store's threads.
    std::process::exit(code);
}
