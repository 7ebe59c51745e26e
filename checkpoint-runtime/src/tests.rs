//! Runtime tests with hand-written workflows: each implements `Workflow`
//! directly against the `__private` interface, the way `#[workflow]` does.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::__private::{load, load_signal, load_signal_timeout, Frame, SiteInfo, SiteKind, Slot};
use crate::store::{MemoryStore, Store};
use crate::testing::{CrashMode, Harness, SideEffects, SimulatedCrash};
use crate::{Error, Event, IntoWorkflow, RunFilter, Runtime, Status, StatusKind, Workflow};

const LIMIT: Duration = Duration::from_secs(10);

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("test timed out")
}

fn effect(frame: &Frame, what: String) {
    if let Some(fx) = frame.ctx().try_resource::<SideEffects>() {
        fx.record(what);
    }
}

// ---------------------------------------------------------------------------
// counter: for i in 0..n { total += i; checkpoint!("step") }

#[derive(Clone, Copy, Debug)]
struct Counter;

const COUNTER_SITES: &[SiteInfo] = &[SiteInfo {
    key: "step",
    label: Some("step"),
    kind: SiteKind::Checkpoint,
    fields: &["n", "total"],
    loops: 1,
    signal: None,
    renamed_from: &[],
    migrated: false,
    sites_before: &[],
}];

impl IntoWorkflow for Counter {
    type Workflow = Self;
    fn into_workflow(self) -> Self {
        self
    }
}

impl Workflow for Counter {
    type Input = u64;
    type Output = u64;
    const NAME: &'static str = "counter";
    const SITES: &'static [SiteInfo] = COUNTER_SITES;

    fn run(self, frame: Frame, input: Option<u64>) -> BoxFuture<'static, u64> {
        Box::pin(counter_body(frame, input, false))
    }
}

/// Same workflow, but "forgets" its total on resume: the harness must notice.
#[derive(Clone, Copy, Debug)]
struct ForgetfulCounter;

impl IntoWorkflow for ForgetfulCounter {
    type Workflow = Self;
    fn into_workflow(self) -> Self {
        self
    }
}

impl Workflow for ForgetfulCounter {
    type Input = u64;
    type Output = u64;
    const NAME: &'static str = "forgetful";
    const SITES: &'static [SiteInfo] = COUNTER_SITES;

    fn run(self, frame: Frame, input: Option<u64>) -> BoxFuture<'static, u64> {
        Box::pin(counter_body(frame, input, true))
    }
}

async fn counter_body(mut frame: Frame, input: Option<u64>, forget: bool) -> u64 {
    let ctx = frame.ctx();
    let mut s_n = Slot::<u64>::new();
    let mut s_total = Slot::<u64>::new();
    let loaded = (|| -> Result<(), Error> {
        if let Some(1) = frame.target() {
            frame.check_fields(&[("n", s_n.type_name()), ("total", s_total.type_name())])?;
            load(&mut s_n, &frame, 0)?;
            load(&mut s_total, &frame, 1)?;
        }
        Ok(())
    })();
    if let Err(e) = loaded {
        match frame.halt(e).await {}
    }
    frame.resumed().await;
    effect(&frame, format!("connect:{}", ctx.attempt()));
    let (n, mut total, skip) = match frame.target() {
        Some(_) => {
            let total = s_total.take();
            (
                s_n.take(),
                if forget { 0 } else { total },
                frame.loop_position(0),
            )
        }
        None => (input.unwrap_or(0), 0, 0),
    };
    let mut iter = 0..n;
    if let Err(e) = frame.advance(&mut iter, skip) {
        match frame.halt(e).await {}
    }
    frame.arrive();
    for i in iter {
        total += i;
        effect(&frame, format!("add:{i}"));
        frame
            .save(1, &[i + 1], |enc| {
                enc.field(&n)?;
                enc.field(&total)
            })
            .await;
    }
    total
}

// ---------------------------------------------------------------------------
// approval: notify; let a: Approval = ctx.wait_for("approval").await; ...

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Approval {
    approved: bool,
    reason: String,
}

#[derive(Clone, Copy, Debug)]
struct ApprovalFlow;

