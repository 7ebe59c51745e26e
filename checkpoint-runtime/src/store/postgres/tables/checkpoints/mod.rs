//! The `cp_checkpoints` table: every kept version of a run's checkpoint as
//! one row (retention deletes the oldest beyond `keep`, never the latest),
//! and the `cp_segments` rows of fields stored by appending ([`segments`]).

pub(in crate::store::postgres) mod meta;
pub(in crate::store::postgres) mod segments;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::store::integrity::{damaged_checkpoint, field_list};
use crate::store::postgres::conn::{from_ts, get, to_i64, to_json, to_u64, ts, Cx};
use crate::store::{checksums, verify_stored_checksums, CheckpointRecord, FieldRecord, Suspend};
use crate::Error;
use segments::{Appended, RowPlan, Segments};

/// The columns [`decode`] reads, in order, over `cp_checkpoints c`: the
/// row's, then, for a row that stores fields by appending, the segments of
/// the chains it names, in chain and stream order (see [`segments`]), then
/// its [`meta`] (the `v9_*` arrays hold the same for a row written before
/// schema version 10, and are NULL after).
macro_rules! cp_cols {
    () => {
        "c.seq, c.site_key, c.label, c.site_index, c.v9_loops, c.v9_field_names, \
         c.v9_field_types, c.v9_field_offsets, c.v9_field_lens, c.v9_field_schemas, c.data, \
         c.suspend::text, c.created_at, \
         c.checksum, c.appended, \
         CASE WHEN c.appended IS NOT NULL THEN ARRAY(SELECT s.chain FROM cp_segments s \
           WHERE s.run = c.run AND s.chain = ANY (c.chains) ORDER BY s.chain, s.hi) END, \
         CASE WHEN c.appended IS NOT NULL THEN ARRAY(SELECT s.lo FROM cp_segments s \
           WHERE s.run = c.run AND s.chain = ANY (c.chains) ORDER BY s.chain, s.hi) END, \
         CASE WHEN c.appended IS NOT NULL THEN ARRAY(SELECT s.bytes FROM cp_segments s \
           WHERE s.run = c.run AND s.chain = ANY (c.chains) ORDER BY s.chain, s.hi) END, \
         c.meta"
    };
}
pub(in crate::store::postgres) use cp_cols;

/// A checkpoint row (the [`cp_cols`] columns from `at` on) as a record of
/// run `run` (of workflow `workflow`, when known), checked against its seal
/// (see `store::integrity`; a row written before schema version 2 has none
/// and is read unchecked). Damage is an [`Error::Decode`] naming the run,
/// workflow, site and field.
pub(in crate::store::postgres) fn decode(
    run: &Arc<str>,
    workflow: Option<&str>,
    row: &Row,
    at: usize,
) -> Result<CheckpointRecord, Error> {
    decode_stored(run, workflow, row, at).map(|(cp, _)| cp)
}

