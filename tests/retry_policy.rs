//! `ctx.retry` on every store (memory, SQLite, PostgreSQL with
//! `CHECKPOINT_TEST_POSTGRES_URL`; ignored without it): success after
//! failures, exhausted, not retryable, timed out (on the virtual clock),
//! the history's attempt
//! events, the backoff on the virtual clock (a durable sleep: `Sleeping`,
//! fired by `advance`), in a loop and in a branch, in a child run, and the
//! idempotency key per attempt. Then the crash harness: at every crash
//! point, no attempt whose outcome was stored runs again.

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::{Harness, SideEffects};
use serde::{Deserialize, Serialize};

/// An attempt's error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Flake {
    /// Worth another attempt (the number of the call that failed).
    Busy(u32),
    /// Not worth one.
    Fatal,
}

impl std::fmt::Display for Flake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Flake::Busy(n) => write!(f, "busy (call {n})"),
            Flake::Fatal => f.write_str("fatal"),
        }
    }
}

/// The service the attempts call: a log of the idempotency keys it was
/// called with, in order.
#[derive(Clone, Default)]
struct Service {
    keys: Arc<Mutex<Vec<String>>>,
}

impl Service {
    /// Fails calls `1..=fail` with `Busy`, call `fatal_at` with `Fatal`,
    /// answers the others with their number.
    fn call(&self, key: String, fail: u32, fatal_at: Option<u32>) -> Result<u32, Flake> {
        let mut keys = self.keys.lock().unwrap();
        keys.push(key);
        let n = keys.len() as u32;
        if fatal_at == Some(n) {
            Err(Flake::Fatal)
        } else if n <= fail {
            Err(Flake::Busy(n))
        } else {
            Ok(n)
        }
    }

    /// Odd calls fail, even ones answer.
    fn flip(&self, key: String) -> Result<u32, Flake> {
        let mut keys = self.keys.lock().unwrap();
        keys.push(key);
        let n = keys.len() as u32;
        if n % 2 == 1 {
            Err(Flake::Busy(n))
        } else {
            Ok(n)
        }
    }

