//! End to end on PostgreSQL: two `Runtime`s with different worker ids (two
//! workers, each with its own connections, as on two machines) share one
//! database.
//!
//! - `two_workers_finish_a_run_across_a_signal_and_a_timer`: worker A runs a
//!   workflow until it waits for a signal; worker B delivers the signal, and
//!   finishes the run through a durable sleep.
//! - `takeover_only_after_lease_expiry`: A stops right after a checkpoint,
//!   leaving its lease behind; B does not touch the run while that lease is
//!   live, and takes it over (from that checkpoint) once it has expired.
//! - `stale_owner_is_fenced`: through the `Store` API, an owner whose lease
//!   expired and was taken over cannot store a checkpoint; the stored one is
//!   the new owner's.
//!
//! The server's URL comes from `CHECKPOINT_TEST_POSTGRES_URL` (CI sets it).
//! Built without it, each test is ignored (`cfg(checkpoint_test_postgres)`,
//! set by `build.rs`), so a run without a server does not count them as
//! passed; built with it but run without it, a test prints that it was
//! skipped. Each test keeps its tables in a PostgreSQL schema of its own,
//! dropped at the end.

mod common;

use common::pg::Schema;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::store::{CheckpointRecord, ClaimRequest, NewRun, RunState, Suspend};
use checkpoint_runtime::testing::SimulatedCrash;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Approval {
    approved: bool,
    by: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Summary {
    done: Vec<String>,
    approved_by: String,
}

/// Checkpoints once per item, waits for `approval`, sleeps durably, takes a
/// last checkpoint.
#[workflow]
async fn review(ctx: &Ctx, items: Vec<String>) -> Result<Summary, String> {
    let mut done = Vec::new();
    for item in &items {
        done.push(format!("{item}:checked"));
        checkpoint!("item");
    }
    let approval: Approval = ctx.wait_for("approval").await;
    if !approval.approved {
        return Err(format!("rejected by {}", approval.by));
    }
    ctx.sleep(Duration::from_millis(300)).await;
    checkpoint!("slept");
    Ok(Summary {
        done,
        approved_by: approval.by,
    })
}

fn items() -> Vec<String> {
    ["a", "b", "c"].iter().map(|s| s.to_string()).collect()
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("timed out")
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
async fn two_workers_finish_a_run_across_a_signal_and_a_timer() {
    let Some(schema) = Schema::new(
        "two_workers_finish_a_run_across_a_signal_and_a_timer",
        "cp_e2e",
    ) else {
        return;
    };
    let url = schema.url();
    let a = Runtime::builder()
        .worker_id("worker-a")
        .open(&url)
        .await
        .unwrap();
    assert_eq!(a.store().kind(), "postgres");
    a.start(review, "rev-1", items()).await.unwrap();
    within(a.run_until_idle()).await.unwrap();
    assert_eq!(
        a.status("rev-1").await.unwrap(),
        Status::Waiting {
            signal: "approval".into(),
            deadline: None,
        }
    );
    // Three item checkpoints and the wait's.
    let seqs: Vec<u64> = a
        .checkpoints("rev-1")
        .await
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    // A stops executing (its process ends); it still reads the store below.
    a.shutdown();

    // Worker B: another runtime, its own connections, the same tables.
    let b = Runtime::builder()
        .worker_id("worker-b")
        .open(&url)
        .await
        .unwrap();
    b.register(review);
    b.signal(
        "rev-1",
        "approval",
        &Approval {
            approved: true,
            by: "ada".into(),
        },
    )
    .await
    .unwrap();
    let out = within(b.handle(review, "rev-1").result()).await.unwrap();
    assert_eq!(
        out,
        Ok(Summary {
            done: vec!["a:checked".into(), "b:checked".into(), "c:checked".into()],
            approved_by: "ada".into(),
        })
    );
    // A sees the same finished run.
    assert_eq!(a.status("rev-1").await.unwrap(), Status::Completed);
    let events = a.history("rev-1").await.unwrap();
    let resumed: Vec<(String, u64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Resumed {
                worker, from_seq, ..
            } => Some((worker.clone(), *from_seq)),
            _ => None,
        })
        .collect();
    // A started the run (a fresh start records no `Resumed`); only B resumed
    // it, first from the wait's checkpoint.
    assert!(!resumed.is_empty());
    assert!(resumed.iter().all(|(w, _)| w == "worker-b"), "{resumed:?}");
    assert_eq!(resumed[0].1, 4, "{resumed:?}");
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::SignalReceived { name } if name == "approval")));
    assert_eq!(events.last(), Some(&Event::Completed));
    // Every version kept: items, wait, sleep, last.
    let labels: Vec<Option<String>> = b
        .checkpoints("rev-1")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.label)
        .collect();
    assert_eq!(labels.len(), 6, "{labels:?}");
    assert_eq!(labels[0].as_deref(), Some("item"));
    assert_eq!(labels[5].as_deref(), Some("slept"));
    // The signal was consumed.
    assert!(b.store().pending_signals("rev-1").await.unwrap().is_empty());
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
async fn takeover_only_after_lease_expiry() {
    let Some(schema) = Schema::new("takeover_only_after_lease_expiry", "cp_e2e") else {
        return;
    };
    let url = schema.url();
    // Long enough that B's look at the run below always happens while A's
    // lease is live (those steps take milliseconds; the test fails, rather
    // than skipping the check, if they ever take this long), short enough
    // not to make the wait for its expiry slow.
    let ttl = Duration::from_secs(8);
    // A "crashes" right after its second checkpoint: no more writes, its
    // lease left behind.
    let crash = SimulatedCrash::after_checkpoint(2);
    let a = crash
        .install(Runtime::builder().worker_id("worker-a").lease_ttl(ttl))
        .open(&url)
        .await
        .unwrap();
    a.start(review, "rev-2", items()).await.unwrap();
    within(a.run_until_idle()).await.unwrap();
    assert!(crash.fired());
    let store = a.store();
    let run = store.load_run("rev-2").await.unwrap().unwrap();
    let lease = run.lease.clone().expect("the crashed worker's lease");
    assert_eq!(lease.worker, "worker-a");
    assert_eq!(run.latest_seq, 2);

    let b = Runtime::builder()
        .worker_id("worker-b")
        .open(&url)
        .await
        .unwrap();
    b.register(review);
    b.signal(
        "rev-2",
        "approval",
        &Approval {
            approved: true,
            by: "grace".into(),
        },
    )
    .await
    .unwrap();
    // While A's lease is live, B leaves the run alone.
    within(b.run_until_idle()).await.unwrap();
    let run = store.load_run("rev-2").await.unwrap().unwrap();
    assert!(
        SystemTime::now() < lease.expires_at,
        "too slow: A's lease (TTL {ttl:?}) expired before B's look at the run was checked"
    );
    assert_eq!(
        run.lease.as_ref().map(|l| l.worker.as_str()),
        Some("worker-a")
    );
    assert_eq!(run.epoch, 1);
    assert_eq!(run.latest_seq, 2);
    // After expiry, B takes it over from checkpoint 2 and finishes it.
    let out = within(b.handle(review, "rev-2").result()).await.unwrap();
    assert_eq!(out.unwrap().approved_by, "grace");
    let took_over = b
        .history_entries("rev-2")
        .await
        .unwrap()
        .into_iter()
        .find(|e| matches!(&e.event, Event::Resumed { worker, .. } if worker == "worker-b"))
        .expect("B resumed the run");
    assert!(
        took_over.at >= lease.expires_at,
        "taken over {:?} before the lease expired",
        lease.expires_at.duration_since(took_over.at)
    );
    assert!(matches!(
        took_over.event,
        Event::Resumed { from_seq: 2, .. }
    ));
}