/// [`decode`], with the descriptors of the fields the row stores by
/// appending (see [`segments`]).
pub(in crate::store::postgres) fn decode_stored(
    run: &Arc<str>,
    workflow: Option<&str>,
    row: &Row,
    at: usize,
) -> Result<(CheckpointRecord, Vec<Appended>), Error> {
    let seq = to_u64(get(row, at)?, "seq")?;
    let site_key: String = get(row, at + 1)?;
    let damaged = |names: &[String], field: Option<&str>, what: &str| {
        let all = field_list(names.iter().map(String::as_str));
        let field = field.unwrap_or(&all);
        damaged_checkpoint(run, seq, workflow, Some(&site_key), field, what)
    };
    let Located {
        names,
        types,
        offsets,
        lens,
        schemas,
        loops,
    } = located(row, at).map_err(|what| damaged(&[], None, &what))?;
    let bad = |field: Option<&str>, what: &str| damaged(&names, field, what);
    let mut data: Vec<u8> = get(row, at + 10)?;
    let mut stored = Vec::new();
    let n = names.len();
    if types.len() != n || offsets.len() != n || lens.len() != n || schemas.len() != n {
        return Err(bad(None, "its field arrays are of different lengths"));
    }
    if let Some(appended) = get::<Option<Vec<u8>>>(row, at + 14)? {
        let segs = Segments {
            chain: get::<Option<Vec<i64>>>(row, at + 15)?.unwrap_or_default(),
            lo: get::<Option<Vec<i64>>>(row, at + 16)?.unwrap_or_default(),
            bytes: get::<Option<Vec<Vec<u8>>>>(row, at + 17)?.unwrap_or_default(),
        };
        let sizes = lens
            .iter()
            .map(|&l| usize::try_from(l))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| bad(None, "negative field length"))?;
        (data, stored) = segments::rebuild(&appended, &sizes, &data, &segs)
            .map_err(|(i, what)| bad(i.and_then(|i| names.get(i)).map(String::as_str), &what))?;
    }
    let mut fields = Vec::with_capacity(n);
    for (((name, type_name), offset), len) in names.iter().zip(types).zip(offsets).zip(lens) {
        let bad = |what: &str| bad(Some(name), what);
        let offset = usize::try_from(offset).map_err(|_| bad("negative field offset"))?;
        let len = usize::try_from(len).map_err(|_| bad("negative field length"))?;
        if offset.checked_add(len).is_none_or(|end| end > data.len()) {
            return Err(bad("its field reference points outside the stored bytes"));
        }
        fields.push(FieldRecord {
            name: Cow::Owned(name.clone()),
            type_name: Cow::Owned(type_name),
            offset,
            len,
        });
    }
    let loops = loops
        .into_iter()
        .map(|p| to_u64(p, "loop position"))
        .collect::<Result<Vec<u64>, Error>>()
        .map_err(|_| bad(None, "negative loop position"))?;
    let suspend: Option<Suspend> = match get::<Option<String>>(row, at + 11)? {
        None => None,
        Some(json) => Some(serde_json::from_str(&json).map_err(|e| {
            bad(
                None,
                &format!("its suspension (what it waits for) does not decode: {e}"),
            )
        })?),
    };
    // Only a seal of format 1 covers it (see `CpRow::format_1_site_index`).
    let format_1_site_index = u32::try_from(get::<i32>(row, at + 3)?).ok();
    let keys: Vec<Option<Cow<'static, str>>> =
        schemas.into_iter().map(|k| k.map(Cow::Owned)).collect();
    let cp = CheckpointRecord::new(
        run.clone(),
        seq,
        Cow::Owned(site_key.clone()),
        get::<Option<String>>(row, at + 2)?.map(Cow::Owned),
        loops,
        fields,
        data,
        suspend,
        from_ts(get(row, at + 12)?),
    )
    .with_schemas(keys);
    if let Some(seal) = get::<Option<Vec<u8>>>(row, at + 13)? {
        verify_stored_checksums(&cp, &seal, format_1_site_index)
            .map_err(|m| m.to_error(&cp, workflow))?;
    }
    Ok((cp, stored))
}

/// What names and locates a row's fields, from its [`meta`] or, in a row
/// written before schema version 10, its `v9_*` arrays (the [`cp_cols`]
/// from `at`), as the arrays held it; or why it does not decode.
struct Located {
    names: Vec<String>,
    types: Vec<String>,
    offsets: Vec<i64>,
    lens: Vec<i64>,
    schemas: Vec<Option<String>>,
    loops: Vec<i64>,
}

fn located(row: &Row, at: usize) -> Result<Located, String> {
    let column = |e: Error| e.to_string();
    if let Some(bytes) = get::<Option<Vec<u8>>>(row, at + 18).map_err(column)? {
        let meta = meta::decode(&bytes)
            .map_err(|e| format!("what names and locates its fields does not decode: {e}"))?;
        let big = |n: u64| i64::try_from(n).map_err(|_| format!("{n} is out of range"));
        let mut out = Located {
            names: Vec::with_capacity(meta.fields.len()),
            types: Vec::with_capacity(meta.fields.len()),
            offsets: Vec::with_capacity(meta.fields.len()),
            lens: Vec::with_capacity(meta.fields.len()),
            schemas: Vec::with_capacity(meta.fields.len()),
            loops: meta
                .loops
                .iter()
                .map(|&l| big(l))
                .collect::<Result<_, _>>()?,
        };
        for f in meta.fields {
            out.offsets.push(big(f.offset)?);
            out.lens.push(big(f.len)?);
            out.names.push(f.name.into_owned());
            out.types.push(f.type_name.into_owned());
            out.schemas.push(f.schema.map(Cow::into_owned));
        }
        return Ok(out);
    }
    Ok(Located {
        loops: before_meta(row, at + 4, "loops")?,
        names: before_meta(row, at + 5, "field names")?,
        types: before_meta(row, at + 6, "field types")?,
        offsets: before_meta(row, at + 7, "field offsets")?,
        lens: before_meta(row, at + 8, "field lengths")?,
        schemas: before_meta(row, at + 9, "schema keys")?,
    })
}

