//! Where a field's bytes are (the bottom of the checkpoint-row modules:
//! [`super::delta`] and the rows use it, it uses nothing of theirs).

/// Where one field's bytes are: `(checkpoint row id, offset in its data, len)`.
/// In `StoredRefs` the row id 0 stands for the row itself; in `Located`
/// it is resolved. Empty fields are `(0, 0, 0)`.
pub(in crate::store::sqlite) type Loc = crate::store::delta::Loc;
