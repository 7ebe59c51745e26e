//! A deploy under stored checkpoints: code whose site no longer matches
//! them (a field's type changed, a site renamed) is refused before any of
//! it runs and the run is parked; a site that declares its old key
//! resumes them.

use std::sync::Arc;
use std::time::Duration;

use super::workflows::{counter, slow};
use super::{crash_counter_after, effect, within};
use crate::store::MemoryStore;
use crate::testing::SideEffects;
use crate::{workflow, Error, Event, RunFilter, Runtime, Status, StatusKind};

/// `counter` after a deploy that made `total` a `u32`: its `step` site no
/// longer fits the checkpoints `counter` stored. Whatever of it runs
/// records an effect, so the test sees that none did.
#[workflow(name = "counter")]
async fn counter_v2(ctx: &Ctx, n: u64) -> u64 {
    let mut total: u32 = 0;
    for i in 0..n {
        total += i as u32;
        checkpoint!("step");
        effect(ctx, format!("v2 after step {i}"));
    }
    u64::from(total)
}

/// `counter` after a deploy that renamed its only site.
#[workflow(name = "counter")]
async fn counter_renamed(ctx: &Ctx, n: u64) -> u64 {
    let mut total = 0;
    for i in 0..n {
        total += i;
        checkpoint!("renamed");
        effect(ctx, format!("renamed after step {i}"));
    }
    total
}

#[tokio::test]
async fn incompatible_checkpoint_is_refused_before_user_code() {
    // Field type changed.
    let store = Arc::new(MemoryStore::new());
    crash_counter_after(store.clone(), 2, 5).await;
    let fx = SideEffects::new();
    let rt = Runtime::builder()
        .store(store)
        .resource(fx.clone())
        .in_memory();
    let h = rt.handle(counter_v2, "c");
    let err = within(h.result()).await.unwrap_err();
    match &err {
        Error::Incompatible {
            workflow,
            run,
            site,
            field,
            ..
        } => {
            assert_eq!(
                (&**workflow, &**run, &**site, &**field),
                ("counter", "c", "step", "total")
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("u32"), "{err}");
    assert!(fx.all().is_empty(), "the new code ran: {fx:?}");
    // Parked, not failed: nothing of the run changed.
    match h.status().await.unwrap() {
        Status::Incompatible {
            workflow,
            site,
            field,
            ..
        } => assert_eq!((&*workflow, &*site, &*field), ("counter", "step", "total")),
        other => panic!("not parked: {other:?}"),
    }
    let parked = rt
        .runs(RunFilter::new().status(StatusKind::Incompatible))
        .await
        .unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(rt.checkpoints("c").await.unwrap().len(), 2);
    let history = rt.history("c").await.unwrap();
    assert!(
        history
            .iter()
            .any(|e| matches!(e, Event::Parked { reason, .. } if reason.contains("total"))),
        "{history:?}"
    );
    // A rollback: the matching code, registered on another runtime over
    // the same store, resumes it by itself, to the uninterrupted result.
    rt.shutdown();
    let back = Runtime::builder().store(rt.store()).in_memory();
    back.register(counter);
    assert_eq!(
        within(back.handle(counter, "c").result()).await.unwrap(),
        10
    );

    // Site renamed.
    let store = Arc::new(MemoryStore::new());
    crash_counter_after(store.clone(), 1, 5).await;
    let fx = SideEffects::new();
    let rt = Runtime::builder()
        .store(store)
        .resource(fx.clone())
        .in_memory();
    let err = within(rt.handle(counter_renamed, "c").result())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Incompatible { site, .. } if site == "step"),
        "{err}"
    );
    assert!(fx.all().is_empty(), "the new code ran: {fx:?}");
}

/// `slow` after a deploy that dropped its site's label: checkpoints stored
/// under the old key (`tick`, or an older build's `#1`, which the macro
/// adds by itself) resume at the new one, `checkpoint 1`.
#[workflow(name = "slow", renamed_site(from = "tick", to = "checkpoint 1"))]
async fn slow_renamed(ctx: &Ctx, n: u64, ms: u64) -> u64 {
    for i in 0..n {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        effect(ctx, format!("tick:{i}"));
        checkpoint!();
    }
    n
}

#[tokio::test]
async fn a_checkpoint_under_a_site_s_old_key_resumes_at_the_site() {
    let store = Arc::new(MemoryStore::new());
    let a = Runtime::builder()
        .worker_id("a")
        .store(store.clone())
        .in_memory();
    let worker = tokio::spawn({
        let a = a.clone();
        async move { a.run_worker().await }
    });
    a.start(slow, "s", (20, 5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    a.shutdown();
    within(worker).await.unwrap().unwrap();
    let before = a.checkpoints("s").await.unwrap();
    assert!(!before.is_empty() && before.len() < 20, "{}", before.len());
    assert!(before.iter().all(|c| c.site == "tick"));
    let b = Runtime::builder().worker_id("b").store(store).in_memory();
    b.register(slow_renamed);
    assert_eq!(
        within(b.handle(slow_renamed, "s").result()).await.unwrap(),
        20
    );
    let after = b.checkpoints("s").await.unwrap();
    assert_eq!(after.len(), 20, "each tick checkpointed once");
    assert!(after[before.len()..]
        .iter()
        .all(|c| c.site == "checkpoint 1"));
}
