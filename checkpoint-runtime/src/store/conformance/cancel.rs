//! Conformance: cancel requests (`rules::request_cancel`): stored on the
//! run's record, they wake a sleeping or waiting run, make its later
//! sleeps due at once, turn its end into a cancel, end with the grace
//! period, are refused for a finished run, are reported by lease
//! renewals, and end a parked run at once.

use super::*;

use crate::store::{rules, CancelRequest};

fn request(reason: &str, grace: Duration, cascade: bool) -> CancelRequest {
    CancelRequest::new(reason, SystemTime::now(), grace, cascade)
}

fn sleep_for(d: Duration) -> Suspend {
    Suspend::Sleeping {
        until: SystemTime::now() + d,
        sites_before: None,
        retry: None,
    }
}

/// Conformance: a cancel request is stored, recorded, and wakes a sleeping
/// run at once; its end is a cancel.
pub fn a_cancel_request_wakes_a_sleeping_run_and_ends_it_cancelled(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    let hour = Duration::from_secs(3600);
    block_on(store.save_checkpoint(&c.lease, suspended_cp("r", 1, sleep_for(hour)), None)).unwrap();
    block_on(store.release("r", &c.lease, Release::Suspend)).unwrap();
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    let asked = request("customer cancelled", Duration::from_secs(30), true);
    block_on(store.request_cancel("r", asked.clone())).unwrap();
    let rec = load(store, "r");
    assert_eq!(rec.cancel.as_ref(), Some(&asked));
    assert!(
        matches!(rec.state, RunState::Sleeping { until } if until <= SystemTime::now()),
        "{:?}",
        rec.state
    );
    assert!(events(store, "r").contains(&Event::CancelRequested {
        reason: "customer cancelled".into(),
        grace_ms: 30_000,
        cascade: true,
    }));
    // Any worker takes it at once, and sees the request.
    let c = claim_one(store, "b", "b1");
    assert_eq!(
        c.run.cancel.as_ref().map(|r| r.reason.as_str()),
        Some("customer cancelled")
    );
    assert!(!rules::cancel_due(&c.run, SystemTime::now()));
    // A sleep after the request is due at once.
    block_on(store.save_checkpoint(&c.lease, suspended_cp("r", 2, sleep_for(hour)), None)).unwrap();
    let rec = load(store, "r");
    assert!(
        matches!(rec.state, RunState::Sleeping { until } if until <= SystemTime::now()),
        "{:?}",
        rec.state
    );
    block_on(store.release("r", &c.lease, Release::Suspend)).unwrap();
    let c = claim_one(store, "a", "a2");
    // The body returned: the run ends cancelled, not completed.
    let outcome = Outcome::Completed {
        output: Arc::from(&b"\"released\""[..]),
        error: None,
    };
    block_on(store.finish("r", &c.lease, outcome)).unwrap();
    let rec = load(store, "r");
    assert_eq!(rec.state, RunState::Cancelled);
    assert_eq!(rec.status(), Status::Cancelled);
    assert_eq!(
        rec.cancel.map(|r| r.reason),
        Some("customer cancelled".into())
    );
    let evs = events(store, "r");
    assert_eq!(evs.last(), Some(&Event::Cancelled), "{evs:?}");
    assert!(!evs.contains(&Event::Completed), "{evs:?}");
}

