//! Conformance: suspensions, signals and timers.

use super::*;

/// Conformance: suspend waits for a signal.
pub fn suspend_waits_for_a_signal(store: &dyn Store) {
    let lease = waiting_run(store, None);
    let rec = load(store, "r");
    assert!(matches!(&rec.state, RunState::Waiting { signal, deadline: None } if signal == "go"));
    block_on(store.release("r", &lease, Release::Suspend)).unwrap();
    let rec = load(store, "r");
    assert_eq!((rec.attempt, rec.lease), (0, None));
    assert!(events(store, "r")
        .iter()
        .any(|e| matches!(e, Event::Suspended { .. })));
    // Not claimable until its signal is stored (another one does not count).
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    block_on(store.put_signal("r", "other", b"1".to_vec())).unwrap();
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    block_on(store.put_signal("r", "go", b"2".to_vec())).unwrap();
    let c = claim_one(store, "b", "b1");
    assert_eq!(c.run.state, RunState::Ready);
    let wake = Wake {
        seq: 1,
        value: WakeValue::Signal {
            name: "go".into(),
            payload: Arc::from(&b"2"[..]),
        },
    };
    assert_eq!(c.run.wake.as_ref(), Some(&wake));
    assert_eq!(c.checkpoint.as_ref().map(|cp| cp.seq), Some(1));
    // The claim consumed the signal, and only that one.
    let left = block_on(store.pending_signals("r")).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].name, "other");
}

/// Conformance: a parked run keeps its wake and is taken only by name.
pub fn a_parked_run_keeps_its_wake_and_is_taken_only_by_name(store: &dyn Store) {
    let lease = waiting_run(store, None);
    block_on(store.release("r", &lease, Release::Suspend)).unwrap();
    block_on(store.put_signal("r", "go", b"2".to_vec())).unwrap();
    let c = claim_one(store, "b", "b1");
    let wake = c.run.wake.clone().expect("the claim consumed the signal");
    let error = incompatible_total();
    block_on(store.release(
        "r",
        &c.lease,
        Release::Park {
            error: error.clone(),
        },
    ))
    .unwrap();
    let rec = load(store, "r");
    assert_eq!(
        rec.state,
        RunState::Parked {
            error: error.clone()
        }
    );
    assert_eq!((rec.lease.as_ref(), rec.wake.as_ref()), (None, Some(&wake)));
    assert!(matches!(
        rec.status(),
        Status::Incompatible { site, field, .. } if site == "s" && field == "total"
    ));
    assert!(events(store, "r").iter().any(
        |e| matches!(e, Event::Parked { worker, reason } if worker == "b" && reason.contains("u64"))
    ));
    let listed =
        block_on(store.list_runs(&RunFilter::new().status(StatusKind::Incompatible))).unwrap();
    assert_eq!(listed.len(), 1);
    let parked = block_on(store.parked_runs()).unwrap();
    assert_eq!(
        parked.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["r"]
    );
    assert!(
        block_on(store.list_runs(&RunFilter::new().status(StatusKind::Failed)))
            .unwrap()
            .is_empty()
    );
    // No ordinary claim takes it, not even one naming it ...
    assert!(block_on(store.claim(&req("c", "c1")))
        .unwrap()
        .claimed
        .is_empty());
    let mut named = req("c", "c1");
    named.only = Some("r".into());
    assert!(block_on(store.claim(&named)).unwrap().claimed.is_empty());
    // ... only a revisit by name, which resumes it with the wake it had.
    named.revisit_parked = true;
    let c = block_on(store.claim(&named)).unwrap().claimed.remove(0);
    assert_eq!(c.run.state, RunState::Ready);
    assert_eq!(c.run.wake.as_ref(), Some(&wake));
    assert_eq!(c.checkpoint.as_ref().map(|cp| cp.seq), Some(1));
    assert_eq!(load(store, "r").status(), Status::Running);
}

