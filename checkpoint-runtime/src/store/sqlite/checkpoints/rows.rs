//! One checkpoint row read back into a [`CheckpointRecord`], with the rows
//! it references.

use std::borrow::Cow;
use std::sync::Arc;

use rusqlite::Connection;

use super::delta::{append_segments, Delta};
use super::refs::{decode_refs, Shape, Source, Sources};
use super::{bytes, Loc, Located};
use crate::store::integrity::field_sums;
use crate::store::integrity::{damaged_checkpoint, field_list};
use crate::store::sql::from_ts;
use crate::store::sqlite::error::{to_u64, Fail, R};
use crate::store::{verify_stored_checksums, CheckpointRecord, FieldRecord, Suspend};

pub(in crate::store::sqlite) const CP_COLS: &str =
    "c.id, c.seq, c.shape, c.created_at, c.loops, c.suspend, c.size, c.refs, \
                       c.data, s.body, c.checksum";

/// Over `checkpoints c` and its shape `s`. A `LEFT JOIN`: a row whose shape
/// is missing is still read, and reported as damaged.
pub(in crate::store::sqlite) const CP_FROM: &str =
    "FROM checkpoints c LEFT JOIN shapes s ON s.id = c.shape";

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
    /// `None`: the shape is missing.
    pub(in crate::store::sqlite) body: Option<Vec<u8>>,
    /// The seal (see `store::integrity`); `None` for rows written before
    /// schema version 2, which are read unchecked.
    pub(in crate::store::sqlite) checksum: Option<Vec<u8>>,
}

impl CpRow {
    pub(in crate::store::sqlite) fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<CpRow> {
        Ok(CpRow {
            id: r.get(0)?,
            seq: r.get(1)?,
            shape: r.get(2)?,
            created_at: r.get(3)?,
            loops: bytes(r, 4)?,
            suspend: r.get(5)?,
            size: r.get(6)?,
            refs: bytes(r, 7)?,
            data: bytes(r, 8)?,
            body: bytes(r, 9)?,
            checksum: bytes(r, 10)?,
        })
    }
}

/// A damaged checkpoint row, named as far as it could be read: the errors
/// of [`decode_checkpoint`] name the run, its workflow, the site and the
/// field.
struct Naming<'a> {
    conn: &'a Connection,
    ord: i64,
    run: &'a str,
    seq: u64,
    site: Option<String>,
    fields: Vec<String>,
}

impl Naming<'_> {
    /// The error for `what` is wrong with field `field` (`None`: with
    /// every field, or with no field in particular).
    fn err(&self, field: Option<&str>, what: &str) -> Fail {
        let all;
        let field = match field {
            Some(f) => f,
            None => {
                all = field_list(self.fields.iter().map(String::as_str));
                &all
            }
        };
        let workflow = workflow_of(self.conn, self.ord);
        Fail::from(damaged_checkpoint(
            self.run,
            self.seq,
            workflow.as_deref(),
            self.site.as_deref(),
            field,
            what,
        ))
    }

    /// `fail`, from reading the rows field `field`'s bytes are in, as an
    /// error naming the field when it is damage.
    fn source_err(&self, field: &str, fail: Fail) -> Fail {
        match fail.corrupt_detail() {
            Some(detail) => self.err(Some(field), &format!("its bytes cannot be read: {detail}")),
            None => fail,
        }
    }
}

/// The workflow of run `ord`, if its row can be read (for error messages).
fn workflow_of(conn: &Connection, ord: i64) -> Option<String> {
    conn.prepare_cached("SELECT CAST(workflow AS TEXT) FROM runs WHERE ord = ?1")
        .ok()?
        .query_row([ord], |r| r.get(0))
        .ok()
}

