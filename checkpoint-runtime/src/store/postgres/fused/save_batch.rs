//! The checkpoint saves of a group commit as one statement ([`BATCH`]):
//! the rule is `rules::save_checkpoint` (fenced by `rules::check_lease`
//! and `rules::check_next_seq`), as in [`save`](super::save): what the
//! saves' own statements would write, for every save of the batch at
//! once, from columns it unnests (each run's columns are the rule applied
//! to a blank record, `save::saved_run`). `tests/fused.rs` compares it
//! with the generic save (`locked::save_locked`).
//!
//! A statement per save cost the server about 200 us each (its executor
//! started for the run's `UPDATE` and the checkpoint's `INSERT`, its 30-odd
//! parameters bound), against about 7 us per row for one multi-row
//! `INSERT`. One statement for the batch pays that once.
//!
//! Each save is fenced as its own statement fences it: its run's row is
//! updated only when its lease, epoch and previous seq are still the ones
//! the save was made under, and everything else of the save is written
//! only with that update (joined on `r`, the rows the update returned).
//! The statement returns the index of every save it wrote; the others
//! changed nothing and are done on their own after the batch committed,
//! as a refused statement's are. The runs' rows are locked in the order of
//! their ids (`k`, which `r` runs first as a one-time filter), so two
//! batches never wait for each other in a cycle.
//!
//! The statement is prepared once, so its plan is generic: it takes every
//! unnested column for about 10 rows. No step may then rescan one of them
//! per row of another (a nested loop over a CTE of the saves made a batch
//! of 400 saves take 200 ms), nor compare every run's id with every saved
//! one (`id = ANY (..)` over `cp_runs`). And the `UPDATE` reads only the
//! run columns (`u`, an `unnest` of them alone): an `UPDATE .. FROM` keeps
//! the whole row of what it joins, for rechecking it after waiting for a
//! lock, and when that row held the checkpoints' bytes too, building it
//! was the largest part of the server's time (`ExecEvalWholeRowVar`,
//! `heap_form_tuple`). The checkpoint rows are unnested once more, for the
//! `INSERT` alone (`v`).
//!
//! The checks on the run's row alone (a lease with an expiry, a decodable
//! state and wake value) are written as one condition with the save's
//! index (`u.idx IS NULL OR ..`, never NULL), so that they are checked at
//! the join and not estimated as the table scan's filter: with statistics
//! taken while most runs waited for a signal (no run ready, none leased),
//! the planner took them to select one row of `cp_runs`, read every run
//! once per save of the batch in a nested loop, and a batch of 487 saves
//! beside 20,000 waiting runs took 280 ms (the bench's crowded case: 0.12x
//! the checkpoints per second of an empty store).

use tokio_postgres::types::ToSql;

use super::save::Save;
use crate::store::postgres::tables::checkpoints::{cp_insert_cols, CpColumns};
use crate::store::postgres::tables::runs::SavedColumns;

/// The batch statement (see the module docs), for saves without
/// retention (a save with it goes as its own statement). Its parameters,
/// in the order of [`Columns::params`]: the saves' checkpoint rows
/// (`$1`–`$12`: index, run, seq, site key, label, site index, data,
/// suspension, time, seal, appended, meta), their chains as one array
/// literal each (`$13`; see `CpColumns`), the run columns they set
/// (`$14`–`$24`, as `Bound::saved`), their fences (`$25`–`$28`: epoch,
/// worker, instance, previous seq), and their segment writes and folds
/// (`$29`–`$33`, `$34`–`$37`, each with its save's index first; a batch
/// without folds does not look for segments to delete: `cardinality($34)`
/// is a one-time filter).
pub(in crate::store::postgres) const BATCH: &str = concat!(
    "WITH k AS MATERIALIZED (SELECT id FROM cp_runs \
       WHERE id IN (SELECT unnest($2::text[])) ORDER BY id FOR UPDATE), \
     r AS (UPDATE cp_runs SET state = u.state, signal = u.signal, due = u.due, \
       output = u.output, error = u.error, attempt = u.attempt, latest_seq = u.latest_seq, \
       wake_seq = u.wake_seq, wake_signal = u.wake_signal, wake_payload = u.wake_payload, \
       updated_at = u.updated_at \
       FROM unnest($1::integer[], $2::text[], \
         $14::smallint[], $15::text[], $16::bigint[], $17::bytea[], $18::text[], \
         $19::integer[], $20::bigint[], $21::bigint[], $22::text[], $23::bytea[], \
         $24::bigint[], $25::bigint[], $26::text[], $27::text[], $28::bigint[]) \
       AS u (idx, run, state, signal, due, output, error, attempt, latest_seq, wake_seq, \
         wake_signal, wake_payload, updated_at, epoch, worker, instance, prev) \
       WHERE (SELECT count(*) FROM k) >= 0 AND cp_runs.id = u.run \
         AND cp_runs.epoch = u.epoch AND lease_worker = u.worker \
         AND lease_instance = u.instance AND cp_runs.latest_seq = u.prev \
         AND (u.idx IS NULL OR (lease_expires IS NOT NULL AND ",
    decodable!("cp_runs."),
    " AND (cp_runs.wake_seq IS NULL OR cp_runs.wake_seq >= 0))) \
       RETURNING u.idx, u.run), \
     c AS (INSERT INTO cp_checkpoints (",
    cp_insert_cols!(),
    ", event_id, appended, chains) SELECT r.run, v.seq, v.site_key, v.label, v.site_index, \
       v.meta, v.data, v.suspend::jsonb, v.created_at, \
       v.checksum, nextval('cp_history_id_seq'), v.appended, v.chains::bigint[] \
       FROM r JOIN unnest($1::integer[], $3::bigint[], $4::text[], $5::text[], \
         $6::integer[], $7::bytea[], $8::text[], $9::bigint[], $10::bytea[], $11::bytea[], \
         $12::bytea[], $13::text[]) \
         AS v (idx, seq, site_key, label, site_index, data, suspend, created_at, checksum, \
           appended, meta, chains) ON v.idx = r.idx), \
     w AS (INSERT INTO cp_segments (run, chain, lo, hi, bytes) \
       SELECT r.run, s.chain, s.lo, s.hi, s.bytes \
       FROM unnest($29::integer[], $30::bigint[], $31::bigint[], $32::bigint[], $33::bytea[]) \
         AS s (owner, chain, lo, hi, bytes) \
       JOIN r ON r.idx = s.owner), \
     z AS (DELETE FROM cp_segments s \
       USING unnest($34::integer[], $35::bigint[], $36::bigint[], $37::bigint[]) \
         AS z (owner, chain, lo, hi) \
       JOIN r ON r.idx = z.owner \
       WHERE cardinality($34::integer[]) > 0 AND s.run = r.run AND s.chain = z.chain \
         AND s.lo >= z.lo AND s.hi < z.hi) \
     SELECT idx FROM r"
);

