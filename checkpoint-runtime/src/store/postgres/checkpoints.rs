//! Checkpoints: every version kept as one row (retention deletes the oldest
//! beyond `keep`, never the latest), stored together with the run's state
//! change; reading them back; forks; `gc`.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use tokio_postgres::Row;

use super::conn::{corrupt, from_ts, get, to_i64, to_json, to_u64, ts, Cx};
use super::runs::{self, fenced, insert_run, write_run};
use super::{history, notify, PostgresStore};
use crate::history::Event;
use crate::store::rules;
use crate::store::{CheckpointRecord, FieldRecord, GcReport, Lease, Suspend};
use crate::Error;

/// The columns [`decode`] reads, in order, over `cp_checkpoints c`.
macro_rules! cp_cols {
    () => {
        "c.seq, c.site_key, c.label, c.site_index, c.loops, c.field_names, c.field_types, \
         c.field_offsets, c.field_lens, c.field_schemas, c.data, c.suspend::text, c.created_at"
    };
}

/// A checkpoint row (the [`cp_cols`] columns from `at` on) as a record.
fn decode(run: &Arc<str>, row: &Row, at: usize) -> Result<CheckpointRecord, Error> {
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
async fn insert(cx: &mut Cx<'_>, cp: &CheckpointRecord) -> Result<(), Error> {
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
pub(super) async fn load_seq(
    cx: &mut Cx<'_>,
    id: &str,
    seq: u64,
) -> Result<Option<Arc<CheckpointRecord>>, Error> {
    load_seq_checked(cx, id, seq).await?
}

/// Like [`load_seq`], telling a database error (outside, the transaction is
/// then unusable) from a stored row this build cannot decode (inside).
pub(super) async fn load_seq_checked(
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

impl PostgresStore {
    pub(super) async fn do_save(
        &self,
        lease: &Lease,
        cp: Arc<CheckpointRecord>,
        keep: Option<usize>,
    ) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = fenced(&mut cx, &cp.run, lease).await?;
        rules::check_next_seq(&rec, &cp)?;
        insert(&mut cx, &cp).await?;
        rules::save_checkpoint(&mut rec, &cp);
        write_run(&mut cx, &rec).await?;
        let saved = Event::CheckpointSaved {
            seq: cp.seq,
            label: cp.label.as_ref().map(|l| l.to_string()),
        };
        history::insert(&mut cx, &cp.run, cp.created_at, &saved).await?;
        if let Some(keep) = keep {
            let below = rules::retention_floor(cp.seq, keep) - 1;
            if below > 0 {
                let run: &str = &cp.run;
                cx.execute(
                    "DELETE FROM cp_checkpoints WHERE run = $1 AND seq <= $2",
                    &[&run, &to_i64(below, "seq")?],
                )
                .await?;
            }
        }
        cx.commit().await
    }

    pub(super) async fn do_latest(&self, id: &str) -> Result<Option<Arc<CheckpointRecord>>, Error> {
        const SQL: &str = concat!(
            "SELECT c.seq IS NOT NULL, ",
            cp_cols!(),
            " FROM cp_runs r LEFT JOIN cp_checkpoints c ON c.run = r.id AND c.seq = r.latest_seq \
             WHERE r.id = $1"
        );
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let row = cx
            .query_opt(SQL, &[&id])
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        if !get::<bool>(&row, 0)? {
            return Ok(None);
        }
        Ok(Some(Arc::new(decode(&Arc::from(id), &row, 1)?)))
    }

    pub(super) async fn do_checkpoint(
        &self,
        id: &str,
        seq: u64,
    ) -> Result<Option<Arc<CheckpointRecord>>, Error> {
        const SQL: &str = concat!(
            "SELECT c.seq IS NOT NULL, ",
            cp_cols!(),
            " FROM cp_runs r LEFT JOIN cp_checkpoints c ON c.run = r.id AND c.seq = $2 \
             WHERE r.id = $1"
        );
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        // Sequence numbers are stored as `bigint`: a larger one names no
        // checkpoint (of a run that must exist, as in the other backends).
        let Ok(seq) = i64::try_from(seq) else {
            runs::must_exist(&mut cx, id).await?;
            return Ok(None);
        };
        let row = cx
            .query_opt(SQL, &[&id, &seq])
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        if !get::<bool>(&row, 0)? {
            return Ok(None);
        }
        Ok(Some(Arc::new(decode(&Arc::from(id), &row, 1)?)))
    }

    pub(super) async fn do_list_checkpoints(
        &self,
        id: &str,
    ) -> Result<Vec<Arc<CheckpointRecord>>, Error> {
        const SQL: &str = concat!(
            "SELECT c.seq IS NOT NULL, ",
            cp_cols!(),
            " FROM cp_runs r LEFT JOIN cp_checkpoints c ON c.run = r.id \
             WHERE r.id = $1 ORDER BY c.seq"
        );
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let rows = cx.query(SQL, &[&id]).await?;
        if rows.is_empty() {
            return Err(Error::unknown_run(id));
        }
        let run: Arc<str> = Arc::from(id);
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            if get::<bool>(&row, 0)? {
                out.push(Arc::new(decode(&run, &row, 1)?));
            }
        }
        Ok(out)
    }

    pub(super) async fn do_fork(&self, from: &str, seq: u64, new_id: &str) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        if cx
            .query_opt("SELECT 1 FROM cp_runs WHERE id = $1", &[&new_id])
            .await?
            .is_some()
        {
            return Err(Error::AlreadyExists {
                run: new_id.to_owned(),
            });
        }
        let src = runs::load(&mut cx, from)
            .await?
            .ok_or_else(|| Error::unknown_run(from))?;
        let unknown = || Error::UnknownCheckpoint {
            run: from.to_owned(),
            seq,
        };
        let cp = load_seq(&mut cx, from, seq).await?.ok_or_else(unknown)?;
        let now = SystemTime::now();
        let (rec, copy, forked) = rules::fork(from, &cp, new_id, src.workflow, src.input, now);
        history::insert(&mut cx, from, now, &forked).await?;
        if !insert_run(&mut cx, &rec).await? {
            return Err(Error::AlreadyExists {
                run: new_id.to_owned(),
            });
        }
        insert(&mut cx, &copy).await?;
        history::insert(&mut cx, new_id, now, &forked).await?;
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(())
    }

    /// Retention deletes rows as it goes; what is left is PostgreSQL's own
    /// space: a plain `VACUUM` of the tables makes dead rows' space reusable
    /// (it takes no lock that blocks workers).
    pub(super) async fn do_gc(&self) -> Result<GcReport, Error> {
        const SIZE: &str = "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relkind = 'r' \
             AND c.relname IN ('cp_runs', 'cp_checkpoints', 'cp_signals', 'cp_history', \
                               'cp_schemas', 'cp_schema_version')";
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let before: i64 = get(&cx.query_one(SIZE, &[]).await?, 0)?;
        cx.batch("VACUUM cp_checkpoints, cp_history, cp_signals, cp_runs")
            .await?;
        let after: i64 = get(&cx.query_one(SIZE, &[]).await?, 0)?;
        Ok(GcReport {
            bytes_before: u64::try_from(before).unwrap_or(0),
            bytes_after: u64::try_from(after).unwrap_or(0),
            ..GcReport::default()
        })
    }
}
