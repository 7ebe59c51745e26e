//! The server loop [`serve`]: the router on a TCP listener, with the bounds
//! a server reachable by untrusted clients needs and axum's own `serve` has
//! no setting for.
//!
//! Measured on 2026-12-04 against axum's `serve`: 1,100 connections that
//! sent half a request head (no token needed) used up a 1,024-descriptor
//! limit, so the server stopped answering, and a single such connection kept
//! it from stopping on SIGTERM. Here a request head must arrive within
//! [`ServeOptions::header_timeout`], at most
//! [`ServeOptions::max_connections`] are served at once (more wait in the
//! kernel's backlog, costing no descriptor of this process), and shutdown
//! closes idle and half-open connections at once and gives requests in
//! flight [`ServeOptions::shutdown_grace`] before it drops them.
//!
//! The request timeout is `tower-http`'s [`TimeoutLayer`] (as the body
//! limit and the request log are, in [`router`](super::router)). Three
//! bounds stay here because no tower layer can keep them: a layer sees a
//! request only once its head has arrived, so the head's timeout is
//! hyper's `header_read_timeout`; a layer bounds requests in flight, not
//! the connections (descriptors) held open before a request exists, so
//! the bound on connections is a semaphore taken before `accept`; and
//! closing idle connections at shutdown is hyper's `graceful_shutdown` on
//! each one.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tower_http::timeout::TimeoutLayer;

/// The bounds [`serve`] keeps; [`ServeOptions::default`] is what `checkpoint
/// serve` uses.
///
/// ```
/// use std::time::Duration;
/// use checkpoint_runtime::http::ServeOptions;
///
/// let options = ServeOptions::default()
///     .header_timeout(Duration::from_secs(5))
///     .max_connections(64);
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct ServeOptions {
    header_timeout: Duration,
    request_timeout: Duration,
    max_connections: usize,
    shutdown_grace: Duration,
}

impl Default for ServeOptions {
    /// A request head within 10 s (also how long an idle keep-alive
    /// connection is kept), a whole request within 30 s, 256 connections at
    /// once, 5 s for requests in flight at shutdown.
    fn default() -> Self {
        ServeOptions {
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 256,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

impl ServeOptions {
    /// How long a connection may take to send a request head, counted from
    /// when the server starts reading it: a new connection, or a kept-alive
    /// one after its previous answer. Past it the connection is closed.
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// How long a request may take once its head arrived (its body and its
    /// answer); past it the answer is 408.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How many connections are served at once (at least 1); more wait
    /// until one closes.
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How long shutdown waits for requests in flight before dropping them.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }
}

/// Serves `app` (for example [`router`](super::router)) on `listener` until
/// `shutdown` resolves, within `options`' bounds (HTTP/1.1). Returns once
/// every connection is closed: at once for idle and half-open ones, within
/// [`ServeOptions::shutdown_grace`] for those with a request in flight.
/// Failing to accept a connection (say, out of descriptors) is logged and
/// retried, not fatal.
///
/// ```no_run
/// use checkpoint_runtime::http::{router, serve, ServeOptions, Token};
/// use checkpoint_runtime::Runtime;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let rt = Runtime::builder().client_only().open("workflows.db").await?;
/// let app = router(rt, Token::generate()?);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:7070").await?;
/// let ctrl_c = async {
///     let _ = tokio::signal::ctrl_c().await;
/// };
/// serve(listener, app, ServeOptions::default(), ctrl_c).await?;
/// # Ok(()) }
/// ```
pub async fn serve<F>(
    listener: TcpListener,
    app: Router,
    options: ServeOptions,
    shutdown: F,
) -> io::Result<()>
where
    F: Future<Output = ()> + Send,
{
    let app = app.layer(TimeoutLayer::with_status_code(
        StatusCode::REQUEST_TIMEOUT,
        options.request_timeout,
    ));
    let slots = Arc::new(Semaphore::new(options.max_connections));
    let (closing, closing_seen) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        // A slot before a connection: past the bound, clients wait in the
        // kernel's backlog instead of holding a descriptor here.
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break, // never closed
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(e) => {
                    // EMFILE and the like: they pass as connections close.
                    tracing::warn!(target: "checkpoint::http", error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        while connections.try_join_next().is_some() {}
        connections.spawn(connection(
            stream,
            app.clone(),
            options.header_timeout,
            closing_seen.clone(),
            slot,
        ));
    }
    drop(listener);
    let _ = closing.send(true);
    let drained = tokio::time::timeout(options.shutdown_grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.shutdown().await;
    }
    Ok(())
}

/// One connection, until the client closes it, a bound closes it, or
/// shutdown does. `_slot` is its place among `max_connections`, given back
/// when it ends.
async fn connection(
    stream: TcpStream,
    app: Router,
    header_timeout: Duration,
    mut closing: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let mut conn = pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = closing.wait_for(|closing| *closing) => {}
    }
    // Idle connections close now; one with a request in flight after its
    // answer (or when `serve`'s grace runs out and drops this task).
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}
