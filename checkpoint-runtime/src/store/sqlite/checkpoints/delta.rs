//! Fields that grow by appending, stored as what they appended.
//!
//! Postcard encodes a `Vec<T>` (or a `String`) as a varint length followed
//! by the elements: a vector that got one element more has a new first 1-3
//! bytes, then the old elements' bytes, then the new element's. A checkpoint
//! that stored such a field whole would store the whole history again each
//! time (4,000 messages of 500 B: 4 GB for a 2 MB history). So when a
//! field's new bytes are `header ++ body ++ tail`, where `body` is the
//! previous version's bytes after its own short header (at most
//! [`MAX_HEADER`] bytes each), the row stores a [`Delta`]: the new header
//! inline, a reference to where the body starts (its *base*: a slice of an
//! earlier checkpoint row, `Loc` in the row's `StoredRefs::fields` as for
//! any field), and the tails appended since, as rows of `segments` (see
//! `migrate_v4`). The field's bytes are the header, the base, then the
//! segments of each level, highest first, each level a range of one
//! indexed scan.
//!
//! **The stream.** The tails of a chain (a lineage of versions of one
//! field, each appending to the one before) concatenated are its *stream*:
//! append-only, since a run's versions follow one another (a fork is
//! another run, which copies its first version whole). A version's bytes
//! are its header, its base, then the first bytes of the stream, as many
//! as its descriptor's levels say. Every segment is a slice of the stream,
//! keyed `(run, chain, level, start)`: `chain` names the lineage (the seq
//! of the version that started it and the field's index then, `seq << 16 |
//! index`), `start` is the slice's offset in the stream.
//!
//! **Levels.** Each version that appends writes its tail as one level-0
//! segment, unless that makes [`fan_out`]`(0)` = 64 level-0 segments in
//! its descriptor: then it writes one level-1 segment holding all of them
//! (its own tail included, which is not written at level 0), deletes the
//! level-0 ones, and its descriptor references the level-1 one instead;
//! and so on up (a level-2 segment once there are `fan_out(1)` = 1,024
//! level-1 ones). So a version reads at most 63 small segments and 1,023
//! of each level above (each 64 tails or more: their count grows with the
//! state's size, not with the number of versions), one range of the key
//! each; the stream is stored about once (its folded levels are gone); and
//! each appended byte is written once per level: twice up to 65,536
//! appends. (Level 0 folds early because its segments are one version's
//! tail each, and reading a row costs about what reading a kilobyte does:
//! with 256, reading the latest of 1,000 versions of 500 B took twice as
//! long as reading the same state stored whole.)
//!
//! **Older versions.** A version whose level-k segments were folded finds
//! its bytes from there on in the segment that folded them: the fold of
//! level k after it made a level-k+1 segment starting where its level k
//! started, holding its level k and everything below (which had been
//! folded into level k by then); if that one was folded in turn, the
//! level-k+2 segment starts at the same offset; and so on. Any segment of
//! the chain starting at that offset is a slice of the same stream, so the
//! reader takes the lowest-level one there is ([`append_segments`]). The
//! latest version never needs this: its levels are the chain's current ones.
//!
//! **What a version uses.** A version's own segments are its predecessor's,
//! minus those it folded (whose bytes it reads from the fold), plus those
//! it wrote (`last`, a column, is the seq that wrote a segment); the folds
//! an older version reads from were written after it. So the segments that
//! any version from seq `f` on uses are those of version `f`'s levels and
//! those written after `f`: retention deletes the others (see
//! [`doomed_segments`]).

use rusqlite::{params, Connection};

#[cfg(test)]
pub(in crate::store::sqlite) use crate::store::delta::fan_out;
pub(in crate::store::sqlite) use crate::store::delta::{
    check, likely_extension, plan, Delta, Fold, NewSegment,
};
use crate::store::sql::to_i64;
use crate::store::sqlite::error::{corrupt, to_u64, R};

/// How many levels above a folded one the reader looks for the segment
/// that folded it (a level holds `fan_out` times the one below: eight
/// levels are more than any history reaches).
const HOST_LEVELS: u64 = 8;

/// Appends the stream bytes of `delta` (of run `ord`) to `out`: each
/// level's own segments, highest first, checking that each level has as
/// many segments and bytes as the descriptor says; from a level whose
/// segments were folded on, the segments that folded them (see the
/// module's docs). A missing or short segment is [`corrupt`].
pub(in crate::store::sqlite) fn append_segments(
    conn: &Connection,
    ord: i64,
    delta: &Delta,
    out: &mut Vec<u8>,
) -> R<()> {
    let chain = to_i64(delta.chain, "chain")?;
    let total = delta.total();
    for (k, l) in delta.levels.iter().enumerate().rev() {
        if l.count == 0 {
            continue;
        }
        let at = delta.offset(k);
        let (count, bytes) = read_level(conn, (ord, chain), k as u64, at..at + l.bytes, out)?;
        if count == 0 {
            return read_folded(conn, (ord, chain), k as u64, at..total, out);
        }
        if count != l.count || bytes != l.bytes {
            return Err(corrupt(format_args!(
                "its level-{k} segments (chain {}, from offset {at}) are {count} of {bytes} \
                 bytes where {} of {} bytes were written",
                delta.chain, l.count, l.bytes
            )));
        }
    }
    Ok(())
}

