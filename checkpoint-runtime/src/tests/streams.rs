//! Progress and streams: `ctx.emit` read with `Runtime::stream` live and
//! after the end, from any index, across a crash (a reader that reconnects
//! from its next index sees each index once, with the uninterrupted
//! values), and from another store instance over the same database.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

use super::within;
use crate::store::{MemoryStore, Store};
use crate::testing::SimulatedCrash;
use crate::{workflow, Error, Runtime, Status};

/// Emits two items per step, a checkpoint after each step, and a last one.
#[workflow(name = "emitter")]
async fn emitter(ctx: &Ctx, n: u32) -> u32 {
    for i in 0..n {
        ctx.emit(&format!("item-{i}"));
        ctx.emit(&json!({ "i": i, "ten": i * 10 }));
        ctx.set_progress(&i);
        checkpoint!("step");
    }
    ctx.emit("last");
    n
}

/// What `emitter(n)` emits, in order.
fn expected(n: u32) -> Vec<(u64, Value)> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(json!(format!("item-{i}")));
        out.push(json!({ "i": i, "ten": i * 10 }));
    }
    out.push(json!("last"));
    out.into_iter()
        .enumerate()
        .map(|(i, v)| (i as u64, v))
        .collect()
}

async fn read_all(rt: &Runtime, id: &str, from: u64) -> Vec<(u64, Value)> {
    within(rt.stream(id, from).collect::<Vec<_>>())
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn a_stream_is_read_live_and_after_the_run_ends() {
    let rt = Runtime::in_memory();
    // The reader starts before the run.
    let live = {
        let s = rt.stream("e-1", 0);
        tokio::spawn(async move { s.collect::<Vec<_>>().await })
    };
    let h = rt.start(emitter, "e-1", 40).await.unwrap();
    let live: Vec<(u64, Value)> = within(live)
        .await
        .unwrap()
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(live, expected(40));
    assert_eq!(h.result().await.unwrap(), 40);
    // After the end: the same, from the store alone.
    assert_eq!(read_all(&rt, "e-1", 0).await, expected(40));
    let other = Runtime::builder()
        .store(rt.store())
        .client_only()
        .in_memory();
    assert_eq!(read_all(&other, "e-1", 0).await, expected(40));
    assert_eq!(h.progress::<u32>().await.unwrap(), Some(39));
}

#[tokio::test]
async fn a_reader_reconnects_from_a_middle_index() {
    let rt = Runtime::in_memory();
    let h = rt.start(emitter, "e-2", 700).await.unwrap();
    h.result().await.unwrap();
    let all = expected(700);
    assert_eq!(read_all(&rt, "e-2", 0).await, all);
    assert_eq!(read_all(&rt, "e-2", 777).await, all[777..].to_vec());
    assert_eq!(read_all(&rt, "e-2", 1400).await, all[1400..].to_vec());
    assert!(read_all(&rt, "e-2", 1401).await.is_empty());
    // Reading a page at a time: stop, reconnect from the next index.
    let mut got = Vec::new();
    let mut next = 0;
    while next < all.len() as u64 {
        let mut s = rt.stream("e-2", next);
        for _ in 0..300 {
            match within(s.next()).await {
                Some(item) => got.push(item.unwrap()),
                None => break,
            }
        }
        next = got.last().unwrap().0 + 1;
    }
    assert_eq!(got, all);
}

#[tokio::test]
async fn an_unknown_run_has_no_stream() {
    let rt = Runtime::in_memory();
    let items: Vec<_> = within(rt.stream("nope", 0).collect::<Vec<_>>()).await;
    assert_eq!(items.len(), 1);
    assert!(
        matches!(&items[0], Err(Error::UnknownRun { .. })),
        "{items:?}"
    );
}

/// Holds the workflow between its emit and its checkpoint.
struct Gate(Arc<tokio::sync::Semaphore>);

#[workflow(name = "gated")]
async fn gated(ctx: &Ctx) -> u32 {
    ctx.emit(&"before");
    let _ = ctx.resource::<Gate>().0.acquire().await;
    checkpoint!("opened");
    ctx.set_progress(&"waiting");
    let n: u32 = ctx.wait_for("more").await;
    for i in 0..n {
        ctx.emit(&i);
    }
    n
}

#[tokio::test]
async fn items_reach_a_reader_in_this_process_before_their_checkpoint() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let rt = Runtime::builder().resource(Gate(gate.clone())).in_memory();
    let h = rt.start(gated, "g-1", ()).await.unwrap();
    let mut s = rt.stream("g-1", 0);
    // The workflow is held before its first checkpoint.
    let first = within(s.next()).await.unwrap().unwrap();
    assert_eq!(first, (0, json!("before")));
    assert_eq!(h.progress::<String>().await.unwrap(), None);
    gate.add_permits(1);
    // Waiting: the stream does not end, the progress is stored.
    rt.run_until_idle().await.unwrap();
    assert!(matches!(h.status().await.unwrap(), Status::Waiting { .. }));
    assert_eq!(
        h.progress::<String>().await.unwrap().as_deref(),
        Some("waiting")
    );
    let nothing = tokio::time::timeout(Duration::from_millis(200), s.next()).await;
    assert!(nothing.is_err(), "the stream of a waiting run goes on");
    rt.signal("g-1", "more", &3u32).await.unwrap();
    let rest: Vec<_> = within(s.collect::<Vec<_>>()).await;
    let rest: Vec<(u64, Value)> = rest.into_iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(rest, [(1, json!(0)), (2, json!(1)), (3, json!(2))]);
    assert_eq!(h.result().await.unwrap(), 3);
}

