//! What a checkpoint row stores besides its own bytes: the references of its
//! fields to the rows holding their bytes, its shape (site and fields,
//! interned), and the rows read while rebuilding records.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::delta::{self, Delta};
use super::{bytes, Loc};
use crate::store::sql::to_i64;
use crate::store::sqlite::error::{corrupt, R};
use crate::store::CheckpointRecord;

/// The `refs` column of a full checkpoint row: this, then (from schema
/// version 4 on, only when some field is stored by appending) the postcard
/// `Vec<Delta>` of those fields (see [`delta`]), whose `fields` entry is
/// then their base. Read back with [`decode_refs`].
#[derive(Serialize, Deserialize)]
pub(in crate::store::sqlite) struct StoredRefs {
    /// The record's data is not the plain concatenation of its fields: the
    /// row's `data` is the whole record data, and each `Loc` offset is the
    /// field's offset in it.
    pub(in crate::store::sqlite) raw: bool,
    pub(in crate::store::sqlite) fields: Vec<Loc>,
}

/// [`StoredRefs`] as written for row `own`, from the resolved locations of
/// its fields (the row's own id becomes 0): the same bytes, without building
/// the list.
pub(in crate::store::sqlite) struct RefsOf<'a> {
    pub(in crate::store::sqlite) raw: bool,
    pub(in crate::store::sqlite) locs: &'a [Loc],
    pub(in crate::store::sqlite) own: u64,
    /// Written after [`StoredRefs`] when not empty.
    pub(in crate::store::sqlite) deltas: &'a [Delta],
}

impl Serialize for RefsOf<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        /// `StoredRefs::fields`.
        struct Fields<'a>(&'a RefsOf<'a>);
        impl Serialize for Fields<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let own = self.0.own;
                s.collect_seq(
                    self.0
                        .locs
                        .iter()
                        .map(|&(src, off, len)| (if src == own { 0 } else { src }, off, len)),
                )
            }
        }
        let deltas = !self.deltas.is_empty();
        let mut st = s.serialize_struct("StoredRefs", 2 + usize::from(deltas))?;
        st.serialize_field("raw", &self.raw)?;
        st.serialize_field("fields", &Fields(self))?;
        if deltas {
            st.serialize_field("deltas", self.deltas)?;
        }
        st.end()
    }
}

/// A `refs` column read back: the references, and the descriptors of the
/// fields stored by appending (checked against the field count).
pub(in crate::store::sqlite) fn decode_refs(b: &[u8]) -> Result<(StoredRefs, Vec<Delta>), String> {
    let (refs, rest) = postcard::take_from_bytes::<StoredRefs>(b).map_err(|e| e.to_string())?;
    if rest.is_empty() {
        return Ok((refs, Vec::new()));
    }
    let (deltas, rest) =
        postcard::take_from_bytes::<Vec<Delta>>(rest).map_err(|e| e.to_string())?;
    if !rest.is_empty() || refs.raw {
        return Err("trailing bytes".to_owned());
    }
    delta::check(&deltas, refs.fields.len())?;
    Ok((refs, deltas))
}

impl StoredRefs {
    /// The rows (ids) whose bytes this checkpoint uses, itself included.
    pub(in crate::store::sqlite) fn sources(&self, own: u64) -> BTreeSet<u64> {
        let mut out = BTreeSet::from([own]);
        if !self.raw {
            out.extend(
                self.fields
                    .iter()
                    .filter(|(src, _, len)| *len > 0 && *src != 0)
                    .map(|(src, _, _)| *src),
            );
        }
        out
    }
}

/// The `refs` column of a packed row (see [`gc_compact`]): its `data` holds
/// only these `(offset, len)` ranges of the original data, in order.
#[derive(Serialize, Deserialize)]
pub(in crate::store::sqlite) struct Packed {
    pub(in crate::store::sqlite) segments: Vec<(u64, u64)>,
}

/// A checkpoint's site, field list and schema keys, interned in `shapes`.
#[derive(Serialize, Deserialize)]
pub(in crate::store::sqlite) struct Shape<'a> {
    pub(in crate::store::sqlite) site_key: Cow<'a, str>,
    pub(in crate::store::sqlite) label: Option<Cow<'a, str>>,
    /// The site's 0-based index in its workflow's site table, which seals
    /// of format 1 (before 2026-12-05) covered and nothing else reads:
    /// shapes written since hold 0 (the slot stays so that older shapes
    /// decode).
    pub(in crate::store::sqlite) format_1_site_index: u32,
    pub(in crate::store::sqlite) fields: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub(in crate::store::sqlite) schemas: Vec<Option<Cow<'a, str>>>,
}