impl IntoWorkflow for ApprovalFlow {
    type Workflow = Self;
    fn into_workflow(self) -> Self {
        self
    }
}

impl Workflow for ApprovalFlow {
    type Input = String;
    type Output = Result<String, String>;
    const NAME: &'static str = "approval";
    const SITES: &'static [SiteInfo] = &[SiteInfo {
        key: "0",
        label: None,
        kind: SiteKind::WaitFor,
        fields: &["vendor"],
        loops: 0,
        signal: None,
        renamed_from: &[],
        migrated: false,
        sites_before: &[],
    }];

    fn run(self, frame: Frame, input: Option<String>) -> BoxFuture<'static, Self::Output> {
        Box::pin(approval_body(frame, input))
    }

    fn output_error(output: &Self::Output) -> Option<String> {
        output.as_ref().err().cloned()
    }
}

async fn approval_body(mut frame: Frame, input: Option<String>) -> Result<String, String> {
    let mut s_vendor = Slot::<String>::new();
    let mut s_signal = Slot::<Approval>::new();
    let loaded = (|| -> Result<(), Error> {
        if let Some(1) = frame.target() {
            frame.check_fields(&[("vendor", s_vendor.type_name())])?;
            load(&mut s_vendor, &frame, 0)?;
            load_signal(&mut s_signal, &frame)?;
        }
        Ok(())
    })();
    if let Err(e) = loaded {
        match frame.halt(e).await {}
    }
    frame.resumed().await;
    let (vendor, approval) = match frame.target() {
        Some(_) => {
            frame.arrive();
            (s_vendor.take(), s_signal.take())
        }
        None => {
            let vendor = input.unwrap_or_default();
            effect(&frame, format!("notify:{vendor}"));
            let approval: Approval = frame
                .wait_for(1, &[], |enc| enc.field(&vendor), "approval")
                .await;
            (vendor, approval)
        }
    };
    effect(&frame, format!("decided:{vendor}"));
    if approval.approved {
        Ok(format!("{vendor}: approved"))
    } else {
        Err(approval.reason)
    }
}

// ---------------------------------------------------------------------------
// timers: ctx.sleep(d).await; ctx.wait_for_timeout::<u32>("ping", d).await

#[derive(Clone, Copy, Debug)]
struct Timers;

impl IntoWorkflow for Timers {
    type Workflow = Self;
    fn into_workflow(self) -> Self {
        self
    }
}

impl Workflow for Timers {
    type Input = u64; // milliseconds
    type Output = (String, Option<u32>);
    const NAME: &'static str = "timers";
    const SITES: &'static [SiteInfo] = &[
        SiteInfo {
            key: "nap",
            label: Some("nap"),
            kind: SiteKind::Sleep,
            fields: &["ms"],
            loops: 0,
            signal: None,
            renamed_from: &[],
            migrated: false,
            sites_before: &[],
        },
        SiteInfo {
            key: "1",
            label: None,
            kind: SiteKind::WaitForTimeout,
            fields: &["ms"],
            loops: 0,
            signal: None,
            renamed_from: &[],
            migrated: false,
            sites_before: &[],
        },
    ];

    fn run(self, frame: Frame, input: Option<u64>) -> BoxFuture<'static, Self::Output> {
        Box::pin(timers_body(frame, input))
    }
}

async fn timers_body(mut frame: Frame, input: Option<u64>) -> (String, Option<u32>) {
    let mut s_ms = Slot::<u64>::new();
    let mut s_ping = Slot::<Option<u32>>::new();
    let loaded = (|| -> Result<(), Error> {
        match frame.target() {
            Some(1) => {
                frame.check_fields(&[("ms", s_ms.type_name())])?;
                load(&mut s_ms, &frame, 0)?;
            }
            Some(2) => {
                frame.check_fields(&[("ms", s_ms.type_name())])?;
                load(&mut s_ms, &frame, 0)?;
                load_signal_timeout(&mut s_ping, &frame)?;
            }
            _ => {}
        }
        Ok(())
    })();
    if let Err(e) = loaded {
        match frame.halt(e).await {}
    }
    frame.resumed().await;
    let target = frame.target();
    let ms = match target {
        Some(_) => s_ms.take(),
        None => input.unwrap_or(0),
    };
    if target != Some(2) {
        if target == Some(1) {
            frame.arrive();
        } else {
            frame
                .sleep(1, &[], |e| e.field(&ms), Duration::from_millis(ms))
                .await;
        }
    }
    let ping = if target == Some(2) {
        frame.arrive();
        s_ping.take()
    } else {
        frame
            .wait_for_timeout::<u32, _>(2, &[], |e| e.field(&ms), "ping", Duration::from_millis(ms))
            .await
    };
    ("woke".to_owned(), ping)
}

