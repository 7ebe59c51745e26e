//! Signals are checked when sent, on every store: a name that no wait site
//! of the run's workflow takes is refused (nothing stored) unless forced,
//! and a payload is checked against the type of the wait site of that name
//! even before the run waits there, by a client that never ran the code.

#[macro_use]
mod common;

use std::time::Duration;

use checkpoint_runtime::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Approval {
    approved: bool,
    by: String,
}

/// An approval, then a confirmation: two wait sites, two names.
#[workflow]
async fn purchase(ctx: &Ctx, item: String) -> String {
    checkpoint!("requested");
    let approval: Approval = ctx.wait_for("approval").await;
    let confirmed: bool = ctx.wait_for("confirmed").await;
    format!(
        "{item}: {} by {}, confirmed {confirmed}",
        approval.approved, approval.by
    )
}

/// A wait site whose name is computed: any name may be awaited.
#[workflow]
async fn stepper(ctx: &Ctx, step: u32) -> u32 {
    let name = format!("step-{step}");
    let n: u32 = ctx.wait_for(&name).await;
    n
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("the run did not get there")
}

async fn worker(url: &str) -> Runtime {
    let rt = Runtime::open(url).await.expect("the store opens");
    rt.register(purchase);
    rt.register(stepper);
    rt
}

/// A client of the store that has none of the code (as the CLI is).
async fn client(url: &str) -> Runtime {
    Runtime::builder().client_only().open(url).await.unwrap()
}

async fn stored_signals(rt: &Runtime, id: &str) -> Vec<String> {
    rt.history(id)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e {
            Event::SignalReceived { name } => Some(name),
            _ => None,
        })
        .collect()
}

async fn a_misspelt_name_is_refused_and_nothing_is_stored(url: &str) {
    let rt = worker(url).await;
    rt.start(purchase, "p-1", "desk".into()).await.unwrap();
    rt.run_until_idle().await.unwrap();
    let cli = client(url).await;
    let approval = Approval {
        approved: true,
        by: "ana".into(),
    };
    let refused = cli.signal("p-1", "aproval", &approval).await.unwrap_err();
    let Error::UnknownSignal {
        run,
        workflow,
        signal,
        known,
    } = &refused
    else {
        panic!("refused with {refused:?}");
    };
    assert_eq!(
        (run.as_str(), workflow.as_str(), signal.as_str()),
        ("p-1", "purchase", "aproval")
    );
    assert_eq!(known, &["approval", "confirmed"]);
    let message = refused.to_string();
    assert!(
        message.contains("`approval`") && message.contains("--force"),
        "{message}"
    );
    assert!(stored_signals(&cli, "p-1").await.is_empty());
    // The right names go through, and the run ends.
    cli.signal("p-1", "approval", &approval).await.unwrap();
    cli.signal("p-1", "confirmed", &true).await.unwrap();
    let out = within(rt.handle(purchase, "p-1").result()).await.unwrap();
    assert_eq!(out, "desk: true by ana, confirmed true");
    rt.close().await;
}

async fn a_payload_is_checked_before_the_run_waits(url: &str) {
    // One run through both sites: its worker records their payload types.
    let rt = worker(url).await;
    rt.start(purchase, "p-1", "desk".into()).await.unwrap();
    rt.signal(
        "p-1",
        "approval",
        &Approval {
            approved: true,
            by: "a".into(),
        },
    )
    .await
    .unwrap();
    rt.signal("p-1", "confirmed", &true).await.unwrap();
    within(rt.handle(purchase, "p-1").result()).await.unwrap();
    rt.close().await;

    // A second run, not executed yet: it waits for nothing so far.
    let cli = client(url).await;
    cli.start(purchase, "p-2", "chair".into()).await.unwrap();
    let wrong = cli.signal("p-2", "confirmed", &"yes").await.unwrap_err();
    let Error::SignalPayload { detail, .. } = &wrong else {
        panic!("refused with {wrong:?}");
    };
    assert!(detail.contains("does not wait for it yet"), "{detail}");
    let missing = cli
        .signal("p-2", "approval", &serde_json::json!({ "approved": true }))
        .await;
    assert!(
        missing.is_ok(),
        "a missing field is left to the site: {missing:?}"
    );
    cli.signal("p-2", "confirmed", &false).await.unwrap();
    assert_eq!(stored_signals(&cli, "p-2").await, ["approval", "confirmed"]);
    // Forced, an unknown name is stored.
    cli.force_signal("p-2", "escalate", &1).await.unwrap();
    assert_eq!(stored_signals(&cli, "p-2").await.len(), 3);
}

async fn a_computed_wait_name_takes_any_name(url: &str) {
    let rt = worker(url).await;
    rt.start(stepper, "s-1", 7).await.unwrap();
    rt.run_until_idle().await.unwrap();
    let cli = client(url).await;
    cli.signal("s-1", "step-7", &70u32).await.unwrap();
    assert_eq!(
        within(rt.handle(stepper, "s-1").result()).await.unwrap(),
        70
    );
    cli.start(stepper, "s-2", 8).await.unwrap();
    cli.signal("s-2", "anything", &1u32).await.unwrap();
    rt.close().await;
}

on_stores!(
    "signames",
    [sqlite, postgres]:
    a_misspelt_name_is_refused_and_nothing_is_stored,
    a_payload_is_checked_before_the_run_waits,
    a_computed_wait_name_takes_any_name,
);

/// The in-memory store: one store shared by a worker and a client.
#[tokio::test]
async fn in_memory_a_misspelt_name_is_refused() {
    let rt = Runtime::in_memory();
    rt.start(purchase, "p-1", "desk".into()).await.unwrap();
    rt.run_until_idle().await.unwrap();
    let cli = Runtime::builder()
        .store(rt.store())
        .client_only()
        .in_memory();
    let refused = cli.signal("p-1", "aproval", &1).await.unwrap_err();
    assert!(
        matches!(refused, Error::UnknownSignal { .. }),
        "{refused:?}"
    );
    rt.force_signal("p-1", "aproval", &1).await.unwrap();
}
