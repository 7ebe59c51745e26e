//! The start options of a new run ([`StartOptions`]): what
//! [`create`](super::create) stores of them on the run's record.

use crate::store::{RunRecord, RunState};
use crate::StartOptions;

/// Sets what `options` say on `rec`, a run just created in `Ready` or
/// `Held`: its tags, queue and priority, and, for a ready run with a
/// start time, `Sleeping` until then (on the runtime's clock, as every
/// timer: it is claimed once due, and counts in
/// [`Store::next_wakeup`](crate::store::Store::next_wakeup)). A held
/// child keeps `Held`: it starts when a slot frees up, its start time
/// aside.
pub(super) fn apply_options(rec: &mut RunRecord, options: StartOptions) {
    rec.tags = options.tags;
    rec.queue = options.queue;
    rec.priority = options.priority;
    if let (RunState::Ready, Some(until)) = (&rec.state, options.start_at) {
        rec.state = RunState::Sleeping { until };
    }
}
