//! Schedules on every store: a tick becomes one run across two runtimes
//! over one store, missed ticks follow the catch-up policy, ticks while the
//! previous run is unfinished follow the overlap policy, a paused schedule
//! fires nothing, a restarted runtime does not fire a handled tick again,
//! and the background loop fires ticks with no call. Time is a manual
//! `TestClock` shared by the runtimes. Each runtime's background loop fires
//! ticks too (it wakes when the clock reaches one), so the tests call
//! `run_schedules` to be sure what is due was handled and assert on the
//! runs and records the store holds, never on which firer started a run
//! nor on wall time.

#[macro_use]
mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use checkpoint_runtime::prelude::*;

const MINUTE: Duration = Duration::from_secs(60);

#[workflow]
async fn report(ctx: &Ctx, at: u64) -> u64 {
    checkpoint!("made");
    at
}

/// Waits for an approval: its run stays unfinished until signalled.
#[workflow]
async fn gated(ctx: &Ctx, at: u64) -> u64 {
    let ok: bool = ctx.wait_for("go").await;
    if ok {
        at
    } else {
        0
    }
}

fn secs(t: Tick) -> u64 {
    t.at().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// A manual clock at the start of an hour (ticks land on round times).
fn clock() -> TestClock {
    let clock = TestClock::manual();
    let into_hour = clock.now().duration_since(UNIX_EPOCH).unwrap().as_nanos() % 3_600_000_000_000;
    clock.advance(Duration::from_secs(3600) - Duration::from_nanos(into_hour as u64));
    clock
}

/// Fires what is due on each runtime (the background loops may have too).
async fn handle_due(rts: &[&Runtime]) {
    for rt in rts {
        rt.run_schedules().await.unwrap();
    }
}

async fn open(url: &str, clock: &TestClock, other: Option<&Runtime>) -> Runtime {
    let builder = Runtime::builder().clock(clock.clone());
    match (url, other) {
        (":memory:", Some(rt)) => builder.store(rt.store()).in_memory(),
        (":memory:", None) => builder.in_memory(),
        _ => builder.open(url).await.expect("opens"),
    }
}

async fn run_ids(rt: &Runtime) -> Vec<String> {
    let mut ids: Vec<String> = rt
        .runs(RunFilter::new())
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    ids.sort();
    ids
}

fn tick_id(name: &str, t: SystemTime) -> String {
    Schedule::cron(name, "* * * * *").unwrap().tick(t).run_id()
}

async fn two_runtimes_start_one_run_per_tick(url: &str) {
    let clock = clock();
    let start = clock.now();
    let a = open(url, &clock, None).await;
    let b = open(url, &clock, Some(&a)).await;
    let every5 = || {
        Schedule::cron("every5", "*/5 * * * *")
            .unwrap()
            .catch_up(CatchUp::All { max: 10 })
            // The runs may not have ended by the next tick.
            .overlap(Overlap::Allow)
    };
    a.schedule(every5(), report, secs).await.unwrap();
    b.schedule(every5(), report, secs).await.unwrap();
    // Nothing is due at the moment the schedule was stored.
    handle_due(&[&a, &b]).await;
    assert!(run_ids(&a).await.is_empty());

    // Four firers at once (two calls, two background loops) per tick.
    for k in 1..=3u32 {
        clock.advance(5 * MINUTE);
        let (x, y) = tokio::join!(a.run_schedules(), b.run_schedules());
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(
            x.len() + y.len() <= 1,
            "one run per tick between them: {x:?} {y:?}"
        );
        let want: Vec<String> = (1..=k)
            .map(|k| tick_id("every5", start + 5 * MINUTE * k))
            .collect();
        assert_eq!(run_ids(&a).await, want);
    }
    let want: Vec<String> = (1..=3)
        .map(|k| tick_id("every5", start + 5 * MINUTE * k))
        .collect();
    a.run_until_idle().await.unwrap();
    let first = a.handle(report, &want[0]).result().await.unwrap();
    assert_eq!(first, secs_of(start + 5 * MINUTE));
    let listed = a.schedules().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].last_run.as_deref(), Some(want[2].as_str()));
    assert_eq!(listed[0].next_tick, Some(start + 20 * MINUTE));
}

