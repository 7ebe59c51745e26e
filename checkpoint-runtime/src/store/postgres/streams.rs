//! `cp_stream_items` and `cp_run_progress`: a run's stream (`ctx.emit`)
//! and progress (`ctx.set_progress`), apart from its checkpoints and
//! history (see [`Store::write_stream`](crate::store::Store::write_stream)).
//! Writes lock the run's row and are fenced by its lease.

use super::conn::{get, Pool};
use super::tables::runs::{fenced, must_exist};
use crate::store::sql::to_i64;
use crate::store::{page_size, rules, Lease, StreamItem, StreamWrite};
use crate::Error;

pub(super) async fn write(
    pool: &Pool,
    id: &str,
    lease: &Lease,
    write: StreamWrite,
) -> Result<(), Error> {
    let mut conn = pool.get().await?;
    let mut cx = conn.begin().await?;
    let rec = fenced(&mut cx, id, lease).await?;
    rules::streams::may_write(id, &rec, lease)?;
    if !write.items.is_empty() {
        let mut idx = Vec::with_capacity(write.items.len());
        let mut after = Vec::with_capacity(write.items.len());
        let mut values = Vec::with_capacity(write.items.len());
        for item in write.items {
            idx.push(to_i64(item.index, "stream index")?);
            after.push(to_i64(item.after_seq, "checkpoint seq")?);
            values.push(item.value);
        }
        cx.execute(
            "INSERT INTO cp_stream_items (run, idx, after_seq, value) \
             SELECT $1, * FROM unnest($2::bigint[], $3::bigint[], $4::bytea[]) \
             ON CONFLICT (run, idx) DO UPDATE \
             SET after_seq = EXCLUDED.after_seq, value = EXCLUDED.value",
            &[&id, &idx, &after, &values],
        )
        .await?;
    }
    if let Some(p) = write.progress {
        cx.execute(
            "INSERT INTO cp_run_progress (run, value) VALUES ($1, $2) \
             ON CONFLICT (run) DO UPDATE SET value = EXCLUDED.value",
            &[&id, &p],
        )
        .await?;
    }
    cx.commit().await
}

pub(super) async fn discard(
    pool: &Pool,
    id: &str,
    lease: &Lease,
    from_seq: u64,
) -> Result<u64, Error> {
    let mut conn = pool.get().await?;
    let mut cx = conn.begin().await?;
    let rec = fenced(&mut cx, id, lease).await?;
    rules::streams::may_write(id, &rec, lease)?;
    let from_seq = to_i64(from_seq, "checkpoint seq")?;
    cx.execute(
        "DELETE FROM cp_stream_items WHERE run = $1 AND after_seq >= $2",
        &[&id, &from_seq],
    )
    .await?;
    let row = cx
        .query_one(
            "SELECT max(idx) FROM cp_stream_items WHERE run = $1",
            &[&id],
        )
        .await?;
    let last: Option<i64> = get(&row, 0)?;
    cx.commit().await?;
    Ok(rules::streams::next_index(
        last.and_then(|i| u64::try_from(i).ok()),
    ))
}

pub(super) async fn items(
    pool: &Pool,
    id: &str,
    from: u64,
    limit: usize,
) -> Result<Vec<StreamItem>, Error> {
    let mut conn = pool.get().await?;
    let mut cx = conn.plain();
    must_exist(&mut cx, id).await?;
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let limit = i64::try_from(page_size(limit)).unwrap_or(1);
    let rows = cx
        .query(
            "SELECT idx, after_seq, value FROM cp_stream_items \
             WHERE run = $1 AND idx >= $2 ORDER BY idx LIMIT $3",
            &[&id, &from, &limit],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let index: i64 = get(row, 0)?;
            let after_seq: i64 = get(row, 1)?;
            let bad = |what: &str| {
                Error::store(format!(
                    "postgres: run `{id}` has a stream item with a negative {what}"
                ))
            };
            Ok(StreamItem {
                index: u64::try_from(index).map_err(|_| bad("index"))?,
                after_seq: u64::try_from(after_seq).map_err(|_| bad("checkpoint seq"))?,
                value: get(row, 2)?,
            })
        })
        .collect()
}

pub(super) async fn progress(pool: &Pool, id: &str) -> Result<Option<Vec<u8>>, Error> {
    let mut conn = pool.get().await?;
    let mut cx = conn.plain();
    must_exist(&mut cx, id).await?;
    let row = cx
        .query_opt("SELECT value FROM cp_run_progress WHERE run = $1", &[&id])
        .await?;
    row.map(|r| get(&r, 0)).transpose()
}
