//! Resuming a checkpoint written by another version of the code: a run whose
//! saved fields or site no longer match is parked before any user code runs
//! (`Status::Incompatible`, naming the workflow, the site and the field),
//! untouched, and resumes by itself once matching code is registered (a
//! rollback); a compatible edit resumes.

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
            signal: "go".into(),
            deadline: None,
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

/// The parked run's workflow, site, field and why, as one text.
fn parked(status: Status) -> String {
    match status {
        Status::Incompatible {
            workflow,
            site,
            field,
            detail,
        } => format!("{workflow} {site} {field} {detail}"),
        other => panic!("expected a parked run, got {other:?}"),
    }
}

/// Rolls back: v1 registered on another runtime over the same store resumes
/// the parked run by itself, with the signal the refused attempt was given,
/// to what the uninterrupted v1 run computes.
async fn roll_back(rt: &Runtime) {
    rt.shutdown();
    let back = Runtime::builder().store(rt.store()).in_memory();
    back.register(v1::order);
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        back.handle(v1::order, "o-1").result(),
    )
    .await
    .expect("the rollback resumed the run")
    .unwrap();
    assert_eq!(out, "v1 10 true");
    let history = back.history("o-1").await.unwrap();
    assert!(
        history.iter().any(|e| matches!(e, Event::Parked { .. })),
        "{history:?}"
    );
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
async fn changed_field_type_parks_the_run_until_a_rollback() {
    let (rt, effects) = upgrade(v2_field_type::order).await;
    let error = parked(rt.status("o-1").await.unwrap());
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
    // Listed as parked, its checkpoint untouched.
    let listed = rt
        .runs(RunFilter::new().status(StatusKind::Incompatible))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    roll_back(&rt).await;
}

#[tokio::test]
async fn renamed_field_parks_the_run_until_a_rollback() {
    let (rt, effects) = upgrade(v2_field_renamed::order).await;
    let error = parked(rt.status("o-1").await.unwrap());
    assert!(
        error.contains("order") && error.contains("count"),
        "{error}"
    );
    assert!(effects.all().is_empty());
    roll_back(&rt).await;
}

#[tokio::test]
async fn vanished_site_parks_the_run_until_a_rollback() {
    let (rt, effects) = upgrade(v2_site_gone::order).await;
    let error = parked(rt.status("o-1").await.unwrap());
    // v1's wait site is unlabelled: it is named after its signal.
    assert!(
        error.contains("order") && error.contains("wait_for(\"go\")"),
        "{error}"
    );
    assert!(effects.all().is_empty());
    roll_back(&rt).await;
}

