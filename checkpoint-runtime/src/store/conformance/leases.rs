//! Conformance: claims, leases and fencing.

use super::*;

/// Conformance: fencing rejects stale lease.
pub fn fencing_rejects_stale_lease(store: &dyn Store) {
    new_run(store, "r");
    let a = block_on(store.claim(&req("a", "a1"))).unwrap().claimed;
    assert_eq!(a.len(), 1);
    let lease_a = a[0].lease.clone();
    // Not claimable while a's lease is alive.
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    // Same worker id, new instance (a restart): takes it over at once.
    let a2 = block_on(store.claim(&req("a", "a2"))).unwrap().claimed;
    assert_eq!(a2.len(), 1);
    // ...but an older instance never takes it back.
    assert!(block_on(store.claim(&req("a", "a1")))
        .unwrap()
        .claimed
        .is_empty());
    let err = block_on(store.save_checkpoint(&lease_a, cp("r", 1), None)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    block_on(store.save_checkpoint(&a2[0].lease, cp("r", 1), None)).unwrap();
    // Out-of-order seq is refused.
    assert!(block_on(store.save_checkpoint(&a2[0].lease, cp("r", 5), None)).is_err());
}

/// Conformance: expired lease is taken over.
pub fn expired_lease_is_taken_over(store: &dyn Store) {
    new_run(store, "r");
    let mut short = req("a", "a1");
    short.ttl = Duration::from_millis(0);
    assert_eq!(block_on(store.claim(&short)).unwrap().claimed.len(), 1);
    let b = block_on(store.claim(&req("b", "b1"))).unwrap().claimed;
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].run.epoch, 2);
    assert_eq!(b[0].run.attempt, 2);
}

/// Conformance: retention keeps latest.
pub fn retention_keeps_latest(store: &dyn Store) {
    new_run(store, "r");
    let c = block_on(store.claim(&req("a", "a1"))).unwrap().claimed;
    for seq in 1..=5 {
        block_on(store.save_checkpoint(&c[0].lease, cp("r", seq), Some(2))).unwrap();
    }
    let kept: Vec<u64> = block_on(store.list_checkpoints("r"))
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(kept, vec![4, 5]);
}

/// Conformance: unregistered runs are reported not claimed.
pub fn unregistered_runs_are_reported_not_claimed(store: &dyn Store) {
    new_run(store, "r");
    let mut other = req("a", "a1");
    other.workflows = vec!["other"];
    let res = block_on(store.claim(&other)).unwrap();
    assert!(res.claimed.is_empty());
    assert_eq!(res.unregistered, vec![("r".to_owned(), "wf".to_owned())]);
}

/// Conformance: cancel blocks fenced writes.
pub fn cancel_blocks_fenced_writes(store: &dyn Store) {
    new_run(store, "r");
    let c = block_on(store.claim(&req("a", "a1"))).unwrap().claimed;
    assert!(block_on(store.cancel("r")).unwrap());
    assert!(!block_on(store.cancel("r")).unwrap());
    let err = block_on(store.save_checkpoint(&c[0].lease, cp("r", 1), None)).unwrap_err();
    assert!(matches!(err, Error::Cancelled { .. }));
    assert!(matches!(
        block_on(store.cancel("nope")),
        Err(Error::UnknownRun { .. })
    ));
}

