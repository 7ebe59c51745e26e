//! Plumbing shared by the test workers (`checkpoint-test-worker`,
//! `checkpoint-shapes-worker`, `checkpoint-evolve-worker`): the side-effect log, the stepping protocol at
//! durable points, and driving a run until it completes or waits.
//!
//! Lines a worker prints on stdout:
//!
//! - `CHECKPOINT <n> <label> <detail>`: a durable point (see [`Env::step`]);
//! - `WAITING <signal>`: the run waits for a signal; the process exits 0;
//! - `SLEEPING`: the run sleeps; this process waits for the timer;
//! - `RESULT <json>`: the run completed with this output; the process exits 0;
//! - `PARKED <field> <site> <detail>`: the registered code cannot resume the
//!   run (`Status::Incompatible`); exit 0;
//! - `FAILED <error>` / `CANCELLED`: exit 2.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use checkpoint_runtime::prelude::*;
use tokio::sync::{mpsc, Mutex};

/// How a workflow waits at its durable points.
#[derive(Default, Clone, Copy, PartialEq)]
pub enum Stepping {
    /// It does not.
    #[default]
    No,
    /// For a line read by a thread on the side (leases are renewed).
    Async,
    /// For a line read inside the workflow's poll (nothing else of the run moves).
    Blocking,
}

/// The process's environment, shared with the workflow as a resource.
pub struct Env {
    log: PathBuf,
    step: Stepping,
    stdin: Option<Mutex<mpsc::UnboundedReceiver<String>>>,
    steps: AtomicU64,
}

pub fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// Prints one protocol line (and flushes it).
pub fn out(line: &str) {
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
    /// The environment of a process that logs side effects to `log` and
    /// steps as `step` says.
    pub fn new(log: PathBuf, step: Stepping) -> Env {
        Env {
            log,
            step,
            stdin: (step == Stepping::Async).then(|| Mutex::new(stdin_lines())),
            steps: AtomicU64::new(0),
        }
    }

    /// Appends one side effect to the log and makes it durable.
    pub fn effect(&self, worker: &str, text: &str) {
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
    pub async fn step(&self, label: &str, detail: &str) {
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
pub fn effect(ctx: &Ctx, text: &str) {
    ctx.resource::<Env>().effect(ctx.worker_id(), text);
}

/// A durable point: announce it and, when stepping, wait for the parent.
pub async fn step(ctx: &Ctx, label: &str, detail: &str) {
    ctx.resource::<Env>().step(label, detail).await;
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

/// Executes the run until it completes or waits for a signal. A run held by
/// another worker's live lease is polled until this worker may take it.
/// Returns `None` once the run has completed (the caller prints its result),
/// otherwise the process's exit code (the status is printed).
pub async fn drive(rt: &Runtime, id: &str) -> Result<Option<i32>, Error> {
    let mut said_sleeping = false;
    loop {
        rt.run_until_idle().await?;
        match rt.status(id).await? {
            Status::Completed => return Ok(None),
            Status::Waiting { signal, .. } => {
                out(&format!("WAITING {signal}"));
                return Ok(Some(0));
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
                return Ok(Some(2));
            }
            Status::Cancelled => {
                out("CANCELLED");
                return Ok(Some(2));
            }
            // Parked by other code, the run may still resume here (this
            // runtime tries parked runs by itself, possibly in its background
            // loop after `run_until_idle` returned); once this process's code
            // refused it, nothing more will happen here.
            Status::Incompatible {
                site,
                field,
                detail,
                ..
            } if parked_here(rt, id).await? => {
                out(&format!("PARKED {field} {site} {detail}"));
                return Ok(Some(0));
            }
            // Runnable but held by another worker's live lease: poll.
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// When this process began (see [`exit_with`]).
static STARTED: OnceLock<SystemTime> = OnceLock::new();

/// Whether this process's runtime parked run `id`.
async fn parked_here(rt: &Runtime, id: &str) -> Result<bool, Error> {
    let since = *STARTED.get_or_init(SystemTime::now);
    Ok(rt.history_entries(id).await?.iter().any(|e| {
        e.at >= since
            && matches!(&e.event, Event::Parked { worker, .. } if worker == rt.worker_id())
    }))
}

/// Prints a completed run's output as `RESULT <json>`.
pub fn print_result<T: serde::Serialize>(output: &T) {
    let json = serde_json::to_string(output).expect("output encodes");
    out(&format!("RESULT {json}"));
}

/// Runs `main` on a two-thread tokio runtime and exits with its code
/// (without waiting for the stdin thread or the store's threads).
pub fn exit_with(main: impl std::future::Future<Output = Result<i32, Error>>) -> ! {
    STARTED.get_or_init(SystemTime::now);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = match rt.block_on(main) {
        Ok(code) => code,
        Err(e) => {
            out(&format!("ERROR {e}"));
            1
        }
    };
    std::process::exit(code);
}
