//! Behaviour every [`Store`] backend must show (see the trait's guarantees
//! and the rules in [`rules`](super::rules)), as one test function per
//! guarantee or rule, each on a fresh store. [`conformance_tests!`] makes a
//! `#[test]` of every one of them for a backend, the way tokio's `rt_test!`
//! runs one body on every runtime flavour:
//!
//! ```ignore
//! conformance_tests!(|_test: &str| Some(MemoryStore::new()));
//! // PostgreSQL: ignored unless CHECKPOINT_TEST_POSTGRES_URL was set at build time.
//! conformance_tests!(postgres: |test: &str| Db::open(test));
//! ```
//!
//! The constructor is called with the test's name and returns a
//! [`Fixture`] (the store, and whatever it needs kept alive), or `None` when
//! the backend is not available (the test then passes after saying so).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::executor::block_on;

use super::{
    CheckpointRecord, ClaimRequest, Claimed, Created, Lease, NewRun, Outcome, Release, RunRecord,
    RunState, Store, Suspend, Wake, WakeValue,
};
use crate::history::Event;
use crate::status::{RunFilter, Status, StatusKind};
use crate::Error;

/// What a conformance test runs on: a store, and whatever it needs kept
/// alive (a temporary directory, a database schema, a tokio runtime).
pub(crate) trait Fixture {
    /// The store under test.
    fn store(&self) -> &dyn Store;

    /// Deletes checkpoint `seq` of run `run` behind the store's back, as a
    /// damaged store or a careless operator would.
    fn lose_checkpoint(&self, run: &str, seq: u64);
}

