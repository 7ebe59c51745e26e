//! The seal of a checkpoint the store writes (see `store::integrity`),
//! taken in two steps: on the caller's thread for the metadata and the
//! small fields, on the writer thread for the large ones.
//!
//! A large field that grew by appending is usually stored as a delta
//! (see [`delta`](super::delta)), which the writer only plans after
//! comparing the field's bytes with the previous version's. With those
//! known to be the same, the field's sum follows from the previous
//! version's sum, its header and its tail ([`extended_sum`]), and one
//! that did not change has the previous version's sum: summing a 2 MB
//! conversation history on the caller's thread took about a third as
//! long as encoding it, once per checkpoint, for bytes already summed.
//! The writer sums a large field itself only when it is stored whole.

use crate::store::integrity::{extended_sum, field_sum, metadata_sum, seal_of};
use crate::store::CheckpointRecord;

/// Fields of at least this many bytes are summed by the writer.
pub(in crate::store::sqlite) const LARGE_FIELD: usize = 64 << 10;

/// A seal with the sums of some fields still to take.
pub(in crate::store::sqlite) struct PartialSeal {
    meta: u32,
    sums: Vec<Option<u32>>,
}

impl PartialSeal {
    /// The caller's part: the metadata and the fields under [`LARGE_FIELD`].
    pub(in crate::store::sqlite) fn of(cp: &CheckpointRecord) -> PartialSeal {
        let sums = (0..cp.fields.len())
            .map(|i| (cp.fields[i].len < LARGE_FIELD).then(|| field_sum(cp, i)))
            .collect();
        PartialSeal {
            meta: metadata_sum(cp),
            sums,
        }
    }

    /// Whether field `i`'s sum is still to take.
    pub(in crate::store::sqlite) fn pending(&self, i: usize) -> bool {
        matches!(self.sums.get(i), Some(None))
    }

    /// Field `i` has the same bytes as a field whose sum is `sum`.
    pub(in crate::store::sqlite) fn same_as(&mut self, i: usize, sum: Option<u32>) {
        if let (Some(slot @ None), Some(sum)) = (self.sums.get_mut(i), sum) {
            *slot = Some(sum);
        }
    }

    /// Field `i` is `new_header ++ body ++ tail`, where `body` is the
    /// bytes after `old_header` of a field whose sum is `old_sum` (the
    /// caller compared them).
    pub(in crate::store::sqlite) fn extends(
        &mut self,
        i: usize,
        old_sum: Option<u32>,
        old_header: &[u8],
        body_len: usize,
        new_header: &[u8],
        tail: &[u8],
    ) {
        if let (Some(slot @ None), Some(old_sum)) = (self.sums.get_mut(i), old_sum) {
            *slot = Some(extended_sum(
                old_sum,
                old_header,
                body_len as u64,
                new_header,
                tail,
            ));
        }
    }

    /// The seal of `cp` (the sums still missing taken from its bytes), and
    /// its field sums.
    pub(in crate::store::sqlite) fn finish(self, cp: &CheckpointRecord) -> (Vec<u8>, Vec<u32>) {
        let sums: Vec<u32> = self
            .sums
            .into_iter()
            .enumerate()
            .map(|(i, s)| s.unwrap_or_else(|| field_sum(cp, i)))
            .collect();
        (seal_of(self.meta, sums.iter().copied()), sums)
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Arc;
    use std::time::SystemTime;

    use super::*;
    use crate::store::{checksums, FieldRecord};

    fn record(fields: &[Vec<u8>]) -> CheckpointRecord {
        let mut data = Vec::new();
        let mut recs = Vec::new();
        for (i, f) in fields.iter().enumerate() {
            recs.push(FieldRecord {
                name: Cow::Owned(format!("f{i}")),
                type_name: Cow::Borrowed("Vec<u8>"),
                offset: data.len(),
                len: f.len(),
            });
            data.extend_from_slice(f);
        }
        CheckpointRecord::new(
            Arc::from("r"),
            2,
            Cow::Borrowed("s"),
            None,
            vec![],
            recs,
            data,
            None,
            SystemTime::now(),
        )
    }

    #[test]
    fn a_seal_taken_in_parts_is_the_whole_seal() {
        let body = vec![5u8; LARGE_FIELD + 10];
        let old = [&[1u8, 2][..], &body].concat();
        let grown = [&[3u8][..], &body, &[9, 9, 9]].concat();
        let same = vec![4u8; LARGE_FIELD];
        let cp = record(&[vec![1, 2, 3], grown.clone(), same.clone(), same.clone()]);
        let mut seal = PartialSeal::of(&cp);
        assert!(!seal.pending(0) && seal.pending(1) && seal.pending(2) && seal.pending(3));
        seal.extends(
            1,
            Some(crc32fast::hash(&old)),
            &old[..2],
            body.len(),
            &grown[..1],
            &grown[1 + body.len()..],
        );
        seal.same_as(2, Some(crc32fast::hash(&same)));
        // Field 3's previous sum is unknown: summed from its bytes.
        seal.same_as(3, None);
        let (whole, sums) = seal.finish(&cp);
        assert_eq!(whole, checksums(&cp));
        assert_eq!(sums[1], crc32fast::hash(&grown));
    }
}
