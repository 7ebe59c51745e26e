//! Prints one table of the project's speed figures, each next to a baseline
//! measured in the same run:
//!
//! ```text
//! cargo run --release --example bench
//! ```
//!
//! The criterion versions live in `checkpoint-runtime/benches/`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;

fn state() -> Vec<u8> {
    (0..1000u32).map(|i| i as u8).collect()
}

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

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
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

    println!("| measure | value | baseline (same run) | ratio | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| in-memory checkpoint, {size} B state | {} ns/checkpoint | run of {CHECKPOINTS} checkpoints {:.3} ms vs plain loop {:.3} ms | {:.1}x | <= 2000 ns |",
        per_checkpoint.as_nanos(),
        with.as_secs_f64() * 1e3,
        plain.as_secs_f64() * 1e3,
        with.as_secs_f64() / plain.as_secs_f64().max(1e-12),
    );
    println!(
        "| transformed fn, no checkpoint taken | {:.3} ms | plain async fn {:.3} ms | {:.3} | <= 1.05 |",
        transformed.as_secs_f64() * 1e3,
        compute.as_secs_f64() * 1e3,
        transformed.as_secs_f64() / compute.as_secs_f64().max(1e-12),
    );
    Ok(())
}
