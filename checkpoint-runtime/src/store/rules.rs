//! The run-state rules: every transition of a run, as a function on its
//! records ([`RunRecord`], its lease, its signals, its checkpoints), with no
//! I/O. Every backend (memory, SQLite, PostgreSQL) loads the records, calls
//! the rule and stores what it returns: what a transition does is defined
//! here, once; a backend only maps it to its storage. The claim query of the
//! SQL backends is the one rule written a second time, in SQL (it selects
//! the rows [`lease_free`] and [`runnable`] accept), because a claim must
//! pick its candidates inside the database.
//!
//! Times are passed in (`now`, the lease's expiry), so every rule is a pure
//! function of its arguments.

use std::sync::Arc;
use std::time::SystemTime;

use super::integrity::field_list;
use super::records::UNREADABLE;
use super::{
    CheckpointRecord, ClaimRequest, Lease, LeaseInfo, NewRun, Outcome, Release, RunRecord,
    RunState, SignalRecord, Wake, WakeValue,
};
use crate::history::Event;
use crate::Error;

/// Create: a run just created by [`Store::create_run`](super::Store::create_run):
/// ready, never claimed, no checkpoint yet. Returns it with its `Started`
/// event.
pub(crate) fn create(run: NewRun, now: SystemTime) -> (RunRecord, Event) {
    let started = Event::Started {
        workflow: run.workflow.clone(),
        trace: run.trace.clone(),
    };
    let mut rec = started_run(run.id, run.workflow, run.input, RunState::Ready, 0, now);
    rec.version = run.version.max(1);
    rec.parent = run.parent;
    (rec, started)
}

/// Fork: the run `new_id` that [`Store::fork`](super::Store::fork) creates
/// from checkpoint `cp` of run `from` (workflow and input as given): never
/// claimed, its one checkpoint a copy of `cp` as seq 1, in the state that
/// checkpoint carries. Returns the run, the copy and the `Forked` event both
/// histories record.
pub(crate) fn fork(
    from: &str,
    cp: &CheckpointRecord,
    new_id: &str,
    workflow: String,
    input: Arc<[u8]>,
    now: SystemTime,
) -> (RunRecord, CheckpointRecord, Event) {
    let event = Event::Forked {
        from: from.to_owned(),
        seq: cp.seq,
        to: new_id.to_owned(),
    };
    let mut copy = cp.clone();
    copy.run = Arc::from(new_id);
    copy.seq = 1;
    copy.created_at = now;
    let rec = started_run(new_id.to_owned(), workflow, input, copy.state(), 1, now);
    (rec, copy, event)
}

/// A blank record of run `id` at `now` (no workflow nor input, `Ready`, no
/// lease, seq 0): the columns a rule sets on it are what a backend's
/// write of that rule alone sets (the PostgreSQL store's one-statement
/// saves and ends).
#[cfg(feature = "postgres")]
pub(crate) fn blank_run(id: &str, now: SystemTime) -> RunRecord {
    started_run(
        id.to_owned(),
        String::new(),
        Arc::from(&[][..]),
        RunState::Ready,
        0,
        now,
    )
}

fn started_run(
    id: String,
    workflow: String,
    input: Arc<[u8]>,
    state: RunState,
    latest_seq: u64,
    now: SystemTime,
) -> RunRecord {
    RunRecord {
        id,
        workflow,
        input,
        state,
        lease: None,
        epoch: 0,
        attempt: 0,
        latest_seq,
        wake: None,
        created_at: now,
        updated_at: now,
        version: 1,
        parent: None,
    }
}

/// Whether a claim by `worker`/`instance` may take a run holding `lease`:
/// there is none, it expired, or it is held by the same worker id under an
/// *older* instance (a restart; see the claim rules in [`Store`](super::Store)'s
/// docs).
pub(crate) fn lease_free(
    lease: Option<&LeaseInfo>,
    worker: &str,
    instance: &str,
    now: SystemTime,
) -> bool {
    lease.is_none_or(|l| l.expires_at <= now || (l.worker == worker && *l.instance < *instance))
}

/// Whether a run in `state` may be executed now (its lease aside): it is
/// `Ready`, `Sleeping` with a due timer, or `Waiting` with a stored signal
/// of that name (`has_signal`) or a passed deadline.
pub(crate) fn runnable(state: &RunState, has_signal: bool, now: SystemTime) -> bool {
    match state {
        RunState::Ready => true,
        RunState::Sleeping { until } => *until <= now,
        RunState::Waiting { deadline, .. } => has_signal || deadline.is_some_and(|d| d <= now),
        _ => false,
    }
}

