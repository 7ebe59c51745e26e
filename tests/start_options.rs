//! Start options (`rt.start_with`, `ctx.spawn_with`): tags searchable with
//! `RunFilter::tag` and shown in `RunInfo`, a queue and a priority kept
//! with the run, a start time on the runtime's clock before which the run
//! does not execute. On every store (PostgreSQL with
//! `CHECKPOINT_TEST_POSTGRES_URL`; ignored without it).

use std::time::Duration;

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::SideEffects;

#[macro_use]
mod common;

#[workflow]
async fn job(ctx: &Ctx, n: u64) -> u64 {
    ctx.resource::<SideEffects>().record(format!("job {n}"));
    checkpoint!("done");
    n * 10
}

/// Spawns `n` children, each tagged, the last one starting an hour later.
#[workflow]
async fn fan(ctx: &Ctx, n: u64) -> u64 {
    let mut children = Vec::new();
    for i in 1..=n {
        let mut opts = StartOptions::new()
            .tag("parent", ctx.id())
            .tag("child", &i.to_string())
            .queue("small")
            .priority(i as i32);
        if i == n {
            let clock = ctx.resource::<TestClock>();
            opts = opts.start_at(Clock::now(clock) + Duration::from_secs(3600));
        }
        children.push(ctx.spawn_with(job, &i.to_string(), i, opts).await);
    }
    let outs = ctx.join_all(children).await;
    outs.into_iter().map(|o| o.unwrap_or(0)).sum()
}

/// Fails the test instead of hanging.
async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("the runtime did not get there")
}

async fn runtime(url: &str, clock: &TestClock, fx: &SideEffects) -> Runtime {
    let rt = Runtime::builder()
        .clock(clock.clone())
        .resource(fx.clone())
        .resource(clock.clone())
        .open(url)
        .await
        .expect("the store opens");
    rt.register(job);
    rt.register(fan);
    rt
}

fn ids(runs: &[RunInfo]) -> Vec<&str> {
    runs.iter().map(|r| r.id.as_str()).collect()
}

on_stores!("startopts", [memory, sqlite, postgres]:
    tags_are_searchable_and_shown,
    queue_and_priority_are_kept_with_the_run,
    a_run_waits_for_its_start_time_on_the_clock,
    children_are_spawned_with_options,
    options_a_store_cannot_keep_are_refused,
);

async fn tags_are_searchable_and_shown(url: &str) {
    let (clock, fx) = (TestClock::manual(), SideEffects::new());
    let rt = runtime(url, &clock, &fx).await;
    let acme = StartOptions::new().tag("tenant", "acme");
    rt.start_with(job, "a-1", 1, acme.clone().tag("plan", "pro"))
        .await
        .unwrap();
    rt.start_with(job, "a-2", 2, acme.clone().tag("plan", "free"))
        .await
        .unwrap();
    rt.start_with(job, "b-1", 3, StartOptions::new().tag("tenant", "beta"))
        .await
        .unwrap();
    rt.start(job, "plain", 4).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();

    let acme_runs = rt
        .runs(RunFilter::new().tag("tenant", "acme"))
        .await
        .unwrap();
    assert_eq!(ids(&acme_runs), ["a-1", "a-2"]);
    assert_eq!(
        acme_runs[0].tags.get("plan").map(String::as_str),
        Some("pro")
    );
    assert_eq!(acme_runs[0].status, Status::Completed);
    let both = RunFilter::new().tag("tenant", "acme").tag("plan", "free");
    assert_eq!(ids(&rt.runs(both).await.unwrap()), ["a-2"]);
    let done = RunFilter::new()
        .tag("tenant", "acme")
        .status(StatusKind::Completed);
    assert_eq!(ids(&rt.runs(done).await.unwrap()), ["a-1", "a-2"]);
    assert!(rt
        .runs(RunFilter::new().tag("tenant", "nobody"))
        .await
        .unwrap()
        .is_empty());
    let all = rt.runs(RunFilter::new()).await.unwrap();
    assert_eq!(all.len(), 4);
    let plain = all.iter().find(|r| r.id == "plain").unwrap();
    assert!(plain.tags.is_empty());
    // A second start of an id keeps the tags it was created with.
    rt.start_with(job, "a-1", 1, StartOptions::new().tag("tenant", "other"))
        .await
        .unwrap();
    let a1 = rt.runs(RunFilter::new().id_prefix("a-1")).await.unwrap();
    assert_eq!(a1[0].tags.get("tenant").map(String::as_str), Some("acme"));
}

