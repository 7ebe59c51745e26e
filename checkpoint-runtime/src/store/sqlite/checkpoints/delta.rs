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
use serde::{Deserialize, Serialize};

use super::loc::Loc;
use crate::store::sql::to_i64;
use crate::store::sqlite::error::{corrupt, to_u64, R};

/// The most bytes a header (before the body) may have: a `u64` varint
/// takes at most 10.
pub(in crate::store::sqlite) const MAX_HEADER: usize = 10;

/// A body shorter than this is not worth a descriptor (about 30 bytes
/// in the row, a segment row of about 20): the field is stored whole.
pub(in crate::store::sqlite) const MIN_BODY: usize = 128;

/// Level `level` holds at most this many segments minus one in a
/// descriptor (8 at every level in the crate's tests, so that a few
/// hundred versions go through several levels).
pub(in crate::store::sqlite) fn fan_out(level: usize) -> u32 {
    if cfg!(test) {
        8
    } else if level == 0 {
        64
    } else {
        1024
    }
}

/// Field indexes up to this may start a chain (see `chain`).
const MAX_INDEX: usize = 1 << 16;

/// The segments of one level of a [`Delta`]: those of its chain and level
/// starting in `offset..offset + bytes`, where `offset` is what the levels
/// above hold together ([`Delta::offset`]).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(in crate::store::sqlite) struct Level {
    /// How many segments (0: the level is empty).
    pub(in crate::store::sqlite) count: u32,
    /// Their bytes, together.
    pub(in crate::store::sqlite) bytes: u64,
}

/// How a field stored by appending is made: `header`, the base (the
/// field's `Loc`), then the first [`Delta::total`] bytes of its chain's
/// stream, which `levels` hold, the highest level first.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub(in crate::store::sqlite) struct Delta {
    /// The field's index in the record.
    pub(in crate::store::sqlite) field: u32,
    pub(in crate::store::sqlite) header: Vec<u8>,
    pub(in crate::store::sqlite) chain: u64,
    /// `levels[k]`: the level-k segments.
    pub(in crate::store::sqlite) levels: Vec<Level>,
}

impl Delta {
    /// The stream bytes the field holds.
    pub(in crate::store::sqlite) fn total(&self) -> u64 {
        self.levels.iter().map(|l| l.bytes).sum()
    }

    /// Where level `k` starts in the stream: after the levels above it.
    pub(in crate::store::sqlite) fn offset(&self, k: usize) -> u64 {
        self.levels.iter().skip(k + 1).map(|l| l.bytes).sum()
    }

    /// Whether segment `(chain, level, start)` is one of this delta's own.
    pub(in crate::store::sqlite) fn uses(&self, chain: u64, level: u64, start: u64) -> bool {
        let Some(k) = usize::try_from(level)
            .ok()
            .filter(|&k| k < self.levels.len())
        else {
            return false;
        };
        let (l, at) = (self.levels[k], self.offset(k));
        self.chain == chain && l.count > 0 && at <= start && start < at + l.bytes
    }
}

/// A segment a new version writes: the field's bytes from `at` (an offset
/// in them) to their end, at `level`, starting at `start` in the stream.
pub(in crate::store::sqlite) struct NewSegment {
    pub(in crate::store::sqlite) level: u64,
    pub(in crate::store::sqlite) start: u64,
    pub(in crate::store::sqlite) at: usize,
}

/// The segments of `level` starting in `start..end` of the stream, which a
/// new version folded into a segment of the next level: deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store::sqlite) struct Fold {
    pub(in crate::store::sqlite) level: u64,
    pub(in crate::store::sqlite) start: u64,
    pub(in crate::store::sqlite) end: u64,
}

/// A field stored by appending, as [`plan`] found it: where its base is,
/// its descriptor, the segment this version writes (if any) and the
/// segments it folded into that one; and how its bytes were found to
/// extend the old ones: `new[..new_header] ++ old[old_header..] ++ tail`,
/// the old body being `body_len` bytes (compared).
pub(in crate::store::sqlite) struct Planned {
    pub(in crate::store::sqlite) base: Loc,
    pub(in crate::store::sqlite) delta: Delta,
    pub(in crate::store::sqlite) segment: Option<NewSegment>,
    pub(in crate::store::sqlite) folded: Vec<Fold>,
    pub(in crate::store::sqlite) old_header: usize,
    pub(in crate::store::sqlite) new_header: usize,
    pub(in crate::store::sqlite) body_len: usize,
}

