//! Checkpoint rows and head pointers written together at the end of a group
//! commit.
//!
//! A plain checkpoint is two writes: its row in `checkpoints` and the run's
//! `heads.latest`. With a thousand runs sharing a commit, the writer thread
//! is what limits throughput, and written one statement each, the
//! per-statement work (statement cache lookup, bind, step, reset, statement
//! journal) was about a fifth of its instructions. So a request only checks
//! the lease and builds its row ([`CheckpointRow`]); the rows of the batch are
//! inserted with multi-row statements, then the heads upserted the same way,
//! by [`Deferred::flush`].
//!
//! The writer flushes before the commit and before anything that may read
//! those tables or roll back to a savepoint: before every request that does
//! not keep rows deferred (all but `save_checkpoint`), when a request opens
//! its savepoint, and when a request must load a run from the database. So
//! every SQL statement other than the flush sees the tables as if each row
//! had been written by its own request, and a savepoint only ever covers
//! the rows of the request that opened it. A flush that fails outside a
//! savepoint may have written part of the rows: the batch is then rolled
//! back as a whole (each caller gets the error, nothing is half-written).

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use rusqlite::{Connection, ToSql};

use crate::store::sqlite::error::{corrupt, R};
use crate::store::CheckpointRecord;

/// The rows one multi-row statement writes, largest first: a batch is
/// written with as many statements of 64 rows as fit, then the rest with
/// the smaller sizes (so at most a few distinct statements are prepared).
const CHUNKS: [usize; 4] = [64, 16, 4, 1];

/// The columns of a `checkpoints` row, in the order of
/// [`CheckpointRow::bind`].
const ROW_COLUMNS: &str = "id, run, seq, prev, shape, created_at, floor, quiet, loops, suspend, \
                           size, refs, data, checksum";
const ROW_PARAMS: usize = 14;

/// [`Deferred::bytes`] keeps at most this much room once a batch is
/// written (a batch of large changed fields would otherwise leave its size
/// allocated for good).
const KEEP_BYTES: usize = 4 << 20;

/// One `checkpoints` row, ready to be inserted (see the table's comments in
/// `migrate_v1`, and `migrate_v2` for `checksum`).
pub(in crate::store::sqlite) struct CheckpointRow {
    pub id: i64,
    pub run: i64,
    pub seq: i64,
    pub prev: Option<i64>,
    pub shape: i64,
    pub created_at: i64,
    pub floor: Option<i64>,
    pub quiet: Option<i64>,
    pub suspend: Option<String>,
    pub size: i64,
    /// Where `refs` then `loops` (if any) are in [`Deferred::bytes`].
    pub meta: Range<usize>,
    pub refs_len: usize,
    pub data: RowData,
    /// The record's seal (see `store::integrity`).
    pub checksum: Vec<u8>,
}

/// The `data` column of a checkpoint row.
pub(in crate::store::sqlite) enum RowData {
    /// No bytes of its own: every field is shared with earlier rows.
    None,
    /// The fields stored by this row, concatenated, where they are in
    /// [`Deferred::bytes`].
    Own(Range<usize>),
    /// The record's whole data, as it is (not copied).
    Whole(Arc<CheckpointRecord>),
}

impl RowData {
    fn bytes<'a>(&'a self, arena: &'a [u8]) -> rusqlite::Result<Option<&'a [u8]>> {
        Ok(match self {
            RowData::None => None,
            RowData::Own(at) => Some(in_arena(arena, at)?),
            RowData::Whole(cp) => Some(&cp.data),
        })
    }
}

/// Bytes `at` of the batch's buffer; an error (never other bytes) if a bug
/// let the buffer lose them.
fn in_arena<'a>(arena: &'a [u8], at: &Range<usize>) -> rusqlite::Result<&'a [u8]> {
    arena.get(at.clone()).ok_or_else(|| {
        rusqlite::Error::ToSqlConversionFailure(
            format!(
                "deferred row bytes {at:?} are not in the batch's buffer ({} bytes)",
                arena.len()
            )
            .into(),
        )
    })
}