/// Reads `rt`'s stream of `id` from `from` into `into` until aborted.
fn spawn_reader(
    rt: &Runtime,
    id: &str,
    from: u64,
    into: Arc<Mutex<Vec<(u64, Value)>>>,
) -> tokio::task::JoinHandle<()> {
    let mut s = rt.stream(id, from);
    tokio::spawn(async move {
        while let Some(item) = s.next().await {
            into.lock().unwrap().push(item.unwrap());
        }
    })
}

#[tokio::test]
async fn a_reader_that_reconnects_after_a_crash_sees_each_index_once() {
    const N: u32 = 6;
    let all = expected(N);
    for k in 1..=u64::from(N) {
        for before in [false, true] {
            let what = format!(
                "crash {} checkpoint {k}",
                if before { "before" } else { "after" }
            );
            let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
            let crash = if before {
                SimulatedCrash::before_checkpoint(k)
            } else {
                SimulatedCrash::after_checkpoint(k)
            };
            let first = crash
                .install(Runtime::builder().store(store.clone()))
                .in_memory();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let reader = spawn_reader(&first, "c", 0, seen.clone());
            first.start(emitter, "c", N).await.unwrap();
            within(async {
                while !crash.fired() {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
            .await;
            // Whatever the reader got by now; then it disconnects.
            tokio::time::sleep(Duration::from_millis(20)).await;
            reader.abort();
            let _ = reader.await;
            drop(first);
            let mut got = seen.lock().unwrap().clone();
            let next = got.last().map_or(0, |(i, _)| i + 1);
            let second = Runtime::builder().store(store.clone()).in_memory();
            second.register(emitter);
            let rest = read_all(&second, "c", next).await;
            got.extend(rest);
            assert_eq!(got, all, "{what}");
            assert_eq!(
                second.handle(emitter, "c").result().await.unwrap(),
                N,
                "{what}"
            );
            assert_eq!(read_all(&second, "c", 0).await, all, "{what}");
        }
    }
}

/// A runtime executes `gated`-like runs over `a`, a reader reads over
/// `b` (another store instance over the same database, as another process
/// would): it sees the items while the run waits, then the rest and the end.
async fn reader_over_another_store_sees_live_items(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let worker = Runtime::builder().store(a).in_memory();
    let client = Runtime::builder().store(b).client_only().in_memory();
    let h = worker.start(talk, "t-1", 4).await.unwrap();
    let mut s = client.stream("t-1", 0);
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(within(s.next()).await.unwrap().unwrap());
    }
    assert_eq!(got, (0..4u64).map(|i| (i, json!(i))).collect::<Vec<_>>());
    // The items may come before the run's checkpoint (the background
    // flush stores them): the signal waits for the wait.
    within(async {
        while !matches!(h.status().await.unwrap(), Status::Waiting { .. }) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    client.signal("t-1", "more", &2u64).await.unwrap();
    let rest: Vec<(u64, Value)> = within(s.collect::<Vec<_>>())
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rest, [(4, json!(4)), (5, json!(5))]);
    assert_eq!(
        client.handle(talk, "t-1").progress::<u64>().await.unwrap(),
        Some(6)
    );
}

#[workflow(name = "talk")]
async fn talk(ctx: &Ctx, n: u64) -> u64 {
    for i in 0..n {
        ctx.emit(&i);
    }
    checkpoint!("said");
    let more: u64 = ctx.wait_for("more").await;
    for i in n..n + more {
        ctx.emit(&i);
    }
    ctx.set_progress(&(n + more));
    n + more
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_over_another_sqlite_store_sees_live_items() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let a = crate::store::sqlite::SqliteStore::open(&path).unwrap();
    let b = crate::store::sqlite::SqliteStore::open(&path).unwrap();
    reader_over_another_store_sees_live_items(Arc::new(a), Arc::new(b)).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
async fn a_reader_over_another_postgres_store_sees_live_items() {
    use crate::store::postgres::PostgresStore;
    let url = std::env::var("CHECKPOINT_TEST_POSTGRES_URL").unwrap();
    let schema = format!(
        "cp_test_streams_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000
    );
    let a = PostgresStore::open_in_schema(&url, &schema).await.unwrap();
    let b = PostgresStore::open_in_schema(&url, &schema).await.unwrap();
    reader_over_another_store_sees_live_items(Arc::new(a), Arc::new(b)).await;
    PostgresStore::drop_schema(&url, &schema).await.unwrap();
}

/// Emits more in its second segment on the first attempt than on the
/// next ones (not deterministic, on purpose): what the crashed attempt
/// stored must not outlive the crash.
#[workflow(name = "fickle")]
async fn fickle(ctx: &Ctx) -> u32 {
    ctx.emit("a");
    checkpoint!("one");
    let first = ctx.attempt() == 1;
    let items: &[&str] = if first { &["x", "y", "z"] } else { &["w"] };
    for i in items {
        ctx.emit(i);
    }
    // Time for the background flush to store them.
    tokio::time::sleep(Duration::from_millis(150)).await;
    checkpoint!("two");
    ctx.emit("end");
    1
}

#[tokio::test]
async fn a_resume_discards_what_the_crashed_segment_stored() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let crash = SimulatedCrash::before_checkpoint(2);
    let first = crash
        .install(Runtime::builder().store(store.clone()))
        .in_memory();
    first.start(fickle, "f", ()).await.unwrap();
    within(async {
        while !crash.fired() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    let stored: Vec<u64> = store
        .stream_items("f", 0, 100)
        .await
        .unwrap()
        .iter()
        .map(|i| i.index)
        .collect();
    assert_eq!(stored, [0, 1, 2, 3], "the background flush stored them");
    drop(first);
    let second = Runtime::builder().store(store.clone()).in_memory();
    second.register(fickle);
    assert_eq!(second.handle(fickle, "f").result().await.unwrap(), 1);
    assert_eq!(
        read_all(&second, "f", 0).await,
        [(0, json!("a")), (1, json!("w")), (2, json!("end"))]
    );
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
async fn postgres_stream_writes_notify_the_readers_of_other_stores() {
    use crate::store::conformance::req;
    use crate::store::postgres::PostgresStore;
    use crate::store::{NewRun, StreamItem, StreamWrite};
    let url = std::env::var("CHECKPOINT_TEST_POSTGRES_URL").unwrap();
    let schema = format!(
        "cp_test_stream_notify_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000
    );
    let a = PostgresStore::open_in_schema(&url, &schema).await.unwrap();
    let b = PostgresStore::open_in_schema(&url, &schema).await.unwrap();
    let run = NewRun {
        id: "n".into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    };
    a.create_run(run).await.unwrap();
    let claimed = a.claim(&req("a", "a1")).await.unwrap().claimed;
    let lease = claimed[0].lease.clone();
    let mut streams = b.subscribe_streams();
    // Whatever the start and the claim notified has arrived.
    tokio::time::sleep(Duration::from_millis(300)).await;
    streams.borrow_and_update();
    let write = StreamWrite {
        items: vec![StreamItem {
            index: 0,
            after_seq: 0,
            value: b"1".to_vec(),
        }],
        progress: None,
    };
    a.write_stream("n", &lease, write).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), streams.changed())
        .await
        .expect("the other store learns of the write at once")
        .unwrap();
    drop((a, b));
    PostgresStore::drop_schema(&url, &schema).await.unwrap();
}

#[tokio::test]
async fn the_harness_compares_the_stream_at_every_crash_point() {
    let report = within(
        crate::testing::Harness::new(emitter)
            .input(4)
            .also_crash_before_checkpoints()
            .run(),
    )
    .await
    .unwrap();
    assert_eq!(report.crash_points.len(), 8);
    // A segment that emits other items when it runs again: refused.
    let err = within(crate::testing::Harness::new(fickle).input(()).run())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("stream") && text.contains("\"w\"") && text.contains("\"x\""),
        "{text}"
    );
}
