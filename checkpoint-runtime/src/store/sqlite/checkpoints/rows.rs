//! One checkpoint row read back into a [`CheckpointRecord`], with the rows
//! it references.

use std::borrow::Cow;
use std::sync::Arc;

use rusqlite::Connection;

use super::refs::{Shape, Source, Sources, StoredRefs};
use super::{Loc, Located};
use crate::store::sql::from_ts;
use crate::store::sqlite::error::{corrupt, to_u64, Fail, R};
use crate::store::{CheckpointRecord, FieldRecord, Suspend};

pub(in crate::store::sqlite) const CP_COLS: &str =
    "c.id, c.seq, c.shape, c.created_at, c.loops, c.suspend, c.size, c.refs, \
                       c.data, s.body";

pub(in crate::store::sqlite) const CP_FROM: &str =
    "FROM checkpoints c JOIN shapes s ON s.id = c.shape";

pub(in crate::store::sqlite) struct CpRow {
    pub(in crate::store::sqlite) id: i64,
    pub(in crate::store::sqlite) seq: i64,
    pub(in crate::store::sqlite) shape: i64,
    pub(in crate::store::sqlite) created_at: i64,
    pub(in crate::store::sqlite) loops: Option<Vec<u8>>,
    pub(in crate::store::sqlite) suspend: Option<String>,
    pub(in crate::store::sqlite) size: Option<i64>,
    pub(in crate::store::sqlite) refs: Option<Vec<u8>>,
    pub(in crate::store::sqlite) data: Option<Vec<u8>>,
    pub(in crate::store::sqlite) body: Vec<u8>,
}

impl CpRow {
    pub(in crate::store::sqlite) fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<CpRow> {
        Ok(CpRow {
            id: r.get(0)?,
            seq: r.get(1)?,
            shape: r.get(2)?,
            created_at: r.get(3)?,
            loops: r.get(4)?,
            suspend: r.get(5)?,
            size: r.get(6)?,
            refs: r.get(7)?,
            data: r.get(8)?,
            body: r.get(9)?,
        })
    }
}

/// The row whose fields [`gather_fields`] collects.
struct Gather<'c> {
    conn: &'c Connection,
    ord: i64,
    own_id: u64,
    /// The row's own bytes.
    own: Vec<u8>,
    /// The record's size.
    size: usize,
}

/// The data of a record whose fields reference their bytes (in the row
/// itself or in older rows of the run), with its fields and their resolved
/// locations pushed to `fields` and `locs`.
fn gather_fields(
    row: Gather<'_>,
    shape_fields: Vec<(Cow<'_, str>, Cow<'_, str>)>,
    refs: &[Loc],
    sources: &mut Sources,
    fields: &mut Vec<FieldRecord>,
    locs: &mut Vec<Loc>,
    bad: &dyn Fn(&str) -> Fail,
) -> R<Vec<u8>> {
    let Gather {
        conn,
        ord,
        own_id,
        own,
        size,
    } = row;
    let mut data = Vec::with_capacity(size);
    for ((name, type_name), &(src, off, len)) in shape_fields.into_iter().zip(refs) {
        let offset = data.len();
        if len > 0 {
            let src = if src == 0 { own_id } else { src };
            let bytes = if src == own_id {
                let start = usize::try_from(off).map_err(|_| bad("bad offset"))?;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|l| start.checked_add(l))
                    .ok_or_else(|| bad("bad length"))?;
                own.get(start..end)
            } else {
                sources.get(conn, ord, src)?.slice(off, len)
            };
            data.extend_from_slice(bytes.ok_or_else(|| bad("field reference out of range"))?);
            locs.push((src, off, len));
        } else {
            locs.push((0, 0, 0));
        }
        fields.push(FieldRecord {
            name: Cow::Owned(name.into_owned()),
            type_name: Cow::Owned(type_name.into_owned()),
            offset,
            len: data.len() - offset,
        });
    }
    if !own.is_empty() {
        sources.insert(
            own_id,
            Source {
                data: own,
                segments: None,
            },
        );
    }
    Ok(data)
}

