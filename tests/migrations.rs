//! Migrations: new code takes the checkpoints older code stored, as each
//! `#[migrate(..)]` says (a value for a field they lack, an old name, an
//! old type), and refuses, parking the run, what no migration covers.
//! (Across processes, on SQLite and PostgreSQL: `tests/evolution.rs`.)

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::SideEffects;

mod v1 {
    use super::*;

    #[workflow(name = "order")]
    pub async fn order(ctx: &Ctx, n: u32) -> String {
        let count: u32 = n * 2;
        let label: String = format!("order-{n}");
        let approved: bool = ctx.wait_for("go").await;
        format!("v1 {count} {label} {approved}")
    }
}

fn widen(old: u32) -> u64 {
    u64::from(old) * 1000
}

mod v2 {
    use super::*;

    /// `count` became a `u64` (older checkpoints: a `u32`, times 1000),
    /// `label` is `title`, and two locals are new.
    #[workflow(name = "order")]
    pub async fn order(ctx: &Ctx, n: u32) -> String {
        #[migrate(from = u32, with = widen)]
        let count: u64 = u64::from(n) * 2;
        #[migrate(renamed_from = "label")]
        let title: String = format!("order-{n}");
        #[migrate(value = 3)]
        let priority: u8 = u8::from(n > 100) + 1;
        #[migrate(default)]
        let tags: Vec<String> = vec!["new".to_owned()];
        let approved: bool = ctx.wait_for("go").await;
        ctx.resource::<SideEffects>().record("v2 ran");
        format!("v2 {count} {title} {priority} {tags:?} {approved}")
    }
}

mod v2_wrong_from {
    use super::*;

    fn from_i8(old: i8) -> u64 {
        old as u64
    }

    #[workflow(name = "order")]
    pub async fn order(ctx: &Ctx, n: u32) -> String {
        #[migrate(from = i8, with = from_i8)]
        let count: u64 = u64::from(n) * 2;
        let label: String = format!("order-{n}");
        let approved: bool = ctx.wait_for("go").await;
        ctx.resource::<SideEffects>().record("v2 ran");
        format!("v2 {count} {label} {approved}")
    }
}

mod v2_unmigrated_addition {
    use super::*;

    #[workflow(name = "order")]
    pub async fn order(ctx: &Ctx, n: u32) -> String {
        let count: u32 = n * 2;
        #[migrate(renamed_from = "label")]
        let title: String = format!("order-{n}");
        let extra: u32 = n + 1;
        let approved: bool = ctx.wait_for("go").await;
        ctx.resource::<SideEffects>().record("v2 ran");
        format!("v2 {count} {title} {extra} {approved}")
    }
}

mod v2_dropped_field {
    use super::*;

    #[workflow(name = "order")]
    pub async fn order(ctx: &Ctx, n: u32) -> String {
        #[migrate(from = u32, with = widen)]
        let count: u64 = u64::from(n) * 2;
        let approved: bool = ctx.wait_for("go").await;
        ctx.resource::<SideEffects>().record("v2 ran");
        format!("v2 {count} {approved}")
    }
}

/// A run of v1 waiting for `go` in a store; a runtime with `code` over the
/// same store is given the signal and runs.
async fn upgrade<I: IntoWorkflow>(code: I) -> (Runtime, SideEffects) {
    let old = Runtime::in_memory();
    old.start(v1::order, "o-1", 5).await.expect("start");
    old.run_until_idle().await.expect("run");
    assert!(matches!(
        old.status("o-1").await.unwrap(),
        Status::Waiting { .. }
    ));
    let effects = SideEffects::new();
    let new = Runtime::builder()
        .store(old.store())
        .resource(effects.clone())
        .in_memory();
    new.register(code);
    assert_eq!(
        new.check_compatibility().await.unwrap().len(),
        new_refusals_expected(&new).await,
        "the check and the resume agree"
    );
    new.signal("o-1", "go", &true).await.expect("signal");
    new.run_until_idle().await.expect("run");
    (new, effects)
}

/// What the check lists (computed once more, for `upgrade`'s assertion).
async fn new_refusals_expected(rt: &Runtime) -> usize {
    rt.check_compatibility().await.unwrap().len()
}

fn parked(status: Status) -> (String, String, String) {
    match status {
        Status::Incompatible {
            site,
            field,
            detail,
            ..
        } => (site, field, detail),
        other => panic!("expected a parked run, got {other:?}"),
    }
}

#[tokio::test]
async fn each_migration_gives_the_old_checkpoint_what_it_says() {
    let (rt, effects) = upgrade(v2::order).await;
    assert!(rt.check_compatibility().await.unwrap().is_empty());
    let out = rt.handle(v2::order, "o-1").result().await.unwrap();
    // count: widen(10); title: from `label`; priority: the value; tags: default.
    assert_eq!(out, "v2 10000 order-5 3 [] true");
    assert_eq!(effects.all(), vec!["v2 ran".to_owned()]);
}

#[tokio::test]
async fn a_checkpoint_the_new_code_stored_needs_no_migration() {
    let rt = Runtime::builder().resource(SideEffects::new()).in_memory();
    rt.start(v2::order, "o-2", 5).await.unwrap();
    rt.run_until_idle().await.unwrap();
    // Resumed by another runtime (the same code): the fields are found
    // under their new names and types, and no migration applies.
    let again = Runtime::builder()
        .store(rt.store())
        .resource(SideEffects::new())
        .in_memory();
    again.register(v2::order);
    again.signal("o-2", "go", &false).await.unwrap();
    let out = again.handle(v2::order, "o-2").result().await.unwrap();
    assert_eq!(out, "v2 10 order-5 1 [\"new\"] false");
}

#[tokio::test]
async fn a_migration_from_another_type_than_the_stored_one_parks_the_run() {
    let (rt, effects) = upgrade(v2_wrong_from::order).await;
    let (site, field, detail) = parked(rt.status("o-1").await.unwrap());
    assert_eq!(
        (site.as_str(), field.as_str()),
        ("wait_for(\"go\")", "count")
    );
    assert!(
        detail.contains("stored as `u32`") && detail.contains("converts from `i8`"),
        "{detail}"
    );
    assert!(effects.all().is_empty(), "no code of the deploy ran");
    let listed = rt.check_compatibility().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].field, "count");
}

#[tokio::test]
async fn a_field_no_migration_covers_parks_the_run_with_a_hint() {
    let (rt, effects) = upgrade(v2_unmigrated_addition::order).await;
    let (_, field, detail) = parked(rt.status("o-1").await.unwrap());
    assert_eq!(field, "extra");
    assert!(detail.contains("#[migrate(default)]"), "{detail}");
    assert!(effects.all().is_empty());
}

#[tokio::test]
async fn a_stored_field_the_code_dropped_parks_the_run() {
    let (rt, effects) = upgrade(v2_dropped_field::order).await;
    let (_, field, detail) = parked(rt.status("o-1").await.unwrap());
    assert_eq!(field, "label");
    assert!(detail.contains("no longer restores"), "{detail}");
    assert!(effects.all().is_empty());
}
