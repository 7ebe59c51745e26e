//! [`TxnCtx`]: what one write request sees inside the batch's transaction
//! (the writer's connection, its savepoint and the cache), and the rows it
//! builds for new checkpoints.

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension};

use super::cache::{Cache, Head};
use super::deferred::{CheckpointRow, FoldRow, RowData, SegmentRow};
use crate::store::rules;
use crate::store::sql::{to_i64, to_json, ts};
use crate::store::sqlite::checkpoints::ahead::Extension;
use crate::store::sqlite::checkpoints::delta::{self, Delta, Fold, NewSegment};
use crate::store::sqlite::checkpoints::refs::{same_shape, RefsOf, Shape};
use crate::store::sqlite::checkpoints::rows::is_tiled;
use crate::store::sqlite::checkpoints::seal::PartialSeal;
use crate::store::sqlite::checkpoints::{chain::load_id, Loc, Located};
use crate::store::sqlite::error::{append_postcard, to_postcard, to_u64, R};
use crate::store::{CheckpointRecord, Lease};
use crate::Error;

/// The segments the row of a new checkpoint writes and folds (see
/// `checkpoints::delta`), by field index and chain.
#[derive(Default)]
struct Segments {
    new: Vec<(usize, u64, NewSegment)>,
    folded: Vec<(u64, Fold)>,
}

/// Queues the segments that checkpoint `cp` of run `ord` writes and folds,
/// with the batch's rows (see [`deferred`]).
fn queue_segments(
    cx: &mut TxnCtx<'_>,
    ord: i64,
    cp: &Arc<CheckpointRecord>,
    segments: Segments,
) -> R<()> {
    let seq = to_i64(cp.seq, "seq")?;
    for (i, chain, s) in segments.new {
        let field = &cp.fields[i];
        cx.cache.deferred.push_segment(SegmentRow {
            run: ord,
            chain: to_i64(chain, "chain")?,
            level: to_i64(s.level, "level")?,
            start: to_i64(s.start, "offset")?,
            last: seq,
            cp: cp.clone(),
            at: field.offset + s.at..field.offset + field.len,
        });
    }
    for (chain, f) in segments.folded {
        cx.cache.deferred.push_fold(FoldRow {
            run: ord,
            chain: to_i64(chain, "chain")?,
            level: to_i64(f.level, "level")?,
            start: to_i64(f.start, "offset")?,
            end: to_i64(f.end, "offset")?,
        });
    }
    Ok(())
}

/// Where the fields of a new row go (see [`locate_fields`]), and the
/// record's seal, whose large fields' sums follow from how they relate
/// to the previous version's.
struct Layout<'a> {
    locs: &'a mut Vec<Loc>,
    deltas: &'a mut Vec<Delta>,
    segments: &'a mut Segments,
    seal: &'a mut PartialSeal,
    /// What the caller found out (see `checkpoints::ahead`).
    ahead: &'a [Extension],
}

/// Where the fields of `cp`, stored as row `own_id` after `prev`, will have
/// their bytes, pushed to `out`: a field whose bytes did not change since
/// `prev` references them where `prev` has them; one that appended to them
/// is stored as a delta (its base where `prev` has it, its tail as a
/// segment: see `checkpoints::delta`); the others are in the row itself,
/// in order. Returns how many bytes the row holds itself and whether any
/// field is elsewhere.
fn locate_fields(
    cp: &CheckpointRecord,
    prev: Option<&Located>,
    own_id: u64,
    tiled: bool,
    out: Layout<'_>,
) -> (u64, bool) {
    let Layout {
        locs,
        deltas,
        segments,
        seal,
        ahead,
    } = out;
    locs.reserve(cp.fields.len());
    if !tiled {
        for f in &cp.fields {
            locs.push((own_id, f.offset as u64, f.len as u64));
        }
        return (cp.data.len() as u64, false);
    }
    let (mut own_len, mut shares) = (0u64, false);
    for (i, f) in cp.fields.iter().enumerate() {
        let bytes = cp.field_bytes(i).unwrap_or_default();
        if bytes.is_empty() {
            locs.push((0, 0, 0));
            continue;
        }
        let before = prev.and_then(|p| {
            let j = match p.cp.fields.get(i) {
                Some(pf) if pf.name == f.name => i,
                _ => p.cp.fields.iter().position(|pf| pf.name == f.name)?,
            };
            Some((p, j, p.cp.field_bytes(j)?, *p.locs.get(j)?))
        });
        let Some((p, j, old, old_loc)) = before else {
            locs.push((own_id, own_len, bytes.len() as u64));
            own_len += bytes.len() as u64;
            continue;
        };
        if old == bytes {
            seal.same_as(i, p.sum(j));
            locs.push(old_loc);
            if let Some(d) = p.delta(j) {
                deltas.push(Delta {
                    field: i as u32,
                    ..d.clone()
                });
            }
            shares = true;
            continue;
        }
        let known = ahead
            .iter()
            .find(|e| e.field == i && e.old_field == j && e.against(&p.cp))
            .map(|e| (e.old_header, e.new_header));
        match delta::plan(bytes, old, old_loc, p.delta(j), (i, cp.seq), known) {
            Some(planned) => {
                if seal.pending(i) {
                    let end = planned.new_header + planned.body_len;
                    seal.extends(
                        i,
                        p.sum(j),
                        &old[..planned.old_header],
                        planned.body_len,
                        &bytes[..planned.new_header],
                        &bytes[end..],
                    );
                }
                locs.push(planned.base);
                let chain = planned.delta.chain;
                if let Some(seg) = planned.segment {
                    segments.new.push((i, chain, seg));
                }
                segments
                    .folded
                    .extend(planned.folded.into_iter().map(|f| (chain, f)));
                deltas.push(planned.delta);
                shares = true;
            }
            None => {
                let (off, len) = (own_len, bytes.len() as u64);
                locs.push((own_id, off, len));
                own_len += len;
            }
        }
    }
    (own_len, shares)
}

