//! PostgreSQL server restarts under load: two worker processes
//! (`checkpoint-test-worker load --acks`, src/bin) work off 1,000 runs x 20
//! checkpoints with 3 s leases on a throw-away PostgreSQL cluster that this
//! test creates (`initdb` into a temp dir) and starts on a free port of
//! 127.0.0.1. While the runs are worked off, the server is restarted twice:
//! at 20 % of the checkpoints stored with a fast shutdown (SIGINT: sessions
//! ended, transactions rolled back) and 1 s away, at 50 % with an immediate
//! one (SIGQUIT: no shutdown checkpoint, crash recovery on start) and away
//! for longer than a lease (4 s). (Counted in runs completed, the load
//! went from under a third to most between two looks, since runs started
//! together end together, and the second restart came after the end.)
//! Then:
//!
//! - both workers are still working (`run_worker` never returned), and both
//!   hold their worker ids again (their sessions' advisory locks) after each
//!   restart;
//! - every run completed with the exact result (the sum over its steps),
//!   with checkpoints 1 to 20 stored;
//! - no acknowledged checkpoint was lost: the workflow notes `ack` once a
//!   `checkpoint!()` returned and `begin` before each step; no step is begun
//!   again at or before one acknowledged earlier (see `check_acks`);
//! - each worker reported the store's failures on stderr (the line
//!   `checkpoint-runtime: worker ... the store failed ...`), and that it
//!   works again.
//!
//! The cluster (`common::cluster`, shared with `pg_tls.rs`) runs as the
//! current user, or, when the test runs as root (which `initdb` refuses),
//! as the system user `postgres`. A guard stops it (SIGQUIT, then
//! SIGKILL) and removes its directory when the test ends, also when it
//! fails; a watchdog process does the same, and SIGKILLs the workers,
//! should the test process itself be killed.
//!
//! It needs the PostgreSQL server binaries (`initdb`, `postgres`,
//! `pg_isready`): from `CHECKPOINT_TEST_PG_BIN`, else the newest
//! `/usr/lib/postgresql/*/bin`, else `pg_config --bindir`. It runs when
//! `CHECKPOINT_TEST_POSTGRES_URL` is set (as in CI, which has the binaries;
//! it does not use that server) and is ignored otherwise; with the variable
//! set but no binaries found it prints why and passes.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use checkpoint_runtime::store::postgres::PostgresStore;
use checkpoint_runtime::store::{RunRecord, RunState, Store};
use checkpoint_runtime::RunFilter;
use common::cluster::Cluster;
use common::pg::URL_VAR;
use common::worker::WorkerProc;

const WORKER: &str = env!("CARGO_BIN_EXE_checkpoint-test-worker");
const RUNS: usize = 1000;
const ITEMS: u32 = 20;
const TTL_MS: u64 = 3000;
/// How long the whole load may take, restarts included.
const LIMIT: Duration = Duration::from_secs(300);

// ---------------------------------------------------------------------------
// Worker processes

// ---------------------------------------------------------------------------
// Checks

/// The result `acked_steps` computes for `steps` steps.
fn expected(steps: u32) -> u64 {
    (0..u64::from(steps)).map(|i| i * i + 1).sum()
}

/// Checks the ack log (`begin|ack <run> <step> <pid>` lines, in the order
/// they were written): every step of every run acknowledged, and no step
/// begun at or before a step whose checkpoint was acknowledged earlier.
///
/// Why that is the test of "no acknowledged checkpoint lost": an execution
/// notes `ack i` once step `i`'s checkpoint is durable, and `begin i + 1` in
/// the same poll (no `.await` between them); a resumed execution notes `ack
/// k - 1` for the checkpoint it resumed from, then `begin k`. A claim that
/// found the run's latest checkpoint at step `k - 1` cannot come after a
/// durable checkpoint of step `i >= k` (it would have loaded that one), nor
/// before it (that checkpoint's write would have been fenced off, and never
/// acknowledged). So a `begin j` after an `ack i >= j` means the claim did
/// not find an acknowledged checkpoint. Returns how many runs were resumed
/// (an `ack` noted twice).
fn check_acks(path: &Path, runs: usize) -> Result<usize, String> {
    #[derive(Default)]
    struct Run {
        max_ack: Option<u32>,
        acked: Vec<u32>,
        resumed: bool,
    }
    let text = std::fs::read_to_string(path).expect("the ack log");
    let mut by_run: HashMap<&str, Run> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 4, "malformed ack log line {line:?}");
        let (what, run, pid) = (f[0], f[1], f[3]);
        let step: u32 = f[2].parse().expect("a step");
        let r = by_run.entry(run).or_insert_with(|| Run {
            acked: vec![0; ITEMS as usize],
            ..Run::default()
        });
        match what {
            "ack" => {
                r.max_ack = r.max_ack.max(Some(step));
                r.acked[step as usize] += 1;
                r.resumed |= r.acked[step as usize] > 1;
            }
            "begin" => {
                if let Some(durable) = r.max_ack.filter(|d| step <= *d) {
                    return Err(format!(
                        "run {run}: step {step} begun (by process {pid}, line {}) after the \
                         checkpoint of step {durable} was acknowledged: an acknowledged \
                         checkpoint was lost",
                        n + 1
                    ));
                }
            }
            other => panic!("unknown ack log entry {other:?}"),
        }
    }
    assert_eq!(by_run.len(), runs, "runs in the ack log");
    for (run, r) in &by_run {
        let missing: Vec<usize> = (0..r.acked.len()).filter(|i| r.acked[*i] == 0).collect();
        assert!(
            missing.is_empty(),
            "run {run}: steps never acknowledged: {missing:?}"
        );
    }
    Ok(by_run.values().filter(|r| r.resumed).count())
}