// ---------------------------------------------------------------------------
// misbehaving workflows

#[derive(Clone, Copy, Debug)]
struct Panicker;

impl IntoWorkflow for Panicker {
    type Workflow = Self;
    fn into_workflow(self) -> Self {
        self
    }
}

impl Workflow for Panicker {
    type Input = ();
    type Output = ();
    const NAME: &'static str = "panicker";
    const SITES: &'static [SiteInfo] = &[];

    fn run(self, _frame: Frame, _input: Option<()>) -> BoxFuture<'static, ()> {
        Box::pin(async { panic!("boom") })
    }
}

/// Like `Counter` but its checkpoint now saves `total` as `u32`.
#[derive(Clone, Copy, Debug)]
struct CounterV2;

impl IntoWorkflow for CounterV2 {
    type Workflow = Self;
    fn into_workflow(self) -> Self {
        self
    }
}

impl Workflow for CounterV2 {
    type Input = u64;
    type Output = u64;
    const NAME: &'static str = "counter";
    const SITES: &'static [SiteInfo] = COUNTER_SITES;

    fn run(self, mut frame: Frame, _input: Option<u64>) -> BoxFuture<'static, u64> {
        Box::pin(async move {
            let mut s_n = Slot::<u64>::new();
            let mut s_total = Slot::<u32>::new();
            let loaded = (|| -> Result<(), Error> {
                if frame.target().is_some() {
                    frame
                        .check_fields(&[("n", s_n.type_name()), ("total", s_total.type_name())])?;
                    load(&mut s_n, &frame, 0)?;
                    load(&mut s_total, &frame, 1)?;
                }
                Ok(())
            })();
            if let Err(e) = loaded {
                match frame.halt(e).await {}
            }
            unreachable!("the type check must refuse the checkpoint")
        })
    }
}

/// A workflow whose only site has another key than the stored checkpoints.
#[derive(Clone, Copy, Debug)]
struct CounterRenamed;

impl IntoWorkflow for CounterRenamed {
    type Workflow = Self;
    fn into_workflow(self) -> Self {
        self
    }
}

impl Workflow for CounterRenamed {
    type Input = u64;
    type Output = u64;
    const NAME: &'static str = "counter";
    const SITES: &'static [SiteInfo] = &[SiteInfo {
        key: "renamed",
        label: Some("renamed"),
        kind: SiteKind::Checkpoint,
        fields: &["n", "total"],
        loops: 1,
        signal: None,
        renamed_from: &[],
        migrated: false,
        sites_before: &[],
    }];

    fn run(self, _frame: Frame, _input: Option<u64>) -> BoxFuture<'static, u64> {
        Box::pin(async { unreachable!("must not run") })
    }
}

// ---------------------------------------------------------------------------
// tests

async fn crash_counter_after(store: Arc<MemoryStore>, k: u64, n: u64) {
    let crash = SimulatedCrash::after_checkpoint(k);
    let rt = crash.install(Runtime::builder().store(store)).in_memory();
    rt.start(Counter, "c", n).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert!(crash.fired());
}

