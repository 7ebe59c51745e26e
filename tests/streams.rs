//! Streams across real processes: `checkpoint-stream-worker` (src/bin)
//! emits tokens (a checkpoint after every three) into an SQLite file (and
//! a PostgreSQL schema when `CHECKPOINT_TEST_POSTGRES_URL` is set); this
//! process reads the run's stream with `Runtime::stream` while it runs,
//! SIGKILLs the worker mid-segment, and a second worker process resumes
//! the run. The reader sees items while the worker runs, and every index
//! exactly once, with the values an uninterrupted run emits; a reader
//! that reconnects from its next index after the crash does too.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use common::{test_store, Proc, TempDir};
use futures::StreamExt;
use serde_json::{json, Value};

const WORKER: &str = env!("CARGO_BIN_EXE_checkpoint-stream-worker");
const RUN: &str = "tokens-1";
const CHUNKS: u64 = 5;

fn expected() -> Vec<(u64, Value)> {
    (0..CHUNKS * 3)
        .map(|i| (i, json!(format!("token-{i}"))))
        .collect()
}

/// Reads run `RUN`'s stream from `from` into `into` (with when each item
/// came), to its end.
fn spawn_reader(
    rt: &Runtime,
    from: u64,
    into: Arc<Mutex<Vec<(u64, Value, Instant)>>>,
) -> tokio::task::JoinHandle<Result<(), Error>> {
    let mut s = rt.stream(RUN, from);
    tokio::spawn(async move {
        while let Some(item) = s.next().await {
            let (i, v) = item?;
            into.lock().unwrap().push((i, v, Instant::now()));
        }
        Ok(())
    })
}

fn sigkill_mid_segment_then_resume(kind: &str) {
    let test = format!("streams_{kind}");
    let Some((url, _keep)) = test_store(kind, &test, "streams") else {
        return;
    };
    let dir = TempDir::new(&test);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Created by the first worker; the client opens the store first.
    let client = tokio
        .block_on(Runtime::builder().client_only().open(&url))
        .unwrap();
    let chunks = CHUNKS.to_string();
    let mut first = Proc::spawn(WORKER, &dir, "first", &["start", &url, RUN, &chunks]);
    first.expect_line("EMITTED 0");
    let whole = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let _in = tokio.enter();
        spawn_reader(&client, 0, whole.clone())
    };
    let reconnecting = Arc::new(Mutex::new(Vec::new()));
    let first_reader = {
        let _in = tokio.enter();
        spawn_reader(&client, 0, reconnecting.clone())
    };
    // Mid-segment: after checkpoint 2 (6 tokens), 2 tokens into the third.
    first.expect_line("EMITTED 7");
    std::thread::sleep(Duration::from_millis(10));
    first.kill();
    // The second reader disconnects now and reconnects from its next index.
    first_reader.abort();
    let _ = tokio.block_on(first_reader);
    let mut got: Vec<(u64, Value)> = reconnecting
        .lock()
        .unwrap()
        .iter()
        .map(|(i, v, _)| (*i, v.clone()))
        .collect();
    let next = got.last().map_or(0, |(i, _)| i + 1);
    let mut second = Proc::spawn(WORKER, &dir, "second", &["resume", &url, RUN, &chunks]);
    assert_eq!(
        second.expect_line("RESULT"),
        format!("RESULT {}", CHUNKS * 3)
    );
    let ended = Instant::now();
    let rest = tokio
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(20),
                client.stream(RUN, next).collect::<Vec<_>>(),
            )
            .await
        })
        .expect("the stream ends with the run");
    got.extend(rest.into_iter().map(|r| r.unwrap()));
    assert_eq!(got, expected(), "reconnected from {next}");
    tokio
        .block_on(async { tokio::time::timeout(Duration::from_secs(20), reader).await })
        .expect("the reader ends with the run")
        .unwrap()
        .unwrap();
    // Items reached the reader while the run was going (before its end).
    let first_seen = whole.lock().unwrap()[0].2;
    assert!(
        first_seen < ended,
        "no item reached the reader before the run ended"
    );
    let whole: Vec<(u64, Value)> = whole
        .lock()
        .unwrap()
        .iter()
        .map(|(i, v, _)| (*i, v.clone()))
        .collect();
    assert_eq!(whole, expected(), "one reader across the crash");
    let progress: Option<u64> = tokio
        .block_on(client.handle(tokens, RUN).progress::<u64>())
        .unwrap();
    assert_eq!(progress, Some(CHUNKS));
}

/// The worker's workflow, by name only (this process does not run it).
#[workflow(name = "tokens")]
async fn tokens(ctx: &Ctx, chunks: u64) -> u64 {
    let _ = ctx;
    chunks
}

#[test]
fn sqlite_reader_in_another_process_across_a_sigkill() {
    sigkill_mid_segment_then_resume("sqlite");
}

#[test]
fn postgres_reader_in_another_process_across_a_sigkill() {
    sigkill_mid_segment_then_resume("postgres");
}
