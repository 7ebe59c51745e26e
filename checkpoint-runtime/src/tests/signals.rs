//! Signals: `ctx.wait_for` suspends a run durably and a signal resumes it;
//! one sent early is consumed without suspending; a payload of the wrong
//! type is refused or rejected while the run keeps waiting.

use std::time::Duration;

use super::within;
use super::workflows::{approval_flow, approved, Approval};
use crate::{Error, Event, Runtime, Status};

#[tokio::test]
async fn wait_for_suspends_and_resumes_with_signal() {
    let rt = Runtime::in_memory();
    let h = rt.start(approval_flow, "v1", "acme".into()).await.unwrap();
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
    rt2.register(approval_flow);
    rt2.signal("v1", "approval", &approved()).await.unwrap();
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
    let h = rt.start(approval_flow, "v2", "acme".into()).await.unwrap();
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
    let h = rt.start(approval_flow, "v3", "acme".into()).await.unwrap();
    within(rt.run_until_idle()).await.unwrap();
    // Sent to the waiting run from a process that ran its wait site: refused
    // at once, with the site's own decoder, and not stored. The macro keys
    // an unlabelled wait on a literal signal name by its call.
    let refused = rt
        .signal("v3", "approval", &"not an approval")
        .await
        .unwrap_err();
    let Error::SignalPayload { detail, .. } = &refused else {
        panic!("{refused:?}");
    };
    assert!(
        detail.contains(
            "waits for it at site `wait_for(\"approval\")`, and the signal was not stored"
        ),
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
    let h4 = rt.start(approval_flow, "v4", "beta".into()).await.unwrap();
    rt.store()
        .put_signal("v4", "approval", serde_json::to_vec(&42).unwrap())
        .await
        .unwrap();
    within(rt.run_until_idle()).await.unwrap();
    assert!(matches!(h4.status().await.unwrap(), Status::Waiting { .. }));
    // A good one completes both.
    rt.signal("v3", "approval", &approved()).await.unwrap();
    rt.signal("v4", "approval", &approved()).await.unwrap();
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
    let h = rt.start(approval_flow, "v5", "acme".into()).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(100), h.result()).await;
    assert!(waited.is_err(), "result() must wait for the signal");
    let sender = rt.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        sender.signal("v5", "approval", &approved()).await.unwrap();
    });
    assert_eq!(
        within(h.result()).await.unwrap(),
        Ok("acme: approved".into())
    );
}