#[tokio::test]
async fn counter_runs_to_completion() {
    let rt = Runtime::in_memory();
    let h = rt.start(Counter, "c1", 10).await.unwrap();
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
    assert_eq!(cps[9].loops, vec![10]);
    assert_eq!(cps[9].fields[1].name, "total");
    assert_eq!(cps[9].fields[1].type_name, "u64");
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
async fn restart_with_same_worker_resumes_at_once() {
    let store = Arc::new(MemoryStore::new());
    crash_counter_after(store.clone(), 3, 6).await;
    let rt = Runtime::builder().store(store).in_memory();
    let h = rt.handle(Counter, "c");
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
    a.start(Counter, "c", 5).await.unwrap();
    within(a.run_until_idle()).await.unwrap();
    assert!(crash.fired());
    let b = Runtime::builder()
        .worker_id("b")
        .store(store.clone())
        .in_memory();
    b.register(Counter);
    // a's lease is still live: b has nothing to do.
    within(b.run_until_idle()).await.unwrap();
    let info = &b.runs(RunFilter::new()).await.unwrap()[0];
    assert_eq!(info.status, Status::Running);
    assert_eq!(info.worker.as_deref(), Some("a"));
    assert_eq!(info.latest_seq, 2);
    tokio::time::sleep(Duration::from_millis(250)).await;
    within(b.run_until_idle()).await.unwrap();
    assert_eq!(b.handle(Counter, "c").result().await.unwrap(), 10);
    assert!(b.history("c").await.unwrap().contains(&Event::Resumed {
        worker: "b".into(),
        from_seq: 2,
        version: 1,
    }));
}

#[tokio::test]
async fn start_is_idempotent_and_validated() {
    let rt = Runtime::in_memory();
    let h1 = rt.start(Counter, "same", 3).await.unwrap();
    let h2 = rt.start(Counter, "same", 100).await.unwrap();
    assert_eq!(h1.id(), h2.id());
    assert_eq!(within(h2.result()).await.unwrap(), 3);
    let err = rt
        .start(ApprovalFlow, "same", "x".into())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WorkflowMismatch { .. }), "{err}");
    assert!(matches!(
        rt.start(Counter, "", 1).await,
        Err(Error::InvalidId { .. })
    ));
    assert!(matches!(
        rt.start(Counter, &"x".repeat(256), 1).await,
        Err(Error::InvalidId { .. })
    ));
    assert!(matches!(
        rt.handle(Counter, "missing").status().await,
        Err(Error::UnknownRun { .. })
    ));
    assert!(matches!(
        rt.handle(ApprovalFlow, "same").status().await,
        Err(Error::WorkflowMismatch { .. })
    ));
    assert!(matches!(
        rt.signal("missing", "x", &1).await,
        Err(Error::UnknownRun { .. })
    ));
}

#[tokio::test]
async fn wait_for_suspends_and_resumes_with_signal() {
    let rt = Runtime::in_memory();
    let h = rt.start(ApprovalFlow, "v1", "acme".into()).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(
        h.status().await.unwrap(),
        Status::Waiting {
            signal: "approval".into(),
            deadline: None,
        }
    );
    // A new runtime over the same store picks it up when the signal comes.
    let rt2 = Runtime::builder().store(rt.store()).in_memory();
    rt2.register(ApprovalFlow);
    rt2.signal(
        "v1",
        "approval",
        &Approval {
            approved: true,
            reason: String::new(),
        },
    )
    .await
    .unwrap();
    within(rt2.run_until_idle()).await.unwrap();
    assert_eq!(h.status().await.unwrap(), Status::Completed);
    assert_eq!(
        within(h.result()).await.unwrap(),
        Ok("acme: approved".to_owned())
    );
    let history = rt.history("v1").await.unwrap();
    assert!(history.iter().any(|e| matches!(e, Event::Suspended { .. })));
    assert!(history.contains(&Event::SignalReceived {
        name: "approval".into()
    }));
}

