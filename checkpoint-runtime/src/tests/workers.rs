//! Workers and leases: a restarted worker resumes its runs at once, another
//! takes them over when the lease expires (not while it is renewed), a
//! shutdown hands them back, an older instance does not take them back;
//! bounded concurrency and a multi-threaded tokio runtime.

use std::sync::Arc;
use std::time::Duration;

use super::workflows::{approval_flow, approved, counter, slow};
use super::{crash_counter_after, within};
use crate::store::{MemoryStore, Store};
use crate::testing::SimulatedCrash;
use crate::{Event, RunFilter, Runtime, Status, StatusKind};

#[tokio::test]
async fn restart_with_same_worker_resumes_at_once() {
    let store = Arc::new(MemoryStore::new());
    crash_counter_after(store.clone(), 3, 6).await;
    let rt = Runtime::builder().store(store).in_memory();
    let h = rt.handle(counter, "c");
    assert_eq!(h.status().await.unwrap(), Status::Running);
    assert_eq!(within(h.result()).await.unwrap(), 15);
    let history = rt.history("c").await.unwrap();
    assert!(history.contains(&Event::Resumed {
        worker: "local".into(),
        from_seq: 3,
        version: 1,
    }));
    let saved = history
        .iter()
        .filter(|e| matches!(e, Event::CheckpointSaved { .. }))
        .count();
    assert_eq!(saved, 6);
}

#[tokio::test]
async fn other_worker_takes_over_after_lease_expiry() {
    let store = Arc::new(MemoryStore::new());
    let crash = SimulatedCrash::after_checkpoint(2);
    let a = crash
        .install(
            Runtime::builder()
                .worker_id("a")
                .lease_ttl(Duration::from_millis(200))
                .store(store.clone()),
        )
        .in_memory();
    a.start(counter, "c", 5).await.unwrap();
    within(a.run_until_idle()).await.unwrap();
    assert!(crash.fired());
    let b = Runtime::builder()
        .worker_id("b")
        .store(store.clone())
        .in_memory();
    b.register(counter);
    // a's lease is still live: b has nothing to do.
    within(b.run_until_idle()).await.unwrap();
    let info = &b.runs(RunFilter::new()).await.unwrap()[0];
    assert_eq!(info.status, Status::Running);
    assert_eq!(info.worker.as_deref(), Some("a"));
    assert_eq!(info.latest_seq, 2);
    tokio::time::sleep(Duration::from_millis(250)).await;
    within(b.run_until_idle()).await.unwrap();
    assert_eq!(b.handle(counter, "c").result().await.unwrap(), 10);
    assert!(b.history("c").await.unwrap().contains(&Event::Resumed {
        worker: "b".into(),
        from_seq: 2,
        version: 1,
    }));
}

