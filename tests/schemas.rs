//! Checkpoint fields shown as JSON by a runtime that does not know the
//! workflow (only the store is shared), on the in-memory and SQLite stores.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::store::MemoryStore;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Vendor {
    name: String,
    score: i32,
    tags: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
enum Stage {
    Draft,
    Review { by: String, round: u8 },
    Approved(u64),
    Blocked(String, Option<Box<Stage>>),
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
enum Outcome {
    Pass,
    Fail(Problem),
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
enum Problem {
    Missing { field: String },
    Late(u32),
}

/// A count of pairs, which must be even: its `Deserialize` impl checks, so
/// the schema tracer's placeholder (1) is refused and the type has no
/// schema, though its values save and load as usual. (`serde_json::Value`,
/// the usual type without a schema, is refused at save: postcard cannot read
/// it back.)
#[derive(Serialize, Clone, Debug, PartialEq)]
struct Pairs(u32);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        if n % 2 == 1 {
            return Err(serde::de::Error::custom("an odd count of pairs"));
        }
        Ok(Pairs(n))
    }
}

/// What the workflow held at each checkpoint, by local name, as
/// `serde_json::to_value` renders it.
#[derive(Default)]
struct Recorder(Mutex<Vec<BTreeMap<String, Value>>>);

impl Recorder {
    fn record(&self, locals: Vec<(&str, Value)>) {
        let snapshot = locals.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        self.0.lock().unwrap().push(snapshot);
    }
}

fn v<T: Serialize>(x: &T) -> Value {
    serde_json::to_value(x).unwrap()
}

#[workflow]
async fn vendor_review(ctx: &Ctx, vendor: Vendor) -> u32 {
    #[transient]
    let rec = ctx.resource::<Arc<Recorder>>().clone();
    let mut stage = Stage::Draft;
    // A `BTreeMap`: the recorder below passes it to a helper, which may
    // observe a `HashMap`'s order, so a `HashMap` here is refused at save
    // (`tests/value_exactness.rs`).
    let mut notes: BTreeMap<String, Vec<Option<i64>>> = BTreeMap::new();
    let mut checks: Vec<Outcome> = Vec::new();
    let mut last: Option<Stage> = None;
    // No schema: `Pairs` refuses the tracer's placeholder.
    let mut raw = Pairs(2);
    rec.record(vec![
        ("vendor", v(&vendor)),
        ("stage", v(&stage)),
        ("notes", v(&notes)),
        ("checks", v(&checks)),
        ("last", v(&last)),
        ("raw", v(&raw)),
    ]);
    checkpoint!("drafted");
    stage = Stage::Review {
        by: "ann".into(),
        round: 2,
    };
    notes.insert("security".into(), vec![Some(-3), None, Some(i64::MAX)]);
    notes.insert("finance".into(), vec![]);
    checks.push(Outcome::Pass);
    checks.push(Outcome::Fail(Problem::Missing {
        field: "iban".into(),
    }));
    rec.record(vec![
        ("vendor", v(&vendor)),
        ("stage", v(&stage)),
        ("notes", v(&notes)),
        ("checks", v(&checks)),
        ("last", v(&last)),
        ("raw", v(&raw)),
    ]);
    checkpoint!("reviewed");
    last = Some(stage.clone());
    stage = Stage::Blocked("sanctions".into(), Some(Box::new(Stage::Approved(7))));
    checks.push(Outcome::Fail(Problem::Late(30)));
    raw = Pairs(4);
    rec.record(vec![
        ("vendor", v(&vendor)),
        ("stage", v(&stage)),
        ("notes", v(&notes)),
        ("checks", v(&checks)),
        ("last", v(&last)),
        ("raw", v(&raw)),
    ]);
    checkpoint!("blocked");
    let n = vendor.tags.len() + notes.len() + checks.len();
    let s = format!("{stage:?}{last:?}{raw:?}");
    (n + s.len()) as u32
}

/// A directory removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "checkpoint-schemas-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn vendor() -> Vendor {
    Vendor {
        name: "ACME \"Ltd\"".into(),
        score: -12,
        tags: vec!["eu".into(), "hardware".into()],
    }
}

