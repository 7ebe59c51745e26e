//! The rules of a run's stream and progress (see
//! [`Store::write_stream`](crate::store::Store::write_stream)): they
//! change no run state and record no event; what they decide is who may
//! write, and which items a resume keeps.

use super::check_lease;
use crate::store::{Lease, RunRecord, StreamItem};
use crate::Error;

/// Whether `lease` may write run `id`'s stream or progress: only the
/// worker that holds the run's current lease ([`check_lease`]), so a
/// worker that lost its lease cannot write items (its segment runs again
/// elsewhere).
///
/// ```
/// use checkpoint_runtime::store::rules;
/// # let _ = rules::streams::may_write;
/// ```
pub fn may_write(id: &str, rec: &RunRecord, lease: &Lease) -> Result<(), Error> {
    check_lease(id, rec, lease)
}

/// Whether a resume from checkpoint `from_seq` keeps `item`: only items
/// emitted before that checkpoint was stored (`after_seq < from_seq`).
///
/// ```
/// use checkpoint_runtime::store::{rules, StreamItem};
///
/// let item = StreamItem { index: 3, after_seq: 2, value: b"1".to_vec() };
/// assert!(rules::streams::kept_on_resume(&item, 3));
/// assert!(!rules::streams::kept_on_resume(&item, 2));
/// ```
pub fn kept_on_resume(item: &StreamItem, from_seq: u64) -> bool {
    item.after_seq < from_seq
}

/// The index the next item gets after a resume: one past the last kept
/// (`None`: none kept).
///
/// ```
/// use checkpoint_runtime::store::rules;
///
/// assert_eq!(rules::streams::next_index(None), 0);
/// assert_eq!(rules::streams::next_index(Some(4)), 5);
/// ```
pub fn next_index(last_kept: Option<u64>) -> u64 {
    last_kept.map_or(0, |i| i + 1)
}
