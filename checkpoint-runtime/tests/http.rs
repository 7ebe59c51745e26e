//! The HTTP API and the web page (feature `http`), over real sockets on
//! 127.0.0.1: every route, with and without the token, with bad ids, bad
//! sequence numbers and bad JSON, each refused with a clear 4xx that
//! changes nothing in the store; `checkpoint serve` as a process; and the
//! page driven in headless Chromium (`browser`).

#[path = "http/browser.rs"]
mod browser;
#[path = "http/cdp.rs"]
mod cdp;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use checkpoint_runtime::http::{router, Token};
use checkpoint_runtime::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub const TOKEN: &str = "test-token-0123456789abcdef";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub approved: bool,
    pub by: String,
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

/// Two onboarding tasks, each a checkpoint, then a wait for the approval.
#[workflow]
pub async fn onboarding(ctx: &Ctx, vendor: String) -> Vec<String> {
    let tasks = vec!["contract".to_owned(), "bank details".to_owned()];
    let mut done: Vec<String> = Vec::new();
    for task in &tasks {
        done.push(format!("{vendor}: {task}"));
        checkpoint!("task_done");
    }
    let approval: Approval = ctx.wait_for("finance_approval").await;
    done.push(format!("approved={} by {}", approval.approved, approval.by));
    done
}

/// Onboards `n` vendors as child runs and joins them (the page's
/// "waiting for N children" while they wait for their approvals).
#[workflow]
pub async fn vendor_batch(ctx: &Ctx, n: u32) -> usize {
    let mut children = Vec::new();
    for i in 0..n {
        children.push(
            ctx.spawn(onboarding, &format!("batch-vendor-{i}"), format!("v{i}"))
                .await,
        );
    }
    let done = ctx.join_all(children).await;
    done.len()
}

/// Fails (an `Err` output) after one checkpoint: a run to retry.
#[workflow]
async fn failing(ctx: &Ctx, n: u32) -> Result<u32, String> {
    let tries = n;
    checkpoint!("before");
    Err(format!("boom after {tries}"))
}

/// A store with runs in every state worth showing: `tally-1` completed
/// (three checkpoints), `vendor-42` and `vendor-43` waiting for
/// `finance_approval` (three checkpoints each), `broken-1` failed. `worker`
/// executes them; the server answers with a client-only runtime on the
/// same store, as `checkpoint serve` does.
pub struct Fixture {
    pub worker: Runtime,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Fixture {
    pub async fn new() -> Fixture {
        let worker = Runtime::builder().worker_id("worker").in_memory();
        let items = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        worker.start(tally, "tally-1", items).await.unwrap();
        worker
            .start(onboarding, "vendor-42", "acme".into())
            .await
            .unwrap();
        worker
            .start(onboarding, "vendor-43", "globex".into())
            .await
            .unwrap();
        worker.start(failing, "broken-1", 2).await.unwrap();
        worker.run_until_idle().await.unwrap();
        assert_eq!(worker.status("tally-1").await.unwrap(), Status::Completed);
        assert!(matches!(
            worker.status("broken-1").await.unwrap(),
            Status::Failed { .. }
        ));
        let client = Runtime::builder()
            .worker_id("http")
            .store(worker.store())
            .client_only()
            .in_memory();
        Fixture::serve(worker, router(client, Token::new(TOKEN).unwrap())).await
    }

    /// Serves `app` on a fresh port of 127.0.0.1.
    pub async fn serve(worker: Runtime, app: checkpoint_runtime::http::axum::Router) -> Fixture {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            checkpoint_runtime::http::axum::serve(listener, app)
                .await
                .unwrap();
        });
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        Fixture {
            worker,
            addr,
            http,
            server,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A request with the right token.
    fn request(&self, method: &str, path: &str, body: Option<&str>) -> reqwest::RequestBuilder {
        self.bare(method, path, body)
            .header("Authorization", format!("Bearer {TOKEN}"))
    }

    /// A request without a token.
    fn bare(&self, method: &str, path: &str, body: Option<&str>) -> reqwest::RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = self.http.request(method, self.url(path));
        if let Some(b) = body {
            r = r
                .header("Content-Type", "application/json")
                .body(b.to_owned());
        }
        r
    }