    fn keys(&self) -> Vec<String> {
        self.keys.lock().unwrap().clone()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Plan {
    fail: u32,
    attempts: u32,
    fatal_at: Option<u32>,
}

#[workflow]
async fn flaky(ctx: &Ctx, plan: Plan) -> Result<u32, RetryError<Flake>> {
    checkpoint!("before");
    // Not data: re-created on resume rather than saved.
    #[transient]
    let policy = RetryPolicy::exponential(Duration::from_secs(10))
        .max_attempts(plan.attempts)
        .retry_if(|e: &Flake| matches!(e, Flake::Busy(_)));
    let got = ctx
        .retry("call", policy, || {
            let r = ctx
                .resource::<Service>()
                .call(ctx.idempotency_key(), plan.fail, plan.fatal_at);
            async move { r }
        })
        .await;
    got
}

#[workflow]
async fn slow(ctx: &Ctx, attempts: u32) -> Result<u32, RetryError<Flake>> {
    let got = ctx
        .retry(
            "slow",
            RetryPolicy::fixed(Duration::from_secs(5))
                .max_attempts(attempts)
                .attempt_timeout(Duration::from_millis(30)),
            || {
                ctx.resource::<Service>()
                    .keys
                    .lock()
                    .unwrap()
                    .push(ctx.idempotency_key());
                // Never answers: only the attempt timeout ends it.
                async {
                    std::future::pending::<()>().await;
                    Ok::<u32, Flake>(1)
                }
            },
        )
        .await;
    got
}

/// A retry in each arm of a branch, in a loop: every retry fails once.
#[workflow]
async fn looped(ctx: &Ctx, n: u32) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for i in 0..n {
        if i % 2 == 0 {
            let v = ctx
                .retry("even", RetryPolicy::fixed(Duration::from_secs(1)), || {
                    let r = ctx.resource::<Service>().flip(ctx.idempotency_key());
                    async move { r }
                })
                .await;
            out.push(v.unwrap_or(0));
        } else {
            match i % 3 {
                0 => out.push(0),
                _ => {
                    let v = ctx
                        .retry("odd", RetryPolicy::fixed(Duration::from_secs(2)), || {
                            let r = ctx.resource::<Service>().flip(ctx.idempotency_key());
                            async move { r }
                        })
                        .await;
                    out.push(v.unwrap_or(0) + 100);
                }
            }
        }
    }
    out
}

#[workflow]
async fn parent(ctx: &Ctx, plan: Plan) -> u32 {
    let kid = ctx.spawn(flaky, "kid", plan).await;
    let out = ctx.join(kid).await;
    match out {
        Ok(Ok(n)) => n,
        _ => 0,
    }
}

/// Fails the test instead of hanging.
/// Retries a call that is always busy, an hour apart; records how the
/// retry ended as a last entry in the service's log.
#[workflow]
async fn patient(ctx: &Ctx, attempts: u32) -> u32 {
    let got = ctx
        .retry(
            "call",
            RetryPolicy::fixed(Duration::from_secs(3600)).max_attempts(attempts),
            || {
                let r = ctx
                    .resource::<Service>()
                    .call(ctx.idempotency_key(), u32::MAX, None);
                async move { r }
            },
        )
        .await;
    let end = match &got {
        Ok(n) => format!("end: {n}"),
        Err(e) => format!("end: {e}"),
    };
    ctx.resource::<Service>().keys.lock().unwrap().push(end);
    got.map_or(0, |n| n)
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("the runtime did not get there")
}

async fn runtime(url: &str, clock: &TestClock, service: &Service) -> Runtime {
    let rt = Runtime::builder()
        .clock(clock.clone())
        .resource(service.clone())
        .open(url)
        .await
        .expect("the store opens");
    rt.register(flaky);
    rt.register(slow);
    rt.register(looped);
    rt.register(parent);
    rt.register(patient);
    rt
}

fn plan(fail: u32, attempts: u32, fatal_at: Option<u32>) -> Plan {
    Plan {
        fail,
        attempts,
        fatal_at,
    }
}

/// The `RetryAttemptFailed` events of a run: (name, attempt, error, backoff).
async fn attempts(rt: &Runtime, id: &str) -> Vec<(String, u32, String, Option<u64>)> {
    rt.history(id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e {
            Event::RetryAttemptFailed {
                name,
                attempt,
                error,
                retry_in_ms,
            } => Some((name, attempt, error, retry_in_ms)),
            _ => None,
        })
        .collect()
}

fn failed(
    name: &str,
    attempt: u32,
    error: &str,
    ms: Option<u64>,
) -> (String, u32, String, Option<u64>) {
    (name.to_owned(), attempt, error.to_owned(), ms)
}

/// Two busy attempts, then an answer: the value of the third call, after
/// backoffs of 10 s and 20 s on the virtual clock; each attempt had its own
/// idempotency key; the history names both failures.
async fn success_after_failures(url: &str) {
    let (clock, service) = (TestClock::new(), Service::default());
    let start = clock.now();
    let rt = runtime(url, &clock, &service).await;
    let h = rt.start(flaky, "ok", plan(2, 5, None)).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), Ok(3));
    assert_eq!(clock.now(), start + Duration::from_secs(30));
    // Checkpoint 1 is "before"; each attempt starts after its own.
    assert_eq!(service.keys(), ["ok:1:0", "ok:2:0", "ok:3:0"]);
    assert_eq!(
        attempts(&rt, "ok").await,
        [
            failed("call", 1, "busy (call 1)", Some(10_000)),
            failed("call", 2, "busy (call 2)", Some(20_000)),
        ]
    );
}

/// Every attempt busy: `Exhausted` with the last error, after exactly the
/// policy's attempts; the last one has no backoff.
async fn exhausted(url: &str) {
    let (clock, service) = (TestClock::new(), Service::default());
    let start = clock.now();
    let rt = runtime(url, &clock, &service).await;
    let h = rt.start(flaky, "ex", plan(100, 3, None)).await.unwrap();
    assert_eq!(
        within(h.result()).await.unwrap(),
        Err(RetryError::Exhausted {
            attempts: 3,
            last: Flake::Busy(3)
        })
    );
    assert_eq!(service.keys().len(), 3);
    assert_eq!(clock.now(), start + Duration::from_secs(30));
    assert_eq!(
        attempts(&rt, "ex").await,
        [
            failed("call", 1, "busy (call 1)", Some(10_000)),
            failed("call", 2, "busy (call 2)", Some(20_000)),
            failed("call", 3, "busy (call 3)", None),
        ]
    );
}

