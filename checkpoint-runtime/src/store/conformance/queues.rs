//! Conformance: queue bounds ([`crate::Queue`]): a claim admits a run of a
//! bounded queue only while fewer than its concurrency hold live leases,
//! whoever claims (claims made at the same time included), by priority
//! then age; a slot frees when its run ends or its lease expires.

use super::*;
use crate::{Queue, StartOptions};

fn queued(store: &dyn Store, id: &str, queue: &str, priority: i32) {
    let r = block_on(store.create_run(NewRun {
        id: id.into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: StartOptions::new().queue(queue).priority(priority),
    }))
    .unwrap();
    assert!(matches!(r, Created::New));
}

/// A claim by `worker` that bounds queue `q` to `n`.
fn bounded(worker: &str, n: u32) -> ClaimRequest {
    ClaimRequest {
        queues: Arc::new(BTreeMap::from([(
            "q".to_owned(),
            Queue::new().concurrency(n),
        )])),
        ..req(worker, &format!("{worker}1"))
    }
}

fn claim_ids(store: &dyn Store, req: &ClaimRequest) -> Vec<(String, Lease)> {
    block_on(store.claim(req))
        .unwrap()
        .claimed
        .into_iter()
        .map(|c| (c.run.id, c.lease))
        .collect()
}

fn done(store: &dyn Store, id: &str, lease: &Lease) {
    let out = Outcome::Completed {
        output: Arc::from(&b"null"[..]),
        error: None,
    };
    block_on(store.finish(id, lease, out)).unwrap();
}

/// Conformance: a bounded queue admits at most its concurrency, across
/// claimers, higher priority first then oldest; an ended run frees its
/// slot; runs outside the queue are claimed as ever; a claim that does not
/// bound the queue takes its runs unbounded.
pub fn a_queue_admits_up_to_its_bound_by_priority(store: &dyn Store) {
    for (id, prio) in [("r0", 0), ("r1", 5), ("r2", 0), ("r3", 5), ("r4", 1)] {
        queued(store, id, "q", prio);
    }
    new_run(store, "free");
    assert_eq!(
        load(store, "r0").status(),
        Status::InQueue { queue: "q".into() }
    );
    let a = claim_ids(store, &bounded("a", 2));
    let ids: Vec<&str> = a.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(ids.contains(&"free"), "{ids:?}");
    assert!(
        ids.contains(&"r1") && ids.contains(&"r3"),
        "priority first: {ids:?}"
    );
    // Full: another claimer takes none of the queue.
    assert!(claim_ids(store, &bounded("b", 2)).is_empty());
    // One ends: the next by priority (r4), then by age (r0, then r2).
    let lease = |id: &str| a.iter().find(|(i, _)| i == id).unwrap().1.clone();
    done(store, "r1", &lease("r1"));
    let b = claim_ids(store, &bounded("b", 2));
    assert_eq!(
        b.iter().map(|(i, _)| i.as_str()).collect::<Vec<_>>(),
        ["r4"]
    );
    assert!(claim_ids(store, &bounded("c", 2)).is_empty());
    done(store, "r3", &lease("r3"));
    done(store, "r4", &b[0].1);
    let c = claim_ids(store, &bounded("c", 2));
    assert_eq!(
        c.iter().map(|(i, _)| i.as_str()).collect::<Vec<_>>(),
        ["r0", "r2"]
    );
    // A claim that does not bound the queue is not held back by it.
    queued(store, "r5", "q", 0);
    assert!(claim_ids(store, &bounded("d", 2)).is_empty());
    let d = claim_ids(store, &req("d", "d1"));
    assert_eq!(
        d.iter().map(|(i, _)| i.as_str()).collect::<Vec<_>>(),
        ["r5"]
    );
}