/// The pre-deploy check lists the runs the new code would park, naming
/// site and field, runs no user code and writes nothing; code that fits
/// (the old one, a compatible edit) passes.
#[tokio::test]
async fn the_pre_deploy_check_lists_what_new_code_would_park_and_changes_nothing() {
    let old = Runtime::in_memory();
    old.start(v1::order, "o-1", 5).await.unwrap();
    old.start(v1::order, "o-2", 6).await.unwrap();
    old.run_until_idle().await.unwrap();
    old.shutdown();
    let history_before = old.history("o-1").await.unwrap().len();
    let check = |code: &dyn Fn(&Runtime)| {
        let effects = SideEffects::new();
        let rt = Runtime::builder()
            .store(old.store())
            .resource(effects.clone())
            .client_only()
            .in_memory();
        code(&rt);
        (rt, effects)
    };
    for (name, register) in [
        (
            "v1",
            &(|rt: &Runtime| rt.register(v1::order)) as &dyn Fn(&Runtime),
        ),
        ("v2_same_fields", &|rt: &Runtime| {
            rt.register(v2_same_fields::order)
        }),
    ] {
        let (rt, effects) = check(register);
        assert_eq!(rt.check_compatibility().await.unwrap(), vec![], "{name}");
        checkpoint_runtime::testing::assert_compatible(&rt).await;
        assert!(effects.all().is_empty(), "{name}: user code ran");
    }
    let (rt, effects) = check(&|rt: &Runtime| rt.register(v2_field_type::order));
    let refused = rt.check_compatibility().await.unwrap();
    let runs: Vec<&str> = refused.iter().map(|r| r.run.as_str()).collect();
    assert_eq!(runs, ["o-1", "o-2"]);
    assert_eq!(refused[0].field, "count");
    assert!(refused[0].detail.contains("u64"), "{}", refused[0]);
    assert!(effects.all().is_empty(), "user code ran");
    let (rt, _) = check(&|_: &Runtime| {});
    let refused = rt.check_compatibility().await.unwrap();
    assert!(
        refused.iter().all(|r| r.detail.contains("not registered")),
        "{refused:?}"
    );
    // Nothing was written: the runs still wait, their histories unchanged.
    assert_eq!(old.history("o-1").await.unwrap().len(), history_before);
    assert!(matches!(
        old.status("o-1").await.unwrap(),
        Status::Waiting { .. }
    ));
    let panicked = tokio::spawn(async move {
        let rt = Runtime::builder()
            .store(old.store())
            .client_only()
            .in_memory();
        rt.register(v2_field_renamed::order);
        checkpoint_runtime::testing::assert_compatible(&rt).await;
    })
    .await
    .unwrap_err();
    assert!(panicked.is_panic());
}

/// A field whose type kept its name but not its definition (its serde
/// format, stored with the field, differs: say two of its fields were
/// swapped, which postcard bytes would decode silently into other values)
/// is refused and the run parked, never resumed with those values. The
/// stored format is altered through the store here: one binary cannot hold
/// two definitions of one type path.
#[tokio::test]
async fn a_field_whose_type_definition_changed_under_its_name_is_parked() {
    use checkpoint_runtime::store::{ClaimRequest, Release};
    let rt = Runtime::in_memory();
    rt.start(v1::order, "o-1", 5).await.unwrap();
    rt.run_until_idle().await.unwrap();
    rt.shutdown();
    let store = rt.store();
    store
        .put_signal("o-1", "go", b"true".to_vec())
        .await
        .unwrap();
    let claimed = store
        .claim(&ClaimRequest {
            worker: "tamper".into(),
            instance: "t1".into(),
            workflows: vec!["order"],
            ttl: std::time::Duration::from_secs(30),
            limit: 1,
            only: Some("o-1".into()),
            revisit_parked: false,
            clock_now: std::time::SystemTime::now(),
            queues: Default::default(),
        })
        .await
        .unwrap()
        .claimed
        .remove(0);
    let cp = claimed
        .checkpoint
        .clone()
        .expect("the wait site's checkpoint");
    let count = cp.fields.iter().position(|f| f.name == "count").unwrap();
    assert!(
        cp.schemas.get(count).is_some_and(Option::is_some),
        "no schema stored"
    );
    let mut keys: Vec<Option<std::borrow::Cow<'static, str>>> = cp
        .schemas
        .iter()
        .map(|k| k.as_deref().map(|k| k.to_owned().into()))
        .collect();
    keys[count] = Some("00000000deadbeef".into());
    let mut altered = (*cp)
        .clone()
        .with_schemas(std::sync::Arc::<[_]>::from(keys));
    altered.seq = cp.seq + 1;
    store
        .save_checkpoint(&claimed.lease, std::sync::Arc::new(altered), None)
        .await
        .unwrap();
    store
        .release("o-1", &claimed.lease, Release::Suspend)
        .await
        .unwrap();
    store
        .put_signal("o-1", "go", b"true".to_vec())
        .await
        .unwrap();

    let next = Runtime::builder().store(store).in_memory();
    next.register(v1::order);
    next.run_until_idle().await.unwrap();
    match next.status("o-1").await.unwrap() {
        Status::Incompatible { field, detail, .. } => {
            assert_eq!(field, "count");
            assert!(detail.contains("serde format"), "{detail}");
        }
        other => panic!("not parked: {other:?}"),
    }
}

