//! Cancellation a workflow sees (`Runtime::request_cancel`,
//! `Ctx::cancel_requested`, `CancelChildren`): the body cleans up and the
//! run ends cancelled with the reason; sleeps and timed waits return at
//! once; past the grace period the run is cancelled hard; children are
//! asked too or abandoned; a finished run refuses the request; a parked
//! run (no registered code resumes it) ends cancelled at once; and a cancel
//! requested by this process reaches a run in another one: one waiting, and
//! one executing without ever suspending (it learns of the request with a
//! lease renewal; one that ignores it is cancelled hard after its grace).
//! Each runs on the in-memory store, on SQLite and on PostgreSQL (with
//! `CHECKPOINT_TEST_POSTGRES_URL`; ignored without it); the ones across
//! processes on the two shared stores.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::SideEffects;

mod common;
use common::pg::Schema;
use common::TempDir;

const WORKER: &str = env!("CARGO_BIN_EXE_checkpoint-cancel-worker");

const HOUR: Duration = Duration::from_secs(3600);

/// A saga: books, waits an hour for payment, compensates when asked to
/// cancel.
#[workflow]
async fn booking(ctx: &Ctx, who: String) -> String {
    #[transient]
    let fx = ctx.resource::<SideEffects>();
    fx.record(format!("book hotel for {who}"));
    checkpoint!("hotel");
    let paid: Option<bool> = ctx.wait_for_timeout("paid", HOUR).await;
    if let Some(reason) = ctx.cancel_requested() {
        fx.record(format!("release hotel: {reason}"));
        // A sleep after the request returns at once too.
        ctx.sleep(HOUR).await;
        fx.record("notified");
        return "compensated".to_owned();
    }
    fx.record(format!("confirm (paid {paid:?})"));
    "confirmed".to_owned()
}

/// Sleeps a day, then looks.
#[workflow]
async fn napper(ctx: &Ctx) -> Option<String> {
    ctx.sleep(Duration::from_secs(86_400)).await;
    ctx.cancel_requested()
}

/// Waits for a signal without a deadline: only the grace period ends it.
#[workflow]
async fn stubborn(ctx: &Ctx) -> u32 {
    let n: u32 = ctx.wait_for("go").await;
    ctx.resource::<SideEffects>().record("stubborn went on");
    n
}

/// Keeps working without ever suspending: only the grace period stops it.
#[workflow]
async fn busy(ctx: &Ctx) -> u32 {
    let mut laps = 0u32;
    for _ in 0..100_000u32 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        laps += 1;
        checkpoint!("lap");
    }
    laps
}

/// A child that waits an hour, and says when it was asked to cancel.
#[workflow]
async fn leg(ctx: &Ctx, name: String) -> String {
    let _: Option<u32> = ctx.wait_for_timeout("done", HOUR).await;
    if let Some(reason) = ctx.cancel_requested() {
        ctx.resource::<SideEffects>()
            .record(format!("{name} cleaned up: {reason}"));
    }
    name
}

/// Version 1 of `parkable`: keeps a count across its wait.
#[workflow(name = "parkable")]
async fn parkable_v1(ctx: &Ctx) -> u32 {
    let count: u32 = 7;
    let go: u32 = ctx.wait_for("go").await;
    count + go
}

/// A deploy of `parkable` that keeps the count as text: it cannot resume
/// version 1's runs, which it parks.
#[workflow(name = "parkable")]
async fn parkable_text(ctx: &Ctx) -> String {
    let count: String = "7".to_owned();
    let go: u32 = ctx.wait_for("go").await;
    format!("{count}+{go}")
}

/// A parent joining one child.
#[workflow]
async fn journey(ctx: &Ctx) -> String {
    let child = ctx.spawn(leg, "leg", "train".to_owned()).await;
    let out: Result<String, ChildError> = ctx.join(child).await;
    match out {
        Ok(name) => name,
        Err(e) => format!("no leg: {e}"),
    }
}

#[derive(Clone, Copy, Debug)]
enum Backend {
    Memory,
    Sqlite,
    Postgres,
}

struct Opened {
    rt: Runtime,
    url: Option<String>,
    /// The in-memory store, which another runtime of this process may share.
    memory: Option<std::sync::Arc<checkpoint_runtime::store::MemoryStore>>,
    _dir: Option<TempDir>,
    _schema: Option<Schema>,
}

