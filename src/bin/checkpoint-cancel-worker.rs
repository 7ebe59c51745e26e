//! Test helper for `tests/cancel.rs`: executes a run in a child process, so
//! that a cancel requested by another process (the test) must reach it
//! through the store.
//!
//! The default workflow (`trip`) books a hotel and a flight (a checkpoint
//! after each), then waits up to an hour for `paid`. When a cancel is
//! requested (`ctx.cancel_requested()`), the wait returns at once and the
//! workflow compensates: it cancels the flight, then the hotel.
//!
//! With `--busy heed` or `--busy ignore` it executes `crunch` instead: laps
//! of CPU work, a checkpoint after each, never suspending, looking at
//! `ctx.cancel_requested()` after every lap. `heed` returns as soon as it
//! sees a request; `ignore` notes it and goes on, so only the request's
//! grace period stops it. Its lease is short (a renewal every 800 ms), so
//! that the request, which reaches an executing run with a renewal, is
//! seen soon.
//!
//! Every side effect is appended to the log file, one line each.
//!
//! ```text
//! checkpoint-cancel-worker --db URL --id ID --log FILE [--busy heed|ignore]
//! ```
//!
//! Prints `WAITING` once the `trip` run waits for `paid`, or `RUNNING`
//! once the `crunch` run has checkpointed a lap (the test then requests the
//! cancel), works until the run has finished, prints `ENDED <status>` and
//! exits 0; `TIMEOUT` and exit 1 if it has not finished within 60 s.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;

/// Where the side effects go (a resource of the runtime).
struct Log(PathBuf);

impl Log {
    fn note(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.0)
            .expect("the log file opens");
        writeln!(f, "{line}").expect("the log file takes a line");
        f.sync_all().expect("the log file syncs");
    }
}

#[workflow]
async fn trip(ctx: &Ctx, who: String) -> String {
    #[transient]
    let log = ctx.resource::<Log>();
    log.note(&format!("booked hotel for {who}"));
    checkpoint!("hotel");
    log.note(&format!("booked flight for {who}"));
    checkpoint!("flight");
    let paid: Option<bool> = ctx
        .wait_for_timeout("paid", Duration::from_secs(3600))
        .await;
    if let Some(reason) = ctx.cancel_requested() {
        log.note(&format!("cancelled flight ({reason})"));
        log.note(&format!("cancelled hotel ({reason})"));
        return format!("compensated: {reason}");
    }
    log.note(&format!("confirmed (paid: {paid:?})"));
    "confirmed".to_owned()
}

/// Laps of CPU work, a checkpoint after each, never suspending; after each
/// lap it looks for a cancel request: with `heed` it returns, otherwise it
/// notes the request (once) and goes on.
#[workflow]
async fn crunch(ctx: &Ctx, heed: bool) -> u64 {
    #[transient]
    let log = ctx.resource::<Log>();
    let mut laps = 0u64;
    let mut acc = 0u64;
    let mut seen = false;
    while laps < 10_000_000 {
        for i in 0..20_000u64 {
            acc = std::hint::black_box(acc.wrapping_mul(31).wrapping_add(i));
        }
        laps += 1;
        checkpoint!("lap");
        if let Some(reason) = ctx.cancel_requested() {
            if heed {
                log.note(&format!("saw the request ({reason}), stopping"));
                return laps;
            }
            if !seen {
                log.note(&format!("saw the request ({reason}), going on"));
                seen = true;
            }
        }
    }
    log.note("finished every lap");
    acc
}

fn arg_opt(args: &[String], name: &str) -> Option<String> {
    args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone())
}

fn arg(args: &[String], name: &str) -> String {
    args.windows(2)
        .find(|w| w[0] == name)
        .map(|w| w[1].clone())
        .unwrap_or_else(|| {
            eprintln!(
                "usage: checkpoint-cancel-worker --db URL --id ID --log FILE (missing {name})"
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
    let (db, id, log) = (arg(&args, "--db"), arg(&args, "--id"), arg(&args, "--log"));
    let busy = match arg_opt(&args, "--busy").as_deref() {
        None => None,
        Some("heed") => Some(true),
        Some("ignore") => Some(false),
        Some(other) => {
            eprintln!("checkpoint-cancel-worker: --busy takes heed or ignore, not {other}");
            std::process::exit(2)
        }
    };
    let rt = Runtime::builder()
        .worker_id("cancel-worker")
        .lease_ttl(Duration::from_millis(2400))
        .keep_checkpoints(20)
        .resource(Log(PathBuf::from(log)))
        .open(&db)
        .await
        .expect("the store opens");
    rt.register(trip);
    rt.register(crunch);
    match busy {
        None => rt.start(trip, &id, "ada".to_owned()).await.map(drop),
        Some(heed) => rt.start(crunch, &id, heed).await.map(drop),
    }
    .expect("the run starts");
    let worker = {
        let rt = rt.clone();
        tokio::spawn(async move { rt.run_worker().await })
    };
    let began = Instant::now();
    let mut said_waiting = false;
    loop {
        let status = rt.status(&id).await.expect("the status reads");
        if !said_waiting && busy.is_none() && matches!(status, Status::Waiting { .. }) {
            say("WAITING");
            said_waiting = true;
        }
        if !said_waiting && busy.is_some() && status == Status::Running {
            let laps = rt.checkpoints(&id).await.expect("the checkpoints read");
            if !laps.is_empty() {
                say("RUNNING");
                said_waiting = true;
            }
        }
        if status.is_finished() {
            say(&format!("ENDED {status}"));
            break;
        }
        if began.elapsed() > Duration::from_secs(60) {
            say(&format!("TIMEOUT {status}"));
            std::process::exit(1);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    rt.shutdown();
    let _ = worker.await;
}