/// The store call `f`, tried again while the server is away.
fn retry<T, F, Fut>(tokio: &tokio::runtime::Runtime, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, checkpoint_runtime::Error>>,
{
    let since = Instant::now();
    loop {
        match tokio.block_on(f()) {
            Ok(v) => return v,
            Err(e) => {
                assert!(
                    since.elapsed() < Duration::from_secs(60),
                    "{what}: still failing after 60 s: {e}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// How many advisory locks (worker-id holds) sessions of application `app`
/// hold.
fn holds(tokio: &tokio::runtime::Runtime, url: &str, app: &str) -> Option<i64> {
    tokio.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .ok()?;
        let task = tokio::spawn(conn);
        let n = client
            .query_one(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1",
                &[&app],
            )
            .await
            .ok()
            .map(|row| row.get(0));
        drop(client);
        let _ = task.await;
        n
    })
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set (the test starts a PostgreSQL cluster of its own)"
)]
fn two_worker_processes_finish_1000_runs_across_two_server_restarts() {
    if std::env::var_os(URL_VAR).is_none() {
        eprintln!("skipped: {URL_VAR} is not set");
        return;
    }
    let mut cluster = match Cluster::new() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: cannot create a throw-away PostgreSQL cluster: {why}");
            return;
        }
    };
    cluster.start();
    let url = cluster.url();
    let dir = common::TempDir::new("restart");
    let acks = dir.0.join("acks.log");
    let app_a = format!("cp-restart-a-{}", std::process::id());
    let app_b = format!("cp-restart-b-{}", std::process::id());
    let args = |worker: &str, app: &str, start: bool| -> Vec<String> {
        let mut v: Vec<String> = [
            "load",
            "--db",
            &format!("{url}?application_name={app}"),
            "--runs",
            &RUNS.to_string(),
            "--items",
            &ITEMS.to_string(),
            "--lease-ttl-ms",
            &TTL_MS.to_string(),
            "--worker-id",
            worker,
            "--acks",
            &acks.to_string_lossy(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if start {
            v.push("--start".to_owned());
        }
        v
    };
    let began = Instant::now();
    let mut a = WorkerProc::spawn(
        WORKER,
        "a",
        dir.0.join("a.stderr"),
        args("restart-a", &app_a, true),
    );
    cluster.watch(a.pid());
    a.expect_line("READY", Duration::from_secs(120));
    let mut b = WorkerProc::spawn(
        WORKER,
        "b",
        dir.0.join("b.stderr"),
        args("restart-b", &app_b, false),
    );
    cluster.watch(b.pid());
    b.expect_line("READY", Duration::from_secs(60));
    let started = began.elapsed();

    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // The store itself, not a runtime: nothing here may claim a run.
    let client = tokio
        .block_on(PostgresStore::open(&url))
        .expect("opening the store");
    let mut restarts: Vec<String> = Vec::new();
    let mut last = (0usize, Instant::now());
    let mut stored = 0u64;
    let total = RUNS as u64 * u64::from(ITEMS);
    loop {
        a.check_alive();
        b.check_alive();
        let done = match tokio.block_on(client.list_runs(&RunFilter::new())) {
            Ok(runs) => {
                stored = runs.iter().map(|r| r.latest_seq).sum();
                runs.iter()
                    .filter(|r| matches!(r.state, RunState::Completed { .. }))
                    .count()
            }
            Err(_) => last.0,
        };
        if done != last.0 {
            last = (done, Instant::now());
        }
        if done == RUNS {
            break;
        }
        let due = match restarts.len() {
            0 => stored * 100 >= total * 20,
            1 => stored * 100 >= total * 50,
            _ => false,
        };
        if due {
            // The second time, the server stays away longer than a lease.
            let (sig, how, away) = if restarts.is_empty() {
                ("-INT", "fast shutdown", Duration::from_secs(1))
            } else {
                (
                    "-QUIT",
                    "immediate shutdown, crash recovery",
                    Duration::from_millis(TTL_MS + 1000),
                )
            };
            let t = Instant::now();
            cluster.stop(sig);
            std::thread::sleep(away);
            cluster.start();
            let outage = t.elapsed();
            // Both workers take their worker ids up again.
            let t = Instant::now();
            for app in [&app_a, &app_b] {
                loop {
                    let held = holds(&tokio, &url, app);
                    if held == Some(1) {
                        break;
                    }
                    assert!(
                        t.elapsed() < Duration::from_secs(20),
                        "{app} did not hold its worker id again within 20 s of the restart \
                         (advisory locks held by its sessions: {held:?})\n{}\n{}",
                        a.describe(),
                        b.describe()
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            let note = format!(
                "{how} at {stored} of {total} checkpoints stored ({done} of {RUNS} runs \
                 completed): server away {outage:?}, both worker ids held again {:?} later",
                t.elapsed()
            );
            eprintln!("{note}");
            restarts.push(note);
        }
        assert!(
            began.elapsed() < LIMIT,
            "{done} of {RUNS} runs completed within {LIMIT:?} (none completed for {:?}); \
             restarts: {restarts:?}\n{}\n{}",
            last.1.elapsed(),
            a.describe(),
            b.describe()
        );
        // Often while a restart is due, so that each comes near its mark.
        let pause = if restarts.len() < 2 { 20 } else { 200 };
        std::thread::sleep(Duration::from_millis(pause));
    }
    let took = began.elapsed();
    assert_eq!(restarts.len(), 2, "both restarts happened before the end");
    a.check_alive();
    b.check_alive();

    // Every run completed with the exact result and all its checkpoints.
    let filter = RunFilter::new();
    let all: Vec<RunRecord> = retry(&tokio, "listing runs", || client.list_runs(&filter));
    assert_eq!(all.len(), RUNS);
    let want = serde_json::json!(expected(ITEMS));
    for r in &all {
        let RunState::Completed { output, error } = &r.state else {
            panic!("run {} is not completed: {:?}", r.id, r.state);
        };
        assert_eq!(error, &None, "run {}", r.id);
        let got: serde_json::Value = serde_json::from_slice(output).expect("JSON output");
        assert_eq!(got, want, "run {}: result", r.id);
        assert_eq!(r.latest_seq, u64::from(ITEMS), "run {}", r.id);
        let seqs: Vec<u64> = retry(&tokio, "listing checkpoints", || {
            client.list_checkpoints(&r.id)
        })
        .iter()
        .map(|c| c.seq)
        .collect();
        assert_eq!(
            seqs,
            (1..=u64::from(ITEMS)).collect::<Vec<_>>(),
            "run {}",
            r.id
        );
    }
    let resumed = match check_acks(&acks, RUNS) {
        Ok(resumed) => resumed,
        Err(lost) => {
            let run = lost
                .split(' ')
                .nth(1)
                .unwrap_or_default()
                .trim_end_matches(':');
            let history = tokio.block_on(client.history(run));
            panic!("{lost}; its history: {history:#?}");
        }
    };
    assert!(resumed > 0, "no run was interrupted by the restarts");
    // The store's failures were reported, and the recovery.
    for p in [&a, &b] {
        let err = p.stderr();
        assert!(
            err.contains("checkpoint-runtime: worker") && err.contains("the store failed"),
            "worker {}: no report of the store's failures on stderr: {err}",
            p.name()
        );
        assert!(
            err.contains("the store works again"),
            "worker {}: no report of the store's recovery on stderr: {err}",
            p.name()
        );
    }
    eprintln!(
        "{RUNS} runs x {ITEMS} checkpoints, 2 worker processes, leases of {TTL_MS} ms: started \
         in {started:?}, all completed in {took:?} across {} restarts ({resumed} runs resumed \
         by a later attempt)",
        restarts.len()
    );
    drop(client);
    drop((a, b));
    drop(tokio);
    drop(cluster);
}
