//! Tags and queues where operators see them: `checkpoint runs --tag K=V`
//! (a process on an SQLite store) with its TAGS column, and
//! `GET /api/runs?tag=K:V` (and `/api/counts`), with the tags, queue and
//! priority in each run's JSON.

use std::process::Command;
use std::time::Duration;

use checkpoint_runtime::http::{router, Token};
use checkpoint_runtime::prelude::*;
use serde_json::{json, Value};

const TOKEN: &str = "test-token-0123456789abcdef";

#[workflow]
async fn job(n: u32) -> u32 {
    n + 1
}

/// Three tagged runs (two of tenant acme, one in queue `llm`) and one
/// without options.
async fn start_runs(rt: &Runtime) {
    let acme = StartOptions::new().tag("tenant", "acme");
    rt.start_with(
        job,
        "a-1",
        1,
        acme.clone().tag("plan", "pro").queue("llm").priority(2),
    )
    .await
    .unwrap();
    rt.start_with(job, "a-2", 2, acme.tag("plan", "free"))
        .await
        .unwrap();
    rt.start_with(job, "b-1", 3, StartOptions::new().tag("tenant", "beta"))
        .await
        .unwrap();
    rt.start(job, "plain", 4).await.unwrap();
    rt.run_until_idle().await.unwrap();
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cli(store: &str, args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_checkpoint"))
        .env_remove("CHECKPOINT_STORE")
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .expect("the checkpoint binary runs");
    Out {
        code: out.status.code().expect("exited"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn first_words(text: &str) -> Vec<&str> {
    text.lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

#[tokio::test]
async fn runs_tag_filters_and_shows_the_tags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = path.to_str().unwrap();
    let rt = Runtime::open(store).await.unwrap();
    start_runs(&rt).await;

    let out = cli(store, &["runs", "--tag", "tenant=acme"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(first_words(&out.stdout), ["a-1", "a-2"], "{}", out.stdout);
    let header = out.stdout.lines().next().unwrap();
    let col = header.find("TAGS").expect("a TAGS column");
    let a1 = out.stdout.lines().find(|l| l.starts_with("a-1")).unwrap();
    assert_eq!(
        a1.find("plan=pro tenant=acme"),
        Some(col),
        "\n{}",
        out.stdout
    );

    let both = cli(
        store,
        &["runs", "--tag", "tenant=acme", "--tag", "plan=free"],
    );
    assert_eq!(first_words(&both.stdout), ["a-2"], "{}", both.stdout);
    let none = cli(store, &["runs", "--tag", "tenant=nobody"]);
    assert_eq!(none.stdout, "no runs\n");
    // Every run, the untagged one with `-`.
    let all = cli(store, &["runs"]);
    let plain = all.stdout.lines().find(|l| l.starts_with("plain")).unwrap();
    let col = all.stdout.lines().next().unwrap().find("TAGS").unwrap();
    assert!(plain[col..].starts_with("- "), "{plain:?}");

    let json = cli(store, &["--json", "runs", "--tag", "tenant=acme"]);
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v[0]["tags"], json!({"tenant": "acme", "plan": "pro"}));
    assert_eq!(
        (&v[0]["queue"], &v[0]["priority"]),
        (&json!("llm"), &json!(2))
    );
    assert!(v[1].get("queue").is_none(), "no queue: no key");

    let bad = cli(store, &["runs", "--tag", "tenant"]);
    assert_eq!(bad.code, 2, "a usage error: {}", bad.stderr);
    assert!(bad.stderr.contains("KEY=VALUE"), "{}", bad.stderr);
}

#[tokio::test]
async fn api_runs_filter_by_tag() {
    let worker = Runtime::builder().worker_id("worker").in_memory();
    start_runs(&worker).await;
    let client = Runtime::builder()
        .worker_id("http")
        .store(worker.store())
        .client_only()
        .in_memory();
    let app = router(client, Token::new(TOKEN).unwrap());
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
    let get = |path: &str| {
        let req = http
            .get(format!("http://{addr}{path}"))
            .header("Authorization", format!("Bearer {TOKEN}"));
        async move {
            let res = req.send().await.unwrap();
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.unwrap())
        }
    };
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    };

    let (status, acme) = get("/api/runs?tag=tenant:acme").await;
    assert_eq!(status, 200, "{acme}");
    assert_eq!(ids(&acme), ["a-1", "a-2"]);
    assert_eq!(acme[0]["tags"], json!({"tenant": "acme", "plan": "pro"}));
    assert_eq!(acme[0]["queue"], "llm");
    assert_eq!(acme[0]["priority"], 2);
    let (_, both) = get("/api/runs?tag=tenant:acme&tag=plan:free").await;
    assert_eq!(ids(&both), ["a-2"]);
    // A value may hold `:`; the key ends at the first.
    let (_, none) = get("/api/runs?tag=tenant:acme:x").await;
    assert!(ids(&none).is_empty());
    let (_, counts) = get("/api/counts?tag=tenant:acme").await;
    assert_eq!(counts["total"], 2, "{counts}");
    let (status, bad) = get("/api/runs?tag=tenant").await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad.to_string().contains("KEY:VALUE"), "{bad}");
    server.abort();
}