impl CheckpointRow {
    /// Binds the row's values from parameter `at` on, its bytes being in
    /// `arena`.
    fn bind(
        &self,
        stmt: &mut rusqlite::Statement<'_>,
        at: usize,
        arena: &[u8],
    ) -> rusqlite::Result<()> {
        let data = self.data.bytes(arena)?;
        let meta = in_arena(arena, &self.meta)?;
        let (refs, loops) = meta.split_at(self.refs_len.min(meta.len()));
        let loops = (!loops.is_empty()).then_some(loops);
        let values: [Option<&dyn ToSql>; ROW_PARAMS] = [
            Some(&self.id),
            Some(&self.run),
            Some(&self.seq),
            self.prev.as_ref().map(|v| v as &dyn ToSql),
            Some(&self.shape),
            Some(&self.created_at),
            self.floor.as_ref().map(|v| v as &dyn ToSql),
            self.quiet.as_ref().map(|v| v as &dyn ToSql),
            loops.as_ref().map(|v| v as &dyn ToSql),
            self.suspend.as_ref().map(|v| v as &dyn ToSql),
            Some(&self.size),
            Some(&refs),
            data.as_ref().map(|v| v as &dyn ToSql),
            Some(&self.checksum),
        ];
        // Every parameter, NULLs too: the statement is reused from chunk to
        // chunk and keeps what the previous chunk bound (see `write_chunked`).
        for (i, v) in values.into_iter().enumerate() {
            match v {
                Some(v) => stmt.raw_bind_parameter(at + i, v)?,
                None => stmt.raw_bind_parameter(at + i, rusqlite::types::Null)?,
            }
        }
        Ok(())
    }
}

/// A `segments` row of a field stored by appending (see
/// `checkpoints::delta`): bytes `at` of the data of `cp`, the checkpoint
/// whose row references it (not copied).
pub(in crate::store::sqlite) struct SegmentRow {
    pub run: i64,
    pub chain: i64,
    pub level: i64,
    pub start: i64,
    pub last: i64,
    pub cp: Arc<CheckpointRecord>,
    pub at: Range<usize>,
}

/// The segments of a chain's level in a range of its stream, folded into a
/// segment of the next level: deleted after the batch's new segments are
/// written.
pub(in crate::store::sqlite) struct FoldRow {
    pub run: i64,
    pub chain: i64,
    pub level: i64,
    pub start: i64,
    pub end: i64,
}

impl SegmentRow {
    fn bind(&self, stmt: &mut rusqlite::Statement<'_>, at: usize) -> rusqlite::Result<()> {
        let data = self.cp.data.get(self.at.clone()).ok_or_else(|| {
            rusqlite::Error::ToSqlConversionFailure(
                format!("segment bytes {:?} are not in their record", self.at).into(),
            )
        })?;
        stmt.raw_bind_parameter(at, self.run)?;
        stmt.raw_bind_parameter(at + 1, self.chain)?;
        stmt.raw_bind_parameter(at + 2, self.level)?;
        stmt.raw_bind_parameter(at + 3, self.start)?;
        stmt.raw_bind_parameter(at + 4, self.last)?;
        stmt.raw_bind_parameter(at + 5, data)
    }
}

/// A new value of a run's `heads` row.
pub(in crate::store::sqlite) struct HeadUpdate {
    pub run: i64,
    pub latest: i64,
    pub pruned: i64,
}

/// Where the undo of a failed request cuts the pending lists back to.
#[derive(Clone, Copy, Default)]
pub(in crate::store::sqlite) struct DeferredMark {
    rows: u64,
    segments: u64,
    folds: u64,
    heads: u64,
    bytes: usize,
}

/// The rows and head updates of the open batch not yet written.
#[derive(Default)]
pub(in crate::store::sqlite) struct Deferred {
    rows: Vec<CheckpointRow>,
    segments: Vec<SegmentRow>,
    folds: Vec<FoldRow>,
    heads: Vec<HeadUpdate>,
    /// The bytes the pending rows own (their fields and `refs`), in one
    /// buffer reused from batch to batch: allocating them row by row was
    /// a tenth of the writer's time (most rows own about as much as a
    /// record, past the size at which glibc's `malloc` consolidates its
    /// free lists).
    bytes: Vec<u8>,
    /// How many rows / segments / heads were ever pushed (for
    /// [`Deferred::undo_to`], which must tell a request's own entries from
    /// flushed ones).
    pushed_rows: u64,
    pushed_segments: u64,
    pushed_folds: u64,
    pushed_heads: u64,
    /// The bytes of blobs and texts (rows' data, references, loop
    /// positions, seals and suspensions; segments' data) written by the
    /// flushes of the open batch (see [`Deferred::take_written`]).
    written: u64,
}