impl std::ops::Deref for Opened {
    type Target = Runtime;
    fn deref(&self) -> &Runtime {
        &self.rt
    }
}

async fn open(backend: Backend, fx: &SideEffects) -> Opened {
    let builder = Runtime::builder().resource(fx.clone());
    match backend {
        Backend::Memory => {
            let store = std::sync::Arc::new(checkpoint_runtime::store::MemoryStore::new());
            Opened {
                rt: builder.store(store.clone()).in_memory(),
                url: None,
                memory: Some(store),
                _dir: None,
                _schema: None,
            }
        }
        Backend::Sqlite => {
            let dir = TempDir::new("cancel");
            let url = dir.db();
            Opened {
                rt: builder.open(&url).await.unwrap(),
                url: Some(url),
                memory: None,
                _dir: Some(dir),
                _schema: None,
            }
        }
        Backend::Postgres => {
            let schema = Schema::new("cancel", "cp_cancel")
                .expect("CHECKPOINT_TEST_POSTGRES_URL is set when these tests are built");
            let url = schema.url();
            Opened {
                rt: builder.open(&url).await.unwrap(),
                url: Some(url),
                memory: None,
                _dir: None,
                _schema: Some(schema),
            }
        }
    }
}

/// Another runtime on `opened`'s store (a deploy of other code).
async fn reopen(opened: &Opened) -> Runtime {
    match (&opened.memory, &opened.url) {
        (Some(store), _) => Runtime::builder().store(store.clone()).in_memory(),
        (None, Some(url)) => Runtime::open(url).await.unwrap(),
        (None, None) => unreachable!("every store is shared or has a URL"),
    }
}

/// A test function `$name(backend)` run once per store: `[memory, sqlite,
/// postgres]`, or the stores another process can share (`[sqlite,
/// postgres]`, for the tests that cross processes).
macro_rules! each_store {
    ([$($kind:ident),*]: $($name:ident),* $(,)?) => {
        each_store!(@kinds [$($kind)*] [$($name),*]);
    };
    // The names as one token tree, repeated once per kind.
    (@kinds [$($kind:ident)*] $names:tt) => {
        $( each_store!(@kind $kind $names); )*
    };
    (@kind memory [$($name:ident),*]) => {
        mod memory {
            $(#[tokio::test] async fn $name() { super::$name(super::Backend::Memory).await })*
        }
    };
    (@kind sqlite [$($name:ident),*]) => {
        mod sqlite {
            $(#[tokio::test] async fn $name() { super::$name(super::Backend::Sqlite).await })*
        }
    };
    (@kind postgres [$($name:ident),*]) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[cfg_attr(
                    not(checkpoint_test_postgres),
                    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
                )]
                async fn $name() { super::$name(super::Backend::Postgres).await }
            )*
        }
    };
}

each_store!(
    [memory, sqlite, postgres]:
    the_body_cleans_up_and_the_run_ends_cancelled_with_the_reason,
    a_sleep_returns_at_once,
    past_the_grace_period_a_waiting_run_is_cancelled_hard,
    past_the_grace_period_a_busy_run_is_stopped,
    cascade_asks_the_children_and_abandon_leaves_them,
    a_request_to_a_finished_run_is_refused_naming_its_status,
    a_request_ends_a_parked_run,
);

mod across_processes {
    use super::*;

    each_store!(
        [sqlite, postgres]:
        a_cancel_requested_from_another_process_reaches_the_run,
        a_busy_run_in_another_process_sees_the_request_without_suspending,
        a_busy_run_in_another_process_that_ignores_the_request_is_cancelled_hard,
    );
}

async fn info(rt: &Runtime, id: &str) -> RunInfo {
    rt.runs(RunFilter::new().id_prefix(id))
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.id == id)
        .expect("the run is listed")
}