#[tokio::test]
async fn signal_sent_early_is_consumed_without_suspending() {
    let rt = Runtime::in_memory();
    let h = rt.start(ApprovalFlow, "v2", "acme".into()).await.unwrap();
    rt.signal(
        "v2",
        "approval",
        &Approval {
            approved: false,
            reason: "too expensive".into(),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        within(h.result()).await.unwrap(),
        Err("too expensive".to_owned())
    );
    // An `Err` output is a failed run, with the error as text.
    assert_eq!(
        h.status().await.unwrap(),
        Status::Failed {
            error: "too expensive".into()
        }
    );
    let history = rt.history("v2").await.unwrap();
    assert!(!history.iter().any(|e| matches!(e, Event::Suspended { .. })));
}

#[tokio::test]
async fn undecodable_signal_is_rejected_and_run_keeps_waiting() {
    let rt = Runtime::in_memory();
    let h = rt.start(ApprovalFlow, "v3", "acme".into()).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    // Sent to the waiting run from a process that ran its wait site: refused
    // at once, with the site's own decoder, and not stored.
    let refused = rt
        .signal("v3", "approval", &"not an approval")
        .await
        .unwrap_err();
    let Error::SignalPayload { detail, .. } = &refused else {
        panic!("{refused:?}");
    };
    assert!(
        detail.contains("waits for it at site `0`, and the signal was not stored"),
        "{detail}"
    );
    assert!(rt.store().pending_signals("v3").await.unwrap().is_empty());
    // Stored from elsewhere (a process that never ran the site): the site
    // rejects it with a history event and keeps waiting.
    rt.store()
        .put_signal(
            "v3",
            "approval",
            serde_json::to_vec("not an approval").unwrap(),
        )
        .await
        .unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert_eq!(
        h.status().await.unwrap(),
        Status::Waiting {
            signal: "approval".into(),
            deadline: None,
        }
    );
    let history = rt.history("v3").await.unwrap();
    assert!(history
        .iter()
        .any(|e| matches!(e, Event::SignalRejected { name, .. } if name == "approval")));
    // Also on the forward path: a bad signal queued before the wait.
    let h4 = rt.start(ApprovalFlow, "v4", "beta".into()).await.unwrap();
    rt.store()
        .put_signal("v4", "approval", serde_json::to_vec(&42).unwrap())
        .await
        .unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert!(matches!(h4.status().await.unwrap(), Status::Waiting { .. }));
    // A good one completes both.
    let ok = Approval {
        approved: true,
        reason: String::new(),
    };
    rt.signal("v3", "approval", &ok).await.unwrap();
    rt.signal("v4", "approval", &ok).await.unwrap();
    assert_eq!(
        within(h.result()).await.unwrap(),
        Ok("acme: approved".into())
    );
    assert_eq!(
        within(h4.result()).await.unwrap(),
        Ok("beta: approved".into())
    );
}

#[tokio::test]
async fn result_keeps_waiting_for_a_signal() {
    let rt = Runtime::in_memory();
    let h = rt.start(ApprovalFlow, "v5", "acme".into()).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(100), h.result()).await;
    assert!(waited.is_err(), "result() must wait for the signal");
    let sender = rt.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let ok = Approval {
            approved: true,
            reason: String::new(),
        };
        sender.signal("v5", "approval", &ok).await.unwrap();
    });
    assert_eq!(
        within(h.result()).await.unwrap(),
        Ok("acme: approved".into())
    );
}

#[tokio::test]
async fn sleep_and_wait_timeout_are_durable_timers() {
    let rt = Runtime::in_memory();
    let h = rt.start(Timers, "t1", 40).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert!(matches!(h.status().await.unwrap(), Status::Sleeping { .. }));
    // result() waits out the timer, then the timeout.
    assert_eq!(within(h.result()).await.unwrap(), ("woke".into(), None));
    // With a signal in time.
    let h2 = rt.start(Timers, "t2", 40).await.unwrap();
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
    rt.register(Timers);
    let h = rt.start(Timers, "t3", 30).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    rt.signal("t3", "ping", &1u32).await.unwrap();
    // The handle only observes: the worker does the work.
    assert_eq!(within(h.result()).await.unwrap(), ("woke".into(), Some(1)));
    rt.shutdown();
    within(worker).await.unwrap().unwrap();
}

#[tokio::test]
async fn cancel_stops_a_waiting_run() {
    let rt = Runtime::in_memory();
    let h = rt.start(ApprovalFlow, "v6", "acme".into()).await.unwrap();
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
async fn incompatible_checkpoint_is_refused_before_user_code() {
    // Field type changed.
    let store = Arc::new(MemoryStore::new());
    crash_counter_after(store.clone(), 2, 5).await;
    let rt = Runtime::builder().store(store).in_memory();
    let h = rt.handle(CounterV2, "c");
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
    back.register(Counter);
    assert_eq!(
        within(back.handle(Counter, "c").result()).await.unwrap(),
        10
    );

    // Site renamed.
    let store = Arc::new(MemoryStore::new());
    crash_counter_after(store.clone(), 1, 5).await;
    let rt = Runtime::builder().store(store).in_memory();
    let err = within(rt.handle(CounterRenamed, "c").result())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Incompatible { site, .. } if site == "step"),
        "{err}"
    );
}