/// The length of the postcard varint at the start of `b`, if there is one.
fn varint_len(b: &[u8]) -> Option<usize> {
    b.iter()
        .take(MAX_HEADER)
        .position(|&x| x < 0x80)
        .map(|i| i + 1)
}

/// Whether `new[h..]` may start with `body`: their first and last bytes
/// agree (most candidates fail there).
fn may_extend(new: &[u8], h: usize, body: &[u8]) -> bool {
    let Some(at) = h.checked_add(body.len()).and_then(|end| new.get(h..end)) else {
        return false;
    };
    let k = body.len().min(8);
    at[..k] == body[..k] && at[at.len() - k..] == body[body.len() - k..]
}

/// The header lengths to try, the likeliest first: `first` (a varint's
/// length, or the previous header's), then every other up to [`MAX_HEADER`].
fn candidates(first: Option<usize>, max: usize) -> impl Iterator<Item = usize> {
    let first = first.filter(|&h| h <= max);
    first
        .into_iter()
        .chain((0..=max.min(MAX_HEADER)).filter(move |&h| Some(h) != first))
}

/// At most this many full comparisons per field (data of one repeated
/// byte passes the quick checks of every candidate).
const MAX_COMPARES: usize = 4;

/// Header lengths `(h_old, h_new)` such that `new[h_new..]` may start
/// with `old[h_old..]`, an old body of at least [`MIN_BODY`] bytes: the
/// first pair, in the order [`plan`] tries them, that passes the quick
/// checks (the bodies are not compared).
pub(in crate::store::sqlite) fn likely_extension(new: &[u8], old: &[u8]) -> Option<(usize, usize)> {
    let max_old = old.len().checked_sub(MIN_BODY)?;
    candidates(varint_len(old), max_old).find_map(|h_old| {
        let body = &old[h_old..];
        let max = new.len().checked_sub(body.len())?;
        let h_new = candidates(varint_len(new), max).find(|&h| may_extend(new, h, body))?;
        Some((h_old, h_new))
    })
}

/// How field `index` of checkpoint `seq`, with bytes `new`, can be stored
/// by appending to the previous version of the field, whose bytes are
/// `old`, stored at `old_loc` (its base, when `old_delta` is set). `None`:
/// it does not extend them (it did not grow, or not from an old body of at
/// least [`MIN_BODY`] bytes); store it whole. `known`: header lengths
/// `(h_old, h_new)` already found to make `new[h_new..]` start with
/// `old[h_old..]` ([`find_extension`]), whose bodies are then not compared
/// again.
pub(in crate::store::sqlite) fn plan(
    new: &[u8],
    old: &[u8],
    old_loc: Loc,
    old_delta: Option<&Delta>,
    (index, seq): (usize, u64),
    known: Option<(usize, usize)>,
) -> Option<Planned> {
    // Only a field that grew appended something (a cheap test: the writer
    // asks for every changed field).
    if new.len() <= old.len() {
        return None;
    }
    let mut compares = 0;
    // `body` is `old[at..]`.
    let mut find_h_new = |body: &[u8], at: usize| {
        if let Some((k_old, k_new)) = known.filter(|k| k.0 <= at) {
            // `old[k_old..]` is in `new` from `k_new`: so is any later part.
            let h = k_new + (at - k_old);
            if h <= MAX_HEADER && h + body.len() <= new.len() {
                return Some(h);
            }
        }
        let max = new.len().checked_sub(body.len())?;
        candidates(varint_len(new), max).find(|&h| {
            if !may_extend(new, h, body) || compares >= MAX_COMPARES {
                return false;
            }
            compares += 1;
            new[h..h + body.len()] == *body
        })
    };
    let (base, mut delta, h_old, h_new, body_len) = match old_delta {
        Some(d) => {
            let h_old = d.header.len();
            let body = old.get(h_old..)?;
            if body.len() as u64 != old_loc.2.checked_add(d.total())? {
                return None;
            }
            let h_new = find_h_new(body, h_old)?;
            let delta = Delta {
                field: u32::try_from(index).ok()?,
                header: new[..h_new].to_vec(),
                chain: d.chain,
                levels: d.levels.clone(),
            };
            (old_loc, delta, h_old, h_new, body.len())
        }
        None => {
            if index >= MAX_INDEX || old.len() < MIN_BODY || old_loc.2 != old.len() as u64 {
                return None;
            }
            let max_old = old.len() - MIN_BODY;
            let first = known.map(|k| k.0).filter(|&h| h <= max_old);
            let (h_old, h_new) = candidates(first.or(varint_len(old)), max_old)
                .find_map(|h_old| find_h_new(&old[h_old..], h_old).map(|h_new| (h_old, h_new)))?;
            let (src, off, len) = old_loc;
            let base = (src, off + h_old as u64, len - h_old as u64);
            let delta = Delta {
                field: index as u32,
                header: new[..h_new].to_vec(),
                chain: seq.checked_mul(MAX_INDEX as u64)? | index as u64,
                levels: Vec::new(),
            };
            (base, delta, h_old, h_new, old.len() - h_old)
        }
    };
    let tail = (new.len() - (h_new + body_len)) as u64;
    let (segment, folded) = append_tail(&mut delta, new.len(), tail)?;
    Some(Planned {
        base,
        delta,
        segment,
        folded,
        old_header: h_old,
        new_header: h_new,
        body_len,
    })
}

