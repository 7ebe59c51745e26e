//! The queue limits of [`MemoryStore`](super::MemoryStore)'s claim: the
//! second pass of a claim, over the runs of limited queues it set aside
//! (see `rules::queues`), under the store's lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use crate::store::rules;
use crate::store::ClaimRequest;

/// Per queue with a rate: its admissions, `(at, until)`: when, and until
/// when it counts (the end of the rate's window).
pub(super) type Admissions = HashMap<String, Vec<(SystemTime, SystemTime)>>;

/// Of `queued` (per queue, the runs of limited queues a claim may take, as
/// `(priority, order, id)`), the ids admitted, queue by queue, at most
/// `room` in all; records an admission per run admitted to a queue with a
/// rate. `held(queue)`: how many runs hold a slot of `queue`
/// (`rules::holds_slot`).
pub(super) fn admit(
    admissions: &mut Admissions,
    held: impl Fn(&str) -> usize,
    req: &ClaimRequest,
    queued: BTreeMap<String, Vec<(i32, u64, Arc<str>)>>,
    mut room: usize,
    now: SystemTime,
) -> Vec<Arc<str>> {
    let mut admitted = Vec::new();
    for (queue, candidates) in queued {
        let Some(limits) = rules::queue_limits(req, Some(&queue)) else {
            continue;
        };
        let held = match limits.concurrency {
            None => 0,
            Some(_) => held(&queue),
        };
        let window = limits.rate.map(|(_, per)| rules::rate_window(per, now));
        let recent = match window {
            None => 0,
            Some((since, _)) => {
                let kept = admissions.entry(queue.clone()).or_default();
                kept.retain(|(_, until)| *until > now);
                kept.iter().filter(|(at, _)| *at > since).count()
            }
        };
        let took = rules::admit_queued(limits, held, recent, room, candidates);
        room -= took.len();
        if let Some((_, until)) = window {
            let kept = admissions.entry(queue).or_default();
            kept.extend(took.iter().map(|_| (now, until)));
        }
        admitted.extend(took);
    }
    admitted
}

/// When an admission of a queue with a rate next stops counting (after
/// `now`), so that a run the rate held back is claimed then.
pub(super) fn next_window(admissions: &Admissions, now: SystemTime) -> Option<SystemTime> {
    admissions
        .values()
        .flatten()
        .map(|(_, until)| *until)
        .filter(|until| *until > now)
        .min()
}
