//! The request log: one `tracing` event per request (target
//! `checkpoint::http`, level INFO; WARN for a 5xx answer), with its method,
//! path, status and time taken. `checkpoint serve` prints them on stderr.
//! The token never appears: it travels in a header, and no header is logged.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

/// The layer in front of every route, the page's included.
pub(crate) async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let millis = started.elapsed().as_secs_f64() * 1000.0;
    if response.status().is_server_error() {
        tracing::warn!(target: "checkpoint::http", %method, path, status, millis, "request");
    } else {
        tracing::info!(target: "checkpoint::http", %method, path, status, millis, "request");
    }
    response
}
