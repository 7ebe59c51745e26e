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
//! function of its arguments. Two clocks meet here: leases are compared
//! with the system's time (the `now` of [`lease_free`]), timers with the
//! claiming runtime's clock ([`ClaimRequest::clock_now`], see
//! [`crate::clock`]).
//!
//! # Rules decide, backends apply
//!
//! A write rule takes the run's record as the backend loaded it, changes it
//! in place, and returns a [`Change`]: whether the row changed, the history
//! event to record, an event for another run's history, a signal to queue,
//! and whether the run ended (which wakes its joiners, promotes a held
//! sibling, and for a cancel, cancels its descendants). The rules are the
//! only code that sets a [`RunState`] or builds an [`Event`]; a backend
//! loads, calls one rule, and applies the change with one function of its
//! own (`apply` in each backend), so a new transition is written here once.
//!
//! ```
//! use std::time::SystemTime;
//! use checkpoint_runtime::store::rules;
//! use checkpoint_runtime::store::{NewRun, RunState};
//!
//! let run = NewRun {
//!     id: "order-1".into(),
//!     workflow: "checkout".into(),
//!     input: b"{}".to_vec().into(),
//!     version: 1,
//!     trace: None,
//!     parent: None,
//!     max_running: None,
//!     options: Default::default(),
//! };
//! let (mut rec, created) = rules::create(run, 0, SystemTime::now());
//! assert_eq!(rec.state, RunState::Ready);
//! assert!(created.event.is_some()); // `Started`, for the run's history
//!
//! // Cancelling it ends it; a backend applies the change it returns.
//! let cancelled = rules::cancel(&mut rec, SystemTime::now()).expect("not ended yet");
//! assert_eq!(rec.state, RunState::Cancelled);
//! assert!(cancelled.ended.is_some_and(|e| e.cancels_descendants));
//! ```

use std::sync::Arc;
use std::time::SystemTime;

use super::integrity::field_list;
use super::records::UNREADABLE;
use super::{
    CancelRequest, CheckpointRecord, ClaimRequest, Lease, LeaseInfo, NewRun, Outcome, Release,
    Renewed, RunRecord, RunState, SignalRecord, Wake, WakeValue,
};
use crate::history::Event;

mod change;
mod children;
mod queues;
mod start;
pub mod streams;
use crate::Error;
pub use change::{Change, Ended};
use children::starts_held;
pub use children::{is_held, is_running, join_pending, joined, promote};
pub use queues::{admit_queued, queue_limits, queue_room, rate_window};
// Read by `joined` only, inside the crate; public for backends with `backend-kit`.
#[cfg_attr(not(feature = "backend-kit"), allow(unused_imports))]
pub use children::{child_outcome, joined_payload};

/// Create: a run just created by [`Store::create_run`](super::Store::create_run):
/// never claimed, no checkpoint yet; ready, or held when it is a child
/// created with `max_running` and `running` of its parent's children (not
/// ended, not held; the backend counts them, only for such a child) fill
/// the bound. Its [`NewRun::options`] are stored with it: a ready run with
/// a start time sleeps until then. Returns it with its `Started` event and,
/// for a child, the parent's `ChildSpawned`.
pub fn create(run: NewRun, running: usize, now: SystemTime) -> (RunRecord, Change) {
    let started = Event::Started {
        workflow: run.workflow.clone(),
        trace: run.trace.clone(),
    };
    let held = run.parent.is_some() && starts_held(run.max_running, running);
    let state = if held {
        RunState::Held
    } else {
        RunState::Ready
    };
    let mut rec = started_run(run.id, run.workflow, run.input, state, 0, now);
    rec.version = run.version.max(1);
    rec.parent = run.parent;
    start::apply_options(&mut rec, run.options);
    let elsewhere = rec.parent.clone().map(|p| {
        let spawned = Event::ChildSpawned {
            child: rec.id.clone(),
            workflow: rec.workflow.clone(),
            held,
        };
        (p, spawned)
    });
    let change = Change {
        elsewhere,
        ..Change::row_and(Some(started))
    };
    (rec, change)
}

/// Whether a create needs the count of its parent's running children (see
/// [`create`]): only a child created with `max_running`.
pub fn counts_siblings(run: &NewRun) -> bool {
    run.parent.is_some() && run.max_running.is_some()
}

