//! Queues ([`crate::Queue`]): which runnable runs of a limited queue a
//! claim admits. A backend's claim takes the runs of the queues it limits
//! apart from its other candidates (the SQL backends leave them out of
//! their claim query and read each queue's runs in the rule's order, at
//! most [`queue_room`] of them; the memory store sets them aside), then, in
//! the claim's own transaction (on PostgreSQL under a lock per queue, so
//! that two claims cannot both see the same free slot), counts the runs of
//! the queue that hold a slot ([`holds_slot`](super::holds_slot)) and, for
//! a rate, the admissions of the window ([`rate_window`]), takes what
//! [`admit_queued`] returns, and stores one admission per run taken (for
//! the rate).

use std::time::{Duration, SystemTime};

use crate::store::ClaimRequest;
use crate::Queue;

/// The limits `req` applies to a run of queue `queue`: `None` for a run in
/// no queue, in a queue the claim did not declare, or in a declared queue
/// without limits (such runs are claimed as any other).
pub fn queue_limits<'a>(req: &'a ClaimRequest, queue: Option<&str>) -> Option<&'a Queue> {
    req.queues
        .get(queue?)
        .filter(|q| q.concurrency.is_some() || q.rate.is_some())
}

/// For a queue with a rate of `per`, at `now` (the system's time): the
/// admissions that count are those after the returned time, and an
/// admission made now stops counting at the second time returned (when
/// the workers wake for it: see
/// [`Store::next_wakeup`](crate::store::Store::next_wakeup)).
pub fn rate_window(per: Duration, now: SystemTime) -> (SystemTime, SystemTime) {
    let since = now.checked_sub(per).unwrap_or(SystemTime::UNIX_EPOCH);
    let until = now.checked_add(per).unwrap_or(now);
    (since, until)
}

/// How many runs [`admit_queued`] admits at most (with as many
/// candidates): the queue's free slots, what its rate allows, and `room`,
/// the least of them. A backend that reads the queue's candidates in the
/// rule's order (priority, then age) reads no more than this many.
pub fn queue_room(limits: &Queue, held: usize, recent: usize, room: usize) -> usize {
    let left = |bound: u32, used: usize| {
        usize::try_from(bound)
            .unwrap_or(usize::MAX)
            .saturating_sub(used)
    };
    let slots = limits.concurrency.map_or(usize::MAX, |c| left(c, held));
    let rate = limits.rate.map_or(usize::MAX, |(n, _)| left(n, recent));
    slots.min(rate).min(room)
}

/// The admission rule of a queue with `limits`, of which `held` runs hold
/// a slot ([`holds_slot`](super::holds_slot); read only with a concurrency) and `recent` were
/// admitted within its rate's window ([`rate_window`]; read only with a
/// rate): of `candidates`, the queue's runs this claim may take, as
/// `(priority, creation order, run)`, those admitted, higher priority
/// first, then oldest first: as many as the queue has free slots and its
/// rate allows, and at most `room` (what is left of the claim's limit).
///
/// ```
/// use std::time::Duration;
/// use checkpoint_runtime::Queue;
/// use checkpoint_runtime::store::rules::admit_queued;
///
/// let candidates = vec![(0, 1, "old"), (5, 3, "urgent"), (0, 2, "newer"), (5, 4, "urgent-2")];
/// let three = Queue::new().concurrency(3);
/// // Three slots, one held: two admitted, by priority then age.
/// assert_eq!(admit_queued(&three, 1, 0, 10, candidates.clone()), ["urgent", "urgent-2"]);
/// assert_eq!(admit_queued(&three, 0, 0, 10, candidates.clone()), ["urgent", "urgent-2", "old"]);
/// // Full: none.
/// assert!(admit_queued(&three, 3, 0, 10, candidates.clone()).is_empty());
/// // The claim's own limit.
/// assert_eq!(admit_queued(&three, 0, 0, 1, candidates.clone()), ["urgent"]);
/// // A rate of 4 a minute with 3 admitted in the window: one more.
/// let rated = Queue::new().rate(4, Duration::from_secs(60));
/// assert_eq!(admit_queued(&rated, 0, 3, 10, candidates), ["urgent"]);
/// ```
pub fn admit_queued<O: Ord, T>(
    limits: &Queue,
    held: usize,
    recent: usize,
    room: usize,
    mut candidates: Vec<(i32, O, T)>,
) -> Vec<T> {
    let free = queue_room(limits, held, recent, room);
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    candidates
        .into_iter()
        .take(free)
        .map(|(_, _, t)| t)
        .collect()
}
