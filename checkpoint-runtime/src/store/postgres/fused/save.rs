//! The checkpoint save, fused: one statement ([`statement`]) that does
//! what `rules::save_checkpoint` (with `rules::check_lease`,
//! `rules::check_next_seq` and `rules::retention_floor`) decides and
//! `apply` (`Row::Saved`) writes: the fenced write of the run's row (the
//! rule applied to a `rules::blank_run`, [`saved_run`]), the checkpoint's
//! row holding its `CheckpointSaved` event, and retention. It writes
//! nothing when it refuses; the generic save (`locked::save_locked`) then
//! tells why. [`ops`](crate::store::postgres::ops) and the group commit
//! ([`group_commit`](super::group_commit)) call it; `tests/fused.rs`
//! shows it writes what the generic save writes.

use std::sync::LazyLock;

use tokio_postgres::types::ToSql;

use crate::store::postgres::conn::{sqlstate_class, Pooled};
use crate::store::postgres::tables::checkpoints::segments::RowPlan;
use crate::store::postgres::tables::checkpoints::{cp_insert_cols, CpRow};
use crate::store::postgres::tables::runs::Bound;
use crate::store::rules;
use crate::store::{CheckpointRecord, Lease, RunRecord};
use crate::Error;

/// The start of every save statement: `r`, the fenced write of the run's
/// row, and `c`, the checkpoint's row. See [`statement`].
const SAVE_HEAD: &str = concat!(
    "WITH r AS (UPDATE cp_runs SET state = $11, signal = $12, due = $13, output = $14, \
     error = $15, attempt = $16, latest_seq = $17, wake_seq = $18, wake_signal = $19, \
     wake_payload = $20, updated_at = $21 \
     WHERE id = $1 AND epoch = $22 AND lease_worker = $23 AND lease_instance = $24 \
       AND lease_expires IS NOT NULL AND latest_seq = $25 \
       AND ",
    decodable!(""),
    " AND (wake_seq IS NULL OR wake_seq >= 0) \
     RETURNING id), \
     c AS (INSERT INTO cp_checkpoints (",
    cp_insert_cols!(),
    ", event_id, appended, chains) SELECT $1::text, $2::bigint, $3::text, $4::text, \
       $5::integer, $6::bytea, $7::bytea, $8::text::jsonb, $9::bigint, $10::bytea, \
       nextval('cp_history_id_seq'), $26::bytea, $27::bigint[] FROM r)"
);

/// Retention, after [`SAVE_HEAD`]: `$below` the seq up to which checkpoints
/// are deleted, their events moved to `cp_history` (see [`PRUNE`]), and the
/// segments of the chains no kept checkpoint names (see
/// [`segments`](super::tables::checkpoints::segments): those the deleted
/// rows name but the oldest kept one does not, nor the new one, which this
/// statement does not see yet). Only with `r` too; `d` waits for it (its
/// `EXISTS` is a one-time filter), so the run's row is locked before any
/// checkpoint row. Not in every save: an empty `DELETE` in every save cost
/// about a tenth of the statement's server time.
const SAVE_KEEP: &str = ", d AS (DELETE FROM cp_checkpoints \
     WHERE run = $1 AND seq <= $below AND EXISTS (SELECT 1 FROM r) \
     RETURNING run, seq, label, created_at, event_id, chains), \
     e AS (INSERT INTO cp_history (id, run, at, event) OVERRIDING SYSTEM VALUE \
     SELECT event_id, run, created_at, jsonb_build_object('CheckpointSaved', \
       jsonb_build_object('seq', seq, 'label', label)) FROM d WHERE event_id IS NOT NULL), \
     x AS (DELETE FROM cp_segments s USING \
       (SELECT unnest(d.chains) FROM d \
        EXCEPT SELECT unnest(k.chains) FROM (SELECT chains FROM cp_checkpoints \
          WHERE run = $1 AND seq > $below ORDER BY seq LIMIT 1) k \
        EXCEPT SELECT unnest($27::bigint[])) dead (chain) \
     WHERE s.run = $1 AND s.chain = dead.chain)";