/// Every checkpoint's fields, read by `viewer`, equal what the workflow held;
/// `raw` has no schema and a note instead of a value.
async fn check_fields(viewer: &Runtime, recorder: &Recorder) {
    let recorded = recorder.0.lock().unwrap().clone();
    let cps = viewer.checkpoints("vr-1").await.unwrap();
    assert_eq!(cps.len(), recorded.len());
    for (cp, expected) in cps.iter().zip(&recorded) {
        let fields = viewer.checkpoint_fields_json("vr-1", cp.seq).await.unwrap();
        assert_eq!(
            fields.iter().map(|f| &f.name).collect::<Vec<_>>(),
            cp.fields.iter().map(|f| &f.name).collect::<Vec<_>>()
        );
        assert!(!fields.is_empty());
        for (f, info) in fields.iter().zip(&cp.fields) {
            assert_eq!(f.type_name, info.type_name);
            assert_eq!(f.schema, info.schema);
            if f.name == "raw" {
                assert_eq!(f.schema, None);
                assert_eq!(f.value, None);
                let note = f.note.as_deref().unwrap_or_default();
                assert!(note.contains("no schema"), "{note}");
                continue;
            }
            assert!(f.schema.is_some(), "{f:?}");
            assert_eq!(f.note, None, "{f:?}");
            assert_eq!(
                f.value.as_ref(),
                Some(&expected[&f.name]),
                "checkpoint #{} field `{}`",
                cp.seq,
                f.name
            );
        }
    }
    // The enums nested in later variants decoded (Outcome::Fail(Problem::..)).
    let last = cps.last().unwrap().seq;
    let fields = viewer.checkpoint_fields_json("vr-1", last).await.unwrap();
    let checks = fields.iter().find(|f| f.name == "checks").unwrap();
    assert_eq!(
        checks.value,
        Some(json!(["Pass", {"Fail": {"Missing": {"field": "iban"}}}, {"Fail": {"Late": 30}}]))
    );
    // Unknown run / checkpoint: errors.
    assert!(viewer.checkpoint_fields_json("nope", 1).await.is_err());
    assert!(viewer.checkpoint_fields_json("vr-1", 999).await.is_err());
}

#[tokio::test]
async fn memory_store_fields_as_json_without_the_workflow() {
    let recorder = Arc::new(Recorder::default());
    let store = Arc::new(MemoryStore::new());
    let rt = Runtime::builder()
        .store(store.clone())
        .resource(recorder.clone())
        .in_memory();
    let out = rt
        .start(vendor_review, "vr-1", vendor())
        .await
        .unwrap()
        .result()
        .await
        .unwrap();
    assert!(out > 0);
    drop(rt);
    // A runtime that never registered `vendor_review`.
    let viewer = Runtime::builder().store(store).in_memory();
    check_fields(&viewer, &recorder).await;
    viewer.fork("vr-1", 2, "vr-fork").await.unwrap();
    assert_eq!(
        viewer.checkpoint_fields_json("vr-fork", 1).await.unwrap(),
        viewer.checkpoint_fields_json("vr-1", 2).await.unwrap()
    );
}

#[tokio::test]
async fn sqlite_store_fields_as_json_without_the_workflow() {
    let dir = TempDir::new("sqlite");
    let path = dir.0.join("schemas.db");
    let url = path.to_str().unwrap();
    let recorder = Arc::new(Recorder::default());
    {
        let rt = Runtime::builder()
            .resource(recorder.clone())
            .open(url)
            .await
            .unwrap();
        rt.start(vendor_review, "vr-1", vendor())
            .await
            .unwrap()
            .result()
            .await
            .unwrap();
    }
    // A fresh runtime over the same file, without the workflow.
    let viewer = Runtime::open(url).await.unwrap();
    check_fields(&viewer, &recorder).await;
    // Forks keep the schemas.
    viewer.fork("vr-1", 2, "vr-fork").await.unwrap();
    let forked = viewer.checkpoint_fields_json("vr-fork", 1).await.unwrap();
    let original = viewer.checkpoint_fields_json("vr-1", 2).await.unwrap();
    assert_eq!(forked, original);
}

#[workflow]
async fn owned_loop(ctx: &Ctx, names: Vec<String>) -> usize {
    let mut seen = 0;
    for n in names {
        seen += n.len();
        checkpoint!("item");
    }
    seen
}

/// A `for` loop over an owned collection saves a snapshot of the collection
/// taken when the loop started: it is shown as JSON too.
#[tokio::test]
async fn for_loop_snapshots_are_shown_as_json() {
    let rt = Runtime::in_memory();
    let names = vec!["ab".to_string(), "cde".to_string()];
    rt.start(owned_loop, "ol-1", names.clone())
        .await
        .unwrap()
        .result()
        .await
        .unwrap();
    let viewer = Runtime::builder().store(rt.store()).in_memory();
    let fields = viewer.checkpoint_fields_json("ol-1", 2).await.unwrap();
    let by_name = |n: &str| {
        fields
            .iter()
            .find(|f| f.name == n)
            .unwrap_or_else(|| panic!("{n}: {fields:?}"))
    };
    assert_eq!(by_name("names").value, Some(v(&names)));
    assert_eq!(by_name("seen").value, Some(v(&5usize)));
}