impl<'a> Shape<'a> {
    pub(in crate::store::sqlite) fn of(cp: &'a CheckpointRecord) -> Shape<'a> {
        Shape {
            site_key: Cow::Borrowed(&cp.site_key),
            label: cp.label.as_deref().map(Cow::Borrowed),
            format_1_site_index: 0,
            fields: cp
                .fields
                .iter()
                .map(|f| (Cow::Borrowed(&*f.name), Cow::Borrowed(&*f.type_name)))
                .collect(),
            schemas: cp
                .schemas
                .iter()
                .map(|k| k.as_deref().map(Cow::Borrowed))
                .collect(),
        }
    }
}

/// Whether two checkpoints have the same shape.
pub(in crate::store::sqlite) fn same_shape(a: &CheckpointRecord, b: &CheckpointRecord) -> bool {
    a.site_key == b.site_key
        && a.label == b.label
        && a.schemas == b.schemas
        && a.fields.len() == b.fields.len()
        && a.fields
            .iter()
            .zip(&b.fields)
            .all(|(x, y)| x.name == y.name && x.type_name == y.type_name)
}

/// The bytes of one checkpoint row, as other rows reference them.
pub(in crate::store::sqlite) struct Source {
    pub(in crate::store::sqlite) data: Vec<u8>,
    /// Set for a packed row: the original `(offset, len)` ranges it keeps.
    pub(in crate::store::sqlite) segments: Option<Vec<(u64, u64)>>,
}

impl Source {
    /// Bytes `off..off + len` of the row's original data.
    pub(in crate::store::sqlite) fn slice(&self, off: u64, len: u64) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        let (start, end) = match &self.segments {
            None => (off, end),
            Some(segments) => {
                let mut at = 0u64;
                let mut found = None;
                for &(s_off, s_len) in segments {
                    if s_off <= off && end <= s_off.checked_add(s_len)? {
                        found = Some(at + (off - s_off));
                        break;
                    }
                    at = at.checked_add(s_len)?;
                }
                let start = found?;
                (start, start.checked_add(len)?)
            }
        };
        self.data
            .get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
    }
}

/// The `size, refs, data` columns of a checkpoint row.
pub(in crate::store::sqlite) type SourceRow = (Option<i64>, Option<Vec<u8>>, Option<Vec<u8>>);

/// Rows read so far in one operation, by id.
#[derive(Default)]
pub(in crate::store::sqlite) struct Sources {
    pub(in crate::store::sqlite) rows: HashMap<u64, Source>,
    pub(in crate::store::sqlite) bytes: usize,
}

/// Reads kept past this many bytes are dropped (and read again if needed).
pub(in crate::store::sqlite) const SOURCES_BYTES: usize = 16 << 20;

impl Sources {
    pub(in crate::store::sqlite) fn insert(&mut self, id: u64, src: Source) {
        if self.bytes + src.data.len() > SOURCES_BYTES {
            self.rows.clear();
            self.bytes = 0;
        }
        self.bytes += src.data.len();
        self.rows.insert(id, src);
    }

    pub(in crate::store::sqlite) fn get(
        &mut self,
        conn: &Connection,
        ord: i64,
        id: u64,
    ) -> R<&Source> {
        if !self.rows.contains_key(&id) {
            let row: Option<SourceRow> = conn
                .prepare_cached(
                    "SELECT size, refs, data FROM checkpoints WHERE id = ?1 AND run = ?2",
                )?
                .query_row(params![to_i64(id, "row id")?, ord], |r| {
                    Ok((r.get(0)?, bytes(r, 1)?, bytes(r, 2)?))
                })
                .optional()?;
            let Some((size, refs, data)) = row else {
                return Err(corrupt(format_args!(
                    "checkpoint row {id} of run {ord} is missing"
                )));
            };
            let refs = refs.ok_or_else(|| {
                corrupt(format_args!(
                    "the bytes of checkpoint row {id} of run {ord} were pruned while in use"
                ))
            })?;
            let segments = match size {
                Some(_) => None,
                None => Some(
                    postcard::from_bytes::<Packed>(&refs)
                        .map_err(|_| corrupt(format_args!("checkpoint row {id}: bad segments")))?
                        .segments,
                ),
            };
            self.insert(
                id,
                Source {
                    data: data.unwrap_or_default(),
                    segments,
                },
            );
        }
        self.rows
            .get(&id)
            .ok_or_else(|| corrupt("checkpoint row vanished"))
    }
}
