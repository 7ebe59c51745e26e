//! The generic save and end, each a transaction around the run's locked
//! row: what the fused statements of [`fused`](super::fused) fall back to
//! when they write nothing (to be refused with the errors of a fenced
//! write, or for a row they leave to these), and how a join's checkpoint
//! and a child's end go. Load (locked, fenced by the lease), one rule
//! (`rules::save_checkpoint`, `rules::finish`), [`apply`]. A module of its
//! own so that both [`ops`](super::ops) and `fused` call it, and neither
//! the other.

use std::time::SystemTime;

use super::apply::{self, apply, Row};
use super::children;
use super::conn::{to_i64, Cx, Pooled};
use super::tables::runs::fenced;
use crate::store::rules;
use crate::store::{CheckpointRecord, Lease, Outcome};
use crate::Error;

/// Retention in a transaction: deletes run `$1`'s checkpoints up to seq
/// `$2`, moves the `CheckpointSaved` events their rows held to
/// `cp_history`, under the same ids (so in the same place in the history)
/// and as [`Event`](crate::history::Event)'s JSON, and deletes the segments of the chains no kept
/// checkpoint names (as `fused::save`'s retention does, after the new
/// checkpoint's row).
const PRUNE: &str = "WITH d AS (DELETE FROM cp_checkpoints WHERE run = $1 AND seq <= $2 \
     RETURNING run, seq, label, created_at, event_id, chains), \
     e AS (INSERT INTO cp_history (id, run, at, event) OVERRIDING SYSTEM VALUE \
     SELECT event_id, run, created_at, jsonb_build_object('CheckpointSaved', \
       jsonb_build_object('seq', seq, 'label', label)) FROM d WHERE event_id IS NOT NULL) \
     DELETE FROM cp_segments s USING \
       (SELECT unnest(d.chains) FROM d \
        EXCEPT SELECT unnest(k.chains) FROM (SELECT chains FROM cp_checkpoints \
          WHERE run = $1 AND seq > $2 ORDER BY seq LIMIT 1) k) dead (chain) \
     WHERE s.run = $1 AND s.chain = dead.chain";

/// A checkpoint save as one transaction: the run's row locked and checked
/// by [`fenced`] and `rules::check_next_seq`, `rules::save_checkpoint`
/// applied (the row written back and the checkpoint's row, which holds its
/// event, pipelined), retention, `COMMIT` (three round trips). What
/// `PostgresStore::do_save` falls back to when the fused statement
/// refused the save: it tells why with the same errors as every fenced
/// write, and saves a run whose row the statement does not judge (a
/// parked one).
pub(super) async fn save_locked(
    conn: &mut Pooled<'_>,
    lease: &Lease,
    cp: &CheckpointRecord,
    keep: Option<usize>,
) -> Result<(), Error> {
    let mut cx = conn.begin().await?;
    save_in(&mut cx, lease, cp, keep).await?;
    cx.commit().await
}

/// A checkpoint that suspends its run on children (`ctx.join`): saved as
/// [`save_locked`] does, with the children's rows locked first and the
/// join recorded (or the run woken at once) in the same transaction (see
/// [`children`]).
pub(super) async fn save_joining(
    conn: &mut Pooled<'_>,
    lease: &Lease,
    cp: &CheckpointRecord,
    keep: Option<usize>,
    children: &[String],
    token: &str,
) -> Result<(), Error> {
    let mut cx = conn.begin().await?;
    let live = children::lock_children(&mut cx, children).await?;
    save_in(&mut cx, lease, cp, keep).await?;
    apply::join(&mut cx, &cp.run, children, token, &live, SystemTime::now()).await?;
    cx.commit().await
}

/// The writes of [`save_locked`], in the caller's transaction.
async fn save_in(
    cx: &mut Cx<'_>,
    lease: &Lease,
    cp: &CheckpointRecord,
    keep: Option<usize>,
) -> Result<(), Error> {
    let mut rec = fenced(cx, &cp.run, lease).await?;
    rules::check_next_seq(&rec, cp)?;
    let change = rules::save_checkpoint(&mut rec, cp);
    apply(cx, Row::Saved(&rec, cp), change, cp.created_at).await?;
    if let Some(keep) = keep {
        let below = rules::retention_floor(cp.seq, keep) - 1;
        if below > 0 {
            let run: &str = &cp.run;
            cx.execute(PRUNE, &[&run, &to_i64(below, "seq")?]).await?;
        }
    }
    Ok(())
}

/// The fenced end: the run's row locked and checked by [`fenced`],
/// `rules::finish` applied (the row, the event, and what the end changes
/// elsewhere: its joiners, a held sibling). What the fused ends
/// (`fused::finish`) fall back to, and how a child's end goes.
pub(super) async fn finish_locked(
    conn: &mut Pooled<'_>,
    id: &str,
    lease: &Lease,
    outcome: Outcome,
    now: SystemTime,
) -> Result<(), Error> {
    let mut cx = conn.begin().await?;
    let mut rec = fenced(&mut cx, id, lease).await?;
    let change = rules::finish(&mut rec, outcome, now);
    apply(&mut cx, Row::Update(&rec), change, now).await?;
    cx.notify_after_commit("");
    cx.commit().await
}