/// Fork: the run `new_id` that [`Store::fork`](super::Store::fork) creates
/// from checkpoint `cp` of run `from` (workflow and input as given): never
/// claimed, its one checkpoint a copy of `cp` as seq 1, in the state that
/// checkpoint carries. Returns the run, the copy and the change: the
/// `Forked` event both histories record.
pub fn fork(
    from: &str,
    cp: &CheckpointRecord,
    new_id: &str,
    workflow: String,
    input: Arc<[u8]>,
    now: SystemTime,
) -> (RunRecord, CheckpointRecord, Change) {
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
    let change = Change {
        elsewhere: Some((from.to_owned(), event.clone())),
        ..Change::row_and(Some(event))
    };
    (rec, copy, change)
}

/// A blank record of run `id` at `now` (no workflow nor input, `Ready`, no
/// lease, seq 0): the columns a rule sets on it are what a backend's
/// write of that rule alone sets (the PostgreSQL store's one-statement
/// saves and ends, the SQLite store's set-aside of a run it cannot load).
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "backend-kit")),
    allow(dead_code)
)]
pub fn blank_run(id: &str, now: SystemTime) -> RunRecord {
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
        cancel: None,
        tags: Default::default(),
        queue: None,
        priority: 0,
    }
}

/// Whether a claim by `worker`/`instance` may take a run holding `lease`:
/// there is none, it expired, or it is held by the same worker id under an
/// *older* instance (a restart; see the claim rules in [`Store`](super::Store)'s
/// docs).
pub fn lease_free(
    lease: Option<&LeaseInfo>,
    worker: &str,
    instance: &str,
    now: SystemTime,
) -> bool {
    lease.is_none_or(|l| l.expires_at <= now || (l.worker == worker && *l.instance < *instance))
}

/// Whether a run holding `lease` takes up a slot of its queue for a claim
/// by `worker`/`instance` at `now` (the system's time): it holds a lease
/// that has not expired and that this claim could not take (a lease of
/// this worker's older instance is taken over, so it is not counted: the
/// run counts once it is admitted). Runs that ended hold no lease.
pub fn holds_slot(
    lease: Option<&LeaseInfo>,
    worker: &str,
    instance: &str,
    now: SystemTime,
) -> bool {
    lease.is_some() && !lease_free(lease, worker, instance, now)
}

/// Whether a run in `state` may be executed at `clock_now` (the runtime's
/// clock; its lease aside): it is `Ready`, `Sleeping` with a due timer, or
/// `Waiting` with a stored signal of that name (`has_signal`) or a passed
/// deadline. A signal wins over a deadline that passed too (see
/// [`claim`]).
pub fn runnable(state: &RunState, has_signal: bool, clock_now: SystemTime) -> bool {
    match state {
        RunState::Ready => true,
        RunState::Waiting { .. } if has_signal => true,
        other => timer(other).is_some_and(|t| t <= clock_now),
    }
}

/// When a run in `state` becomes runnable without a signal, on the
/// runtime's clock: a sleeping run's wake-up time, a waiting run's
/// deadline; `None` for any other state or a wait without a deadline.
pub fn timer(state: &RunState) -> Option<SystemTime> {
    match state {
        RunState::Sleeping { until } => Some(*until),
        RunState::Waiting { deadline, .. } => *deadline,
        _ => None,
    }
}

/// Whether a run in `state`, holding `lease`, is a timer ahead of `after`
/// for [`Store::next_wakeup`](super::Store::next_wakeup): its
/// [`timer`] when it is later than `after` and the run is under no lease
/// (a leased run's timer counts once its lease is gone, and the lease's
/// expiry is a wake-up of its own).
pub fn timer_after(
    state: &RunState,
    lease: Option<&LeaseInfo>,
    after: SystemTime,
) -> Option<SystemTime> {
    if lease.is_some() {
        return None;
    }
    timer(state).filter(|t| *t > after)
}