fn cp(run: &str, seq: u64, data: &[u8]) -> Arc<CheckpointRecord> {
    Arc::new(CheckpointRecord::new(
        Arc::from(run),
        seq,
        Cow::Borrowed("site"),
        None,
        vec![],
        vec![],
        data.to_vec(),
        None::<Suspend>,
        SystemTime::now(),
    ))
}

fn claim_req(worker: &str, ttl: Duration) -> ClaimRequest {
    ClaimRequest {
        worker: Arc::from(worker),
        instance: Arc::from(format!("{worker}-1").as_str()),
        workflows: vec!["wf"],
        ttl,
        limit: 1,
        only: None,
        revisit_parked: false,
        clock_now: SystemTime::now(),
        queues: Default::default(),
    }
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
async fn stale_owner_is_fenced() {
    let Some(schema) = Schema::new("stale_owner_is_fenced", "cp_e2e") else {
        return;
    };
    let url = schema.url();
    // Two stores over the same tables, as two machines would have.
    let a = Runtime::open(&url).await.unwrap().store();
    let b = Runtime::open(&url).await.unwrap().store();
    a.create_run(NewRun {
        id: "r".into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    })
    .await
    .unwrap();
    let old = a
        .claim(&claim_req("a", Duration::from_millis(200)))
        .await
        .unwrap()
        .claimed
        .remove(0);
    a.save_checkpoint(&old.lease, cp("r", 1, b"old-1"), None)
        .await
        .unwrap();
    // Not before the lease expires...
    let long = claim_req("b", Duration::from_secs(60));
    assert!(b.claim(&long).await.unwrap().claimed.is_empty());
    tokio::time::sleep(Duration::from_millis(250)).await;
    // ...but after.
    let new = b.claim(&long).await.unwrap().claimed.remove(0);
    assert!(new.lease.epoch > old.lease.epoch);
    b.save_checkpoint(&new.lease, cp("r", 2, b"new-2"), None)
        .await
        .unwrap();
    // The paused old owner wakes up and tries to write: refused.
    let err = a
        .save_checkpoint(&old.lease, cp("r", 2, b"old-2"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    let err = a
        .save_checkpoint(&old.lease, cp("r", 3, b"old-3"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    let latest = a.latest_checkpoint("r").await.unwrap().unwrap();
    assert_eq!((latest.seq, latest.data.as_slice()), (2, &b"new-2"[..]));
    let run = a.load_run("r").await.unwrap().unwrap();
    assert_eq!(run.epoch, new.lease.epoch);
    assert_eq!(run.state, RunState::Ready);
    assert_eq!(run.lease.unwrap().worker, "b");
}
