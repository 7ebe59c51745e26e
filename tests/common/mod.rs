//! Helpers shared by the crash tests across processes (`crash.rs`,
//! `crash_shapes.rs`): temp directories, child worker processes driven line
//! by line, the side-effect log, and what the store holds about a run.
// Each test crate uses its own part of these helpers.
#![allow(dead_code)]

pub mod cluster;
pub mod pg;
pub mod worker;

/// One `#[tokio::test]` per case and store kind: `on_stores!("name",
/// [memory, sqlite, postgres]: case_a, case_b)` calls `async fn
/// case_a(url: &str)` with the URL of a fresh store of each kind (see
/// [`test_store`]; `name` names its file or schema). The PostgreSQL ones
/// are ignored, never passed, unless `CHECKPOINT_TEST_POSTGRES_URL` was set
/// when they were built (`build.rs`).
#[allow(unused_macros)]
macro_rules! on_stores {
    ($name:literal, [$($kind:ident),* $(,)?]: $($case:ident),* $(,)?) => {
        on_stores!(@kinds $name [$($kind)*] [$($case),*]);
    };
    // The cases as one token tree, repeated once per kind.
    (@kinds $name:literal [$($kind:ident)*] $cases:tt) => {
        $( on_stores!(@kind $kind $name $cases); )*
    };
    (@kind postgres $name:literal [$($case:ident),*]) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[cfg_attr(
                    not(checkpoint_test_postgres),
                    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
                )]
                async fn $case() {
                    let (url, _keep) =
                        crate::common::test_store("postgres", stringify!($case), $name)
                            .expect("CHECKPOINT_TEST_POSTGRES_URL names a database");
                    super::$case(&url).await;
                }
            )*
        }
    };
    (@kind $kind:ident $name:literal [$($case:ident),*]) => {
        mod $kind {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let (url, _keep) =
                        crate::common::test_store(stringify!($kind), stringify!($case), $name)
                            .expect("a store of this kind");
                    super::$case(&url).await;
                }
            )*
        }
    };
}

/// A fresh store of `kind` (`memory`, `sqlite`, `postgres`) for test
/// `test`: its URL, and what keeps it (a directory, a schema) until
/// dropped. `None` for PostgreSQL without `CHECKPOINT_TEST_POSTGRES_URL`.
pub fn test_store(kind: &str, test: &str, name: &str) -> Option<(String, Box<dyn std::any::Any>)> {
    match kind {
        "memory" => Some((":memory:".to_owned(), Box::new(()))),
        "sqlite" => {
            let dir = TempDir::new(test);
            let url = dir.0.join(format!("{name}.db")).display().to_string();
            Some((url, Box::new(dir)))
        }
        "postgres" => {
            let schema = pg::Schema::new(test, name)?;
            Some((schema.url(), Box::new(schema)))
        }
        other => panic!("no store kind `{other}`"),
    }
}

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use checkpoint_runtime::store::{RunRecord, RunState};
use checkpoint_runtime::{CheckpointInfo, HistoryEntry, Runtime, Status};

/// How long a test waits for one line from a child before failing.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(20);

pub fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