/// What a claim delivers to a run in `state`: for a waiting run, the oldest
/// stored signal it waits for (consumed by the claim), or `TimedOut` when
/// there is none; nothing for any other run.
pub(crate) fn claim_wake(state: &RunState, signal: Option<SignalRecord>) -> Option<WakeValue> {
    match state {
        RunState::Waiting { .. } => Some(match signal {
            Some(sig) => WakeValue::Signal {
                name: sig.name,
                payload: sig.payload,
            },
            None => WakeValue::TimedOut,
        }),
        _ => None,
    }
}

/// Claim: a waiting run records `wake` (see [`claim_wake`]) for its latest
/// checkpoint; the run becomes `Ready` under a new lease with the next epoch
/// and attempt. Returns the lease.
pub(crate) fn claim(
    rec: &mut RunRecord,
    req: &ClaimRequest,
    wake: Option<WakeValue>,
    expires_at: SystemTime,
    now: SystemTime,
) -> Lease {
    if let (RunState::Waiting { .. }, Some(value)) = (&rec.state, wake) {
        rec.wake = Some(Wake {
            seq: rec.latest_seq,
            value,
        });
    }
    rec.state = RunState::Ready;
    rec.epoch += 1;
    rec.attempt = rec.attempt.saturating_add(1);
    rec.lease = Some(LeaseInfo {
        worker: req.worker.to_string(),
        instance: req.instance.to_string(),
        expires_at,
    });
    rec.updated_at = now;
    Lease {
        worker: req.worker.clone(),
        instance: req.instance.clone(),
        epoch: rec.epoch,
    }
}

/// Fencing, applied to every write that presents `lease` (see [`Store`](super::Store)'s
/// guarantees): [`Error::Cancelled`] for a cancelled run,
/// [`Error::LeaseLost`] when the run is finished, its epoch moved on, or its
/// lease is held by another worker or instance.
pub(crate) fn check_lease(id: &str, rec: &RunRecord, lease: &Lease) -> Result<(), Error> {
    if matches!(rec.state, RunState::Cancelled) {
        return Err(Error::Cancelled { run: id.to_owned() });
    }
    let holds = rec.epoch == lease.epoch
        && !rec.state.is_terminal()
        && rec
            .lease
            .as_ref()
            .is_some_and(|l| *l.instance == *lease.instance && *l.worker == *lease.worker);
    if !holds {
        return Err(Error::LeaseLost {
            run: id.to_owned(),
            worker: lease.worker.to_string(),
        });
    }
    Ok(())
}

/// Renew: the lease now expires at `expires_at`.
pub(crate) fn renew(rec: &mut RunRecord, expires_at: SystemTime) {
    if let Some(l) = rec.lease.as_mut() {
        l.expires_at = expires_at;
    }
}

/// Release: the run is given back (its lease cleared). `Suspend` resets the
/// attempt counter (the state was set by the checkpoint); `Retry` leaves the
/// run `Ready`. Returns the history event to record, if any.
pub(crate) fn release(rec: &mut RunRecord, how: Release, now: SystemTime) -> Option<Event> {
    let worker = rec.lease.take().map(|l| l.worker).unwrap_or_default();
    rec.updated_at = now;
    match how {
        Release::Suspend => {
            rec.attempt = 0;
            let on = describe_suspension(&rec.state, now);
            Some(Event::Suspended { on })
        }
        Release::Retry { reason } => {
            rec.state = RunState::Ready;
            let attempt = rec.attempt;
            Some(Event::Retried { attempt, reason })
        }
        Release::Abandon => None,
        Release::Park { error } => {
            let reason = error.to_string();
            rec.state = RunState::Parked { error };
            Some(Event::Parked { worker, reason })
        }
    }
}

/// Whether `req` may claim a run in `state` (its lease aside): a runnable
/// one (see [`runnable`]), or a parked one that `req` revisits by name.
pub(crate) fn claimable(
    state: &RunState,
    has_signal: bool,
    now: SystemTime,
    req: &ClaimRequest,
) -> bool {
    match state {
        RunState::Parked { .. } => req.revisit_parked && req.only.is_some(),
        other => runnable(other, has_signal, now),
    }
}

