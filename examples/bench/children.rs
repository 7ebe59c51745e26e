//! The fan-out rows of the bench table (`BENCH_ONLY=children`), on SQLite
//! and, with a server, on PostgreSQL:
//!
//! - **Spawn and join**: a parent spawns `n` (10,000) trivial children and
//!   joins them all, started and awaited as the README shows it. The
//!   figure is children per second from the parent's start to its result.
//!   The baseline, in the same run on the same kind of store: `n` plain
//!   runs of the same trivial workflow, started concurrently and awaited
//!   (a run's start and completion); the ratio is the cost per child to the
//!   cost per plain run.
//! - **The parent's resume after its children**: after the join, the
//!   parent keeps their sum, takes a checkpoint and waits for a signal;
//!   the time from the signal to the result, after 10 children and after
//!   `n`. The target: no slower after `n`.
//! - **The wake at the join**: a fork of the parent at its join (it joins
//!   the same, finished, children, so it is woken at once) started and
//!   awaited. This delivers every child's outcome, so it grows with `n`
//!   (reported, no target).

use std::path::Path;
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;

use super::stats::{met, scaled};
use super::BoxError;

#[workflow]
async fn trivial(n: u32) -> u32 {
    n
}

#[workflow]
async fn fan_out(ctx: &Ctx, n: u32) -> u64 {
    let mut children = Vec::with_capacity(n as usize);
    for i in 0..n {
        children.push(ctx.spawn(trivial, &i.to_string(), i).await);
    }
    let outcomes = ctx.join_all(children).await;
    let sum = outcomes
        .into_iter()
        .map(|o| u64::from(o.unwrap_or(0)))
        .sum();
    checkpoint!("summed");
    let _: bool = ctx.wait_for("go").await;
    sum
}

/// A fresh runtime on a store of its own: an SQLite file under `d`, or a
/// PostgreSQL schema (dropped by the caller).
async fn open(store: &Store<'_>, name: &str) -> Result<Runtime, BoxError> {
    let rt = match store {
        Store::Sqlite(d) => {
            let path = d.join(format!("children-{name}.db"));
            Runtime::open(path.to_str().ok_or("a UTF-8 path")?).await?
        }
        Store::Postgres(url) => {
            let sep = if url.contains('?') { '&' } else { '?' };
            Runtime::open(&format!("{url}{sep}schema=cp_bench_children_{name}")).await?
        }
    };
    rt.register(trivial);
    rt.register(fan_out);
    Ok(rt)
}

enum Store<'a> {
    Sqlite(&'a Path),
    Postgres(&'a str),
}

impl Store<'_> {
    fn name(&self) -> &'static str {
        match self {
            Store::Sqlite(_) => "SQLite",
            Store::Postgres(_) => "PostgreSQL",
        }
    }
}

/// Spawning and joining `n` children: the time from start to the wait
/// after the join, and then from the signal to the result (the resume).
async fn fan(rt: &Runtime, id: &str, n: u32) -> Result<(Duration, Duration), BoxError> {
    let began = Instant::now();
    let h = rt.start(fan_out, id, n).await?;
    while !matches!(h.status().await?, Status::Waiting { .. }) {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let took = began.elapsed();
    let resumed = Instant::now();
    rt.signal(id, "go", &true).await?;
    let out = h.result().await?;
    let resume = resumed.elapsed();
    assert_eq!(out, (0..u64::from(n)).sum::<u64>());
    Ok((took, resume))
}

/// `n` plain runs started concurrently, then awaited.
async fn plain(rt: &Runtime, n: u32) -> Result<Duration, BoxError> {
    let began = Instant::now();
    let mut handles = Vec::with_capacity(n as usize);
    for i in 0..n {
        handles.push(rt.start(trivial, &format!("plain-{i}"), i).await?);
    }
    for h in handles {
        h.result().await?;
    }
    Ok(began.elapsed())
}

/// The parent `id`'s resume at its join: a fork there, started and awaited.
async fn resume_at_join(rt: &Runtime, id: &str) -> Result<Duration, BoxError> {
    // The join is the parent's first checkpoint.
    let join = rt
        .checkpoints(id)
        .await?
        .first()
        .map(|c| c.seq)
        .ok_or("the parent has a checkpoint")?;
    let began = Instant::now();
    let fork = format!("{id}-resumed");
    rt.fork(id, join, &fork).await?;
    let h = rt.handle(fan_out, &fork);
    while !matches!(h.status().await?, Status::Waiting { .. }) {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Ok(began.elapsed())
}

async fn rows_for(store: Store<'_>, n: u32) -> Result<Vec<String>, BoxError> {
    let kind = store.name();
    eprintln!("children on {kind}: {n} plain runs ...");
    let base = plain(&open(&store, "plain").await?, n).await?;
    eprintln!("children on {kind}: spawn and join {n} children ...");
    let rt = open(&store, "fan").await?;
    let (took, resume_large) = fan(&rt, "fan", n).await?;
    // The resume after 10 children: the median of 5.
    let mut small = Vec::new();
    for i in 0..5 {
        small.push(fan(&rt, &format!("fan-10-{i}"), 10).await?.1);
    }
    small.sort();
    let resume_small = small[2];
    let wake_small = resume_at_join(&rt, "fan-10-0").await?;
    let wake_large = resume_at_join(&rt, "fan").await?;
    let per_child = took.as_secs_f64() / f64::from(n);
    let per_plain = base.as_secs_f64() / f64::from(n);
    let ratio = per_child / per_plain;
    let resume_ratio = resume_large.as_secs_f64() / resume_small.as_secs_f64();
    let wake_ratio = wake_large.as_secs_f64() / wake_small.as_secs_f64();
    Ok(vec![
        format!(
            "| {kind}: spawn and join {n} trivial children (one parent, started and awaited) | {:.0} children/s ({:.0} us per child) | {n} plain runs started concurrently and awaited: {:.0} runs/s ({:.0} us per run) | {ratio:.2}x per child | (report) | - |",
            f64::from(n) / took.as_secs_f64(),
            per_child * 1e6,
            f64::from(n) / base.as_secs_f64(),
            per_plain * 1e6,
        ),
        format!(
            "| {kind}: the parent's resume after its join (signal to result), after {n} children | {:.2} ms | after 10 children: {:.2} ms (median of 5) | {resume_ratio:.2}x | <= 1x (no slower; noise aside) | {} |",
            resume_large.as_secs_f64() * 1e3,
            resume_small.as_secs_f64() * 1e3,
            met(resume_ratio <= 1.2),
        ),
        format!(
            "| {kind}: the wake at the join (a fork there, to its next wait), {n} children's outcomes | {:.1} ms | 10 children: {:.1} ms | {wake_ratio:.1}x | (report: it reads every outcome) | - |",
            wake_large.as_secs_f64() * 1e3,
            wake_small.as_secs_f64() * 1e3,
        ),
    ])
}

pub(crate) async fn rows(d: &Path, pg: Option<&str>, scale: f64) -> Result<Vec<String>, BoxError> {
    let n = scaled(10_000, scale) as u32;
    let mut rows = rows_for(Store::Sqlite(d), n).await?;
    if let Some(url) = pg {
        rows.extend(rows_for(Store::Postgres(url), n).await?);
        for name in ["plain", "fan"] {
            let schema = format!("cp_bench_children_{name}");
            let _ =
                checkpoint_runtime::store::postgres::PostgresStore::drop_schema(url, &schema).await;
        }
    }
    Ok(rows)
}
