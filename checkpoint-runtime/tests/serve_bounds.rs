//! The server's bounds (`http::serve`, and `checkpoint serve` as a process):
//! a request head must arrive in time, connections are bounded, wrong tokens
//! are slow, weak tokens refused, and shutdown does not wait on half-open
//! connections. Real sockets on 127.0.0.1.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use checkpoint_runtime::http::{router, serve, ServeOptions, Token};
use checkpoint_runtime::Runtime;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A server on a fresh port with `options`; dropping the sender stops it.
async fn start(
    options: ServeOptions,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let rt = Runtime::builder().client_only().in_memory();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = router(rt, Token::new(TOKEN).unwrap());
    let server = tokio::spawn(serve(listener, app, options, async move {
        let _ = stopped.await;
    }));
    (addr, stop, server)
}

/// Sends a whole GET and reads the answer's status line, or `None` when
/// the server closed the connection first or `within` passed.
async fn get(addr: SocketAddr, path: &str, token: &str, within: Duration) -> Option<String> {
    let exchange = async {
        let mut conn = TcpStream::connect(addr).await.ok()?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Connection: close\r\n\r\n"
        );
        conn.write_all(request.as_bytes()).await.ok()?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer).await.ok()?;
        answer.lines().next().map(str::to_owned)
    };
    tokio::time::timeout(within, exchange).await.ok().flatten()
}

/// A connection that sent half a request head and stops there.
async fn half_open(addr: SocketAddr) -> TcpStream {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /api/runs HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    conn
}

/// Whether the server closes `conn` (end of stream or reset) within `within`.
async fn closed_within(conn: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let read = async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(within, read).await.is_ok()
}

#[tokio::test]
async fn a_request_head_that_does_not_arrive_in_time_closes_the_connection() {
    let options = ServeOptions::default().header_timeout(Duration::from_millis(300));
    let (addr, _stop, _server) = start(options).await;
    let mut slow = half_open(addr).await;
    assert!(
        closed_within(&mut slow, Duration::from_secs(10)).await,
        "a half-sent head is dropped after the header timeout"
    );
    // A connection that sends nothing at all is dropped too.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(10)).await);
    // And the server still answers.
    let answer = get(addr, "/api/runs", TOKEN, Duration::from_secs(10)).await;
    assert_eq!(answer.as_deref(), Some("HTTP/1.1 200 OK"));
}

#[tokio::test]
async fn connections_past_the_bound_wait_until_one_closes() {
    let options = ServeOptions::default()
        .max_connections(2)
        .header_timeout(Duration::from_secs(60));
    let (addr, _stop, _server) = start(options).await;
    let first = half_open(addr).await;
    let _second = half_open(addr).await;
    // Both slots are held: a third client is not served...
    let third = tokio::spawn(get(addr, "/api/runs", TOKEN, Duration::from_secs(30)));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !third.is_finished(),
        "a third connection is served past the bound of 2"
    );
    // ...until a slot frees.
    drop(first);
    let answer = third.await.unwrap();
    assert_eq!(answer.as_deref(), Some("HTTP/1.1 200 OK"));
}

#[tokio::test]
async fn shutdown_does_not_wait_on_half_open_connections() {
    let options = ServeOptions::default()
        .header_timeout(Duration::from_secs(600))
        .shutdown_grace(Duration::from_secs(2));
    let (addr, stop, server) = start(options).await;
    let mut held = Vec::new();
    for _ in 0..50 {
        held.push(half_open(addr).await);
    }
    // An idle kept-alive connection, after a full exchange.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(
        format!("GET /api/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = [0u8; 64];
    assert!(idle.read(&mut buf).await.unwrap() > 0);
    drop(stop);
    let stopped = tokio::time::timeout(Duration::from_secs(30), server).await;
    assert!(
        matches!(stopped, Ok(Ok(Ok(())))),
        "the server stops with half-open connections open: {stopped:?}"
    );
    for conn in &mut held {
        assert!(closed_within(conn, Duration::from_secs(5)).await);
    }
}

#[tokio::test]
async fn wrong_tokens_are_answered_one_at_a_time_and_slowly() {
    let (addr, _stop, _server) = start(ServeOptions::default()).await;
    let started = Instant::now();
    let guesses: Vec<_> = (0..5)
        .map(|i| {
            let guess = format!("guess-{i}");
            tokio::spawn(
                async move { get(addr, "/api/runs", &guess, Duration::from_secs(30)).await },
            )
        })
        .collect();
    for guess in guesses {
        let answer = guess.await.unwrap();
        assert_eq!(answer.as_deref(), Some("HTTP/1.1 401 Unauthorized"));
    }
    // 100 ms each, one after another: five guesses take half a second.
    assert!(
        started.elapsed() >= Duration::from_millis(490),
        "5 wrong tokens answered in {:?}",
        started.elapsed()
    );
    // The right token is not held up behind them.
    let answer = get(addr, "/api/runs", TOKEN, Duration::from_secs(10)).await;
    assert_eq!(answer.as_deref(), Some("HTTP/1.1 200 OK"));
}

// ---- `checkpoint serve` as a process ----------------------------------------

fn serve_cmd(store: &str, token: Option<&str>) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_checkpoint"));
    cmd.env_remove("CHECKPOINT_STORE")
        .env_remove("CHECKPOINT_TOKEN")
        .args([
            "--json",
            "--store",
            store,
            "serve",
            "--listen",
            "127.0.0.1:0",
        ]);
    if let Some(t) = token {
        cmd.env("CHECKPOINT_TOKEN", t);
    }
    cmd
}

#[test]
fn checkpoint_serve_refuses_a_weak_token() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("w.db").to_string_lossy().into_owned();
    let out = serve_cmd(&store, Some("from-the-environment"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(e["kind"], "invalid_token", "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("too weak"), "{message}");
    assert!(message.contains("128"), "{message}");
    assert!(
        !message.contains("from-the-environment"),
        "the secret is not echoed: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_serve_stops_on_sigterm_with_a_thousand_half_open_connections() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("w.db").to_string_lossy().into_owned();
    Runtime::open(&store).await.unwrap().close().await;
    let mut child = serve_cmd(&store, Some(TOKEN))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    let banner: serde_json::Value = serde_json::from_str(&banner).unwrap();
    let addr: SocketAddr = banner["listening"].as_str().unwrap().parse().unwrap();

    // A request, for the log.
    let answer = get(addr, "/api/runs", TOKEN, Duration::from_secs(30)).await;
    assert_eq!(answer.as_deref(), Some("HTTP/1.1 200 OK"));

    // 1,100 clients that never finish their request head: past the
    // server's bound they wait in the backlog.
    let mut held = Vec::new();
    for _ in 0..1_100 {
        match TcpStream::connect(addr).await {
            Ok(mut conn) => {
                let _ = conn.write_all(b"GET /api/runs HTTP/1.1\r\n").await;
                held.push(conn);
            }
            Err(_) => break, // the backlog is full: enough
        }
    }
    assert!(held.len() >= 300, "only {} connections opened", held.len());

    let stderr = child.stderr.take().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("`checkpoint serve` still runs 20 s after SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "`serve` exited with {status}");
    let mut log = String::new();
    std::io::Read::read_to_string(&mut { stderr }, &mut log).unwrap();
    let line = log
        .lines()
        .find(|l| l.contains("/api/runs"))
        .unwrap_or_else(|| panic!("no request line in the log: {log}"));
    assert!(
        line.contains("GET") && line.contains("status=200"),
        "{line}"
    );
    assert!(!log.contains(TOKEN), "the token is in the log: {log}");
}
