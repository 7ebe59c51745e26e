//! Resuming a checkpoint written by another version of the code: a run whose
//! saved fields or site no longer match is refused before any user code runs,
//! with an error naming the workflow, the site and the field; a compatible
//! edit resumes.

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::SideEffects;

mod v1 {
    use super::*;

    #[workflow(name = "order")]
    pub async fn order(ctx: &Ctx, n: u32) -> String {
        let count: u32 = n * 2;
        let approved: bool = ctx.wait_for("go").await;
        format!("v1 {count} {approved}")
    }
}

mod v2_same_fields {
    use super::*;

    // The code around the site changed, the saved fields did not.
    #[workflow(name = "order")]
    pub async fn order(ctx: &Ctx, n: u32) -> String {
        let count: u32 = n * 2;
        let approved: bool = ctx.wait_for("go").await;
        ctx.resource::<SideEffects>().record("v2 ran");
        format!("v2 {count} {approved}")
    }
}

mod v2_field_type {
    use super::*;

    #[workflow(name = "order")]
    pub async fn order(ctx: &Ctx, n: u32) -> String {
        let count: u64 = n as u64 * 2;
        let approved: bool = ctx.wait_for("go").await;
        ctx.resource::<SideEffects>().record("v2 ran");
        format!("v2 {count} {approved}")
    }
}

mod v2_field_renamed {
    use super::*;

    #[workflow(name = "order")]
    pub async fn order(ctx: &Ctx, n: u32) -> String {
        let total: u32 = n * 2;
        let approved: bool = ctx.wait_for("go").await;
        ctx.resource::<SideEffects>().record("v2 ran");
        format!("v2 {total} {approved}")
    }
}

mod v2_site_gone {
    use super::*;

    #[workflow(name = "order")]
    pub async fn order(ctx: &Ctx, n: u32) -> String {
        checkpoint!("first");
        let count: u32 = n * 2;
        checkpoint!("second");
        ctx.resource::<SideEffects>().record("v2 ran");
        format!("v2 {count}")
    }
}

/// Runs v1 until it waits, then resumes the run with `resume` (another
/// version of the code) in a fresh runtime over the same store. Returns the
/// runtime, and what the new version's code recorded.
async fn upgrade<I: IntoWorkflow>(resume: I) -> (Runtime, SideEffects) {
    let old = Runtime::in_memory();
    old.start(v1::order, "o-1", 5).await.expect("start");
    old.run_until_idle().await.expect("run");
    assert_eq!(
        old.status("o-1").await.unwrap(),
        Status::Waiting {
            signal: "go".into()
        }
    );

    let effects = SideEffects::new();
    let new = Runtime::builder()
        .store(old.store())
        .resource(effects.clone())
        .in_memory();
    new.register(resume);
    new.signal("o-1", "go", &true).await.expect("signal");
    new.run_until_idle().await.expect("run");
    (new, effects)
}

fn failure(status: Status) -> String {
    match status {
        Status::Failed { error } => error,
        other => panic!("expected a failed run, got {other:?}"),
    }
}

#[tokio::test]
async fn compatible_edit_resumes() {
    let (rt, effects) = upgrade(v2_same_fields::order).await;
    assert_eq!(
        rt.handle(v2_same_fields::order, "o-1")
            .result()
            .await
            .unwrap(),
        "v2 10 true"
    );
    assert_eq!(effects.all(), vec!["v2 ran".to_string()]);
}

#[tokio::test]
async fn changed_field_type_is_refused_before_user_code() {
    let (rt, effects) = upgrade(v2_field_type::order).await;
    let error = failure(rt.status("o-1").await.unwrap());
    for part in ["order", "count", "u32", "u64"] {
        assert!(error.contains(part), "`{part}` missing from: {error}");
    }
    assert!(
        effects.all().is_empty(),
        "user code ran: {:?}",
        effects.all()
    );
    let err = rt
        .handle(v2_field_type::order, "o-1")
        .result()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
}

#[tokio::test]
async fn renamed_field_is_refused_before_user_code() {
    let (rt, effects) = upgrade(v2_field_renamed::order).await;
    let error = failure(rt.status("o-1").await.unwrap());
    assert!(
        error.contains("order") && error.contains("count"),
        "{error}"
    );
    assert!(effects.all().is_empty());
}

#[tokio::test]
async fn vanished_site_is_refused_before_user_code() {
    let (rt, effects) = upgrade(v2_site_gone::order).await;
    let error = failure(rt.status("o-1").await.unwrap());
    // v1's wait site is unlabelled: its key is its position, `#1`.
    assert!(error.contains("order") && error.contains("#1"), "{error}");
    assert!(effects.all().is_empty());
}