/// An error `retry_if` refuses ends the retry at once.
async fn not_retryable(url: &str) {
    let (clock, service) = (TestClock::new(), Service::default());
    let rt = runtime(url, &clock, &service).await;
    let h = rt.start(flaky, "nr", plan(100, 5, Some(2))).await.unwrap();
    assert_eq!(
        within(h.result()).await.unwrap(),
        Err(RetryError::NotRetryable {
            attempt: 2,
            error: Flake::Fatal
        })
    );
    assert_eq!(service.keys().len(), 2);
    assert_eq!(
        attempts(&rt, "nr").await,
        [
            failed("call", 1, "busy (call 1)", Some(10_000)),
            failed("call", 2, "fatal", None),
        ]
    );
}

/// Attempts slower than the attempt timeout: `TimedOut` once they are
/// used up. The timeout is on the runtime's clock: real time spent in an
/// attempt does not end it, `TestClock::advance` past it does.
async fn timed_out(url: &str) {
    let (clock, service) = (TestClock::manual(), Service::default());
    let start = clock.now();
    let rt = runtime(url, &clock, &service).await;
    let h = rt.start(slow, "slow", 2).await.unwrap();
    let attempt_began = |n: usize| {
        let service = service.clone();
        within(async move {
            while service.keys().len() < n {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    attempt_began(1).await;
    // More real time than the timeout passes: the attempt goes on.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(h.status().await.unwrap(), Status::Running);
    assert!(attempts(&rt, "slow").await.is_empty());
    // The clock passes it: attempt 1 timed out, the run sleeps its backoff.
    clock.advance(Duration::from_millis(30));
    let backoff_until = start + Duration::from_millis(30) + Duration::from_secs(5);
    within(async {
        while h.status().await.unwrap()
            != (Status::Sleeping {
                until: backoff_until,
            })
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    clock.advance(Duration::from_secs(5));
    attempt_began(2).await;
    clock.advance(Duration::from_millis(30));
    assert_eq!(
        within(h.result()).await.unwrap(),
        Err(RetryError::TimedOut { attempts: 2 })
    );
    assert_eq!(service.keys().len(), 2);
    assert_eq!(
        attempts(&rt, "slow").await,
        [
            failed("slow", 1, "timed out", Some(5_000)),
            failed("slow", 2, "timed out", None),
        ]
    );
}

/// On a manual clock the backoff is a durable sleep: the run is
/// `Sleeping` until the attempt's delay passed, and only `advance` wakes it.
async fn the_backoff_sleeps_on_the_runtime_clock(url: &str) {
    let (clock, service) = (TestClock::manual(), Service::default());
    let start = clock.now();
    let rt = runtime(url, &clock, &service).await;
    let h = rt.start(flaky, "nap", plan(1, 3, None)).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(
        h.status().await.unwrap(),
        Status::Sleeping {
            until: start + Duration::from_secs(10)
        }
    );
    assert_eq!(service.keys().len(), 1);
    clock.advance(Duration::from_secs(9));
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(service.keys().len(), 1, "woken before its backoff was due");
    clock.advance(Duration::from_secs(1));
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), Ok(2));
    assert_eq!(service.keys(), ["nap:1:0", "nap:2:0"]);
}

/// In a loop, in both arms of an `if` and in a `match` arm: each retry
/// fails once and answers the second time.
async fn in_a_loop_and_a_branch(url: &str) {
    let (clock, service) = (TestClock::new(), Service::default());
    let start = clock.now();
    let rt = runtime(url, &clock, &service).await;
    let h = rt.start(looped, "loop", 4).await.unwrap();
    // i = 0: calls 1, 2; i = 1: calls 3, 4 (+100); i = 2: calls 5, 6;
    // i = 3: 3 % 3 == 0, no retry.
    assert_eq!(within(h.result()).await.unwrap(), [2, 104, 6, 0]);
    assert_eq!(service.keys().len(), 6);
    assert_eq!(clock.now(), start + Duration::from_secs(1 + 2 + 1));
    let names: Vec<(String, u32)> = attempts(&rt, "loop")
        .await
        .into_iter()
        .map(|(n, a, _, _)| (n, a))
        .collect();
    assert_eq!(
        names,
        [("even".into(), 1), ("odd".into(), 1), ("even".into(), 1)]
    );
}

/// A child run retries; its parent joins it.
async fn in_a_child_run(url: &str) {
    let (clock, service) = (TestClock::new(), Service::default());
    let rt = runtime(url, &clock, &service).await;
    let h = rt.start(parent, "parent", plan(2, 3, None)).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), 3);
    assert_eq!(attempts(&rt, "parent/kid").await.len(), 2);
    assert_eq!(rt.status("parent/kid").await.unwrap(), Status::Completed);
}

/// A cancel request during a backoff ends the retry at once with
/// `RetryError::Cancelled`, no further attempt made, and the body goes on
/// (to clean up); the run then ends cancelled.
async fn a_cancel_request_ends_the_backoff(url: &str) {
    let (clock, service) = (TestClock::new(), Service::default());
    let rt = runtime(url, &clock, &service).await;
    rt.start(patient, "p", 5).await.unwrap();
    // Attempt 1 failed: the run sleeps an hour of the test clock, which
    // nobody moves.
    within(async {
        while !matches!(rt.status("p").await.unwrap(), Status::Sleeping { .. }) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    rt.request_cancel("p", "customer left", Duration::from_secs(60))
        .await
        .unwrap();
    within(async {
        while rt.status("p").await.unwrap() != Status::Cancelled {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let keys = service.keys();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(
        keys[1],
        "end: stopped after 1 attempts: cancel requested (customer left)"
    );
    assert_eq!(attempts(&rt, "p").await.len(), 1);
}

on_stores!(
    "retry",
    [memory, sqlite, postgres]:
    success_after_failures,
    exhausted,
    not_retryable,
    timed_out,
    the_backoff_sleeps_on_the_runtime_clock,
    in_a_loop_and_a_branch,
    in_a_child_run,
    a_cancel_request_ends_the_backoff,
);

/// The crash harness, on virtual time, crashes after (and before) every
/// checkpoint: the output is the same at each, and no attempt whose
/// outcome was stored ran again (each attempt records its key as an
/// effect: a stored attempt run again would be a duplicated effect).
#[tokio::test]
async fn the_crash_harness_never_runs_a_stored_attempt_again() {
    let report = within(
        Harness::new(keyed)
            .input(3)
            .virtual_time()
            .also_crash_before_checkpoints()
            .run(),
    )
    .await
    .unwrap();
    assert_eq!(report.output, serde_json::json!([3, 2]));
    // "start", 3 attempts' checkpoints, "between", 2 attempts' checkpoints.
    assert_eq!(report.checkpoints, 7);
    assert_eq!(
        report.effects,
        [
            "attempt harness-run:1:0",
            "attempt harness-run:2:0",
            "attempt harness-run:3:0",
            "attempt harness-run:5:0",
            "attempt harness-run:6:0"
        ]
    );
    for point in &report.crash_points {
        if point.mode == checkpoint_runtime::testing::CrashMode::AfterCheckpoint {
            assert!(point.duplicated.is_empty(), "{point:?}");
        }
        assert!(point.missing.is_empty(), "{point:?}");
    }
}

/// Fails while the key's checkpoint number is below `ok_from`: the same
/// answer whenever the same attempt runs again.
#[workflow]
async fn keyed(ctx: &Ctx, ok_from: u64) -> Vec<u32> {
    checkpoint!("start");
    let first = ctx
        .retry(
            "first",
            RetryPolicy::exponential(Duration::from_secs(1)),
            || {
                let key = ctx.idempotency_key();
                ctx.resource::<SideEffects>()
                    .record(format!("attempt {key}"));
                let seq: u64 = key.split(':').nth(1).unwrap().parse().unwrap();
                let r = if seq < ok_from {
                    Err(Flake::Busy(seq as u32))
                } else {
                    Ok(seq as u32)
                };
                async move { r }
            },
        )
        .await;
    checkpoint!("between");
    let second = ctx
        .retry("second", RetryPolicy::fixed(Duration::from_secs(1)), || {
            let key = ctx.idempotency_key();
            ctx.resource::<SideEffects>()
                .record(format!("attempt {key}"));
            let r: Result<u32, Flake> = if key.ends_with(":5:0") {
                Err(Flake::Busy(5))
            } else {
                Ok(2)
            };
            async move { r }
        })
        .await;
    vec![first.unwrap_or(0), second.unwrap_or(0)]
}