mod versions {
    use super::*;

    /// Version 2 keeps the count as a `u64`: version 1's checkpoints do not
    /// fit it.
    #[workflow(name = "order", version = 2)]
    pub async fn order_v2(ctx: &Ctx, n: u32) -> String {
        let count: u64 = u64::from(n) * 2;
        let approved: bool = ctx.wait_for("go").await;
        format!("v2 {count} {approved}")
    }

    /// Version 3, a fix with version 1's fields: version 1's runs roll
    /// forward onto it.
    #[workflow(name = "order", version = 3)]
    pub async fn order_v3(ctx: &Ctx, n: u32) -> String {
        let count: u32 = n * 2;
        let approved: bool = ctx.wait_for("go").await;
        format!("v3 {count} {approved}")
    }
}

fn resumed_versions(history: &[Event]) -> Vec<u32> {
    history
        .iter()
        .filter_map(|e| match e {
            Event::Resumed { version, .. } => Some(*version),
            _ => None,
        })
        .collect()
}

/// Versions side by side: each run starts on the version that started it
/// and resumes on the highest registered version its checkpoint fits, so an
/// incompatible version leaves old runs on the old one and a compatible fix
/// rolls them forward; the history says which version ran.
#[tokio::test]
async fn versions_side_by_side_each_run_resumes_on_the_highest_that_fits() {
    let rt = Runtime::in_memory();
    rt.register(v1::order);
    rt.register(versions::order_v2);
    rt.start(v1::order, "old", 5).await.unwrap();
    rt.start(versions::order_v2, "new", 6).await.unwrap();
    rt.run_until_idle().await.unwrap();
    for id in ["old", "new"] {
        rt.signal(id, "go", &true).await.unwrap();
    }
    rt.run_until_idle().await.unwrap();
    assert_eq!(
        rt.handle(v1::order, "old").result().await.unwrap(),
        "v1 10 true"
    );
    assert_eq!(
        rt.handle(versions::order_v2, "new").result().await.unwrap(),
        "v2 12 true"
    );
    assert_eq!(resumed_versions(&rt.history("old").await.unwrap()), [1]);
    assert_eq!(resumed_versions(&rt.history("new").await.unwrap()), [2]);

    // The fix: registered beside the others, it takes version 1's runs.
    rt.start(v1::order, "fixed", 7).await.unwrap();
    rt.run_until_idle().await.unwrap();
    rt.register(versions::order_v3);
    rt.signal("fixed", "go", &false).await.unwrap();
    rt.run_until_idle().await.unwrap();
    assert_eq!(
        rt.handle(v1::order, "fixed").result().await.unwrap(),
        "v3 14 false"
    );
    assert_eq!(resumed_versions(&rt.history("fixed").await.unwrap()), [3]);
}

/// A run that has no checkpoint yet starts only on the version that
/// started it: without it registered, it is parked (and listed by the
/// pre-deploy check), and it starts once that version is registered.
#[tokio::test]
async fn a_run_without_a_checkpoint_waits_for_the_version_that_started_it() {
    let client = Runtime::builder().client_only().in_memory();
    client.start(v1::order, "o-1", 5).await.unwrap();
    let store = client.store();
    let rt = Runtime::builder().store(store.clone()).in_memory();
    rt.register(versions::order_v2);
    let refused = rt.check_compatibility().await.unwrap();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].detail.contains("started by version 1"),
        "{}",
        refused[0]
    );
    rt.run_until_idle().await.unwrap();
    assert!(
        matches!(rt.status("o-1").await.unwrap(), Status::Incompatible { .. }),
        "{:?}",
        rt.status("o-1").await
    );
    rt.register(v1::order);
    rt.run_until_idle().await.unwrap();
    assert_eq!(
        rt.status("o-1").await.unwrap(),
        Status::Waiting {
            signal: "go".into(),
            deadline: None
        }
    );
}