/// Appends the level-`level` segments of chain `(run, chain)` starting in
/// `range`, in order; returns how many there were and their bytes (a gap
/// between two ends the scan).
fn read_level(
    conn: &Connection,
    (ord, chain): (i64, i64),
    level: u64,
    range: std::ops::Range<u64>,
    out: &mut Vec<u8>,
) -> R<(u32, u64)> {
    let mut stmt = conn.prepare_cached(
        "SELECT start, data FROM segments WHERE run = ?1 AND chain = ?2 AND level = ?3 \
         AND start >= ?4 AND start < ?5 ORDER BY start",
    )?;
    let mut rows = stmt.query(params![
        ord,
        chain,
        to_i64(level, "level")?,
        to_i64(range.start, "offset")?,
        to_i64(range.end, "offset")?
    ])?;
    let (mut count, mut at) = (0u32, range.start);
    while let Some(row) = rows.next()? {
        let start: i64 = row.get(0)?;
        if to_u64(start, "offset")? != at {
            break;
        }
        let data = segment_data(row.get_ref(1)?)?;
        out.extend_from_slice(data);
        at += data.len() as u64;
        count += 1;
    }
    Ok((count, at - range.start))
}

/// A segment's `data` as bytes.
fn segment_data(v: rusqlite::types::ValueRef<'_>) -> R<&[u8]> {
    match v {
        rusqlite::types::ValueRef::Blob(b) | rusqlite::types::ValueRef::Text(b) => Ok(b),
        _ => Err(corrupt("a segment's bytes are not a blob")),
    }
}

/// Appends stream bytes `range` of chain `(run, chain)`, whose level-`level`
/// segments were folded: from the lowest-level segment above `level` that
/// starts where they did, and on from there as long as needed.
fn read_folded(
    conn: &Connection,
    (ord, chain): (i64, i64),
    level: u64,
    range: std::ops::Range<u64>,
    out: &mut Vec<u8>,
) -> R<()> {
    let mut stmt = conn.prepare_cached(
        "SELECT data FROM segments WHERE run = ?1 AND chain = ?2 AND level = ?3 AND start = ?4",
    )?;
    let mut at = range.start;
    'next: while at < range.end {
        for m in level + 1..=level + HOST_LEVELS {
            let mut rows = stmt.query(params![
                ord,
                chain,
                to_i64(m, "level")?,
                to_i64(at, "offset")?
            ])?;
            if let Some(row) = rows.next()? {
                let data = segment_data(row.get_ref(0)?)?;
                let take = data
                    .len()
                    .min(usize::try_from(range.end - at).unwrap_or(usize::MAX));
                if take == 0 {
                    break;
                }
                out.extend_from_slice(&data[..take]);
                at += take as u64;
                continue 'next;
            }
        }
        return Err(corrupt(format_args!(
            "its level-{level} segments (chain {chain}, from offset {}) are missing, and no \
             later segment holds their bytes",
            range.start
        )));
    }
    Ok(())
}

/// The segments of run `ord` that no version from seq `floor` on uses,
/// given the deltas of version `floor` (see the module's docs):
/// `(chain, level, start)`.
pub(in crate::store::sqlite) fn doomed_segments(
    conn: &Connection,
    ord: i64,
    floor: u64,
    kept: &[Delta],
) -> R<Vec<(i64, i64, i64)>> {
    let rows: Vec<(i64, i64, i64)> = conn
        .prepare_cached("SELECT chain, level, start FROM segments WHERE run = ?1 AND last <= ?2")?
        .query_map(params![ord, to_i64(floor, "seq")?], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut doomed = Vec::new();
    for (chain, level, start) in rows {
        let key = (
            to_u64(chain, "chain")?,
            to_u64(level, "level")?,
            to_u64(start, "offset")?,
        );
        if !kept.iter().any(|d| d.uses(key.0, key.1, key.2)) {
            doomed.push((chain, level, start));
        }
    }
    Ok(doomed)
}

/// Deletes segments of run `ord` (see [`doomed_segments`]).
pub(in crate::store::sqlite) fn delete_segments(
    conn: &Connection,
    ord: i64,
    doomed: &[(i64, i64, i64)],
) -> R<()> {
    let mut stmt = conn.prepare_cached(
        "DELETE FROM segments WHERE run = ?1 AND chain = ?2 AND level = ?3 AND start = ?4",
    )?;
    for (chain, level, start) in doomed {
        stmt.execute(params![ord, chain, level, start])?;
    }
    Ok(())
}
