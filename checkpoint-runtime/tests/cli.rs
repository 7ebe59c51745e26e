//! The `checkpoint` command-line tool, run as a separate process on an
//! SQLite store that real runs were written to.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tempfile::TempDir;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Approval {
    approved: bool,
    by: String,
}

#[workflow]
async fn tally(ctx: &Ctx, items: Vec<String>) -> usize {
    let mut seen = Vec::new();
    for item in items {
        seen.push(item);
        checkpoint!("item");
    }
    seen.len()
}

#[workflow]
async fn approval(ctx: &Ctx, vendor: String) -> String {
    let note = format!("reviewed {vendor}");
    let score = vendor.len() as u32;
    checkpoint!("reviewed");
    let a: Approval = ctx.wait_for("finance_approval").await;
    format!(
        "{note} (score {score}): approved={} by {}",
        a.approved, a.by
    )
}

/// A count of pairs, which must be even: its `Deserialize` impl refuses the
/// schema tracer's placeholder (1), so the type has no schema and the field
/// cannot be shown without the workflow's code, though it saves and loads as
/// usual. (`serde_json::Value`, the usual such type, is refused at save:
/// postcard cannot read it back.)
#[derive(Serialize, Debug)]
struct Pairs(u32);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        if n % 2 == 1 {
            return Err(serde::de::Error::custom("an odd count of pairs"));
        }
        Ok(Pairs(n))
    }
}

#[workflow]
async fn opaque(ctx: &Ctx, n: u32) -> String {
    let doc = Pairs(2 * n);
    let count = n + 1;
    checkpoint!("opaque");
    format!("{doc:?} {count}")
}

/// A store with three runs: `tally-1` completed (three checkpoints),
/// `vendor-42` and `vendor-43` waiting for `finance_approval`.
struct Fixture {
    _dir: TempDir,
    path: PathBuf,
    rt: Runtime,
}

impl Fixture {
    async fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("workflows.db");
        let rt = Runtime::open(&path.to_string_lossy())
            .await
            .expect("open store");
        let items = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        rt.start(tally, "tally-1", items).await.expect("start");
        rt.start(approval, "vendor-42", "acme".into())
            .await
            .expect("start");
        rt.start(approval, "vendor-43", "globex".into())
            .await
            .expect("start");
        rt.run_until_idle().await.expect("run");
        assert_eq!(rt.status("tally-1").await.unwrap(), Status::Completed);
        Fixture {
            _dir: dir,
            path,
            rt,
        }
    }

    fn store(&self) -> &str {
        self.path.to_str().expect("utf-8 path")
    }

    /// Runs the tool on this store.
    fn run(&self, args: &[&str]) -> Out {
        cli(Some(self.store()), args)
    }

    /// Runs the tool, which must succeed; its standard output.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(out.code, 0, "checkpoint {args:?} failed: {}", out.stderr);
        assert!(out.stderr.is_empty(), "stderr: {}", out.stderr);
        out.stdout
    }

    /// Runs the tool with `--json`, which must succeed; its output, parsed.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let stdout = self.ok(&all);
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("`checkpoint {all:?}` printed invalid JSON ({e}): {stdout}"))
    }

    /// Runs the tool, which must fail with exit code `code`; its standard error.
    fn fails(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        expect_failure(&out, code, args)
    }
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cli(store: Option<&str>, args: &[&str]) -> Out {
    cli_env(store, None, args)
}

fn cli_env(store: Option<&str>, env_store: Option<&str>, args: &[&str]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_checkpoint"));
    cmd.env_remove("CHECKPOINT_STORE");
    if let Some(url) = env_store {
        cmd.env("CHECKPOINT_STORE", url);
    }
    if let Some(url) = store {
        cmd.arg("--store").arg(url);
    }
    let out = cmd.args(args).output().expect("the checkpoint binary runs");
    Out {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

fn expect_failure(out: &Out, code: i32, args: &[&str]) -> String {
    assert_eq!(
        out.code, code,
        "checkpoint {args:?}: stdout {:?}, stderr {:?}",
        out.stdout, out.stderr
    );
    assert!(out.stdout.is_empty(), "stdout: {}", out.stdout);
    if args.contains(&"--json") {
        json_error(&out.stderr);
    } else if code == 1 {
        assert!(
            out.stderr.starts_with("error: "),
            "stderr: {:?}",
            out.stderr
        );
    }
    out.stderr.clone()
}

/// A `--json` error: one line of JSON on standard error with a kind and a
/// message.
fn json_error(stderr: &str) -> Value {
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr:?}");
    let v: Value =
        serde_json::from_str(stderr).unwrap_or_else(|e| panic!("not JSON ({e}): {stderr:?}"));
    assert!(v["kind"].is_string(), "{v}");
    assert!(v["message"].is_string(), "{v}");
    assert!(v["details"].is_object(), "{v}");
    v
}

/// The line of `text` that starts with `first`.
fn line<'a>(text: &'a str, first: &str) -> &'a str {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(first))
        .unwrap_or_else(|| panic!("no line for `{first}` in:\n{text}"))
}

/// The JSON value of field `name` among `fields`.
fn field<'a>(fields: &'a Value, name: &str) -> &'a Value {
    let found = fields
        .as_array()
        .expect("fields is an array")
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("no field `{name}` in {fields}"));
    &found["value"]
}

fn is_rfc3339_utc(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 24
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[23] == b'Z'
        && s.chars()
            .enumerate()
            .all(|(i, c)| [4, 7, 10, 13, 16, 19, 23].contains(&i) || c.is_ascii_digit())
}

