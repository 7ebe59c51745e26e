//! The `checkpoint` command-line tool, run as a separate process on an
//! SQLite store that real runs were written to.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// `serde_json::Value` deserializes with `deserialize_any`: no schema, so the
/// field cannot be shown without the workflow's code.
#[workflow]
async fn opaque(ctx: &Ctx, n: u32) -> String {
    let doc: Value = json!({ "n": n });
    let count = n + 1;
    checkpoint!("opaque");
    format!("{doc} {count}")
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
    if code == 1 {
        assert!(
            out.stderr.starts_with("error: "),
            "stderr: {:?}",
            out.stderr
        );
    }
    out.stderr.clone()
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
        history.contains("signal `finance_approval` received"),
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
            signal: "finance_approval".into()
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

    // A finished run: stored, with a note that nothing will consume it.
    let out = f.ok(&["signal", "vendor-43", "finance_approval", "null"]);
    assert!(out.contains("nothing will consume"), "{out}");
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
    assert!(!f.ok(&["history", "vendor-42"]).contains("received"));
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
