//! Checkpoint rows: how a checkpoint's fields reference their bytes
//! ([`refs`]), reading a row back into a record ([`rows`]), and the chain of
//! a run's rows with retention ([`chain`]).

pub(super) mod chain;
pub(super) mod refs;
pub(super) mod rows;

use std::sync::Arc;

use crate::store::CheckpointRecord;

/// Where one field's bytes are: `(checkpoint row id, offset in its data, len)`.
/// In [`StoredRefs`] the row id 0 stands for the row itself; in [`Located`]
/// it is resolved. Empty fields are `(0, 0, 0)`.
pub(in crate::store::sqlite) type Loc = (u64, u64, u64);

/// A stored checkpoint together with its row and where its fields' bytes are.
pub(in crate::store::sqlite) struct Located {
    pub(in crate::store::sqlite) cp: Arc<CheckpointRecord>,
    /// The row id.
    pub(in crate::store::sqlite) id: u64,
    /// The shape id.
    pub(in crate::store::sqlite) shape: i64,
    /// Resolved: the row id is never 0 for a non-empty field.
    pub(in crate::store::sqlite) locs: Vec<Loc>,
}
