//! What the writer remembers across transactions: each run's head (its row
//! and latest checkpoint) and the interned shapes.

use std::collections::HashMap;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension};

use super::deferred::{Deferred, DeferredMark};
use crate::store::sql::run_row::state_code;
use crate::store::sqlite::checkpoints::{Loc, Located};
use crate::store::sqlite::error::{corrupt, to_u64, R};
use crate::store::sqlite::runs::{RawRun, RUN_COLS};
use crate::store::RunRecord;

/// The writer remembers at most this many runs (state and latest checkpoint,
/// to check leases and compare fields without reading them back) ...
pub(in crate::store::sqlite) const CACHE_RUNS: usize = 4096;

/// ... holding at most this many bytes of checkpoint data.
pub(in crate::store::sqlite) const CACHE_BYTES: usize = 16 << 20;

/// The writer keeps at most this many spare field location lists.
pub(in crate::store::sqlite) const SPARE_LOCS: usize = 1024;

/// What the writer knows of a run: its row (without the input) and its latest
/// checkpoint. Kept in sync with the database by every write.
pub(in crate::store::sqlite) struct Head {
    pub(in crate::store::sqlite) ord: i64,
    /// The run, with `latest_seq` and `updated_at` as readers compute them;
    /// the input is left out.
    pub(in crate::store::sqlite) rec: RunRecord,
    /// `runs.state` as stored.
    pub(in crate::store::sqlite) stored: i64,
    /// The latest checkpoint row (0: none).
    pub(in crate::store::sqlite) latest_id: i64,
    /// The oldest kept seq.
    pub(in crate::store::sqlite) floor: u64,
    /// `heads.pruned`.
    pub(in crate::store::sqlite) pruned: u64,
    /// The latest checkpoint, when loaded.
    pub(in crate::store::sqlite) prev: Option<Located>,
    /// Set when `heads` names a latest checkpoint row that is missing (a
    /// damaged store): the run's latest seq is unknown, and loading its
    /// latest checkpoint fails (see `TxnCtx::latest`).
    pub(in crate::store::sqlite) lost_latest: bool,
}

