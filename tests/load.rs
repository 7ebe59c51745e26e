//! Load across real processes on PostgreSQL: two worker processes
//! (`checkpoint-test-worker load`, src/bin) share one database, many runs of
//! a loop of checkpoints each, short leases, the default pool. Every run must
//! complete within a bounded time, and no worker may stop working.
//!
//! - `two_worker_processes_finish_1000_runs_under_load`: 1,000 runs x 20
//!   checkpoints, 3 s leases, all completed within 120 s (about 25 s here,
//!   on two cores), each run claimed once: no lease lapsed.
//! - `workers_take_up_every_run_after_dropped_connections_sigstop_and_sigkill`:
//!   500 runs x 20 checkpoints, 3 s leases; every server session of both
//!   workers is ended (twice), worker A is SIGKILLed and started again,
//!   worker B is SIGSTOPped past its leases: every run still completes
//!   within 120 s, no worker stops working, and both hold sessions again.
//!
//! Before the fix this stalled for good (0 of 300 runs completed in 90 s): a run's lease renewal was awaited
//! in the driver's `select!` arm, so the workflow future -- holding a pooled
//! connection inside an open checkpoint transaction that locks the run's
//! row -- was not polled meanwhile; the renewal waited for that very row
//! lock (or for a pool slot held by such a transaction) and never got it.
//!
//! The server's URL comes from `CHECKPOINT_TEST_POSTGRES_URL`. Built without
//! it, the tests are ignored (`cfg(checkpoint_test_postgres)`, set by
//! `build.rs`), not passed. Each test keeps its tables in a PostgreSQL
//! schema of its own, dropped at the end.

mod common;

use common::pg::Schema;
use common::worker::WorkerProc;
use common::TempDir;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use checkpoint_runtime::store::postgres::PostgresStore;
use checkpoint_runtime::store::{RunRecord, RunState, Store};
use checkpoint_runtime::{Event, RunFilter};

const WORKER: &str = env!("CARGO_BIN_EXE_checkpoint-test-worker");

/// One test at a time: each loads the machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// Faults injected while the runs are worked off, each once, when a
/// share of the runs has completed.
#[derive(Clone, Copy, PartialEq)]
enum Faults {
    None,
    /// At 20 % of the runs completed, drop every connection of both
    /// workers; at 40 %, SIGKILL worker A and start it again (same worker
    /// id); at 60 %, drop every connection again; at 80 %, SIGSTOP worker B
    /// for two lease TTLs, then SIGCONT.
    Chaos,
}

/// Ends every server session of application `app` (the worker processes
/// name theirs, so that nothing else on the server is touched). Returns how
/// many were ended.
fn drop_connections(tokio: &tokio::runtime::Runtime, base: &str, apps: &[&str]) -> usize {
    tokio.block_on(async {
        let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
            .await
            .expect("connecting to the server");
        let task = tokio::spawn(conn);
        let apps: Vec<String> = apps.iter().map(|a| a.to_string()).collect();
        let rows = client
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = ANY($1)",
                &[&apps],
            )
            .await
            .expect("terminating sessions");
        drop(client);
        let _ = task.await;
        rows.len()
    })
}

/// How many server sessions application `app` holds.
fn sessions(tokio: &tokio::runtime::Runtime, base: &str, app: &str) -> i64 {
    tokio.block_on(async {
        let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
            .await
            .expect("connecting to the server");
        let task = tokio::spawn(conn);
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .await
            .expect("counting sessions")
            .get(0);
        drop(client);
        let _ = task.await;
        n
    })
}

/// How many checkpoint rows in schema `schema` store fields by appending
/// (`load_steps`'s growing log).
fn appended_rows(tokio: &tokio::runtime::Runtime, base: &str, schema: &str) -> i64 {
    tokio.block_on(async {
        let (client, conn) = tokio_postgres::connect(base, tokio_postgres::NoTls)
            .await
            .expect("connecting to the server");
        let task = tokio::spawn(conn);
        let sql =
            format!("SELECT count(*) FROM \"{schema}\".cp_checkpoints WHERE appended IS NOT NULL");
        let n: i64 = client
            .query_one(&sql, &[])
            .await
            .expect("counting appended rows")
            .get(0);
        drop(client);
        let _ = task.await;
        n
    })
}