/// Conformance: sleeping run is claimed when due.
pub fn sleeping_run_is_claimed_when_due(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    let later = SystemTime::now() + Duration::from_secs(3600);
    let sleep = Suspend::Sleeping {
        until: later,
        sites_before: None,
        retry: None,
    };
    block_on(store.save_checkpoint(&c.lease, suspended_cp("r", 1, sleep), None)).unwrap();
    block_on(store.release("r", &c.lease, Release::Suspend)).unwrap();
    assert_eq!(load(store, "r").state, RunState::Sleeping { until: later });
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    // A due timer.
    new_run(store, "s");
    let c = block_on(store.claim(&ClaimRequest {
        only: Some("s".into()),
        ..req("a", "a1")
    }))
    .unwrap()
    .claimed
    .remove(0);
    let due = Suspend::Sleeping {
        until: SystemTime::now() - Duration::from_secs(1),
        sites_before: None,
        retry: None,
    };
    block_on(store.save_checkpoint(&c.lease, suspended_cp("s", 1, due), None)).unwrap();
    block_on(store.release("s", &c.lease, Release::Suspend)).unwrap();
    let c = claim_one(store, "b", "b1");
    assert_eq!(c.run.id, "s");
    assert_eq!((c.run.state, c.run.wake), (RunState::Ready, None));
}

/// Conformance: take signal consumes the oldest.
pub fn take_signal_consumes_the_oldest(store: &dyn Store) {
    let lease = waiting_run(store, None);
    assert_eq!(
        block_on(store.take_signal("r", &lease, "go")).unwrap(),
        None
    );
    block_on(store.put_signal("r", "go", b"1".to_vec())).unwrap();
    block_on(store.put_signal("r", "go", b"2".to_vec())).unwrap();
    let sig = block_on(store.take_signal("r", &lease, "go"))
        .unwrap()
        .expect("a signal");
    assert_eq!((sig.name.as_str(), &sig.payload[..]), ("go", &b"1"[..]));
    let rec = load(store, "r");
    assert_eq!(rec.state, RunState::Ready);
    let value = WakeValue::Signal {
        name: "go".into(),
        payload: Arc::from(&b"1"[..]),
    };
    assert_eq!(rec.wake, Some(Wake { seq: 1, value }));
    let left = block_on(store.pending_signals("r")).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(&left[0].payload[..], b"2");
}

/// Conformance: reject signal returns to waiting.
pub fn reject_signal_returns_to_waiting(store: &dyn Store) {
    let lease = waiting_run(store, None);
    block_on(store.put_signal("r", "go", b"bad".to_vec())).unwrap();
    block_on(store.take_signal("r", &lease, "go")).unwrap();
    block_on(store.reject_signal("r", &lease, "unusable".into())).unwrap();
    let rec = load(store, "r");
    assert!(matches!(&rec.state, RunState::Waiting { signal, .. } if signal == "go"));
    assert_eq!(rec.wake, None);
    assert!(rec.lease.is_some(), "rejecting does not release");
    assert!(events(store, "r").contains(&Event::SignalRejected {
        name: "go".into(),
        reason: "unusable".into()
    }));
    assert!(block_on(store.pending_signals("r")).unwrap().is_empty());
}

/// Conformance: time out wakes with timed out.
pub fn time_out_wakes_with_timed_out(store: &dyn Store) {
    let deadline = SystemTime::now() + Duration::from_secs(3600);
    let lease = waiting_run(store, Some(deadline));
    block_on(store.time_out("r", &lease)).unwrap();
    let rec = load(store, "r");
    assert_eq!(rec.state, RunState::Ready);
    let value = WakeValue::TimedOut;
    assert_eq!(rec.wake, Some(Wake { seq: 1, value }));
}

/// Conformance: claim after deadline times out.
pub fn claim_after_deadline_times_out(store: &dyn Store) {
    let deadline = SystemTime::now() - Duration::from_secs(1);
    let lease = waiting_run(store, Some(deadline));
    block_on(store.release("r", &lease, Release::Suspend)).unwrap();
    let c = claim_one(store, "b", "b1");
    let value = WakeValue::TimedOut;
    assert_eq!(c.run.wake, Some(Wake { seq: 1, value }));
}

