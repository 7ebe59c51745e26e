//! Crash tests across real processes, on one SQLite file.
//!
//! Each test spawns `checkpoint-test-worker` (src/bin) as child processes. Its
//! workflow processes three items (a checkpoint each), waits for an
//! `approval` signal, sleeps durably, takes a last checkpoint and returns;
//! every side effect is appended and fsynced to a log file as
//! `<unix nanos> <worker> <text>`. With `--step`, the child prints
//! `CHECKPOINT <n> <label> <detail>` at every durable point and blocks until
//! the test writes `go` (or kills it), so a test can stop a process at an
//! exact point. See the binary's docs for the rest of its protocol.
//!
//! - `sigkill_after_every_checkpoint`: SIGKILL right after each durable point
//!   in turn, resume in a fresh process: same output, same side-effect log.
//! - `takeover_only_after_lease_expiry`: a second worker does not touch a run
//!   while the first one's lease is live (even past one TTL, while it is
//!   renewed), and takes it over once the lease of the killed first worker
//!   has expired, not before.
//! - `sigstopped_worker_is_fenced`: a worker frozen (SIGSTOP) past its lease
//!   loses the run to another worker, which finishes it; thawed (SIGCONT) and
//!   told to go on, it runs no more user code (its lease lapsed by its own
//!   clock) and the stored run stays exactly the new owner's.
//! - `sigstopped_worker_mid_segment_is_fenced`: the same with the frozen
//!   worker thawed while the new owner holds the run mid-way, and frozen in
//!   the middle of user code, so that it certainly tries to store a
//!   checkpoint with its stale epoch: rejected, and the new owner goes on.
//!
//! The tests run one at a time (they measure lease timings; the machine may
//! have two cores only).

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use checkpoint_runtime::{Event, Status};
use common::{effects_of, labels, now_nanos, read_log, Proc, Snapshot, TempDir, LINE_TIMEOUT};

const WORKER: &str = env!("CARGO_BIN_EXE_checkpoint-test-worker");
const RUN: &str = "story-1";
const APPROVAL: &str = r#"{"approved":true,"by":"ada"}"#;
/// The lease TTL of the two-worker tests.
const TTL: Duration = Duration::from_millis(1000);

/// One test at a time: the lease tests measure time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn nanos(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .expect("time after 1970")
        .as_nanos()
}

fn ms(d: u128) -> f64 {
    d as f64 / 1e6
}

fn worker_args<'a>(cmd: &'a str, db: &'a str, log: &'a str) -> Vec<&'a str> {
    vec![cmd, "--db", db, "--id", RUN, "--log", log]
}

/// Stores the approval signal, from a process of its own.
fn send_approval(dir: &TempDir) {
    let db = dir.db();
    let mut p = Proc::spawn(
        WORKER,
        dir,
        "signal",
        &[
            "signal", "--db", &db, "--id", RUN, "--name", "approval", "--json", APPROVAL,
        ],
    );
    let out = p.finish();
    assert_eq!(out, ["SIGNALLED"], "{}", p.describe());
}

/// What the store holds about the story's run.
fn snapshot(db: &str) -> Snapshot {
    common::snapshot(db, RUN)
}

fn expected_effects(workers: &[(&str, &str)]) -> Vec<(String, String)> {
    workers
        .iter()
        .map(|(w, t)| ((*w).to_owned(), (*t).to_owned()))
        .collect()
}

/// How one story (start, signal, resumes) went.
#[derive(Debug)]
struct Story {
    output: serde_json::Value,
    effects: Vec<(String, String)>,
    /// `CHECKPOINT` lines seen over all processes.
    durable_points: usize,
    signals: usize,
    processes: usize,
    checkpoints: Vec<(u64, Option<String>)>,
}

/// Where `run_story` SIGKILLs a process.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kill {
    Never,
    /// The process that prints the k-th `CHECKPOINT` line (counted over all
    /// processes, from 1), right there.
    AtDurablePoint(usize),
    /// The process that reports the run sleeping (its timer is stored, the
    /// process waits for it), right then.
    WhenSleeping,
}