/// Release of a run that was cancelled under its lease: only the lease is
/// cleared (the release is not an error, and nothing is recorded).
pub(crate) fn release_cancelled(rec: &mut RunRecord) {
    rec.lease = None;
}

/// The checkpoint a run may store next: seq `latest + 1`, or an internal
/// error.
pub(crate) fn check_next_seq(rec: &RunRecord, cp: &CheckpointRecord) -> Result<(), Error> {
    if cp.seq != rec.latest_seq + 1 {
        return Err(Error::internal(format!(
            "run `{}`: checkpoint #{} stored out of order (latest is #{})",
            cp.run, cp.seq, rec.latest_seq
        )));
    }
    Ok(())
}

/// Save, and suspend: storing checkpoint `cp` moves the run to the state the
/// checkpoint carries ([`CheckpointRecord::state`]: `Ready`, or `Waiting` /
/// `Sleeping` for a suspension site), resets the attempt counter to 1 and
/// clears the wake value.
pub(crate) fn save_checkpoint(rec: &mut RunRecord, cp: &CheckpointRecord) {
    rec.latest_seq = cp.seq;
    rec.state = cp.state();
    rec.attempt = 1;
    rec.wake = None;
    rec.updated_at = cp.created_at;
}

/// Retention: the oldest seq kept once checkpoint `seq` is stored with
/// `keep` (the latest is always kept).
pub(crate) fn retention_floor(seq: u64, keep: usize) -> u64 {
    seq.saturating_sub(keep.max(1) as u64).saturating_add(1)
}

/// Consume a signal: `sig`, taken from the run's stored signals, becomes the
/// wake value of the latest checkpoint; the run is `Ready`.
pub(crate) fn consume_signal(rec: &mut RunRecord, sig: &SignalRecord, now: SystemTime) {
    wake(
        rec,
        WakeValue::Signal {
            name: sig.name.clone(),
            payload: sig.payload.clone(),
        },
        now,
    );
}

/// Time out: the deadline of the latest (wait) checkpoint passed: wake value
/// `TimedOut`, state `Ready`.
pub(crate) fn time_out(rec: &mut RunRecord, now: SystemTime) {
    wake(rec, WakeValue::TimedOut, now);
}

fn wake(rec: &mut RunRecord, value: WakeValue, now: SystemTime) {
    rec.wake = Some(Wake {
        seq: rec.latest_seq,
        value,
    });
    rec.state = RunState::Ready;
    rec.updated_at = now;
}

/// Reject a signal: the consumed signal of the wake value is discarded (its
/// payload was unusable) and the run goes back to the state of its latest
/// checkpoint, `latest` (what the store found for [`RunRecord::latest_seq`];
/// `None` when it found nothing). Returns the `SignalRejected` event to
/// record when there was a consumed signal.
///
/// A run that records a latest checkpoint the store no longer has (a
/// damaged store) has no state to go back to: nothing changes (the signal
/// stays consumed, the run keeps its lease) and the error is
/// [`missing_checkpoint`]'s; the claim that next meets the run sets it
/// aside (see [`damaged`]). A run without checkpoints has no wake value to
/// discard (only a checkpoint can make it wait): its state is left as it is.
pub(crate) fn reject_signal(
    rec: &mut RunRecord,
    reason: String,
    latest: Option<&CheckpointRecord>,
    now: SystemTime,
) -> Result<Option<Event>, Error> {
    let back = latest_checkpoint(rec, latest)?.map(CheckpointRecord::state);
    let event = match rec.wake.take() {
        Some(Wake {
            value: WakeValue::Signal { name, .. },
            ..
        }) => Some(Event::SignalRejected { name, reason }),
        _ => None,
    };
    if let Some(state) = back {
        rec.state = state;
    }
    rec.updated_at = now;
    Ok(event)
}

/// The latest checkpoint of `rec`, given what the store found for it
/// (`found`): `None` for a run that has none yet; [`missing_checkpoint`]'s
/// error when the run records one (`latest_seq > 0`) and the store found
/// none, or another one. A claim, a rejected signal and anything else that
/// continues from the latest checkpoint goes through this, so that no
/// backend ever starts such a run over from its input (which would run
/// again what its checkpoints had made durable).
pub(crate) fn latest_checkpoint<'c>(
    rec: &RunRecord,
    found: Option<&'c CheckpointRecord>,
) -> Result<Option<&'c CheckpointRecord>, Error> {
    match found {
        _ if rec.latest_seq == 0 => Ok(None),
        Some(cp) if cp.seq == rec.latest_seq => Ok(Some(cp)),
        _ => Err(missing_checkpoint(
            &rec.id,
            Some(&rec.workflow),
            Some(rec.latest_seq),
        )),
    }
}

