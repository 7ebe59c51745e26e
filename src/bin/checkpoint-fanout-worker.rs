//! Test helper for `tests/fanout_crash.rs`: a worker process executing a
//! fan-out (a parent with `--children` child runs, joined) on any store,
//! until it is killed or the parent completes.
//!
//! ```text
//! checkpoint-fanout-worker --db URL --log FILE --children N [--start] [--worker-id W] [--lease-ttl-ms N]
//! ```
//!
//! With `--start` it starts the parent run `fan` (idempotent). It prints
//! `READY`, works (`run_worker`) and prints `RESULT <json>` and exits 0 once
//! `fan` completed. Each child appends `child <i> <pid>` to the log (fsynced)
//! before its checkpoint, so the test sees which process ran it, and how
//! often its first segment ran.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use checkpoint_runtime::prelude::*;

/// Where children log what they ran.
struct Log(PathBuf);

impl Log {
    fn append(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.0)
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.0.display()));
        f.write_all(format!("{line}\n").as_bytes())
            .and_then(|_| f.sync_all())
            .expect("writing the log");
    }
}

#[workflow]
async fn fan_child(ctx: &Ctx, i: u64) -> u64 {
    ctx.resource::<Log>()
        .append(&format!("child {i} {}", std::process::id()));
    // Some work, so that kills land inside children too.
    tokio::time::sleep(Duration::from_millis(20 + i % 7)).await;
    checkpoint!("worked");
    i * i
}

#[workflow]
async fn fan(ctx: &Ctx, n: u64) -> (u64, u64) {
    let mut children = Vec::new();
    for i in 0..n {
        children.push(ctx.spawn_limited(fan_child, &format!("c{i}"), i, 16).await);
        if i % 50 == 49 {
            checkpoint!("spawning");
        }
    }
    let outcomes = ctx.join_all(children).await;
    let mut sum = 0;
    let mut errors = 0;
    for o in outcomes {
        match o {
            Ok(v) => sum += v,
            Err(_) => errors += 1,
        }
    }
    (sum, errors)
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let db = arg(&args, "--db").expect("--db URL");
    let log = arg(&args, "--log").expect("--log FILE");
    let n: u64 = arg(&args, "--children")
        .expect("--children N")
        .parse()
        .expect("a number");
    let mut builder = Runtime::builder().resource(Log(PathBuf::from(log)));
    if let Some(w) = arg(&args, "--worker-id") {
        builder = builder.worker_id(&w);
    }
    if let Some(ms) = arg(&args, "--lease-ttl-ms") {
        builder = builder.lease_ttl(Duration::from_millis(ms.parse().expect("ms")));
    }
    let rt = builder.open(&db).await.expect("open the store");
    rt.register(fan_child);
    rt.register(fan);
    if args.iter().any(|a| a == "--start") {
        rt.start(fan, "fan", n).await.expect("start");
    }
    println!("READY");
    let worker = rt.clone();
    tokio::spawn(async move {
        let ended = worker.run_worker().await;
        println!("WORKER_ENDED {ended:?}");
        std::process::exit(1);
    });
    let out = rt.handle(fan, "fan").result().await.expect("the result");
    println!("RESULT {}", serde_json::to_string(&out).expect("json"));
}