#[tokio::test]
async fn runs_lists_runs_with_their_status() {
    let f = Fixture::new().await;
    let text = f.ok(&["runs"]);
    let header = line(&text, "ID");
    let tally_line = line(&text, "tally-1");
    let vendor_line = line(&text, "vendor-42");
    assert!(tally_line.contains("tally") && tally_line.contains("completed"));
    assert!(vendor_line.contains("waiting for signal `finance_approval`"));
    assert_eq!(text.lines().count(), 4, "a header and three runs:\n{text}");
    // Aligned: each column starts where its header does.
    let col = header.find("STATUS").unwrap();
    assert_eq!(tally_line.find("completed"), Some(col), "\n{text}");
    assert_eq!(vendor_line.find("waiting"), Some(col), "\n{text}");
    let col = header.find("CHECKPOINT").unwrap();
    assert_eq!(tally_line.find("#3"), Some(col), "\n{text}");

    let waiting = f.ok(&["runs", "--status", "waiting"]);
    assert!(waiting.contains("vendor-42") && waiting.contains("vendor-43"));
    assert!(!waiting.contains("tally-1"), "{waiting}");
    let tallies = f.ok(&["runs", "--workflow", "tally"]);
    assert!(tallies.contains("tally-1") && !tallies.contains("vendor-4"));
    assert_eq!(
        f.ok(&["runs", "--status", "cancelled"]),
        "no runs\n",
        "nothing is cancelled"
    );

    let runs = f.json(&["runs"]);
    let runs = runs.as_array().expect("an array of runs");
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["id"], "tally-1");
    assert_eq!(runs[0]["workflow"], "tally");
    assert_eq!(runs[0]["status"], json!({"state": "completed"}));
    assert_eq!(runs[0]["latest_seq"], 3);
    assert!(is_rfc3339_utc(runs[0]["created_at"].as_str().unwrap()));
    let vendor = runs.iter().find(|r| r["id"] == "vendor-42").unwrap();
    assert_eq!(
        vendor["status"],
        json!({"state": "waiting", "signal": "finance_approval"})
    );
    let limited = f.json(&["runs", "--prefix", "vendor-", "--limit", "1"]);
    assert_eq!(limited.as_array().unwrap().len(), 1);
    assert!(limited[0]["id"].as_str().unwrap().starts_with("vendor-"));
}

