//! The README's getting-started program, as a user meets it.
//!
//! - `readme_program_is_the_example`: the README's program block is byte for
//!   byte `examples/getting_started.rs`.
//! - `interrupted_runs_resume`: that program, compiled here from the same file
//!   (`include!` below), runs in child processes in a fresh directory: stopped
//!   with SIGINT (Ctrl-C; SIGTERM if this test ignores SIGINT, which the child
//!   would inherit) after step 3 and run again, it goes on at step 3 or
//!   4 (the step in flight when it stopped may run again), never at step 1;
//!   SIGKILLed later and run again, the same; the run's result is the sum of
//!   every step, and a fourth start prints it at once.
//!
//! The child is this test binary itself, running the ignored test
//! `child_program` (which calls the example's `main`): an example has no
//! `CARGO_BIN_EXE_*` path, and building it from here would wait on the
//! build directory's lock that `cargo test` holds.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The example's items, compiled into this test: `main` among them.
mod program {
    include!("../examples/getting_started.rs");

    pub fn run() -> Result<(), Error> {
        main()
    }
}

const CHILD_ENV: &str = "CHECKPOINT_GETTING_STARTED_CHILD";
const README_MARKER: &str = "<!-- examples/getting_started.rs -->";
/// How long the test waits for the next line of a child.
const LINE_TIMEOUT: Duration = Duration::from_secs(30);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The ```rust block that follows the marker in README.md.
fn readme_program() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let at = readme
        .find(README_MARKER)
        .unwrap_or_else(|| panic!("README.md has no `{README_MARKER}` line"));
    let rest = &readme[at + README_MARKER.len()..];
    let open = "\n```rust\n";
    let start = rest
        .find(open)
        .unwrap_or_else(|| panic!("no ```rust block after `{README_MARKER}`"))
        + open.len();
    let len = rest[start..]
        .find("\n```\n")
        .expect("the README's program block ends")
        + 1;
    rest[start..start + len].to_owned()
}

#[test]
fn readme_program_is_the_example() {
    let example = std::fs::read_to_string(root().join("examples/getting_started.rs"))
        .expect("examples/getting_started.rs");
    let readme = readme_program();
    if readme != example {
        let line = readme
            .lines()
            .zip(example.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(readme.lines().count().min(example.lines().count()));
        panic!(
            "README.md's getting-started program differs from examples/getting_started.rs \
             (first at line {} of the program): copy one onto the other",
            line + 1
        );
    }
}

/// Runs the program when this binary is started by `interrupted_runs_resume`.
#[test]
#[ignore = "the child process of interrupted_runs_resume"]
fn child_program() {
    if std::env::var_os(CHILD_ENV).is_some() {
        program::run().expect("the getting-started program");
    }
}

/// One run of the program in `dir`, its stdout read line by line.
struct Program {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Program {
    fn spawn(dir: &Path) -> Program {
        let exe = std::env::current_exe().expect("this test's path");
        let mut child = Command::new(exe)
            .args(["child_program", "--exact", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(CHILD_ENV, "1")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning the program");
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
        Program {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line the program printed (`step N` or `result: ..`), skipping
    /// the test harness's own lines; `None` once it exited.
    fn next(&mut self) -> Option<Line> {
        loop {
            let line = match self.lines.recv_timeout(LINE_TIMEOUT) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("no output for {LINE_TIMEOUT:?}; so far {:?}", self.seen)
                }
            };
            self.seen.push(line.clone());
            // libtest may print `test child_program ... ` before the
            // program's first line, on the same line.
            let text = line
                .strip_prefix("test child_program ... ")
                .unwrap_or(&line);
            if let Some(rest) = text.strip_prefix("run add-up-1: step ") {
                let step = rest
                    .split(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("a step number in {line:?}"));
                return Some(Line::Step(step));
            }
            if let Some(rest) = text.strip_prefix("result: ") {
                let total = rest
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("a number in {line:?}"));
                return Some(Line::Result(total));
            }
        }
    }

    fn signal(&mut self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("running kill");
        assert!(status.success(), "kill {sig} failed");
        let status = self.child.wait().expect("waiting for the program");
        assert!(!status.success(), "the program ended on its own: {status}");
    }

    /// Reads the program's lines up to its end; checks it exited with 0.
    fn finish(&mut self) -> Vec<Line> {
        let mut lines = Vec::new();
        while let Some(line) = self.next() {
            lines.push(line);
        }
        let status = self.child.wait().expect("waiting for the program");
        assert!(status.success(), "{status}; output {:?}", self.seen);
        lines
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, PartialEq)]
enum Line {
    Step(u32),
    Result(u64),
}

/// Whether this process ignores SIGINT (as a background job of a shell
/// without job control does): its children then start ignoring it too.
fn sigint_ignored() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (2 - 1)) != 0)
}

/// Runs the program until it prints step `n`.
fn run_to_step(p: &mut Program, n: u32) -> Vec<u32> {
    let mut steps = Vec::new();
    loop {
        match p.next() {
            Some(Line::Step(s)) => {
                steps.push(s);
                if s == n {
                    return steps;
                }
            }
            other => panic!("expected step {n}, got {other:?} after {steps:?}"),
        }
    }
}

#[test]
fn interrupted_runs_resume() {
    let dir = std::env::temp_dir().join(format!(
        "checkpoint-getting-started-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time after 1970")
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).expect("a fresh directory");

    // First run: from step 1, stopped as Ctrl-C stops it (SIGINT; SIGTERM
    // when this test ignores SIGINT, which its children would inherit).
    let mut first = Program::spawn(&dir);
    assert_eq!(run_to_step(&mut first, 3), [1, 2, 3]);
    first.signal(if sigint_ignored() { "-TERM" } else { "-INT" });

    // Second run: resumes after the last stored checkpoint (step 2 or 3),
    // then is killed outright.
    let mut second = Program::spawn(&dir);
    let steps = run_to_step(&mut second, 6);
    assert!(
        steps[0] == 3 || steps[0] == 4,
        "the second run began at step {} (its steps: {steps:?}), not where the first stopped",
        steps[0]
    );
    second.signal("-KILL");

    // Third run: resumes again and completes with the sum of every step.
    let mut third = Program::spawn(&dir);
    let lines = third.finish();
    let steps: Vec<u32> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Step(s) => Some(*s),
            Line::Result(_) => None,
        })
        .collect();
    assert!(
        steps.first() == Some(&6) || steps.first() == Some(&7),
        "the third run began at {steps:?}, not where the second stopped"
    );
    assert_eq!(steps.last(), Some(&10), "{lines:?}");
    assert_eq!(lines.last(), Some(&Line::Result(55)), "{lines:?}");

    // Fourth run: the run is complete; starting it again gives its result.
    let mut fourth = Program::spawn(&dir);
    assert_eq!(fourth.finish(), [Line::Result(55)]);

    let _ = std::fs::remove_dir_all(&dir);
}
