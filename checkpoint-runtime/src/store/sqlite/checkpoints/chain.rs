//! A run's checkpoint rows as a chain (each row points at the previous one,
//! `heads` at the latest, every 64th seq indexed), and retention: hidden rows
//! cut down to stubs, and `gc`'s compaction.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension};

use super::delta::{delete_segments, doomed_segments, Delta};
use super::refs::{decode_refs, Packed, Sources, StoredRefs};
use super::rows::{decode_checkpoint, CpRow, CP_COLS, CP_FROM};
use super::Located;
use crate::store::sql::to_i64;
use crate::store::sqlite::error::{corrupt, to_postcard, to_u64, R};

/// Every this many seqs, a checkpoint is in the `checkpoint_anchors` index.
pub(in crate::store::sqlite) const ANCHOR_EVERY: u64 = 64;

/// The run's chain of checkpoint rows, from row `?1` back to the row with
/// seq `?2` (inclusive, if it exists), newest first: `walk(id, seq)`.
pub(in crate::store::sqlite) const WALK: &str = "WITH RECURSIVE walk (id, seq, prev) AS ( \
         SELECT id, seq, prev FROM checkpoints WHERE id = ?1 \
         UNION ALL \
         SELECT c.id, c.seq, c.prev FROM walk w JOIN checkpoints c ON c.id = w.prev \
         WHERE w.seq > ?2) ";