impl Head {
    pub(in crate::store::sqlite) fn load(conn: &Connection, id: &str) -> R<Option<Head>> {
        let raw = conn
            .prepare_cached(&format!("SELECT {RUN_COLS} FROM runs r WHERE r.id = ?1"))?
            .query_row([id], RawRun::from_row)
            .optional()?;
        let Some(mut raw) = raw else {
            return Ok(None);
        };
        type Latest = (Option<i64>, i64, Option<i64>, Option<i64>, Option<i64>);
        let (latest_id, pruned, seq, floor, at): Latest = conn
            .prepare_cached(
                "SELECT h.latest, h.pruned, c.seq, c.floor, c.created_at \
                 FROM heads h LEFT JOIN checkpoints c ON c.id = h.latest WHERE h.run = ?1",
            )?
            .query_row([raw.ord], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .optional()?
            .ok_or_else(|| corrupt(format_args!("run `{id}` has no head")))?;
        raw.set_latest(seq, at);
        let stored = raw.row.state;
        let (ord, rec) = raw.into_record()?;
        Ok(Some(Head {
            ord,
            rec,
            stored,
            latest_id: latest_id.unwrap_or(0),
            floor: to_u64(floor.unwrap_or(1), "floor")?,
            pruned: to_u64(pruned, "seq")?,
            prev: None,
            lost_latest: latest_id.is_some() && seq.is_none(),
        }))
    }

    /// The head of run `rec`, just inserted as row `ord` (its `heads` row
    /// names no checkpoint yet).
    pub(in crate::store::sqlite) fn new(ord: i64, rec: RunRecord) -> Head {
        Head {
            ord,
            stored: state_code(&rec.state),
            rec,
            latest_id: 0,
            floor: 1,
            pruned: 1,
            prev: None,
            lost_latest: false,
        }
    }

    pub(in crate::store::sqlite) fn bytes(&self) -> usize {
        self.prev.as_ref().map_or(0, |p| p.cp.data.len())
    }
}

/// What the writer remembers across transactions: interned shapes (immutable
/// once committed) and what it knows of runs, which is dropped whenever another
/// connection commits (see [`Writer::run_batch`]) and, run by run, whenever a
/// request that touched it is rolled back.
#[derive(Default)]
pub(in crate::store::sqlite) struct Cache {
    /// Interned shapes: body -> `shapes.id`.
    pub(in crate::store::sqlite) shapes: HashMap<Vec<u8>, i64>,
    /// Shapes added by the open transaction (undone if it rolls back).
    pub(in crate::store::sqlite) new_shapes: Vec<Vec<u8>>,
    /// Boxed: a request takes its run's head out and puts it back, and a
    /// head is a few hundred bytes.
    pub(in crate::store::sqlite) heads:
        HashMap<Arc<str>, Box<Head>, std::hash::BuildHasherDefault<FastHash>>,
    /// Checkpoint bytes held by `heads`.
    pub(in crate::store::sqlite) bytes: usize,
    /// Runs whose head the open transaction changed.
    pub(in crate::store::sqlite) touched: Vec<Arc<str>>,
    /// The next id of a `checkpoints` or `history` row.
    pub(in crate::store::sqlite) next_id: Option<i64>,
    /// `PRAGMA data_version` when the writer last looked.
    pub(in crate::store::sqlite) data_version: Option<i64>,
    /// Checkpoints replaced in the cache, dropped by the thread that answers
    /// the batch (freeing a thousand records takes a while).
    pub(in crate::store::sqlite) garbage: Vec<Located>,
    /// Emptied field location lists of replaced checkpoints, for the next
    /// rows: the writer allocates as little as it can, since what it
    /// allocates is mostly freed by other threads (slow for both).
    pub(in crate::store::sqlite) spare_locs: Vec<Vec<Loc>>,
    /// Checkpoint rows and heads of the open transaction not written yet.
    pub(in crate::store::sqlite) deferred: Deferred,
}

/// What [`Cache::undo_to`] takes a failed request's changes back to.
#[derive(Clone, Copy, Default)]
pub(in crate::store::sqlite) struct CacheMark {
    pub(in crate::store::sqlite) shapes: usize,
    pub(in crate::store::sqlite) touched: usize,
    pub(in crate::store::sqlite) deferred: DeferredMark,
}

/// A quick hash for the writer's map of runs (FxHash's mixing).
#[derive(Default, Clone, Copy)]
pub(in crate::store::sqlite) struct FastHash(u64);

impl std::hash::Hasher for FastHash {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let word = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            self.add(word);
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.add(u64::from(b));
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl FastHash {
    pub(in crate::store::sqlite) fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Cache {
    pub(in crate::store::sqlite) fn mark(&self) -> CacheMark {
        CacheMark {
            shapes: self.new_shapes.len(),
            touched: self.touched.len(),
            deferred: self.deferred.mark(),
        }
    }

    pub(in crate::store::sqlite) fn undo_to(&mut self, mark: CacheMark) {
        for body in self.new_shapes.split_off(mark.shapes) {
            self.shapes.remove(&body);
        }
        for id in self.touched.split_off(mark.touched) {
            self.forget(&id);
        }
        self.deferred.undo_to(mark.deferred);
    }

    /// Forgets everything the open transaction did (it was rolled back).
    pub(in crate::store::sqlite) fn rolled_back(&mut self) {
        self.undo_to(CacheMark::default());
        self.deferred.clear();
        self.reset_runs();
    }

    pub(in crate::store::sqlite) fn committed(&mut self) {
        self.new_shapes.clear();
        self.touched.clear();
    }

    /// Forgets everything about runs (another connection may have changed them).
    pub(in crate::store::sqlite) fn reset_runs(&mut self) {
        self.heads.clear();
        self.bytes = 0;
        self.touched.clear();
        self.next_id = None;
    }

    pub(in crate::store::sqlite) fn recycle_locs(&mut self, mut locs: Vec<Loc>) {
        if self.spare_locs.len() < SPARE_LOCS {
            locs.clear();
            self.spare_locs.push(locs);
        }
    }

    pub(in crate::store::sqlite) fn take(&mut self, id: &str) -> Option<Box<Head>> {
        let h = self.heads.remove(id)?;
        self.bytes = self.bytes.saturating_sub(h.bytes());
        Some(h)
    }

    pub(in crate::store::sqlite) fn forget(&mut self, id: &str) {
        self.take(id);
    }

    pub(in crate::store::sqlite) fn put(&mut self, id: Arc<str>, head: impl Into<Box<Head>>) {
        let mut head = head.into();
        let size = head.bytes();
        if size > CACHE_BYTES {
            head.prev = None;
        }
        if self.heads.len() >= CACHE_RUNS || self.bytes + head.bytes() > CACHE_BYTES {
            self.heads.clear();
            self.bytes = 0;
        }
        self.bytes += head.bytes();
        self.touched.push(id.clone());
        self.heads.insert(id, head);
    }
}