/// Runs the story to its end on a fresh database, every process stepping,
/// SIGKILLs one process as `kill` says, and resumes the run in a fresh
/// process after it. The approval is sent whenever a process reports that the
/// run waits for it.
fn run_story(dir: &TempDir, kill: Kill) -> Story {
    let kill_at = match kill {
        Kill::AtDurablePoint(k) => Some(k),
        _ => None,
    };
    let db = dir.db();
    let log = dir.log().to_string_lossy().into_owned();
    let mut durable_points = 0;
    let mut signals = 0;
    let mut processes = 0;
    let mut killed = false;
    // The durable point a killed process stopped at ("label detail").
    let mut killed_at: Option<String> = None;
    loop {
        processes += 1;
        assert!(
            processes <= 8,
            "the story does not end: {processes} processes"
        );
        let cmd = if processes == 1 { "start" } else { "resume" };
        let mut args = worker_args(cmd, &db, &log);
        args.extend(["--worker-id", "w", "--step"]);
        let mut p = Proc::spawn(WORKER, dir, &format!("{processes}-{cmd}"), &args);
        enum End {
            Killed,
            Waiting,
            Done(serde_json::Value),
        }
        let mut end = None;
        while let Some(line) = p.next_line() {
            if let Some(rest) = line.strip_prefix("CHECKPOINT ") {
                durable_points += 1;
                let point = rest.split_once(' ').map_or("", |(_, p)| p).to_owned();
                if let Some(at) = killed_at.take() {
                    // The fresh process continues right after the checkpoint
                    // the killed one had reached (it announces it again).
                    assert_eq!(point, at, "resumed elsewhere than where it was killed");
                }
                if Some(durable_points) == kill_at {
                    // The checkpoint is durable and nothing after it has run:
                    // the child is blocked reading stdin.
                    p.kill();
                    killed = true;
                    killed_at = Some(point);
                    end = Some(End::Killed);
                    break;
                }
                p.go();
            } else if line == "WAITING approval" {
                end = Some(End::Waiting);
            } else if let Some(json) = line.strip_prefix("RESULT ") {
                end = Some(End::Done(
                    serde_json::from_str(json).expect("RESULT is JSON"),
                ));
            } else if line == "SLEEPING" && kill == Kill::WhenSleeping && !killed {
                p.kill();
                killed = true;
                end = Some(End::Killed);
                break;
            } else if line != "STARTED" && line != "SLEEPING" {
                panic!("unexpected line {line:?} from {}", p.describe());
            }
        }
        match end {
            Some(End::Killed) => {}
            Some(End::Waiting) => {
                p.finish();
                send_approval(dir);
                signals += 1;
            }
            Some(End::Done(output)) => {
                p.finish();
                if kill != Kill::Never {
                    assert!(killed, "the story ended before the kill ({kill:?})");
                }
                let s = snapshot(&db);
                assert_eq!(s.status, Status::Completed);
                assert_eq!(s.output.as_ref(), Some(&output), "stored output");
                // A fresh process reads the same output from the file.
                let mut r =
                    Proc::spawn(WORKER, dir, "result", &["result", "--db", &db, "--id", RUN]);
                let printed = r.finish();
                assert_eq!(printed.len(), 1, "{printed:?}");
                let read: serde_json::Value = serde_json::from_str(
                    printed[0].strip_prefix("RESULT ").expect("a RESULT line"),
                )
                .expect("RESULT is JSON");
                assert_eq!(read, output, "output read by `result`");
                return Story {
                    output,
                    effects: effects_of(&read_log(&dir.log())),
                    durable_points,
                    signals,
                    processes,
                    checkpoints: labels(&s),
                };
            }
            None => panic!("{} ended without a result", p.describe()),
        }
    }
}