fn secs_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs()
}

async fn missed_ticks_follow_the_catch_up_policy(url: &str) {
    let clock = clock();
    let start = clock.now();
    let rt = open(url, &clock, None).await;
    let hourly = |name: &str, c: CatchUp| {
        Schedule::cron(name, "0 * * * *")
            .unwrap()
            .catch_up(c)
            .overlap(Overlap::Allow)
    };
    rt.schedule(hourly("latest", CatchUp::Latest), report, secs)
        .await
        .unwrap();
    rt.schedule(hourly("all", CatchUp::All { max: 3 }), report, secs)
        .await
        .unwrap();
    rt.schedule(hourly("none", CatchUp::None), report, secs)
        .await
        .unwrap();
    // Five hours and ten minutes pass with no worker.
    clock.advance(5 * 60 * MINUTE + 10 * MINUTE);
    handle_due(&[&rt]).await;
    let started = run_ids(&rt).await;
    let hour = |k: u32| start + 60 * MINUTE * k;
    let mut want = vec![
        tick_id("all", hour(3)),
        tick_id("all", hour(4)),
        tick_id("all", hour(5)),
        tick_id("latest", hour(5)),
    ];
    want.sort();
    assert_eq!(started, want, "`none` fires no tick ten minutes late");
    // Every schedule handled the ticks up to the fifth hour.
    for s in rt.schedules().await.unwrap() {
        assert_eq!(s.last_tick, Some(hour(5)), "{}", s.name);
    }
    // The next tick, seen in time, fires on every policy.
    clock.advance(50 * MINUTE + Duration::from_secs(10));
    handle_due(&[&rt]).await;
    assert_eq!(run_ids(&rt).await.len(), 4 + 3);
}

async fn overlapping_ticks_follow_the_overlap_policy(url: &str) {
    let clock = clock();
    let start = clock.now();
    let rt = open(url, &clock, None).await;
    let every = |name: &str, o: Overlap| Schedule::cron(name, "*/10 * * * *").unwrap().overlap(o);
    rt.schedule(every("skip", Overlap::Skip), gated, secs)
        .await
        .unwrap();
    rt.schedule(every("queue", Overlap::Queue), gated, secs)
        .await
        .unwrap();
    clock.advance(10 * MINUTE);
    handle_due(&[&rt]).await;
    assert_eq!(run_ids(&rt).await.len(), 2);
    rt.run_until_idle().await.unwrap();
    // The first runs wait: the next tick skips, or waits in the queue.
    clock.advance(10 * MINUTE);
    handle_due(&[&rt]).await;
    assert_eq!(run_ids(&rt).await.len(), 2);
    let skip = rt
        .schedules()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "skip")
        .unwrap();
    assert_eq!(
        skip.last_tick,
        Some(start + 20 * MINUTE),
        "skipped, handled"
    );
    let queue = rt
        .schedules()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "queue")
        .unwrap();
    assert_eq!(queue.last_tick, Some(start + 10 * MINUTE), "waiting");
    // The first queued run ends: the waiting tick starts, late, as itself.
    rt.signal(&tick_id("queue", start + 10 * MINUTE), "go", &true)
        .await
        .unwrap();
    rt.run_until_idle().await.unwrap();
    assert_eq!(
        rt.run_schedules().await.unwrap(),
        vec![tick_id("queue", start + 20 * MINUTE)]
    );
}

async fn a_paused_schedule_fires_nothing_until_unpaused(url: &str) {
    let clock = clock();
    let rt = open(url, &clock, None).await;
    rt.schedule(Schedule::cron("p", "*/5 * * * *").unwrap(), report, secs)
        .await
        .unwrap();
    rt.pause_schedule("p").await.unwrap();
    clock.advance(15 * MINUTE);
    handle_due(&[&rt]).await;
    assert!(run_ids(&rt).await.is_empty());
    rt.unpause_schedule("p").await.unwrap();
    // The ticks missed while paused: the latest one (the default).
    handle_due(&[&rt]).await;
    assert_eq!(run_ids(&rt).await.len(), 1);
    assert!(matches!(
        rt.pause_schedule("nope").await,
        Err(Error::UnknownSchedule { stored: false, .. })
    ));
    rt.delete_schedule("p").await.unwrap();
    clock.advance(15 * MINUTE);
    handle_due(&[&rt]).await;
    assert_eq!(run_ids(&rt).await.len(), 1);
    assert!(rt.schedules().await.unwrap().is_empty());
}

