//! `ctx.retry` across real processes, on one SQLite file:
//! `checkpoint-retry-worker` (src/bin) runs a retry that fails twice with a
//! 1.5 s backoff. The first process is SIGKILLed during the first backoff
//! (once the store shows the run `Sleeping`); a second process resumes it:
//!
//! - the stored attempt does not run again (each attempt appends its
//!   idempotency key to a log file, fsynced);
//! - the resumed run keeps the stored backoff: attempt 2 starts no earlier
//!   than the deadline the first process stored (not at once);
//! - the result and the history's attempt events are those of an
//!   uninterrupted run.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use checkpoint_runtime::{Event, Status};
use common::{snapshot, Proc, TempDir};

const WORKER: &str = env!("CARGO_BIN_EXE_checkpoint-retry-worker");
const RUN: &str = "fetch-1";
const BACKOFF_MS: u64 = 1500;

fn nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .expect("time after 1970")
        .as_nanos()
}

/// The attempt log: (unix nanos, idempotency key).
fn attempts(log: &std::path::Path) -> Vec<(u128, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let at = parts.next().unwrap().parse().unwrap();
            assert_eq!(parts.next(), Some("attempt"), "{l}");
            (at, parts.next().unwrap().to_owned())
        })
        .collect()
}

#[test]
fn sigkill_during_a_backoff_resumes_the_backoff() {
    let dir = TempDir::new("retry_backoff");
    let (db, log) = (dir.db(), dir.0.join("attempts.log"));
    let log_s = log.to_string_lossy().into_owned();
    let backoff = BACKOFF_MS.to_string();
    let mut first = Proc::spawn(
        WORKER,
        &dir,
        "first",
        &["start", &db, &log_s, RUN, &backoff],
    );
    assert_eq!(first.expect_line("ATTEMPT"), format!("ATTEMPT {RUN}:1:0"));

    // Killed once attempt 1's error is stored: the run sleeps.
    let waited = Instant::now();
    let until = loop {
        if let Status::Sleeping { until } = snapshot(&db, RUN).status {
            break until;
        }
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "the run never slept: {}",
            first.describe()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    first.kill();
    let killed_at = SystemTime::now();
    assert!(
        killed_at < until,
        "the process was killed after its backoff ended (slow machine?): the test proves nothing"
    );
    let before = snapshot(&db, RUN);
    assert_eq!(attempts(&log).len(), 1);
    let failed: Vec<u32> = before
        .history
        .iter()
        .filter_map(|e| match &e.event {
            Event::RetryAttemptFailed { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(failed, [1]);

    // Another process resumes it.
    let mut second = Proc::spawn(
        WORKER,
        &dir,
        "second",
        &["resume", &db, &log_s, RUN, &backoff],
    );
    let out = second.finish();
    assert_eq!(
        out,
        [
            format!("ATTEMPT {RUN}:2:0"),
            format!("ATTEMPT {RUN}:3:0"),
            r#"RESULT {"Ok":3}"#.to_owned(),
        ],
        "{}",
        second.describe()
    );
    let log = attempts(&log);
    let keys: Vec<&str> = log.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            format!("{RUN}:1:0"),
            format!("{RUN}:2:0"),
            format!("{RUN}:3:0")
        ]
    );
    // Attempt 2 waited for the deadline the first process stored.
    assert!(
        log[1].0 >= nanos(until),
        "attempt 2 ran before its backoff ended"
    );
    let after = snapshot(&db, RUN);
    assert_eq!(after.status, Status::Completed);
    let failed: Vec<(u32, Option<u64>)> = after
        .history
        .iter()
        .filter_map(|e| match &e.event {
            Event::RetryAttemptFailed {
                attempt,
                retry_in_ms,
                ..
            } => Some((*attempt, *retry_in_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(failed, [(1, Some(BACKOFF_MS)), (2, Some(BACKOFF_MS))]);
}
