//! The workflows several test modules share, written as users write them.
//! A test's own variant (a deploy that changed a type or renamed a site, a
//! workflow that panics) lives with that test.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::effect;
use crate::workflow;

/// Sums `0..n` with one checkpoint per item, recording `add:{i}` before
/// each.
#[workflow(name = "counter")]
pub(super) async fn counter(ctx: &Ctx, n: u64) -> u64 {
    let mut total = 0;
    for i in 0..n {
        total += i;
        effect(ctx, format!("add:{i}"));
        checkpoint!("step");
    }
    total
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Approval {
    pub(super) approved: bool,
    pub(super) reason: String,
}

/// An approval that lets the run go on.
pub(super) fn approved() -> Approval {
    Approval {
        approved: true,
        reason: String::new(),
    }
}

/// Notifies, waits for the `approval` signal, decides; a refusal is an
/// `Err` output (a failed run).
#[workflow(name = "approval")]
pub(super) async fn approval_flow(ctx: &Ctx, vendor: String) -> Result<String, String> {
    effect(ctx, format!("notify:{vendor}"));
    let approval: Approval = ctx.wait_for("approval").await;
    effect(ctx, format!("decided:{vendor}"));
    if approval.approved {
        Ok(format!("{vendor}: approved"))
    } else {
        Err(approval.reason)
    }
}

/// A durable sleep of `ms`, then a wait of at most `ms` for `ping`.
#[workflow(name = "timers")]
pub(super) async fn timers(ctx: &Ctx, ms: u64) -> (String, Option<u32>) {
    ctx.sleep(Duration::from_millis(ms)).await;
    let ping: Option<u32> = ctx
        .wait_for_timeout("ping", Duration::from_millis(ms))
        .await;
    ("woke".to_owned(), ping)
}

/// `n` ticks of `ms` each (a plain tokio sleep: the run keeps executing),
/// one checkpoint per tick; returns `n`.
#[workflow(name = "slow")]
pub(super) async fn slow(ctx: &Ctx, n: u64, ms: u64) -> u64 {
    for i in 0..n {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        effect(ctx, format!("tick:{i}"));
        checkpoint!("tick");
    }
    n
}