async fn queue_and_priority_are_kept_with_the_run(url: &str) {
    let (clock, fx) = (TestClock::manual(), SideEffects::new());
    let rt = runtime(url, &clock, &fx).await;
    let h = rt
        .start_with(job, "q-1", 5, StartOptions::new().queue("llm").priority(2))
        .await
        .unwrap();
    assert_eq!(within(h.result()).await.unwrap(), 50);
    rt.start(job, "q-2", 6).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    let runs = rt.runs(RunFilter::new()).await.unwrap();
    assert_eq!(
        runs.iter()
            .map(|r| (r.id.as_str(), r.queue.as_deref(), r.priority))
            .collect::<Vec<_>>(),
        [("q-1", Some("llm"), 2), ("q-2", None, 0)]
    );
}

async fn a_run_waits_for_its_start_time_on_the_clock(url: &str) {
    let (clock, fx) = (TestClock::manual(), SideEffects::new());
    let rt = runtime(url, &clock, &fx).await;
    let when = Clock::now(&clock) + Duration::from_secs(86_400);
    let h = rt
        .start_with(job, "later", 7, StartOptions::new().start_at(when))
        .await
        .unwrap();
    // Nothing to do now: the run sleeps until its start time.
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Sleeping { until: when });
    assert_eq!(fx.count("job 7"), 0, "not executed before its start time");
    clock.advance(Duration::from_secs(86_399));
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(fx.count("job 7"), 0, "one second early");
    // Its time comes: the worker wakes for it by itself.
    clock.advance(Duration::from_secs(1));
    assert_eq!(within(h.result()).await.unwrap(), 70);
    assert_eq!(fx.count("job 7"), 1);
    // A start time in the past starts at once.
    let past = Clock::now(&clock) - Duration::from_secs(60);
    let h = rt
        .start_with(job, "past", 8, StartOptions::new().start_at(past))
        .await
        .unwrap();
    assert_eq!(within(h.result()).await.unwrap(), 80);
}

async fn children_are_spawned_with_options(url: &str) {
    let (clock, fx) = (TestClock::manual(), SideEffects::new());
    let rt = runtime(url, &clock, &fx).await;
    let h = rt.start(fan, "fan", 3).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Joining);
    let kids = rt
        .runs(RunFilter::new().tag("parent", "fan"))
        .await
        .unwrap();
    assert_eq!(ids(&kids), ["fan/1", "fan/2", "fan/3"]);
    for (i, kid) in kids.iter().enumerate() {
        let n = (i + 1).to_string();
        assert_eq!(kid.tags.get("child"), Some(&n));
        assert_eq!(
            (kid.queue.as_deref(), kid.priority),
            (Some("small"), i as i32 + 1)
        );
        assert_eq!(kid.parent.as_deref(), Some("fan"));
    }
    assert_eq!(kids[0].status, Status::Completed);
    assert!(
        matches!(kids[2].status, Status::Sleeping { .. }),
        "{:?}",
        kids[2].status
    );
    assert_eq!(fx.count("job 3"), 0);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(within(h.result()).await.unwrap(), 60);
    assert_eq!(fx.count("job 3"), 1);
}

async fn options_a_store_cannot_keep_are_refused(url: &str) {
    let (clock, fx) = (TestClock::manual(), SideEffects::new());
    let rt = runtime(url, &clock, &fx).await;
    for opts in [
        StartOptions::new().tag("", "x"),
        StartOptions::new().tag("k", "nul\0byte"),
        StartOptions::new().queue(""),
    ] {
        let err = rt.start_with(job, "bad", 1, opts).await.unwrap_err();
        assert!(
            matches!(&err, Error::Misuse { run, .. } if run == "bad"),
            "{err}"
        );
    }
    assert!(
        rt.runs(RunFilter::new()).await.unwrap().is_empty(),
        "nothing started"
    );
}