#[test]
fn sigkill_after_every_checkpoint() {
    let _serial = serial();
    let started = Instant::now();
    let base_dir = TempDir::new("uninterrupted");
    let base = run_story(&base_dir, Kill::Never);
    let w = |t: &'static str| ("w", t);
    assert_eq!(
        base.effects,
        expected_effects(&[
            w("begin"),
            w("process item-1"),
            w("process item-2"),
            w("process item-3"),
            w("after approval by ada"),
            w("after sleep"),
            w("end"),
        ])
    );
    assert_eq!(
        base.output,
        serde_json::json!({
            "processed": ["item-1 by w", "item-2 by w", "item-3 by w"],
            "approved_by": "ada",
            "finished_by": "w",
        })
    );
    // item x3, approved (after the wait), slept (after the sleep), final.
    assert_eq!(base.durable_points, 6);
    assert_eq!(base.signals, 1);
    // start (until the wait), signal, resume (through the sleep to the end).
    assert_eq!(base.processes, 2);
    let n = base.durable_points;
    let kills = (1..=n)
        .map(Kill::AtDurablePoint)
        .chain([Kill::WhenSleeping]);
    for kill in kills {
        let k = format!("{kill:?}");
        let dir = TempDir::new(&format!("kill-{}", k.replace(['(', ')'], "")));
        let story = run_story(&dir, kill);
        // Every kill happens right after a durable point, while the child is
        // blocked on stdin (or waits for its stored timer), so nothing after
        // that checkpoint has run: the
        // resumed process starts exactly where the killed one stopped and no
        // segment runs twice. (In general a segment after the latest
        // checkpoint may run again; here that segment is empty.) So the log
        // must equal the uninterrupted run's exactly, not just up to repeats.
        assert_eq!(
            story.effects, base.effects,
            "side effects after a SIGKILL at durable point {k}"
        );
        assert_eq!(story.output, base.output, "output after a SIGKILL at {k}");
        assert_eq!(
            story.checkpoints, base.checkpoints,
            "checkpoint versions after a SIGKILL at {k}"
        );
        // The signal consumed by the killed process is not lost: the resumed
        // process gets it again from the store (no second signal is needed).
        assert_eq!(story.signals, 1, "signals sent with a SIGKILL at {k}");
        assert!(
            story.durable_points >= n,
            "kill at {k}: only {} durable points",
            story.durable_points
        );
        assert_eq!(story.processes, base.processes + 1, "kill at {k}");
    }
    eprintln!(
        "sigkill_after_every_checkpoint: {} kill points, {:.2?}",
        n + 1,
        started.elapsed()
    );
}

