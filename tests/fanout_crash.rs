//! Fan-out across real processes (`checkpoint-fanout-worker`): a parent
//! with 200 children (at most 16 running at once), joined.
//!
//! - On SQLite, worker processes are SIGKILLed at random moments, one after
//!   another, until the parent completes: its result is the uninterrupted
//!   one, and every child completed exactly once (one `Completed` in its
//!   history), whatever its first segment ran again.
//! - On PostgreSQL (with `CHECKPOINT_TEST_POSTGRES_URL`; ignored without
//!   it), two worker processes share the children, and one of them is
//!   SIGKILLed halfway.

mod common;

use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::{Event, RunFilter};
use common::pg::Schema;
use common::worker::WorkerProc;
use common::TempDir;

const CHILDREN: u64 = 200;
const BIN: &str = env!("CARGO_BIN_EXE_checkpoint-fanout-worker");

fn expected() -> String {
    let sum: u64 = (0..CHILDREN).map(|i| i * i).sum();
    format!("RESULT [{sum},0]")
}

/// A pseudo-random sequence from a seed printed by the test (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

fn worker(dir: &TempDir, db: &str, name: &str, extra: &[&str]) -> WorkerProc {
    let log = dir.0.join("children.log");
    let mut args = vec![
        "--db".to_owned(),
        db.to_owned(),
        "--log".to_owned(),
        log.to_string_lossy().into_owned(),
        "--children".to_owned(),
        CHILDREN.to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    WorkerProc::spawn(BIN, name, dir.0.join(format!("{name}.stderr")), args)
}

/// Which processes ran which child's first segment: `(child, pid)` per line.
fn child_log(dir: &TempDir) -> Vec<(u64, u32)> {
    let text = std::fs::read_to_string(dir.0.join("children.log")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            (parts.next() == Some("child")).then_some(())?;
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        })
        .collect()
}

/// Every child completed exactly once, and the parent with them.
async fn check_store(url: &str) {
    let rt = Runtime::builder().client_only().open(url).await.unwrap();
    let children = rt.runs(RunFilter::new().parent("fan")).await.unwrap();
    assert_eq!(children.len() as u64, CHILDREN);
    for child in &children {
        assert_eq!(child.status, Status::Completed, "{}", child.id);
        let completions = rt
            .history(&child.id)
            .await
            .unwrap()
            .iter()
            .filter(|e| matches!(e, Event::Completed))
            .count();
        assert_eq!(
            completions, 1,
            "child {} completed {completions} times",
            child.id
        );
    }
    assert_eq!(rt.status("fan").await.unwrap(), Status::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_during_a_200_child_fan_out_until_it_is_done() {
    let dir = TempDir::new("fanout-kill");
    let db = dir.db();
    let seed = (common::now_nanos() as u64) | 1;
    let mut rng = Rng(seed);
    let started = Instant::now();
    let mut kills = 0;
    let result = loop {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "seed {seed}: not done after {kills} kills"
        );
        let mut w = worker(&dir, &db, &format!("w{kills}"), &["--start"]);
        w.expect_line("READY", Duration::from_secs(30));
        // The first three kills come early (the children take over 300 ms
        // of work in all), the later ones later and later, so it ends.
        let wait = match kills {
            0..=2 => Duration::from_millis(30 + rng.next(120)),
            k => Duration::from_millis(50 + rng.next(150 + 100 * k)),
        };
        if let Some(line) = w.wait_line("RESULT", wait) {
            break line;
        }
        w.signal("-KILL");
        kills += 1;
    };
    assert_eq!(result, expected(), "seed {seed}");
    assert!(kills >= 3, "seed {seed}: only {kills} kills before the end");
    let ran = child_log(&dir);
    for i in 0..CHILDREN {
        assert!(ran.iter().any(|(c, _)| *c == i), "child {i} never ran");
    }
    eprintln!(
        "seed {seed}: {kills} kills, {} first segments for {CHILDREN} children",
        ran.len()
    );
    check_store(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
async fn two_worker_processes_on_postgres_share_the_children() {
    let Some(schema) = Schema::new("two_workers_share_children", "cp_fanout") else {
        return;
    };
    let dir = TempDir::new("fanout-pg");
    let url = schema.url();
    let mut a = worker(
        &dir,
        &url,
        "a",
        &["--start", "--worker-id", "a", "--lease-ttl-ms", "2000"],
    );
    a.expect_line("READY", Duration::from_secs(30));
    let mut b = worker(
        &dir,
        &url,
        "b",
        &["--worker-id", "b", "--lease-ttl-ms", "2000"],
    );
    b.expect_line("READY", Duration::from_secs(30));
    // Kill `a` once some children ran; `b` takes its runs over.
    let until = Instant::now() + Duration::from_secs(60);
    while child_log(&dir).len() < (CHILDREN / 3) as usize {
        assert!(Instant::now() < until, "{}", a.describe());
        std::thread::sleep(Duration::from_millis(5));
    }
    let a_pid = a.pid();
    a.signal("-KILL");
    let line = b
        .wait_line("RESULT", Duration::from_secs(90))
        .unwrap_or_else(|| panic!("no result: {}", b.describe()));
    assert_eq!(line, expected());
    let ran = child_log(&dir);
    assert!(ran.iter().any(|(_, p)| *p == a_pid), "a ran no child");
    assert!(ran.iter().any(|(_, p)| *p == b.pid()), "b ran no child");
    check_store(&url).await;
}