/// Starts `runs` runs of `items` checkpoints from worker A, works them off
/// with workers A and B (leases of `ttl_ms`), injecting `faults`, and waits
/// until all completed, at most `limit`.
fn load(test: &str, runs: usize, items: usize, ttl_ms: u64, limit: Duration, faults: Faults) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(schema) = Schema::new(test, "cp_load") else {
        return;
    };
    // Each worker names its sessions, so that the test can find them.
    let app_a = format!("cp-load-a-{}", std::process::id());
    let app_b = format!("cp-load-b-{}", std::process::id());
    let url = schema.url();
    let url_a = format!("{url}&application_name={app_a}");
    let url_b = format!("{url}&application_name={app_b}");
    let (runs_s, items_s, ttl_s) = (runs.to_string(), items.to_string(), ttl_ms.to_string());
    let args = |worker: &'static str, url: &'static str| -> Vec<String> {
        let url = if url == "a" { &url_a } else { &url_b };
        [
            "load",
            "--db",
            url.as_str(),
            "--runs",
            runs_s.as_str(),
            "--items",
            items_s.as_str(),
            "--lease-ttl-ms",
            ttl_s.as_str(),
            "--worker-id",
            worker,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let logs = TempDir::new("load");
    let spawn = |name: &str, args: &[String]| {
        let stderr = logs.0.join(format!("{name}.stderr"));
        let mut p = WorkerProc::spawn(WORKER, name, stderr, args);
        p.expect_line("READY", Duration::from_secs(60));
        p
    };
    let began = Instant::now();
    let mut a_args = args("load-a", "a");
    a_args.push("--start".to_owned());
    let mut a = spawn("a", &a_args);
    let mut b = spawn("b", &args("load-b", "b"));
    let started = began.elapsed();

    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // The store itself, not a runtime: nothing here may claim a run.
    let client = tokio
        .block_on(PostgresStore::open(&url))
        .expect("opening the store");
    let mut last = (0usize, Instant::now());
    let mut step = 0;
    loop {
        a.check_alive();
        b.check_alive();
        let all = tokio
            .block_on(client.list_runs(&RunFilter::new()))
            .expect("listing runs");
        let done = all
            .iter()
            .filter(|r| matches!(r.state, RunState::Completed { .. }))
            .count();
        let stored: u64 = all.iter().map(|r| r.latest_seq).sum();
        if done != last.0 {
            last = (done, Instant::now());
        }
        if done == runs {
            break;
        }
        // Faults at 10, 20, 30 and 40 % of the checkpoints stored: the last
        // one leaves most of the load still to run, however fast a loaded
        // machine finishes it. (Runs started together end together: counted
        // in runs completed, the load went from none to most between two
        // looks, and faults came too late.)
        let total = (runs * items) as u64;
        if faults == Faults::Chaos && stored * 10 >= total * (step + 1) as u64 && step < 4 {
            step += 1;
            match step {
                1 | 3 => {
                    let n = drop_connections(&tokio, &schema.base, &[&app_a, &app_b]);
                    eprintln!(
                        "{test}: {stored} checkpoints stored: dropped {n} connections of both \
                         workers"
                    );
                    assert!(n > 0, "no connections of the workers found");
                }
                2 => {
                    eprintln!(
                        "{test}: {stored} checkpoints stored: SIGKILL worker a, start it again"
                    );
                    drop(a);
                    a = spawn("a2", &args("load-a", "a"));
                }
                _ => {
                    eprintln!(
                        "{test}: {stored} checkpoints stored: SIGSTOP worker b past its leases"
                    );
                    b.signal("-STOP");
                    std::thread::sleep(Duration::from_millis(ttl_ms * 2));
                    b.signal("-CONT");
                }
            }
        }
        assert!(
            began.elapsed() < limit,
            "{done} of {runs} runs completed within {limit:?} (no run completed for the last \
             {:?}); checkpoints stored: {}; statuses: {:?}; sessions: a {}, b {}",
            last.1.elapsed(),
            stored,
            count_statuses(&all),
            sessions(&tokio, &schema.base, &app_a),
            sessions(&tokio, &schema.base, &app_b),
        );
        // Often while faults are due, so that each comes near its mark.
        let pause = if faults == Faults::Chaos && step < 4 {
            20
        } else {
            200
        };
        std::thread::sleep(Duration::from_millis(pause));
    }
    let all = tokio
        .block_on(client.list_runs(&RunFilter::new()))
        .expect("listing runs");
    // What `load_steps` returns (its log's numbers summed), as JSON.
    let expected = (0..items as u64).sum::<u64>().to_string();
    for r in &all {
        assert_eq!(r.latest_seq, items as u64, "run {}", r.id);
        match &r.state {
            RunState::Completed {
                output,
                error: None,
            } => {
                assert_eq!(&output[..], expected.as_bytes(), "run {}", r.id)
            }
            other => panic!("run {}: {other:?}", r.id),
        }
        if faults == Faults::None {
            // No lease lapsed: each run was claimed once and never taken
            // over or retried (a worker that took over a run records
            // `Resumed`).
            let history = tokio.block_on(client.history(&r.id)).expect("history");
            let odd: Vec<_> = history
                .iter()
                .filter(|h| matches!(h.event, Event::Resumed { .. } | Event::Retried { .. }))
                .collect();
            // The whole history on failure: who took the run over from
            // whom (`TakenOver`), after which checkpoint, and when.
            assert!(
                odd.is_empty(),
                "run {} lost its lease: {odd:?}; its history: {history:?}",
                r.id
            );
        }
    }
    // The runs' logs were stored as what each checkpoint appended, and
    // resumed from that after every fault.
    let appended = appended_rows(&tokio, &schema.base, &schema.name);
    assert!(appended > 0, "no checkpoint stored its log by appending");
    if faults == Faults::Chaos {
        assert_eq!(step, 4, "not every fault was injected");
        // Both workers (the restarted A too) hold connections again.
        for app in [&app_a, &app_b] {
            assert!(
                sessions(&tokio, &schema.base, app) > 0,
                "{app} holds no session"
            );
        }
    }
    eprintln!(
        "{test}: {runs} runs x {items} checkpoints, 2 worker processes: started in {started:?}, \
         all completed in {:?}",
        began.elapsed()
    );
    drop(client);
    drop((a, b));
    drop(tokio);
}

fn count_statuses(all: &[RunRecord]) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for r in all {
        let lease = match &r.lease {
            Some(l) if l.expires_at > SystemTime::now() => "leased",
            Some(_) => "lease expired",
            None => "free",
        };
        let kind = format!("{:?}/{lease}", r.status().kind());
        match counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind, 1)),
        }
    }
    counts
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn two_worker_processes_finish_1000_runs_under_load() {
    load(
        "two_worker_processes_finish_1000_runs_under_load",
        1000,
        20,
        3000,
        Duration::from_secs(120),
        Faults::None,
    );
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn workers_take_up_every_run_after_dropped_connections_sigstop_and_sigkill() {
    load(
        "workers_take_up_every_run_after_dropped_connections_sigstop_and_sigkill",
        500,
        20,
        3000,
        Duration::from_secs(120),
        Faults::Chaos,
    );
}