/// A fresh directory, removed when the test passes (kept for inspection and
/// printed when it fails).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "checkpoint-crash-{name}-{}-{}",
            std::process::id(),
            now_nanos()
        ));
        std::fs::create_dir_all(&dir).expect("creating the temp dir");
        TempDir(dir)
    }

    pub fn db(&self) -> String {
        self.0.join("runs.db").to_string_lossy().into_owned()
    }

    pub fn log(&self) -> PathBuf {
        self.0.join("effects.log")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("crash test files kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A child worker process. Dropping it SIGKILLs and reaps the child, so no
/// process outlives a failed assertion.
pub struct Proc {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
    /// Every stdout line read so far.
    seen: Vec<String>,
}

impl Proc {
    pub fn spawn(bin: &str, dir: &TempDir, name: &str, args: &[&str]) -> Proc {
        let stderr = dir.0.join(format!("{name}.stderr"));
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(&stderr).expect("stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {bin}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            seen: Vec::new(),
        }
    }

    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    pub fn describe(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        format!(
            "process `{}`: stdout so far {:?}; stderr: {err}",
            self.name, self.seen
        )
    }

    /// The next stdout line; `None` at end of output.
    pub fn next_line(&mut self) -> Option<String> {
        match self.lines.recv_timeout(LINE_TIMEOUT) {
            Ok(line) => {
                self.seen.push(line.clone());
                Some(line)
            }
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                panic!("no output for {LINE_TIMEOUT:?} from {}", self.describe())
            }
        }
    }

    /// A line already printed, if any (does not wait).
    pub fn try_line(&mut self) -> Option<String> {
        let line = self.lines.try_recv().ok()?;
        self.seen.push(line.clone());
        Some(line)
    }

    /// Reads lines until one starts with `prefix`, which is returned.
    pub fn expect_line(&mut self, prefix: &str) -> String {
        loop {
            match self.next_line() {
                Some(line) if line.starts_with(prefix) => return line,
                Some(_) => {}
                None => panic!("expected a line `{prefix}...` from {}", self.describe()),
            }
        }
    }

    /// Lets a stepping child go on past its current durable point.
    pub fn go(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(b"go\n")
            .and_then(|_| stdin.flush())
            .unwrap_or_else(|e| panic!("writing to {}: {e}", self.name));
    }

    /// SIGKILL (what `Child::kill` sends on Unix), then reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.pid()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill {sig} {} failed", self.pid());
    }

    /// Waits for the child to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                start.elapsed() < timeout,
                "{} did not exit within {timeout:?}",
                self.describe()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Reads the rest of the output and checks that the child exited with 0.
    pub fn finish(&mut self) -> Vec<String> {
        let mut rest = Vec::new();
        while let Some(line) = self.next_line() {
            rest.push(line);
        }
        let status = self.wait_exit(Duration::from_secs(10));
        assert!(status.success(), "{} exited with {status}", self.describe());
        rest
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // Also ends a SIGSTOPped child: SIGKILL needs no SIGCONT.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One line of the side-effect log.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub at: u128,
    pub worker: String,
    pub text: String,
}

pub fn read_log(path: &Path) -> Vec<Effect> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let at = parts.next().and_then(|t| t.parse().ok());
            let worker = parts.next();
            let rest = parts.next();
            match (at, worker, rest) {
                (Some(at), Some(worker), Some(text)) => Effect {
                    at,
                    worker: worker.to_owned(),
                    text: text.to_owned(),
                },
                _ => panic!("malformed side-effect line {l:?}"),
            }
        })
        .collect()
}

pub fn effects_of(log: &[Effect]) -> Vec<(String, String)> {
    log.iter()
        .map(|e| (e.worker.clone(), e.text.clone()))
        .collect()
}

/// What the store holds about the run, read through the library.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub status: Status,
    pub record: RunRecord,
    pub output: Option<serde_json::Value>,
    pub checkpoints: Vec<CheckpointInfo>,
    pub history: Vec<HistoryEntry>,
}

pub fn snapshot(db: &str, run: &str) -> Snapshot {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async {
        // A runtime that only reads: it never runs a worker, so it claims nothing.
        let store = Runtime::builder()
            .worker_id("inspector")
            .open(db)
            .await
            .expect("opening the database");
        let record = store
            .store()
            .load_run(run)
            .await
            .expect("loading the run")
            .expect("the run exists");
        let output = match &record.state {
            RunState::Completed { output, .. } => {
                Some(serde_json::from_slice(output).expect("output is JSON"))
            }
            _ => None,
        };
        Snapshot {
            status: store.status(run).await.expect("status"),
            output,
            checkpoints: store.checkpoints(run).await.expect("checkpoints"),
            history: store.history_entries(run).await.expect("history"),
            record,
        }
    })
}

pub fn labels(s: &Snapshot) -> Vec<(u64, Option<String>)> {
    s.checkpoints
        .iter()
        .map(|c| (c.seq, c.label.clone()))
        .collect()
}