/// The most a record's data is allocated for before its bytes are read
/// (beyond it, the buffer grows as they are).
const PREALLOCATE_AT_MOST: usize = 1 << 20;

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
/// itself or in older rows of the run; for a field stored by appending,
/// its header, base and segments), with its fields and their resolved
/// locations pushed to `fields` and `locs`.
#[allow(clippy::too_many_arguments)]
fn gather_fields(
    row: Gather<'_>,
    shape_fields: Vec<(Cow<'_, str>, Cow<'_, str>)>,
    refs: &[Loc],
    deltas: &[Delta],
    sources: &mut Sources,
    fields: &mut Vec<FieldRecord>,
    locs: &mut Vec<Loc>,
    naming: &Naming<'_>,
) -> R<Vec<u8>> {
    let Gather {
        conn,
        ord,
        own_id,
        own,
        size,
    } = row;
    // `size` is as stored: a damaged one must not ask for terabytes.
    let mut data = Vec::with_capacity(size.min(PREALLOCATE_AT_MOST));
    let mut deltas = deltas.iter().peekable();
    for (i, ((name, type_name), &(src, off, len))) in shape_fields.into_iter().zip(refs).enumerate()
    {
        let bad = |what: &str| naming.err(Some(&name), what);
        let offset = data.len();
        let delta = deltas.next_if(|d| d.field as usize == i);
        if let Some(d) = delta {
            data.extend_from_slice(&d.header);
        }
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
                sources
                    .get(conn, ord, src)
                    .map_err(|e| naming.source_err(&name, e))?
                    .slice(off, len)
            };
            data.extend_from_slice(
                bytes.ok_or_else(|| bad("its field reference points outside the stored bytes"))?,
            );
            locs.push((src, off, len));
        } else {
            locs.push((0, 0, 0));
        }
        if let Some(d) = delta {
            append_segments(conn, ord, d, &mut data).map_err(|e| naming.source_err(&name, e))?;
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
/// in the row's data (`len` bytes), pushed to `fields` and `locs`.
fn raw_fields(
    shape_fields: Vec<(Cow<'_, str>, Cow<'_, str>)>,
    refs: &[Loc],
    (own_id, len): (u64, usize),
    fields: &mut Vec<FieldRecord>,
    locs: &mut Vec<Loc>,
    naming: &Naming<'_>,
) -> R<()> {
    for ((name, type_name), &(_, off, n)) in shape_fields.into_iter().zip(refs) {
        let bad = |what: &str| naming.err(Some(&name), what);
        let offset = usize::try_from(off).map_err(|_| bad("bad offset"))?;
        let n_bytes = usize::try_from(n).map_err(|_| bad("bad length"))?;
        if offset.checked_add(n_bytes).is_none_or(|end| end > len) {
            return Err(bad("its field reference points outside the stored bytes"));
        }
        fields.push(FieldRecord {
            name: Cow::Owned(name.into_owned()),
            type_name: Cow::Owned(type_name.into_owned()),
            offset,
            len: n_bytes,
        });
        locs.push((own_id, off, n));
    }
    Ok(())
}

/// The loop positions and the suspension of a checkpoint row (its `loops`
/// and `suspend` columns).
fn loops_and_suspension(
    loops: &Option<Vec<u8>>,
    suspend: &Option<String>,
    naming: &Naming<'_>,
) -> R<(Vec<u64>, Option<Suspend>)> {
    let loops: Vec<u64> = match loops {
        None => Vec::new(),
        Some(b) => postcard::from_bytes(b)
            .map_err(|_| naming.err(None, "its loop positions do not decode"))?,
    };
    let suspend: Option<Suspend> =
        match suspend {
            None => None,
            Some(s) => Some(serde_json::from_str(s).map_err(|_| {
                naming.err(None, "its suspension (what it waits for) does not decode")
            })?),
        };
    Ok((loops, suspend))
}

/// Schema keys as a record keeps them.
fn owned_keys(keys: Vec<Option<Cow<'_, str>>>) -> Vec<Option<Cow<'static, str>>> {
    keys.into_iter()
        .map(|k| k.map(|k| Cow::Owned(k.into_owned())))
        .collect()
}

/// Rebuilds a checkpoint record from its row and the rows it references,
/// and checks it against its seal (see `store::integrity`). Damage is an
/// [`Error::Decode`](crate::Error::Decode) naming the run, its workflow, the
/// site and the field (see [`Fail::is_damage`]).
pub(in crate::store::sqlite) fn decode_checkpoint(
    conn: &Connection,
    ord: i64,
    run: &Arc<str>,
    row: CpRow,
    sources: &mut Sources,
) -> R<Located> {
    let seq = to_u64(row.seq, "seq")?;
    let mut naming = Naming {
        conn,
        ord,
        run,
        seq,
        site: None,
        fields: Vec::new(),
    };
    let Some(body) = &row.body else {
        let what = format!(
            "it refers to shape {} (its site and field list), which is missing from the store",
            row.shape
        );
        return Err(naming.err(None, &what));
    };
    let shape: Shape<'_> = postcard::from_bytes(body).map_err(|_| {
        let what = format!(
            "its shape {} (site and field list) does not decode",
            row.shape
        );
        naming.err(None, &what)
    })?;
    naming.site = Some(shape.site_key.to_string());
    naming.fields = shape.fields.iter().map(|(n, _)| n.to_string()).collect();
    let (Some(size), Some(refs)) = (row.size, row.refs) else {
        return Err(naming.err(None, "its bytes were pruned"));
    };
    let (refs, deltas) =
        decode_refs(&refs).map_err(|_| naming.err(None, "its field references do not decode"))?;
    if shape.fields.len() != refs.fields.len() {
        let what = format!(
            "its field references ({}) and its field list ({}) differ in length",
            refs.fields.len(),
            shape.fields.len()
        );
        return Err(naming.err(None, &what));
    }
    let size = usize::try_from(size).map_err(|_| naming.err(None, "bad size"))?;
    let own_id = to_u64(row.id, "row id")?;
    let own = row.data.unwrap_or_default();
    let mut fields = Vec::with_capacity(refs.fields.len());
    let mut locs = Vec::with_capacity(refs.fields.len());
    let data = if refs.raw {
        let at = (own_id, own.len());
        raw_fields(
            shape.fields,
            &refs.fields,
            at,
            &mut fields,
            &mut locs,
            &naming,
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
        let shape_fields = shape.fields;
        gather_fields(
            row,
            shape_fields,
            &refs.fields,
            &deltas,
            sources,
            &mut fields,
            &mut locs,
            &naming,
        )?
    };
    if data.len() != size {
        return Err(naming.err(None, "its size does not match the stored bytes"));
    }
    let (loops, suspend) = loops_and_suspension(&row.loops, &row.suspend, &naming)?;
    let shape_index = shape.format_1_site_index;
    let mut cp = CheckpointRecord::new(
        run.clone(),
        seq,
        Cow::Owned(shape.site_key.into_owned()),
        shape.label.map(|l| Cow::Owned(l.into_owned())),
        loops,
        fields,
        data,
        suspend,
        from_ts(row.created_at),
    );
    if !shape.schemas.is_empty() {
        cp = cp.with_schemas(owned_keys(shape.schemas));
    }
    if let Some(seal) = &row.checksum {
        if let Err(mismatch) = verify_stored_checksums(&cp, seal, Some(shape_index)) {
            let workflow = workflow_of(conn, ord);
            return Err(Fail::from(mismatch.to_error(&cp, workflow.as_deref())));
        }
    }
    // Checked above against the record's fields.
    let sums = row.checksum.as_deref().and_then(field_sums);
    Ok(Located {
        cp: Arc::new(cp),
        id: own_id,
        shape: row.shape,
        locs,
        deltas,
        sums: sums.unwrap_or_default(),
    })
}

/// [`decode_checkpoint`] for a listing of versions: a damaged one is the
/// stand-in [`CheckpointRecord::damaged`] (its site and label as far as
/// they can be read), so that the others are still listed.
pub(in crate::store::sqlite) fn decode_listed(
    conn: &Connection,
    ord: i64,
    run: &Arc<str>,
    row: CpRow,
    sources: &mut Sources,
) -> R<Arc<CheckpointRecord>> {
    let (seq, at) = (row.seq, row.created_at);
    let shape = row.body.as_deref().and_then(|b| {
        let s: Shape<'_> = postcard::from_bytes(b).ok()?;
        Some((s.site_key.into_owned(), s.label.map(Cow::into_owned)))
    });
    match decode_checkpoint(conn, ord, run, row, sources) {
        Ok(located) => Ok(located.cp),
        Err(fail) if fail.is_damage() => {
            let (site, label) = shape.unzip();
            Ok(Arc::new(CheckpointRecord::damaged(
                run.clone(),
                to_u64(seq, "seq")?,
                site,
                label.flatten(),
                from_ts(at),
                fail.into_error(),
            )))
        }
        Err(fail) => Err(fail),
    }
}

pub(in crate::store::sqlite) use crate::store::delta::is_tiled;