#[test]
fn takeover_only_after_lease_expiry() {
    let _serial = serial();
    let started = Instant::now();
    let dir = TempDir::new("takeover");
    let db = dir.db();
    let log = dir.log().to_string_lossy().into_owned();
    let ttl_ms = TTL.as_millis().to_string();

    // Worker A claims the run and stops right after its first checkpoint.
    let mut a_args = worker_args("start", &db, &log);
    a_args.extend(["--worker-id", "a", "--lease-ttl-ms", &ttl_ms, "--step"]);
    let mut a = Proc::spawn(WORKER, &dir, "a", &a_args);
    assert_eq!(a.expect_line("CHECKPOINT"), "CHECKPOINT 1 item item-1");

    // Worker B, on the same file, started at once.
    let mut b_args = worker_args("resume", &db, &log);
    b_args.extend(["--worker-id", "b", "--lease-ttl-ms", &ttl_ms]);
    let mut b = Proc::spawn(WORKER, &dir, "b", &b_args);

    // A stays alive (and renews its lease) for one and a half TTLs: B must
    // not touch the run all that time.
    std::thread::sleep(TTL * 3 / 2);
    assert_eq!(b.try_line(), None, "B executed while A's lease was live");
    let held = snapshot(&db);
    assert_eq!(held.record.latest_seq, 1);
    let lease = held.record.lease.clone().expect("A holds a lease");
    assert_eq!(lease.worker, "a");
    assert!(
        !read_log(&dir.log()).iter().any(|e| e.worker == "b"),
        "B had side effects while A's lease was live"
    );

    // SIGKILL A. Its lease, as it was last renewed, is now fixed.
    a.kill();
    let killed_at = now_nanos();
    let expiry = nanos(
        snapshot(&db)
            .record
            .lease
            .expect("A's lease is left behind")
            .expires_at,
    );
    assert!(
        expiry > killed_at,
        "A's lease had expired before it was killed (renewals missed?)"
    );

    // B takes over once the lease has expired, runs until the wait.
    // B resumes right after A's checkpoint #1 (and re-announces it).
    assert_eq!(b.expect_line("CHECKPOINT"), "CHECKPOINT 1 item item-1");
    b.expect_line("WAITING approval");
    b.finish();
    send_approval(&dir);
    let mut b2_args = worker_args("resume", &db, &log);
    b2_args.extend(["--worker-id", "b", "--lease-ttl-ms", &ttl_ms]);
    let mut b2 = Proc::spawn(WORKER, &dir, "b2", &b2_args);
    let result = b2.expect_line("RESULT ");
    b2.finish();

    let effects = read_log(&dir.log());
    assert_eq!(
        effects_of(&effects),
        expected_effects(&[
            ("a", "begin"),
            ("a", "process item-1"),
            ("b", "process item-2"),
            ("b", "process item-3"),
            ("b", "after approval by ada"),
            ("b", "after sleep"),
            ("b", "end"),
        ])
    );
    let b_first_effect = effects
        .iter()
        .find(|e| e.worker == "b")
        .expect("B had side effects")
        .at;
    assert!(
        b_first_effect >= expiry,
        "B ran {:.1} ms before A's lease expired",
        ms(expiry - b_first_effect)
    );
    let s = snapshot(&db);
    let resumed_by_b = s
        .history
        .iter()
        .find(|e| matches!(&e.event, Event::Resumed { worker, from_seq: 1, .. } if worker == "b"))
        .expect("history: resumed by b from checkpoint #1");
    assert!(nanos(resumed_by_b.at) >= expiry, "B resumed before expiry");
    // Nothing happened to the run between A's first checkpoint and B's takeover.
    let before_takeover: Vec<&Event> = s
        .history
        .iter()
        .filter(|e| nanos(e.at) < expiry)
        .map(|e| &e.event)
        .collect();
    assert!(
        before_takeover.iter().all(|e| !matches!(
            e,
            Event::Resumed { .. } | Event::CheckpointSaved { seq: 2.., .. }
        )),
        "events before the lease expired: {before_takeover:?}"
    );
    let takeover_delay = b_first_effect - expiry;
    assert!(
        takeover_delay < 3_000_000_000,
        "B took {:.1} ms after the expiry to take over",
        ms(takeover_delay)
    );
    let expected = serde_json::json!({
        "processed": ["item-1 by a", "item-2 by b", "item-3 by b"],
        "approved_by": "ada",
        "finished_by": "b",
    });
    assert_eq!(s.status, Status::Completed);
    assert_eq!(s.output, Some(expected.clone()));
    let printed: serde_json::Value =
        serde_json::from_str(result.trim_start_matches("RESULT ")).expect("JSON");
    assert_eq!(printed, expected);
    eprintln!(
        "takeover_only_after_lease_expiry: A killed {:.1} ms before its lease expired; B's \
         first side effect {:.1} ms after the expiry; total {:.2?}",
        ms(expiry - killed_at),
        ms(takeover_delay),
        started.elapsed()
    );
}

/// When the frozen worker A is thawed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Thaw {
    /// After B has finished the run.
    AfterCompletion,
    /// While B holds the run under its live lease, mid-way (split brain).
    WhileBHoldsIt,
}

/// Worker A (stepping with `--step`: its lease is renewed while it waits at a
/// durable point) is SIGSTOPped past its lease; B takes the run over and
/// completes it; then A is SIGCONTed and told to go on. Whichever of A's
/// writes comes first (a lease renewal, or checkpoint #2 if it gets to run
/// the item-2 segment first) is rejected, and the stored run stays B's.
#[test]
fn sigstopped_worker_is_fenced() {
    let _serial = serial();
    fenced_scenario("--step", Thaw::AfterCompletion);
}

/// A (stepping with `--step-blocking`) is frozen inside its segment's code,
/// so once SIGCONTed it deterministically runs the item-2 segment and tries
/// to store checkpoint #2 with its stale epoch before any lease renewal. It
/// is thawed while B holds the run mid-way (a live, non-finished run, so a
/// rule like "finished runs are never changed" cannot be what saves it):
/// A's checkpoint is rejected, B goes on undisturbed and the result is B's.
#[test]
fn sigstopped_worker_mid_segment_is_fenced() {
    let _serial = serial();
    let a_after = fenced_scenario("--step-blocking", Thaw::WhileBHoldsIt);
    assert_eq!(
        a_after,
        ["process item-2"],
        "A ran its segment after SIGCONT"
    );
}

