//! What a write rule returns: the [`Change`] a backend applies.

use crate::history::Event;
use crate::store::SignalRecord;

/// What a write rule changed, besides the record it changed in place: what
/// a backend stores for it (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Change {
    /// The run's row changed: write the record back.
    pub row: bool,
    /// The event the run's history records.
    pub event: Option<Event>,
    /// An event the history of another run records, by its id (a parent's
    /// `ChildSpawned`, the `Forked` of a fork's source).
    pub elsewhere: Option<(String, Event)>,
    /// A signal the run receives: queue it.
    pub signal: Option<SignalRecord>,
    /// The run ended by this change (see [`Ended`]).
    pub ended: Option<Ended>,
}

/// What the end of a run changes elsewhere, which the backend applies in the
/// same transaction: the runs joining it count it (the last one it waited
/// for receives its join signal, see [`joined`](super::joined)), a held sibling is
/// promoted when `freed_slot`, and when `cancels_descendants` its
/// unfinished descendants are cancelled, each by [`cancel`](super::cancel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ended {
    /// The run counted against its parent's `max_running` (it was not
    /// held): the oldest held sibling may start (see [`promote`](super::promote)).
    pub freed_slot: bool,
    /// A cancel: the run's unfinished descendants are cancelled too.
    pub cancels_descendants: bool,
}

impl Change {
    pub(super) fn row() -> Change {
        Change {
            row: true,
            ..Change::default()
        }
    }

    pub(super) fn row_and(event: Option<Event>) -> Change {
        Change {
            row: true,
            event,
            ..Change::default()
        }
    }
}