impl Deferred {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
            && self.heads.is_empty()
            && self.segments.is_empty()
            && self.folds.is_empty()
    }

    pub fn push_fold(&mut self, fold: FoldRow) {
        self.folds.push(fold);
        self.pushed_folds += 1;
    }

    pub fn push_segment(&mut self, segment: SegmentRow) {
        self.segments.push(segment);
        self.pushed_segments += 1;
    }

    pub fn push_row(&mut self, row: CheckpointRow) {
        self.rows.push(row);
        self.pushed_rows += 1;
    }

    /// The buffer a row about to be pushed puts its bytes in (see
    /// [`CheckpointRow::meta`] and [`RowData::Own`]).
    pub fn arena(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    pub fn push_head(&mut self, head: HeadUpdate) {
        self.heads.push(head);
        self.pushed_heads += 1;
    }

    pub fn mark(&self) -> DeferredMark {
        DeferredMark {
            rows: self.pushed_rows,
            segments: self.pushed_segments,
            folds: self.pushed_folds,
            heads: self.pushed_heads,
            bytes: self.bytes.len(),
        }
    }

    /// Drops what was pushed since `mark` and is still pending (a failed
    /// request's rows).
    pub fn undo_to(&mut self, mark: DeferredMark) {
        let rows = (self.pushed_rows - mark.rows).min(self.rows.len() as u64) as usize;
        self.rows.truncate(self.rows.len() - rows);
        let segments =
            (self.pushed_segments - mark.segments).min(self.segments.len() as u64) as usize;
        self.segments.truncate(self.segments.len() - segments);
        let folds = (self.pushed_folds - mark.folds).min(self.folds.len() as u64) as usize;
        self.folds.truncate(self.folds.len() - folds);
        let heads = (self.pushed_heads - mark.heads).min(self.heads.len() as u64) as usize;
        self.heads.truncate(self.heads.len() - heads);
        if self.rows.is_empty() {
            self.clear_bytes();
        } else {
            self.bytes.truncate(mark.bytes);
        }
    }

    /// The bytes [`Deferred::flush`] wrote since the last call (a rolled
    /// back batch's are dropped by [`Deferred::clear`]).
    pub fn take_written(&mut self) -> u64 {
        std::mem::take(&mut self.written)
    }

    /// Forgets everything pending (the batch was rolled back).
    pub fn clear(&mut self) {
        self.written = 0;
        self.rows.clear();
        self.segments.clear();
        self.folds.clear();
        self.heads.clear();
        self.clear_bytes();
    }

    fn clear_bytes(&mut self) {
        self.bytes.clear();
        self.bytes.shrink_to(KEEP_BYTES);
    }

    /// Writes the pending rows and segments, then the pending heads (the
    /// last update of each run wins), and empties the lists whatever
    /// happens.
    pub fn flush(&mut self, conn: &Connection) -> R<()> {
        // The lists are emptied in place: their buffers are reused by the next
        // batch (freeing and allocating them each time costs more).
        let arena = &self.bytes;
        for row in &self.rows {
            let data = match &row.data {
                RowData::None => 0,
                RowData::Own(at) => at.len(),
                RowData::Whole(cp) => cp.data.len(),
            };
            let text = row.suspend.as_ref().map_or(0, String::len);
            self.written += (data + row.meta.len() + row.checksum.len() + text) as u64;
        }
        self.written += self.segments.iter().map(|s| s.at.len() as u64).sum::<u64>();
        let rows = write_chunked(conn, &self.rows, ROW_PARAMS, row_sql, |stmt, row, at| {
            row.bind(stmt, at, arena)
        });
        self.rows.clear();
        self.clear_bytes();
        let rows = rows.and_then(|()| {
            write_chunked(conn, &self.segments, 6, segment_sql, |stmt, seg, at| {
                seg.bind(stmt, at)
            })
        });
        self.segments.clear();
        let rows = rows.and_then(|()| delete_folded(conn, &self.folds));
        self.folds.clear();
        // A stable sort keeps pushes of one run in order; the last one wins.
        // In run order, the updates also walk the `heads` pages in order.
        self.heads.sort_by_key(|h| h.run);
        self.heads.dedup_by(|later, kept| {
            let same = later.run == kept.run;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        let heads = rows.and_then(|()| {
            write_chunked(conn, &self.heads, 3, head_sql, |stmt, h, at| {
                stmt.raw_bind_parameter(at, h.run)?;
                stmt.raw_bind_parameter(at + 1, h.latest)?;
                stmt.raw_bind_parameter(at + 2, h.pruned)
            })
        });
        self.heads.clear();
        heads
    }
}

/// Writes `items` with the statements `sql(n)` for the sizes in [`CHUNKS`],
/// binding each item's `width` parameters with `bind`, which must bind every
/// one of them: a statement keeps its bindings from one chunk to the next.
fn write_chunked<T>(
    conn: &Connection,
    items: &[T],
    width: usize,
    sql: fn(usize) -> &'static str,
    bind: impl Fn(&mut rusqlite::Statement<'_>, &T, usize) -> rusqlite::Result<()>,
) -> R<()> {
    let mut rest = items;
    // One statement per chunk size, kept while it is used: handing it back
    // to the cache clears its bindings, which frees the buffer SQLite keeps
    // for each bound blob (the next chunk would allocate them all again).
    let mut held: Option<(usize, rusqlite::CachedStatement<'_>)> = None;
    while !rest.is_empty() {
        let n = CHUNKS.into_iter().find(|&n| n <= rest.len()).unwrap_or(1);
        let (chunk, tail) = rest.split_at(n);
        let stmt = match &mut held {
            Some((size, stmt)) if *size == n => stmt,
            _ => &mut held.insert((n, conn.prepare_cached(sql(n))?)).1,
        };
        for (i, item) in chunk.iter().enumerate() {
            bind(stmt, item, 1 + i * width)?;
        }
        let written = stmt.raw_execute()?;
        if written != n {
            return Err(corrupt(format_args!(
                "a batch write changed {written} rows instead of {n} (a checkpoint row id used twice?)"
            )));
        }
        rest = tail;
    }
    Ok(())
}

/// `INSERT INTO checkpoints ... VALUES (...), ...` for `n` rows. `OR
/// IGNORE`: without it, SQLite keeps a statement journal for a multi-row
/// insert that could fail half-way; with it, a row that conflicts is left
/// out, which [`write_chunked`] reports as corruption (ids are never reused).
fn row_sql(n: usize) -> &'static str {
    static SQL: OnceLock<Vec<String>> = OnceLock::new();
    let all = SQL.get_or_init(|| {
        let one = format!("({})", vec!["?"; ROW_PARAMS].join(", "));
        CHUNKS
            .iter()
            .map(|&n| {
                format!(
                    "INSERT OR IGNORE INTO checkpoints ({ROW_COLUMNS}) VALUES {}",
                    vec![one.as_str(); n].join(", ")
                )
            })
            .collect()
    });
    chunk_sql(all, n)
}

/// `INSERT INTO segments ... VALUES (...), ...` for `n` segments (`OR
/// IGNORE`: see [`row_sql`]; keys are never reused either).
fn segment_sql(n: usize) -> &'static str {
    static SQL: OnceLock<Vec<String>> = OnceLock::new();
    let all = SQL.get_or_init(|| {
        CHUNKS
            .iter()
            .map(|&n| {
                format!(
                    "INSERT OR IGNORE INTO segments (run, chain, level, start, last, data) \
                     VALUES {}",
                    vec!["(?, ?, ?, ?, ?, ?)"; n].join(", ")
                )
            })
            .collect()
    });
    chunk_sql(all, n)
}

/// Deletes the segments of each fold (rare: one in 256 appending versions).
fn delete_folded(conn: &Connection, folds: &[FoldRow]) -> R<()> {
    if folds.is_empty() {
        return Ok(());
    }
    let mut stmt = conn.prepare_cached(
        "DELETE FROM segments WHERE run = ?1 AND chain = ?2 AND level = ?3 \
         AND start >= ?4 AND start < ?5",
    )?;
    for f in folds {
        stmt.execute(rusqlite::params![f.run, f.chain, f.level, f.start, f.end])?;
    }
    Ok(())
}

/// The upsert of `n` runs' heads (all distinct). An upsert, not `UPDATE ...
/// FROM (VALUES ...)`, which SQLite runs through two temporary tables. `OR
/// IGNORE` (no constraint but the key can fail: the values are bound, never
/// NULL) spares SQLite a statement journal.
fn head_sql(n: usize) -> &'static str {
    static SQL: OnceLock<Vec<String>> = OnceLock::new();
    let all = SQL.get_or_init(|| {
        CHUNKS
            .iter()
            .map(|&n| {
                format!(
                    "INSERT OR IGNORE INTO heads (run, latest, pruned) VALUES {} \
                     ON CONFLICT (run) DO UPDATE SET latest = excluded.latest, \
                     pruned = excluded.pruned",
                    vec!["(?, ?, ?)"; n].join(", ")
                )
            })
            .collect()
    });
    chunk_sql(all, n)
}

fn chunk_sql(all: &[String], n: usize) -> &str {
    let i = CHUNKS
        .iter()
        .position(|&c| c == n)
        .unwrap_or(CHUNKS.len() - 1);
    &all[i]
}
