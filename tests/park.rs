//! Parking across real processes, on one SQLite file: a deploy whose code
//! cannot resume a waiting run parks it (untouched, with the signal it was
//! given), and the old code in another process, a rollback, resumes it by
//! itself and finishes it as the uninterrupted run would, every side effect
//! once.

mod common;

use std::collections::VecDeque;
use std::time::Duration;

use checkpoint_runtime::prelude::*;
use common::{effects_of, read_log, Proc, TempDir};
use serde::{Deserialize, Serialize};

const WORKER: &str = env!("CARGO_BIN_EXE_checkpoint-test-worker");
const RUN: &str = "story-1";

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct StoryInput {
    items: Vec<String>,
    sleep_ms: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Approval {
    approved: bool,
    by: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct StoryOutput {
    processed: Vec<String>,
    approved_by: String,
    finished_by: String,
}

/// The worker binary's `story` after a deploy that keeps `processed` in a
/// `VecDeque`: same sites, one field of another type.
#[workflow(name = "story")]
async fn story_next(ctx: &Ctx, input: StoryInput) -> StoryOutput {
    let mut processed = VecDeque::new();
    for item in &input.items {
        processed.push_back(format!("{item} by {}", ctx.worker_id()));
        checkpoint!("item");
    }
    let approval: Approval = ctx.wait_for("approval").await;
    ctx.sleep(Duration::from_millis(input.sleep_ms)).await;
    let finished_by = ctx.worker_id().to_owned();
    checkpoint!("final");
    StoryOutput {
        processed: processed.into(),
        approved_by: approval.by,
        finished_by,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_parks_a_waiting_run_and_a_rollback_in_another_process_finishes_it() {
    let dir = TempDir::new("park");
    let (db, log) = (dir.db(), dir.log().to_string_lossy().into_owned());
    let mut old = Proc::spawn(
        WORKER,
        &dir,
        "start",
        &[
            "start",
            "--db",
            &db,
            "--id",
            RUN,
            "--log",
            &log,
            "--worker-id",
            "old",
        ],
    );
    assert_eq!(
        old.finish().last().map(String::as_str),
        Some("WAITING approval")
    );

    // The deploy: approved through it, claimed by it, parked by it.
    let next = Runtime::builder()
        .worker_id("next")
        .open(&db)
        .await
        .unwrap();
    next.register(story_next);
    next.signal(
        RUN,
        "approval",
        &Approval {
            approved: true,
            by: "ada".into(),
        },
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(30), next.run_until_idle())
        .await
        .unwrap()
        .unwrap();
    match next.status(RUN).await.unwrap() {
        Status::Incompatible {
            workflow,
            field,
            detail,
            ..
        } => {
            // Type names carry their crate's path: this test's `StoryInput`
            // is another type than the worker binary's, checked first.
            assert_eq!(workflow, "story");
            assert!(
                field == "input" || field == "processed",
                "{field}: {detail}"
            );
            assert!(
                detail.contains("StoryInput") || detail.contains("VecDeque"),
                "{detail}"
            );
        }
        other => panic!("not parked: {other:?}"),
    }
    let refused = next.check_compatibility().await.unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    next.close().await;

    // The rollback, in another process: it finds the parked run by itself.
    let mut back = Proc::spawn(
        WORKER,
        &dir,
        "resume",
        &[
            "resume",
            "--db",
            &db,
            "--id",
            RUN,
            "--log",
            &log,
            "--worker-id",
            "old",
        ],
    );
    let lines = back.finish();
    let result = lines
        .iter()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no result: {lines:?}\n{}", back.describe()));
    let out: serde_json::Value = serde_json::from_str(result).unwrap();
    assert_eq!(out["approved_by"], "ada", "{out}");
    assert_eq!(out["processed"].as_array().map(Vec::len), Some(3), "{out}");
    // Every side effect once, all by the old code (the deploy ran none).
    let effects = effects_of(&read_log(&dir.log()));
    let texts: Vec<&str> = effects.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        texts,
        [
            "begin",
            "process item-1",
            "process item-2",
            "process item-3",
            "after approval by ada",
            "after sleep",
            "end"
        ],
        "{effects:?}"
    );
    assert!(effects.iter().all(|(w, _)| w == "old"), "{effects:?}");
}
