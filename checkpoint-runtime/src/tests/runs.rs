//! A run's life on one runtime: starting (idempotent, validated), its
//! checkpoints and history, statuses and listing, panics, cancelling,
//! forking, retention, a workflow nobody registered, and opening a store.

use std::sync::Arc;
use std::time::Duration;

use super::within;
use super::workflows::{approval_flow, counter, slow};
use crate::store::MemoryStore;
use crate::{workflow, Error, Event, RunFilter, Runtime, Status, StatusKind};

#[tokio::test]
async fn counter_runs_to_completion() {
    let rt = Runtime::in_memory();
    let h = rt.start(counter, "c1", 10).await.unwrap();
    // Executing in the background from now on.
    assert!(matches!(
        h.status().await.unwrap(),
        Status::Queued | Status::Running | Status::Completed
    ));
    assert_eq!(within(h.result()).await.unwrap(), 45);
    assert_eq!(h.status().await.unwrap(), Status::Completed);
    let cps = rt.checkpoints("c1").await.unwrap();
    assert_eq!(cps.len(), 10);
    assert_eq!(cps[0].seq, 1);
    assert_eq!(cps[9].seq, 10);
    assert_eq!(cps[9].label.as_deref(), Some("step"));
    assert_eq!(cps[9].site, "step");
    // The loop's position is the index of the item the checkpoint was taken
    // in (the tenth): a resume takes that item again and goes on after the
    // site, inside its body.
    assert_eq!(cps[9].loops, vec![9]);
    let total = cps[9]
        .fields
        .iter()
        .find(|f| f.name == "total")
        .unwrap_or_else(|| panic!("`total` is saved: {:?}", cps[9].fields));
    assert_eq!(total.type_name, "u64");
    let history = rt.history("c1").await.unwrap();
    assert_eq!(
        history.first(),
        Some(&Event::Started {
            workflow: "counter".into(),
            trace: None,
        })
    );
    assert_eq!(history.last(), Some(&Event::Completed));
}

#[tokio::test]
async fn start_is_idempotent_and_validated() {
    let rt = Runtime::in_memory();
    let h1 = rt.start(counter, "same", 3).await.unwrap();
    let h2 = rt.start(counter, "same", 100).await.unwrap();
    assert_eq!(h1.id(), h2.id());
    assert_eq!(within(h2.result()).await.unwrap(), 3);
    let err = rt
        .start(approval_flow, "same", "x".into())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WorkflowMismatch { .. }), "{err}");
    assert!(matches!(
        rt.start(counter, "", 1).await,
        Err(Error::InvalidId { .. })
    ));
    assert!(matches!(
        rt.start(counter, &"x".repeat(256), 1).await,
        Err(Error::InvalidId { .. })
    ));
    assert!(matches!(
        rt.handle(counter, "missing").status().await,
        Err(Error::UnknownRun { .. })
    ));
    assert!(matches!(
        rt.handle(approval_flow, "same").status().await,
        Err(Error::WorkflowMismatch { .. })
    ));
    assert!(matches!(
        rt.signal("missing", "x", &1).await,
        Err(Error::UnknownRun { .. })
    ));
}

#[tokio::test]
async fn cancel_stops_a_waiting_run() {
    let rt = Runtime::in_memory();
    let h = rt.start(approval_flow, "v6", "acme".into()).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    rt.cancel("v6").await.unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Cancelled);
    assert!(matches!(
        within(h.result()).await,
        Err(Error::Cancelled { .. })
    ));
    // Cancelling again changes nothing; a signal is refused, naming why.
    rt.cancel("v6").await.unwrap();
    assert!(matches!(
        rt.signal("v6", "approval", &1).await,
        Err(Error::RunEnded { status, .. }) if status == "cancelled"
    ));
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Cancelled);
    assert!(rt.history("v6").await.unwrap().contains(&Event::Cancelled));
    assert!(matches!(
        rt.cancel("nope").await,
        Err(Error::UnknownRun { .. })
    ));
}

#[tokio::test]
async fn cancel_stops_an_executing_run_promptly() {
    let rt = Runtime::in_memory();
    let h = rt.start(slow, "s", (1000, 5)).await.unwrap();
    let driver = tokio::spawn({
        let rt = rt.clone();
        async move { rt.run_until_idle().await }
    });
    tokio::time::sleep(Duration::from_millis(40)).await;
    rt.cancel("s").await.unwrap();
    within(driver).await.unwrap().unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Cancelled);
    let taken = rt.checkpoints("s").await.unwrap().len();
    assert!(taken > 0 && taken < 1000, "{taken}");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(rt.checkpoints("s").await.unwrap().len(), taken);
}

#[workflow(name = "panicker")]
async fn panicker() {
    panic!("boom")
}

#[tokio::test]
async fn panics_are_retried_then_fail() {
    let rt = Runtime::builder().max_attempts(3).in_memory();
    let h = rt.start(panicker, "p", ()).await.unwrap();
    let err = within(h.result()).await.unwrap_err();
    assert!(matches!(err, Error::Panicked { .. }), "{err}");
    assert!(err.to_string().contains("boom"));
    let retries = rt
        .history("p")
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e, Event::Retried { .. }))
        .count();
    assert_eq!(retries, 2);
}