async fn a_restarted_runtime_does_not_fire_a_handled_tick_again(url: &str) {
    if url == ":memory:" {
        return; // nothing outlives the process
    }
    let clock = clock();
    let first = open(url, &clock, None).await;
    let hourly = || Schedule::cron("h", "0 * * * *").unwrap();
    first.schedule(hourly(), report, secs).await.unwrap();
    clock.advance(61 * MINUTE);
    handle_due(&[&first]).await;
    assert_eq!(run_ids(&first).await.len(), 1);
    // Its run ends (the next tick's default overlap policy skips otherwise).
    first.run_until_idle().await.unwrap();
    first.close().await;
    drop(first);

    let second = open(url, &clock, None).await;
    second.schedule(hourly(), report, secs).await.unwrap();
    handle_due(&[&second]).await;
    assert_eq!(
        run_ids(&second).await.len(),
        1,
        "the handled tick is not fired again"
    );
    clock.advance(60 * MINUTE);
    handle_due(&[&second]).await;
    assert_eq!(run_ids(&second).await.len(), 2);
}

async fn the_background_loop_fires_ticks(url: &str) {
    let clock = clock();
    let start = clock.now();
    let rt = open(url, &clock, None).await;
    rt.schedule(Schedule::cron("bg", "*/5 * * * *").unwrap(), report, secs)
        .await
        .unwrap();
    clock.advance(5 * MINUTE);
    let id = tick_id("bg", start + 5 * MINUTE);
    let out = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Ok(out) = rt.handle(report, &id).result().await {
                return out;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the loop fires the tick and the run completes");
    assert_eq!(out, secs_of(start + 5 * MINUTE));
}

const SCHEDULE_WORKER: &str = env!("CARGO_BIN_EXE_checkpoint-schedule-worker");

/// Two worker processes fire one every-second schedule on one store; one
/// is SIGKILLed midway. Every second from the first tick to the last has
/// its run, each once (the run id is the tick), whichever process fired it.
async fn two_processes_fire_every_tick_of_one_schedule(url: &str) {
    use common::worker::WorkerProc;
    if url == ":memory:" {
        return; // no store is shared between processes
    }
    let dir = common::TempDir::new("schedule-workers");
    let spawn = |name: &str| {
        WorkerProc::spawn(
            SCHEDULE_WORKER,
            name,
            dir.0.join(format!("{name}.stderr")),
            ["--db", url, "--seconds", "5"],
        )
    };
    let mut a = spawn("a");
    a.expect_line("READY", Duration::from_secs(20));
    let mut b = spawn("b");
    b.expect_line("READY", Duration::from_secs(20));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    a.signal("-KILL");
    b.expect_line("DONE", Duration::from_secs(30));

    let rt = Runtime::builder().client_only().open(url).await.unwrap();
    let mut seconds: Vec<u64> = run_ids(&rt)
        .await
        .iter()
        .map(|id| {
            let at = id.strip_prefix("tick@").expect("a tick's run");
            let ts: jiff::Timestamp = at.parse().expect("an RFC 3339 time");
            ts.as_second() as u64
        })
        .collect();
    seconds.sort();
    assert!(seconds.len() >= 4, "ticks fired: {seconds:?}");
    let contiguous: Vec<u64> = (seconds[0]..=seconds[seconds.len() - 1]).collect();
    assert_eq!(seconds, contiguous, "no tick lost, none twice");
}

on_stores!(
    "schedules",
    [memory, sqlite, postgres]:
    two_runtimes_start_one_run_per_tick,
    missed_ticks_follow_the_catch_up_policy,
    overlapping_ticks_follow_the_overlap_policy,
    a_paused_schedule_fires_nothing_until_unpaused,
    a_restarted_runtime_does_not_fire_a_handled_tick_again,
    the_background_loop_fires_ticks,
    two_processes_fire_every_tick_of_one_schedule,
);