/// The segment writes of a checkpoint that stores fields by appending,
/// after [`SAVE_HEAD`] (see [`RowPlan`]): the new segments (`$wc`–`$wb`,
/// the columns of `Writes`), and the deletion of those folded into them
/// (`$fc`–`$fh`, of `Folds`: a folded segment starts in the fold's range
/// and ends before the fold's own segment). Only with `r`.
const SAVE_SEGMENTS: &str = ", w AS (INSERT INTO cp_segments (run, chain, lo, hi, bytes) \
     SELECT $1, u.chain, u.lo, u.hi, u.bytes FROM r, \
       unnest($wc::bigint[], $wl::bigint[], $wh::bigint[], $wb::bytea[]) AS u (chain, lo, hi, bytes)), \
     f AS (DELETE FROM cp_segments s \
       USING unnest($fc::bigint[], $fl::bigint[], $fh::bigint[]) AS z (chain, lo, hi) \
     WHERE s.run = $1 AND s.chain = z.chain AND s.lo >= z.lo AND s.hi < z.hi \
       AND EXISTS (SELECT 1 FROM r))";

/// A checkpoint save as one statement: [`SAVE_HEAD`], then [`SAVE_KEEP`]
/// (with retention), then [`SAVE_SEGMENTS`] (when fields append), numbered
/// on from `$28`.
///
/// `$1`–`$10` are the checkpoint's row (see [`CpRow::params`]), `$11`–`$21`
/// the run's columns the save sets (see [`Bound::saved`]), `$22`–`$25` the
/// fence: the lease's epoch, worker and instance and the seq the run must
/// be at (the one before the checkpoint's); `$26`–`$27` the row's
/// `appended` and `chains` ([`CpRow::stored`]). The checkpoint's row is its
/// `CheckpointSaved` event too (`event_id`, see the schema's version 5).
/// One statement sent in autocommit is one round trip and one WAL flush:
/// it replaced a transaction of three round trips (`BEGIN` and the lock;
/// the three writes; `COMMIT`) that cost a checkpoint 2.4 times a plain
/// `INSERT` (see examples/bench/postgres.rs).
///
/// `r`, the fenced write of the run's row, is the lock: the `UPDATE` locks
/// the row and, should another transaction have changed it meanwhile,
/// evaluates its `WHERE` again on the new version (READ COMMITTED), so a
/// takeover that commits first fences it off as under [`fenced`]'s lock.
/// Its `WHERE` accepts only rows that [`fenced`] and
/// `rules::check_next_seq` accept and that the fenced save writes back
/// unchanged: held under the lease (`check_lease`: epoch, worker and
/// instance; a finished or cancelled run holds no lease, nor a parked
/// one, left to the fallback), at the previous seq, and decodable as
/// `RunRow::into_record` decodes them (a waiting run names its signal, a
/// sleeping one its time, a wake value has a seq of at least 0, a lease its
/// expiry). Everything else is written only with `r`.
/// No row back: nothing was written (see [`save_locked`]).
fn statement(keep: bool, segments: bool) -> &'static str {
    static TEXTS: LazyLock<[String; 4]> = LazyLock::new(|| {
        let text = |keep: bool, segments: bool| {
            let mut sql = SAVE_HEAD.to_owned();
            let mut n = 28;
            let mut number = |part: &str, names: &[&str]| {
                let mut part = part.to_owned();
                for name in names {
                    part = part.replace(&format!("${name}"), &format!("${n}"));
                    n += 1;
                }
                part
            };
            if keep {
                sql += &number(SAVE_KEEP, &["below"]);
            }
            if segments {
                sql += &number(SAVE_SEGMENTS, &["wc", "wl", "wh", "wb", "fc", "fl", "fh"]);
            }
            sql + " SELECT 1 FROM r"
        };
        [
            text(false, false),
            text(true, false),
            text(false, true),
            text(true, true),
        ]
    });
    &TEXTS[usize::from(keep) + 2 * usize::from(segments)]
}