/// Conformance: a cancel request times out a wait with a deadline at once,
/// and wakes a wait without one when the grace period ends.
pub fn a_cancel_request_times_out_a_wait_and_ends_with_its_grace(store: &dyn Store) {
    let hour = Duration::from_secs(3600);
    let lease = waiting_run(store, Some(SystemTime::now() + hour));
    block_on(store.release("r", &lease, Release::Suspend)).unwrap();
    block_on(store.request_cancel("r", request("stop", hour, true))).unwrap();
    let c = claim_one(store, "b", "b1");
    assert_eq!(
        c.run.wake.map(|w| w.value),
        Some(WakeValue::TimedOut),
        "the wait returns as timed out"
    );
    // A wait without a deadline ...
    new_run(store, "w");
    let c = block_on(store.claim(&ClaimRequest {
        only: Some("w".into()),
        ..req("a", "a1")
    }))
    .unwrap()
    .claimed
    .remove(0);
    block_on(store.save_checkpoint(&c.lease, suspended_cp("w", 1, waiting("go", None)), None))
        .unwrap();
    block_on(store.release("w", &c.lease, Release::Suspend)).unwrap();
    let asked = request("stop", hour, false);
    block_on(store.request_cancel("w", asked.clone())).unwrap();
    // ... keeps waiting through the grace period ...
    let rec = load(store, "w");
    assert_eq!(
        rec.state,
        RunState::Waiting {
            signal: "go".into(),
            deadline: Some(asked.deadline),
        }
    );
    let claim_w = |at: SystemTime| {
        block_on(store.claim(&ClaimRequest {
            only: Some("w".into()),
            clock_now: at,
            ..req("b", "b1")
        }))
        .unwrap()
        .claimed
    };
    assert!(claim_w(SystemTime::now()).is_empty());
    // ... and is taken when it ends, to be cancelled hard.
    let late = asked.deadline + Duration::from_secs(1);
    let c = claim_w(late).remove(0);
    assert!(rules::cancel_due(&c.run, late));
    assert!(block_on(store.cancel("w")).unwrap());
    assert_eq!(load(store, "w").state, RunState::Cancelled);
}

/// Conformance: a cancel request to a finished run is refused, naming its
/// status, and changes nothing; an unknown run is named.
pub fn a_cancel_request_to_a_finished_run_is_refused(store: &dyn Store) {
    new_run(store, "done");
    let c = claim_one(store, "a", "a1");
    let outcome = Outcome::Completed {
        output: Arc::from(&b"1"[..]),
        error: None,
    };
    block_on(store.finish("done", &c.lease, outcome)).unwrap();
    new_run(store, "gone");
    assert!(block_on(store.cancel("gone")).unwrap());
    for (id, status) in [("done", "completed"), ("gone", "cancelled")] {
        let before = events(store, id);
        let err =
            block_on(store.request_cancel(id, request("late", Duration::ZERO, true))).unwrap_err();
        assert!(
            matches!(&err, Error::CancelRefused { run, status: s } if run == id && s == status),
            "{err:?}"
        );
        assert_eq!(load(store, id).cancel, None);
        assert_eq!(events(store, id), before, "no event for a refused request");
    }
    let err =
        block_on(store.request_cancel("nope", request("x", Duration::ZERO, true))).unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err:?}");
}

/// Conformance: a run asked to cancel with its children abandoned leaves
/// them running when it is cancelled hard; one that cascades cancels them.
pub fn a_hard_cancel_after_a_request_cascades_or_abandons(store: &dyn Store) {
    for (parent, cascade) in [("p1", true), ("p2", false)] {
        let r = block_on(store.create_run(NewRun {
            id: parent.into(),
            workflow: "wf".into(),
            input: Arc::from(&b"null"[..]),
            version: 1,
            trace: None,
            parent: None,
            max_running: None,
            options: Default::default(),
        }));
        assert!(r.is_ok(), "{r:?}");
        let child = format!("{parent}-child");
        let r = block_on(store.create_run(NewRun {
            id: child.clone(),
            workflow: "wf".into(),
            input: Arc::from(&b"null"[..]),
            version: 1,
            trace: None,
            parent: Some(parent.into()),
            max_running: None,
            options: Default::default(),
        }));
        assert!(r.is_ok(), "{r:?}");
        block_on(store.request_cancel(parent, request("stop", Duration::ZERO, cascade))).unwrap();
        assert!(block_on(store.cancel(parent)).unwrap());
        let child_state = load(store, &child).state;
        if cascade {
            assert_eq!(child_state, RunState::Cancelled, "{parent}");
        } else {
            assert_eq!(child_state, RunState::Ready, "{parent}");
        }
    }
}

