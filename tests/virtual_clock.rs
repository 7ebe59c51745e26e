//! The virtual clock (`TestClock`) on every store: durable sleeps and
//! `wait_for_timeout` deadlines of 30 days complete at once, several runs'
//! timers fire in deadline order, `advance` fires exactly the timers due by
//! then, and a signal sent before the deadline wins over it; the grace
//! period of a cancel request to a run that executes without suspending
//! ends on the clock too, whether the request was made on the runtime
//! executing it or reached it with a lease renewal. Every assertion is on
//! outcomes and on the clock's reading, never on wall time (the `within`
//! guard only turns a hang into a failure).

#[macro_use]
mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::Harness;

const DAY: Duration = Duration::from_secs(86_400);

/// What the timers' runs saw when they woke: (their days, the clock's
/// reading since the test's start), in the order they woke.
#[derive(Clone)]
struct Fired {
    clock: TestClock,
    start: SystemTime,
    log: Arc<Mutex<Vec<(u64, Duration)>>>,
}

impl Fired {
    fn new(clock: &TestClock) -> Fired {
        Fired {
            clock: clock.clone(),
            start: clock.now(),
            log: Arc::default(),
        }
    }

    fn record(&self, days: u64) {
        let since = self.clock.now().duration_since(self.start).unwrap();
        self.log.lock().unwrap().push((days, since));
    }

    fn all(&self) -> Vec<(u64, Duration)> {
        self.log.lock().unwrap().clone()
    }
}

#[workflow]
async fn nap(ctx: &Ctx, days: u64) -> u64 {
    checkpoint!("before");
    ctx.sleep(DAY * days as u32).await;
    if let Some(fired) = ctx.try_resource::<Fired>() {
        fired.record(days);
    }
    days
}

#[workflow]
async fn approval(ctx: &Ctx, days: u64) -> Option<bool> {
    checkpoint!("requested");
    let answer: Option<bool> = ctx.wait_for_timeout("approved", DAY * days as u32).await;
    answer
}

#[workflow]
async fn parent(ctx: &Ctx, days: u64) -> u64 {
    let kid = ctx.spawn(nap, "kid", days).await;
    let outs = ctx.join_all(vec![kid]).await;
    outs.into_iter().map(|o| o.unwrap_or(0)).sum()
}

/// How many laps of [`busy`] saw a cancel request.
#[derive(Clone, Default)]
struct Seen(Arc<AtomicU32>);

impl Seen {
    fn laps(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }
}

/// Laps without ever suspending (a pause in real time and a checkpoint
/// each); it counts the laps that saw a cancel request, and goes on: only
/// the request's grace period stops it.
#[workflow]
async fn busy(ctx: &Ctx) -> u32 {
    let mut laps = 0u32;
    while laps < 1_000_000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if ctx.cancel_requested().is_some() {
            if let Some(seen) = ctx.try_resource::<Seen>() {
                seen.0.fetch_add(1, Ordering::AcqRel);
            }
        }
        laps += 1;
        checkpoint!("lap");
    }
    laps
}

/// Fails the test instead of hanging when the clock does not move.
async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("the runtime did not get there (did the virtual clock not move?)")
}

async fn runtime(url: &str, clock: &TestClock, fired: Option<&Fired>) -> Runtime {
    let mut builder = Runtime::builder().clock(clock.clone());
    if let Some(fired) = fired {
        builder = builder.resource(fired.clone());
    }
    let rt = builder.open(url).await.expect("the store opens");
    rt.register(nap);
    rt.register(approval);
    rt.register(parent);
    rt
}

/// A runtime on `clock` executing [`busy`] runs with leases renewed every
/// 300 ms (a request made elsewhere reaches them that soon; a lease long
/// enough not to lapse on a loaded machine), counting in `seen` the laps
/// that saw a cancel request.
async fn busy_runtime(url: &str, clock: &TestClock, seen: &Seen) -> Runtime {
    let rt = Runtime::builder()
        .clock(clock.clone())
        .lease_ttl(Duration::from_millis(900))
        .resource(seen.clone())
        .open(url)
        .await
        .expect("the store opens");
    rt.register(busy);
    rt
}