/// The error for a run whose latest checkpoint (`seq`, when known) is
/// missing from its store: an [`Error::Decode`] naming the run and its
/// workflow.
pub(crate) fn missing_checkpoint(run: &str, workflow: Option<&str>, seq: Option<u64>) -> Error {
    let which = seq.map_or_else(String::new, |s| format!(" #{s}"));
    Error::Decode {
        workflow: workflow.unwrap_or(UNREADABLE).to_owned(),
        run: run.to_owned(),
        site: UNREADABLE.to_owned(),
        field: "-".to_owned(),
        detail: format!(
            "its latest checkpoint{which} is missing from the store (deleted, or its row \
             damaged); the run is refused rather than started over"
        )
        .into(),
    }
}

/// Finish and fail: the run ends with `outcome` (completed, possibly with an
/// `Err` output, or failed by the runtime); its lease is cleared. Returns
/// the `Completed` or `Failed` event.
pub(crate) fn finish(rec: &mut RunRecord, outcome: Outcome, now: SystemTime) -> Event {
    let (state, event) = match outcome {
        Outcome::Completed { output, error } => {
            let event = match &error {
                None => Event::Completed,
                Some(err) => Event::Failed { error: err.clone() },
            };
            (RunState::Completed { output, error }, event)
        }
        Outcome::Failed { error } => {
            let event = Event::Failed {
                error: error.to_string(),
            };
            (RunState::Failed { error }, event)
        }
    };
    rec.state = state;
    rec.lease = None;
    rec.updated_at = now;
    event
}

/// A signal sent to run `rec`: the record to queue and the history event,
/// or why it is refused. A run that has ended (completed, failed, cancelled)
/// consumes no more signals: one sent to it would be stored and never read,
/// so it is refused naming the run's status, on every store and client.
pub(crate) fn accept_signal(
    rec: &RunRecord,
    name: &str,
    payload: Vec<u8>,
    now: SystemTime,
) -> Result<(SignalRecord, Event), Error> {
    if rec.state.is_terminal() {
        return Err(Error::RunEnded {
            run: rec.id.clone(),
            status: rec.status().to_string(),
            signal: name.to_owned(),
        });
    }
    let signal = SignalRecord {
        name: name.to_owned(),
        payload: payload.into(),
        received_at: now,
    };
    let event = Event::SignalReceived {
        name: name.to_owned(),
    };
    Ok((signal, event))
}

/// Retry: a failed run (stopped by the runtime, or whose workflow returned
/// `Err`) or a parked one becomes `Ready` from its latest checkpoint, as a
/// new attempt (its wake value, a signal it consumed, stays for the resume).
/// Returns the `Retried` event, or why the run cannot be retried.
pub(crate) fn retry(rec: &mut RunRecord, now: SystemTime) -> Result<Event, Error> {
    let reason = match &rec.state {
        RunState::Failed { error } | RunState::Parked { error } => error.to_string(),
        RunState::Completed {
            error: Some(error), ..
        } => error.clone(),
        _ => {
            return Err(Error::NotRetryable {
                run: rec.id.clone(),
                status: rec.status().to_string(),
            })
        }
    };
    rec.state = RunState::Ready;
    rec.lease = None;
    rec.attempt = 0;
    rec.updated_at = now;
    Ok(Event::Retried {
        attempt: 0,
        reason: format!("retried by an operator after: {reason}"),
    })
}

/// Cancel: a run that is not finished becomes `Cancelled`, its lease
/// cleared. Returns the `Cancelled` event, or `None` (nothing changed) for a
/// finished run.
pub(crate) fn cancel(rec: &mut RunRecord, now: SystemTime) -> Option<Event> {
    if rec.state.is_terminal() {
        return None;
    }
    rec.state = RunState::Cancelled;
    rec.lease = None;
    rec.updated_at = now;
    Some(Event::Cancelled)
}