/// Conformance: timers and deadlines are compared with the claim's clock
/// ([`ClaimRequest::clock_now`], a virtual clock in tests), leases with the
/// system's time. A run asleep for 30 days is taken by a claim whose clock
/// reads 30 days later (by name too), and a waiting run times out on it,
/// while the lease such a claim takes still expires a lease length from
/// the system's now; [`Store::next_wakeup`] gives the timers ahead of the
/// time asked about, earliest first, and a signal wins over a deadline.
pub fn timers_are_due_on_the_claims_clock(store: &dyn Store) {
    const DAY: Duration = Duration::from_secs(86_400);
    let now = SystemTime::now();
    let (month, later) = (now + DAY * 30, now + DAY * 31);
    let at = |clock: SystemTime, only: Option<&str>| ClaimRequest {
        clock_now: clock,
        only: only.map(str::to_owned),
        ..req("a", "a1")
    };
    let suspend = |id: &str, how: Suspend| {
        new_run(store, id);
        let c = block_on(store.claim(&at(now, Some(id))))
            .unwrap()
            .claimed
            .remove(0);
        block_on(store.save_checkpoint(&c.lease, suspended_cp(id, 1, how), None)).unwrap();
        block_on(store.release(id, &c.lease, Release::Suspend)).unwrap();
    };
    let nap = Suspend::Sleeping {
        until: month,
        sites_before: None,
        retry: None,
    };
    suspend("sleeper", nap);
    suspend("waiter", waiting("go", Some(later)));
    suspend("answered", waiting("go", Some(later)));
    block_on(store.put_signal("answered", "go", b"1".to_vec())).unwrap();
    let timer = |after| block_on(store.next_wakeup(after)).unwrap().timer;
    assert_eq!(timer(now), Some(month));
    assert_eq!(timer(month), Some(later));
    assert_eq!(timer(later), None);
    assert_eq!(block_on(store.next_wakeup(now)).unwrap().lease, None);
    // By the system's time, only the signalled run: it is not due.
    let got = block_on(store.claim(&at(now, None))).unwrap().claimed;
    assert_eq!(got.len(), 1);
    assert_eq!(&*got[0].run.id, "answered");
    let signal = WakeValue::Signal {
        name: "go".into(),
        payload: Arc::from(&b"1"[..]),
    };
    assert_eq!(got[0].run.wake.as_ref().map(|w| &w.value), Some(&signal));
    // Not yet due by name either, a second before the month is over.
    let early = block_on(store.claim(&at(month - Duration::from_secs(1), Some("sleeper"))));
    assert!(early.unwrap().claimed.is_empty());
    let got = block_on(store.claim(&at(month, Some("sleeper"))))
        .unwrap()
        .claimed;
    assert_eq!(got.len(), 1);
    let expires = got[0].run.lease.as_ref().unwrap().expires_at;
    assert!(
        expires < SystemTime::now() + DAY,
        "a lease runs on the system's time, not the claim's clock: {expires:?}"
    );
    // The waiter, a day later: timed out.
    assert!(block_on(store.claim(&at(month, None)))
        .unwrap()
        .claimed
        .is_empty());
    let got = block_on(store.claim(&at(later, None))).unwrap().claimed;
    assert_eq!(got.len(), 1);
    assert_eq!(&*got[0].run.id, "waiter");
    assert_eq!(
        got[0].run.wake,
        Some(Wake {
            seq: 1,
            value: WakeValue::TimedOut
        })
    );
}

/// Conformance: the signal catalog keeps each row once, per workflow, in
/// order (a computed name first, then by name and schema), across calls.
pub fn signal_sites_accumulate_per_workflow(store: &dyn Store) {
    use crate::store::SignalSite;
    let site = |signal: Option<&str>, schema: Option<&str>| SignalSite {
        signal: signal.map(str::to_owned),
        payload_schema: schema.map(str::to_owned),
    };
    assert!(block_on(store.signal_sites("wf")).unwrap().is_empty());
    let first = vec![
        site(Some("ok"), None),
        site(Some("approve"), None),
        site(None, None),
    ];
    block_on(store.put_signal_sites("wf", first.clone())).unwrap();
    // Again (another worker), plus a schema noted for one name.
    block_on(store.put_signal_sites("wf", first)).unwrap();
    block_on(store.put_signal_sites("wf", vec![site(Some("approve"), Some("k1"))])).unwrap();
    block_on(store.put_signal_sites("other", vec![site(Some("x"), None)])).unwrap();
    assert_eq!(
        block_on(store.signal_sites("wf")).unwrap(),
        vec![
            site(None, None),
            site(Some("approve"), None),
            site(Some("approve"), Some("k1")),
            site(Some("ok"), None),
        ]
    );
    assert_eq!(
        block_on(store.signal_sites("other")).unwrap(),
        vec![site(Some("x"), None)]
    );
}
