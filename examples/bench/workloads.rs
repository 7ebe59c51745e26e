//! The workflows the SQLite rows of the bench table run (`durable_loop`,
//! `long_history`), the `Probe` resource they record their checkpoints'
//! instants into, and how a section opens a runtime on a file and starts
//! its runs. Shared by the latency, throughput, resume, bytes, RSS,
//! short-run, history and PostgreSQL sections, so kept in one place.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use checkpoint_runtime::prelude::*;

use super::BoxError;

pub(crate) fn state() -> Vec<u8> {
    (0..1000u32).map(|i| i as u8).collect()
}

/// A runtime resource the workflows below record instants into (right after
/// each checkpoint returns, or at the first statement after a resume).
#[derive(Clone, Default)]
pub(crate) struct Probe(Arc<Mutex<Vec<Instant>>>);

impl Probe {
    pub(crate) fn mark(&self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
    }

    pub(crate) fn take(&self) -> Vec<Instant> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// `n` durable checkpoints of a `size`-byte state (plus a few bytes of
/// counters), one byte of it changing each time.
#[workflow]
pub(crate) async fn durable_loop(ctx: &Ctx, args: (u32, u32)) -> u64 {
    let (n, size) = args;
    let mut state: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut sum = 0u64;
    for i in 0..n {
        let at = (i % size.max(1)) as usize;
        state[at] = state[at].wrapping_add(1);
        sum += state[at] as u64;
        checkpoint!("step");
        if let Some(p) = ctx.try_resource::<Probe>() {
            p.mark();
        }
    }
    sum
}

/// Called by [`long_history`] once its last checkpoint is stored, when the
/// runtime has one: the crash child's, which aborts the process there.
#[derive(Clone)]
pub(crate) struct CrashAt(pub(crate) Arc<dyn Fn() + Send + Sync>);

/// `n` checkpoints of a ~1 KB state (with a [`CrashAt`], the process
/// aborts right after the last), then waits for `go` signals. The first
/// statement after the loop and after each wait records when it ran (a
/// resume after the crash reaches the one after the loop first). `go = 0`
/// ends the run.
#[workflow]
pub(crate) async fn long_history(ctx: &Ctx, n: u32) -> u32 {
    let mut state = state();
    let mut i = 0u32;
    while i < n {
        let at = (i % 1000) as usize;
        state[at] = state[at].wrapping_add(1);
        i += 1;
        checkpoint!("step");
        if i == n {
            if let Some(crash) = ctx.try_resource::<CrashAt>() {
                (crash.0)();
            }
        }
    }
    if let Some(p) = ctx.try_resource::<Probe>() {
        p.mark();
    }
    loop {
        let go: u32 = ctx.wait_for("go").await;
        if let Some(p) = ctx.try_resource::<Probe>() {
            p.mark();
        }
        if go == 0 {
            break;
        }
    }
    i + u32::from(state[0])
}

/// Opens an SQLite runtime at `path` with a [`Probe`] and this concurrency.
pub(crate) async fn open_rt(
    path: &Path,
    probe: &Probe,
    concurrency: usize,
) -> Result<Runtime, BoxError> {
    let rt = Runtime::builder()
        .concurrency(concurrency)
        .resource(probe.clone())
        .open(path.to_str().expect("utf-8 temp path"))
        .await?;
    rt.register(durable_loop);
    rt.register(long_history);
    Ok(rt)
}

/// Starts `runs` runs of [`durable_loop`] at once (their creations share
/// group commits).
pub(crate) async fn start_loops(
    rt: &Runtime,
    prefix: &str,
    runs: usize,
    n: u32,
    size: u32,
) -> Result<(), BoxError> {
    let mut set = tokio::task::JoinSet::new();
    for r in 0..runs {
        let rt = rt.clone();
        let id = format!("{prefix}-{r}");
        set.spawn(async move { rt.start(durable_loop, &id, (n, size)).await.map(|_| ()) });
    }
    while let Some(res) = set.join_next().await {
        res??;
    }
    Ok(())
}