/// What a claim delivers to a run in `state`: for a waiting run, the oldest
/// stored signal it waits for (consumed by the claim), or `TimedOut` when
/// there is none; nothing for any other run.
fn claim_wake(state: &RunState, signal: Option<SignalRecord>) -> Option<WakeValue> {
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

/// Claim: a waiting run records as its wake value `signal`, the oldest
/// stored signal it waits for (which the backend consumed when it loaded
/// it), or `TimedOut` when there is none; the run becomes `Ready` under a
/// new lease with the next epoch and attempt. Returns the lease and the
/// change: the `TakenOver` event when another instance held the run.
pub fn claim(
    rec: &mut RunRecord,
    req: &ClaimRequest,
    signal: Option<SignalRecord>,
    expires_at: SystemTime,
    now: SystemTime,
) -> (Lease, Change) {
    let wake = claim_wake(&rec.state, signal);
    let taken = takeover(rec.lease.as_ref(), req);
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
    let lease = Lease {
        worker: req.worker.clone(),
        instance: req.instance.clone(),
        epoch: rec.epoch,
    };
    (lease, Change::row_and(taken))
}

/// Fencing, applied to every write that presents `lease` (see [`Store`](super::Store)'s
/// guarantees): [`Error::Cancelled`] for a cancelled run,
/// [`Error::LeaseLost`] when the run is finished, its epoch moved on, or its
/// lease is held by another worker or instance.
pub fn check_lease(id: &str, rec: &RunRecord, lease: &Lease) -> Result<(), Error> {
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

/// Renew: the lease now expires at `expires_at`. Returns the change and
/// what the renewal reports to the executing worker ([`renewed`]).
pub fn renew(rec: &mut RunRecord, expires_at: SystemTime) -> (Change, Renewed) {
    if let Some(l) = rec.lease.as_mut() {
        l.expires_at = expires_at;
    }
    (Change::row(), renewed(rec))
}

/// What a renewal of `rec`'s lease reports to the worker executing it: the
/// run's cancel request, if one was made. A body that never suspends learns
/// of a request made by another process this way (its `ctx.cancel_requested`
/// turns true), and its worker cancels it hard once [`grace_over`] says so.
/// A backend that renews in one statement reads the request with it and
/// passes a [`blank_run`] carrying it.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use checkpoint_runtime::store::{rules, CancelRequest};
///
/// let now = SystemTime::now();
/// let mut rec = rules::blank_run("order-1", now);
/// assert_eq!(rules::renewed(&rec).cancel, None);
/// let req = CancelRequest::new("superseded", now, Duration::from_secs(30), true);
/// rec.cancel = Some(req.clone());
/// let (_change, report) = rules::renew(&mut rec, now + Duration::from_secs(30));
/// assert_eq!(report.cancel, Some(req));
/// ```
pub fn renewed(rec: &RunRecord) -> Renewed {
    Renewed {
        cancel: rec.cancel.clone(),
    }
}

/// Release: the run is given back (its lease cleared). `Suspend` resets the
/// attempt counter (the state was set by the checkpoint); `Retry` leaves the
/// run `Ready`. Returns the change, with the history event to record.
pub fn release(rec: &mut RunRecord, how: Release, now: SystemTime) -> Change {
    let worker = rec.lease.take().map(|l| l.worker).unwrap_or_default();
    rec.updated_at = now;
    let event = match how {
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
    };
    Change::row_and(event)
}

/// Whether `req` may claim a run in `state` (its lease aside): a runnable
/// one at the claim's clock reading ([`ClaimRequest::clock_now`], see
/// [`runnable`]), or a parked one that `req` revisits by name.
pub fn claimable(state: &RunState, has_signal: bool, req: &ClaimRequest) -> bool {
    match state {
        RunState::Parked { .. } => req.revisit_parked && req.only.is_some(),
        other => runnable(other, has_signal, req.clock_now),
    }
}

/// Release of a run that was cancelled under its lease: only the lease is
/// cleared (the release is not an error, and nothing is recorded).
pub fn release_cancelled(rec: &mut RunRecord) -> Change {
    rec.lease = None;
    Change::row()
}

/// The checkpoint a run may store next: seq `latest + 1`, or an internal
/// error.
pub fn check_next_seq(rec: &RunRecord, cp: &CheckpointRecord) -> Result<(), Error> {
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
/// clears the wake value. The change records `CheckpointSaved` (the
/// backend stores `cp` itself, in its own layout).
///
/// A run asked to cancel ([`RunRecord::cancel`]) does not wait out a
/// deadline: a sleep or a wait with a deadline is due at once (the body
/// sees the sleep end, the wait time out), and a wait without one is woken
/// when the grace period ends, to be cancelled hard (see [`cancel_due`]).
pub fn save_checkpoint(rec: &mut RunRecord, cp: &CheckpointRecord) -> Change {
    rec.latest_seq = cp.seq;
    rec.state = cp.state();
    if let Some(req) = &rec.cancel {
        cut_short(&mut rec.state, req);
    }
    rec.attempt = 1;
    rec.wake = None;
    rec.updated_at = cp.created_at;
    Change::row_and(Some(checkpoint_saved(cp.seq, cp.label.as_deref())))
}

/// The `CheckpointSaved` event of checkpoint `seq` (labelled `label`): what
/// [`save_checkpoint`] records, and what a backend that keeps these events
/// compactly (one per checkpoint) rebuilds when it reads a history.
pub fn checkpoint_saved(seq: u64, label: Option<&str>) -> Event {
    Event::CheckpointSaved {
        seq,
        label: label.map(str::to_owned),
    }
}

/// Retention: the oldest seq kept once checkpoint `seq` is stored with
/// `keep` (the latest is always kept).
pub fn retention_floor(seq: u64, keep: usize) -> u64 {
    seq.saturating_sub(keep.max(1) as u64).saturating_add(1)
}

/// Consume a signal: `sig`, taken from the run's stored signals, becomes the
/// wake value of the latest checkpoint; the run is `Ready`.
pub fn consume_signal(rec: &mut RunRecord, sig: &SignalRecord, now: SystemTime) -> Change {
    wake(
        rec,
        WakeValue::Signal {
            name: sig.name.clone(),
            payload: sig.payload.clone(),
        },
        now,
    )
}

/// Time out: the deadline of the latest (wait) checkpoint passed: wake value
/// `TimedOut`, state `Ready`.
pub fn time_out(rec: &mut RunRecord, now: SystemTime) -> Change {
    wake(rec, WakeValue::TimedOut, now)
}

fn wake(rec: &mut RunRecord, value: WakeValue, now: SystemTime) -> Change {
    rec.wake = Some(Wake {
        seq: rec.latest_seq,
        value,
    });
    rec.state = RunState::Ready;
    rec.updated_at = now;
    Change::row()
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
pub fn reject_signal(
    rec: &mut RunRecord,
    reason: String,
    latest: Option<&CheckpointRecord>,
    now: SystemTime,
) -> Result<Change, Error> {
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
    Ok(Change::row_and(event))
}

/// The latest checkpoint of `rec`, given what the store found for it
/// (`found`): `None` for a run that has none yet; [`missing_checkpoint`]'s
/// error when the run records one (`latest_seq > 0`) and the store found
/// none, or another one. A claim, a rejected signal and anything else that
/// continues from the latest checkpoint goes through this, so that no
/// backend ever starts such a run over from its input (which would run
/// again what its checkpoints had made durable).
pub fn latest_checkpoint<'c>(
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
pub fn missing_checkpoint(run: &str, workflow: Option<&str>, seq: Option<u64>) -> Error {
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
/// `Err` output, or failed by the runtime); its lease is cleared. The
/// change records the `Completed` or `Failed` event, and the end.
///
/// A run asked to cancel ([`RunRecord::cancel`]) whose body returned (its
/// cleanup done) ends `Cancelled` instead, its output discarded, as the
/// request said; a failure of the runtime still ends it `Failed`.
pub fn finish(rec: &mut RunRecord, outcome: Outcome, now: SystemTime) -> Change {
    if rec.cancel.is_some() && matches!(outcome, Outcome::Completed { .. }) {
        if let Some(change) = cancel(rec, now) {
            return change;
        }
    }
    let freed_slot = rec.state != RunState::Held;
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
    Change {
        ended: Some(Ended {
            freed_slot,
            cancels_descendants: false,
        }),
        ..Change::row_and(Some(event))
    }
}

/// Set aside: a damaged run (see [`damaged`], which builds `error`) is
/// marked failed, as [`finish`] fails a run, so that every other run goes
/// on; once repaired, [`retry`] resumes it. A backend that cannot load the
/// run's row applies this to a [`blank_run`] and writes the state, the
/// lease and the time only.
pub fn set_aside(rec: &mut RunRecord, error: Error, now: SystemTime) -> Change {
    finish(rec, Outcome::Failed { error }, now)
}

/// A signal sent to run `rec`: the record to queue and the history event,
/// or why it is refused. A run that has ended (completed, failed, cancelled)
/// consumes no more signals: one sent to it would be stored and never read,
/// so it is refused naming the run's status, on every store and client.
/// The change queues the signal and records `SignalReceived`; the row is
/// unchanged.
pub fn accept_signal(
    rec: &RunRecord,
    name: &str,
    payload: Vec<u8>,
    now: SystemTime,
) -> Result<Change, Error> {
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
    Ok(Change {
        event: Some(event),
        signal: Some(signal),
        ..Change::default()
    })
}

/// Retry: a failed run (stopped by the runtime, or whose workflow returned
/// `Err`) or a parked one becomes `Ready` from its latest checkpoint, as a
/// new attempt (its wake value, a signal it consumed, stays for the resume).
/// The change records `Retried`; or the error says why the run cannot be
/// retried.
pub fn retry(rec: &mut RunRecord, now: SystemTime) -> Result<Change, Error> {
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
    Ok(Change::row_and(Some(Event::Retried {
        attempt: 0,
        reason: format!("retried by an operator after: {reason}"),
    })))
}

/// Cancel: a run that is not finished becomes `Cancelled`, its lease
/// cleared, and so do its unfinished descendants (the backend applies
/// [`Ended::cancels_descendants`] by cancelling each), unless a cancel
/// request of the run said to abandon them ([`CancelRequest::cascade`]).
/// Returns the change, or `None` (nothing changed) for a finished run.
pub fn cancel(rec: &mut RunRecord, now: SystemTime) -> Option<Change> {
    if rec.state.is_terminal() {
        return None;
    }
    let freed_slot = rec.state != RunState::Held;
    rec.state = RunState::Cancelled;
    rec.lease = None;
    rec.updated_at = now;
    Some(Change {
        ended: Some(Ended {
            freed_slot,
            cancels_descendants: cascades(rec),
        }),
        ..Change::row_and(Some(Event::Cancelled))
    })
}

/// Whether the end of `rec` by a cancel cancels its descendants: always,
/// unless its cancel request abandons them.
fn cascades(rec: &RunRecord) -> bool {
    rec.cancel.as_ref().is_none_or(|c| c.cascade)
}

/// Request a cancel: a run that is not finished records `req` (a second
/// request keeps the first reason, the earlier deadline, and cascades if
/// either does) and `CancelRequested`. A sleep, or a wait with a deadline,
/// is due at once; a wait without one (a signal, a join) is woken when the
/// grace period ends, to be cancelled hard then ([`cancel_due`]). A held
/// child, which never ran, is cancelled at once (nothing to clean up), and
/// so is a parked run ([`RunState::Parked`]): no registered code can resume
/// it to clean up, and a parked run is taken by no claim that would see
/// its grace end.
/// [`Error::CancelRefused`] naming the status for a finished run.
pub fn request_cancel(
    rec: &mut RunRecord,
    req: CancelRequest,
    now: SystemTime,
) -> Result<Change, Error> {
    if rec.state.is_terminal() {
        return Err(Error::CancelRefused {
            run: rec.id.clone(),
            status: rec.status().to_string(),
        });
    }
    let grace_ms = req
        .deadline
        .duration_since(req.requested_at)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let event = Event::CancelRequested {
        reason: req.reason.clone(),
        grace_ms,
        cascade: req.cascade,
    };
    let merged = match rec.cancel.take() {
        None => req,
        Some(first) => CancelRequest {
            deadline: first.deadline.min(req.deadline),
            cascade: first.cascade || req.cascade,
            ..first
        },
    };
    cut_short(&mut rec.state, &merged);
    rec.cancel = Some(merged);
    rec.updated_at = now;
    if is_held(rec) || matches!(rec.state, RunState::Parked { .. }) {
        let mut change = cancel(rec, now).unwrap_or_default();
        change.event = Some(event);
        return Ok(change);
    }
    Ok(Change::row_and(Some(event)))
}

/// What a cancel request does to a suspended run's timer (see
/// [`request_cancel`]).
fn cut_short(state: &mut RunState, req: &CancelRequest) {
    match state {
        RunState::Sleeping { until } => *until = (*until).min(req.requested_at),
        RunState::Waiting {
            deadline: Some(d), ..
        } => *d = (*d).min(req.requested_at),
        RunState::Waiting { deadline, .. } => *deadline = Some(req.deadline),
        _ => {}
    }
}

/// Whether `rec`'s grace period has ended at `clock_now` (the runtime's
/// clock): a run asked to cancel whose deadline passed is cancelled hard
/// ([`cancel`]) by whichever worker notices, instead of executing.
pub fn cancel_due(rec: &RunRecord, clock_now: SystemTime) -> bool {
    !rec.state.is_terminal()
        && rec
            .cancel
            .as_ref()
            .is_some_and(|c| grace_over(c, clock_now))
}

/// Whether the grace period of cancel request `req` has ended at
/// `clock_now` (the runtime's clock): the run is then cancelled hard,
/// whether it is claimed ([`cancel_due`]) or executing (the worker that
/// executes it watches the deadline, on its clock).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use checkpoint_runtime::store::{rules, CancelRequest};
///
/// let asked = SystemTime::now();
/// let req = CancelRequest::new("enough", asked, Duration::from_secs(30), true);
/// assert!(!rules::grace_over(&req, asked + Duration::from_secs(29)));
/// assert!(rules::grace_over(&req, asked + Duration::from_secs(30)));
/// ```
pub fn grace_over(req: &CancelRequest, clock_now: SystemTime) -> bool {
    req.deadline <= clock_now
}

/// How a suspended run's state reads in its `Suspended` history event.
fn describe_suspension(state: &RunState, now: SystemTime) -> String {
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
pub fn damaged(
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
fn takeover(prev: Option<&LeaseInfo>, req: &ClaimRequest) -> Option<Event> {
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
