//! A batch job over 100,000 items with a checkpoint every 1,000: kill it at
//! any moment and run it again, and it resumes where it was.
//!
//! ```text
//! cargo run --example batch
//! ```
//!
//! shows a progress bar (on a terminal; otherwise a line every 10 %) and
//! takes a few seconds. Stop it half way (Ctrl-C, or `kill -9`), then run the
//! same command again: it prints `resuming from item X` and goes on from the
//! latest checkpoint. The same without a keyboard:
//!
//! ```text
//! # exits (status 3) right after this process saved its 37th checkpoint
//! cargo run --example batch -- --crash-after 37
//! # resumes from item 37,000; the result is checked against a plain loop
//! cargo run --example batch
//! ```
//!
//! State lives in `--db PATH` (default `$TMPDIR/checkpoint-batch.db`). An
//! unfinished run there is resumed; a finished one is cleared first, so a
//! plain run after a finished one starts over. `--items`, `--every` and
//! `--delay-ms` set the size, the checkpoint interval and the time each
//! chunk's (simulated) write takes; `--items` and `--every` are the run's
//! input, so they count only when a run starts.
//!
//! The state is a few counters (a running sum, a checksum, a maximum), so
//! each checkpoint is a few dozen bytes, whatever the number of items.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use checkpoint_runtime::prelude::*;
use clap::Parser;
use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use serde::{Deserialize, Serialize};

const RUN_ID: &str = "batch-1";

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Job {
    items: u64,
    every: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Summary {
    items: u64,
    sum: u64,
    checksum: u64,
    max: u64,
    resumes: u32,
}

/// The per-item work: cheap and deterministic (a real job would parse a
/// record, call a model, update a row...).
fn work(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % 1_000
}

/// An order-dependent fold: an item skipped or counted twice changes it.
fn mix(checksum: u64, i: u64, v: u64) -> u64 {
    (checksum ^ i.wrapping_mul(31).wrapping_add(v)).wrapping_mul(0x0100_0000_01b3)
}

// ---------------------------------------------------------------------------
// The workflow.

#[workflow]
async fn batch(ctx: &Ctx, job: Job) -> Summary {
    let mut sum: u64 = 0;
    let mut checksum: u64 = 0xcbf2_9ce4_8422_2325;
    let mut max: u64 = 0;
    let mut resumes: u32 = 0;
    for i in 0..job.items {
        let v = work(i);
        sum += v;
        checksum = mix(checksum, i, v);
        max = max.max(v);

        let done = i + 1;
        if done % job.every == 0 || done == job.items {
            // The chunk's results go somewhere (a file, a table, an API)...
            ctx.resource::<Sink>().write_chunk(done).await;
            // ...then the position and the counters are made durable. A crash
            // from here on loses at most the chunk in progress.
            checkpoint!("progress");
            if ctx.attempt() > 1 {
                // A resumed run starts right here, with its locals restored.
                resumes += 1;
            }
            ctx.resource::<Progress>()
                .checkpointed(ctx, done, job.items, sum);
        }
    }
    Summary {
        items: job.items,
        sum,
        checksum,
        max,
        resumes,
    }
}

/// The same computation as a plain loop, to check the resumed result.
fn expected(items: u64) -> (u64, u64, u64) {
    let (mut sum, mut checksum, mut max) = (0u64, 0xcbf2_9ce4_8422_2325, 0u64);
    for i in 0..items {
        let v = work(i);
        sum += v;
        checksum = mix(checksum, i, v);
        max = max.max(v);
    }
    (sum, checksum, max)
}

// ---------------------------------------------------------------------------
// Resources: shared with the workflow, never saved.

/// Where each chunk's output goes; its write takes `delay`.
struct Sink {
    delay: Duration,
}

impl Sink {
    async fn write_chunk(&self, _upto: u64) {
        tokio::time::sleep(self.delay).await;
    }
}

/// The progress bar, and the simulated crash of `--crash-after`.
struct Progress {
    bar: ProgressBar,
    crash_after: Option<u64>,
    saved: AtomicU64,
    decile: AtomicU64,
}

impl Progress {
    fn new(bar: ProgressBar, crash_after: Option<u64>) -> Self {
        Progress {
            bar,
            crash_after,
            saved: AtomicU64::new(0),
            decile: AtomicU64::new(0),
        }
    }

    /// Called right after each checkpoint, and where a resumed run starts.
    fn checkpointed(&self, ctx: &Ctx, done: u64, total: u64, sum: u64) {
        self.bar.set_length(total);
        self.bar.set_position(done);
        self.bar.set_message(format!("sum {sum}"));
        if ctx.attempt() > 1 {
            self.bar.reset_eta(); // the rate counts from here
            self.bar.suspend(|| {
                println!(
                    "resuming from item {done} ({done} of {total} already done, sum so far {sum})"
                )
            });
            self.decile
                .store(done * 10 / total.max(1), Ordering::SeqCst);
            return;
        }
        // Without a terminal the bar is hidden: a line every 10 % instead.
        let decile = done * 10 / total.max(1);
        if self.bar.is_hidden() && decile > self.decile.swap(decile, Ordering::SeqCst) {
            println!(
                "  {done:>7}/{total} items  ({:>3} %)  sum {sum}",
                decile * 10
            );
        }
        let n = self.saved.fetch_add(1, Ordering::SeqCst) + 1;
        if self.crash_after == Some(n) {
            self.bar.abandon();
            println!(
                "\n*** simulated crash: exiting right after checkpoint {n} of this process \
                 (item {done}) ***"
            );
            println!("*** run the same command without --crash-after to resume ***");
            std::process::exit(3);
        }
    }
}

// ---------------------------------------------------------------------------
// Driver.

fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "[{elapsed_precise}] [{wide_bar}] {pos}/{len} items ({rate}, eta {eta}) {msg}",
        )
        .expect("valid template")
        .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.0}/s", s.per_sec());
        })
        .progress_chars("=> "),
    );
    bar
}

