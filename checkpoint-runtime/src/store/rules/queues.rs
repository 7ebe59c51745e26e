//! Queues ([`crate::Queue`]): which runnable runs of a bounded queue a
//! claim admits. A backend's claim sets the runs of a bounded queue aside
//! from its other candidates, counts the runs of the queue that hold a
//! slot ([`holds_slot`]) in the claim's own transaction (on PostgreSQL
//! under a lock per queue, so that two claims cannot both see a free
//! slot), and takes what [`admit_queued`] returns.

use std::time::SystemTime;

use super::lease_free;
use crate::store::{ClaimRequest, LeaseInfo};

/// The concurrency bound `req` applies to a run of queue `queue`: `None`
/// for a run in no queue, in a queue the claim did not declare, or in a
/// declared queue without a bound (such runs are claimed as any other).
pub fn queue_bound(req: &ClaimRequest, queue: Option<&str>) -> Option<u32> {
    req.queues.get(queue?)?.concurrency
}

/// Whether a run holding `lease` takes up a slot of its queue for a claim
/// by `worker`/`instance` at `now` (the system's time): it holds a lease
/// that has not expired and that this claim could not take (a lease of
/// this worker's older instance is taken over, so it is not counted: the
/// run counts once it is admitted). Runs that ended hold no lease.
pub fn holds_slot(
    lease: Option<&LeaseInfo>,
    worker: &str,
    instance: &str,
    now: SystemTime,
) -> bool {
    lease.is_some() && !lease_free(lease, worker, instance, now)
}

/// The admission rule of a queue bounded to `concurrency` runs, of which
/// `held` hold a slot ([`holds_slot`]): of `candidates`, the queue's runs
/// this claim may take, as `(priority, creation order, run)`, those
/// admitted, higher priority first, then oldest first: as many as the
/// queue has free slots, and at most `room` (what is left of the claim's
/// limit).
///
/// ```
/// use checkpoint_runtime::store::rules::admit_queued;
///
/// let candidates = vec![(0, 1, "old"), (5, 3, "urgent"), (0, 2, "newer"), (5, 4, "urgent-2")];
/// // Three slots, one held: two admitted, by priority then age.
/// assert_eq!(admit_queued(3, 1, 10, candidates.clone()), ["urgent", "urgent-2"]);
/// assert_eq!(admit_queued(3, 0, 10, candidates.clone()), ["urgent", "urgent-2", "old"]);
/// // Full: none.
/// assert!(admit_queued(3, 3, 10, candidates.clone()).is_empty());
/// // The claim's own limit.
/// assert_eq!(admit_queued(8, 0, 1, candidates), ["urgent"]);
/// ```
pub fn admit_queued<O: Ord, T>(
    concurrency: u32,
    held: usize,
    room: usize,
    mut candidates: Vec<(i32, O, T)>,
) -> Vec<T> {
    let free = usize::try_from(concurrency)
        .unwrap_or(usize::MAX)
        .saturating_sub(held)
        .min(room);
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    candidates
        .into_iter()
        .take(free)
        .map(|(_, _, t)| t)
        .collect()
}
