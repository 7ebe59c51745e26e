//! A worker process for `tests/retry_crash.rs`: runs a workflow whose
//! `ctx.retry` fails twice and answers the third time, with a fixed
//! backoff, on an SQLite file, so that the test can SIGKILL it during a
//! backoff and resume the run in another process.
//!
//! `checkpoint-retry-worker start|resume DB LOG ID BACKOFF_MS`
//!
//! - `start` starts run `ID`, `resume` only works on what the store holds;
//!   both then wait for the run's result and print `RESULT <json>`.
//! - Every attempt appends `<unix nanos> attempt <idempotency key>` to
//!   `LOG` (fsynced before the attempt answers), and prints `ATTEMPT <key>`.
//! - Exit status 0 with a result, 1 on an error (printed on stderr).

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use checkpoint_runtime::prelude::*;
use serde::{Deserialize, Serialize};

/// Where the attempts are logged.
struct AttemptLog(PathBuf);

impl AttemptLog {
    fn append(&self, key: &str) {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.0)
            .expect("the attempt log opens");
        writeln!(f, "{nanos} attempt {key}").expect("the attempt log is written");
        f.sync_all().expect("the attempt log is synced");
        println!("ATTEMPT {key}");
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Busy(u64);

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "busy at checkpoint {}", self.0)
    }
}

/// Attempts after checkpoints 1 and 2 fail (checkpoint 1 is `start`, 2
/// the first backoff), the one after checkpoint 3 answers with its number.
#[workflow]
async fn fetch_with_backoff(ctx: &Ctx, backoff_ms: u64) -> Result<u64, String> {
    checkpoint!("start");
    let got = ctx
        .retry(
            "fetch",
            RetryPolicy::fixed(Duration::from_millis(backoff_ms)).max_attempts(5),
            || {
                let key = ctx.idempotency_key();
                ctx.resource::<AttemptLog>().append(&key);
                let seq: u64 = key
                    .split(':')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let r = if seq < 3 { Err(Busy(seq)) } else { Ok(seq) };
                async move { r }
            },
        )
        .await;
    got.map_err(|e| e.to_string())
}

async fn main_async() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [command, db, log, id, backoff] = args.as_slice() else {
        eprintln!("usage: checkpoint-retry-worker start|resume DB LOG ID BACKOFF_MS");
        std::process::exit(64);
    };
    let backoff: u64 = backoff.parse().unwrap_or_else(|_| {
        eprintln!("checkpoint-retry-worker: bad BACKOFF_MS `{backoff}`");
        std::process::exit(64);
    });
    let rt = Runtime::builder()
        .resource(AttemptLog(PathBuf::from(log)))
        .open(db)
        .await?;
    rt.register(fetch_with_backoff);
    let h = match command.as_str() {
        "start" => rt.start(fetch_with_backoff, id, backoff).await?,
        "resume" => rt.handle(fetch_with_backoff, id),
        other => {
            eprintln!("checkpoint-retry-worker: unknown command `{other}`");
            std::process::exit(64);
        }
    };
    let result = h.result().await?;
    println!(
        "RESULT {}",
        serde_json::to_string(&result).expect("a result is JSON")
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(e) = main_async().await {
        eprintln!("checkpoint-retry-worker: {e}");
        std::process::exit(1);
    }
}
