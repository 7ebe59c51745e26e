//! The runtime's own tests. Every workflow in them is an ordinary
//! `#[workflow] async fn` using `checkpoint!()`, `ctx.wait_for` and
//! `ctx.sleep`, as users write them: the macro is the only producer of the
//! generated-code interface (`__private`), so these tests drive exactly
//! the shapes it emits (the lib's `extern crate self as checkpoint_runtime`
//! lets its `::checkpoint_runtime::..` paths resolve here). The macro
//! knows the `ctx: &Ctx` parameter by its type's last segment and gives it
//! `::checkpoint_runtime::Ctx` itself, so a module that names `Ctx` only
//! there does not import it (the import would be unused).
//!
//! One concern per module: [`workflows`] (the shared workflows), `runs`
//! (starting, listing, forking, retention, statuses), `signals`, `timers`,
//! `workers` (leases, shutdown, concurrency), `compatibility` (a deploy
//! under stored checkpoints) and `harness` (the crash harness).

use std::time::Duration;

use crate::testing::SideEffects;
use crate::Ctx;

mod compatibility;
mod harness;
mod runs;
mod signals;
mod streams;
mod timers;
mod workers;
mod workflows;

const LIMIT: Duration = Duration::from_secs(10);

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("test timed out")
}

/// Records `what` when the runtime has a [`SideEffects`] log (the harness
/// installs one; tests that count effects register their own).
fn effect(ctx: &Ctx, what: String) {
    if let Some(fx) = ctx.try_resource::<SideEffects>() {
        fx.record(what);
    }
}

/// Runs `counter` as run `c` with input `n` on `store` and crashes it right
/// after its `k`th checkpoint, leaving it `Running` under a dead lease.
async fn crash_counter_after(store: std::sync::Arc<crate::store::MemoryStore>, k: u64, n: u64) {
    let crash = crate::testing::SimulatedCrash::after_checkpoint(k);
    let rt = crash
        .install(crate::Runtime::builder().store(store))
        .in_memory();
    rt.start(workflows::counter, "c", n).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert!(crash.fired());
}