/// Column `i` of a row written before schema version 10 (`what` it holds),
/// or why it cannot be read.
fn before_meta<'r, T: tokio_postgres::types::FromSql<'r>>(
    row: &'r Row,
    i: usize,
    what: &str,
) -> Result<T, String> {
    get::<Option<T>>(row, i)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!("it has neither `meta` nor its {what} (the columns before version 10)")
        })
}

/// [`decode`] for a listing of versions: a damaged one (an
/// [`Error::Decode`]) is the stand-in [`CheckpointRecord::damaged`], so
/// that the others are still listed.
pub(in crate::store::postgres) fn decode_listed(
    run: &Arc<str>,
    workflow: Option<&str>,
    row: &Row,
    at: usize,
) -> Result<CheckpointRecord, Error> {
    match decode(run, workflow, row, at) {
        Err(error @ Error::Decode { .. }) => {
            let seq = to_u64(get(row, at)?, "seq")?;
            let site = get::<String>(row, at + 1).ok();
            let label = get::<Option<String>>(row, at + 2).ok().flatten();
            let created_at = from_ts(get(row, at + 12)?);
            Ok(CheckpointRecord::damaged(
                run.clone(),
                seq,
                site,
                label,
                created_at,
                error,
            ))
        }
        other => other,
    }
}

/// The columns [`insert`] writes, in the order of its parameters
/// ([`CpRow::params`]: `$1` to `$10`).
macro_rules! cp_insert_cols {
    () => {
        "run, seq, site_key, label, site_index, meta, data, suspend, created_at, checksum"
    };
}
pub(in crate::store::postgres) use cp_insert_cols;

/// A checkpoint as the row [`insert`] writes (its seal computed), for
/// [`insert`] and for the statements of `ops` that insert it along with
/// other writes (the checkpoint save).
pub(in crate::store::postgres) struct CpRow<'a> {
    run: &'a str,
    seq: i64,
    site_key: &'a str,
    label: Option<&'a str>,
    /// The `site_index` column: the site's 0-based index in its workflow's
    /// site table, which seals of format 1 (before 2026-12-05) covered and
    /// nothing else reads. Rows written since hold 0 (the column stays, so
    /// that older rows keep it and older schemas take these inserts).
    format_1_site_index: i32,
    /// See [`meta`].
    meta: Vec<u8>,
    data: &'a [u8],
    suspend: Option<String>,
    created_at: i64,
    checksum: Vec<u8>,
    /// The `appended` and `chains` columns (see [`segments`]).
    appended: Option<&'a [u8]>,
    chains: Option<&'a [i64]>,
}