    /// Sends `request`; its status and JSON body.
    async fn send(request: reqwest::RequestBuilder) -> (u16, Value) {
        let res = request.send().await.expect("the server answers");
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("HTTP {status}: not JSON ({e}): {text}"));
        (status, body)
    }

    /// `GET path` with the token, which must answer 200.
    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = Fixture::send(self.request("GET", path, None)).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// `POST path` with the token, which must answer `expected`.
    async fn post(&self, path: &str, body: Option<&str>, expected: u16) -> Value {
        let (status, answer) = Fixture::send(self.request("POST", path, body)).await;
        assert_eq!(status, expected, "POST {path}: {answer}");
        answer
    }

    /// Everything a request could change, for every run: its listing
    /// entry, checkpoints, history and pending signals.
    pub async fn snapshot(&self) -> String {
        let store = self.worker.store();
        let mut out = String::new();
        for run in self.worker.runs(RunFilter::new()).await.unwrap() {
            let cps = self.worker.checkpoints(&run.id).await.unwrap();
            let history = self.worker.history_entries(&run.id).await.unwrap();
            let signals = store.pending_signals(&run.id).await.unwrap();
            out.push_str(&format!(
                "{run:?}\n  checkpoints {:?}\n  history {history:?}\n  signals {signals:?}\n",
                cps.iter().map(|c| c.seq).collect::<Vec<_>>()
            ));
        }
        out
    }

    /// `method path` (with the token unless `token` is false) must be
    /// refused with `status` and error `kind`, in the API's error shape,
    /// and leave the store as it was. The error body.
    async fn refused(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        status: u16,
        kind: &str,
    ) -> Value {
        let before = self.snapshot().await;
        let request = self.request(method, path, body);
        let (got, answer) = Fixture::send(request).await;
        assert_eq!(
            (got, answer["kind"].as_str()),
            (status, Some(kind)),
            "{method} {path} {body:?}: {answer}"
        );
        assert_error_shape(&answer);
        // Give a wrongly started execution the time to show.
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            self.snapshot().await,
            before,
            "{method} {path} changed the store"
        );
        answer
    }

    /// Waits until run `id` has `status`.
    pub async fn until_status(&self, id: &str, status: Status) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = self.worker.status(id).await.unwrap();
            if now == status {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "run `{id}` is {now:?}, not {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn assert_error_shape(answer: &Value) {
    assert!(answer["kind"].is_string(), "{answer}");
    assert!(
        answer["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{answer}"
    );
    assert!(answer["details"].is_object(), "{answer}");
}

/// Every route, as (method, path, body).
const ROUTES: &[(&str, &str, Option<&str>)] = &[
    ("GET", "/api/runs", None),
    ("GET", "/api/runs?status=waiting", None),
    ("GET", "/api/runs/vendor-42", None),
    ("GET", "/api/runs/vendor-42/checkpoints", None),
    ("GET", "/api/runs/vendor-42/checkpoints/1", None),
    ("GET", "/api/runs/vendor-42/history", None),
    ("GET", "/api/runs/tally-1/stream", None),
    (
        "POST",
        "/api/runs/vendor-42/signals/finance_approval",
        Some(r#"{"approved": true, "by": "mallory"}"#),
    ),
    ("POST", "/api/runs/vendor-42/cancel", None),
    ("POST", "/api/runs/broken-1/retry", None),
    (
        "POST",
        "/api/runs/tally-1/fork",
        Some(r#"{"seq": 1, "new_id": "stolen"}"#),
    ),
    ("GET", "/api/nope", None),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_needs_the_token() {
    let f = Fixture::new().await;
    let before = f.snapshot().await;
    let wrong = [
        None,
        Some("Bearer wrong".to_owned()),
        Some(format!("Bearer {TOKEN}x")),
        Some(format!("Basic {TOKEN}")),
        Some(TOKEN.to_owned()),
        Some("Bearer ".to_owned()),
    ];
    for (method, path, body) in ROUTES {
        for header in &wrong {
            let mut r = f.bare(method, path, *body);
            if let Some(h) = header {
                r = r.header("Authorization", h);
            }
            let res = r.send().await.unwrap();
            assert_eq!(
                res.status().as_u16(),
                401,
                "{method} {path} with {header:?}"
            );
            assert_eq!(
                res.headers()["www-authenticate"],
                "Bearer realm=\"checkpoint\""
            );
            let answer: Value = res.json().await.unwrap();
            assert_eq!(answer["kind"], "unauthorized", "{answer}");
            assert_eq!(answer["details"]["missing"], json!(header.is_none()));
            assert_error_shape(&answer);
        }
    }
    // The token in the query string is no token.
    let res = f
        .bare("GET", &format!("/api/runs?token={TOKEN}"), None)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        f.snapshot().await,
        before,
        "a refused request changed the store"
    );
    // And with it, the first route answers.
    assert_eq!(f.get("/api/runs").await.as_array().unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_without_data_and_with_a_strict_policy() {
    let f = Fixture::new().await;
    for (path, content_type) in [
        ("/", "text/html; charset=utf-8"),
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/style.css", "text/css; charset=utf-8"),
    ] {
        let res = f.bare("GET", path, None).send().await.unwrap();
        assert_eq!(res.status().as_u16(), 200, "{path}");
        let headers = res.headers().clone();
        assert_eq!(headers["content-type"], content_type, "{path}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["x-frame-options"], "DENY");
        let text = res.text().await.unwrap();
        for id in ["vendor-42", "tally-1", TOKEN] {
            assert!(!text.contains(id), "{path} holds `{id}`");
        }
        if path == "/" {
            let csp = headers["content-security-policy"].to_str().unwrap();
            assert!(csp.contains("script-src 'self'"), "{csp}");
            assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
            assert!(text.contains("<base href=\"/\">"), "{text}");
        }
    }
    // API answers are not cached.
    let res = f.request("GET", "/api/runs", None).send().await.unwrap();
    assert_eq!(res.headers()["cache-control"], "no-store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_nests_under_a_prefix() {
    use checkpoint_runtime::http::axum::Router;
    let worker = Runtime::in_memory();
    worker.start(tally, "t-1", vec!["x".into()]).await.unwrap();
    worker.run_until_idle().await.unwrap();
    let app = Router::new().nest(
        "/ops/workflows",
        router(worker.clone(), Token::new(TOKEN).unwrap()),
    );
    let f = Fixture::serve(worker, app).await;
    let res = f.bare("GET", "/ops/workflows", None).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let html = res.text().await.unwrap();
    // The page's relative references resolve under the prefix.
    assert!(html.contains("<base href=\"/ops/workflows/\">"), "{html}");
    let js = f
        .bare("GET", "/ops/workflows/app.js", None)
        .send()
        .await
        .unwrap();
    assert_eq!(js.status().as_u16(), 200);
    let runs = f.get("/ops/workflows/api/runs").await;
    assert_eq!(runs[0]["id"], "t-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_are_listed_and_filtered() {
    let f = Fixture::new().await;
    let ids = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        ids(f.get("/api/runs").await),
        ["tally-1", "vendor-42", "vendor-43", "broken-1"]
    );
    // Counts per status, every status named, under the same filters.
    let counts = f.get("/api/counts").await;
    assert_eq!(counts["total"], 4, "{counts}");
    assert_eq!(
        (
            &counts["counts"]["completed"],
            &counts["counts"]["waiting"],
            &counts["counts"]["failed"],
            &counts["counts"]["running"]
        ),
        (&json!(1), &json!(2), &json!(1), &json!(0))
    );
    let vendors = f.get("/api/counts?prefix=vendor-").await;
    assert_eq!(
        (&vendors["total"], &vendors["counts"]["waiting"]),
        (&json!(2), &json!(2))
    );
    f.refused(
        "GET",
        "/api/counts?status=failed",
        None,
        400,
        "invalid_query",
    )
    .await;
    let waiting = f.get("/api/runs?status=waiting").await;
    assert_eq!(ids(waiting.clone()), ["vendor-42", "vendor-43"]);
    // The shape of `checkpoint runs --json`.
    let r = &waiting[0];
    assert_eq!(
        r["status"],
        json!({"state": "waiting", "signal": "finance_approval"})
    );
    assert_eq!(r["workflow"], "onboarding");
    assert_eq!(r["latest_seq"], 3);
    assert!(r["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(ids(f.get("/api/runs?workflow=tally").await), ["tally-1"]);
    assert_eq!(
        ids(f.get("/api/runs?prefix=vendor-&limit=1").await),
        ["vendor-42"]
    );
    assert_eq!(ids(f.get("/api/runs?status=failed").await), ["broken-1"]);
    // Empty parameters (an empty form field) filter nothing.
    assert_eq!(
        ids(f
            .get("/api/runs?status=&workflow=&prefix=&parent=&limit=")
            .await)
        .len(),
        4
    );
    // vendor-42 spawned nothing.
    assert!(ids(f.get("/api/runs?parent=vendor-42").await).is_empty());
    // Pages, either way.
    assert_eq!(
        ids(f.get("/api/runs?order=newest&limit=2").await),
        ["broken-1", "vendor-43"]
    );
    assert_eq!(
        ids(f.get("/api/runs?order=newest&limit=2&offset=2").await),
        ["vendor-42", "tally-1"]
    );
    assert_eq!(
        ids(f.get("/api/runs?limit=2&offset=1").await),
        ["vendor-42", "vendor-43"]
    );
    assert_eq!(
        ids(f.get("/api/runs?status=waiting&offset=1").await),
        ["vendor-43"]
    );
    // The history pages too.
    let all = f.get("/api/runs/vendor-42/history").await;
    let all = all.as_array().unwrap();
    assert!(all.len() > 3, "{all:?}");
    let page = f.get("/api/runs/vendor-42/history?limit=2&offset=1").await;
    assert_eq!(page.as_array().unwrap(), &all[1..3]);
    f.refused(
        "GET",
        "/api/runs/vendor-42/history?limit=10001",
        None,
        400,
        "invalid_query",
    )
    .await;

    for (query, parameter) in [
        ("status=done", "status"),
        ("limit=-1", "limit"),
        ("limit=ten", "limit"),
        ("limit=1001", "limit"),
        ("offset=x", "offset"),
        ("order=random", "order"),
        ("colour=red", "colour"),
        ("status=waiting&status=failed", "status"),
    ] {
        let e = f
            .refused(
                "GET",
                &format!("/api/runs?{query}"),
                None,
                400,
                "invalid_query",
            )
            .await;
        assert_eq!(e["details"]["parameter"], parameter, "{query}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_shows_its_status_fields_and_what_it_waits_for() {
    let f = Fixture::new().await;
    let run = f.get("/api/runs/vendor-42").await;
    assert_eq!(run["id"], "vendor-42");
    assert_eq!(run["status"]["state"], "waiting");
    assert_eq!(run["input"], "acme");
    assert_eq!(run["output"], Value::Null);
    // The latest checkpoint's fields, as `checkpoint show --json` has them.
    let cp = &run["checkpoint"];
    assert_eq!(cp["seq"], 3);
    let done = cp["fields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "done")
        .expect("the field `done`");
    assert_eq!(
        done["value"],
        json!(["acme: contract", "acme: bank details"])
    );
    // What it waits for, with the payload type's schema as a hint.
    let w = &run["waiting_for"];
    assert_eq!(w["signal"], "finance_approval");
    assert_eq!(w["deadline"], Value::Null);
    let schema = &w["payload_schema"];
    assert_eq!(schema["type"], "Approval", "{w}");
    assert_eq!(
        schema["definitions"],
        json!(["struct Approval { approved: bool, by: String }"])
    );
    assert!(schema["key"].is_string());
    assert!(schema["schema"].is_object());
    let example: Approval = serde_json::from_value(schema["example"].clone()).unwrap();
    assert_eq!(
        example,
        Approval {
            approved: false,
            by: String::new()
        }
    );
    assert_eq!(
        run["actions"],
        json!({"signal": true, "cancel": true, "retry": false, "fork": true})
    );
    assert_eq!(run["parent"], Value::Null);
    assert_eq!(run["children"], json!([]));

    let done = f.get("/api/runs/tally-1").await;
    assert_eq!(done["status"], json!({"state": "completed"}));
    assert_eq!(done["output"], 3);
    assert_eq!(done["waiting_for"], Value::Null);
    assert_eq!(done["actions"]["cancel"], false);
    let broken = f.get("/api/runs/broken-1").await;
    assert_eq!(broken["status"]["state"], "failed");
    assert_eq!(broken["actions"]["retry"], true);

    let e = f
        .refused("GET", "/api/runs/nope", None, 404, "unknown_run")
        .await;
    assert_eq!(e["details"]["run"], "nope");
    // An id is one segment: a `/` in it is percent-encoded.
    let e = f
        .refused("GET", "/api/runs/a%2Fb", None, 404, "unknown_run")
        .await;
    assert_eq!(e["details"]["run"], "a/b");
    f.refused("GET", "/api/runs/%FF", None, 400, "invalid_path")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_listed_and_each_version_diffs_against_the_one_before() {
    let f = Fixture::new().await;
    let list = f.get("/api/runs/tally-1/checkpoints").await;
    let seqs: Vec<u64> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert_eq!(list[0]["label"], "item");
    assert_eq!(list[0]["damaged"], Value::Null);
    assert!(list[0]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "seen" && f["schema"].is_string()));

    let first = f.get("/api/runs/tally-1/checkpoints/1").await;
    assert_eq!(first["run"], "tally-1");
    assert_eq!(first["previous_seq"], Value::Null);
    assert!(first["diff"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["change"] == "added"));

    let second = f.get("/api/runs/tally-1/checkpoints/2").await;
    assert_eq!(second["previous_seq"], 1);
    let seen = |v: &Value, key: &str| -> Value {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == "seen")
            .unwrap()
            .clone()
    };
    assert_eq!(seen(&second, "fields")["value"], json!(["a", "b"]));
    let d = seen(&second, "diff");
    assert_eq!(d["change"], "changed");
    assert_eq!(
        (d["old"].clone(), d["new"].clone()),
        (json!(["a"]), json!(["a", "b"]))
    );
    assert_eq!(
        d["changes"],
        json!([{"path": "/1", "op": "add", "new": "b"}])
    );

    // The onboarding run: the wait site's checkpoint changed nothing.
    let third = f.get("/api/runs/vendor-42/checkpoints/3").await;
    let d = seen_or(&third, "done");
    assert_eq!(d["change"], "unchanged", "{third}");

    for bad in ["0", "-1", "two", "1.5", "18446744073709551616"] {
        let e = f
            .refused(
                "GET",
                &format!("/api/runs/tally-1/checkpoints/{bad}"),
                None,
                400,
                "invalid_seq",
            )
            .await;
        assert_eq!(e["details"]["seq"], bad);
    }
    let e = f
        .refused(
            "GET",
            "/api/runs/tally-1/checkpoints/99",
            None,
            404,
            "unknown_checkpoint",
        )
        .await;
    assert_eq!(e["details"], json!({"run": "tally-1", "seq": 99}));
    f.refused(
        "GET",
        "/api/runs/nope/checkpoints",
        None,
        404,
        "unknown_run",
    )
    .await;
    f.refused(
        "GET",
        "/api/runs/nope/checkpoints/1",
        None,
        404,
        "unknown_run",
    )
    .await;
}

fn seen_or(v: &Value, name: &str) -> Value {
    v["diff"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == name)
        .unwrap_or_else(|| panic!("no field `{name}` in {v}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_lists_the_events() {
    let f = Fixture::new().await;
    let h = f.get("/api/runs/tally-1/history").await;
    let events = h.as_array().unwrap();
    assert_eq!(events[0]["event"], "started");
    assert_eq!(events[0]["workflow"], "tally");
    assert_eq!(events[0]["text"], "started (workflow `tally`)");
    assert!(events[0]["at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(events.last().unwrap()["event"], "completed");
    assert!(events
        .iter()
        .any(|e| e["event"] == "checkpoint_saved" && e["seq"] == 2));
    f.refused("GET", "/api/runs/nope/history", None, 404, "unknown_run")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_resumes_the_run_and_bad_ones_change_nothing() {
    let f = Fixture::new().await;
    let signal = "/api/runs/vendor-42/signals/finance_approval";
    for body in ["", "{", "approved", r#"{"approved": true"#] {
        let e = f
            .refused("POST", signal, Some(body), 400, "invalid_payload")
            .await;
        assert_eq!(e["details"]["signal"], "finance_approval");
    }
    // JSON, but not an `Approval`: the waiting site could not decode it.
    for body in [r#"{"approved": "yes", "by": "x"}"#, "[1, 2]", "42"] {
        let e = f
            .refused("POST", signal, Some(body), 422, "signal_payload")
            .await;
        assert!(e["message"].as_str().unwrap().contains("not stored"), "{e}");
    }
    f.refused(
        "POST",
        "/api/runs/nope/signals/finance_approval",
        Some("true"),
        404,
        "unknown_run",
    )
    .await;
    f.refused(
        "POST",
        "/api/runs/vendor-42/signals/bad%0Aname",
        Some("true"),
        400,
        "invalid_id",
    )
    .await;
    f.refused("GET", signal, None, 405, "method_not_allowed")
        .await;
    // A name the store keeps for joins is the client's mistake (was 500).
    let e = f
        .refused(
            "POST",
            "/api/runs/vendor-42/signals/join%231",
            Some("true"),
            400,
            "reserved_signal",
        )
        .await;
    assert!(e["message"].as_str().unwrap().contains("reserved"), "{e}");
    // A name no wait site of `onboarding` takes: refused unless forced.
    let e = f
        .refused(
            "POST",
            "/api/runs/vendor-42/signals/finance_aproval",
            Some("true"),
            422,
            "unknown_signal",
        )
        .await;
    assert_eq!(e["details"]["known"], json!(["finance_approval"]), "{e}");
    f.refused(
        "POST",
        "/api/runs/vendor-42/signals/finance_aproval?force=maybe",
        Some("true"),
        400,
        "invalid_query",
    )
    .await;
    let forced = f
        .post(
            "/api/runs/vendor-42/signals/escalation?force=true",
            Some("true"),
            200,
        )
        .await;
    assert_eq!(forced["signal"], "escalation");
    // The run lists it as pending (stored, not consumed): name, time, size.
    let pending = &f.get("/api/runs/vendor-42").await["pending_signals"];
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{pending}");
    assert_eq!(pending[0]["name"], "escalation");
    assert_eq!(pending[0]["size"], 4);
    assert!(pending[0]["received_at"].as_str().unwrap().ends_with('Z'));

    let answer = f
        .post(signal, Some(r#"{"approved": true, "by": "api"}"#), 200)
        .await;
    assert_eq!(answer["run"], "vendor-42");
    assert_eq!(answer["signal"], "finance_approval");
    assert_eq!(answer["payload"], json!({"approved": true, "by": "api"}));
    assert_eq!(answer["status"]["state"], "waiting");
    f.until_status("vendor-42", Status::Completed).await;
    let run = f.get("/api/runs/vendor-42").await;
    assert_eq!(
        run["output"],
        json!([
            "acme: contract",
            "acme: bank details",
            "approved=true by api"
        ])
    );
    // The other waiting run was not touched.
    assert_eq!(
        f.worker.status("vendor-43").await.unwrap(),
        Status::Waiting {
            signal: "finance_approval".into(),
            deadline: None
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_with_a_body_is_a_request_the_run_sees() {
    let f = Fixture::new().await;
    let body = r#"{"reason": "vendor withdrew", "grace_ms": 5000, "children": "abandon"}"#;
    let a = f.post("/api/runs/vendor-42/cancel", Some(body), 200).await;
    assert_eq!(a["cancel_requested"], true);
    assert_eq!(a["reason"], "vendor withdrew");
    assert_eq!(a["grace_ms"], 5000);
    assert_eq!(a["children"], "abandon");
    // Pending: the run still waits (no deadline), the request is shown.
    let run = f.get("/api/runs/vendor-42").await;
    assert_eq!(run["cancel_reason"], "vendor withdrew");
    f.refused(
        "POST",
        "/api/runs/vendor-42/cancel",
        Some(r#"{"children": "some"}"#),
        400,
        "invalid_body",
    )
    .await;
    // A finished run refuses a request, naming its status.
    let e = f
        .refused(
            "POST",
            "/api/runs/tally-1/cancel",
            Some(r#"{"reason": "late"}"#),
            409,
            "cancel_refused",
        )
        .await;
    assert!(e["message"].as_str().unwrap().contains("completed"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_retry_and_fork_refuse_what_does_not_apply() {
    let f = Fixture::new().await;

    // Cancel: a waiting run is cancelled; a finished one is left alone.
    let a = f.post("/api/runs/vendor-43/cancel", None, 200).await;
    assert_eq!(
        a,
        json!({"run": "vendor-43", "cancelled": true, "status": {"state": "cancelled"}})
    );
    let before = f.snapshot().await;
    let a = f.post("/api/runs/tally-1/cancel", None, 200).await;
    assert_eq!(a["cancelled"], false);
    assert_eq!(f.snapshot().await, before);
    f.refused("POST", "/api/runs/nope/cancel", None, 404, "unknown_run")
        .await;

    // Retry: only a failed or parked run.
    let e = f
        .refused(
            "POST",
            "/api/runs/tally-1/retry",
            None,
            409,
            "not_retryable",
        )
        .await;
    assert_eq!(e["details"]["run"], "tally-1");
    f.refused(
        "POST",
        "/api/runs/vendor-42/retry",
        None,
        409,
        "not_retryable",
    )
    .await;
    f.refused("POST", "/api/runs/nope/retry", None, 404, "unknown_run")
        .await;

    // Fork: a new run from an old checkpoint.
    let fork = "/api/runs/tally-1/fork";
    for body in [
        "",
        "{",
        r#"{"seq": 1}"#,
        r#"{"new_id": "x"}"#,
        r#"{"seq": "two", "new_id": "x"}"#,
        r#"{"seq": -1, "new_id": "x"}"#,
        r#"{"seq": 1, "new_id": "x", "extra": true}"#,
    ] {
        f.refused("POST", fork, Some(body), 400, "invalid_body")
            .await;
    }
    f.refused(
        "POST",
        fork,
        Some(r#"{"seq": 0, "new_id": "x"}"#),
        400,
        "invalid_seq",
    )
    .await;
    f.refused(
        "POST",
        fork,
        Some(r#"{"seq": 1, "new_id": ""}"#),
        400,
        "invalid_id",
    )
    .await;
    f.refused(
        "POST",
        fork,
        Some(r#"{"seq": 99, "new_id": "x"}"#),
        404,
        "unknown_checkpoint",
    )
    .await;
    f.refused(
        "POST",
        "/api/runs/nope/fork",
        Some(r#"{"seq": 1, "new_id": "x"}"#),
        404,
        "unknown_run",
    )
    .await;
    let e = f
        .refused(
            "POST",
            fork,
            Some(r#"{"seq": 1, "new_id": "vendor-42"}"#),
            409,
            "already_exists",
        )
        .await;
    assert_eq!(e["details"]["run"], "vendor-42");

    let a = f
        .post(fork, Some(r#"{"seq": 2, "new_id": "tally-2"}"#), 201)
        .await;
    assert_eq!(a, json!({"run": "tally-2", "from": "tally-1", "seq": 2}));
    f.until_status("tally-2", Status::Completed).await;
    f.refused(
        "POST",
        fork,
        Some(r#"{"seq": 2, "new_id": "tally-2"}"#),
        409,
        "already_exists",
    )
    .await;
    // Last (the worker executes it again and changes the store): a failed
    // run is retried.
    let a = f.post("/api/runs/broken-1/retry", None, 200).await;
    assert_eq!(a["retried"], true);
    let history = f.worker.history("broken-1").await.unwrap();
    assert!(
        history.iter().any(|e| matches!(e, Event::Retried { .. })),
        "{history:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_methods_are_json_errors() {
    let f = Fixture::new().await;
    let e = f.refused("GET", "/api/nope", None, 404, "not_found").await;
    assert_eq!(e["details"]["path"], "/api/nope");
    f.refused("GET", "/api/runs/a/b", None, 404, "not_found")
        .await;
    f.refused(
        "GET",
        "/api/runs/tally-1/cancel",
        None,
        405,
        "method_not_allowed",
    )
    .await;
    f.refused(
        "DELETE",
        "/api/runs/tally-1",
        None,
        405,
        "method_not_allowed",
    )
    .await;
}

/// A body past `BODY_LIMIT` is a 413 in the API's error shape that
/// changes nothing, whether its `Content-Length` says so (refused before it
/// is read) or it comes in chunks; one at the limit is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_limit_is_refused_in_the_error_shape() {
    use checkpoint_runtime::http::BODY_LIMIT;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let f = Fixture::new().await;
    let signal = "/api/runs/vendor-42/signals/finance_approval";
    // A JSON string of `len` bytes, quotes included.
    let string_of = |len: usize| format!("\"{}\"", "a".repeat(len - 2));
    let too_long = string_of(BODY_LIMIT + 1);
    let e = f
        .refused("POST", signal, Some(&too_long), 413, "invalid_body")
        .await;
    assert_eq!(e["details"]["limit"], BODY_LIMIT, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("longer than"),
        "{e}"
    );
    // At the limit: read, and refused only for what it holds.
    f.refused(
        "POST",
        signal,
        Some(&string_of(BODY_LIMIT)),
        422,
        "signal_payload",
    )
    .await;

    // Chunked, without a length: cut off at the limit, the same answer.
    let before = f.snapshot().await;
    let mut conn = tokio::net::TcpStream::connect(f.addr).await.unwrap();
    let head = format!(
        "POST {signal} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\
         Connection: close\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0;
    while sent <= BODY_LIMIT {
        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
        frame.extend_from_slice(&chunk);
        frame.extend_from_slice(b"\r\n");
        // The server may answer and close before the whole body is sent.
        if conn.write_all(&frame).await.is_err() {
            break;
        }
        sent += chunk.len();
    }
    let _ = conn.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = conn.read_to_end(&mut answer).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains(r#""kind":"invalid_body""#), "{answer}");
    assert_eq!(
        f.snapshot().await,
        before,
        "a refused body changed the store"
    );
}

// ---- `checkpoint serve` ----------------------------------------------------

/// A `checkpoint serve` process, killed when dropped.
struct Served {
    child: std::process::Child,
    banner: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_cmd(store: &str, args: &[&str], token: Option<&str>) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_checkpoint"));
    cmd.env_remove("CHECKPOINT_STORE")
        .env_remove("CHECKPOINT_TOKEN")
        .args(["--store", store])
        .args(args);
    if let Some(t) = token {
        cmd.env("CHECKPOINT_TOKEN", t);
    }
    cmd
}

/// Starts `checkpoint serve` and reads its banner: one line of JSON under
/// `--json`; else the address and the token's source, and the login link
/// when the token was generated.
fn spawn_serve(store: &str, args: &[&str], token: Option<&str>) -> Served {
    use std::io::BufRead;
    let mut child = serve_cmd(store, args, token)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the checkpoint binary runs");
    let stdout = child.stdout.take().unwrap();
    let lines = match (args.contains(&"--json"), token) {
        (true, _) => 1,
        (false, Some(_)) => 2,
        (false, None) => 3,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(stdout);
        let mut banner = String::new();
        for _ in 0..lines {
            if reader.read_line(&mut banner).unwrap_or(0) == 0 {
                break;
            }
        }
        let _ = tx.send(banner);
    });
    let banner = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("`checkpoint serve` printed its banner");
    Served { child, banner }
}

async fn sqlite_store(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("workflows.db");
    let url = path.to_string_lossy().into_owned();
    let rt = Runtime::open(&url).await.unwrap();
    rt.start(onboarding, "vendor-42", "acme".into())
        .await
        .unwrap();
    rt.run_until_idle().await.unwrap();
    rt.close().await;
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_serve_prints_a_token_and_serves_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(&dir).await;
    let served = spawn_serve(
        &store,
        &["--json", "serve", "--listen", "127.0.0.1:0"],
        None,
    );
    let banner: Value = serde_json::from_str(served.banner.trim()).expect(&served.banner);
    assert_eq!(banner["token_source"], "generated");
    let token = banner["token"].as_str().unwrap().to_owned();
    assert_eq!(token.len(), 64, "32 random bytes in hex");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    let url = banner["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let res = http.get(format!("{url}api/runs")).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let runs: Value = http
        .get(format!("{url}api/runs"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(runs[0]["id"], "vendor-42");
    assert_eq!(runs[0]["status"]["state"], "waiting");
    // The page is there too.
    let page = http.get(&url).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);

    // This process never ran the wait site: the payload is checked against
    // the schema the site stored, and a wrong one is refused.
    let signal = format!("{url}api/runs/vendor-42/signals/finance_approval");
    let res = http
        .post(&signal)
        .bearer_auth(&token)
        .body(r#"{"approved": "yes", "by": 1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 422);
    let e: Value = res.json().await.unwrap();
    assert!(
        e["message"].as_str().unwrap().contains("stored schema"),
        "{e}"
    );
    let res = http
        .post(&signal)
        .bearer_auth(&token)
        .body(r#"{"approved": true, "by": "serve"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    // A worker (here, this test) resumes the run with it.
    let worker = Runtime::open(&store).await.unwrap();
    worker.register(onboarding);
    worker.run_until_idle().await.unwrap();
    let out = worker
        .handle(onboarding, "vendor-42")
        .result()
        .await
        .unwrap();
    assert_eq!(out.last().unwrap(), "approved=true by serve");
    worker.close().await;

    // SIGTERM stops it cleanly.
    let mut served = served;
    let pid = served.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = served.child.wait().unwrap();
    assert!(status.success(), "`serve` exited with {status} on SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_serve_takes_its_token_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_store(&dir).await;
    let served = spawn_serve(
        &store,
        &["serve", "--listen", "127.0.0.1:0"],
        Some("From-The-Environment-2026"),
    );
    // Text mode: the address, and no secret printed.
    let first = served.banner.lines().next().unwrap();
    assert!(first.contains("on http://127.0.0.1:"), "{}", served.banner);
    assert!(
        !served.banner.contains("From-The-Environment-2026"),
        "{}",
        served.banner
    );
    let url = first.rsplit(' ').next().unwrap().to_owned();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let res = http
        .get(format!("{url}api/runs/vendor-42"))
        .bearer_auth("From-The-Environment-2026")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    drop(served);

    // A generated token is printed, and no link that carries it (it would
    // stay in the browser's history): the page has a login form.
    let served = spawn_serve(&store, &["serve", "--listen", "127.0.0.1:0"], None);
    assert!(served.banner.contains("token: "), "{}", served.banner);
    assert!(!served.banner.contains("#token="), "{}", served.banner);
    assert!(served.banner.contains("login form"), "{}", served.banner);
}

#[test]
fn checkpoint_serve_refuses_a_remote_address_without_the_flag() {
    let out = serve_cmd("unused.db", &["serve", "--listen", "0.0.0.0:7070"], None)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a loopback address"), "{stderr}");
    assert!(stderr.contains("--allow-remote"), "{stderr}");
    // Under --json, as one JSON object.
    let out = serve_cmd(
        "unused.db",
        &["--json", "serve", "--listen", "0.0.0.0:7070"],
        None,
    )
    .output()
    .unwrap();
    let e: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(e["kind"], "remote_listen_refused");
    assert_eq!(e["details"]["address"], "0.0.0.0:7070");
    // A bad token in the environment is refused, not replaced.
    let out = serve_cmd(
        "unused.db",
        &["--json", "serve", "--listen", "127.0.0.1:0"],
        Some("has a space"),
    )
    .output()
    .unwrap();
    let e: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(e["kind"], "invalid_token");
}

#[workflow]
async fn leaf(n: u32) -> u32 {
    n + 1
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_shows_its_parent_and_children_and_runs_filter_by_parent() {
    let f = Fixture::new().await;
    let h = f.worker.start(fan, "fan-1", 2).await.unwrap();
    assert_eq!(h.result().await.unwrap(), 3);
    let listed = f.get("/api/runs?parent=fan-1").await;
    let listed: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["fan-1/leaf-0", "fan-1/leaf-1"]);
    let run = f.get("/api/runs/fan-1").await;
    assert_eq!(run["parent"], Value::Null);
    let children: Vec<&str> = run["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(children, ["fan-1/leaf-0", "fan-1/leaf-1"]);
    assert_eq!(run["children"][0]["status"], json!({"state": "completed"}));
    let child = f.get("/api/runs/fan-1%2Fleaf-1").await;
    assert_eq!(child["parent"], "fan-1");
    assert_eq!(child["children"], json!([]));
    assert_eq!(child["output"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_listed_paused_and_unpaused() {
    use checkpoint_runtime::{Schedule, Tick};
    let f = Fixture::new().await;
    assert_eq!(f.get("/api/schedules").await, json!([]));
    let hourly = Schedule::cron("hourly", "0 * * * *").unwrap();
    f.worker
        .schedule(hourly, tally, |_: Tick| vec!["x".to_owned()])
        .await
        .unwrap();
    let list = f.get("/api/schedules").await;
    assert_eq!(list[0]["name"], "hourly", "{list}");
    assert_eq!(list[0]["workflow"], "tally");
    assert_eq!(list[0]["paused"], false);
    let paused = f.post("/api/schedules/hourly/pause", None, 200).await;
    assert_eq!(paused, json!({ "schedule": "hourly", "paused": true }));
    assert!(
        f.worker.schedules().await.unwrap()[0].paused,
        "the store has it"
    );
    f.post("/api/schedules/hourly/unpause", None, 200).await;
    assert_eq!(f.get("/api/schedules").await[0]["paused"], false);
    f.refused(
        "POST",
        "/api/schedules/daily/pause",
        None,
        404,
        "unknown_schedule",
    )
    .await;
}

#[workflow]
async fn narrate(ctx: &Ctx, n: u32) -> u32 {
    for i in 0..n {
        ctx.emit(&json!({ "line": i }));
        ctx.set_progress(&json!({ "done": i + 1, "total": n }));
        checkpoint!("line");
    }
    let _: () = ctx.wait_for("close").await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_stream_is_served_as_events_and_its_progress_in_its_json() {
    let worker = Runtime::in_memory();
    worker.start(narrate, "story-1", 3).await.unwrap();
    worker.run_until_idle().await.unwrap();
    let client = Runtime::builder()
        .worker_id("http")
        .store(worker.store())
        .client_only()
        .in_memory();
    let f = Fixture::serve(worker, router(client, Token::new(TOKEN).unwrap())).await;
    let run = f.get("/api/runs/story-1").await;
    assert_eq!(run["progress"], json!({ "done": 3, "total": 3 }));
    // Waiting: the events come, the response goes on.
    let mut response = f
        .request("GET", "/api/runs/story-1/stream?from=1", None)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut body = String::new();
    while body.matches("event: item").count() < 2 {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("the events come while the run waits")
            .unwrap()
            .expect("the response goes on");
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(
        body.contains("event: item\nid: 1\ndata: {\"line\":1}\n"),
        "{body}"
    );
    assert!(body.contains("id: 2"), "{body}");
    assert!(
        !body.contains("id: 0") && !body.contains("event: end"),
        "{body}"
    );
    // The run ends: so does the response, with an `end` event.
    f.worker.signal("story-1", "close", &()).await.unwrap();
    let rest = tokio::time::timeout(Duration::from_secs(10), response.text())
        .await
        .expect("the response ends with the run")
        .unwrap();
    assert!(rest.contains("event: end"), "{rest}");
    // A browser reconnecting with `Last-Event-ID` starts after it.
    let again = f
        .request("GET", "/api/runs/story-1/stream", None)
        .header("Last-Event-ID", "1")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        again.contains("id: 2") && !again.contains("id: 1\n"),
        "{again}"
    );
    f.refused("GET", "/api/runs/nope/stream", None, 404, "unknown_run")
        .await;
    f.refused(
        "GET",
        "/api/runs/story-1/stream?from=-1",
        None,
        400,
        "invalid_query",
    )
    .await;
}