/// The latest checkpoint row of run `ord`: `(id, seq, floor)`.
pub(in crate::store::sqlite) fn read_head(
    conn: &Connection,
    ord: i64,
) -> R<Option<(i64, u64, u64)>> {
    let row: Option<(i64, i64, Option<i64>)> = conn
        .prepare_cached(
            "SELECT c.id, c.seq, c.floor FROM heads h JOIN checkpoints c ON c.id = h.latest \
             WHERE h.run = ?1",
        )?
        .query_row([ord], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    row.map(|(id, seq, floor)| {
        Ok((
            id,
            to_u64(seq, "seq")?,
            to_u64(floor.unwrap_or(1), "floor")?,
        ))
    })
    .transpose()
}

/// The id of checkpoint `seq` of run `ord` (hidden or not): from the nearest
/// anchor at or above it (or the latest), at most 63 steps down the chain.
pub(in crate::store::sqlite) fn find_row(conn: &Connection, ord: i64, seq: u64) -> R<Option<i64>> {
    let seq = to_i64(seq, "seq")?;
    let start: Option<i64> = conn
        .prepare_cached(&format!(
            "SELECT coalesce( \
                 (SELECT id FROM checkpoints WHERE run = ?1 AND seq >= ?2 \
                  AND seq % {ANCHOR_EVERY} = 0 ORDER BY seq LIMIT 1), \
                 (SELECT latest FROM heads WHERE run = ?1))"
        ))?
        .query_row(params![ord, seq], |r| r.get(0))?;
    let Some(start) = start else {
        return Ok(None);
    };
    Ok(conn
        .prepare_cached(&format!("{WALK} SELECT id FROM walk WHERE seq = ?2"))?
        .query_row(params![start, seq], |r| r.get(0))
        .optional()?)
}

/// Checkpoint row `id` of run `ord`.
pub(in crate::store::sqlite) fn load_id(
    conn: &Connection,
    ord: i64,
    run: &Arc<str>,
    id: i64,
) -> R<Option<Located>> {
    let row = conn
        .prepare_cached(&format!("SELECT {CP_COLS} {CP_FROM} WHERE c.id = ?1"))?
        .query_row([id], CpRow::from_row)
        .optional()?;
    match row {
        None => Ok(None),
        Some(row) => decode_checkpoint(conn, ord, run, row, &mut Sources::default()).map(Some),
    }
}

/// The latest checkpoint of run `ord`.
pub(in crate::store::sqlite) fn load_latest(
    conn: &Connection,
    ord: i64,
    run: &Arc<str>,
) -> R<Option<Located>> {
    match read_head(conn, ord)? {
        None => Ok(None),
        Some((id, _, _)) => load_id(conn, ord, run, id),
    }
}

/// Checkpoint `seq` of run `ord`, hidden or not.
pub(in crate::store::sqlite) fn load_seq(
    conn: &Connection,
    ord: i64,
    run: &Arc<str>,
    seq: u64,
) -> R<Option<Located>> {
    match find_row(conn, ord, seq)? {
        None => Ok(None),
        Some(id) => load_id(conn, ord, run, id),
    }
}

/// Cuts every hidden checkpoint row of run `ord` whose bytes no kept
/// checkpoint uses down to a stub, given that this was last done when the
/// oldest kept seq was `pruned` and it now is `floor`.
///
/// A checkpoint only references rows its predecessor references, or itself.
/// So the hidden rows still holding bytes are those the checkpoint at
/// `pruned` uses and those from `pruned` to `floor`; after this call, only
/// those the checkpoint at `floor` uses. The same goes for the segments of
/// fields stored by appending (see [`delta`](super::delta)): those written
/// up to `floor` that the checkpoint at `floor` does not use are deleted.
pub(in crate::store::sqlite) fn prune(
    conn: &Connection,
    ord: i64,
    pruned: u64,
    floor: u64,
) -> R<()> {
    if floor <= pruned {
        return Ok(());
    }
    let start = find_row(conn, ord, floor)?
        .ok_or_else(|| corrupt(format_args!("run {ord} lost checkpoint #{floor}")))?;
    let rows: Vec<(i64, i64, Option<Vec<u8>>)> = conn
        .prepare_cached(&format!(
            "{WALK} SELECT w.id, w.seq, c.refs FROM walk w JOIN checkpoints c ON c.id = w.id"
        ))?
        .query_map(params![start, to_i64(pruned, "seq")?], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let sources = |id: i64, refs: &Option<Vec<u8>>| -> R<(BTreeSet<u64>, Vec<Delta>)> {
        let (refs, deltas) = stored_refs(id, refs.as_deref())?;
        Ok((refs.sources(to_u64(id, "row id")?), deltas))
    };
    let mut used = BTreeSet::new();
    let mut kept_deltas = Vec::new();
    let mut doomed = BTreeSet::new();
    for (id, seq, refs) in &rows {
        let seq = to_u64(*seq, "seq")?;
        if seq == floor {
            (used, kept_deltas) = sources(*id, refs)?;
            continue;
        }
        if seq == pruned {
            doomed.extend(sources(*id, refs)?.0);
        }
        doomed.insert(to_u64(*id, "row id")?);
    }
    let segments = doomed_segments(conn, ord, floor, &kept_deltas)?;
    delete_segments(conn, ord, &segments)?;
    for id in doomed.difference(&used) {
        conn.prepare_cached(
            "UPDATE checkpoints SET loops = NULL, suspend = NULL, size = NULL, refs = NULL, \
             data = NULL, checksum = NULL WHERE id = ?1 AND refs IS NOT NULL",
        )?
        .execute([to_i64(*id, "row id")?])?;
    }
    Ok(())
}

/// The references of checkpoint row `id` (its `refs` column).
fn stored_refs(id: i64, refs: Option<&[u8]>) -> R<(StoredRefs, Vec<Delta>)> {
    let refs = refs.ok_or_else(|| corrupt(format_args!("checkpoint row {id} lost its bytes")))?;
    decode_refs(refs)
        .map_err(|_| corrupt(format_args!("checkpoint row {id}: undecodable references")))
}

/// Prunes every run fully (see [`prune`]), then shrinks every hidden row
/// that kept checkpoints still use to the bytes they use. Returns (rows
/// shrunk, bytes dropped).
pub(in crate::store::sqlite) fn gc_compact(conn: &Connection) -> R<(u64, u64)> {
    let runs: Vec<(i64, i64)> = conn
        .prepare("SELECT run, pruned FROM heads WHERE latest IS NOT NULL ORDER BY run")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let (mut rows, mut bytes) = (0u64, 0u64);
    for (ord, pruned) in runs {
        let Some((_, _, floor)) = read_head(conn, ord)? else {
            continue;
        };
        if floor <= 1 {
            continue;
        }
        let pruned = to_u64(pruned, "seq")?;
        if pruned < floor {
            prune(conn, ord, pruned, floor)?;
            conn.prepare_cached("UPDATE heads SET pruned = ?2 WHERE run = ?1")?
                .execute(params![ord, to_i64(floor, "seq")?])?;
        }
        let floor_id = find_row(conn, ord, floor)?
            .ok_or_else(|| corrupt(format_args!("run {ord} lost checkpoint #{floor}")))?;
        let refs: Option<Vec<u8>> = conn
            .prepare_cached("SELECT refs FROM checkpoints WHERE id = ?1")?
            .query_row([floor_id], |r| r.get(0))?;
        let (refs, _) = decode_refs(refs.as_deref().unwrap_or_default())
            .map_err(|_| corrupt(format_args!("checkpoint row {floor_id}: bad references")))?;
        if refs.raw {
            continue;
        }
        // The ranges used of each older row.
        let mut used: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
        for &(src, off, len) in &refs.fields {
            if len > 0 && src != 0 && src != to_u64(floor_id, "row id")? {
                used.entry(src).or_default().push((off, len));
            }
        }
        let mut sources = Sources::default();
        for (src, mut ranges) in used {
            ranges.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (off, len) in ranges {
                match merged.last_mut() {
                    Some((m_off, m_len)) if off <= *m_off + *m_len => {
                        *m_len = (*m_len).max(off + len - *m_off);
                    }
                    _ => merged.push((off, len)),
                }
            }
            let source = sources.get(conn, ord, src)?;
            let mut packed = Vec::new();
            for &(off, len) in &merged {
                packed.extend_from_slice(source.slice(off, len).ok_or_else(|| {
                    corrupt(format_args!("checkpoint row {src}: reference out of range"))
                })?);
            }
            if packed.len() >= source.data.len() {
                continue;
            }
            rows += 1;
            bytes += (source.data.len() - packed.len()) as u64;
            conn.prepare_cached(
                "UPDATE checkpoints SET loops = NULL, suspend = NULL, size = NULL, refs = ?2, \
                 data = ?3, checksum = NULL WHERE id = ?1",
            )?
            .execute(params![
                to_i64(src, "row id")?,
                to_postcard(&Packed { segments: merged })?,
                packed,
            ])?;
        }
    }
    Ok((rows, bytes))
}