/// Waits (real time, bounded) until `seen` counts `laps` laps.
async fn until_seen(seen: &Seen, laps: u32) {
    within(async {
        while seen.laps() < laps {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// Waits until run `id` is cancelled.
async fn until_cancelled(rt: &Runtime, id: &str) {
    within(async {
        while rt.status(id).await.unwrap() != Status::Cancelled {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// A run that executes without suspending and ignores a cancel request
/// made on its runtime is cancelled hard when its grace period ends on the
/// clock: not after that much real time, but when `advance` gets there.
async fn a_busy_runs_grace_period_ends_on_the_clock(url: &str) {
    let clock = TestClock::manual();
    let seen = Seen::default();
    let rt = busy_runtime(url, &clock, &seen).await;
    rt.start(busy, "busy", ()).await.unwrap();
    within(async {
        while rt.status("busy").await.unwrap() != Status::Running {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    rt.request_cancel("busy", "enough", Duration::from_millis(50))
        .await
        .unwrap();
    // The body sees the request and goes on, lap after lap, well past 50
    // ms of real time: the clock has not moved.
    until_seen(&seen, 40).await;
    assert_eq!(rt.status("busy").await.unwrap(), Status::Running);
    clock.advance(Duration::from_millis(50));
    until_cancelled(&rt, "busy").await;
    let history = rt.history("busy").await.unwrap();
    assert_eq!(history.last(), Some(&Event::Cancelled), "{history:?}");
    assert!(!history.contains(&Event::Completed), "{history:?}");
}

/// The same with the request made by another runtime on the store (a
/// client on the same clock): the executing runtime learns of it with a
/// lease renewal, its body sees it without suspending, and the grace
/// period ends when the clock passes it.
async fn a_request_from_another_runtime_reaches_a_busy_run_and_its_grace_ends_on_the_clock(
    url: &str,
) {
    let clock = TestClock::manual();
    let seen = Seen::default();
    let rt = busy_runtime(url, &clock, &seen).await;
    let client = Runtime::builder()
        .clock(clock.clone())
        .client_only()
        .open(url)
        .await
        .expect("the store opens");
    rt.start(busy, "busy", ()).await.unwrap();
    within(async {
        while rt.status("busy").await.unwrap() != Status::Running {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    client
        .request_cancel("busy", "from elsewhere", DAY)
        .await
        .unwrap();
    until_seen(&seen, 40).await;
    assert_eq!(rt.status("busy").await.unwrap(), Status::Running);
    let history = rt.history("busy").await.unwrap();
    assert!(
        !history.iter().any(|e| matches!(e, Event::Suspended { .. })),
        "seen without suspending: {history:?}"
    );
    clock.advance(DAY);
    until_cancelled(&rt, "busy").await;
    let history = rt.history("busy").await.unwrap();
    assert_eq!(history.last(), Some(&Event::Cancelled), "{history:?}");
}

/// A 30-day sleep completes at once, and the clock reads 30 days later.
async fn a_30_day_sleep_completes_at_once(url: &str) {
    let clock = TestClock::new();
    let start = clock.now();
    let rt = runtime(url, &clock, None).await;
    let h = rt.start(nap, "nap-30", 30).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Completed);
    assert_eq!(within(h.result()).await.unwrap(), 30);
    assert_eq!(clock.now(), start + DAY * 30);
}

/// A 30-day `wait_for_timeout` nobody answers times out at once; a
/// handle's `result()` alone is enough to let time skip.
async fn a_30_day_timeout_fires_at_once(url: &str) {
    let clock = TestClock::new();
    let start = clock.now();
    let rt = runtime(url, &clock, None).await;
    let h = rt.start(approval, "approval-30", 30).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), None);
    assert_eq!(clock.now(), start + DAY * 30);
    let history = rt.history("approval-30").await.unwrap();
    assert!(!history
        .iter()
        .any(|e| matches!(e, Event::SignalReceived { .. })));
}

/// A signal sent before the test waits on the runtime is delivered before
/// any deadline passes: no timeout, and no time went by.
async fn a_signal_before_the_deadline_wins(url: &str) {
    let clock = TestClock::new();
    let start = clock.now();
    let rt = runtime(url, &clock, None).await;
    let h = rt.start(approval, "approval-ok", 30).await.unwrap();
    rt.signal("approval-ok", "approved", &true).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), Some(true));
    assert_eq!(clock.now(), start);
}

/// Runs started in any order wake in the order of their deadlines, each
/// when the clock reads its own deadline.
async fn timers_fire_in_deadline_order(url: &str) {
    let clock = TestClock::new();
    let fired = Fired::new(&clock);
    let rt = runtime(url, &clock, Some(&fired)).await;
    for days in [3, 1, 30, 2] {
        rt.start(nap, &format!("nap-{days}"), days).await.unwrap();
    }
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(
        fired.all(),
        vec![(1, DAY), (2, DAY * 2), (3, DAY * 3), (30, DAY * 30)]
    );
    assert_eq!(clock.now(), fired.start + DAY * 30);
}

/// On a manual clock nothing fires by itself; `advance` fires exactly the
/// timers due by the new time, and later ones only once it gets there.
async fn advance_fires_only_the_timers_due(url: &str) {
    let clock = TestClock::manual();
    let fired = Fired::new(&clock);
    let rt = runtime(url, &clock, Some(&fired)).await;
    for days in [1, 2, 3] {
        rt.start(nap, &format!("nap-{days}"), days).await.unwrap();
    }
    let h = rt.start(approval, "approval-late", 5).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(fired.all(), vec![]);
    assert_eq!(clock.now(), fired.start);

    // Both due by day 2 wake on day 2 (together: in any order).
    clock.advance(DAY * 2);
    within(rt.run_until_idle()).await.unwrap();
    let mut woke = fired.all();
    woke.sort();
    assert_eq!(woke, vec![(1, DAY * 2), (2, DAY * 2)]);
    assert!(matches!(
        rt.status("nap-3").await.unwrap(),
        Status::Sleeping { .. }
    ));
    assert!(matches!(h.status().await.unwrap(), Status::Waiting { .. }));

    // Day 4: the last nap wakes; the approval, due on day 5, is answered
    // in time.
    clock.advance(DAY * 2);
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(fired.all()[2..], [(3, DAY * 4)]);
    rt.signal("approval-late", "approved", &false)
        .await
        .unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), Some(false));
    assert_eq!(clock.now(), fired.start + DAY * 4);
}

/// A child's 30-day sleep skips while its parent joins it.
async fn a_childs_timer_skips_while_its_parent_joins(url: &str) {
    let clock = TestClock::new();
    let start = clock.now();
    let rt = runtime(url, &clock, None).await;
    let h = rt.start(parent, "parent", 30).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), 30);
    assert_eq!(clock.now(), start + DAY * 30);
}

on_stores!(
    "clock",
    [memory, sqlite, postgres]:
    a_30_day_sleep_completes_at_once,
    a_30_day_timeout_fires_at_once,
    a_signal_before_the_deadline_wins,
    timers_fire_in_deadline_order,
    advance_fires_only_the_timers_due,
    a_childs_timer_skips_while_its_parent_joins,
    a_busy_runs_grace_period_ends_on_the_clock,
);

// Two runtimes share the store: not the in-memory one, which is each
// runtime's own.
mod shared {
    use super::*;

    on_stores!(
        "clock",
        [sqlite, postgres]:
        a_request_from_another_runtime_reaches_a_busy_run_and_its_grace_ends_on_the_clock,
    );
}

/// The crash harness on virtual time: a 30-day timeout, crashed at every
/// checkpoint, times out at each one; answered, the signal wins at each.
#[tokio::test]
async fn the_crash_harness_runs_a_30_day_timeout_on_virtual_time() {
    let report = within(Harness::new(approval).input(30).virtual_time().run())
        .await
        .unwrap();
    assert_eq!(report.output, serde_json::Value::Null);
    assert_eq!(report.checkpoints, 2);
    assert_eq!(report.crash_points.len(), 2);
    let out = within(
        Harness::new(approval)
            .input(30)
            .signal("approved", &true)
            .virtual_time()
            .assert_exact(),
    )
    .await;
    assert_eq!(out, Some(true));
    let out = within(Harness::new(nap).input(30).virtual_time().assert_exact()).await;
    assert_eq!(out, 30);
    // A child's timer, while the parent joins it.
    let out = within(
        Harness::new(parent)
            .register(nap)
            .input(30)
            .virtual_time()
            .assert_exact(),
    )
    .await;
    assert_eq!(out, 30);
}
