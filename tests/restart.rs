//! PostgreSQL server restarts under load: two worker processes
//! (`checkpoint-test-worker load --acks`, src/bin) work off 1,000 runs x 20
//! checkpoints with 3 s leases on a throw-away PostgreSQL cluster that this
//! test creates (`initdb` into a temp dir) and starts on a free port of
//! 127.0.0.1. While the runs are worked off, the server is restarted twice:
//! at 30 % of the runs completed with a fast shutdown (SIGINT: sessions
//! ended, transactions rolled back) and 1 s away, at 65 % with an immediate
//! one (SIGQUIT: no shutdown checkpoint, crash recovery on start) and away
//! for longer than a lease (4 s). Then:
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
//! The cluster runs as the current user, or, when the test runs as root
//! (which `initdb` refuses), as the system user `postgres`. A guard stops
//! it (SIGQUIT, then SIGKILL) and removes its directory when the test ends,
//! also when it fails; a watchdog process does the same, and SIGKILLs the
//! workers, should the test process itself be killed.
//!
//! It needs the PostgreSQL server binaries (`initdb`, `postgres`,
//! `pg_isready`): from `CHECKPOINT_TEST_PG_BIN`, else the newest
//! `/usr/lib/postgresql/*/bin`, else `pg_config --bindir`. It runs when
//! `CHECKPOINT_TEST_POSTGRES_URL` is set (as in CI, which has the binaries;
//! it does not use that server) and is ignored otherwise; with the variable
//! set but no binaries found it prints why and passes.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use checkpoint_runtime::store::postgres::PostgresStore;
use checkpoint_runtime::store::{RunRecord, RunState, Store};
use checkpoint_runtime::{RunFilter, StatusKind};
use common::pg::URL_VAR;
use common::worker::WorkerProc;

const WORKER: &str = env!("CARGO_BIN_EXE_checkpoint-test-worker");
const RUNS: usize = 1000;
const ITEMS: u32 = 20;
const TTL_MS: u64 = 3000;
/// How long the whole load may take, restarts included.
const LIMIT: Duration = Duration::from_secs(300);

// ---------------------------------------------------------------------------
// The throw-away cluster

/// A PostgreSQL cluster in a temp dir, its server on `port`. Dropping it
/// stops the server and removes the directory.
struct Cluster {
    bin: PathBuf,
    /// Holds `data/`, the server's socket and `server.log`; owned by the
    /// user the server runs as.
    base: PathBuf,
    port: u16,
    /// The user and group the server runs as, when not the current ones.
    owner: Option<(u32, u32)>,
    server: Option<Child>,
    watchdog: Option<Child>,
}

/// The directory of the server binaries (see the module docs).
fn server_bin() -> Result<PathBuf, String> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Some(dir) = std::env::var_os("CHECKPOINT_TEST_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if has(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "CHECKPOINT_TEST_PG_BIN={} has no initdb and postgres",
                dir.display()
            ))
        };
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let dir = e.path().join("bin");
            has(&dir).then_some((version, dir))
        })
        .collect();
    found.sort();
    if let Some((_, dir)) = found.pop() {
        return Ok(dir);
    }
    let out = Command::new("pg_config").arg("--bindir").output();
    if let Ok(out) = out {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has(&dir) {
            return Ok(dir);
        }
    }
    Err(
        "no PostgreSQL server binaries (initdb, postgres) found in CHECKPOINT_TEST_PG_BIN, \
         /usr/lib/postgresql/*/bin or pg_config --bindir"
            .to_owned(),
    )
}