/// The row that stores `cp` as checkpoint `cp.seq` of run `ord` with shape
/// `shape` and the seal `seal` completes ([`checksums`](crate::store::checksums)
/// of `cp`), after `prev` (the run's previous checkpoint, whose bytes it
/// shares for fields that did not change), and where its fields' bytes will
/// be. The caller queues the row and the run's new head (see [`deferred`]).
#[allow(clippy::too_many_arguments)]
pub(in crate::store::sqlite) fn checkpoint_row(
    cx: &mut TxnCtx<'_>,
    ord: i64,
    cp: &Arc<CheckpointRecord>,
    (mut seal, ahead): (PartialSeal, &[Extension]),
    prev: Option<&Located>,
    shape: i64,
    floor: u64,
    quiet: bool,
) -> R<(CheckpointRow, Located)> {
    let id = cx.next_id()?;
    let own_id = to_u64(id, "row id")?;
    let tiled = is_tiled(cp);
    let mut locs = cx.cache.spare_locs.pop().unwrap_or_default();
    let (mut deltas, mut segments) = (Vec::new(), Segments::default());
    let layout = Layout {
        locs: &mut locs,
        deltas: &mut deltas,
        segments: &mut segments,
        seal: &mut seal,
        ahead,
    };
    let (own_len, shares) = locate_fields(cp, prev, own_id, tiled, layout);
    let (checksum, sums) = seal.finish(cp);
    let seq = to_i64(cp.seq, "seq")?;
    queue_segments(cx, ord, cp, segments)?;
    // The row stores the fields that changed, in order; when all did (or
    // the record is not tiled), that is the record's data as it is. Its own
    // bytes go to the batch's buffer, where the row is about to be queued.
    let arena = cx.cache.deferred.arena();
    let data = if own_len == 0 {
        RowData::None
    } else if !tiled || !shares {
        RowData::Whole(cp.clone())
    } else {
        let start = arena.len();
        for (i, (src, _, len)) in locs.iter().enumerate() {
            if *src == own_id && *len > 0 {
                arena.extend_from_slice(cp.field_bytes(i).unwrap_or_default());
            }
        }
        RowData::Own(start..arena.len())
    };
    let meta_start = arena.len();
    let refs = RefsOf {
        raw: !tiled,
        locs: &locs,
        own: own_id,
        deltas: &deltas,
    };
    append_postcard(&refs, arena)?;
    let refs_len = arena.len() - meta_start;
    if !cp.loops.is_empty() {
        append_postcard(&cp.loops, arena)?;
    }
    let meta = meta_start..arena.len();
    let suspend = cp.suspend.as_ref().map(to_json).transpose()?;
    let floor = if floor > 1 {
        Some(to_i64(floor, "floor")?)
    } else {
        None
    };
    let row = CheckpointRow {
        id,
        run: ord,
        seq,
        prev: prev.map(|p| to_i64(p.id, "row id")).transpose()?,
        shape,
        created_at: ts(cp.created_at),
        floor,
        quiet: quiet.then_some(1i64),
        suspend,
        size: cp.data.len() as i64,
        meta,
        refs_len,
        data,
        checksum,
    };
    let located = Located {
        cp: cp.clone(),
        id: own_id,
        shape,
        locs,
        deltas,
        sums,
    };
    Ok((row, located))
}

/// What a write request sees: the writer's connection (inside the batch
/// transaction) and its cache.
pub(in crate::store::sqlite) struct TxnCtx<'a> {
    pub(in crate::store::sqlite) conn: &'a Connection,
    pub(in crate::store::sqlite) cache: &'a mut Cache,
    /// Set by requests whose commit may make a run runnable or finished.
    pub(in crate::store::sqlite) bump: bool,
    /// Whether the request's savepoint is open.
    pub(in crate::store::sqlite) savepoint: bool,
    /// Set when a request without a savepoint could not undo a partial
    /// write: the whole batch is rolled back.
    pub(in crate::store::sqlite) abort: bool,
}

