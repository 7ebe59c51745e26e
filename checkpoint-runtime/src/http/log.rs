//! The request log, as `tower-http`'s [`TraceLayer`]: a span per request
//! (target `checkpoint::http`, level INFO, named `request`, with its method
//! and path) and, once the answer's head is ready, one event in it with the
//! status and the time taken in milliseconds (INFO; WARN for a 5xx answer).
//! `checkpoint serve` prints them on stderr, one line per request:
//!
//! ```text
//! 2026-12-06T03:17:29.058460Z  INFO request{method=GET path="/api/runs"}: checkpoint::http: answered status=200 millis=1.64014
//! ```
//!
//! What the handlers log while answering is in the span too. The token
//! never appears: it travels in a header, no header is logged, and the
//! query string (which could hold anything a client put there) is left out.
//!
//! What stays hand-written is only what `tower-http` leaves to the user: the
//! span's fields and the event's level and fields (its defaults log at
//! DEBUG, the whole URI, and 5xx answers a second time as failures).

use std::time::Duration;

use axum::http::{Request, Response};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{MakeSpan, OnResponse, TraceLayer};
use tracing::Span;

/// The layer in front of every route, the page's included.
pub(crate) type RequestLog =
    TraceLayer<SharedClassifier<ServerErrorsAsFailures>, RequestSpan, (), Answered, (), (), ()>;

/// The request log's layer.
pub(crate) fn layer() -> RequestLog {
    TraceLayer::new_for_http()
        .make_span_with(RequestSpan)
        .on_request(())
        .on_response(Answered)
        .on_body_chunk(())
        .on_eos(())
        .on_failure(())
}

/// The span of a request: its method and path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, request: &Request<B>) -> Span {
        tracing::info_span!(
            target: "checkpoint::http",
            "request",
            method = %request.method(),
            path = request.uri().path(),
        )
    }
}

/// The event of an answer: its status and how long it took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answered;

impl<B> OnResponse<B> for Answered {
    fn on_response(self, response: &Response<B>, latency: Duration, span: &Span) {
        let status = response.status().as_u16();
        let millis = latency.as_secs_f64() * 1000.0;
        if response.status().is_server_error() {
            tracing::warn!(target: "checkpoint::http", parent: span, status, millis, "answered");
        } else {
            tracing::info!(target: "checkpoint::http", parent: span, status, millis, "answered");
        }
    }
}