/// The fields of a record stored whole (not tiled): each at its own offset
/// in the row's data, pushed to `fields` and `locs`.
fn raw_fields(
    shape_fields: Vec<(Cow<'_, str>, Cow<'_, str>)>,
    refs: &[Loc],
    own_id: u64,
    fields: &mut Vec<FieldRecord>,
    locs: &mut Vec<Loc>,
    bad: &dyn Fn(&str) -> Fail,
) -> R<()> {
    for ((name, type_name), &(_, off, len)) in shape_fields.into_iter().zip(refs) {
        fields.push(FieldRecord {
            name: Cow::Owned(name.into_owned()),
            type_name: Cow::Owned(type_name.into_owned()),
            offset: usize::try_from(off).map_err(|_| bad("bad offset"))?,
            len: usize::try_from(len).map_err(|_| bad("bad length"))?,
        });
        locs.push((own_id, off, len));
    }
    Ok(())
}

/// The loop positions and the suspension of a checkpoint row (its `loops`
/// and `suspend` columns).
fn loops_and_suspension(
    loops: &Option<Vec<u8>>,
    suspend: &Option<String>,
    bad: &dyn Fn(&str) -> Fail,
) -> R<(Vec<u64>, Option<Suspend>)> {
    let loops: Vec<u64> = match loops {
        None => Vec::new(),
        Some(b) => postcard::from_bytes(b).map_err(|_| bad("undecodable loop positions"))?,
    };
    let suspend: Option<Suspend> = match suspend {
        None => None,
        Some(s) => Some(serde_json::from_str(s).map_err(|_| bad("undecodable suspension"))?),
    };
    Ok((loops, suspend))
}

/// Schema keys as a record keeps them.
fn owned_keys(keys: Vec<Option<Cow<'_, str>>>) -> Vec<Option<Cow<'static, str>>> {
    keys.into_iter()
        .map(|k| k.map(|k| Cow::Owned(k.into_owned())))
        .collect()
}

/// Rebuilds a checkpoint record from its row and the rows it references.
pub(in crate::store::sqlite) fn decode_checkpoint(
    conn: &Connection,
    ord: i64,
    run: &Arc<str>,
    row: CpRow,
    sources: &mut Sources,
) -> R<Located> {
    let seq = to_u64(row.seq, "seq")?;
    let bad = |what: &str| corrupt(format_args!("checkpoint #{seq} of run `{run}`: {what}"));
    let shape: Shape<'_> = postcard::from_bytes(&row.body).map_err(|_| bad("undecodable shape"))?;
    let (Some(size), Some(refs)) = (row.size, row.refs) else {
        return Err(bad("its bytes were pruned"));
    };
    let refs: StoredRefs =
        postcard::from_bytes(&refs).map_err(|_| bad("undecodable field references"))?;
    if shape.fields.len() != refs.fields.len() {
        return Err(bad("field list and references differ in length"));
    }
    let size = usize::try_from(size).map_err(|_| bad("bad size"))?;
    let own_id = to_u64(row.id, "row id")?;
    let own = row.data.unwrap_or_default();
    let mut fields = Vec::with_capacity(refs.fields.len());
    let mut locs = Vec::with_capacity(refs.fields.len());
    let data = if refs.raw {
        raw_fields(
            shape.fields,
            &refs.fields,
            own_id,
            &mut fields,
            &mut locs,
            &bad,
        )?;
        own
    } else {
        let row = Gather {
            conn,
            ord,
            own_id,
            own,
            size,
        };
        gather_fields(
            row,
            shape.fields,
            &refs.fields,
            sources,
            &mut fields,
            &mut locs,
            &bad,
        )?
    };
    if data.len() != size {
        return Err(bad("size does not match the stored bytes"));
    }
    let (loops, suspend) = loops_and_suspension(&row.loops, &row.suspend, &bad)?;
    let mut cp = CheckpointRecord::new(
        run.clone(),
        seq,
        Cow::Owned(shape.site_key.into_owned()),
        shape.label.map(|l| Cow::Owned(l.into_owned())),
        shape.site_index,
        loops,
        fields,
        data,
        suspend,
        from_ts(row.created_at),
    );
    if !shape.schemas.is_empty() {
        cp = cp.with_schemas(owned_keys(shape.schemas));
    }
    Ok(Located {
        cp: Arc::new(cp),
        id: own_id,
        shape: row.shape,
        locs,
    })
}

/// Whether `cp`'s data is exactly its fields, concatenated in order.
pub(in crate::store::sqlite) fn is_tiled(cp: &CheckpointRecord) -> bool {
    let mut at = 0usize;
    for f in &cp.fields {
        if f.offset != at {
            return false;
        }
        match at.checked_add(f.len) {
            Some(end) => at = end,
            None => return false,
        }
    }
    at == cp.data.len()
}