/// How a suspended run's state reads in its `Suspended` history event.
pub(crate) fn describe_suspension(state: &RunState, now: SystemTime) -> String {
    match state {
        RunState::Waiting {
            signal,
            deadline: None,
        } => format!("waiting for signal `{signal}`"),
        RunState::Waiting {
            signal,
            deadline: Some(d),
        } => match d.duration_since(now) {
            Ok(left) => format!(
                "waiting for signal `{signal}` (times out in {:.3}s)",
                left.as_secs_f64()
            ),
            Err(_) => format!("waiting for signal `{signal}` (deadline passed)"),
        },
        RunState::Sleeping { until } => match until.duration_since(now) {
            Ok(left) => format!("sleeping for {:.3}s", left.as_secs_f64()),
            Err(_) => "sleeping (timer due)".to_owned(),
        },
        other => format!("{other:?}"),
    }
}

/// The error a damaged run is marked failed with: a run whose row or latest
/// checkpoint cannot be loaded or decoded (`cause`). A claim that meets one
/// sets it aside this way (state `Failed`, a `Failed` event) instead of
/// failing, so that every other run goes on. It names the run and, as far
/// as they could be read, its workflow, the site of its latest checkpoint
/// and the field: the one `cause` names when it is an [`Error::Decode`]
/// (a checksum or a reference names its field), otherwise that checkpoint's
/// fields (all of them: a damaged row tells no more). Once repaired,
/// `retry` resumes it.
pub(crate) fn damaged(
    run: &str,
    workflow: Option<&str>,
    site: Option<&str>,
    fields: &[String],
    cause: &Error,
) -> Error {
    const SET_ASIDE: &str = "the run cannot be loaded, so it was set aside (the other runs go on)";
    let known = |s: &str| (s != UNREADABLE).then(|| s.to_owned());
    let or_unreadable = |s: Option<&str>| s.unwrap_or(UNREADABLE).to_owned();
    let all_fields = || field_list(fields.iter().map(String::as_str));
    match cause {
        Error::Decode {
            workflow: w,
            site: s,
            field,
            detail,
            ..
        } => Error::Decode {
            workflow: known(w).unwrap_or_else(|| or_unreadable(workflow)),
            run: run.to_owned(),
            site: known(s).unwrap_or_else(|| or_unreadable(site)),
            field: if field == "-" {
                all_fields()
            } else {
                field.clone()
            },
            detail: format!("{SET_ASIDE}: {detail}").into(),
        },
        other => Error::Decode {
            workflow: or_unreadable(workflow),
            run: run.to_owned(),
            site: or_unreadable(site),
            field: all_fields(),
            detail: format!("{SET_ASIDE}: {other}").into(),
        },
    }
}

/// The takeover event a claim records when `prev`, the lease on the run
/// before it, belongs to another instance than the claimer's (see
/// [`Event::TakenOver`]); `None` for a run nobody held.
pub(crate) fn takeover(prev: Option<&LeaseInfo>, req: &ClaimRequest) -> Option<Event> {
    let prev = prev?;
    if prev.worker == *req.worker && *prev.instance == *req.instance {
        return None;
    }
    Some(Event::TakenOver {
        worker: req.worker.to_string(),
        instance: req.instance.to_string(),
        from_worker: prev.worker.clone(),
        from_instance: prev.instance.clone(),
    })
}

/// Join: the children a checkpoint suspending on `ctx.join`/`join_all`
/// still waits for, each once, in order: those whose run has not ended
/// (`ended` says; a child the store does not have counts as ended: the
/// join reports it as missing rather than wait for it forever). When none
/// is left, the store delivers the join's signal with the checkpoint.
pub(crate) fn join_pending(children: &[String], ended: impl Fn(&str) -> bool) -> Vec<&str> {
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
pub(crate) fn child_outcome(id: &str, child: Option<&RunRecord>) -> serde_json::Value {
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
pub(crate) fn joined_payload<'a>(
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
pub(crate) fn starts_held(max_running: Option<u32>, running: usize) -> bool {
    max_running.is_some_and(|max| running >= max.max(1) as usize)
}

/// Promote: a held child whose running sibling ended becomes `Ready`.
pub(crate) fn promote(rec: &mut RunRecord, now: SystemTime) {
    if rec.state == RunState::Held {
        rec.state = RunState::Ready;
        rec.updated_at = now;
    }
}

/// The event a parent's history records for a child `rec` just created.
pub(crate) fn spawned(rec: &RunRecord) -> Event {
    Event::ChildSpawned {
        child: rec.id.clone(),
        workflow: rec.workflow.clone(),
        held: rec.state == RunState::Held,
    }
}