/// Adds a tail of `tail` bytes to `delta`, of a field now `len` bytes
/// long: the segment to write (none for an empty tail) and the levels it
/// folded, each into a segment of the next level (which is then the one
/// written: the field's bytes from where the folded level started).
fn append_tail(
    delta: &mut Delta,
    len: usize,
    tail: u64,
) -> Option<(Option<NewSegment>, Vec<Fold>)> {
    let mut folded = Vec::new();
    if tail == 0 {
        return Some((None, folded));
    }
    let mut segment = NewSegment {
        level: 0,
        start: delta.total(),
        at: len - usize::try_from(tail).ok()?,
    };
    push(&mut delta.levels, 0, tail);
    let mut k = 0usize;
    while delta.levels[k].count >= fan_out(k) {
        let (start, bytes) = (delta.offset(k), delta.levels[k].bytes);
        folded.push(Fold {
            level: k as u64,
            start,
            end: start + bytes,
        });
        delta.levels[k] = Level::default();
        push(&mut delta.levels, k + 1, bytes);
        segment = NewSegment {
            level: (k + 1) as u64,
            start,
            at: len - usize::try_from(bytes).ok()?,
        };
        k += 1;
    }
    Some((Some(segment), folded))
}

/// Adds a segment of `bytes` bytes, the newest, to level `k`.
fn push(levels: &mut Vec<Level>, k: usize, bytes: u64) {
    if levels.len() <= k {
        levels.resize(k + 1, Level::default());
    }
    levels[k].count += 1;
    levels[k].bytes += bytes;
}