async fn the_body_cleans_up_and_the_run_ends_cancelled_with_the_reason(backend: Backend) {
    let fx = SideEffects::new();
    let rt = open(backend, &fx).await;
    let h = rt.start(booking, "trip-1", "ada".to_owned()).await.unwrap();
    rt.run_until_idle().await.unwrap();
    assert!(matches!(h.status().await.unwrap(), Status::Waiting { .. }));
    let asked = Instant::now();
    rt.request_cancel("trip-1", "customer cancelled", Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        info(&rt, "trip-1").await.cancel_reason.as_deref(),
        Some("customer cancelled"),
        "the pending request is visible"
    );
    rt.run_until_idle().await.unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the hour-long wait and sleep returned at once"
    );
    assert_eq!(h.status().await.unwrap(), Status::Cancelled);
    assert!(matches!(h.result().await, Err(Error::Cancelled { .. })));
    assert_eq!(
        fx.all(),
        [
            "book hotel for ada",
            "release hotel: customer cancelled",
            "notified"
        ]
    );
    assert_eq!(
        info(&rt, "trip-1").await.cancel_reason.as_deref(),
        Some("customer cancelled")
    );
    let history = rt.history("trip-1").await.unwrap();
    assert!(
        history.contains(&Event::CancelRequested {
            reason: "customer cancelled".into(),
            grace_ms: 30_000,
            cascade: true,
        }),
        "{history:?}"
    );
    assert_eq!(history.last(), Some(&Event::Cancelled), "{history:?}");
    assert!(!history.contains(&Event::Completed), "{history:?}");
}

async fn a_sleep_returns_at_once(backend: Backend) {
    let fx = SideEffects::new();
    let rt = open(backend, &fx).await;
    let h = rt.start(napper, "nap-1", ()).await.unwrap();
    rt.run_until_idle().await.unwrap();
    assert!(matches!(h.status().await.unwrap(), Status::Sleeping { .. }));
    rt.request_cancel("nap-1", "wake up", Duration::from_secs(30))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), rt.run_until_idle())
        .await
        .expect("the day-long sleep returns at once")
        .unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Cancelled);
}

async fn past_the_grace_period_a_waiting_run_is_cancelled_hard(backend: Backend) {
    let fx = SideEffects::new();
    let rt = open(backend, &fx).await;
    let h = rt.start(stubborn, "st-1", ()).await.unwrap();
    rt.run_until_idle().await.unwrap();
    rt.request_cancel("st-1", "too slow", Duration::from_millis(300))
        .await
        .unwrap();
    rt.run_until_idle().await.unwrap();
    // A wait without a deadline does not return: the run waits out its grace.
    assert!(
        matches!(h.status().await.unwrap(), Status::Waiting { .. }),
        "{:?}",
        h.status().await
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    rt.run_until_idle().await.unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Cancelled);
    assert_eq!(fx.count("stubborn went on"), 0, "cancelled where it stood");
    let history = rt.history("st-1").await.unwrap();
    assert_eq!(history.last(), Some(&Event::Cancelled), "{history:?}");
}

async fn past_the_grace_period_a_busy_run_is_stopped(backend: Backend) {
    let fx = SideEffects::new();
    let rt = open(backend, &fx).await;
    let h = rt.start(busy, "busy-1", ()).await.unwrap();
    let worker = {
        let rt = rt.rt.clone();
        tokio::spawn(async move { rt.run_worker().await })
    };
    let began = Instant::now();
    while !matches!(h.status().await.unwrap(), Status::Running) {
        assert!(began.elapsed() < Duration::from_secs(10), "never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rt.request_cancel("busy-1", "enough", Duration::from_millis(200))
        .await
        .unwrap();
    let asked = Instant::now();
    while h.status().await.unwrap() != Status::Cancelled {
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "not cancelled after its grace: {:?}",
            h.status().await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(asked.elapsed() >= Duration::from_millis(150));
    rt.shutdown();
    let _ = worker.await;
}

async fn cascade_asks_the_children_and_abandon_leaves_them(backend: Backend) {
    let fx = SideEffects::new();
    let rt = open(backend, &fx).await;
    rt.register(leg);
    // Cascade: the child is asked too, cleans up, and the parent's join
    // returns its end.
    let h = rt.start(journey, "j-1", ()).await.unwrap();
    rt.run_until_idle().await.unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Joining);
    rt.request_cancel_with("j-1", "trip off", HOUR, CancelChildren::Cascade)
        .await
        .unwrap();
    assert_eq!(
        info(&rt, "j-1/leg").await.cancel_reason.as_deref(),
        Some("trip off")
    );
    rt.run_until_idle().await.unwrap();
    assert_eq!(fx.count("train cleaned up: trip off"), 1);
    assert_eq!(rt.status("j-1/leg").await.unwrap(), Status::Cancelled);
    assert_eq!(h.status().await.unwrap(), Status::Cancelled);

    // Abandon: the child is not asked, and keeps waiting after the parent
    // is cancelled hard at the end of its grace.
    let h = rt.start(journey, "j-2", ()).await.unwrap();
    rt.run_until_idle().await.unwrap();
    rt.request_cancel_with(
        "j-2",
        "parent only",
        Duration::from_millis(200),
        CancelChildren::Abandon,
    )
    .await
    .unwrap();
    assert_eq!(info(&rt, "j-2/leg").await.cancel_reason, None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    rt.run_until_idle().await.unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Cancelled);
    assert!(
        matches!(rt.status("j-2/leg").await.unwrap(), Status::Waiting { .. }),
        "{:?}",
        rt.status("j-2/leg").await
    );
    // It still finishes on its own.
    rt.signal("j-2/leg", "done", &1u32).await.unwrap();
    rt.run_until_idle().await.unwrap();
    assert_eq!(rt.status("j-2/leg").await.unwrap(), Status::Completed);
}

async fn a_request_to_a_finished_run_is_refused_naming_its_status(backend: Backend) {
    let fx = SideEffects::new();
    let rt = open(backend, &fx).await;
    let h = rt.start(booking, "trip-9", "bo".to_owned()).await.unwrap();
    rt.run_until_idle().await.unwrap();
    rt.signal("trip-9", "paid", &true).await.unwrap();
    assert_eq!(h.result().await.unwrap(), "confirmed");
    let err = rt
        .request_cancel("trip-9", "too late", Duration::ZERO)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::CancelRefused { run, status } if run == "trip-9" && status == "completed"),
        "{err:?}"
    );
    assert!(err.to_string().contains("completed"), "{err}");
    let err = rt
        .request_cancel("nope", "x", Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err:?}");
}