/// Makes a `#[test]` of every conformance test for one backend: `$open` is
/// called with the test's name and returns `Option<impl Fixture>`. With
/// `postgres:` first, the tests are `#[ignore]`d unless
/// `CHECKPOINT_TEST_POSTGRES_URL` was set when they were built (see the
/// crate's `build.rs`).
macro_rules! conformance_tests {
    (postgres: $open:expr) => {
        $crate::store::conformance::conformance_tests!(@each
            [cfg_attr(not(checkpoint_test_postgres), ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set")]
            $open);
    };
    ($open:expr) => {
        $crate::store::conformance::conformance_tests!(@each [cfg(all())] $open);
    };
    (@each [$attr:meta] $open:expr) => {
        mod conformance {
        #[allow(unused_imports)]
        use super::*;
        $crate::store::conformance::conformance_tests!(@tests [$attr] $open;
            fencing_rejects_stale_lease,
            expired_lease_is_taken_over,
            retention_keeps_latest,
            unregistered_runs_are_reported_not_claimed,
            cancel_blocks_fenced_writes,
            claim_takes_a_lease,
            a_run_keeps_the_version_that_started_it,
            renew_extends_the_lease,
            renew_many_renews_each_and_fences_each,
            release_retry_and_abandon,
            suspend_waits_for_a_signal,
            a_parked_run_keeps_its_wake_and_is_taken_only_by_name,
            sleeping_run_is_claimed_when_due,
            take_signal_consumes_the_oldest,
            reject_signal_returns_to_waiting,
            time_out_wakes_with_timed_out,
            claim_after_deadline_times_out,
            finish_completes_the_run,
            fail_records_the_error,
            retry_makes_a_failed_run_runnable_from_its_latest_checkpoint,
            fork_copies_a_checkpoint,
            each_runnable_run_is_claimed_and_no_other,
            a_signal_to_an_ended_run_is_refused_and_not_stored,
        );
        $crate::store::conformance::conformance_tests!(@fixture_tests [$attr] $open;
            reject_signal_without_its_checkpoint_changes_nothing,
            claim_sets_aside_a_run_whose_checkpoint_is_missing,
        );
        }
    };
    (@fixture_tests [$attr:meta] $open:expr; $($name:ident),* $(,)?) => {$(
        #[test]
        #[$attr]
        fn $name() {
            let open = $open;
            let Some(fixture) = open(stringify!($name)) else {
                return;
            };
            $crate::store::conformance::$name(&fixture);
        }
    )*};
    (@tests [$attr:meta] $open:expr; $($name:ident),* $(,)?) => {$(
        #[test]
        #[$attr]
        fn $name() {
            let open = $open;
            let Some(fixture) = open(stringify!($name)) else {
                return;
            };
            $crate::store::conformance::$name(
                $crate::store::conformance::Fixture::store(&fixture),
            );
        }
    )*};
}
pub(crate) use conformance_tests;

pub(crate) fn req(worker: &str, instance: &str) -> ClaimRequest {
    ClaimRequest {
        worker: Arc::from(worker),
        instance: Arc::from(instance),
        workflows: vec!["wf"],
        ttl: Duration::from_secs(30),
        limit: 10,
        only: None,
        revisit_parked: false,
    }
}

/// Claims the one claimable run (fails the test if there is not exactly one).
pub(crate) fn claim_one(store: &dyn Store, worker: &str, instance: &str) -> Claimed {
    let mut c = block_on(store.claim(&req(worker, instance)))
        .unwrap()
        .claimed;
    assert_eq!(c.len(), 1, "expected one claimable run");
    c.remove(0)
}

pub(crate) fn new_run(store: &dyn Store, id: &str) {
    let r = block_on(store.create_run(NewRun {
        id: id.into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
    }))
    .unwrap();
    assert!(matches!(r, Created::New));
}

pub(crate) fn cp(run: &str, seq: u64) -> Arc<CheckpointRecord> {
    Arc::new(CheckpointRecord::new(
        Arc::from(run),
        seq,
        Cow::Borrowed("site"),
        None,
        0,
        vec![],
        vec![],
        vec![],
        None,
        SystemTime::now(),
    ))
}

pub(crate) fn fencing_rejects_stale_lease(store: &dyn Store) {
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

pub(crate) fn expired_lease_is_taken_over(store: &dyn Store) {
    new_run(store, "r");
    let mut short = req("a", "a1");
    short.ttl = Duration::from_millis(0);
    assert_eq!(block_on(store.claim(&short)).unwrap().claimed.len(), 1);
    let b = block_on(store.claim(&req("b", "b1"))).unwrap().claimed;
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].run.epoch, 2);
    assert_eq!(b[0].run.attempt, 2);
}

pub(crate) fn retention_keeps_latest(store: &dyn Store) {
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

pub(crate) fn unregistered_runs_are_reported_not_claimed(store: &dyn Store) {
    new_run(store, "r");
    let mut other = req("a", "a1");
    other.workflows = vec!["other"];
    let res = block_on(store.claim(&other)).unwrap();
    assert!(res.claimed.is_empty());
    assert_eq!(res.unregistered, vec![("r".to_owned(), "wf".to_owned())]);
}

pub(crate) fn cancel_blocks_fenced_writes(store: &dyn Store) {
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

fn load(store: &dyn Store, id: &str) -> RunRecord {
    block_on(store.load_run(id))
        .unwrap()
        .expect("the run exists")
}

fn events(store: &dyn Store, id: &str) -> Vec<Event> {
    block_on(store.history(id))
        .unwrap()
        .into_iter()
        .map(|h| h.event)
        .collect()
}

/// A checkpoint of a suspension site.
fn suspended_cp(run: &str, seq: u64, suspend: Suspend) -> Arc<CheckpointRecord> {
    let mut cp = (*cp(run, seq)).clone();
    cp.suspend = Some(suspend);
    Arc::new(cp)
}

fn waiting(signal: &str, deadline: Option<SystemTime>) -> Suspend {
    Suspend::Waiting {
        signal: signal.to_owned(),
        deadline,
        payload_schema: None,
        sites_before: None,
    }
}

/// A run `r` claimed by `a`/`a1` whose checkpoint #1 waits for `go`.
fn waiting_run(store: &dyn Store, deadline: Option<SystemTime>) -> Lease {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    block_on(store.save_checkpoint(
        &c.lease,
        suspended_cp("r", 1, waiting("go", deadline)),
        None,
    ))
    .unwrap();
    c.lease
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
pub(crate) fn each_runnable_run_is_claimed_and_no_other(store: &dyn Store) {
    let soon = runs_of_every_kind(store);
    let next = block_on(store.next_wakeup()).unwrap().unwrap();
    // No later than the deadlines set: the short leases expire before them,
    // unless setting up took longer than a lease (on a loaded machine),
    // and then the deadlines themselves come first.
    assert!(next <= soon, "{next:?}");
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(claim_all(store), RUNNABLE);
    // All leased now: a lease's expiry, not the hour's sleep.
    let next = block_on(store.next_wakeup()).unwrap().unwrap();
    assert!(
        next < SystemTime::now() + Duration::from_secs(60),
        "{next:?}"
    );
}

pub(crate) fn claim_takes_a_lease(store: &dyn Store) {
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

pub(crate) fn a_run_keeps_the_version_that_started_it(store: &dyn Store) {
    new_run(store, "v1");
    block_on(store.create_run(NewRun {
        id: "v2".into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 2,
        trace: None,
        parent: None,
        max_running: None,
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

pub(crate) fn renew_extends_the_lease(store: &dyn Store) {
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

pub(crate) fn renew_many_renews_each_and_fences_each(store: &dyn Store) {
    for id in ["r1", "r2", "r3", "r4"] {
        new_run(store, id);
    }
    let mut short = req("a", "a1");
    short.ttl = Duration::from_millis(0);
    let claimed = block_on(store.claim(&short)).unwrap().claimed;
    assert_eq!(claimed.len(), 4);
    let lease = |id: &str| {
        claimed
            .iter()
            .find(|c| c.run.id == id)
            .expect("claimed")
            .lease
            .clone()
    };
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

pub(crate) fn release_retry_and_abandon(store: &dyn Store) {
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

pub(crate) fn suspend_waits_for_a_signal(store: &dyn Store) {
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

pub(crate) fn a_parked_run_keeps_its_wake_and_is_taken_only_by_name(store: &dyn Store) {
    let lease = waiting_run(store, None);
    block_on(store.release("r", &lease, Release::Suspend)).unwrap();
    block_on(store.put_signal("r", "go", b"2".to_vec())).unwrap();
    let c = claim_one(store, "b", "b1");
    let wake = c.run.wake.clone().expect("the claim consumed the signal");
    let error = Error::Incompatible {
        workflow: "wf".into(),
        run: "r".into(),
        site: "s".into(),
        field: "total".into(),
        detail: "stored as `u32`, the code has `u64`".into(),
    };
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

pub(crate) fn sleeping_run_is_claimed_when_due(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    let later = SystemTime::now() + Duration::from_secs(3600);
    let sleep = Suspend::Sleeping {
        until: later,
        sites_before: None,
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
    };
    block_on(store.save_checkpoint(&c.lease, suspended_cp("s", 1, due), None)).unwrap();
    block_on(store.release("s", &c.lease, Release::Suspend)).unwrap();
    let c = claim_one(store, "b", "b1");
    assert_eq!(c.run.id, "s");
    assert_eq!((c.run.state, c.run.wake), (RunState::Ready, None));
}

pub(crate) fn take_signal_consumes_the_oldest(store: &dyn Store) {
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

pub(crate) fn reject_signal_returns_to_waiting(store: &dyn Store) {
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

pub(crate) fn time_out_wakes_with_timed_out(store: &dyn Store) {
    let deadline = SystemTime::now() + Duration::from_secs(3600);
    let lease = waiting_run(store, Some(deadline));
    block_on(store.time_out("r", &lease)).unwrap();
    let rec = load(store, "r");
    assert_eq!(rec.state, RunState::Ready);
    let value = WakeValue::TimedOut;
    assert_eq!(rec.wake, Some(Wake { seq: 1, value }));
}

pub(crate) fn claim_after_deadline_times_out(store: &dyn Store) {
    let deadline = SystemTime::now() - Duration::from_secs(1);
    let lease = waiting_run(store, Some(deadline));
    block_on(store.release("r", &lease, Release::Suspend)).unwrap();
    let c = claim_one(store, "b", "b1");
    let value = WakeValue::TimedOut;
    assert_eq!(c.run.wake, Some(Wake { seq: 1, value }));
}

pub(crate) fn finish_completes_the_run(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    let output: Arc<[u8]> = Arc::from(&b"42"[..]);
    let outcome = Outcome::Completed {
        output: output.clone(),
        error: None,
    };
    block_on(store.finish("r", &c.lease, outcome)).unwrap();
    let rec = load(store, "r");
    assert_eq!(
        rec.state,
        RunState::Completed {
            output,
            error: None
        }
    );
    assert_eq!(rec.lease, None);
    assert_eq!(rec.status(), crate::Status::Completed);
    assert!(events(store, "r").contains(&Event::Completed));
    // Finished: never claimed again, and fenced writes are refused.
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    let err = block_on(store.save_checkpoint(&c.lease, cp("r", 1), None)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert!(!block_on(store.cancel("r")).unwrap());
}

/// Issue 34, item 6: a signal to a run that has ended was stored and never
/// read; it is refused naming the run's status, and nothing is written.
pub(crate) fn a_signal_to_an_ended_run_is_refused_and_not_stored(store: &dyn Store) {
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
        let err = block_on(store.put_signal(id, "approval", b"true".to_vec())).unwrap_err();
        assert!(
            matches!(&err, Error::RunEnded { run, status: s, signal } if run == id && s == status && signal == "approval"),
            "{err:?}"
        );
        assert!(block_on(store.pending_signals(id)).unwrap().is_empty());
        assert_eq!(events(store, id), before, "no event for a refused signal");
    }
    // A run that has not ended still takes it; an unknown run is named.
    new_run(store, "open");
    block_on(store.put_signal("open", "approval", b"true".to_vec())).unwrap();
    assert_eq!(block_on(store.pending_signals("open")).unwrap().len(), 1);
    let err = block_on(store.put_signal("nope", "approval", b"1".to_vec())).unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err:?}");
}

pub(crate) fn retry_makes_a_failed_run_runnable_from_its_latest_checkpoint(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    block_on(store.save_checkpoint(&c.lease, cp("r", 1), None)).unwrap();
    block_on(store.save_checkpoint(&c.lease, cp("r", 2), None)).unwrap();
    let error = Error::internal("boom");
    block_on(store.finish("r", &c.lease, Outcome::Failed { error })).unwrap();
    block_on(store.retry("r")).unwrap();
    let rec = load(store, "r");
    assert_eq!(
        (rec.state, rec.lease, rec.attempt),
        (RunState::Ready, None, 0)
    );
    assert!(events(store, "r")
        .iter()
        .any(|e| matches!(e, Event::Retried { reason, .. } if reason.contains("boom"))));
    // Any worker takes it up from checkpoint #2, as a new attempt.
    let c = claim_one(store, "b", "b1");
    assert_eq!(c.checkpoint.as_ref().map(|cp| cp.seq), Some(2));
    assert_eq!(c.run.attempt, 1);
    // Nothing else is retried: a running, a completed, an unknown run.
    let err = block_on(store.retry("r")).unwrap_err();
    assert!(matches!(err, Error::NotRetryable { .. }), "{err}");
    let done = Outcome::Completed {
        output: Arc::from(&b"1"[..]),
        error: None,
    };
    block_on(store.finish("r", &c.lease, done)).unwrap();
    let err = block_on(store.retry("r")).unwrap_err();
    assert!(
        matches!(&err, Error::NotRetryable { status, .. } if status == "completed"),
        "{err}"
    );
    let err = block_on(store.retry("nope")).unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err}");
    // A run whose workflow returned `Err` counts as failed: retried too.
    new_run(store, "e");
    let c = claim_one(store, "a", "a1");
    let err_output = Outcome::Completed {
        output: Arc::from(&b"{\"Err\":\"no\"}"[..]),
        error: Some("no".into()),
    };
    block_on(store.finish("e", &c.lease, err_output)).unwrap();
    block_on(store.retry("e")).unwrap();
    assert_eq!(load(store, "e").state, RunState::Ready);
}

pub(crate) fn fail_records_the_error(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    let error = Error::internal("boom");
    let outcome = Outcome::Failed {
        error: error.clone(),
    };
    block_on(store.finish("r", &c.lease, outcome)).unwrap();
    let rec = load(store, "r");
    assert_eq!(rec.state, RunState::Failed { error });
    assert!(matches!(rec.status(), crate::Status::Failed { .. }));
    assert!(events(store, "r")
        .iter()
        .any(|e| matches!(e, Event::Failed { .. })));
    // An `Err` output is a completed run that counts as failed.
    new_run(store, "s");
    let c = claim_one(store, "a", "a1");
    let outcome = Outcome::Completed {
        output: Arc::from(&b"{}"[..]),
        error: Some("no".into()),
    };
    block_on(store.finish("s", &c.lease, outcome)).unwrap();
    let status = load(store, "s").status();
    assert_eq!(status, crate::Status::Failed { error: "no".into() });
}

pub(crate) fn fork_copies_a_checkpoint(store: &dyn Store) {
    let lease = waiting_run(store, None);
    block_on(store.take_signal("r", &lease, "go")).unwrap();
    block_on(store.save_checkpoint(&lease, cp("r", 2), None)).unwrap();
    block_on(store.fork("r", 1, "r2")).unwrap();
    let rec = load(store, "r2");
    assert!(matches!(&rec.state, RunState::Waiting { signal, .. } if signal == "go"));
    assert_eq!((rec.epoch, rec.attempt, rec.latest_seq), (0, 0, 1));
    assert_eq!(rec.lease, None);
    assert_eq!(rec.workflow, "wf");
    let cps = block_on(store.list_checkpoints("r2")).unwrap();
    assert_eq!(cps.len(), 1);
    assert_eq!((cps[0].seq, &*cps[0].run), (1, "r2"));
    let forked = Event::Forked {
        from: "r".into(),
        seq: 1,
        to: "r2".into(),
    };
    assert!(events(store, "r").contains(&forked));
    assert!(events(store, "r2").contains(&forked));
    let err = block_on(store.fork("r", 1, "r2")).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    let err = block_on(store.fork("r", 9, "r3")).unwrap_err();
    assert!(matches!(err, Error::UnknownCheckpoint { .. }), "{err}");
}

/// The rule of `rules::reject_signal` for a run whose latest checkpoint the
/// store no longer has: an error naming the run and that checkpoint, and
/// nothing changes (the state, the consumed signal, the history).
pub(crate) fn reject_signal_without_its_checkpoint_changes_nothing(fx: &dyn Fixture) {
    let store = fx.store();
    let lease = waiting_run(store, None);
    block_on(store.put_signal("r", "go", b"bad".to_vec())).unwrap();
    block_on(store.take_signal("r", &lease, "go")).unwrap();
    fx.lose_checkpoint("r", 1);
    // (In SQLite the checkpoint's row is its `CheckpointSaved` event.)
    let before = events(store, "r");
    let err = block_on(store.reject_signal("r", &lease, "unusable".into())).unwrap_err();
    assert!(
        matches!(&err, Error::Decode { run, workflow, .. } if run == "r" && workflow == "wf"),
        "{err}"
    );
    assert!(
        err.to_string().contains("its latest checkpoint")
            && err.to_string().contains("is missing from the store"),
        "{err}"
    );
    let rec = load(store, "r");
    assert_eq!(rec.state, RunState::Ready);
    let value = WakeValue::Signal {
        name: "go".into(),
        payload: Arc::from(&b"bad"[..]),
    };
    assert_eq!(rec.wake, Some(Wake { seq: 1, value }));
    assert!(rec.lease.is_some());
    assert_eq!(events(store, "r"), before, "nothing recorded");
}

/// A claim that meets a run whose latest checkpoint is missing marks it
/// failed, naming the run (see `rules::latest_checkpoint`), instead of
/// starting it over from its input; the other runs are claimed.
pub(crate) fn claim_sets_aside_a_run_whose_checkpoint_is_missing(fx: &dyn Fixture) {
    let store = fx.store();
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    block_on(store.save_checkpoint(&c.lease, cp("r", 1), None)).unwrap();
    block_on(store.save_checkpoint(&c.lease, cp("r", 2), None)).unwrap();
    block_on(store.release("r", &c.lease, Release::Abandon)).unwrap();
    new_run(store, "s");
    fx.lose_checkpoint("r", 2);
    let got = block_on(store.claim(&req("b", "b1"))).unwrap();
    let ids: Vec<&str> = got.claimed.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(ids, ["s"]);
    let rec = load(store, "r");
    let RunState::Failed { error } = &rec.state else {
        panic!("r: {:?}", rec.state);
    };
    let text = error.to_string();
    for part in ["run `r`", "workflow `wf`", "is missing from the store"] {
        assert!(text.contains(part), "`{part}` missing from: {text}");
    }
    assert!(events(store, "r")
        .iter()
        .any(|e| matches!(e, Event::Failed { .. })));
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
}