/// Conformance: a lease renewal reports the run's cancel request
/// ([`rules::renewed`]), with its reason and grace deadline: `renew` and
/// `renew_many` both, for each run its own; a run not asked reports none,
/// and a renewal that is fenced off still reports nothing but its error.
pub fn a_renewal_reports_a_cancel_request(store: &dyn Store) {
    for id in ["asked", "quiet"] {
        new_run(store, id);
    }
    let claimed = block_on(store.claim(&req("a", "a1"))).unwrap().claimed;
    assert_eq!(claimed.len(), 2);
    let lease = |id: &str| lease_of(&claimed, id);
    let ttl = Duration::from_secs(30);
    let renewed = block_on(store.renew("asked", &lease("asked"), ttl)).unwrap();
    assert_eq!(renewed.cancel, None, "nothing asked yet");
    // Asked while it executes (by any process: the request is the run's record's).
    let asked = request("customer cancelled", Duration::from_secs(20), true);
    block_on(store.request_cancel("asked", asked.clone())).unwrap();
    let renewed = block_on(store.renew("asked", &lease("asked"), ttl)).unwrap();
    assert_eq!(renewed.cancel.as_ref(), Some(&asked));
    assert!(!rules::grace_over(&asked, asked.requested_at));
    assert!(rules::grace_over(&asked, asked.deadline));
    // The lease was renewed all the same, and the run keeps executing.
    let rec = load(store, "asked");
    assert_eq!(rec.state, RunState::Ready);
    assert!(rec.lease.expect("a lease").expires_at > SystemTime::now() + ttl / 2);
    // A second request keeps the first reason and the earlier deadline.
    let again = request("changed my mind", Duration::from_secs(5), false);
    block_on(store.request_cancel("asked", again.clone())).unwrap();
    let runs: Vec<(Arc<str>, Lease)> = vec![
        (Arc::from("quiet"), lease("quiet")),
        (Arc::from("asked"), lease("asked")),
    ];
    let results = block_on(store.renew_many(&runs, ttl));
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].as_ref().unwrap().cancel, None, "{results:?}");
    let reported = results[1]
        .as_ref()
        .unwrap()
        .cancel
        .clone()
        .expect("reported");
    assert_eq!(reported.reason, "customer cancelled");
    assert_eq!(reported.deadline, again.deadline.min(asked.deadline));
    assert!(reported.cascade);
    assert_eq!(Some(reported), load(store, "asked").cancel);
    // Fenced off: an error, no report.
    let stale = Lease {
        epoch: lease("asked").epoch + 1,
        ..lease("asked")
    };
    let err = block_on(store.renew("asked", &stale, ttl)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
}

/// Conformance: a cancel request to a parked run (no registered code can
/// resume it, so none can clean up) ends it cancelled at once, with the
/// request recorded, and cancels its children when it cascades.
pub fn a_cancel_request_ends_a_parked_run(store: &dyn Store) {
    new_run(store, "r");
    let r = block_on(store.create_run(NewRun {
        id: "r/kid".into(),
        workflow: "other".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: Some("r".into()),
        max_running: None,
        options: Default::default(),
    }));
    assert!(r.is_ok(), "{r:?}");
    let c = claim_one(store, "a", "a1");
    let error = incompatible_total();
    block_on(store.release("r", &c.lease, Release::Park { error })).unwrap();
    assert!(matches!(load(store, "r").state, RunState::Parked { .. }));
    let asked = request("retired", Duration::from_secs(3600), true);
    block_on(store.request_cancel("r", asked.clone())).unwrap();
    let rec = load(store, "r");
    assert_eq!(rec.state, RunState::Cancelled);
    assert_eq!(rec.status(), Status::Cancelled);
    assert_eq!(rec.lease, None);
    assert_eq!(rec.cancel, Some(asked));
    assert!(events(store, "r").contains(&Event::CancelRequested {
        reason: "retired".into(),
        grace_ms: 3_600_000,
        cascade: true,
    }));
    assert_eq!(load(store, "r/kid").state, RunState::Cancelled);
    assert!(block_on(store.parked_runs()).unwrap().is_empty());
    // Ended: a second request is refused, naming its status.
    let err =
        block_on(store.request_cancel("r", request("again", Duration::ZERO, true))).unwrap_err();
    assert!(
        matches!(&err, Error::CancelRefused { status, .. } if status == "cancelled"),
        "{err:?}"
    );
}
