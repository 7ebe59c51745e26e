//! The `stream_items` and `run_progress` tables: a run's stream
//! (`ctx.emit`) and progress (`ctx.set_progress`), keyed by the run's
//! `ord`, apart from its checkpoints and history (see
//! [`Store::write_stream`](crate::store::Store::write_stream)). Writes are
//! fenced by the run's lease, under the writer's cached head.

use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};

use super::error::R;
use super::runs::run_ord;
use super::writer::txn::TxnCtx;
use crate::store::sql::to_i64;
use crate::store::{page_size, rules, Lease, StreamItem, StreamWrite};
use crate::Error;

/// The run's `ord`, once its lease is checked.
fn fenced_ord(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease) -> R<i64> {
    let h = cx.head(id)?;
    let ord = h.ord;
    let allowed = rules::streams::may_write(id, &h.rec, lease);
    cx.put(Arc::from(id), h);
    allowed?;
    Ok(ord)
}

pub(super) fn write(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease, write: StreamWrite) -> R<()> {
    let ord = fenced_ord(cx, id, lease)?;
    if write.items.len() + usize::from(write.progress.is_some()) > 1 {
        cx.begin()?;
    }
    for item in &write.items {
        cx.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO stream_items (run, idx, after_seq, value) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                ord,
                to_i64(item.index, "stream index")?,
                to_i64(item.after_seq, "checkpoint seq")?,
                item.value
            ])?;
    }
    if let Some(p) = &write.progress {
        cx.conn
            .prepare_cached("INSERT OR REPLACE INTO run_progress (run, value) VALUES (?1, ?2)")?
            .execute(params![ord, p])?;
    }
    Ok(())
}

pub(super) fn discard(cx: &mut TxnCtx<'_>, id: &str, lease: &Lease, from_seq: u64) -> R<u64> {
    let ord = fenced_ord(cx, id, lease)?;
    cx.begin()?;
    cx.conn
        .prepare_cached("DELETE FROM stream_items WHERE run = ?1 AND after_seq >= ?2")?
        .execute(params![ord, to_i64(from_seq, "checkpoint seq")?])?;
    let last: Option<i64> = cx
        .conn
        .prepare_cached("SELECT MAX(idx) FROM stream_items WHERE run = ?1")?
        .query_row([ord], |r| r.get(0))?;
    Ok(rules::streams::next_index(
        last.and_then(|i| u64::try_from(i).ok()),
    ))
}

pub(super) fn items(conn: &Connection, id: &str, from: u64, limit: usize) -> R<Vec<StreamItem>> {
    let ord = run_ord(conn, id)?;
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let limit = i64::try_from(page_size(limit)).unwrap_or(1);
    let rows = conn
        .prepare_cached(
            "SELECT idx, after_seq, value FROM stream_items \
             WHERE run = ?1 AND idx >= ?2 ORDER BY idx LIMIT ?3",
        )?
        .query_map(params![ord, from, limit], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<Vec<(i64, i64, Vec<u8>)>>>()?;
    rows.into_iter()
        .map(|(index, after_seq, value)| {
            let bad = |what: &str| {
                Error::store(format!(
                    "sqlite: run `{id}` has a stream item with a negative {what}"
                ))
            };
            Ok(StreamItem {
                index: u64::try_from(index).map_err(|_| bad("index"))?,
                after_seq: u64::try_from(after_seq).map_err(|_| bad("checkpoint seq"))?,
                value,
            })
        })
        .collect()
}

pub(super) fn progress(conn: &Connection, id: &str) -> R<Option<Vec<u8>>> {
    let ord = run_ord(conn, id)?;
    Ok(conn
        .prepare_cached("SELECT value FROM run_progress WHERE run = ?1")?
        .query_row([ord], |r| r.get(0))
        .optional()?)
}
