//! A long-running worker process of the load tests (`load.rs`,
//! `restart.rs`): its stdout read line by line on a thread, its stderr kept
//! in a file, signals sent with `kill`. Dropping it SIGKILLs and reaps the
//! child, so no process outlives a failed assertion.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct WorkerProc {
    name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
    /// Every stdout line read so far.
    seen: Vec<String>,
}

impl WorkerProc {
    /// Starts `bin` with `args`, its stderr going to the file `stderr`.
    pub fn spawn(
        bin: &str,
        name: &str,
        stderr: PathBuf,
        args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    ) -> WorkerProc {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
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
        WorkerProc {
            name: name.to_owned(),
            child,
            lines,
            stderr,
            seen: Vec::new(),
        }
    }

    /// The name it was given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Its name, stdout so far and the tail of its stderr, for a failure message.
    pub fn describe(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
        let err = self.stderr();
        let mut start = err.len().saturating_sub(3000);
        while !err.is_char_boundary(start) {
            start += 1;
        }
        format!(
            "process `{}`: stdout {:?}; stderr (tail): {}",
            self.name,
            self.seen,
            &err[start..]
        )
    }

    /// Waits for a stdout line starting with `prefix`; panics after `timeout`.
    pub fn expect_line(&mut self, prefix: &str, timeout: Duration) {
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.starts_with(prefix);
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => panic!(
                    "expected `{prefix}` within {timeout:?} from {}",
                    self.describe()
                ),
            }
        }
    }

    /// The first stdout line starting with `prefix` within `timeout`, if
    /// one comes.
    pub fn wait_line(&mut self, prefix: &str, timeout: Duration) -> Option<String> {
        let until = Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).ok()?;
            self.seen.push(line.clone());
            if line.starts_with(prefix) {
                return Some(line);
            }
        }
    }

    /// Sends `sig` (`-STOP`, `-CONT`, ...) with `kill`.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill {sig} {} failed", self.child.id());
    }

    /// Panics if the process exited (a worker must keep working).
    pub fn check_alive(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!("worker exited with {status}: {}", self.describe());
        }
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
