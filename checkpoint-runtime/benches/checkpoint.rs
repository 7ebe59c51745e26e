//! Criterion benchmarks of the runtime's hot path: taking a checkpoint on the
//! in-memory store.
//!
//! ```text
//! cargo bench -p checkpoint-runtime --bench checkpoint
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

#[workflow]
async fn save_loop(ctx: &Ctx, args: (u32, u32)) -> u64 {
    let (n, size) = args;
    let mut state: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut sum = 0u64;
    for i in 0..n {
        let at = (i % size.max(1)) as usize;
        state[at] = state[at].wrapping_add(1);
        sum += state[at] as u64;
        checkpoint!("step");
    }
    sum
}

/// Time per checkpoint of a run taking `iters` checkpoints of `size` bytes.
async fn per_checkpoint(rt: &Runtime, iters: u64, size: u32, run: &mut u64) -> Duration {
    *run += 1;
    let n = u32::try_from(iters).unwrap_or(u32::MAX);
    let start = Instant::now();
    let h = rt
        .start(save_loop, &format!("r{run}"), (n, size))
        .await
        .expect("start");
    black_box(h.result().await.expect("result"));
    start.elapsed()
}

fn bench_checkpoints(c: &mut Criterion) {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut group = c.benchmark_group("checkpoint");
    for size in [16u32, 1000, 10_000] {
        for (name, keep) in [("keep_all", None), ("keep_100", Some(100))] {
            group.bench_with_input(BenchmarkId::new(name, size), &size, |b, &size| {
                let builder = Runtime::builder();
                let rt = match keep {
                    Some(k) => builder.keep_checkpoints(k).in_memory(),
                    None => builder.in_memory(),
                };
                let mut run = 0u64;
                b.to_async(&tokio).iter_custom(|iters| {
                    let rt = rt.clone();
                    let mut r = run;
                    run += 1_000_000;
                    async move { per_checkpoint(&rt, iters, size, &mut r).await }
                });
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    targets = bench_checkpoints
}
criterion_main!(benches);
