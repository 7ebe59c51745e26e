//! Behaviour every [`Store`] backend must show, as test functions each
//! backend's tests call on a fresh store (see the trait's guarantees).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::executor::block_on;

use super::{CheckpointRecord, ClaimRequest, Claimed, Created, NewRun, Store};
use crate::Error;

pub(crate) fn req(worker: &str, instance: &str) -> ClaimRequest {
    ClaimRequest {
        worker: Arc::from(worker),
        instance: Arc::from(instance),
        workflows: vec!["wf"],
        ttl: Duration::from_secs(30),
        limit: 10,
        only: None,
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