/// Runs in every state a claim tells apart (see
/// [`each_runnable_run_is_claimed_and_no_other`]); returns when the
/// deadlines among them pass. `waiting` and `asleep` are not runnable, and
/// are what a backend's test copies to fill its tables.
pub(crate) fn runs_of_every_kind(store: &dyn Store) -> SystemTime {
    let short = |worker: &str, run: &str| {
        let mut r = req(worker, "1");
        r.ttl = Duration::from_millis(50);
        r.only = Some(run.to_owned());
        r
    };
    // Suspends a new `run` as `how`; with `release`, gives its lease back
    // as the executor does, else leaves it to expire (a crash between the
    // checkpoint and the release).
    let suspend = |run: &str, how: Suspend, release: bool| {
        new_run(store, run);
        let c = block_on(store.claim(&short("d", run)))
            .unwrap()
            .claimed
            .remove(0);
        block_on(store.save_checkpoint(&c.lease, suspended_cp(run, 1, how), None)).unwrap();
        if release {
            block_on(store.release(run, &c.lease, Release::Suspend)).unwrap();
        }
    };
    let soon = SystemTime::now() + Duration::from_millis(100);
    new_run(store, "queued");
    new_run(store, "busy");
    let mut live = req("b", "1");
    live.only = Some("busy".to_owned());
    assert_eq!(block_on(store.claim(&live)).unwrap().claimed.len(), 1);
    new_run(store, "crashed");
    assert_eq!(
        block_on(store.claim(&short("c", "crashed")))
            .unwrap()
            .claimed
            .len(),
        1
    );
    // Held by an older instance of the worker that claims them all, its
    // lease expired too (a restart that took longer than a lease).
    new_run(store, "restarted");
    let mut older = short("a", "restarted");
    older.instance = Arc::from("0");
    assert_eq!(block_on(store.claim(&older)).unwrap().claimed.len(), 1);
    suspend("signalled", waiting("go", None), true);
    block_on(store.put_signal("signalled", "go", b"1".to_vec())).unwrap();
    suspend("overdue", waiting("go", Some(soon)), true);
    let nap = |until| Suspend::Sleeping {
        until,
        sites_before: None,
        retry: None,
    };
    suspend("woken", nap(soon), true);
    suspend("held", waiting("go", None), false);
    block_on(store.put_signal("held", "go", b"1".to_vec())).unwrap();
    suspend("waiting", waiting("go", None), true);
    block_on(store.put_signal("waiting", "other", b"1".to_vec())).unwrap();
    let hour = SystemTime::now() + Duration::from_secs(3600);
    suspend("asleep", nap(hour), true);
    soon
}

/// Claims two at a time until a claim finds nothing; the runs claimed.
pub(crate) fn claim_all(store: &dyn Store) -> Vec<String> {
    let mut claimed = Vec::new();
    loop {
        let mut r = req("a", "1");
        r.limit = 2;
        let got = block_on(store.claim(&r)).unwrap().claimed;
        if got.is_empty() {
            break;
        }
        claimed.extend(got.into_iter().map(|c| c.run.id.to_string()));
        assert!(claimed.len() <= RUNNABLE.len(), "{claimed:?}");
    }
    claimed.sort();
    claimed
}

/// The runs of [`runs_of_every_kind`] that a claim takes.
pub(crate) const RUNNABLE: [&str; 7] = [
    "crashed",
    "held",
    "overdue",
    "queued",
    "restarted",
    "signalled",
    "woken",
];

/// Every run that is runnable, one way or another (ready, its lease
/// expired, also one of an older instance of the claiming worker, its
/// signal come, its deadline or its sleep over, held by a
/// lease that expired with its signal come), is claimed, and no other
/// (leased, waiting for a signal that has not come, asleep); the next
/// wake-up is the earliest lease expiry or deadline.
pub fn each_runnable_run_is_claimed_and_no_other(store: &dyn Store) {
    let soon = runs_of_every_kind(store);
    let next = block_on(store.next_wakeup(SystemTime::UNIX_EPOCH))
        .unwrap()
        .earliest()
        .unwrap();
    // No later than the deadlines set: the short leases expire before them,
    // unless setting up took longer than a lease (on a loaded machine),
    // and then the deadlines themselves come first.
    assert!(next <= soon, "{next:?}");
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(claim_all(store), RUNNABLE);
    // All leased now: a lease's expiry, not the hour's sleep.
    let next = block_on(store.next_wakeup(SystemTime::UNIX_EPOCH))
        .unwrap()
        .earliest()
        .unwrap();
    assert!(
        next < SystemTime::now() + Duration::from_secs(60),
        "{next:?}"
    );
}

/// Conformance: claim takes a lease.
pub fn claim_takes_a_lease(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    assert_eq!(c.run.state, RunState::Ready);
    assert_eq!((c.run.epoch, c.run.attempt), (1, 1));
    assert_eq!(c.lease.epoch, 1);
    let held = c.run.lease.as_ref().expect("a lease");
    assert_eq!((held.worker.as_str(), held.instance.as_str()), ("a", "a1"));
    assert!(c.checkpoint.is_none());
    assert_eq!(load(store, "r").lease, c.run.lease);
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
}

