//! A batch job as fan-out: 100,000 items in 100 child runs of 1,000 items,
//! at most 8 of them running at once, spread over every worker on the
//! store; the parent waits for them without holding a worker.
//!
//! ```text
//! cargo run --example batch_fanout                 # the whole batch
//! cargo run --example batch_fanout -- --stop-after 30
//! cargo run --example batch_fanout                 # goes on where it was
//! ```
//!
//! `--stop-after N` ends the process (exit 3, as a crash would) once N
//! children completed; the next run resumes the batch: finished children
//! are not run again, the others start or resume, and the total is checked
//! against a plain loop. State lives in `--db PATH` (default
//! `$TMPDIR/checkpoint-batch-fanout.db`); a finished batch there is
//! cleared, so the next run starts over.

use std::sync::atomic::{AtomicU64, Ordering};

use checkpoint_runtime::prelude::*;
use clap::Parser;
use serde::{Deserialize, Serialize};

const RUN_ID: &str = "batch";

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Job {
    items: u64,
    per_child: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Chunk {
    first: u64,
    len: u64,
}

/// The per-item work: cheap and deterministic.
fn work(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (z ^ (z >> 27)) % 1_000
}

/// One child: its chunk of items, with a checkpoint every 250.
#[workflow]
async fn process_chunk(ctx: &Ctx, chunk: Chunk) -> u64 {
    let mut sum = 0;
    for i in chunk.first..chunk.first + chunk.len {
        sum += work(i);
        if (i + 1 - chunk.first) % 250 == 0 {
            checkpoint!("items");
        }
    }
    ctx.resource::<Done>().child_completed();
    sum
}

/// The parent: spawns the chunks (8 running at a time), joins them all.
#[workflow]
async fn batch(ctx: &Ctx, job: Job) -> (u64, usize) {
    let mut children = Vec::new();
    let mut first = 0;
    while first < job.items {
        let chunk = Chunk {
            first,
            len: job.per_child.min(job.items - first),
        };
        let key = format!("chunk-{first:06}");
        children.push(ctx.spawn_limited(process_chunk, &key, chunk, 8).await);
        first += chunk.len;
    }
    checkpoint!("spawned");
    let outcomes = ctx.join_all(children).await;
    let failed = outcomes.iter().filter(|o| o.is_err()).count();
    (outcomes.into_iter().map(|o| o.unwrap_or(0)).sum(), failed)
}

/// Counts completed children, for `--stop-after`.
struct Done {
    count: AtomicU64,
    stop_after: Option<u64>,
}

impl Done {
    fn child_completed(&self) {
        let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        if self.stop_after == Some(n) {
            println!("stopping after {n} children (as a crash would)");
            std::process::exit(3);
        }
    }
}

#[derive(Parser)]
struct Args {
    /// The store file.
    #[arg(long)]
    db: Option<String>,
    /// Items in the batch.
    #[arg(long, default_value_t = 100_000)]
    items: u64,
    /// Items per child run.
    #[arg(long, default_value_t = 1_000)]
    per_child: u64,
    /// End the process once this many children completed here.
    #[arg(long)]
    stop_after: Option<u64>,
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    let db = args.db.unwrap_or_else(|| {
        let p = std::env::temp_dir().join("checkpoint-batch-fanout.db");
        p.to_string_lossy().into_owned()
    });
    let done = Done {
        count: AtomicU64::new(0),
        stop_after: args.stop_after,
    };
    let finished = Runtime::builder().client_only().open(&db).await?;
    if matches!(finished.status(RUN_ID).await, Ok(Status::Completed)) {
        // A finished batch: start over in a fresh file.
        drop(finished);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{db}{suffix}"));
        }
    }
    let rt = Runtime::builder().resource(done).open(&db).await?;
    rt.register(process_chunk);
    let resumed = rt.runs(RunFilter::new().parent(RUN_ID)).await?;
    let finished = resumed.iter().filter(|r| r.status.is_finished()).count();
    if !resumed.is_empty() {
        println!(
            "resuming: {finished} of {} children finished",
            resumed.len()
        );
    }
    let job = Job {
        items: args.items,
        per_child: args.per_child,
    };
    let h = rt.start(batch, RUN_ID, job).await?;
    let (sum, failed) = h.result().await?;
    let expected: u64 = (0..args.items).map(work).sum();
    println!(
        "sum of {} items: {sum} (a plain loop: {expected}), {failed} failed",
        args.items
    );
    assert_eq!(
        (sum, failed),
        (expected, 0),
        "the batch must equal the plain loop"
    );
    Ok(())
}