/// A run parked by a deploy whose code cannot resume it is asked to
/// cancel: no code can clean it up, so it ends `Cancelled` at once, the
/// request and its reason kept.
async fn a_request_ends_a_parked_run(backend: Backend) {
    let fx = SideEffects::new();
    let old = open(backend, &fx).await;
    old.register(parkable_v1);
    old.start(parkable_v1, "pk-1", ()).await.unwrap();
    old.run_until_idle().await.unwrap();
    assert!(matches!(
        old.status("pk-1").await.unwrap(),
        Status::Waiting { .. }
    ));
    old.shutdown();
    // The deploy: it takes the run up when the signal comes, and parks it.
    let new = reopen(&old).await;
    new.register(parkable_text);
    new.signal("pk-1", "go", &1u32).await.unwrap();
    new.run_until_idle().await.unwrap();
    let status = new.status("pk-1").await.unwrap();
    assert!(
        matches!(&status, Status::Incompatible { field, .. } if field == "count"),
        "{status:?}"
    );
    new.request_cancel("pk-1", "retired", HOUR).await.unwrap();
    assert_eq!(new.status("pk-1").await.unwrap(), Status::Cancelled);
    new.run_until_idle().await.unwrap();
    assert_eq!(new.status("pk-1").await.unwrap(), Status::Cancelled);
    assert_eq!(
        info(&new, "pk-1").await.cancel_reason.as_deref(),
        Some("retired")
    );
    let history = new.history("pk-1").await.unwrap();
    assert!(
        history.iter().any(|e| matches!(e, Event::Parked { .. })),
        "{history:?}"
    );
    assert!(
        history.contains(&Event::CancelRequested {
            reason: "retired".into(),
            grace_ms: 3_600_000,
            cascade: true,
        }),
        "{history:?}"
    );
    assert!(!history.contains(&Event::Completed), "{history:?}");
}

async fn a_cancel_requested_from_another_process_reaches_the_run(backend: Backend) {
    let fx = SideEffects::new();
    let here = open(backend, &fx).await;
    let url = here.url.clone().expect("a store other processes open");
    let worker = WorkerProcess::spawn(&url, "trip-x", &[]);
    assert_eq!(worker.next(), "WAITING");
    // This process asks; the run executes in the other one.
    here.request_cancel("trip-x", "card declined", Duration::from_secs(30))
        .await
        .unwrap();
    let (ended, effects) = worker.end();
    assert_eq!(ended, "ENDED cancelled");
    assert_eq!(
        effects,
        [
            "booked hotel for ada",
            "booked flight for ada",
            "cancelled flight (card declined)",
            "cancelled hotel (card declined)",
        ]
    );
    assert_eq!(here.status("trip-x").await.unwrap(), Status::Cancelled);
    let history = here.history("trip-x").await.unwrap();
    assert!(
        history.iter().any(
            |e| matches!(e, Event::CancelRequested { reason, .. } if reason == "card declined")
        ),
        "{history:?}"
    );
}