#[tokio::test]
async fn shutdown_hands_runs_back_for_another_worker() {
    let store = Arc::new(MemoryStore::new());
    let a = Runtime::builder()
        .worker_id("a")
        .store(store.clone())
        .in_memory();
    a.register(slow);
    let worker = tokio::spawn({
        let a = a.clone();
        async move { a.run_worker().await }
    });
    a.start(slow, "s", (20, 5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    a.shutdown();
    within(worker).await.unwrap().unwrap();
    let info = &a.runs(RunFilter::new()).await.unwrap()[0];
    assert_eq!(info.status, Status::Queued);
    assert_eq!(info.worker, None, "the lease is released on shutdown");
    assert!(info.latest_seq > 0 && info.latest_seq < 20);
    let b = Runtime::builder().worker_id("b").store(store).in_memory();
    assert_eq!(within(b.handle(slow, "s").result()).await.unwrap(), 20);
}

#[tokio::test]
async fn leases_are_renewed_while_a_run_executes() {
    let store = Arc::new(MemoryStore::new());
    let a = Runtime::builder()
        .worker_id("a")
        .lease_ttl(Duration::from_millis(120))
        .store(store.clone())
        .in_memory();
    let b = Runtime::builder()
        .worker_id("b")
        .lease_ttl(Duration::from_millis(120))
        .store(store)
        .in_memory();
    b.register(slow);
    let h = a.start(slow, "s", (10, 30)).await.unwrap();
    let driver = tokio::spawn({
        let a = a.clone();
        async move { a.run_until_idle().await }
    });
    // For 300 ms (> 2 lease lifetimes) b keeps trying and never gets the run.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(30)).await;
        within(b.run_until_idle()).await.unwrap();
    }
    within(driver).await.unwrap().unwrap();
    assert_eq!(within(h.result()).await.unwrap(), 10);
    let history = a.history("s").await.unwrap();
    assert!(
        !history.iter().any(|e| matches!(e, Event::Resumed { .. })),
        "{history:?}"
    );
}

/// A claim computes its leases' expiry before it begins; one that answers
/// late (hundreds of runs claimed on a loaded server) leaves its runs
/// little of their TTL. The keeper renews them at once, not a renewal
/// period after the claim returned, so no other worker takes them over.
#[tokio::test]
async fn a_slow_claim_is_followed_by_a_prompt_renewal() {
    let store = Arc::new(MemoryStore::new());
    let ttl = Duration::from_millis(300);
    let worker = |id: &str| {
        Runtime::builder()
            .worker_id(id)
            .lease_ttl(ttl)
            .store(store.clone())
            .in_memory()
    };
    let (a, b) = (worker("a"), worker("b"));
    b.register(slow);
    store.delay_next_claim(Duration::from_millis(250));
    let h = a.start(slow, "s", (20, 30)).await.unwrap();
    // The claim took the run (its answer is still on its way): only now
    // may b look, as often as it likes.
    within(async {
        while store.load_run("s").await.unwrap().unwrap().lease.is_none() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    let polling = tokio::spawn(async move {
        for _ in 0..40 {
            b.run_until_idle().await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert_eq!(within(h.result()).await.unwrap(), 20);
    within(polling).await.unwrap();
    let history = a.history("s").await.unwrap();
    assert!(
        !history.iter().any(|e| matches!(e, Event::Resumed { .. })),
        "{history:?}"
    );
}

#[tokio::test]
async fn many_runs_execute_concurrently_with_bounded_concurrency() {
    let rt = Runtime::builder().concurrency(8).in_memory();
    rt.register(slow);
    let worker = tokio::spawn({
        let rt = rt.clone();
        async move { rt.run_worker().await }
    });
    let mut handles = Vec::new();
    for i in 0..40 {
        handles.push(rt.start(slow, &format!("s{i}"), (3, 2)).await.unwrap());
    }
    for h in &handles {
        assert_eq!(within(h.result()).await.unwrap(), 3);
    }
    let done = rt
        .runs(RunFilter::new().status(StatusKind::Completed))
        .await
        .unwrap();
    assert_eq!(done.len(), 40);
    rt.shutdown();
    within(worker).await.unwrap().unwrap();
}

#[tokio::test]
async fn an_older_instance_does_not_take_runs_back() {
    let store = Arc::new(MemoryStore::new());
    let old = Runtime::builder().store(store.clone()).in_memory();
    let new = Runtime::builder().store(store).in_memory();
    new.register(slow);
    new.start(slow, "s", (5, 10)).await.unwrap();
    // The new instance holds the run; only then does the old one serve.
    while new.status("s").await.unwrap() != Status::Running {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    old.register(slow);
    let driver = tokio::spawn({
        let new = new.clone();
        async move { new.run_until_idle().await }
    });
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        within(old.run_until_idle()).await.unwrap();
    }
    within(driver).await.unwrap().unwrap();
    assert_eq!(new.status("s").await.unwrap(), Status::Completed);
    let history = new.history("s").await.unwrap();
    assert!(
        !history.iter().any(|e| matches!(e, Event::Resumed { .. })),
        "{history:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_on_a_multi_threaded_runtime() {
    let rt = Runtime::builder().concurrency(4).in_memory();
    rt.register(slow);
    rt.register(approval_flow);
    let worker = tokio::spawn({
        let rt = rt.clone();
        async move { rt.run_worker().await }
    });
    let mut handles = Vec::new();
    for i in 0..20 {
        handles.push(rt.start(slow, &format!("m{i}"), (5, 1)).await.unwrap());
    }
    let approval = rt.start(approval_flow, "ap", "acme".into()).await.unwrap();
    rt.signal("ap", "approval", &approved()).await.unwrap();
    for h in &handles {
        assert_eq!(within(h.result()).await.unwrap(), 5);
    }
    assert_eq!(
        within(approval.result()).await.unwrap(),
        Ok("acme: approved".into())
    );
    rt.shutdown();
    within(worker).await.unwrap().unwrap();
    let report = within(crate::testing::check_every_checkpoint(counter, 3))
        .await
        .unwrap();
    assert_eq!(report.crash_points.len(), 3);
}

/// The side effects of [`gated`]: `(worker, item)`.
static GATED_EFFECTS: std::sync::Mutex<Vec<(String, u32)>> = std::sync::Mutex::new(Vec::new());
/// Lets every [`gated`] execution waiting at its gate go on one item.
static GATE: std::sync::LazyLock<tokio::sync::Notify> =
    std::sync::LazyLock::new(tokio::sync::Notify::new);

/// Records `(worker, i)`, checkpoints, then waits at [`GATE`], for each of
/// `n` items.
#[crate::workflow(name = "gated")]
async fn gated(ctx: &Ctx, n: u32) -> u32 {
    let mut i = 0;
    while i < n {
        let worker = ctx.worker_id().to_owned();
        GATED_EFFECTS.lock().unwrap().push((worker, i));
        checkpoint!("item");
        GATE.notified().await;
        i += 1;
    }
    i
}

fn gated_effects_of(worker: &str) -> Vec<u32> {
    let effects = GATED_EFFECTS.lock().unwrap();
    effects
        .iter()
        .filter(|(w, _)| w == worker)
        .map(|(_, i)| *i)
        .collect()
}

/// A worker frozen past its lease (its thread blocked, as SIGSTOP freezes a
/// process) runs no more of the run's workflow once it wakes, though its
/// workflow task was woken while it was frozen and is polled before its
/// lease keeper's timer fires: the other worker took the run over and goes
/// on, and the frozen worker's lease can no longer be proved by its own
/// clock. (Its writes would be fenced; its side effects would not be.)
#[tokio::test]
async fn a_worker_frozen_past_its_lease_runs_no_more_of_the_workflow() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const TTL: Duration = Duration::from_millis(300);
    let store = Arc::new(MemoryStore::new());
    let freeze = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let worker_a = std::thread::spawn({
        let (store, freeze, done) = (store.clone(), freeze.clone(), done.clone());
        move || {
            let tokio = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            tokio.block_on(async move {
                let a = Runtime::builder()
                    .worker_id("a")
                    .lease_ttl(TTL)
                    .store(store)
                    .in_memory();
                a.start(gated, "g", 3).await.unwrap();
                while !done.load(Ordering::Acquire) {
                    // Frozen: nothing of this runtime runs, not even its
                    // timers, as in a stopped process.
                    while freeze.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        }
    });
    let client = Runtime::builder().store(store.clone()).in_memory();
    // A holds the run, waiting at the gate after its first checkpoint.
    within(async {
        while client.checkpoints("g").await.map_or(0, |c| c.len()) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(gated_effects_of("a"), [0]);
    freeze.store(true, Ordering::Release);

    // B takes the run over once A's lease expired, and goes on one item.
    let b = Runtime::builder()
        .worker_id("b")
        .lease_ttl(TTL)
        .store(store.clone())
        .in_memory();
    b.register(gated);
    within(async {
        loop {
            let history = b.history("g").await.unwrap();
            let resumed = |e: &Event| matches!(e, Event::Resumed { worker, .. } if worker == "b");
            if history.iter().any(resumed) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // B waits at the gate too (it resumed after checkpoint 1). Opening it
    // now wakes B, and A's task, frozen with it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    GATE.notify_waiters();
    within(async {
        while gated_effects_of("b") != [1] {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;

    // A wakes with its task due: it must not run item 1 again.
    freeze.store(false, Ordering::Release);
    tokio::time::sleep(TTL).await;
    assert_eq!(
        gated_effects_of("a"),
        [0],
        "A ran user code after its lease lapsed"
    );

    // B finishes the run; A never runs any of it.
    let h = b.handle(gated, "g");
    let result = within(async {
        loop {
            GATE.notify_waiters();
            if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(50), h.result()).await {
                break n;
            }
        }
    })
    .await;
    assert_eq!(result, 3);
    assert_eq!(gated_effects_of("b"), [1, 2]);
    assert_eq!(gated_effects_of("a"), [0]);
    done.store(true, Ordering::Release);
    worker_a.join().unwrap();
}
