//! Checkpoint rows: how a checkpoint's fields reference their bytes
//! ([`refs`]), reading a row back into a record ([`rows`]), and the chain of
//! a run's rows with retention ([`chain`]).

pub(super) mod ahead;
pub(super) mod chain;
pub(super) mod delta;
mod loc;
pub(super) mod refs;
pub(super) mod rows;
pub(super) mod seal;

use std::sync::Arc;

use crate::store::CheckpointRecord;

pub(in crate::store::sqlite) use loc::Loc;

/// A stored checkpoint together with its row and where its fields' bytes are.
pub(in crate::store::sqlite) struct Located {
    pub(in crate::store::sqlite) cp: Arc<CheckpointRecord>,
    /// The row id.
    pub(in crate::store::sqlite) id: u64,
    /// The shape id.
    pub(in crate::store::sqlite) shape: i64,
    /// Resolved: the row id is never 0 for a non-empty field. For a field
    /// stored by appending, its base.
    pub(in crate::store::sqlite) locs: Vec<Loc>,
    /// The fields stored by appending, by field index (see [`delta`]).
    pub(in crate::store::sqlite) deltas: Vec<delta::Delta>,
    /// The record's field sums, from its seal (empty for a row stored
    /// without one): what [`seal`] derives a next version's from.
    pub(in crate::store::sqlite) sums: Vec<u32>,
}

impl Located {
    /// The descriptor of field `i`, if it is stored by appending.
    pub(in crate::store::sqlite) fn delta(&self, i: usize) -> Option<&delta::Delta> {
        self.deltas.iter().find(|d| d.field as usize == i)
    }

    /// The sum of field `i`'s bytes, if known.
    pub(in crate::store::sqlite) fn sum(&self, i: usize) -> Option<u32> {
        self.sums.get(i).copied()
    }
}

/// Column `i` as bytes: a blob, or a text (one flipped bit in a record's
/// header turns a blob into a text of the same length, which is then
/// reported by what its bytes say, not as a column of the wrong type).
pub(in crate::store::sqlite) fn bytes(
    r: &rusqlite::Row<'_>,
    i: usize,
) -> rusqlite::Result<Option<Vec<u8>>> {
    use rusqlite::types::ValueRef;
    match r.get_ref(i)? {
        ValueRef::Null => Ok(None),
        ValueRef::Blob(b) | ValueRef::Text(b) => Ok(Some(b.to_vec())),
        _ => r.get(i),
    }
}
