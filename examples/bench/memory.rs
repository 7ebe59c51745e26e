//! The in-memory rows of the bench table (`BENCH_ONLY=memory`): what a
//! checkpoint costs on the in-memory store (a run of 1,000 checkpoints
//! against the same loop as a plain async fn), and what the `#[workflow]`
//! transform costs when no checkpoint is taken. No disk is involved, so
//! these rows live apart from the SQLite ones.

use std::hint::black_box;
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;

use super::stats::{met, ms};
use super::workloads::state;
use super::BoxError;

#[workflow]
async fn thousand_checkpoints(ctx: &Ctx, n: u32) -> u64 {
    let mut state = state();
    let mut sum = 0u64;
    for i in 0..n {
        state[(i % 1000) as usize] = state[(i % 1000) as usize].wrapping_add(1);
        sum += state[(i % 1000) as usize] as u64;
        checkpoint!("step");
    }
    sum
}

async fn thousand_plain(n: u32) -> u64 {
    let mut state = state();
    let mut sum = 0u64;
    for i in 0..n {
        state[(i % 1000) as usize] = state[(i % 1000) as usize].wrapping_add(1);
        sum += state[(i % 1000) as usize] as u64;
        black_box(&state);
    }
    sum
}

#[workflow]
async fn compute_transformed(ctx: &Ctx, n: u64) -> u64 {
    let mut acc = 0u64;
    let mut i = 0u64;
    while i < n {
        acc = acc.wrapping_mul(6364136223846793005).wrapping_add(i);
        if acc == u64::MAX {
            checkpoint!("never");
        }
        i += 1;
    }
    acc
}

async fn compute_plain(n: u64) -> u64 {
    let mut acc = 0u64;
    let mut i = 0u64;
    while i < n {
        acc = acc.wrapping_mul(6364136223846793005).wrapping_add(i);
        if acc == u64::MAX {
            black_box(acc);
        }
        i += 1;
    }
    acc
}

/// Median of `rounds` timings of `f`.
async fn median<F, Fut>(rounds: usize, mut f: F) -> Duration
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut times = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let start = Instant::now();
        f(i).await;
        times.push(start.elapsed());
    }
    times.sort();
    times[rounds / 2]
}

/// The in-memory rows: a checkpoint's cost, and the transform's cost when no
/// checkpoint is taken.
pub(crate) async fn memory_rows(rows: &mut Vec<String>) -> Result<(), BoxError> {
    eprintln!("in-memory checkpoints ...");
    const CHECKPOINTS: u32 = 1000;
    const ROUNDS: usize = 31;
    let rt = Runtime::in_memory();

    let with = median(ROUNDS, |i| {
        let rt = rt.clone();
        async move {
            let h = rt
                .start(thousand_checkpoints, &format!("ck-{i}"), CHECKPOINTS)
                .await
                .expect("start");
            black_box(h.result().await.expect("result"));
        }
    })
    .await;
    let plain = median(ROUNDS, |_| async {
        black_box(thousand_plain(black_box(CHECKPOINTS)).await);
    })
    .await;
    let per_checkpoint = with.saturating_sub(plain) / CHECKPOINTS;
    let size = rt
        .checkpoints("ck-0")
        .await?
        .last()
        .map(|c| c.size)
        .unwrap_or(0);

    const WORK: u64 = 2_000_000;
    let transformed = median(ROUNDS, |i| {
        let rt = rt.clone();
        async move {
            let h = rt
                .start(compute_transformed, &format!("c-{i}"), WORK)
                .await
                .expect("start");
            black_box(h.result().await.expect("result"));
        }
    })
    .await;
    let compute = median(ROUNDS, |_| async {
        black_box(compute_plain(black_box(WORK)).await);
    })
    .await;
    drop(rt);

    rows.push(format!(
        "| in-memory checkpoint, {size} B state | {} ns/checkpoint | run of {CHECKPOINTS} checkpoints {:.3} ms vs plain loop {:.3} ms | {:.1}x | <= 2000 ns | {} |",
        per_checkpoint.as_nanos(),
        ms(with),
        ms(plain),
        with.as_secs_f64() / plain.as_secs_f64().max(1e-12),
        met(per_checkpoint <= Duration::from_nanos(2000)),
    ));
    let overhead = transformed.as_secs_f64() / compute.as_secs_f64().max(1e-12);
    rows.push(format!(
        "| transformed fn, no checkpoint taken | {:.3} ms | plain async fn {:.3} ms | {overhead:.3} | <= 1.05 | {} |",
        ms(transformed),
        ms(compute),
        met(overhead <= 1.05),
    ));

    Ok(())
}
