//! `Runtime::retry`: a run that failed (here: a bug that panics at one step,
//! every attempt) resumes after the fix from its latest checkpoint, as a new
//! attempt: the steps before it are not done again, and the result is what
//! an uninterrupted run of the fixed code computes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::SideEffects;

/// Whether the bug is fixed (a deploy, in a real service).
struct Fixed(AtomicBool);

/// An order pipeline: each step's effect is recorded once it is done, and
/// the totals per SKU grow in a map.
#[workflow]
async fn pipeline(ctx: &Ctx, skus: Vec<String>) -> BTreeMap<String, u32> {
    let mut totals: BTreeMap<String, u32> = BTreeMap::new();
    for (i, sku) in skus.iter().enumerate() {
        if sku == "bad" && !ctx.resource::<Arc<Fixed>>().0.load(Ordering::SeqCst) {
            panic!("unparseable sku at {i}");
        }
        *totals.entry(sku.clone()).or_insert(0) += i as u32 + 1;
        ctx.resource::<SideEffects>().record(format!("step {i}"));
        checkpoint!("step");
    }
    totals
}

fn skus() -> Vec<String> {
    ["a", "b", "a", "bad", "c"].map(String::from).to_vec()
}

#[tokio::test]
async fn a_failed_run_resumes_from_its_latest_checkpoint_after_a_fix() {
    let dir = std::env::temp_dir().join(format!("cp-retry-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("runs.db").to_string_lossy().into_owned();
    let _ = std::fs::remove_file(&db);
    let fixed = Arc::new(Fixed(AtomicBool::new(false)));
    let effects = SideEffects::new();
    let rt = Runtime::builder()
        .max_attempts(2)
        .resource(fixed.clone())
        .resource(effects.clone())
        .open(&db)
        .await
        .unwrap();
    let h = rt.start(pipeline, "order-1", skus()).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(30), h.result())
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::Panicked { .. }), "{err}");
    assert!(matches!(h.status().await.unwrap(), Status::Failed { .. }));
    let before = rt.checkpoints("order-1").await.unwrap().len();
    assert_eq!(before, 3);
    // Retrying before the fix fails the same way; the checkpoints stay.
    rt.retry("order-1").await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(30), h.result())
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::Panicked { .. }), "{err}");
    // The fix, then the retry: steps 0-2 are not done again.
    fixed.0.store(true, Ordering::SeqCst);
    rt.retry("order-1").await.unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), h.result())
        .await
        .unwrap()
        .unwrap();
    let expected: BTreeMap<String, u32> = [("a", 4), ("b", 2), ("bad", 4), ("c", 5)]
        .map(|(k, v)| (k.to_owned(), v))
        .into();
    assert_eq!(out, expected);
    for i in 0..5 {
        assert_eq!(
            effects.count(&format!("step {i}")),
            1,
            "step {i}: {:?}",
            effects.all()
        );
    }
    let retried = rt
        .history("order-1")
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e, Event::Retried { reason, .. } if reason.contains("operator")))
        .count();
    assert_eq!(retried, 2);
    // A completed run is not retried.
    assert!(matches!(
        rt.retry("order-1").await,
        Err(Error::NotRetryable { .. })
    ));
    rt.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
