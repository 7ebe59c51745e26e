//! Test helper for `tests/schedules.rs`: a worker process that fires one
//! schedule, `tick` (every second, `CatchUp::All`, `Overlap::Allow`), on
//! the store at `--db`, executing its runs, for `--seconds` seconds of real
//! time.
//!
//! ```text
//! checkpoint-schedule-worker --db URL --seconds N
//! ```
//!
//! Prints `READY` once the schedule is registered, then `DONE` and exits 0
//! when the time is up.
#![forbid(unsafe_code)]

use std::time::{Duration, UNIX_EPOCH};

use checkpoint_runtime::prelude::*;

/// A tick's run: its time in seconds, after a checkpoint.
#[workflow]
async fn stamp(ctx: &Ctx, at: u64) -> u64 {
    checkpoint!("stamped");
    at
}

fn arg(args: &[String], name: &str) -> String {
    let i = args
        .iter()
        .position(|a| a == name)
        .unwrap_or_else(|| panic!("missing {name}"));
    args[i + 1].clone()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let db = arg(&args, "--db");
    let seconds: u64 = arg(&args, "--seconds").parse().expect("--seconds N");
    let rt = Runtime::open(&db).await?;
    let every_second = Schedule::cron("tick", "* * * * * *")?
        .catch_up(CatchUp::All { max: 1_000 })
        .overlap(Overlap::Allow);
    rt.schedule(every_second, stamp, |t: Tick| {
        t.at().duration_since(UNIX_EPOCH).unwrap().as_secs()
    })
    .await?;
    println!("READY");
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    rt.close().await;
    println!("DONE");
    Ok(())
}