/// From how many saves a batch is planned for its own sizes. Below, the
/// generic plan's worst case (a nested loop comparing each save with each
/// leased run, on a table small enough that it prefers that to the primary
/// key) costs about what planning would: about 1 ms for this statement,
/// 1.8 ms for 300 saves (measured with `EXPLAIN (SUMMARY)`), against tens
/// of milliseconds for that nested loop over a batch of 300.
const REPLAN_FROM: usize = 32;

/// The parameters of [`BATCH`] for some saves.
#[derive(Default)]
pub(in crate::store::postgres) struct Columns<'a> {
    idx: Vec<i32>,
    cp: CpColumns<'a>,
    run: SavedColumns<'a>,
    epoch: Vec<i64>,
    worker: Vec<&'a str>,
    instance: Vec<&'a str>,
    prev: Vec<i64>,
    writes: SegmentColumns<'a>,
    folds: FoldColumns,
}

/// The segment writes of the saves (see `segments::Writes`), each with its
/// save's index.
#[derive(Default)]
struct SegmentColumns<'a> {
    owner: Vec<i32>,
    chain: Vec<i64>,
    lo: Vec<i64>,
    hi: Vec<i64>,
    bytes: Vec<&'a [u8]>,
}

/// The folds of the saves (see `segments::Folds`), each with its save's
/// index.
#[derive(Default)]
struct FoldColumns {
    owner: Vec<i32>,
    chain: Vec<i64>,
    lo: Vec<i64>,
    hi: Vec<i64>,
}

impl<'a> Columns<'a> {
    /// Adds `save` as save `idx` (its index in the batch). Not for a save
    /// with retention (see [`BATCH`]).
    pub(in crate::store::postgres) fn push(&mut self, idx: i32, save: &'a Save<'a>) {
        debug_assert!(save.below.is_none());
        self.idx.push(idx);
        self.cp.push(&save.row);
        self.run.push(&save.run);
        self.epoch.push(save.epoch);
        self.worker.push(save.worker);
        self.instance.push(save.instance);
        self.prev.push(save.prev);
        if let Some(plan) = save.plan {
            let (w, f) = (&plan.writes, &plan.folds);
            for k in 0..w.chain.len() {
                self.writes.owner.push(idx);
                self.writes.chain.push(w.chain[k]);
                self.writes.lo.push(w.lo[k]);
                self.writes.hi.push(w.hi[k]);
                self.writes.bytes.push(&w.bytes[k]);
            }
            for k in 0..f.chain.len() {
                self.folds.owner.push(idx);
                self.folds.chain.push(f.chain[k]);
                self.folds.lo.push(f.lo[k]);
                self.folds.hi.push(f.hi[k]);
            }
        }
    }

    /// Whether no save was added.
    pub(in crate::store::postgres) fn is_empty(&self) -> bool {
        self.idx.is_empty()
    }

    /// Whether [`BATCH`] is to be planned for these saves
    /// ([`query_planned`](crate::store::postgres::conn::Cx::query_planned)) rather than run
    /// with its prepared, generic plan: from [`REPLAN_FROM`] saves on.
    pub(in crate::store::postgres) fn replan(&self) -> bool {
        self.idx.len() >= REPLAN_FROM
    }

    /// [`BATCH`]'s parameters, in order.
    pub(in crate::store::postgres) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let cp = &self.cp;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &self.idx,
            &cp.run,
            &cp.seq,
            &cp.site_key,
            &cp.label,
            &cp.format_1_site_index,
            &cp.data,
            &cp.suspend,
            &cp.created_at,
            &cp.checksum,
            &cp.appended,
            &cp.meta,
            &cp.chains,
        ];
        params.extend(self.run.params());
        params.extend([
            &self.epoch as &(dyn ToSql + Sync),
            &self.worker,
            &self.instance,
            &self.prev,
            &self.writes.owner,
            &self.writes.chain,
            &self.writes.lo,
            &self.writes.hi,
            &self.writes.bytes,
            &self.folds.owner,
            &self.folds.chain,
            &self.folds.lo,
            &self.folds.hi,
        ]);
        params
    }
}