impl<'a> CpRow<'a> {
    /// `cp` stored as `plan` says (see [`segments::plan`]), or whole.
    pub(in crate::store::postgres) fn planned(
        cp: &'a CheckpointRecord,
        plan: Option<&'a RowPlan>,
    ) -> Result<CpRow<'a>, Error> {
        let mut row = CpRow::of(cp)?;
        if let Some(plan) = plan {
            row.data = &plan.data;
            row.appended = Some(&plan.encoded);
            row.chains = Some(&plan.chains);
        }
        Ok(row)
    }

    pub(in crate::store::postgres) fn of(cp: &'a CheckpointRecord) -> Result<CpRow<'a>, Error> {
        // Read back as `bigint`s (see `located`).
        for &p in &cp.loops {
            to_i64(p, "loop position")?;
        }
        for f in cp.fields.iter() {
            to_i64(f.offset as u64, "field offset")?;
            to_i64(f.len as u64, "field length")?;
        }
        let suspend = cp.suspend.as_ref().map(to_json).transpose()?;
        let checksum = checksums(cp);
        Ok(CpRow {
            run: &cp.run,
            seq: to_i64(cp.seq, "seq")?,
            site_key: &cp.site_key,
            label: cp.label.as_deref(),
            format_1_site_index: 0,
            meta: meta::encode(cp)?,
            data: &cp.data,
            suspend,
            created_at: ts(cp.created_at),
            checksum,
            appended: None,
            chains: None,
        })
    }

    /// The values of the `appended` and `chains` columns.
    pub(in crate::store::postgres) fn stored(&self) -> [&(dyn ToSql + Sync); 2] {
        [&self.appended, &self.chains]
    }

    /// The values of the [`cp_insert_cols`], in order (`suspend` is JSON
    /// text, to be cast: `$8::text::jsonb`).
    pub(in crate::store::postgres) fn params(&self) -> [&(dyn ToSql + Sync); 10] {
        [
            &self.run,
            &self.seq,
            &self.site_key,
            &self.label,
            &self.format_1_site_index,
            &self.meta,
            &self.data,
            &self.suspend,
            &self.created_at,
            &self.checksum,
        ]
    }
}

/// The checkpoint rows of several saves as the columns one statement
/// unnests (see `save_batch`): one element per row. A row's chains go as
/// one array literal, which the statement casts (`::bigint[]`):
/// flattening them into a column of its own and gathering them again per
/// row with `array_agg(.. ORDER BY ..)` cost a sort per row and array.
#[derive(Default)]
pub(in crate::store::postgres) struct CpColumns<'a> {
    pub(in crate::store::postgres) run: Vec<&'a str>,
    pub(in crate::store::postgres) seq: Vec<i64>,
    pub(in crate::store::postgres) site_key: Vec<&'a str>,
    pub(in crate::store::postgres) label: Vec<Option<&'a str>>,
    pub(in crate::store::postgres) format_1_site_index: Vec<i32>,
    pub(in crate::store::postgres) data: Vec<&'a [u8]>,
    pub(in crate::store::postgres) suspend: Vec<Option<&'a str>>,
    pub(in crate::store::postgres) created_at: Vec<i64>,
    pub(in crate::store::postgres) checksum: Vec<&'a [u8]>,
    pub(in crate::store::postgres) appended: Vec<Option<&'a [u8]>>,
    pub(in crate::store::postgres) meta: Vec<&'a [u8]>,
    /// `None` for a row without chains (the column is then NULL).
    pub(in crate::store::postgres) chains: Vec<Option<String>>,
}

impl<'a> CpColumns<'a> {
    /// Adds `row`.
    pub(in crate::store::postgres) fn push(&mut self, row: &'a CpRow<'a>) {
        self.run.push(row.run);
        self.seq.push(row.seq);
        self.site_key.push(row.site_key);
        self.label.push(row.label);
        self.format_1_site_index.push(row.format_1_site_index);
        self.data.push(row.data);
        self.suspend.push(row.suspend.as_deref());
        self.created_at.push(row.created_at);
        self.checksum.push(&row.checksum);
        self.appended.push(row.appended);
        self.meta.push(&row.meta);
        self.chains
            .push(row.chains.filter(|c| !c.is_empty()).map(numbers_literal));
    }
}

/// The array literal of `values` (`{1,2,3}`), as `array_in` reads it back.
pub(in crate::store::postgres) fn numbers_literal(values: &[i64]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(2 + values.len() * 4);
    out.push('{');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Writing to a `String` cannot fail.
        let _ = write!(out, "{v}");
    }
    out.push('}');
    out
}

/// Inserts a checkpoint row.
pub(in crate::store::postgres) async fn insert(
    cx: &mut Cx<'_>,
    cp: &CheckpointRecord,
) -> Result<(), Error> {
    const SQL: &str = concat!(
        "INSERT INTO cp_checkpoints (",
        cp_insert_cols!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::jsonb, $9, $10)"
    );
    let row = CpRow::of(cp)?;
    cx.execute(SQL, &row.params()).await?;
    Ok(())
}

