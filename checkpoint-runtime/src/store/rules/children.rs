//! The rules of child runs: what a join waits for and receives, and the
//! siblings a parent's `max_running` holds back and then starts.

use std::time::SystemTime;

use super::change::Change;
use crate::history::Event;
use crate::store::{RunRecord, RunState, SignalRecord};

/// Join: the children a checkpoint suspending on `ctx.join`/`join_all`
/// still waits for, each once, in order: those whose run has not ended
/// (`ended` says; a child the store does not have counts as ended: the
/// join reports it as missing rather than wait for it forever). When none
/// is left, the store delivers the join's signal with the checkpoint.
pub fn join_pending(children: &[String], ended: impl Fn(&str) -> bool) -> Vec<&str> {
    let mut seen = std::collections::HashSet::with_capacity(children.len());
    children
        .iter()
        .map(String::as_str)
        .filter(|c| seen.insert(*c) && !ended(c))
        .collect()
}

/// How a joined child ended, as the JSON of the
/// `Result<Output, ChildError>` the join yields for it: its output when it
/// completed, otherwise the `ChildError` (externally tagged, as serde
/// writes it). `child` is `None` when the store has no such run.
pub fn child_outcome(id: &str, child: Option<&RunRecord>) -> serde_json::Value {
    use serde_json::{json, Value};
    let err = |e: Value| json!({ "Err": e });
    match child.map(|c| &c.state) {
        Some(RunState::Completed { output, .. }) => match serde_json::from_slice::<Value>(output) {
            Ok(out) => json!({ "Ok": out }),
            Err(e) => err(
                json!({ "Failed": { "run": id, "error": format!("its stored output is not JSON: {e}") } }),
            ),
        },
        Some(RunState::Failed { error }) => {
            err(json!({ "Failed": { "run": id, "error": error.to_string() } }))
        }
        Some(RunState::Cancelled) => err(json!({ "Cancelled": { "run": id } })),
        Some(_) => err(json!({ "Failed": { "run": id, "error": "it has not ended" } })),
        None => err(json!({ "Missing": { "run": id } })),
    }
}

/// The payload of the signal that wakes a run joining `children`: the
/// outcome of each ([`child_outcome`]), in order, as a JSON array. It is
/// taken when the last of them ends, so that every resume of the join
/// reads the same outcomes (a child retried later changes nothing here).
pub fn joined_payload<'a>(
    children: &[String],
    lookup: impl Fn(&str) -> Option<&'a RunRecord>,
) -> Vec<u8> {
    let outcomes: Vec<serde_json::Value> = children
        .iter()
        .map(|c| child_outcome(c, lookup(c)))
        .collect();
    serde_json::to_vec(&outcomes).unwrap_or_else(|_| b"[]".to_vec())
}

/// Whether a child created with `max_running` starts held
/// ([`RunState::Held`]): when `running` of its parent's children (not
/// ended, not held) already fill the bound.
pub(super) fn starts_held(max_running: Option<u32>, running: usize) -> bool {
    max_running.is_some_and(|max| running >= max.max(1) as usize)
}

/// Whether `rec` is a held child, one [`promote`] starts (the backend picks
/// the oldest such sibling of a run that freed its slot).
pub fn is_held(rec: &RunRecord) -> bool {
    rec.state == RunState::Held
}

/// Whether `rec` counts against its parent's `max_running` (see [`create`]):
/// not ended, not held.
pub fn is_running(rec: &RunRecord) -> bool {
    !rec.state.is_terminal() && !is_held(rec)
}

/// Promote: a held child whose running sibling ended becomes `Ready`.
pub fn promote(rec: &mut RunRecord, now: SystemTime) -> Change {
    if !is_held(rec) {
        return Change::default();
    }
    rec.state = RunState::Ready;
    rec.updated_at = now;
    Change::row()
}

/// Joined: run joining `children` (under the join's signal name `token`)
/// is woken, the last of them having ended: the change queues the signal
/// with their outcomes ([`joined_payload`], `lookup` finding each child's
/// record) and records `Joined`. The backend applies it to the joining run.
pub fn joined<'a>(
    children: &[String],
    token: &str,
    lookup: impl Fn(&str) -> Option<&'a RunRecord>,
    now: SystemTime,
) -> Change {
    let payload = joined_payload(children, lookup);
    Change {
        event: Some(Event::Joined {
            children: children.len(),
        }),
        signal: Some(SignalRecord {
            name: token.to_owned(),
            payload: payload.into(),
            received_at: now,
        }),
        ..Change::default()
    }
}