#[derive(Parser, Debug)]
#[command(about = "A resumable batch job: 100,000 items, a checkpoint every 1,000")]
struct Args {
    /// The SQLite database holding the run.
    #[arg(long)]
    db: Option<PathBuf>,
    /// Number of items (input of a new run).
    #[arg(long, default_value_t = 100_000)]
    items: u64,
    /// A checkpoint every this many items (input of a new run).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    every: u64,
    /// Time each chunk's simulated write takes, in milliseconds.
    #[arg(long, default_value_t = 25)]
    delay_ms: u64,
    /// Exit the process right after it has saved this many checkpoints.
    #[arg(long, value_name = "N")]
    crash_after: Option<u64>,
}

fn remove_db(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = run(Args::parse()).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let db = args
        .db
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("checkpoint-batch.db"));
    let url = db.to_string_lossy().to_string();

    {
        let rt = Runtime::open(&url).await?;
        match rt.status(RUN_ID).await {
            Ok(s) if s.is_finished() => {
                println!("a finished run is in {}: clearing it", db.display());
                drop(rt);
                remove_db(&db);
            }
            Ok(s) => println!("found run `{RUN_ID}` ({s}) in {}", db.display()),
            Err(Error::UnknownRun { .. }) => {}
            Err(e) => return Err(e),
        }
    }

    let bar = progress_bar();
    let rt = Runtime::builder()
        .resource(Sink {
            delay: Duration::from_millis(args.delay_ms),
        })
        .resource(Progress::new(bar.clone(), args.crash_after))
        .open(&url)
        .await?;
    rt.register(batch);
    let job = Job {
        items: args.items,
        every: args.every,
    };
    let started = Instant::now();
    // Idempotent per id: for an existing run this is a handle to it (and its
    // stored input is used, not `job`).
    let h = rt.start(batch, RUN_ID, job).await?;
    if rt.checkpoints(RUN_ID).await?.is_empty() {
        println!(
            "new run `{RUN_ID}` in {}: {} items, a checkpoint every {}",
            db.display(),
            args.items,
            args.every
        );
    }
    let summary = h.result().await?;
    bar.finish();
    let elapsed = started.elapsed();

    println!(
        "\ndone in {:.2}s (this process): {} items, sum {}, checksum {:016x}, max {}, resumed {} time(s)",
        elapsed.as_secs_f64(),
        summary.items,
        summary.sum,
        summary.checksum,
        summary.max,
        summary.resumes
    );
    let (sum, checksum, max) = expected(summary.items);
    if (sum, checksum, max) == (summary.sum, summary.checksum, summary.max) {
        println!(
            "verified: equals a plain loop over the same items (none lost, none counted twice)"
        );
    } else {
        println!("MISMATCH: a plain loop gives sum {sum}, checksum {checksum:016x}, max {max}");
        std::process::exit(2);
    }

    let cps = rt.checkpoints(RUN_ID).await?;
    let bytes: usize = cps.iter().map(|c| c.size).sum();
    println!(
        "\n{} checkpoint versions, {} bytes of state in all ({} per checkpoint); the last three:",
        cps.len(),
        bytes,
        bytes / cps.len().max(1)
    );
    for c in cps.iter().rev().take(3).rev() {
        let fields: Vec<String> = c
            .fields
            .iter()
            .map(|f| format!("{}: {}", f.name, short_type(&f.type_name)))
            .collect();
        println!(
            "  #{:<3} {} {} {:>2} B, loop at {:?}: {}",
            c.seq,
            c.label.as_deref().unwrap_or("-"),
            clock(c.created_at),
            c.size,
            c.loops,
            fields.join(", ")
        );
    }

    println!("\nhistory (checkpoint events left out):");
    let mut saved = 0;
    for e in rt.history_entries(RUN_ID).await? {
        if matches!(e.event, Event::CheckpointSaved { .. }) {
            saved += 1;
        } else {
            println!("  {}  {}", clock(e.at), e.event);
        }
    }
    println!("  ... and {saved} `checkpoint saved` events");
    Ok(())
}

/// `HH:MM:SS.mmm` (UTC).
fn clock(t: SystemTime) -> String {
    let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    let secs = (ms / 1000) % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60,
        ms % 1000
    )
}

/// `alloc::string::String` -> `String`.
fn short_type(t: &str) -> &str {
    if t.contains('<') {
        t
    } else {
        t.rsplit("::").next().unwrap_or(t)
    }
}