#[tokio::test]
async fn panics_are_retried_then_fail() {
    let rt = Runtime::builder().max_attempts(3).in_memory();
    let h = rt.start(Panicker, "p", ()).await.unwrap();
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
    let h = rt.start(Counter, "orig", 6).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), 15);
    rt.fork("orig", 2, "copy").await.unwrap();
    let copy = rt.handle(Counter, "copy");
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
    let h = rt.start(Counter, "r", 10).await.unwrap();
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
    client.start(Counter, "u", 3).await.unwrap();
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
    a.register(Counter);
    assert_eq!(within(a.handle(Counter, "u").result()).await.unwrap(), 3);
    assert_eq!(a.status("u").await.unwrap(), Status::Completed);
}

#[tokio::test]
async fn runs_are_listed_and_filtered() {
    let rt = Runtime::in_memory();
    rt.start(Counter, "a-1", 2).await.unwrap();
    rt.start(ApprovalFlow, "b-1", "x".into()).await.unwrap();
    rt.start(Counter, "a-2", 2).await.unwrap();
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

#[tokio::test]
async fn idempotency_keys_are_stable_per_position() {
    #[derive(Clone, Copy)]
    struct Keys;
    impl IntoWorkflow for Keys {
        type Workflow = Self;
        fn into_workflow(self) -> Self {
            self
        }
    }

    impl Workflow for Keys {
        type Input = ();
        type Output = Vec<String>;
        const NAME: &'static str = "keys";
        const SITES: &'static [SiteInfo] = &[];
        fn run(self, frame: Frame, _input: Option<()>) -> BoxFuture<'static, Vec<String>> {
            Box::pin(async move {
                let ctx = frame.ctx();
                vec![
                    ctx.idempotency_key(),
                    ctx.idempotency_key(),
                    ctx.id().to_owned(),
                ]
            })
        }
    }
    let rt = Runtime::in_memory();
    let out = within(rt.start(Keys, "k", ()).await.unwrap().result())
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

#[tokio::test]
async fn harness_checks_every_checkpoint() {
    let report = within(crate::testing::check_every_checkpoint(Counter, 5))
        .await
        .unwrap();
    assert_eq!(report.checkpoints, 5);
    assert_eq!(report.output, serde_json::json!(10));
    assert_eq!(report.crash_points.len(), 5);
    // The resume path runs "connect" again at every crash point.
    for p in &report.crash_points {
        assert_eq!(p.mode, CrashMode::AfterCheckpoint);
        assert!(p.duplicated.is_empty() || p.duplicated[0].effect.starts_with("connect"));
    }
    let text = report.to_string();
    assert!(text.contains("checkpoint 3/5"), "{text}");
}

#[tokio::test]
async fn harness_reports_repeated_effects_when_crashing_before_checkpoints() {
    let report = within(
        Harness::new(Counter)
            .input(3)
            .also_crash_before_checkpoints()
            .run(),
    )
    .await
    .unwrap();
    assert_eq!(report.crash_points.len(), 6);
    let before: Vec<_> = report
        .crash_points
        .iter()
        .filter(|p| p.mode == CrashMode::BeforeCheckpoint)
        .collect();
    // Crashing before checkpoint k re-runs iteration k-1's `add`.
    assert!(before[1]
        .duplicated
        .iter()
        .any(|d| d.effect == "add:1" && d.got == 2 && d.expected == 1));
}

#[tokio::test]
async fn harness_delivers_scripted_signals() {
    let report = within(
        Harness::new(ApprovalFlow)
            .input("acme".into())
            .signal(
                "approval",
                &Approval {
                    approved: true,
                    reason: String::new(),
                },
            )
            .run(),
    )
    .await
    .unwrap();
    assert_eq!(report.checkpoints, 1);
    assert_eq!(report.output, serde_json::json!({"Ok": "acme: approved"}));
    assert!(report.duplicated_effects().is_empty(), "{report}");

    let err = within(Harness::new(ApprovalFlow).input("acme".into()).run())
        .await
        .unwrap_err();
    assert!(err.to_string().contains(".signal(\"approval\""), "{err}");
}

#[tokio::test]
async fn harness_catches_state_lost_on_resume() {
    let err = within(crate::testing::check_every_checkpoint(ForgetfulCounter, 4))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::CheckFailed { .. }), "{msg}");
    assert!(
        msg.contains("checkpoint 2/4") && msg.contains("(`step`)"),
        "{msg}"
    );
    assert!(msg.contains("expected 6"), "{msg}");
}

