//! The crash harness (`testing`): it crashes a workflow after (and, when
//! asked, before) every checkpoint, resumes it, and reports repeated
//! effects and a different result.

use super::within;
use super::workflows::{approval_flow, approved, counter, timers};
use crate::testing::{CrashMode, Harness};
use crate::{workflow, Error};

#[tokio::test]
async fn harness_checks_every_checkpoint() {
    let report = within(crate::testing::check_every_checkpoint(counter, 5))
        .await
        .unwrap();
    assert_eq!(report.checkpoints, 5);
    assert_eq!(report.output, serde_json::json!(10));
    assert_eq!(report.crash_points.len(), 5);
    // Resumed right after the checkpoint, nothing before it runs again.
    for p in &report.crash_points {
        assert_eq!(p.mode, CrashMode::AfterCheckpoint);
        assert_eq!(p.site, "step");
        assert!(p.duplicated.is_empty(), "{report}");
    }
    let text = report.to_string();
    assert!(text.contains("checkpoint 3/5"), "{text}");
}

#[tokio::test]
async fn harness_reports_repeated_effects_when_crashing_before_checkpoints() {
    let report = within(
        Harness::new(counter)
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
    assert!(
        before[1]
            .duplicated
            .iter()
            .any(|d| d.effect == "add:1" && d.got == 2 && d.expected == 1),
        "{report}"
    );
}

#[tokio::test]
async fn harness_delivers_scripted_signals() {
    let report = within(
        Harness::new(approval_flow)
            .input("acme".into())
            .signal("approval", &approved())
            .run(),
    )
    .await
    .unwrap();
    assert_eq!(report.checkpoints, 1);
    assert_eq!(report.output, serde_json::json!({"Ok": "acme: approved"}));
    assert!(report.duplicated_effects().is_empty(), "{report}");

    let err = within(Harness::new(approval_flow).input("acme".into()).run())
        .await
        .unwrap_err();
    assert!(err.to_string().contains(".signal(\"approval\""), "{err}");
}

/// Weights whose bonus serde does not save: it is its default (0) once
/// decoded from a checkpoint.
#[derive(serde::Serialize, serde::Deserialize)]
struct Weights {
    base: u64,
    #[serde(skip)]
    bonus: u64,
}

/// `counter` weighed by a `#[transient]` closure that borrows `weights`:
/// built once, the closure keeps borrowing the value as it was, so the
/// uninterrupted run keeps the bonus, while a resumed run decodes
/// `weights` (bonus 0) and builds the closure again from it
/// (docs/exactness.md, the open row on closures).
#[workflow(name = "forgetful")]
async fn forgetful_counter(ctx: &Ctx, n: u64) -> u64 {
    let weights = Weights { base: 1, bonus: 1 };
    #[transient]
    let weigh = |i: u64| i * weights.base + weights.bonus;
    let mut total = 0;
    for i in 0..n {
        total += weigh(i);
        checkpoint!("step");
    }
    total
}

#[tokio::test]
async fn harness_catches_state_lost_on_resume() {
    let err = within(crate::testing::check_every_checkpoint(forgetful_counter, 4))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::CheckFailed { .. }), "{msg}");
    // Resumed after checkpoint 1, the bonus is gone.
    assert!(
        msg.contains("checkpoint 1/4") && msg.contains("(`step`)"),
        "{msg}"
    );
    assert!(msg.contains("expected 10"), "{msg}");
}

#[tokio::test]
async fn timers_survive_crashes_in_the_harness() {
    let report = within(Harness::new(timers).input(20).signal("ping", &5u32).run())
        .await
        .unwrap();
    assert_eq!(report.checkpoints, 2);
    assert_eq!(report.output, serde_json::json!(["woke", 5]));
}