#[tokio::test]
async fn show_prints_the_status_and_the_latest_fields_as_json() {
    let f = Fixture::new().await;
    let text = f.ok(&["show", "tally-1"]);
    assert!(line(&text, "status:").ends_with("completed"), "{text}");
    assert!(line(&text, "workflow:").ends_with("tally"), "{text}");
    assert!(line(&text, "checkpoint:").contains("#3 (item)"), "{text}");
    assert!(
        line(&text, "seen").ends_with(r#"["a","b","c"]"#),
        "the field's value as JSON:\n{text}"
    );
    // The input it started with and the output it returned, as the API
    // shows them.
    assert!(
        line(&text, "input:").ends_with(r#"["a","b","c"]"#),
        "{text}"
    );
    assert!(line(&text, "output:").ends_with('3'), "{text}");
    let shown = f.json(&["show", "tally-1"]);
    assert_eq!(shown["input"], json!(["a", "b", "c"]), "{shown}");
    assert_eq!(shown["output"], json!(3), "{shown}");

    let shown = f.json(&["show", "vendor-42"]);
    assert_eq!(shown["id"], "vendor-42");
    assert_eq!(shown["workflow"], "approval");
    assert_eq!(shown["status"]["state"], "waiting");
    let fields = &shown["checkpoint"]["fields"];
    assert_eq!(field(fields, "note"), &json!("reviewed acme"));
    assert_eq!(field(fields, "score"), &json!(4));
    let text = f.ok(&["show", "vendor-42"]);
    assert!(
        line(&text, "note").ends_with(r#""reviewed acme""#),
        "{text}"
    );
    assert!(line(&text, "score").contains("u32"), "{text}");
    // Not completed: no output line, `null` under --json.
    assert!(!text.contains("output:"), "{text}");
    assert_eq!(shown["output"], Value::Null);
    assert_eq!(shown["input"], json!("acme"));
}

#[tokio::test]
async fn checkpoints_lists_versions_and_shows_fields() {
    let f = Fixture::new().await;
    let text = f.ok(&["checkpoints", "tally-1"]);
    assert_eq!(
        text.lines().count(),
        4,
        "a header and three versions:\n{text}"
    );
    for seq in ["1", "2", "3"] {
        let l = line(&text, seq);
        assert!(l.contains("item") && l.contains("seen: Vec<String>"), "{l}");
    }

    let list = f.json(&["checkpoints", "tally-1"]);
    let seqs: Vec<u64> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(list[0]["label"], "item");
    assert!(list[0]["fields"].as_array().unwrap().iter().any(
        |fld| fld["name"] == "seen" && fld["type"] == "alloc::vec::Vec<alloc::string::String>"
    ));

    // One version's fields, by seq.
    let second = f.json(&["checkpoints", "tally-1", "2"]);
    assert_eq!(second["run"], "tally-1");
    assert_eq!(second["seq"], 2);
    assert_eq!(field(&second["fields"], "seen"), &json!(["a", "b"]));
    // The same values the runtime decodes.
    let from_rt = f.rt.checkpoint_fields_json("tally-1", 2).await.unwrap();
    let seen = from_rt.iter().find(|x| x.name == "seen").unwrap();
    assert_eq!(seen.value.as_ref(), Some(field(&second["fields"], "seen")));
    let text = f.ok(&["checkpoints", "tally-1", "2"]);
    assert!(line(&text, "seen").ends_with(r#"["a","b"]"#), "{text}");

    // --fields: the latest version.
    let latest = f.json(&["checkpoints", "tally-1", "--fields"]);
    assert_eq!(latest["seq"], 3);
    assert_eq!(field(&latest["fields"], "seen"), &json!(["a", "b", "c"]));
}

#[tokio::test]
async fn history_lists_events() {
    let f = Fixture::new().await;
    let text = f.ok(&["history", "tally-1"]);
    assert!(text.contains("started (workflow `tally`)"), "{text}");
    assert!(text.contains("checkpoint #1 saved (item)"), "{text}");
    assert!(text.contains("checkpoint #3 saved (item)"), "{text}");
    let last = text.lines().last().unwrap();
    assert!(last.ends_with("completed"), "{text}");
    assert!(
        is_rfc3339_utc(last.split_whitespace().next().unwrap()),
        "{last}"
    );

    let events = f.json(&["history", "tally-1"]);
    let events = events.as_array().unwrap();
    assert_eq!(events[0]["event"], "started");
    assert_eq!(events[0]["workflow"], "tally");
    assert!(is_rfc3339_utc(events[0]["at"].as_str().unwrap()));
    assert_eq!(events.last().unwrap()["event"], "completed");
    let saved: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "checkpoint_saved")
        .map(|e| &e["seq"])
        .collect();
    assert_eq!(saved, [&json!(1), &json!(2), &json!(3)]);
}

/// Issue 34, item 6: a signal to a run that has ended was stored (exit 0)
/// and never read; it is refused naming the run's status.
#[tokio::test]
async fn a_signal_to_a_finished_run_is_refused_naming_its_status() {
    let f = Fixture::new().await;
    f.ok(&[
        "signal",
        "vendor-42",
        "finance_approval",
        r#"{"approved": true, "by": "ada"}"#,
    ]);
    f.rt.run_until_idle().await.unwrap();
    assert_eq!(f.rt.status("vendor-42").await.unwrap(), Status::Completed);
    let err = f.fails(
        1,
        &[
            "signal",
            "vendor-42",
            "finance_approval",
            r#"{"approved": false, "by": "bob"}"#,
        ],
    );
    assert!(
        err.contains("vendor-42") && err.contains("completed") && err.contains("no more signals"),
        "{err}"
    );
    let history = f.ok(&["history", "vendor-42"]);
    assert_eq!(
        history.matches("signal `finance_approval` stored").count(),
        1,
        "{history}"
    );
}

#[tokio::test]
async fn signal_delivers_the_payload() {
    let f = Fixture::new().await;
    let out = f.ok(&[
        "signal",
        "vendor-42",
        "finance_approval",
        r#"{"approved": true, "by": "ada"}"#,
    ]);
    assert!(
        out.contains("finance_approval") && out.contains("vendor-42"),
        "{out}"
    );
    let history = f.ok(&["history", "vendor-42"]);
    assert!(
        history.contains("signal `finance_approval` stored"),
        "{history}"
    );

    f.rt.run_until_idle().await.unwrap();
    assert_eq!(f.rt.status("vendor-42").await.unwrap(), Status::Completed);
    let result = f.rt.handle(approval, "vendor-42").result().await.unwrap();
    assert_eq!(result, "reviewed acme (score 4): approved=true by ada");
    // Only that run.
    assert_eq!(
        f.rt.status("vendor-43").await.unwrap(),
        Status::Waiting {
            signal: "finance_approval".into(),
            deadline: None,
        }
    );

    // `-`: the payload from standard input.
    let mut child = Command::new(env!("CARGO_BIN_EXE_checkpoint"))
        .env_remove("CHECKPOINT_STORE")
        .args(["--store", f.store(), "--json", "signal", "vendor-43"])
        .args(["finance_approval", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the checkpoint binary runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(br#"{"approved": false, "by": "bob"}"#)
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    assert_eq!(sent["payload"], json!({"approved": false, "by": "bob"}));
    assert_eq!(sent["status"]["state"], "waiting");
    f.rt.run_until_idle().await.unwrap();
    let result = f.rt.handle(approval, "vendor-43").result().await.unwrap();
    assert_eq!(result, "reviewed globex (score 6): approved=false by bob");
}

#[tokio::test]
async fn cancel_cancels_a_run_and_leaves_finished_ones() {
    let f = Fixture::new().await;
    let out = f.ok(&["cancel", "vendor-43"]);
    assert_eq!(out, "run `vendor-43` cancelled\n");
    assert_eq!(f.rt.status("vendor-43").await.unwrap(), Status::Cancelled);
    assert!(f
        .ok(&["runs", "--status", "cancelled"])
        .contains("vendor-43"));

    let finished = f.json(&["cancel", "tally-1"]);
    assert_eq!(finished["cancelled"], false);
    assert_eq!(finished["status"]["state"], "completed");
    assert_eq!(f.rt.status("tally-1").await.unwrap(), Status::Completed);
    let again = f.ok(&["cancel", "vendor-43"]);
    assert!(again.contains("already finished"), "{again}");
}

#[tokio::test]
async fn cancel_with_a_reason_asks_the_run() {
    let f = Fixture::new().await;
    let out = f.ok(&[
        "cancel",
        "vendor-43",
        "--reason",
        "vendor withdrew",
        "--grace",
        "30s",
    ]);
    assert!(out.contains("asked to cancel (vendor withdrew)"), "{out}");
    assert!(out.contains("30.000s"), "{out}");
    let history = f.rt.history("vendor-43").await.unwrap();
    assert!(
        history.contains(&checkpoint_runtime::Event::CancelRequested {
            reason: "vendor withdrew".into(),
            grace_ms: 30_000,
            cascade: true,
        }),
        "{history:?}"
    );
    let asked = f.json(&["cancel", "vendor-42", "--grace", "1s", "--abandon-children"]);
    assert_eq!(asked["cancel_requested"], true);
    assert_eq!(asked["children"], "abandon");
    assert_eq!(asked["grace_ms"], 1000);
    // --abandon-children goes with a request; a finished run refuses one.
    f.fails(2, &["cancel", "vendor-42", "--now", "--reason", "x"]);
    let refused = f.run(&["cancel", "tally-1", "--reason", "late"]);
    assert_ne!(refused.code, 0);
    assert!(refused.stderr.contains("completed"), "{}", refused.stderr);
}

#[workflow]
async fn boom(ctx: &Ctx, n: u32) -> u32 {
    let doubled = n * 2;
    checkpoint!("doubled");
    if doubled > 0 {
        panic!("boom at {doubled}");
    }
    doubled
}

#[tokio::test]
async fn retry_requeues_a_failed_run_and_refuses_others() {
    let f = Fixture::new().await;
    f.rt.start(boom, "boom-1", 2).await.unwrap();
    f.rt.run_until_idle().await.unwrap();
    assert!(matches!(
        f.rt.status("boom-1").await.unwrap(),
        Status::Failed { .. }
    ));
    // Stop executing here: the retried run must stay queued for the check.
    f.rt.shutdown();
    let out = f.json(&["retry", "boom-1"]);
    assert_eq!(out["retried"], true, "{out}");
    assert_eq!(out["status"]["state"], "queued", "{out}");
    assert!(line(&f.ok(&["runs", "--status", "queued"]), "boom-1").contains("boom"));
    let history = f.ok(&["history", "boom-1"]);
    assert!(history.contains("retried by an operator"), "{history}");
    let err = f.fails(1, &["retry", "tally-1"]);
    assert!(
        err.contains("tally-1") && err.contains("only a failed or parked run"),
        "{err}"
    );
    let err = f.fails(1, &["retry", "nope"]);
    assert!(err.contains("`nope`"), "{err}");
}

#[tokio::test]
async fn fork_creates_a_run_from_an_old_checkpoint() {
    let f = Fixture::new().await;
    let out = f.ok(&["fork", "tally-1", "2", "tally-1-fork"]);
    assert!(out.contains("tally-1-fork") && out.contains("#2"), "{out}");
    assert!(line(&f.ok(&["runs"]), "tally-1-fork").contains("tally"));

    let old = f.json(&["checkpoints", "tally-1", "2"]);
    let new = f.json(&["checkpoints", "tally-1-fork", "1"]);
    assert_eq!(new["fields"], old["fields"]);
    assert_eq!(field(&new["fields"], "seen"), &json!(["a", "b"]));
    assert_eq!(new["site"], old["site"]);

    // The fork resumes from there and finishes like the original.
    f.rt.run_until_idle().await.unwrap();
    let n = f.rt.handle(tally, "tally-1-fork").result().await.unwrap();
    assert_eq!(n, 3);

    let err = f.fails(1, &["fork", "tally-1", "1", "vendor-42"]);
    assert!(
        err.contains("vendor-42") && err.contains("already exists"),
        "{err}"
    );
}

#[tokio::test]
async fn gc_reports() {
    let f = Fixture::new().await;
    let text = f.ok(&["gc"]);
    assert!(line(&text, "store").starts_with("store size:"), "{text}");
    assert!(text.contains("checkpoints compacted:"), "{text}");
    let report = f.json(&["gc"]);
    assert!(report["bytes_before"].as_u64().unwrap() > 0, "{report}");
    assert!(report["bytes_after"].as_u64().unwrap() > 0, "{report}");
    assert!(report["wal_truncated"].is_boolean(), "{report}");
    assert!(report["checkpoints_compacted"].is_u64(), "{report}");
    // Nothing visible changed.
    assert_eq!(
        f.json(&["checkpoints", "tally-1"])
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn unknown_runs_are_errors_naming_the_run() {
    let f = Fixture::new().await;
    for args in [
        &["show", "nope"][..],
        &["checkpoints", "nope"],
        &["checkpoints", "nope", "1"],
        &["history", "nope"],
        &["signal", "nope", "finance_approval", "true"],
        &["cancel", "nope"],
        &["fork", "nope", "1", "nope-2"],
    ] {
        let err = f.fails(1, args);
        assert!(err.contains("`nope`"), "{args:?}: {err}");
        let err = f.fails(1, &[&["--json"][..], args].concat());
        assert!(err.contains("`nope`"), "{args:?} --json: {err}");
    }
    assert_eq!(f.rt.runs(RunFilter::new()).await.unwrap().len(), 3);
}

#[tokio::test]
async fn an_invalid_json_payload_is_refused() {
    let f = Fixture::new().await;
    let err = f.fails(
        1,
        &["signal", "vendor-42", "finance_approval", "{approved: true"],
    );
    assert!(err.contains("invalid JSON payload"), "{err}");
    assert!(
        err.contains("finance_approval") && err.contains("vendor-42"),
        "{err}"
    );
    let err = f.fails(1, &["signal", "vendor-42", "finance_approval", "ada"]);
    assert!(err.contains("invalid JSON payload"), "{err}");
    // Nothing was stored.
    assert!(!f.ok(&["history", "vendor-42"]).contains("stored"));
}

#[tokio::test]
async fn bad_sequence_numbers_are_errors() {
    let f = Fixture::new().await;
    let err = f.fails(1, &["checkpoints", "tally-1", "99"]);
    assert!(err.contains("tally-1") && err.contains("#99"), "{err}");
    let err = f.fails(1, &["fork", "tally-1", "99", "tally-1-fork"]);
    assert!(err.contains("tally-1") && err.contains("#99"), "{err}");
    assert!(f
        .fails(1, &["show", "tally-1-fork"])
        .contains("tally-1-fork"));
    // Not a number: a usage error.
    let err = f.fails(2, &["checkpoints", "tally-1", "two"]);
    assert!(err.contains("two"), "{err}");
}

#[tokio::test]
async fn the_store_comes_from_the_flag_or_the_environment() {
    let f = Fixture::new().await;
    let out = cli_env(None, Some(f.store()), &["runs"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("tally-1"));

    let out = cli(None, &["runs"]);
    let err = expect_failure(&out, 1, &["runs"]);
    assert!(
        err.contains("--store") && err.contains("CHECKPOINT_STORE"),
        "{err}"
    );
}

#[tokio::test]
async fn unopenable_stores_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let missing = missing.to_str().unwrap();
    let out = cli(Some(missing), &["runs"]);
    let err = expect_failure(&out, 1, &["runs"]);
    assert!(
        err.contains(missing) && err.contains("does not exist"),
        "{err}"
    );
    assert!(
        !Path::new(missing).exists(),
        "the tool must not create a store"
    );

    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![b'x'; 4096]).unwrap();
    let garbage = garbage.to_str().unwrap();
    let out = cli(Some(garbage), &["runs"]);
    let err = expect_failure(&out, 1, &["runs"]);
    assert!(
        err.contains("cannot open store") && err.contains(garbage),
        "{err}"
    );

    let url = "postgres://user@localhost/workflows";
    let out = cli(Some(url), &["runs"]);
    let err = expect_failure(&out, 1, &["runs"]);
    assert!(err.contains(url), "{err}");

    // A password never shows in a message (port 1: refused at once).
    let url = "postgres://user:hunter2@127.0.0.1:1/workflows";
    let out = cli(Some(url), &["runs"]);
    let err = expect_failure(&out, 1, &["runs"]);
    assert!(
        err.contains("postgres://user:***@127.0.0.1:1/workflows") && !err.contains("hunter2"),
        "{err}"
    );

    let out = cli(Some(":memory:"), &["runs"]);
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "no runs\n"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn fields_without_a_schema_are_shown_with_a_note() {
    let f = Fixture::new().await;
    f.rt.start(opaque, "opaque-1", 5).await.unwrap();
    f.rt.run_until_idle().await.unwrap();
    let shown = f.json(&["show", "opaque-1"]);
    let fields = shown["checkpoint"]["fields"].as_array().unwrap();
    let doc = fields.iter().find(|x| x["name"] == "doc").unwrap();
    assert_eq!(doc["value"], Value::Null);
    assert!(doc["note"].as_str().unwrap().contains("schema"), "{doc}");
    assert_eq!(field(&shown["checkpoint"]["fields"], "count"), &json!(6));
    let text = f.ok(&["checkpoints", "opaque-1", "1"]);
    assert!(line(&text, "doc").contains("(not shown: "), "{text}");
    assert!(line(&text, "count").ends_with('6'), "{text}");
}

/// Fails with `reason` as its error.
#[workflow]
async fn refuse(ctx: &Ctx, reason: String) -> Result<u32, String> {
    checkpoint!("before");
    Err(reason)
}

/// The CLI is a process that never ran the wait site: it checks a payload
/// against the schema of the payload type the site stored with the wait,
/// refuses what the site could not decode, and stores nothing.
#[tokio::test]
async fn signal_payload_of_the_wrong_type_is_refused_by_another_process() {
    let f = Fixture::new().await;
    let before = f.rt.history("vendor-42").await.unwrap().len();
    for (payload, expected) in [
        ("true", "payload: expected an object, found a boolean"),
        (
            r#"{"approved": "yes", "by": "ada"}"#,
            "payload.approved: expected a boolean, found a string",
        ),
        (
            r#"{"approved": true, "by": 7}"#,
            "payload.by: expected a string, found an integer",
        ),
    ] {
        let err = json_error(&f.fails(
            1,
            &["--json", "signal", "vendor-42", "finance_approval", payload],
        ));
        assert_eq!(err["kind"], "signal_payload", "{err}");
        let message = err["message"].as_str().unwrap();
        assert!(message.contains(expected), "{payload}: {message}");
        assert!(message.contains("was not stored"), "{message}");
        assert!(message.contains("workflow `approval`"), "{message}");
    }
    // Nothing was stored: the run still waits, with no new history.
    assert_eq!(f.rt.history("vendor-42").await.unwrap().len(), before);
    // A name no wait site of the workflow takes (a typo) is refused, with
    // the names it takes, and nothing is stored...
    let err = json_error(&f.fails(
        1,
        &["--json", "signal", "vendor-42", "finance_aproval", "true"],
    ));
    assert_eq!(err["kind"], "unknown_signal", "{err}");
    assert_eq!(
        err["details"]["known"],
        json!(["finance_approval"]),
        "{err}"
    );
    assert!(
        err["message"].as_str().unwrap().contains("--force"),
        "{err}"
    );
    let text = f.fails(1, &["signal", "vendor-42", "finance_aproval", "true"]);
    assert!(
        text.contains("no wait site of workflow `approval`"),
        "{text}"
    );
    assert_eq!(f.rt.history("vendor-42").await.unwrap().len(), before);
    // ...unless forced (a wait site that code not deployed yet adds).
    f.ok(&["signal", "vendor-42", "other_signal", "true", "--force"]);
    // And a good payload still goes through and completes the run.
    f.ok(&[
        "signal",
        "vendor-42",
        "finance_approval",
        r#"{"approved": true, "by": "ada"}"#,
    ]);
    f.rt.run_until_idle().await.unwrap();
    assert_eq!(f.rt.status("vendor-42").await.unwrap(), Status::Completed);
}

#[tokio::test]
async fn errors_are_json_under_json() {
    let f = Fixture::new().await;
    let raw = f.fails(1, &["--json", "show", "nope"]);
    assert_eq!(
        raw,
        "{\"kind\":\"unknown_run\",\"message\":\"unknown run `nope`\",\"details\":{\"run\":\"nope\"}}\n",
        "the documented line, keys in reading order"
    );
    let err = json_error(&raw);
    assert_eq!(err["kind"], "unknown_run");
    assert_eq!(err["message"], "unknown run `nope`");
    assert_eq!(err["details"]["run"], "nope");

    let err = json_error(&f.fails(1, &["--json", "checkpoints", "tally-1", "99"]));
    assert_eq!(err["kind"], "unknown_checkpoint", "{err}");
    let err = json_error(&f.fails(1, &["fork", "tally-1", "1", "vendor-42", "--json"]));
    assert_eq!(err["kind"], "already_exists", "{err}");
    assert_eq!(err["details"]["run"], "vendor-42", "{err}");
    let err = json_error(&f.fails(
        1,
        &["--json", "signal", "vendor-42", "finance_approval", "{no"],
    ));
    assert_eq!(err["kind"], "invalid_payload", "{err}");
    assert_eq!(err["details"]["signal"], "finance_approval", "{err}");

    // Usage errors keep their exit code.
    let err = json_error(&f.fails(2, &["--json", "checkpoints", "tally-1", "two"]));
    assert_eq!(err["kind"], "usage", "{err}");
    assert!(err["message"].as_str().unwrap().contains("two"), "{err}");

    let out = cli(None, &["--json", "runs"]);
    let err = json_error(&expect_failure(&out, 1, &["--json", "runs"]));
    assert_eq!(err["kind"], "no_store", "{err}");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    let out = cli(Some(missing.to_str().unwrap()), &["--json", "runs"]);
    let err = json_error(&expect_failure(&out, 1, &["--json", "runs"]));
    assert_eq!(err["kind"], "cannot_open_store", "{err}");
    let url = "postgres://user:hunter2@127.0.0.1:1/workflows";
    let out = cli(Some(url), &["--json", "runs"]);
    let err = json_error(&expect_failure(&out, 1, &["--json", "runs"]));
    // A build without the `postgres` feature says so instead.
    assert!(
        err["kind"] == "cannot_open_store" || err["kind"] == "unsupported_store",
        "{err}"
    );
    assert!(!out.stderr.contains("hunter2"), "{err}");

    // Without --json, still text.
    let err = f.fails(1, &["show", "nope"]);
    assert_eq!(err, "error: unknown run `nope`\n");
}

#[tokio::test]
async fn the_store_flag_wins_over_the_environment_which_help_does_not_show() {
    let f = Fixture::new().await;
    let out = cli_env(
        Some(f.store()),
        Some("/nonexistent/elsewhere.db"),
        &["runs"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("tally-1"), "{}", out.stdout);

    let out = cli_env(None, Some("postgres://u:hunter2@db/x"), &["--help"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("CHECKPOINT_STORE"), "{}", out.stdout);
    assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
}

#[tokio::test]
async fn wide_cells_are_cut_unless_wide() {
    let f = Fixture::new().await;
    let reason = format!("the vendor's papers are missing: {}", "page ".repeat(40));
    f.rt.start(refuse, "refused-1", reason.clone())
        .await
        .unwrap();
    let many: Vec<String> = (0..40).map(|i| format!("item-{i:02}")).collect();
    f.rt.start(tally, "tally-long", many).await.unwrap();
    f.rt.run_until_idle().await.unwrap();

    let text = f.ok(&["runs"]);
    let refused = line(&text, "refused-1");
    assert!(refused.contains("failed: the vendor's papers"), "{text}");
    assert!(
        refused.contains('…') && !refused.contains(reason.trim_end()),
        "{text}"
    );
    assert!(refused.chars().count() < 160, "{refused}");
    // The columns after the cut one stay aligned.
    let col = line(&text, "ID").find("UPDATED").unwrap();
    let refused_updated = refused.char_indices().map(|(i, _)| i).nth(col).unwrap();
    assert!(is_rfc3339_utc(&refused[refused_updated..]), "{text}");

    let wide = f.ok(&["runs", "--wide"]);
    assert!(
        line(&wide, "refused-1").contains(reason.trim_end()),
        "{wide}"
    );
    assert!(!wide.contains('…'), "{wide}");
    let runs = f.json(&["runs", "--prefix", "refused"]);
    assert_eq!(runs[0]["status"]["error"], json!(reason), "{runs}");

    let shown = f.ok(&["show", "tally-long"]);
    let seen = line(&shown, "seen");
    assert!(seen.ends_with('…') && !seen.contains("item-39"), "{shown}");
    let shown = f.ok(&["--wide", "show", "tally-long"]);
    assert!(line(&shown, "seen").ends_with(r#""item-39"]"#), "{shown}");
    let fields = f.ok(&["checkpoints", "tally-long", "--fields"]);
    assert!(line(&fields, "seen").ends_with('…'), "{fields}");
}

#[test]
fn completions_are_printed_for_each_shell_without_a_store() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = cli(None, &["completions", shell]);
        assert_eq!(out.code, 0, "{shell}: {}", out.stderr);
        assert!(out.stderr.is_empty(), "{shell}: {}", out.stderr);
        for word in ["checkpoint", "watch", "checkpoints", "store"] {
            assert!(out.stdout.contains(word), "{shell} lacks `{word}`");
        }
    }
    let out = cli(None, &["completions", "tcsh"]);
    expect_failure(&out, 2, &["completions", "tcsh"]);
}

/// Runs the tool until it exits, at most `limit`; its output so far is
/// handed to `on_line` line by line as it comes.
fn follow(
    mut cmd: Command,
    limit: Duration,
    mut on_line: impl FnMut(&str),
) -> (i32, Vec<String>, String) {
    use std::io::BufRead;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the checkpoint binary runs");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout).lines() {
            if tx.send(l.expect("utf-8 output")).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut lines = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(l) => {
                on_line(&l);
                lines.push(l);
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
        }
        if let Some(status) = child.try_wait().unwrap() {
            // What it printed last, after it exited.
            lines.extend(rx.try_iter());
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
            return (status.code().expect("exited"), lines, stderr);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!(
                "still running after {limit:?}; printed:\n{}",
                lines.join("\n")
            );
        }
    }
}

fn tool(store: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_checkpoint"));
    cmd.env_remove("CHECKPOINT_STORE")
        .args(["--store", store])
        .args(args);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_a_run_until_it_completes() {
    let f = Fixture::new().await;
    let store = f.store().to_owned();
    let rt = f.rt.clone();
    // The run is signalled once the watch has shown it waiting, from
    // another thread: the watch is followed on this one.
    let (waiting_tx, waiting_rx) = std::sync::mpsc::channel::<()>();
    let signaller = tokio::spawn(async move {
        tokio::task::spawn_blocking(move || waiting_rx.recv())
            .await
            .unwrap()
            .expect("the watch showed the run waiting");
        let approval = Approval {
            approved: true,
            by: "ada".into(),
        };
        rt.signal("vendor-42", "finance_approval", &approval)
            .await
            .unwrap();
    });
    let cmd = tool(&store, &["watch", "vendor-42", "--interval", "50ms"]);
    let (code, lines, stderr) = tokio::task::spawn_blocking(move || {
        let mut sent = false;
        follow(cmd, Duration::from_secs(60), |l| {
            if !sent && l.contains("status: waiting for signal `finance_approval`") {
                sent = true;
                let _ = waiting_tx.send(());
            }
        })
    })
    .await
    .unwrap();
    signaller.await.unwrap();
    let text = lines.join("\n");
    assert_eq!(code, 0, "{stderr}\n{text}");
    // The history so far first, then what happened while watching.
    assert!(
        lines[0].ends_with("started (workflow `approval`)"),
        "{text}"
    );
    assert!(text.contains("checkpoint #1 saved (reviewed)"), "{text}");
    let waiting = lines
        .iter()
        .position(|l| l.contains("status: waiting"))
        .unwrap();
    let stored = lines
        .iter()
        .position(|l| l.contains("signal `finance_approval` stored"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(waiting < stored, "{text}");
    assert!(
        lines.last().unwrap().ends_with("status: completed"),
        "{text}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("status: waiting"))
            .count(),
        1,
        "a status is printed when it changes:\n{text}"
    );
    for l in &lines {
        assert!(is_rfc3339_utc(l.split_whitespace().next().unwrap()), "{l}");
    }
}

#[tokio::test]
async fn watch_ends_at_once_on_a_finished_run_with_its_outcome() {
    let f = Fixture::new().await;
    let (code, lines, stderr) = follow(
        tool(f.store(), &["watch", "tally-1"]),
        Duration::from_secs(30),
        |_| {},
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(lines.last().unwrap().ends_with("status: completed"));
    assert_eq!(
        lines.len(),
        f.json(&["history", "tally-1"]).as_array().unwrap().len() + 1
    );

    f.ok(&["cancel", "vendor-43"]);
    let (code, lines, _) = follow(
        tool(f.store(), &["--json", "watch", "vendor-43"]),
        Duration::from_secs(30),
        |_| {},
    );
    assert_eq!(code, 3, "a cancelled run");
    let objects: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(objects[0]["event"], "started");
    let last = objects.last().unwrap();
    assert_eq!(last["id"], "vendor-43");
    assert_eq!(last["status"]["state"], "cancelled");
    assert!(is_rfc3339_utc(last["at"].as_str().unwrap()), "{last}");

    let err = f.fails(1, &["watch", "nope"]);
    assert!(err.contains("`nope`"), "{err}");
    let err = f.fails(2, &["watch", "tally-1", "--interval", "soon"]);
    assert!(err.contains("soon"), "{err}");
}

/// Keeps its run executing (under a lease) until released.
static RELEASE_BUSY: AtomicBool = AtomicBool::new(false);

#[workflow]
async fn busy(ctx: &Ctx, n: u32) -> u32 {
    while !RELEASE_BUSY.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    n
}

#[workflow]
async fn nap(ctx: &Ctx, n: u32) -> u32 {
    ctx.sleep(Duration::from_secs(3600)).await;
    n
}

#[workflow]
async fn ask(ctx: &Ctx, n: u32) -> u32 {
    let reply: Option<u32> = ctx
        .wait_for_timeout("reply", Duration::from_secs(3600))
        .await;
    reply.unwrap_or(n)
}

/// Started by a client-only runtime and registered nowhere: it stays queued.
#[workflow]
async fn unclaimed(ctx: &Ctx, n: u32) -> u32 {
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_shows_queued_running_waiting_and_sleeping_honestly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("statuses.db");
    let store = path.to_str().unwrap().to_owned();
    let rt = Runtime::builder()
        .worker_id("cli-test-worker")
        .open(&store)
        .await
        .unwrap();
    rt.start(busy, "busy-1", 1).await.unwrap();
    rt.start(nap, "nap-1", 2).await.unwrap();
    rt.start(ask, "ask-1", 3).await.unwrap();
    let client = Runtime::builder().client_only().open(&store).await.unwrap();
    client.start(unclaimed, "queued-1", 4).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let running = rt.status("busy-1").await.unwrap() == Status::Running;
        let suspended = matches!(rt.status("nap-1").await.unwrap(), Status::Sleeping { .. })
            && matches!(rt.status("ask-1").await.unwrap(), Status::Waiting { .. });
        if running && suspended {
            break;
        }
        assert!(Instant::now() < deadline, "the runs did not get going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let out = cli(Some(&store), &["runs"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let text = out.stdout;
    let busy_line = line(&text, "busy-1");
    assert!(
        busy_line.contains("running on `cli-test-worker") && busy_line.contains("(lease until "),
        "{text}"
    );
    assert!(line(&text, "queued-1").contains("queued"), "{text}");
    assert!(
        line(&text, "ask-1").contains("waiting for signal `reply` until "),
        "{text}"
    );
    assert!(line(&text, "nap-1").contains("sleeping until "), "{text}");

    let out = cli(Some(&store), &["--json", "runs"]);
    let runs: Value = serde_json::from_str(&out.stdout).expect("JSON");
    let run = |id: &str| {
        runs.as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {runs}"))
            .clone()
    };
    let busy_run = run("busy-1");
    assert_eq!(busy_run["status"]["state"], "running");
    assert!(busy_run["worker"]
        .as_str()
        .unwrap()
        .starts_with("cli-test-worker"));
    assert!(is_rfc3339_utc(
        busy_run["lease_expires_at"].as_str().unwrap()
    ));
    let queued = run("queued-1");
    assert_eq!(queued["status"], json!({"state": "queued"}));
    assert_eq!(queued["worker"], Value::Null);
    let ask_run = run("ask-1");
    assert_eq!(ask_run["status"]["signal"], "reply");
    assert!(is_rfc3339_utc(
        ask_run["status"]["deadline"].as_str().unwrap()
    ));
    assert!(is_rfc3339_utc(
        run("nap-1")["status"]["until"].as_str().unwrap()
    ));
    for (status, id) in [("queued", "queued-1"), ("running", "busy-1")] {
        let out = cli(Some(&store), &["runs", "--status", status]);
        assert!(out.stdout.contains(id), "{status}: {}", out.stdout);
        assert_eq!(out.stdout.lines().count(), 2, "{status}: {}", out.stdout);
    }

    RELEASE_BUSY.store(true, Ordering::SeqCst);
    assert_eq!(rt.handle(busy, "busy-1").result().await.unwrap(), 1);
    rt.close().await;
    client.close().await;
}

#[workflow]
async fn leaf(ctx: &Ctx, n: u32) -> u32 {
    if n == 2 {
        let _: bool = ctx.wait_for("go").await;
    }
    n
}

#[workflow]
async fn fan(ctx: &Ctx, n: u32) -> u32 {
    let mut kids = Vec::new();
    for i in 0..n {
        kids.push(ctx.spawn(leaf, &format!("leaf-{i}"), i).await);
    }
    let outcomes = ctx.join_all(kids).await;
    outcomes.into_iter().map(|o| o.unwrap_or(0)).sum()
}

#[tokio::test]
async fn runs_by_parent_and_the_tree_of_a_fan_out() {
    let f = Fixture::new().await;
    f.rt.start(fan, "fan-1", 3).await.expect("start");
    f.rt.run_until_idle().await.expect("run");
    let kids = f.json(&["runs", "--parent", "fan-1"]);
    let ids: Vec<&str> = kids
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["fan-1/leaf-0", "fan-1/leaf-1", "fan-1/leaf-2"]);
    assert!(kids
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["parent"] == "fan-1"));

    let text = f.ok(&["tree", "fan-1"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].starts_with("fan-1  fan  waiting for its children to end"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("├─ fan-1/leaf-0  leaf  completed"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("├─ fan-1/leaf-1  leaf  completed"),
        "{text}"
    );
    assert!(
        lines[3].starts_with("└─ fan-1/leaf-2  leaf  waiting for signal `go`"),
        "{text}"
    );
    let tree = f.json(&["tree", "fan-1"]);
    assert_eq!(tree["id"], "fan-1");
    assert_eq!(tree["children"].as_array().unwrap().len(), 3);
    assert_eq!(tree["children"][2]["status"]["signal"], "go");

    // The last child's signal, then the parent completes with the sum.
    f.ok(&["signal", "fan-1/leaf-2", "go", "true"]);
    f.rt.register(leaf);
    let out = f.rt.handle(fan, "fan-1").result().await.unwrap();
    assert_eq!(out, 3);
    assert!(f
        .ok(&["tree", "fan-1"])
        .starts_with("fan-1  fan  completed"));
}

/// A stored string holding terminal escape sequences (an error copied from
/// a signal payload) is shown escaped by every text command, never sent to
/// the operator's terminal raw; `--json` escapes it as JSON does.
#[tokio::test]
async fn control_characters_in_stored_strings_reach_no_terminal() {
    let f = Fixture::new().await;
    let reason = "bad\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31mvendor".to_owned();
    f.rt.start(refuse, "hostile-1", reason).await.unwrap();
    f.rt.run_until_idle().await.unwrap();
    for args in [
        &["runs", "--wide"][..],
        &["show", "hostile-1"],
        &["history", "hostile-1"],
    ] {
        let text = f.ok(args);
        assert!(text.contains("hostile-1") || args[0] != "runs", "{text}");
        assert!(
            !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{args:?} printed a control character: {text:?}"
        );
        assert!(text.contains("bad\\u{1b}]0;pwned"), "{args:?}: {text}");
    }
    let json = f.json(&["show", "hostile-1"]);
    assert!(json.to_string().contains("\\u001b"), "{json}");
}

/// The command line reads and operates stores; it never creates one nor
/// changes a schema: an empty file, another program's database and a store
/// of an older schema version are refused, byte for byte as they were.
#[tokio::test]
async fn commands_never_create_or_upgrade_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let other = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&other).unwrap();
    conn.execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY); PRAGMA user_version = 3;")
        .unwrap();
    drop(conn);
    // A store of this version, then set back to look like one of version 1.
    let older = dir.path().join("older.db");
    drop(Runtime::open(older.to_str().unwrap()).await.unwrap());
    let conn = rusqlite::Connection::open(&older).unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
    drop(conn);

    for (path, says) in [
        (&empty, "not a checkpoint store"),
        (&other, "not a checkpoint store"),
        (&older, "has schema version 1, older than this build's"),
    ] {
        let before = std::fs::read(path).unwrap();
        let store = path.to_str().unwrap();
        for args in [
            &["runs"][..],
            &["signal", "r-1", "go", "1"],
            &["cancel", "r-1"],
        ] {
            let out = cli(Some(store), args);
            let err = expect_failure(&out, 1, args);
            assert!(
                err.contains("cannot open store") && err.contains(says),
                "{args:?}: {err}"
            );
        }
        assert_eq!(std::fs::read(path).unwrap(), before, "{store} changed");
        let version: i64 = rusqlite::Connection::open(path)
            .unwrap()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(
            version,
            if path == &empty {
                0
            } else if path == &other {
                3
            } else {
                1
            }
        );
    }
    let out = cli(Some(empty.to_str().unwrap()), &["--json", "runs"]);
    let err = json_error(&expect_failure(&out, 1, &["--json", "runs"]));
    assert_eq!(err["kind"], "cannot_open_store", "{err}");
}

/// On PostgreSQL, a schema without the tables is not created by a command.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn commands_never_create_a_postgres_schema() {
    let base = std::env::var("CHECKPOINT_TEST_POSTGRES_URL").unwrap();
    let schema = format!("cp_cli_absent_{}", std::process::id());
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}schema={schema}");
    let out = cli(Some(&url), &["runs"]);
    if out.stderr.contains("has no PostgreSQL store") {
        return; // a build of the tool without the `postgres` feature
    }
    let err = expect_failure(&out, 1, &["runs"]);
    assert!(err.contains("not a checkpoint store"), "{err}");
    let psql = Command::new("psql")
        .args([base.as_str(), "-tAc"])
        .arg(format!(
            "SELECT count(*) FROM pg_namespace WHERE nspname = '{schema}'"
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&psql.stdout).trim(), "0");
}

#[tokio::test]
async fn schedules_are_listed_paused_unpaused_and_deleted() {
    use checkpoint_runtime::{Schedule, Tick};
    let f = Fixture::new().await;
    assert_eq!(f.ok(&["schedules"]), "no schedules\n");
    let nightly = Schedule::cron("nightly", "0 3 * * *")
        .unwrap()
        .timezone("Europe/Berlin")
        .unwrap();
    f.rt.schedule(nightly, tally, |_: Tick| vec!["x".to_owned()])
        .await
        .unwrap();
    let text = f.ok(&["schedules"]);
    let row = line(&text, "nightly");
    assert!(
        row.contains("tally") && row.contains("0 3 * * * (Europe/Berlin)"),
        "{text}"
    );
    assert!(row.contains("active"), "{text}");

    assert_eq!(
        f.ok(&["schedules", "pause", "nightly"]),
        "schedule `nightly` paused: no tick fires until it is unpaused\n"
    );
    let list = f.json(&["schedules", "list"]);
    assert_eq!(list[0]["name"], "nightly");
    assert_eq!(list[0]["paused"], true);
    assert_eq!(list[0]["timezone"], "Europe/Berlin");
    assert!(is_rfc3339_utc(list[0]["next_tick"].as_str().unwrap()));
    assert!(
        f.rt.schedules().await.unwrap()[0].paused,
        "the store has it"
    );
    f.ok(&["schedules", "unpause", "nightly"]);
    assert!(!f.rt.schedules().await.unwrap()[0].paused);

    let err = json_error(&f.fails(1, &["--json", "schedules", "pause", "weekly"]));
    assert_eq!(err["kind"], "unknown_schedule", "{err}");
    f.ok(&["schedules", "delete", "nightly"]);
    assert_eq!(f.ok(&["schedules"]), "no schedules\n");
}

#[workflow]
async fn chatter(ctx: &Ctx, n: u32) -> u32 {
    for i in 0..n {
        ctx.emit(&json!({ "token": format!("t{i}") }));
        checkpoint!("token");
    }
    n
}

#[tokio::test]
async fn tail_prints_a_runs_stream_from_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stream.db");
    let store = path.to_str().unwrap();
    let rt = Runtime::open(store).await.unwrap();
    rt.start(chatter, "chat-1", 4)
        .await
        .unwrap()
        .result()
        .await
        .unwrap();
    let out = cli(Some(store), &["tail", "chat-1"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "0\t{\"token\":\"t0\"}\n1\t{\"token\":\"t1\"}\n2\t{\"token\":\"t2\"}\n3\t{\"token\":\"t3\"}\n"
    );
    let out = cli(Some(store), &["--json", "tail", "chat-1", "--from", "2"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            json!({ "index": 2, "item": { "token": "t2" } }),
            json!({ "index": 3, "item": { "token": "t3" } }),
        ]
    );
    let out = cli(Some(store), &["tail", "chat-2"]);
    let err = expect_failure(&out, 1, &["tail", "chat-2"]);
    assert!(err.contains("chat-2"), "{err}");
}