/// A worker process (`checkpoint-cancel-worker`) executing run `id` on
/// this test's store (`extra`: `--busy heed|ignore` for `crunch`, else the
/// trip saga), and its stdout's lines.
struct WorkerProcess {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    log: std::path::PathBuf,
    _dir: TempDir,
}

impl WorkerProcess {
    fn spawn(url: &str, id: &str, extra: &[&str]) -> WorkerProcess {
        let dir = TempDir::new("cancel-worker");
        let log = dir.log();
        let mut child = Command::new(WORKER)
            .args(["--db", url, "--id", id])
            .args(extra)
            .arg("--log")
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the worker starts");
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        WorkerProcess {
            child,
            lines,
            log,
            _dir: dir,
        }
    }

    fn next(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(60))
            .expect("a line from the worker")
    }

    /// Waits for the worker to exit; returns its last line (`ENDED ..`).
    fn end(mut self) -> (String, Vec<String>) {
        let ended = self.next();
        let status = self.child.wait().expect("the worker exits");
        assert!(status.success(), "{status:?}: {ended}");
        let effects = std::fs::read_to_string(&self.log).unwrap_or_default();
        (ended, effects.lines().map(str::to_owned).collect())
    }
}

/// Whether the run's history shows one execution from start to end: no
/// suspension, no second claim (the request reached the body where it ran).
fn never_suspended(history: &[Event]) -> bool {
    !history.iter().any(|e| {
        matches!(
            e,
            Event::Suspended { .. } | Event::Resumed { .. } | Event::TakenOver { .. }
        )
    })
}

/// A run that loops on CPU work with checkpoints in another process, never
/// suspending, is asked to cancel by this one: its body sees the request
/// (reported by a lease renewal) and returns, and the run ends cancelled,
/// all in the one execution it began with.
async fn a_busy_run_in_another_process_sees_the_request_without_suspending(backend: Backend) {
    let history = busy_run_cancelled_from_here(
        backend,
        ("crunch-1", "heed"),
        ("out of budget", HOUR),
        "saw the request (out of budget), stopping",
    )
    .await;
    assert!(!history.contains(&Event::Completed), "{history:?}");
}

/// The same, with a body that sees the request and goes on: once the
/// request's grace period ends, the worker executing it stops it and
/// cancels it hard (the body never finishes its laps).
async fn a_busy_run_in_another_process_that_ignores_the_request_is_cancelled_hard(
    backend: Backend,
) {
    busy_run_cancelled_from_here(
        backend,
        ("crunch-2", "ignore"),
        ("taking too long", Duration::from_secs(5)),
        "saw the request (taking too long), going on",
    )
    .await;
}

/// A busy run (`mode`: what its body does with a request) in a worker
/// process, asked to cancel from this one with `reason` and `grace`: its
/// one effect is `effect`, it ends cancelled with the reason, without ever
/// suspending; returns its history.
async fn busy_run_cancelled_from_here(
    backend: Backend,
    (id, mode): (&str, &str),
    (reason, grace): (&str, Duration),
    effect: &str,
) -> Vec<Event> {
    let fx = SideEffects::new();
    let here = open(backend, &fx).await;
    let url = here.url.clone().expect("a store other processes open");
    let worker = WorkerProcess::spawn(&url, id, &["--busy", mode]);
    assert_eq!(worker.next(), "RUNNING");
    here.request_cancel(id, reason, grace).await.unwrap();
    let (ended, effects) = worker.end();
    assert_eq!(ended, "ENDED cancelled");
    assert_eq!(effects, [effect]);
    assert_eq!(here.status(id).await.unwrap(), Status::Cancelled);
    assert_eq!(info(&here, id).await.cancel_reason.as_deref(), Some(reason));
    let history: Vec<Event> = here.history(id).await.unwrap();
    assert!(never_suspended(&history), "{history:?}");
    assert_eq!(history.last(), Some(&Event::Cancelled), "{history:?}");
    history
}