#[tokio::test]
async fn timers_survive_crashes_in_the_harness() {
    let report = within(Harness::new(Timers).input(20).signal("ping", &5u32).run())
        .await
        .unwrap();
    assert_eq!(report.checkpoints, 2);
    assert_eq!(report.output, serde_json::json!(["woke", 5]));
}

// ---------------------------------------------------------------------------
// slow: for i in 0..n { tokio::time::sleep(ms).await; checkpoint!("tick") }

#[derive(Clone, Copy, Debug)]
struct Slow;

impl IntoWorkflow for Slow {
    type Workflow = Self;
    fn into_workflow(self) -> Self {
        self
    }
}

impl Workflow for Slow {
    type Input = (u64, u64);
    type Output = u64;
    const NAME: &'static str = "slow";
    const SITES: &'static [SiteInfo] = &[SiteInfo {
        key: "tick",
        label: Some("tick"),
        kind: SiteKind::Checkpoint,
        fields: &["n", "ms"],
        loops: 1,
        signal: None,
        renamed_from: &[],
        migrated: false,
        sites_before: &[],
    }];

    fn run(self, frame: Frame, input: Option<(u64, u64)>) -> BoxFuture<'static, u64> {
        Box::pin(slow_body(frame, input))
    }
}

async fn slow_body(mut frame: Frame, input: Option<(u64, u64)>) -> u64 {
    let mut s_n = Slot::<u64>::new();
    let mut s_ms = Slot::<u64>::new();
    let loaded = (|| -> Result<(), Error> {
        if let Some(1) = frame.target() {
            frame.check_fields(&[("n", s_n.type_name()), ("ms", s_ms.type_name())])?;
            load(&mut s_n, &frame, 0)?;
            load(&mut s_ms, &frame, 1)?;
        }
        Ok(())
    })();
    if let Err(e) = loaded {
        match frame.halt(e).await {}
    }
    frame.resumed().await;
    let (n, ms, skip) = match frame.target() {
        Some(_) => (s_n.take(), s_ms.take(), frame.loop_position(0)),
        None => {
            let (n, ms) = input.unwrap_or((0, 0));
            (n, ms, 0)
        }
    };
    let mut iter = 0..n;
    if let Err(e) = frame.advance(&mut iter, skip) {
        match frame.halt(e).await {}
    }
    frame.arrive();
    for i in iter {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        effect(&frame, format!("tick:{i}"));
        frame
            .save(1, &[i + 1], |enc| {
                enc.field(&n)?;
                enc.field(&ms)
            })
            .await;
    }
    n
}

