//! The `cp_checkpoints` table: every kept version of a run's checkpoint as
//! one row (retention deletes the oldest beyond `keep`, never the latest).

use std::borrow::Cow;
use std::sync::Arc;

use tokio_postgres::Row;

use crate::store::postgres::conn::{corrupt, from_ts, get, to_i64, to_json, to_u64, ts, Cx};
use crate::store::{CheckpointRecord, FieldRecord, Suspend};
use crate::Error;

/// The columns [`decode`] reads, in order, over `cp_checkpoints c`.
macro_rules! cp_cols {
    () => {
        "c.seq, c.site_key, c.label, c.site_index, c.loops, c.field_names, c.field_types, \
         c.field_offsets, c.field_lens, c.field_schemas, c.data, c.suspend::text, c.created_at"
    };
}
pub(in crate::store::postgres) use cp_cols;

/// A checkpoint row (the [`cp_cols`] columns from `at` on) as a record.
pub(in crate::store::postgres) fn decode(
    run: &Arc<str>,
    row: &Row,
    at: usize,
) -> Result<CheckpointRecord, Error> {
    let seq = to_u64(get(row, at)?, "seq")?;
    let bad = |what: &str| corrupt(format_args!("run `{run}` checkpoint #{seq}: {what}"));
    let names: Vec<String> = get(row, at + 5)?;
    let types: Vec<String> = get(row, at + 6)?;
    let offsets: Vec<i64> = get(row, at + 7)?;
    let lens: Vec<i64> = get(row, at + 8)?;
    let schemas: Vec<Option<String>> = get(row, at + 9)?;
    let n = names.len();
    if types.len() != n || offsets.len() != n || lens.len() != n || schemas.len() != n {
        return Err(bad("field arrays of different lengths"));
    }
    let mut fields = Vec::with_capacity(n);
    for (((name, type_name), offset), len) in names.into_iter().zip(types).zip(offsets).zip(lens) {
        fields.push(FieldRecord {
            name: Cow::Owned(name),
            type_name: Cow::Owned(type_name),
            offset: usize::try_from(offset).map_err(|_| bad("negative field offset"))?,
            len: usize::try_from(len).map_err(|_| bad("negative field length"))?,
        });
    }
    let loops = get::<Vec<i64>>(row, at + 4)?
        .into_iter()
        .map(|p| to_u64(p, "loop position"))
        .collect::<Result<Vec<u64>, Error>>()?;
    let suspend: Option<Suspend> = match get::<Option<String>>(row, at + 11)? {
        None => None,
        Some(json) => {
            Some(serde_json::from_str(&json).map_err(|e| bad(&format!("suspension: {e}")))?)
        }
    };
    let site_index = u32::try_from(get::<i32>(row, at + 3)?).map_err(|_| bad("site index"))?;
    let keys: Vec<Option<Cow<'static, str>>> =
        schemas.into_iter().map(|k| k.map(Cow::Owned)).collect();
    Ok(CheckpointRecord::new(
        run.clone(),
        seq,
        Cow::Owned(get(row, at + 1)?),
        get::<Option<String>>(row, at + 2)?.map(Cow::Owned),
        site_index,
        loops,
        fields,
        get(row, at + 10)?,
        suspend,
        from_ts(get(row, at + 12)?),
    )
    .with_schemas(keys))
}

/// Inserts a checkpoint row.
pub(in crate::store::postgres) async fn insert(
    cx: &mut Cx<'_>,
    cp: &CheckpointRecord,
) -> Result<(), Error> {
    let run: &str = &cp.run;
    let loops = cp
        .loops
        .iter()
        .map(|p| to_i64(*p, "loop position"))
        .collect::<Result<Vec<i64>, Error>>()?;
    let names: Vec<&str> = cp.fields.iter().map(|f| &*f.name).collect();
    let types: Vec<&str> = cp.fields.iter().map(|f| &*f.type_name).collect();
    let offsets = cp
        .fields
        .iter()
        .map(|f| to_i64(f.offset as u64, "field offset"))
        .collect::<Result<Vec<i64>, Error>>()?;
    let lens = cp
        .fields
        .iter()
        .map(|f| to_i64(f.len as u64, "field length"))
        .collect::<Result<Vec<i64>, Error>>()?;
    let schemas: Vec<Option<&str>> = (0..cp.fields.len()).map(|i| cp.schema_key(i)).collect();
    let suspend = cp.suspend.as_ref().map(to_json).transpose()?;
    let site_index = i32::try_from(cp.site_index)
        .map_err(|_| Error::internal(format!("site index {} is too large", cp.site_index)))?;
    cx.execute(
        "INSERT INTO cp_checkpoints (run, seq, site_key, label, site_index, loops, \
         field_names, field_types, field_offsets, field_lens, field_schemas, data, suspend, \
         created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::text::jsonb, $14)",
        &[
            &run,
            &to_i64(cp.seq, "seq")?,
            &&*cp.site_key,
            &cp.label.as_deref(),
            &site_index,
            &loops,
            &names,
            &types,
            &offsets,
            &lens,
            &schemas,
            &cp.data,
            &suspend,
            &ts(cp.created_at),
        ],
    )
    .await?;
    Ok(())
}

/// Checkpoint `seq` of run `id`, if kept (`seq` 0, or one above
/// `i64::MAX`: none).
pub(in crate::store::postgres) async fn load_seq(
    cx: &mut Cx<'_>,
    id: &str,
    seq: u64,
) -> Result<Option<Arc<CheckpointRecord>>, Error> {
    load_seq_checked(cx, id, seq).await?
}

/// Like [`load_seq`], telling a database error (outside, the transaction is
/// then unusable) from a stored row this build cannot decode (inside).
pub(in crate::store::postgres) async fn load_seq_checked(
    cx: &mut Cx<'_>,
    id: &str,
    seq: u64,
) -> Result<Result<Option<Arc<CheckpointRecord>>, Error>, Error> {
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
        .map(|row| decode(&run, &row, 0).map(Arc::new))
        .transpose())
}