/// Conformance: a run keeps the version that started it.
pub fn a_run_keeps_the_version_that_started_it(store: &dyn Store) {
    new_run(store, "v1");
    block_on(store.create_run(NewRun {
        id: "v2".into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 2,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    }))
    .unwrap();
    assert_eq!(load(store, "v1").version, 1);
    assert_eq!(load(store, "v2").version, 2);
    let listed = block_on(store.list_runs(&RunFilter::new())).unwrap();
    let versions: Vec<(&str, u32)> = listed.iter().map(|r| (r.id.as_str(), r.version)).collect();
    assert_eq!(versions, [("v1", 1), ("v2", 2)]);
    let claimed = block_on(store.claim(&req("a", "a1"))).unwrap().claimed;
    assert!(claimed
        .iter()
        .any(|c| c.run.id == "v2" && c.run.version == 2));
}

/// Conformance: renew extends the lease.
pub fn renew_extends_the_lease(store: &dyn Store) {
    new_run(store, "r");
    let mut short = req("a", "a1");
    short.ttl = Duration::from_millis(0);
    let c = block_on(store.claim(&short)).unwrap().claimed.remove(0);
    block_on(store.renew("r", &c.lease, Duration::from_secs(30))).unwrap();
    let expires = load(store, "r").lease.expect("a lease").expires_at;
    assert!(expires > SystemTime::now() + Duration::from_secs(20));
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    let stale = Lease {
        epoch: c.lease.epoch + 1,
        ..c.lease.clone()
    };
    let err = block_on(store.renew("r", &stale, Duration::from_secs(30))).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
}

/// Conformance: renew many renews each and fences each.
pub fn renew_many_renews_each_and_fences_each(store: &dyn Store) {
    for id in ["r1", "r2", "r3", "r4"] {
        new_run(store, id);
    }
    let mut short = req("a", "a1");
    short.ttl = Duration::from_millis(0);
    let claimed = block_on(store.claim(&short)).unwrap().claimed;
    assert_eq!(claimed.len(), 4);
    let lease = |id: &str| lease_of(&claimed, id);
    let stale = Lease {
        epoch: lease("r2").epoch + 1,
        ..lease("r2")
    };
    block_on(store.cancel("r3")).unwrap();
    let runs: Vec<(Arc<str>, Lease)> = vec![
        (Arc::from("r1"), lease("r1")),
        (Arc::from("r2"), stale),
        (Arc::from("r3"), lease("r3")),
        (Arc::from("nope"), lease("r1")),
        (Arc::from("r4"), lease("r4")),
    ];
    let results = block_on(store.renew_many(&runs, Duration::from_secs(30)));
    assert_eq!(results.len(), runs.len(), "{results:?}");
    assert!(results[0].is_ok(), "{results:?}");
    assert!(
        matches!(results[1], Err(Error::LeaseLost { .. })),
        "{results:?}"
    );
    assert!(
        matches!(results[2], Err(Error::Cancelled { .. })),
        "{results:?}"
    );
    assert!(results[3].is_err(), "{results:?}");
    assert!(results[4].is_ok(), "{results:?}");
    // The renewed ones outlive the zero TTL they were claimed with; the
    // stale lease renewed nothing (r2 is free to take once more).
    for id in ["r1", "r4"] {
        let expires = load(store, id).lease.expect("a lease").expires_at;
        assert!(
            expires > SystemTime::now() + Duration::from_secs(20),
            "{id}"
        );
    }
    let taken = block_on(store.claim(&req("b", "b1"))).unwrap().claimed;
    let taken: Vec<&str> = taken.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(taken, ["r2"]);
    assert!(block_on(store.renew_many(&[], Duration::from_secs(30))).is_empty());
}

