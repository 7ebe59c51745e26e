//! Crashes while a history grows by appending (the SQLite store keeps such a
//! field as a chain of tails, folded every 64 versions; see
//! `store/sqlite/checkpoints/delta.rs`): a child process (this test binary,
//! running the ignored `child` test) appends a message per checkpoint and
//! is SIGKILLed at random points, again and again, then left to finish.
//! Every checkpoint it acknowledged is still there after each kill; the
//! output is the uninterrupted run's; every version of the history loads
//! byte for byte.
#![cfg(feature = "sqlite")]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::store::sqlite::SqliteStore;
use checkpoint_runtime::store::Store;

/// Turns of the agent: nine folds of level 0 (every 64 appends).
const TURNS: u32 = 600;
const RUN: &str = "agent";
/// Where the child finds its database.
const DB_VAR: &str = "CHECKPOINT_DELTA_CRASH_DB";

/// Turn `i`'s message: 50 bytes to 1 KB, and now and then 30 KB.
fn message(i: u32) -> Vec<u8> {
    let len = if i % 97 == 13 {
        30_000
    } else {
        50 + (i as usize * 7919) % 1000
    };
    (0..len)
        .map(|k| (k as u32).wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

/// The bytes of the history at each version (after `seq` turns), built
/// once: postcard's varint length, then each message (its length, its
/// bytes).
struct Expected {
    /// The messages' encodings, concatenated, and where each one ends.
    body: Vec<u8>,
    ends: Vec<usize>,
}

impl Expected {
    fn new() -> Expected {
        let (mut body, mut ends) = (Vec::new(), Vec::new());
        for i in 0..TURNS {
            body.extend(postcard::to_allocvec(&message(i)).unwrap());
            ends.push(body.len());
        }
        Expected { body, ends }
    }

    /// Whether `bytes` are the history after `seq` turns.
    fn is(&self, seq: u64, bytes: &[u8]) -> bool {
        let header = postcard::to_allocvec(&(seq as u32)).unwrap();
        let end = if seq == 0 {
            0
        } else {
            self.ends[seq as usize - 1]
        };
        bytes.len() == header.len() + end
            && bytes[..header.len()] == header[..]
            && bytes[header.len()..] == self.body[..end]
    }
}

/// The history field's bytes of version `seq` of the run, which must load.
async fn history_of(store: &SqliteStore, seq: u64) -> Vec<u8> {
    let cp = store
        .checkpoint(RUN, seq)
        .await
        .unwrap_or_else(|e| panic!("version #{seq}: {e}"))
        .unwrap_or_else(|| panic!("version #{seq} is missing"));
    let i = cp
        .fields
        .iter()
        .position(|f| f.name == "history")
        .expect("a history field");
    cp.field_bytes(i).expect("bytes").to_vec()
}

/// The agent: appends a message, takes a checkpoint, says so on stdout
/// (`ACK <seq>`: durable), `turns` times; returns a digest of the history.
#[workflow]
async fn appender(ctx: &Ctx, turns: u32) -> u64 {
    let mut history: Vec<Vec<u8>> = Vec::new();
    let mut turn = 0u32;
    while turn < turns {
        history.push(message(turn));
        turn += 1;
        checkpoint!("turn");
        println!("ACK {turn}");
    }
    history
        .iter()
        .flatten()
        .fold(0u64, |h, &b| h.wrapping_mul(131).wrapping_add(u64::from(b)))
}

async fn run_to_end(db: &Path) -> u64 {
    let rt = Runtime::open(db.to_str().expect("utf-8 path"))
        .await
        .expect("open");
    rt.register(appender);
    let h = rt.start(appender, RUN, TURNS).await.expect("start");
    h.result().await.expect("result")
}

/// The child process: runs (or resumes) the agent on the database named by
/// `CHECKPOINT_DELTA_CRASH_DB` and prints `RESULT <digest>`.
#[tokio::test]
#[ignore = "the child process of `sigkill_while_a_history_grows`"]
async fn child() {
    let Ok(db) = std::env::var(DB_VAR) else {
        return;
    };
    let out = run_to_end(Path::new(&db)).await;
    println!("RESULT {out}");
}

/// xorshift: the same kill points on every machine.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Every version of the run loads, its history exactly the one of that turn.
async fn every_version_loads(db: &Path, latest: u64, expected: &Expected) {
    let store = SqliteStore::open(db).expect("open");
    for seq in 1..=latest {
        assert!(
            expected.is(seq, &history_of(&store, seq).await),
            "version #{seq} differs"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_while_a_history_grows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let history = Expected::new();
    // The uninterrupted run.
    let expected = run_to_end(&dir.path().join("plain.db")).await;

    let db = dir.path().join("killed.db");
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let (mut kills, mut result) = (0, None);
    // The latest checkpoint stored before the next process starts.
    let mut base = 0u64;
    let started = Instant::now();
    while result.is_none() {
        assert!(started.elapsed() < Duration::from_secs(300), "too slow");
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DB_VAR, &db)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child");
        let stdout = child.stdout.take().expect("stdout");
        let acked = Arc::new(AtomicU64::new(0));
        let (acks, done) = (acked.clone(), Arc::new(std::sync::Mutex::new(None)));
        let out = done.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(seq) = line.strip_prefix("ACK ") {
                    acks.fetch_max(seq.parse().unwrap_or(0), Ordering::SeqCst);
                } else if let Some(r) = line.strip_prefix("RESULT ") {
                    *out.lock().unwrap() = r.parse::<u64>().ok();
                }
            }
        });
        // The first two dozen processes are killed once they acknowledged
        // 1 to 30 more checkpoints (so through the folds of level 0, every
        // 64 versions, however fast the machine), a few milliseconds on,
        // at a random point of the next one; then the run is left to
        // finish.
        if kills < 24 {
            let more = 1 + next(&mut seed) % 30;
            let end = Instant::now() + Duration::from_secs(20);
            while Instant::now() < end
                && acked.load(Ordering::SeqCst) < base + more
                && child.try_wait().expect("wait").is_none()
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_micros(next(&mut seed) % 3_000));
            if child.try_wait().expect("wait").is_none() {
                child.kill().expect("SIGKILL");
                kills += 1;
            }
        }
        child.wait().expect("wait");
        reader.join().expect("reader");
        result = *done.lock().unwrap();
        // Nothing acknowledged is lost.
        let acked = acked.load(Ordering::SeqCst);
        let store = SqliteStore::open(&db).expect("open");
        let latest = store
            .latest_checkpoint(RUN)
            .await
            .expect("latest loads")
            .map_or(0, |c| c.seq);
        assert!(latest >= acked, "acknowledged #{acked}, latest #{latest}");
        base = latest;
        if acked > 0 {
            let bytes = history_of(&store, acked).await;
            assert!(history.is(acked, &bytes), "version #{acked} differs");
        }
        eprintln!("process {kills}: acknowledged #{acked}, latest #{latest}");
    }
    assert!(kills >= 12, "only {kills} kills: the child ran too fast");
    assert_eq!(result, Some(expected));
    every_version_loads(&db, u64::from(TURNS), &history).await;
}