/// Inserts `cp`, saved by its run, inside the caller's transaction, with
/// its `CheckpointSaved` event: the row's `event_id`, the next id of the
/// history (see the schema's version 5).
pub(in crate::store::postgres) async fn insert_saved(
    cx: &mut Cx<'_>,
    cp: &CheckpointRecord,
) -> Result<(), Error> {
    const SQL: &str = concat!(
        "INSERT INTO cp_checkpoints (",
        cp_insert_cols!(),
        ", event_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::jsonb, $9, $10, \
         nextval('cp_history_id_seq'))"
    );
    let row = CpRow::of(cp)?;
    cx.execute(SQL, &row.params()).await?;
    Ok(())
}

/// Checkpoint `seq` of run `id` (of workflow `workflow`), if kept (`seq`
/// 0, or one above `i64::MAX`: none).
pub(in crate::store::postgres) async fn load_seq(
    cx: &mut Cx<'_>,
    id: &str,
    workflow: &str,
    seq: u64,
) -> Result<Option<Arc<CheckpointRecord>>, Error> {
    Ok(load_seq_checked(cx, id, workflow, seq)
        .await??
        .map(|(cp, _)| cp))
}

/// What [`load_seq_checked`] finds for one run.
pub(in crate::store::postgres) type Found =
    Result<Option<(Arc<CheckpointRecord>, Vec<Appended>)>, Error>;

/// [`load_seq_checked`] for many runs at once (`runs`: id, workflow and
/// seq), in one query: what it finds for each run with a checkpoint to
/// load, by id (a run whose seq is 0 has none: it is left out).
pub(in crate::store::postgres) async fn load_seqs_checked(
    cx: &mut Cx<'_>,
    runs: &[(&str, &str, u64)],
) -> Result<HashMap<String, Found>, Error> {
    const SQL: &str = concat!(
        "SELECT c.run, ",
        cp_cols!(),
        " FROM unnest($1::text[], $2::bigint[]) AS w (run, seq) \
         JOIN cp_checkpoints c ON c.run = w.run AND c.seq = w.seq"
    );
    let mut found: HashMap<String, Found> = HashMap::new();
    let (mut ids, mut seqs) = (Vec::new(), Vec::new());
    for &(id, _, seq) in runs {
        match i64::try_from(seq) {
            Ok(0) => {}
            Ok(seq) => {
                ids.push(id);
                seqs.push(seq);
                found.insert(id.to_owned(), Ok(None));
            }
            // Stored as `bigint`: a larger one names nothing.
            Err(_) => {
                found.insert(id.to_owned(), Ok(None));
            }
        }
    }
    if ids.is_empty() {
        return Ok(found);
    }
    let workflows: HashMap<&str, &str> = runs.iter().map(|&(id, wf, _)| (id, wf)).collect();
    for row in cx.query(SQL, &[&ids, &seqs]).await? {
        let id: String = get(&row, 0)?;
        let run: Arc<str> = Arc::from(id.as_str());
        let workflow = workflows.get(id.as_str()).copied();
        let cp = decode_stored(&run, workflow, &row, 1).map(|(cp, a)| Some((Arc::new(cp), a)));
        found.insert(id, cp);
    }
    Ok(found)
}

/// Like [`load_seq`], with the descriptors of the fields stored by
/// appending, telling a database error (outside, the transaction is then
/// unusable) from a stored row this build cannot decode (inside).
#[allow(clippy::type_complexity)]
pub(in crate::store::postgres) async fn load_seq_checked(
    cx: &mut Cx<'_>,
    id: &str,
    workflow: &str,
    seq: u64,
) -> Result<Result<Option<(Arc<CheckpointRecord>, Vec<Appended>)>, Error>, Error> {
    const SQL: &str = concat!(
        "SELECT ",
        cp_cols!(),
        " FROM cp_checkpoints c WHERE c.run = $1 AND c.seq = $2"
    );
    // Sequence numbers are stored as `bigint`: a larger one names nothing.
    let Ok(seq) = i64::try_from(seq) else {
        return Ok(Ok(None));
    };
    if seq == 0 {
        return Ok(Ok(None));
    }
    let run: Arc<str> = Arc::from(id);
    Ok(cx
        .query_opt(SQL, &[&id, &seq])
        .await?
        .map(|row| decode_stored(&run, Some(workflow), &row, 0).map(|(cp, a)| (Arc::new(cp), a)))
        .transpose())
}
