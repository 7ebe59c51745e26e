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
//! that paused in the middle of user code). Other lines on stdout (the
//! plumbing is shared with `checkpoint-shapes-worker`, in `common/`):
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
//! checkpoint-test-worker load   --db URL --runs N --items K [--start] [--worker-id W] [--lease-ttl-ms N] [--acks FILE]
//! ```
//!
//! `load` is the load mode of `tests/load.rs`: it registers `load_steps` (a
//! loop of `--items` checkpoints, no side effects), with `--start` starts
//! runs `load-0` .. `load-{N-1}` (`--runs`), prints `READY`, and then works
//! (`run_worker`) until killed; `--db` may be any store URL (PostgreSQL
//! too). If `run_worker` returns, it prints `WORKER_ENDED <result>` and
//! exits 1: a worker must only stop when shut down.
//!
//! With `--acks FILE` (`tests/restart.rs`), the load mode runs `acked_steps`
//! instead: the same loop, which appends `begin <run> <i> <pid>` to FILE
//! before step `i` and `ack <run> <i> <pid>` right after its `checkpoint!()`
//! returned (the checkpoint is acknowledged: durable; a resumed execution
//! notes it again first), so that the test can tell whether an
//! acknowledged checkpoint was ever lost: a step begun again at or before
//! one acknowledged earlier.
#![forbid(unsafe_code)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use checkpoint_runtime::prelude::*;
use common::{drive, effect, out, print_result, step, Env, Stepping};
use serde::{Deserialize, Serialize};

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

/// The load mode's workflow: `steps` checkpoints in a loop, each
/// appending a line to a log (past about eight lines, the stores keep the
/// log as what each checkpoint appended). Returns the sum of `i` over the
/// steps, read back from the log, so that a log resumed wrong is a wrong
/// result (`tests/load.rs` checks every run's output).
#[workflow]
async fn load_steps(ctx: &Ctx, steps: u32) -> u64 {
    let mut log: Vec<String> = Vec::new();
    for i in 0..steps {
        log.push(format!("step {i} of {}: {i}", ctx.id()));
        checkpoint!("step");
    }
    log.iter()
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Where `acked_steps` appends its `begin` and `ack` lines (one `write` per
/// line on a file opened for appending, so that lines of two processes do
/// not interleave).
#[derive(Clone)]
struct AckLog(Arc<std::sync::Mutex<std::fs::File>>);

impl AckLog {
    fn open(path: &std::path::Path) -> AckLog {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
        AckLog(Arc::new(std::sync::Mutex::new(file)))
    }

    fn note(ctx: &Ctx, what: &str, i: u32) {
        use std::io::Write;
        let line = format!("{what} {} {i} {}\n", ctx.id(), std::process::id());
        let log = ctx.resource::<AckLog>();
        let mut file = log.0.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(line.as_bytes())
            .unwrap_or_else(|e| panic!("writing the ack log: {e}"));
    }
}

/// The load mode's workflow with `--acks`: `steps` checkpoints in a loop,
/// each step noted before it begins and once its checkpoint is durable.
/// Returns the sum of `i * i + 1` over the steps.
#[workflow]
async fn acked_steps(ctx: &Ctx, steps: u32) -> u64 {
    let mut sum = 0u64;
    for i in 0..steps {
        AckLog::note(ctx, "begin", i);
        sum += u64::from(i) * u64::from(i) + 1;
        checkpoint!("step");
        AckLog::note(ctx, "ack", i);
    }
    sum
}

/// The load mode (see the module docs).
async fn load_mode(a: &Args) -> Result<i32, Error> {
    let acks = a.acks.as_deref().map(AckLog::open);
    let rt = open(a, Role::Worker(None), acks.clone()).await?;
    rt.register(load_steps);
    rt.register(acked_steps);
    if a.start {
        let steps = u32::try_from(a.items).unwrap_or(u32::MAX);
        let ids: Vec<String> = (0..a.runs).map(|i| format!("load-{i}")).collect();
        let acked = acks.is_some();
        for chunk in ids.chunks(50) {
            let starts: Vec<_> = chunk
                .iter()
                .map(|id| {
                    let (rt, id) = (rt.clone(), id.clone());
                    tokio::spawn(async move {
                        if acked {
                            rt.start(acked_steps, &id, steps).await.map(drop)
                        } else {
                            rt.start(load_steps, &id, steps).await.map(drop)
                        }
                    })
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
    acks: Option<PathBuf>,
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
            "--acks" => a.acks = Some(PathBuf::from(value())),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    a
}

/// What a process opens its runtime as.
enum Role {
    /// Executes runs (with the side-effect log, when it has one).
    Worker(Option<Env>),
    /// Signals and inspects, never executes.
    Client,
}

async fn open(a: &Args, role: Role, acks: Option<AckLog>) -> Result<Runtime, Error> {
    let db = a.db.as_deref().unwrap_or_else(|| usage("--db is required"));
    let mut b = Runtime::builder();
    if let Some(w) = &a.worker_id {
        b = b.worker_id(w);
    }
    if let Some(ms) = a.lease_ttl_ms {
        b = b.lease_ttl(Duration::from_millis(ms));
    }
    match role {
        Role::Worker(Some(env)) => b = b.resource(env),
        Role::Worker(None) => {}
        // A client (signal, result): it signals and inspects, never executes.
        Role::Client => b = b.client_only(),
    }
    if let Some(acks) = acks {
        b = b.resource(acks);
    }
    let rt = b.open(db).await?;
    rt.register(story);
    Ok(rt)
}

async fn main_async(a: Args) -> Result<i32, Error> {
    if a.command == "load" {
        return load_mode(&a).await;
    }
    let id = a.id.clone().unwrap_or_else(|| usage("--id is required"));
    match a.command.as_str() {
        "start" | "resume" => {
            let log = a.log.clone().unwrap_or_else(|| usage("--log is required"));
            let rt = open(&a, Role::Worker(Some(Env::new(log, a.step))), None).await?;
            if a.command == "start" {
                let input = StoryInput {
                    items: (1..=a.items).map(|i| format!("item-{i}")).collect(),
                    sleep_ms: a.sleep_ms,
                };
                rt.start(story, &id, input).await?;
                out("STARTED");
            }
            match drive(&rt, &id).await? {
                Some(code) => Ok(code),
                None => {
                    print_result(&rt.handle(story, &id).result().await?);
                    Ok(0)
                }
            }
        }
        "signal" => {
            let name = a.name.as_deref().unwrap_or_else(|| usage("--name needed"));
            let json = a.json.as_deref().unwrap_or_else(|| usage("--json needed"));
            let payload: serde_json::Value =
                serde_json::from_str(json).unwrap_or_else(|e| usage(&format!("bad --json: {e}")));
            let rt = open(&a, Role::Client, None).await?;
            rt.signal(&id, name, &payload).await?;
            out("SIGNALLED");
            Ok(0)
        }
        "result" => {
            let rt = open(&a, Role::Client, None).await?;
            match rt.status(&id).await? {
                Status::Completed => {
                    print_result(&rt.handle(story, &id).result().await?);
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
    common::exit_with(main_async(parse_args()))
}