/// The parameters of a save's [`statement`].
pub(in crate::store::postgres) struct Save<'a> {
    pub(in crate::store::postgres) row: CpRow<'a>,
    pub(in crate::store::postgres) plan: Option<&'a RowPlan>,
    pub(in crate::store::postgres) run: Bound<'a>,
    pub(in crate::store::postgres) epoch: i64,
    pub(in crate::store::postgres) worker: &'a str,
    pub(in crate::store::postgres) instance: &'a str,
    pub(in crate::store::postgres) prev: i64,
    pub(in crate::store::postgres) below: Option<i64>,
}

impl<'a> Save<'a> {
    /// The save of `cp` under `lease` (`after`: [`saved_run`]'s record),
    /// stored as `plan` says (or whole), unless a value does not bind as
    /// the [`statement`] needs it: then the fenced save ([`save_locked`])
    /// decides.
    pub(in crate::store::postgres) fn of(
        lease: &'a Lease,
        cp: &'a CheckpointRecord,
        after: &'a RunRecord,
        keep: Option<usize>,
        plan: Option<&'a RowPlan>,
    ) -> Option<Save<'a>> {
        // A NUL cannot be bound as text: such a worker holds no lease.
        if lease.worker.contains('\0') || lease.instance.contains('\0') {
            return None;
        }
        let prev = i64::try_from(cp.seq.checked_sub(1)?).ok()?;
        let below = match keep {
            Some(keep) => Some(rules::retention_floor(cp.seq, keep) - 1).filter(|&b| b > 0),
            None => None,
        };
        Some(Save {
            row: CpRow::planned(cp, plan).ok()?,
            plan,
            run: Bound::of(after).ok()?,
            epoch: i64::try_from(lease.epoch).ok()?,
            worker: &lease.worker,
            instance: &lease.instance,
            prev,
            below: below.map(i64::try_from).transpose().ok()?,
        })
    }

    /// The [`statement`] and its parameters.
    pub(in crate::store::postgres) fn statement(&self) -> (&'static str, Vec<&(dyn ToSql + Sync)>) {
        let fence: [&(dyn ToSql + Sync); 4] =
            [&self.epoch, &self.worker, &self.instance, &self.prev];
        let mut params = Vec::with_capacity(40);
        params.extend(self.row.params());
        params.extend(self.run.saved());
        params.extend(fence);
        params.extend(self.row.stored());
        if let Some(below) = &self.below {
            params.push(below);
        }
        let segments = self
            .plan
            .filter(|p| !p.writes.chain.is_empty() || !p.folds.chain.is_empty());
        if let Some(p) = segments {
            let (w, f) = (&p.writes, &p.folds);
            params.extend([
                &w.chain as &(dyn ToSql + Sync),
                &w.lo,
                &w.hi,
                &w.bytes,
                &f.chain,
                &f.lo,
                &f.hi,
            ]);
        }
        (statement(self.below.is_some(), segments.is_some()), params)
    }
}

/// Runs the save's [`statement`] on `conn` (`cp` stored as `plan` says,
/// or whole): whether it saved `cp`. `false`: nothing was written,
/// [`save_locked`] decides (the statement refused the save, a value does
/// not bind, or the server refused the statement's data).
pub(in crate::store::postgres) async fn save_in_one(
    conn: &mut Pooled<'_>,
    lease: &Lease,
    cp: &CheckpointRecord,
    keep: Option<usize>,
    plan: Option<&RowPlan>,
) -> Result<bool, Error> {
    let after = saved_run(cp);
    let Some(save) = Save::of(lease, cp, &after, keep, plan) else {
        return Ok(false);
    };
    let (sql, params) = save.statement();
    match conn.plain().query_opt(sql, &params).await {
        Ok(row) => Ok(row.is_some()),
        Err(e) if sqlstate_class(&e) == Some("22") => Ok(false),
        Err(e) => Err(e),
    }
}

/// What `rules::save_checkpoint` makes of the run's row, as far as a save
/// sets it (see [`Bound::saved`]): the rule applied to a blank record.
pub(in crate::store::postgres) fn saved_run(cp: &CheckpointRecord) -> RunRecord {
    let mut rec = rules::blank_run(&cp.run, cp.created_at);
    rules::save_checkpoint(&mut rec, cp);
    rec
}