/// The parts of a snapshot that only a write by the run's owner may change
/// (not the lease expiry or `updated_at`, which renewals move).
fn owned_state(s: &Snapshot) -> impl PartialEq + std::fmt::Debug {
    (
        s.status.clone(),
        s.record.latest_seq,
        s.record.epoch,
        s.record.state.clone(),
        s.record.wake.clone(),
        s.record
            .lease
            .as_ref()
            .map(|l| (l.worker.clone(), l.instance.clone())),
        s.output.clone(),
        s.checkpoints.clone(),
        s.history.clone(),
    )
}

fn wait_for_effect(dir: &TempDir, worker: &str, text: &str) {
    let start = Instant::now();
    while !read_log(&dir.log())
        .iter()
        .any(|e| e.worker == worker && e.text == text)
    {
        assert!(
            start.elapsed() < LINE_TIMEOUT,
            "no side effect `{worker} {text}` within {LINE_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for the thawed worker A to exit by itself, successfully; returns
/// the rest of its output.
fn stop_of_a(a: &mut Proc) -> Vec<String> {
    let status = a.wait_exit(Duration::from_secs(20));
    let mut rest = Vec::new();
    while let Some(line) = a.next_line() {
        rest.push(line);
    }
    assert!(status.success(), "A exited with {status}: {}", a.describe());
    rest
}

/// Runs a fencing scenario; returns the side effects A had after SIGCONT.
fn fenced_scenario(step: &str, thaw: Thaw) -> Vec<String> {
    let started = Instant::now();
    let dir = TempDir::new(&format!("fenced{step}"));
    let db = dir.db();
    let log = dir.log().to_string_lossy().into_owned();
    let ttl_ms = TTL.as_millis().to_string();
    let expected = serde_json::json!({
        "processed": ["item-1 by a", "item-2 by b", "item-3 by b"],
        "approved_by": "ada",
        "finished_by": "b",
    });

    // Worker A holds the run, right after its first checkpoint; freeze it.
    let mut a_args = worker_args("start", &db, &log);
    a_args.extend(["--worker-id", "a", "--lease-ttl-ms", &ttl_ms, step]);
    let mut a = Proc::spawn(WORKER, &dir, "a", &a_args);
    assert_eq!(a.expect_line("CHECKPOINT"), "CHECKPOINT 1 item item-1");
    a.signal("-STOP");
    let stopped_at = now_nanos();
    let epoch_a = snapshot(&db).record.epoch;

    // Worker B takes the run over once A's lease has expired. It resumes
    // right after A's checkpoint #1 (and announces it again).
    let mut b_args = worker_args("resume", &db, &log);
    b_args.extend(["--worker-id", "b", "--lease-ttl-ms", &ttl_ms]);
    let b2_args = b_args.clone();
    if thaw == Thaw::WhileBHoldsIt {
        b_args.push("--step");
    }
    let mut b = Proc::spawn(WORKER, &dir, "b", &b_args);
    assert_eq!(b.expect_line("CHECKPOINT"), "CHECKPOINT 1 item item-1");
    let b_took_over = snapshot(&db);
    assert!(
        b_took_over.record.epoch > epoch_a,
        "B claimed with a new epoch"
    );
    // B goes on to the wait. A, if it is alive, must stop first (see below);
    // then the approval is sent and a second B process finishes the run.
    let finish_b = |b: &mut Proc, a: Option<&mut Proc>| {
        if thaw == Thaw::WhileBHoldsIt {
            // B is held at its first durable point: let it go on.
            b.go();
            loop {
                let line = b.next_line().expect("B goes on to the wait");
                if line.starts_with("CHECKPOINT") {
                    b.go();
                } else if line == "WAITING approval" {
                    break;
                }
            }
        } else {
            b.expect_line("WAITING approval");
        }
        b.finish();
        // A live A polls the run; it must exit (having found the run waiting)
        // before the approval makes the run claimable again, or it could
        // legitimately claim it itself.
        let a_rest = a.map(stop_of_a);
        send_approval(&dir);
        let mut b2 = Proc::spawn(WORKER, &dir, "b2", &b2_args);
        b2.expect_line("RESULT ");
        b2.finish();
        let done = snapshot(&db);
        assert_eq!(done.status, Status::Completed);
        assert_eq!(done.output, Some(expected.clone()));
        (done, a_rest)
    };
    let before_thaw = match thaw {
        Thaw::AfterCompletion => finish_b(&mut b, None).0,
        // B holds the run (renewing its lease) at its first durable point.
        Thaw::WhileBHoldsIt => b_took_over,
    };

    // Thaw A and let it go on past its checkpoint: it would process item-2
    // and store checkpoint #2, but its epoch is stale.
    let effects_before = read_log(&dir.log()).len();
    a.go();
    let continued_at = now_nanos();
    a.signal("-CONT");
    if step == "--step-blocking" {
        // A certainly runs its segment, then tries its checkpoint.
        wait_for_effect(&dir, "a", "process item-2");
    }
    // Longer than a renewal period (TTL / 3): A has tried to write by now.
    std::thread::sleep(TTL / 2);
    let after_thaw = snapshot(&db);
    assert_eq!(
        owned_state(&after_thaw),
        owned_state(&before_thaw),
        "A changed the run after losing its lease"
    );
    let a_rest = match thaw {
        Thaw::WhileBHoldsIt => {
            assert_eq!(after_thaw.record.latest_seq, 1, "A's checkpoint #2 landed");
            let (done, a_rest) = finish_b(&mut b, Some(&mut a));
            // B's checkpoints #2.. went through: A had not taken seq 2.
            assert_eq!(done.record.latest_seq, 6);
            a_rest.expect("A's output")
        }
        Thaw::AfterCompletion => stop_of_a(&mut a),
    };
    let done = snapshot(&db);

    // A stopped executing the run: it exited once the run waited or was
    // finished, having passed no further durable point.
    assert!(
        !a_rest.iter().any(|l| l.starts_with("CHECKPOINT")),
        "A passed a checkpoint after losing its lease: {a_rest:?}"
    );
    let last = a_rest.last().map(String::as_str).unwrap_or("");
    match thaw {
        // A looked at the run again and found B's result.
        Thaw::AfterCompletion => {
            let json = last
                .strip_prefix("RESULT ")
                .unwrap_or_else(|| panic!("A printed no result: {a_rest:?}"));
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(json).expect("JSON"),
                expected
            );
        }
        // A polled the run (held by B) until B left it waiting.
        Thaw::WhileBHoldsIt => assert_eq!(last, "WAITING approval", "{a_rest:?}"),
    }

    // The store is exactly as B left it: output, checkpoints, history, epoch.
    assert_eq!(snapshot(&db), done, "A changed the run after exiting");
    assert_eq!(done.output, Some(expected));
    assert_eq!(
        labels(&done),
        [
            (1, Some("item".to_owned())),
            (2, Some("item".to_owned())),
            (3, Some("item".to_owned())),
            (4, None),
            (5, None),
            (6, Some("final".to_owned())),
        ]
    );
    assert!(
        !done.history.iter().any(|e| nanos(e.at) >= continued_at
            && matches!(&e.event, Event::Resumed { worker, .. } if worker == "a")),
        "A resumed the run again"
    );
    // Frozen at a durable point (`--step`), A runs nothing once thawed: its
    // lease lapsed by its own clock, so its workflow is not polled again.
    // Frozen inside user code (`--step-blocking`), it finishes the poll it
    // was in (the segment after its checkpoint: a side effect fencing cannot
    // undo, at-least-once per segment) and nothing further.
    let a_after: Vec<String> = read_log(&dir.log())[effects_before..]
        .iter()
        .filter(|e| e.worker == "a")
        .map(|e| {
            assert!(e.at >= continued_at);
            e.text.clone()
        })
        .collect();
    if step == "--step" {
        assert!(
            a_after.is_empty(),
            "A ran user code after its lease lapsed: {a_after:?}"
        );
    }
    assert!(
        a_after.is_empty() || a_after == ["process item-2"],
        "A ran past its rejected checkpoint: {a_after:?}"
    );
    eprintln!(
        "fenced ({step}, thawed {thaw:?}): A frozen for {:.1} ms; after SIGCONT A {}; total {:.2?}",
        ms(continued_at - stopped_at),
        if a_after.is_empty() {
            "ran no user code (its lease had lapsed by its own clock)"
        } else {
            "re-ran the item-2 segment and its checkpoint #2 was rejected"
        },
        started.elapsed()
    );
    a_after
}

/// Two live processes with the same (default) worker id never execute the
/// same run at once: the second one waits for the first one's lease like any
/// other worker, and takes the run over only once the first is dead and its
/// lease expired. A restarted process whose previous instance is dead (same
/// worker id) resumes at once, long before that instance's lease expires.
#[test]
fn one_worker_id_two_live_processes_never_share_a_run() {
    let _serial = serial();
    let dir = TempDir::new("same-id");
    let db = dir.db();
    let log = dir.log().to_string_lossy().into_owned();
    let ttl_ms = TTL.as_millis().to_string();

    // A (default worker id) stops right after its first checkpoint, renewing.
    let mut a_args = worker_args("start", &db, &log);
    a_args.extend(["--lease-ttl-ms", &ttl_ms, "--step"]);
    let mut a = Proc::spawn(WORKER, &dir, "a", &a_args);
    assert_eq!(a.expect_line("CHECKPOINT"), "CHECKPOINT 1 item item-1");

    // B: a second live process with the same worker id, started later.
    let mut b_args = worker_args("resume", &db, &log);
    b_args.extend(["--lease-ttl-ms", &ttl_ms]);
    let mut b = Proc::spawn(WORKER, &dir, "b", &b_args);
    std::thread::sleep(TTL * 5 / 2);
    assert_eq!(b.try_line(), None, "B executed the run A holds");
    let texts: Vec<String> = read_log(&dir.log()).into_iter().map(|e| e.text).collect();
    assert_eq!(texts, ["begin", "process item-1"], "B ran A's run");
    let held = snapshot(&db);
    let lease = held.record.lease.clone().expect("A holds a lease");
    assert_eq!(held.record.epoch, 1, "the run was claimed again");

    // A dies: B takes the run over once A's lease has expired.
    a.kill();
    let killed = Instant::now();
    assert_eq!(b.expect_line("WAITING"), "WAITING approval");
    assert!(
        killed.elapsed() + Duration::from_millis(50) >= TTL / 2,
        "B took over before A's lease could have expired"
    );
    // The takeover is in the history, naming both instances: B leases
    // under an id of its own, as a second live instance of `local`.
    let after = snapshot(&db);
    let taken = takeovers(&after);
    assert_eq!(taken.len(), 1, "{:?}", after.history);
    let (worker, instance, from_worker, from_instance) = &taken[0];
    assert_eq!(
        (from_worker.as_str(), from_instance),
        ("local", &lease.instance)
    );
    assert!(worker.starts_with("local~"), "{worker}");
    assert_ne!(instance, &lease.instance);
    b.finish();

    // A restart: a process with a long lease is killed right after a
    // checkpoint; a new process with the same worker id does not wait for
    // that lease (30 s) to expire.
    let dir = TempDir::new("same-id-restart");
    let db = dir.db();
    let log = dir.log().to_string_lossy().into_owned();
    let mut c_args = worker_args("start", &db, &log);
    c_args.extend(["--lease-ttl-ms", "30000", "--step"]);
    let mut c = Proc::spawn(WORKER, &dir, "c", &c_args);
    assert_eq!(c.expect_line("CHECKPOINT"), "CHECKPOINT 1 item item-1");
    c.kill();
    let restarted = Instant::now();
    let mut d_args = worker_args("resume", &db, &log);
    d_args.extend(["--lease-ttl-ms", "30000"]);
    let mut d = Proc::spawn(WORKER, &dir, "d", &d_args);
    assert_eq!(d.expect_line("WAITING"), "WAITING approval");
    assert!(
        restarted.elapsed() < Duration::from_secs(10),
        "the restarted process waited {:?} for its dead instance's lease",
        restarted.elapsed()
    );
    let after = snapshot(&db);
    let taken = takeovers(&after);
    assert_eq!(taken.len(), 1, "{:?}", after.history);
    let (worker, instance, from_worker, from_instance) = &taken[0];
    assert_eq!((worker.as_str(), from_worker.as_str()), ("local", "local"));
    assert!(instance > from_instance, "{instance} vs {from_instance}");
    d.finish();
}

/// The `TakenOver` events of a run: (worker, instance, from_worker, from_instance).
fn takeovers(s: &Snapshot) -> Vec<(String, String, String, String)> {
    s.history
        .iter()
        .filter_map(|h| match &h.event {
            Event::TakenOver {
                worker,
                instance,
                from_worker,
                from_instance,
            } => Some((
                worker.clone(),
                instance.clone(),
                from_worker.clone(),
                from_instance.clone(),
            )),
            _ => None,
        })
        .collect()
}