/// Conformance: release retry and abandon.
pub fn release_retry_and_abandon(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    let retry = Release::Retry {
        reason: "flaky".into(),
    };
    block_on(store.release("r", &c.lease, retry)).unwrap();
    let rec = load(store, "r");
    assert_eq!((rec.state, rec.lease), (RunState::Ready, None));
    assert!(events(store, "r").contains(&Event::Retried {
        attempt: 1,
        reason: "flaky".into()
    }));
    // Released: anyone may claim it, as a new attempt.
    let c = claim_one(store, "b", "b1");
    assert_eq!((c.run.epoch, c.run.attempt), (2, 2));
    let before = events(store, "r").len();
    block_on(store.release("r", &c.lease, Release::Abandon)).unwrap();
    assert_eq!(load(store, "r").lease, None);
    assert_eq!(
        events(store, "r").len(),
        before,
        "abandoning records nothing"
    );
    // The old lease no longer holds the run.
    let err = block_on(store.release("r", &c.lease, Release::Abandon)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
}

/// Conformance: a listing is paged with `offset` and `limit`, oldest or
/// newest first, and filters apply before the page is cut.
pub fn runs_are_listed_in_pages_either_way(store: &dyn Store) {
    for i in 0..7 {
        new_run(store, &format!("p-{i}"));
    }
    new_run(store, "other");
    let ids = |filter: RunFilter| -> Vec<String> {
        block_on(store.list_runs(&filter))
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect()
    };
    let page = RunFilter::new().id_prefix("p-").limit(3);
    assert_eq!(ids(page.clone()), ["p-0", "p-1", "p-2"]);
    assert_eq!(ids(page.clone().offset(3)), ["p-3", "p-4", "p-5"]);
    assert_eq!(ids(page.clone().offset(6)), ["p-6"]);
    assert!(ids(page.clone().offset(7)).is_empty());
    let newest = page.newest_first();
    assert_eq!(ids(newest.clone()), ["p-6", "p-5", "p-4"]);
    assert_eq!(ids(newest.clone().offset(5)), ["p-1", "p-0"]);
    assert_eq!(ids(RunFilter::new().newest_first().limit(1)), ["other"]);
    assert_eq!(ids(RunFilter::new().offset(7)), ["other"]);
}

/// Conformance: runs are counted by status, each as its record's status
/// says, within the filter's workflow, id prefix and parent.
pub fn runs_are_counted_by_status(store: &dyn Store) {
    let finish = |id: &str, outcome: Outcome| {
        new_run(store, id);
        let c = claim_one(store, "a", "a1");
        block_on(store.finish(id, &c.lease, outcome)).unwrap();
    };
    finish(
        "c-done",
        Outcome::Completed {
            output: Arc::from(&b"1"[..]),
            error: None,
        },
    );
    // A workflow that returned `Err` counts as failed.
    finish(
        "c-err",
        Outcome::Completed {
            output: Arc::from(&b"{\"Err\":\"no\"}"[..]),
            error: Some("no".into()),
        },
    );
    finish(
        "c-failed",
        Outcome::Failed {
            error: Error::internal("boom"),
        },
    );
    // Waiting (a checkpoint that waits for `go`, released).
    new_run(store, "c-wait");
    let c = claim_one(store, "a", "a1");
    block_on(store.save_checkpoint(
        &c.lease,
        suspended_cp("c-wait", 1, waiting("go", None)),
        None,
    ))
    .unwrap();
    block_on(store.release("c-wait", &c.lease, Release::Suspend)).unwrap();
    // Running (under a live lease), then queued (never claimed).
    new_run(store, "c-run");
    claim_one(store, "a", "a1");
    new_run(store, "c-queued");
    new_run(store, "other");

    let mut expected = BTreeMap::new();
    expected.insert(StatusKind::Completed, 1);
    expected.insert(StatusKind::Failed, 2);
    expected.insert(StatusKind::Waiting, 1);
    expected.insert(StatusKind::Running, 1);
    expected.insert(StatusKind::Queued, 1);
    let prefixed = RunFilter::new().id_prefix("c-");
    assert_eq!(block_on(store.count_runs(&prefixed)).unwrap(), expected);
    // As the listing's records say, whatever the filter's status, limit
    // and offset.
    let mut listed = BTreeMap::new();
    for r in block_on(store.list_runs(&prefixed)).unwrap() {
        *listed.entry(r.status().kind()).or_insert(0u64) += 1;
    }
    assert_eq!(listed, expected);
    let paged = prefixed
        .clone()
        .status(StatusKind::Completed)
        .limit(1)
        .offset(2);
    assert_eq!(block_on(store.count_runs(&paged)).unwrap(), expected);
    *expected.get_mut(&StatusKind::Queued).unwrap() += 1;
    assert_eq!(
        block_on(store.count_runs(&RunFilter::new())).unwrap(),
        expected
    );
    assert!(
        block_on(store.count_runs(&RunFilter::new().workflow("nope")))
            .unwrap()
            .is_empty()
    );
}
