//! Fields that grow by appending, planned as what they appended: the
//! backend-neutral part of the delta storage of the SQLite and PostgreSQL
//! stores (`sqlite::checkpoints::delta`, `postgres::tables::segments`).
//!
//! Postcard encodes a `Vec<T>` (or a `String`) as a varint length followed
//! by the elements: a vector that got one element more has a new first 1-3
//! bytes, then the old elements' bytes, then the new element's. When a
//! field's new bytes are `header ++ body ++ tail`, where `body` is the
//! previous version's bytes after its own short header (at most
//! [`MAX_HEADER`] bytes each), [`plan`] describes it as a [`Delta`]: the new
//! header, a *base* (where the body of the chain's first version is, a
//! [`Loc`] whose meaning is the backend's) and the tails appended since,
//! the chain's *stream*, held in segments of [`Level`]s that fold into one
//! segment of the next level every [`fan_out`] segments, so that a version
//! reads a bounded number of segments and each appended byte is written
//! once per level. The stores' modules say where the segments are kept and
//! how a version is read back.

#[cfg(test)]
pub(in crate::store) mod model;

use serde::{Deserialize, Serialize};

use crate::store::CheckpointRecord;

/// Where the bytes of a field (or a chain's base) are: `(row, offset, len)`,
/// the row's meaning being the backend's.
pub(in crate::store) type Loc = (u64, u64, u64);

/// The most bytes a header (before the body) may have: a `u64` varint
/// takes at most 10.
pub(in crate::store) const MAX_HEADER: usize = 10;

/// A body shorter than this is not worth a descriptor (about 30 bytes
/// in the row, a segment row of about 20): the field is stored whole.
pub(in crate::store) const MIN_BODY: usize = 128;

/// Level `level` holds at most this many segments minus one in a
/// descriptor (8 at every level in the crate's tests, so that a few
/// hundred versions go through several levels).
pub(in crate::store) fn fan_out(level: usize) -> u32 {
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
pub(in crate::store) struct Level {
    /// How many segments (0: the level is empty).
    pub(in crate::store) count: u32,
    /// Their bytes, together.
    pub(in crate::store) bytes: u64,
}

/// How a field stored by appending is made: `header`, the base (the
/// field's `Loc`), then the first [`Delta::total`] bytes of its chain's
/// stream, which `levels` hold, the highest level first.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub(in crate::store) struct Delta {
    /// The field's index in the record.
    pub(in crate::store) field: u32,
    pub(in crate::store) header: Vec<u8>,
    pub(in crate::store) chain: u64,
    /// `levels[k]`: the level-k segments.
    pub(in crate::store) levels: Vec<Level>,
}

impl Delta {
    /// The stream bytes the field holds.
    pub(in crate::store) fn total(&self) -> u64 {
        self.levels.iter().map(|l| l.bytes).sum()
    }

    /// Where level `k` starts in the stream: after the levels above it.
    pub(in crate::store) fn offset(&self, k: usize) -> u64 {
        self.levels.iter().skip(k + 1).map(|l| l.bytes).sum()
    }

    /// Whether segment `(chain, level, start)` is one of this delta's own.
    #[cfg(any(test, feature = "sqlite"))]
    pub(in crate::store) fn uses(&self, chain: u64, level: u64, start: u64) -> bool {
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
/// (A PostgreSQL segment row, `(run, chain, lo, hi, bytes)`, has no level.)
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(in crate::store) struct NewSegment {
    pub(in crate::store) level: u64,
    pub(in crate::store) start: u64,
    pub(in crate::store) at: usize,
}

/// The segments of `level` starting in `start..end` of the stream, which a
/// new version folded into a segment of the next level: deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store) struct Fold {
    pub(in crate::store) level: u64,
    pub(in crate::store) start: u64,
    pub(in crate::store) end: u64,
}

/// A field stored by appending, as [`plan`] found it: where its base is,
/// its descriptor, the segment this version writes (if any) and the
/// segments it folded into that one; and how its bytes were found to
/// extend the old ones: `new[..new_header] ++ old[old_header..] ++ tail`,
/// the old body being `body_len` bytes (compared). The header lengths
/// serve the SQLite store, which seals an extended field from its old sum.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(in crate::store) struct Planned {
    pub(in crate::store) base: Loc,
    pub(in crate::store) delta: Delta,
    pub(in crate::store) segment: Option<NewSegment>,
    pub(in crate::store) folded: Vec<Fold>,
    pub(in crate::store) old_header: usize,
    pub(in crate::store) new_header: usize,
    pub(in crate::store) body_len: usize,
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
#[cfg(any(test, feature = "sqlite"))]
pub(in crate::store) fn likely_extension(new: &[u8], old: &[u8]) -> Option<(usize, usize)> {
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
pub(in crate::store) fn plan(
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
/// well formed. The errors say what is wrong, for the store's decode error.
pub(in crate::store) fn check(deltas: &[Delta], fields: usize) -> Result<(), String> {
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

/// Whether `cp`'s data is exactly its fields, concatenated in order.
pub(in crate::store) fn is_tiled(cp: &CheckpointRecord) -> bool {
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