impl TxnCtx<'_> {
    /// Opens the request's savepoint, so that its writes can be rolled back
    /// alone. A request calls this before its first write unless it writes
    /// one statement only and nothing can fail after it (a failing statement
    /// undoes itself).
    ///
    /// The rows other requests left deferred are written first, so that a
    /// rollback to the savepoint never takes them back.
    pub(in crate::store::sqlite) fn begin(&mut self) -> R<()> {
        if !self.savepoint {
            self.flush()?;
            self.conn.prepare_cached("SAVEPOINT job")?.execute([])?;
            self.savepoint = true;
        }
        Ok(())
    }

    /// Writes the deferred checkpoint rows and heads now. If that fails
    /// outside a savepoint, part of them may be written: the whole batch is
    /// rolled back.
    pub(in crate::store::sqlite) fn flush(&mut self) -> R<()> {
        if self.cache.deferred.is_empty() {
            return Ok(());
        }
        let res = self.cache.deferred.flush(self.conn);
        if res.is_err() && !self.savepoint {
            self.abort = true;
        }
        res
    }

    /// The next id for a `checkpoints` or `history` row (one counter for both,
    /// so that a run's history is the two merged by id).
    pub(in crate::store::sqlite) fn next_id(&mut self) -> R<i64> {
        let id = match self.cache.next_id {
            Some(id) => id,
            None => self
                .conn
                .prepare_cached(
                    "SELECT max(coalesce((SELECT max(id) FROM checkpoints), 0), \
                                coalesce((SELECT max(id) FROM history), 0)) + 1",
                )?
                .query_row([], |r| r.get(0))?,
        };
        self.cache.next_id = Some(id + 1);
        Ok(id)
    }

    /// Takes run `id`'s head out of the cache (or loads it); give it back
    /// with [`TxnCtx::put`] once changed.
    pub(in crate::store::sqlite) fn head(&mut self, id: &str) -> R<Box<Head>> {
        match self.cache.take(id) {
            Some(h) => Ok(h),
            None => {
                // The run's head may be among the deferred ones.
                self.flush()?;
                Head::load(self.conn, id)?
                    .map(Box::new)
                    .ok_or_else(|| Error::unknown_run(id).into())
            }
        }
    }

    pub(in crate::store::sqlite) fn put(&mut self, id: Arc<str>, head: impl Into<Box<Head>>) {
        self.cache.put(id, head);
    }

    /// The head of run `id`, if `lease` still holds it.
    pub(in crate::store::sqlite) fn fenced(&mut self, id: &str, lease: &Lease) -> R<Box<Head>> {
        let h = self.head(id)?;
        match rules::check_lease(id, &h.rec, lease) {
            Ok(()) => Ok(h),
            Err(e) => {
                self.put(Arc::from(id), h);
                Err(e.into())
            }
        }
    }

    /// The latest checkpoint of a head, loaded if needed.
    pub(in crate::store::sqlite) fn latest<'h>(
        &mut self,
        h: &'h mut Head,
    ) -> R<Option<&'h Located>> {
        if h.lost_latest {
            let (run, workflow) = (&h.rec.id, Some(h.rec.workflow.as_str()));
            return Err(rules::missing_checkpoint(run, workflow, None).into());
        }
        if h.rec.latest_seq == 0 {
            return Ok(None);
        }
        if h.prev.as_ref().map(|p| p.cp.seq) != Some(h.rec.latest_seq) {
            let run: Arc<str> = Arc::from(h.rec.id.as_str());
            h.prev = load_id(self.conn, h.ord, &run, h.latest_id)?;
            if h.prev.as_ref().map(|p| p.cp.seq) != Some(h.rec.latest_seq) {
                let (run, workflow) = (&h.rec.id, Some(h.rec.workflow.as_str()));
                let seq = Some(h.rec.latest_seq);
                return Err(rules::missing_checkpoint(run, workflow, seq).into());
            }
        }
        Ok(h.prev.as_ref())
    }

    /// The shape id of `cp` if known without touching the database.
    pub(in crate::store::sqlite) fn known_shape(
        &self,
        cp: &CheckpointRecord,
        prev: Option<&Located>,
    ) -> Option<(i64, Vec<u8>)> {
        if let Some(p) = prev {
            if same_shape(cp, &p.cp) {
                return Some((p.shape, Vec::new()));
            }
        }
        let body = to_postcard(&Shape::of(cp)).ok()?;
        self.cache.shapes.get(&body).map(|id| (*id, body))
    }

    /// The shape id of `cp`, interned if new.
    pub(in crate::store::sqlite) fn shape_id(&mut self, cp: &CheckpointRecord) -> R<i64> {
        let body = to_postcard(&Shape::of(cp))?;
        if let Some(id) = self.cache.shapes.get(&body) {
            return Ok(*id);
        }
        let found: Option<i64> = self
            .conn
            .prepare_cached("SELECT id FROM shapes WHERE body = ?1")?
            .query_row([&body], |r| r.get(0))
            .optional()?;
        let id = match found {
            Some(id) => id,
            None => {
                self.begin()?;
                self.conn
                    .prepare_cached("INSERT INTO shapes (body) VALUES (?1)")?
                    .execute([&body])?;
                self.conn.last_insert_rowid()
            }
        };
        self.cache.new_shapes.push(body.clone());
        self.cache.shapes.insert(body, id);
        Ok(id)
    }
}