/// `None` when the server can run as the current user; as root (which
/// `initdb` refuses) the uid and gid of the system user `postgres`.
fn server_owner() -> Result<Option<(u32, u32)>, String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| format!("running `id -u`: {e}"))?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postgres") && f.len() > 3)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
                .flatten()
        })
        .map(Some)
        .ok_or_else(|| {
            "the test runs as root, which initdb refuses, and there is no `postgres` user to \
             run the server as"
                .to_owned()
        })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn kill(sig: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

impl Cluster {
    /// Creates the cluster (`initdb`) and starts the watchdog; the server
    /// is not started yet.
    fn new() -> Result<Cluster, String> {
        let bin = server_bin()?;
        let owner = server_owner()?;
        let base = std::env::temp_dir().join(format!(
            "checkpoint-pg-{}-{}",
            std::process::id(),
            common::now_nanos() % 1_000_000_000
        ));
        std::fs::create_dir_all(&base).map_err(|e| format!("creating {}: {e}", base.display()))?;
        let mut cluster = Cluster {
            bin,
            base,
            port: free_port(),
            owner,
            server: None,
            watchdog: None,
        };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&cluster.base, Some(uid), Some(gid)).map_err(|e| {
                format!(
                    "handing {} to the server's user: {e}",
                    cluster.base.display()
                )
            })?;
        }
        // Should this process be killed, stop the server and the processes
        // listed in `watched.pids` (the workers), and clean up.
        let script = format!(
            "while kill -0 {} 2>/dev/null; do sleep 1; done; cd '{}' || exit; \
             for p in $(cat watched.pids 2>/dev/null); do kill -KILL \"$p\"; done; \
             pid=$(head -n 1 data/postmaster.pid 2>/dev/null) && kill -QUIT \"$pid\"; \
             sleep 2; cd / && rm -rf '{}'",
            std::process::id(),
            cluster.base.display(),
            cluster.base.display()
        );
        cluster.watchdog = Some(
            Command::new("sh")
                .args(["-c", &script])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting the watchdog: {e}"))?,
        );
        let out = cluster
            .command("initdb")
            .args(["-D", "data", "-U", "postgres", "-A", "trust", "-E", "UTF8"])
            .args(["--locale=C", "--no-sync"])
            .output()
            .map_err(|e| format!("running initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(cluster)
    }

    /// Has the watchdog SIGKILL process `pid` too, should this process be
    /// killed.
    fn watch(&self, pid: u32) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join("watched.pids"))
            .expect("the watchdog's list");
        writeln!(f, "{pid}").expect("writing the watchdog's list");
    }

    /// A server binary, run as the server's user in its directory.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        c.current_dir(&self.base)
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        if let Some((uid, gid)) = self.owner {
            use std::os::unix::process::CommandExt;
            c.uid(uid).gid(gid);
        }
        c
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.base.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Starts the server and waits until it accepts connections.
    fn start(&mut self) {
        assert!(self.server.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join("server.log"))
            .expect("the server log");
        let port = self.port.to_string();
        let server = self
            .command("postgres")
            .args(["-D", "data", "-p", &port, "-k", "."])
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=100",
            ])
            .stdout(log.try_clone().expect("the server log"))
            .stderr(log)
            .spawn()
            .expect("starting postgres");
        self.server = Some(server);
        let since = Instant::now();
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args([
                    "-q",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-U",
                    "postgres",
                    "-t",
                    "1",
                ])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            if let Some(status) = self
                .server
                .as_mut()
                .and_then(|s| s.try_wait().ok().flatten())
            {
                self.server = None;
                panic!("postgres exited with {status}: {}", self.log_tail());
            }
            assert!(
                since.elapsed() < Duration::from_secs(60),
                "postgres did not accept connections within 60 s: {}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `sig` to the server and waits until it has exited.
    fn stop(&mut self, sig: &str) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        kill(sig, server.id());
        let since = Instant::now();
        while server.try_wait().ok().flatten().is_none() {
            if since.elapsed() > Duration::from_secs(60) {
                let _ = server.kill();
                let _ = server.wait();
                panic!(
                    "postgres did not stop on {sig} within 60 s: {}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            kill("-QUIT", server.id());
            let since = Instant::now();
            while server.try_wait().ok().flatten().is_none()
                && since.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = server.kill();
            let _ = server.wait();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        if std::thread::panicking() {
            eprintln!("server log (tail):\n{}", self.log_tail());
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

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
    let completed = RunFilter::new().status(StatusKind::Completed);
    let mut restarts: Vec<String> = Vec::new();
    let mut last = (0usize, Instant::now());
    loop {
        a.check_alive();
        b.check_alive();
        let done = match tokio.block_on(client.list_runs(&completed)) {
            Ok(runs) => runs.len(),
            Err(_) => last.0,
        };
        if done != last.0 {
            last = (done, Instant::now());
        }
        if done == RUNS {
            break;
        }
        let due = match restarts.len() {
            0 => done * 100 >= RUNS * 30,
            1 => done * 100 >= RUNS * 65,
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
                "{how} at {done} of {RUNS} runs completed: server away {outage:?}, both worker \
                 ids held again {:?} later",
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
        std::thread::sleep(Duration::from_millis(200));
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