/// Conformance: claims made at the same time by several workers admit no
/// more runs of a queue than its bound, in all.
pub fn claims_at_once_never_exceed_a_queue_bound(store: &dyn Store) {
    for i in 0..12 {
        queued(store, &format!("r{i:02}"), "q", 0);
    }
    let reqs: Vec<ClaimRequest> = ["a", "b", "c", "d"].iter().map(|w| bounded(w, 3)).collect();
    let claims = futures::future::join_all(reqs.iter().map(|r| store.claim(r)));
    let total: usize = block_on(claims)
        .into_iter()
        .map(|r| r.unwrap().claimed.len())
        .sum();
    assert_eq!(total, 3, "the bound holds across claims at once");
    let more = futures::future::join_all(reqs.iter().map(|r| store.claim(r)));
    let again: usize = block_on(more)
        .into_iter()
        .map(|r| r.unwrap().claimed.len())
        .sum();
    assert_eq!(again, 0, "still full");
}

/// Conformance: the slot of a run whose lease expired (its worker died) is
/// free: another worker's claim admits a run of the queue again.
pub fn an_expired_lease_frees_its_queue_slot(store: &dyn Store) {
    queued(store, "r0", "q", 0);
    queued(store, "r1", "q", 0);
    let short = ClaimRequest {
        ttl: Duration::from_millis(200),
        limit: 1,
        ..bounded("a", 1)
    };
    let a = claim_ids(store, &short);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].0, "r0");
    assert!(
        claim_ids(store, &bounded("b", 1)).is_empty(),
        "the slot is held"
    );
    std::thread::sleep(Duration::from_millis(400));
    let b = claim_ids(store, &bounded("b", 1));
    assert_eq!(b.len(), 1, "the expired lease's slot is free");
    assert_eq!(b[0].0, "r0", "the oldest run, taken over");
    assert!(
        claim_ids(store, &bounded("c", 1)).is_empty(),
        "one at a time"
    );
}

/// A claim by `worker` that limits queue `q` to `n` admissions per `per`.
fn rated(worker: &str, n: u32, per: Duration) -> ClaimRequest {
    ClaimRequest {
        queues: Arc::new(BTreeMap::from([(
            "q".to_owned(),
            Queue::new().rate(n, per),
        )])),
        ..req(worker, &format!("{worker}1"))
    }
}

/// Conformance: a queue's rate admits at most `count` runs per window,
/// across claimers and claims at once, whether or not the admitted runs
/// still run; `next_wakeup` says when the window frees, and then the next
/// runs are admitted.
pub fn a_queue_rate_admits_count_per_window(store: &dyn Store) {
    let per = Duration::from_millis(800);
    for i in 0..6 {
        queued(store, &format!("r{i}"), "q", 0);
    }
    let started = SystemTime::now();
    let a = claim_ids(store, &rated("a", 2, per));
    assert_eq!(
        a.iter().map(|(i, _)| i.as_str()).collect::<Vec<_>>(),
        ["r0", "r1"]
    );
    for (id, lease) in &a {
        done(store, id, lease);
    }
    // Ended, yet still counted within the window, by every claimer.
    let reqs: Vec<ClaimRequest> = ["b", "c", "d"].iter().map(|w| rated(w, 2, per)).collect();
    let at_once = futures::future::join_all(reqs.iter().map(|r| store.claim(r)));
    let none: usize = block_on(at_once)
        .into_iter()
        .map(|r| r.unwrap().claimed.len())
        .sum();
    if started.elapsed().unwrap() < per {
        assert_eq!(none, 0, "the window is used up");
        let wake = block_on(store.next_wakeup(SystemTime::now())).unwrap();
        let at = wake.lease.expect("a wake-up when the window frees");
        assert!(at > SystemTime::now() && at <= started + per + Duration::from_millis(200));
    }
    std::thread::sleep(per + Duration::from_millis(100));
    // A new window: two more, in all, among claims made at once.
    let at_once = futures::future::join_all(reqs.iter().map(|r| store.claim(r)));
    let mut ids: Vec<String> = block_on(at_once)
        .into_iter()
        .flat_map(|r| r.unwrap().claimed.into_iter().map(|c| c.run.id))
        .collect();
    ids.sort();
    assert_eq!(ids, ["r2", "r3"]);
}