#[tokio::test]
async fn cancel_stops_an_executing_run_promptly() {
    let rt = Runtime::in_memory();
    let h = rt.start(Slow, "s", (1000, 5)).await.unwrap();
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

#[tokio::test]
async fn shutdown_hands_runs_back_for_another_worker() {
    let store = Arc::new(MemoryStore::new());
    let a = Runtime::builder()
        .worker_id("a")
        .store(store.clone())
        .in_memory();
    a.register(Slow);
    let worker = tokio::spawn({
        let a = a.clone();
        async move { a.run_worker().await }
    });
    a.start(Slow, "s", (20, 5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    a.shutdown();
    within(worker).await.unwrap().unwrap();
    let info = &a.runs(RunFilter::new()).await.unwrap()[0];
    assert_eq!(info.status, Status::Queued);
    assert_eq!(info.worker, None, "the lease is released on shutdown");
    assert!(info.latest_seq > 0 && info.latest_seq < 20);
    let b = Runtime::builder().worker_id("b").store(store).in_memory();
    assert_eq!(within(b.handle(Slow, "s").result()).await.unwrap(), 20);
}

/// `Slow` after a deploy that renamed its site: checkpoints stored under
/// the old key (`tick`, or an older build's `#1`) resume at the new one.
#[derive(Clone, Copy, Debug)]
struct SlowRenamed;

impl IntoWorkflow for SlowRenamed {
    type Workflow = Self;
    fn into_workflow(self) -> Self {
        self
    }
}

impl Workflow for SlowRenamed {
    type Input = (u64, u64);
    type Output = u64;
    const NAME: &'static str = "slow";
    const SITES: &'static [SiteInfo] = &[SiteInfo {
        key: "checkpoint 1",
        label: None,
        kind: SiteKind::Checkpoint,
        fields: &["n", "ms"],
        loops: 1,
        signal: None,
        renamed_from: &["#1", "tick"],
        migrated: false,
        sites_before: &[],
    }];

    fn run(self, frame: Frame, input: Option<(u64, u64)>) -> BoxFuture<'static, u64> {
        Box::pin(slow_body(frame, input))
    }
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
    a.start(Slow, "s", (20, 5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    a.shutdown();
    within(worker).await.unwrap().unwrap();
    let before = a.checkpoints("s").await.unwrap();
    assert!(!before.is_empty() && before.len() < 20, "{}", before.len());
    assert!(before.iter().all(|c| c.site == "tick"));
    let b = Runtime::builder().worker_id("b").store(store).in_memory();
    b.register(SlowRenamed);
    assert_eq!(
        within(b.handle(SlowRenamed, "s").result()).await.unwrap(),
        20
    );
    let after = b.checkpoints("s").await.unwrap();
    assert_eq!(after.len(), 20, "each tick checkpointed once");
    assert!(after[before.len()..]
        .iter()
        .all(|c| c.site == "checkpoint 1"));
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
    b.register(Slow);
    let h = a.start(Slow, "s", (10, 30)).await.unwrap();
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
    b.register(Slow);
    store.delay_next_claim(Duration::from_millis(250));
    let h = a.start(Slow, "s", (20, 30)).await.unwrap();
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
    rt.register(Slow);
    let worker = tokio::spawn({
        let rt = rt.clone();
        async move { rt.run_worker().await }
    });
    let mut handles = Vec::new();
    for i in 0..40 {
        handles.push(rt.start(Slow, &format!("s{i}"), (3, 2)).await.unwrap());
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
    new.register(Slow);
    new.start(Slow, "s", (5, 10)).await.unwrap();
    // The new instance holds the run; only then does the old one serve.
    while new.status("s").await.unwrap() != Status::Running {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    old.register(Slow);
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

#[tokio::test]
async fn zero_length_timers_do_not_suspend() {
    let rt = Runtime::in_memory();
    let h = rt.start(Timers, "t0", 0).await.unwrap();
    assert_eq!(within(h.result()).await.unwrap(), ("woke".into(), None));
    let history = rt.history("t0").await.unwrap();
    assert!(!history.iter().any(|e| matches!(e, Event::Suspended { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_on_a_multi_threaded_runtime() {
    let rt = Runtime::builder().concurrency(4).in_memory();
    rt.register(Slow);
    rt.register(ApprovalFlow);
    let worker = tokio::spawn({
        let rt = rt.clone();
        async move { rt.run_worker().await }
    });
    let mut handles = Vec::new();
    for i in 0..20 {
        handles.push(rt.start(Slow, &format!("m{i}"), (5, 1)).await.unwrap());
    }
    let approval = rt.start(ApprovalFlow, "ap", "acme".into()).await.unwrap();
    let ok = Approval {
        approved: true,
        reason: String::new(),
    };
    rt.signal("ap", "approval", &ok).await.unwrap();
    for h in &handles {
        assert_eq!(within(h.result()).await.unwrap(), 5);
    }
    assert_eq!(
        within(approval.result()).await.unwrap(),
        Ok("acme: approved".into())
    );
    rt.shutdown();
    within(worker).await.unwrap().unwrap();
    let report = within(crate::testing::check_every_checkpoint(Counter, 3))
        .await
        .unwrap();
    assert_eq!(report.crash_points.len(), 3);
}