/// Checks what a stored descriptor says of itself, for a record of
/// `fields` fields: its field exists, its header is short, its levels are
/// well formed. The errors say what is wrong, for [`corrupt`].
pub(in crate::store::sqlite) fn check(deltas: &[Delta], fields: usize) -> Result<(), String> {
    let mut prev: Option<u32> = None;
    for d in deltas {
        if (d.field as usize) >= fields || prev.is_some_and(|p| p >= d.field) {
            return Err(format!("a delta names field #{} out of order", d.field));
        }
        prev = Some(d.field);
        if d.header.len() > MAX_HEADER {
            return Err(format!("the delta of field #{} has a long header", d.field));
        }
        if d.levels.iter().any(|l| (l.count == 0) != (l.bytes == 0)) {
            return Err(format!("the delta of field #{} has a bad level", d.field));
        }
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &[Vec<u8>]) -> Vec<u8> {
        postcard::to_allocvec(v).unwrap()
    }

    #[test]
    fn a_grown_vector_is_its_new_header_the_old_body_and_a_tail() {
        let mut v: Vec<Vec<u8>> = (0..126u8).map(|i| vec![i; 3]).collect();
        let old = enc(&v);
        v.push(vec![9; 40]);
        v.push(vec![8; 2]);
        let new = enc(&v);
        let p = plan(&new, &old, (5, 0, old.len() as u64), None, (2, 7), None).unwrap();
        // 126 -> 128 elements: the varint goes from 1 to 2 bytes.
        assert_eq!(p.base, (5, 1, old.len() as u64 - 1));
        assert_eq!(p.delta.header, new[..2].to_vec());
        assert_eq!(p.delta.chain, 7 << 16 | 2);
        let seg = p.segment.unwrap();
        assert_eq!((seg.level, seg.start), (0, 0));
        let mut rebuilt = p.delta.header.clone();
        rebuilt.extend_from_slice(&old[1..]);
        rebuilt.extend_from_slice(&new[seg.at..]);
        assert_eq!(rebuilt, new);
        let tail = (new.len() - seg.at) as u64;
        assert_eq!(
            p.delta.levels,
            [Level {
                count: 1,
                bytes: tail
            }]
        );
        assert!(p.folded.is_empty());
    }

    #[test]
    fn a_known_extension_is_planned_as_found() {
        let mut v: Vec<Vec<u8>> = (0..126u8).map(|i| vec![i; 3]).collect();
        let old = enc(&v);
        v.push(vec![9; 40]);
        v.push(vec![8; 2]);
        let new = enc(&v);
        let known = likely_extension(&new, &old);
        assert_eq!(known, Some((1, 2)));
        let loc = (5, 0, old.len() as u64);
        let found = plan(&new, &old, loc, None, (2, 7), None).unwrap();
        let given = plan(&new, &old, loc, None, (2, 7), known).unwrap();
        assert_eq!(
            (given.base, given.new_header),
            (found.base, found.new_header)
        );
        assert_eq!(given.delta, found.delta);
        assert_eq!(likely_extension(&old, &new), None);
    }

    #[test]
    fn what_does_not_extend_is_not_planned() {
        let v: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 3]).collect();
        let old = enc(&v);
        let mut changed = v.clone();
        changed[50][0] = 0xFF;
        changed.push(vec![1]);
        assert!(plan(
            &enc(&changed),
            &old,
            (1, 0, old.len() as u64),
            None,
            (0, 2),
            None
        )
        .is_none());
        let shorter = enc(&v[..99]);
        assert!(plan(&shorter, &old, (1, 0, old.len() as u64), None, (0, 2), None).is_none());
        // Too small to be worth it.
        let small = enc(&v[..10]);
        assert!(plan(
            &enc(&v[..11]),
            &small,
            (1, 0, small.len() as u64),
            None,
            (0, 2),
            None
        )
        .is_none());
    }

    #[test]
    fn full_levels_cascade_into_one_segment_of_the_next() {
        // Level 1: a segment short of full, of 100 bytes each; level 0 the
        // same, of 10 bytes. One more tail fills both.
        let (f0, f1) = (fan_out(0) - 1, fan_out(1) - 1);
        let (b1, b0) = (u64::from(f1) * 100, u64::from(f0) * 10);
        let d = Delta {
            field: 0,
            header: vec![0x80, 0x02],
            chain: 1 << 16,
            levels: vec![
                Level {
                    count: f0,
                    bytes: b0,
                },
                Level {
                    count: f1,
                    bytes: b1,
                },
            ],
        };
        let body = vec![3u8; 1000 + (b0 + b1) as usize];
        let mut old = d.header.clone();
        old.extend_from_slice(&body);
        let mut new = vec![0x81, 0x02];
        new.extend_from_slice(&body);
        new.extend_from_slice(&[4; 10]);
        let p = plan(&new, &old, (1, 0, 1000), Some(&d), (0, 300), None).unwrap();
        let seg = p.segment.unwrap();
        assert_eq!((seg.level, seg.start), (2, 0));
        assert_eq!(seg.at, new.len() - (b1 + b0 + 10) as usize);
        assert_eq!(
            p.folded,
            [
                Fold {
                    level: 0,
                    start: b1,
                    end: b1 + b0 + 10
                },
                Fold {
                    level: 1,
                    start: 0,
                    end: b1 + b0 + 10
                },
            ]
        );
        let empty = Level::default();
        let top = Level {
            count: 1,
            bytes: b1 + b0 + 10,
        };
        assert_eq!(p.delta.levels, [empty, empty, top]);
        assert_eq!(p.delta.header, [0x81, 0x02]);
        assert!(p.delta.uses(1 << 16, 2, 0) && !p.delta.uses(1 << 16, 1, 0));
        // A base that does not match the old descriptor is not continued.
        assert!(plan(&new, &old, (1, 0, 999), Some(&d), (0, 300), None).is_none());
    }
}