#[tokio::test]
async fn fork_resumes_from_an_old_checkpoint() {
    let rt = Runtime::in_memory();
    let h = rt.start(counter, "orig", 6).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), 15);
    rt.fork("orig", 2, "copy").await.unwrap();
    let copy = rt.handle(counter, "copy");
    assert_eq!(within(copy.result()).await.unwrap(), 15);
    let forked = Event::Forked {
        from: "orig".into(),
        seq: 2,
        to: "copy".into(),
    };
    assert!(rt.history("orig").await.unwrap().contains(&forked));
    assert!(rt.history("copy").await.unwrap().contains(&forked));
    // The copy resumed from its copied checkpoint (seq 1), then took 4 more.
    assert_eq!(rt.checkpoints("copy").await.unwrap().len(), 5);
    assert!(matches!(
        rt.fork("orig", 99, "x").await,
        Err(Error::UnknownCheckpoint { seq: 99, .. })
    ));
    assert!(matches!(
        rt.fork("orig", 1, "copy").await,
        Err(Error::AlreadyExists { .. })
    ));
}

#[tokio::test]
async fn retention_keeps_the_latest_checkpoints() {
    let rt = Runtime::builder().keep_checkpoints(3).in_memory();
    let h = rt.start(counter, "r", 10).await.unwrap();
    within(h.result()).await.unwrap();
    let seqs: Vec<u64> = rt
        .checkpoints("r")
        .await
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(seqs, vec![8, 9, 10]);
}

#[tokio::test]
async fn unregistered_workflow_waits_with_a_history_event() {
    let store = Arc::new(MemoryStore::new());
    // A client starts the run; worker b does not know the workflow.
    let client = Runtime::builder()
        .store(store.clone())
        .client_only()
        .in_memory();
    client.start(counter, "u", 3).await.unwrap();
    let b = Runtime::builder()
        .worker_id("b")
        .store(store.clone())
        .in_memory();
    within(b.run_until_idle()).await.unwrap();
    within(b.run_until_idle()).await.unwrap();
    let suspended: Vec<Event> = b
        .history("u")
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e, Event::Suspended { .. }))
        .collect();
    assert_eq!(suspended.len(), 1, "{suspended:?}");
    assert_eq!(b.status("u").await.unwrap(), Status::Queued);
    // A worker that registers it resumes it with no further call.
    let a = Runtime::builder().store(store).in_memory();
    a.register(counter);
    assert_eq!(within(a.handle(counter, "u").result()).await.unwrap(), 3);
    assert_eq!(a.status("u").await.unwrap(), Status::Completed);
}

#[tokio::test]
async fn runs_are_listed_and_filtered() {
    let rt = Runtime::in_memory();
    rt.start(counter, "a-1", 2).await.unwrap();
    rt.start(approval_flow, "b-1", "x".into()).await.unwrap();
    rt.start(counter, "a-2", 2).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    let all = rt.runs(RunFilter::new()).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, vec!["a-1", "b-1", "a-2"]);
    let waiting = rt
        .runs(RunFilter::new().status(StatusKind::Waiting))
        .await
        .unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].workflow, "approval");
    let counters = rt
        .runs(RunFilter::new().workflow("counter").limit(1))
        .await
        .unwrap();
    assert_eq!(counters.len(), 1);
    assert_eq!(counters[0].id, "a-1");
    assert_eq!(
        rt.runs(RunFilter::new().id_prefix("a-"))
            .await
            .unwrap()
            .len(),
        2
    );
}

#[workflow(name = "keys")]
async fn keys(ctx: &Ctx) -> Vec<String> {
    vec![
        ctx.idempotency_key(),
        ctx.idempotency_key(),
        ctx.id().to_owned(),
    ]
}

#[tokio::test]
async fn idempotency_keys_are_stable_per_position() {
    let rt = Runtime::in_memory();
    let out = within(rt.start(keys, "k", ()).await.unwrap().result())
        .await
        .unwrap();
    assert_eq!(out, vec!["k:0:0", "k:0:1", "k"]);
}

#[tokio::test]
async fn open_picks_the_store_from_the_url() {
    assert!(Runtime::open(":memory:").await.is_ok());
    assert!(Runtime::builder().open("memory:").await.is_ok());
    // Another scheme is refused, and no SQLite file of that name appears.
    let err = Runtime::open("mysql://app@127.0.0.1/db").await.unwrap_err();
    assert!(matches!(err, Error::UnsupportedStore { .. }), "{err}");
    assert!(
        err.to_string().contains("unknown store scheme `mysql://`"),
        "{err}"
    );
    assert!(!std::path::Path::new("mysql:").exists());
    // PostgreSQL: an unreachable server (port 1 on the loopback refuses at
    // once) is an error naming the URL; a build without the backend says
    // which feature it lacks.
    let err = Runtime::open("postgres://u@127.0.0.1:1/db")
        .await
        .unwrap_err();
    if cfg!(feature = "postgres") {
        assert!(matches!(err, Error::Store { .. }), "{err}");
    } else {
        assert!(err.to_string().contains("`postgres` feature"), "{err}");
    }
    assert!(
        err.to_string().contains("postgres://u@127.0.0.1:1/db"),
        "{err}"
    );

    let dir = std::env::temp_dir().join(format!("cp-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("runs.db");
    for url in [
        file.to_string_lossy().to_string(),
        format!("sqlite://{}", file.to_string_lossy()),
    ] {
        let rt = Runtime::open(&url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(rt.store().kind(), "sqlite");
    }
    let missing = dir.join("no-such-dir").join("runs.db");
    assert!(Runtime::open(&missing.to_string_lossy()).await.is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
