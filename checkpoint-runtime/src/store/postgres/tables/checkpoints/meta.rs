//! The `meta` column of a checkpoint row (schema version 10): what names
//! and locates its fields (name, type, schema key, offset and length of
//! each) and its loop positions, as one postcard value ([`Meta`]).
//!
//! Before, these were six array columns (`text[]` and `bigint[]`). A save
//! bound six arrays and the server built six, and a batch sent each as an
//! array literal the server parsed per row: one `bytea` instead cost a
//! lone save about 10 us less of the server's time. Rows written before
//! version 10 keep their arrays, renamed `v9_*` so that an older build
//! still running against these tables fails on the missing columns rather
//! than read a new row's NULL arrays (see the schema's version 10);
//! [`decode`](super::decode) reads either.
//!
//! The row's seal (`store::integrity`) covers what this column holds, so a
//! flipped bit is a decode error, never a wrong field.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::store::CheckpointRecord;
use crate::Error;

/// A checkpoint's field list and loop positions, as the `meta` column
/// stores them.
#[derive(Debug, Serialize, Deserialize)]
pub(in crate::store::postgres) struct Meta<'a> {
    #[serde(borrow)]
    pub(in crate::store::postgres) fields: Vec<MetaField<'a>>,
    pub(in crate::store::postgres) loops: Vec<u64>,
}

/// One field of a [`Meta`]: `offset` and `len` locate its bytes in the
/// row's data (after segments are put back, see `segments`).
#[derive(Debug, Serialize, Deserialize)]
pub(in crate::store::postgres) struct MetaField<'a> {
    #[serde(borrow)]
    pub(in crate::store::postgres) name: Cow<'a, str>,
    #[serde(borrow)]
    pub(in crate::store::postgres) type_name: Cow<'a, str>,
    #[serde(borrow)]
    pub(in crate::store::postgres) schema: Option<Cow<'a, str>>,
    pub(in crate::store::postgres) offset: u64,
    pub(in crate::store::postgres) len: u64,
}

/// The `meta` column of `cp`.
pub(in crate::store::postgres) fn encode(cp: &CheckpointRecord) -> Result<Vec<u8>, Error> {
    let meta = Meta {
        fields: cp
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| MetaField {
                name: Cow::Borrowed(&f.name),
                type_name: Cow::Borrowed(&f.type_name),
                schema: cp.schema_key(i).map(Cow::Borrowed),
                offset: f.offset as u64,
                len: f.len as u64,
            })
            .collect(),
        loops: cp.loops.clone(),
    };
    // Strings and integers into a `Vec`: not expected to fail, but a
    // failure must refuse the save rather than store what cannot be read.
    postcard::to_allocvec(&meta).map_err(|e| {
        Error::internal(format!(
            "run `{}`: checkpoint #{}'s field list does not encode: {e}",
            cp.run, cp.seq
        ))
    })
}

/// A `meta` column read back, or why it does not decode (trailing bytes
/// included).
pub(in crate::store::postgres) fn decode(bytes: &[u8]) -> Result<Meta<'_>, String> {
    let (meta, rest) = postcard::take_from_bytes::<Meta>(bytes).map_err(|e| e.to_string())?;
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes", rest.len()));
    }
    Ok(meta)
}

/// The field names a `meta` column holds, as far as it decodes (for
/// naming what a damaged run held).
pub(in crate::store::postgres) fn field_names(bytes: &[u8]) -> Vec<String> {
    decode(bytes)
        .map(|m| m.fields.into_iter().map(|f| f.name.into_owned()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FieldRecord;
    use std::time::SystemTime;

    #[test]
    fn a_checkpoints_fields_and_loops_come_back_as_they_were_stored() {
        let cp = CheckpointRecord::new(
            "r".into(),
            3,
            Cow::Borrowed("site"),
            None,
            vec![2, u64::MAX],
            vec![
                FieldRecord {
                    name: Cow::Borrowed("a"),
                    type_name: Cow::Borrowed("u32"),
                    offset: 0,
                    len: 2,
                },
                FieldRecord {
                    name: Cow::Borrowed("{\"b\", NULL}"),
                    type_name: Cow::Borrowed("Vec<String>"),
                    offset: 2,
                    len: 0,
                },
            ],
            vec![7, 7],
            None,
            SystemTime::UNIX_EPOCH,
        )
        .with_schemas(vec![Some(Cow::Borrowed("k1")), None]);
        let bytes = encode(&cp).unwrap();
        let meta = decode(&bytes).unwrap();
        assert_eq!(meta.loops, [2, u64::MAX]);
        let got: Vec<_> = meta
            .fields
            .iter()
            .map(|f| {
                (
                    &*f.name,
                    &*f.type_name,
                    f.schema.as_deref(),
                    f.offset,
                    f.len,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a", "u32", Some("k1"), 0, 2),
                ("{\"b\", NULL}", "Vec<String>", None, 2, 0)
            ]
        );
        assert_eq!(field_names(&bytes), ["a", "{\"b\", NULL}"]);
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).unwrap_err().contains("trailing"));
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(field_names(&bytes[..3]).is_empty());
    }
}
