//! The retry row of the bench table (`BENCH_ONLY=retry`): the cost of one
//! failed `ctx.retry` attempt (its outcome stored with a checkpoint, a
//! history event, a durable backoff the runtime wakes from) beside one
//! plain `checkpoint!()`, on the same SQLite file in the same run, in
//! alternating rounds. The runtime runs on a virtual clock (`TestClock`),
//! so the backoffs cost no waiting: what is measured is the store work and
//! the suspend / resume of each attempt.

use std::path::Path;
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use serde::{Deserialize, Serialize};

use super::stats::{median_of, scaled, us};
use super::BoxError;

#[derive(Debug, Serialize, Deserialize)]
struct Busy;

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("busy")
    }
}

/// `n` plain checkpoints of a 64-byte state.
#[workflow]
async fn plain_checkpoints(n: u32) -> u32 {
    let mut state: Vec<u8> = vec![0; 64];
    for i in 0..n {
        state[(i % 64) as usize] = state[(i % 64) as usize].wrapping_add(1);
        checkpoint!();
    }
    state.iter().map(|b| u32::from(*b)).sum()
}

/// One retry whose first `n` attempts fail (a 1 ms backoff, virtual), with
/// the same 64-byte state saved at each of its checkpoints.
#[workflow]
async fn failing_attempts(ctx: &Ctx, n: u32) -> u32 {
    let state: Vec<u8> = vec![1; 64];
    let got = ctx
        .retry(
            "bench",
            RetryPolicy::fixed(Duration::from_millis(1)).max_attempts(n + 1),
            || {
                // Attempts after checkpoints 0..n fail: the n + 1st answers.
                let seq: u32 = ctx
                    .idempotency_key()
                    .split(':')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let r = if seq < n { Err(Busy) } else { Ok(seq) };
                async move { r }
            },
        )
        .await;
    got.unwrap_or(0) + state.len() as u32
}

pub(crate) async fn rows(d: &Path, scale: f64) -> Result<Vec<String>, BoxError> {
    let (rounds, n) = (6usize, scaled(200, scale) as u32);
    eprintln!("retry: {rounds} rounds of {n} checkpoints and of {n} failed attempts ...");
    let rt = Runtime::builder()
        .clock(TestClock::new())
        .open(&d.join("retry.db").display().to_string())
        .await?;
    rt.register(plain_checkpoints);
    rt.register(failing_attempts);
    let (mut plain, mut retry) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let began = Instant::now();
        let h = rt
            .start(plain_checkpoints, &format!("plain-{round}"), n)
            .await?;
        h.result().await?;
        plain.push(began.elapsed() / n);
        let began = Instant::now();
        let h = rt
            .start(failing_attempts, &format!("retry-{round}"), n)
            .await?;
        let out = h.result().await?;
        if out != n + 64 {
            return Err(format!("the retry answered {out}, not {}", n + 64).into());
        }
        retry.push(began.elapsed() / n);
    }
    let (plain_med, retry_med) = (median_of(&mut plain), median_of(&mut retry));
    let ratio = retry_med.as_secs_f64() / plain_med.as_secs_f64().max(1e-12);
    Ok(vec![format!(
        "| one failed `ctx.retry` attempt (outcome checkpoint, history event, durable backoff and wake on a virtual clock; SQLite file, {rounds} runs x {n} attempts) | median per attempt {:.0} us | plain `checkpoint!()` of the same state, same file ({rounds} runs x {n}): median per checkpoint {:.0} us | {ratio:.2}x | - | - |",
        us(retry_med),
        us(plain_med),
    )])
}
