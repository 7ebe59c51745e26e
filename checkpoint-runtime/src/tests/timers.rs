//! Durable timers: `ctx.sleep` and `ctx.wait_for_timeout` suspend the run
//! and any worker resumes it once due; a zero-length timer does not
//! suspend.

use std::time::Duration;

use super::within;
use super::workflows::timers;
use crate::{Event, Runtime, Status};

#[tokio::test]
async fn sleep_and_wait_timeout_are_durable_timers() {
    let rt = Runtime::in_memory();
    let h = rt.start(timers, "t1", 40).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert!(matches!(h.status().await.unwrap(), Status::Sleeping { .. }));
    // result() waits out the timer, then the timeout.
    assert_eq!(within(h.result()).await.unwrap(), ("woke".into(), None));
    // With a signal in time.
    let h2 = rt.start(timers, "t2", 40).await.unwrap();
    rt.signal("t2", "ping", &7u32).await.unwrap();
    assert_eq!(within(h2.result()).await.unwrap(), ("woke".into(), Some(7)));
}

#[tokio::test]
async fn run_worker_serves_timers_and_signals_until_shutdown() {
    let rt = Runtime::in_memory();
    let worker = tokio::spawn({
        let rt = rt.clone();
        async move { rt.run_worker().await }
    });
    rt.register(timers);
    let h = rt.start(timers, "t3", 30).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    rt.signal("t3", "ping", &1u32).await.unwrap();
    // The handle only observes: the worker does the work.
    assert_eq!(within(h.result()).await.unwrap(), ("woke".into(), Some(1)));
    rt.shutdown();
    within(worker).await.unwrap().unwrap();
}

#[tokio::test]
async fn zero_length_timers_do_not_suspend() {
    let rt = Runtime::in_memory();
    let h = rt.start(timers, "t0", 0).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), ("woke".into(), None));
    let history = rt.history("t0").await.unwrap();
    assert!(!history.iter().any(|e| matches!(e, Event::Suspended { .. })));
}
