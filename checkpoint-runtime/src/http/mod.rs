//! A JSON API and a web page over a store, as one [axum] router (feature
//! `http`): what `checkpoint serve` serves, to mount in an application of
//! your own too.
//!
//! ```no_run
//! use checkpoint_runtime::http::{router, Token};
//! use checkpoint_runtime::Runtime;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A client: it inspects and steers runs; workers elsewhere execute them.
//! let rt = Runtime::builder().client_only().open("workflows.db").await?;
//! let (token, generated) = Token::from_env_or_generate()?;
//! if generated {
//!     println!("token: {}", token.as_str());
//! }
//! let app = router(rt, token);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7070").await?;
//! let stop = async {
//!     let _ = tokio::signal::ctrl_c().await;
//! };
//! checkpoint_runtime::http::serve(listener, app, Default::default(), stop).await?;
//! # Ok(()) }
//! ```
//!
//! # Authentication
//!
//! Every API request needs `Authorization: Bearer TOKEN` ([`Token`],
//! compared in constant time); without it the answer is 401 and nothing is
//! read or changed. The page itself (`/`, `/app.js`, `/style.css`) holds no
//! data and is served to anyone, since a browser cannot send a header when
//! it opens a page: it asks for the token in a login form, keeps it in
//! `sessionStorage` and sends it with each API request. It never goes in an
//! address (a `#token=` fragment is dropped unused: it would stay in the
//! browser's history). The token travels in clear over plain HTTP: serve on
//! loopback (the default of `checkpoint serve`), or behind TLS. A wrong
//! token is answered after a delay, one at a time (at most 10 guesses a
//! second); [`Token::from_env_or_generate`] refuses a token weaker than
//! [`MIN_TOKEN_BITS`].
//!
//! # Serving
//!
//! [`serve`] runs the router with the bounds an exposed server needs
//! ([`ServeOptions`]: a request head within 10 s, at most 256 connections,
//! a shutdown that does not wait on idle or half-open ones); axum's own
//! `serve` works too but has none of them. Each request is logged through
//! `tracing` (target `checkpoint::http`): a `request` span with its method
//! and path, and an `answered` event in it with the status and the time
//! taken. An API request's body may hold at most [`BODY_LIMIT`] bytes.
//!
//! # API
//!
//! Run ids are one path segment: percent-encode a `/` in an id as `%2F`.
//! Answers are JSON in the shapes of `checkpoint --json` (see
//! [`crate::json`]); errors are `{"kind", "message", "details"}` as there,
//! with a status code that says whose fault it is: 400 for a malformed
//! request (a body that is not JSON, a bad sequence number, an unknown
//! query parameter), 401 without the token, 413 for a body past
//! [`BODY_LIMIT`], 404 for an unknown run,
//! checkpoint or route, 409 when the run's state refuses (a fork onto an
//! existing id, a retry of a run that is neither failed nor parked), 422
//! for a signal payload the waiting site cannot decode, 503 when the store
//! fails. A refused request changes nothing.
//!
//! - `GET /api/runs?status=&workflow=&prefix=&parent=&tag=&limit=&offset=&order=`:
//!   runs, oldest first (`order=newest`: newest first), one page of `limit`
//!   (100 unless given, at most 1,000) after `offset`. `status` is one of
//!   `queued`, `running`, `waiting`, `joining`, `sleeping`, `completed`,
//!   `failed`, `cancelled`, `incompatible`, `held`; an empty parameter is no
//!   filter. `parent` lists the children of that run; `tag=KEY:VALUE`
//!   (repeatable: a run must carry each) the runs tagged so.
//! - `GET /api/counts?workflow=&prefix=&parent=&tag=`: how many runs are in each
//!   status (`{"counts": {"queued": 0, ..}, "total": N}`), counted by the
//!   store.
//! - `GET /api/runs/{id}`: the run (as `checkpoint show --json`), its input
//!   and output, `waiting_for` (`signal`, `deadline`, and `payload_schema`:
//!   the schema the wait site stored for its payload type, with `type`,
//!   `definitions` in Rust syntax and an `example` value, or `null`),
//!   `actions` (which of signal, cancel, retry, fork apply), `parent` and
//!   `children` (the runs it spawned, as `runs` lists them),
//!   `pending_signals` (stored, not consumed: `name`, `received_at`, `size`),
//!   and `progress` (the latest stored `ctx.set_progress` value, or `null`).
//! - `GET /api/runs/{id}/checkpoints`: the kept versions, oldest first.
//! - `GET /api/runs/{id}/checkpoints/{seq}`: one version's fields as JSON
//!   and `diff`, what changed from the version before, field by field
//!   ([`crate::json::field_diff`]).
//! - `GET /api/runs/{id}/history?limit=&offset=`: the event log, oldest
//!   first, one page of `limit` (1,000 unless given, at most 10,000).
//! - `GET /api/runs/{id}/stream?from=N`: the run's stream
//!   ([`Runtime::stream`]) as server-sent events from index `N` (else one
//!   past the `Last-Event-ID` header, else 0): an `item` event per item
//!   (`id` its index, `data` its JSON), live, then an `end` event when the
//!   run ends (an `error` event if the store fails).
//! - `POST /api/runs/{id}/signals/{name}` with the payload as the JSON body:
//!   422 `unknown_signal` for a name no wait site of the run's workflow
//!   takes, unless `?force=true` (see [`Runtime::force_signal`]).
//! - `POST /api/runs/{id}/cancel`: at once without a body; with
//!   `{"reason": "..", "grace_ms": N, "children": "cascade" | "abandon"}`
//!   (each optional) a request the run sees ([`Runtime::request_cancel_with`]).
//! - `POST /api/runs/{id}/retry`.
//! - `POST /api/runs/{id}/fork` with `{"seq": N, "new_id": ".."}`: 201.
//! - `GET /api/schedules`: every stored schedule
//!   ([`json::schedule_json`](crate::json::schedule_json));
//!   `POST /api/schedules/{name}/pause` and `.../unpause`: 404
//!   `unknown_schedule` for a name not stored.
//!
//! ```
//! use checkpoint_runtime::http::{router, Token};
//! use checkpoint_runtime::prelude::*;
//!
//! #[workflow]
//! async fn approval(ctx: &Ctx) -> bool {
//!     let ok: bool = ctx.wait_for("ok").await;
//!     ok
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = Runtime::in_memory();
//! rt.start(approval, "a-1", ()).await?;
//! rt.run_until_idle().await?;
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let addr = listener.local_addr()?;
//! let app = router(rt.clone(), Token::new("s3cret")?);
//! tokio::spawn(async move { checkpoint_runtime::http::axum::serve(listener, app).await });
//!
//! // A bare HTTP/1.1 request, to show what goes over the wire.
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! let mut conn = tokio::net::TcpStream::connect(addr).await?;
//! conn.write_all(
//!     b"POST /api/runs/a-1/signals/ok HTTP/1.1\r\nHost: x\r\n\
//!       Authorization: Bearer s3cret\r\nContent-Length: 4\r\nConnection: close\r\n\r\ntrue",
//! )
//! .await?;
//! let mut answer = String::new();
//! conn.read_to_string(&mut answer).await?;
//! assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
//! assert!(rt.handle(approval, "a-1").result().await?);
//! # Ok(()) }
//! ```

mod api;
mod error;
mod log;
mod page;
mod payload;
mod schedules;
mod server;
mod stream;
mod token;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue};
use axum::middleware;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use tower_http::limit::RequestBodyLimitLayer;

use crate::Runtime;

pub use error::BODY_LIMIT;
pub use server::{serve, ServeOptions};
pub use token::{Token, TokenError, MIN_TOKEN_BITS, TOKEN_ENV};

/// The axum version the router is built with, to serve it or mount it
/// without naming a matching version yourself.
pub use axum;

/// The router: the JSON API under `/api` (every route behind the bearer
/// `token`) and the page at `/`. `rt` answers every request; make it
/// [`client_only`](crate::RuntimeBuilder::client_only) to keep the server
/// from executing runs itself. Nest it under a prefix of your own app
/// (`Router::new().nest("/workflows", router(rt, token))`): the page finds
/// its API relative to where it is served.
///
/// ```
/// use checkpoint_runtime::http::{axum::Router, router, Token};
/// use checkpoint_runtime::Runtime;
///
/// let rt = Runtime::builder().client_only().in_memory();
/// let app: Router = Router::new().nest("/workflows", router(rt, Token::generate().unwrap()));
/// # let _ = app;
/// ```
pub fn router(rt: Runtime, token: Token) -> Router {
    let api = Router::new()
        .route("/runs", get(api::list_runs))
        .route("/counts", get(api::counts))
        .route("/runs/{id}", get(api::get_run))
        .route("/runs/{id}/checkpoints", get(api::list_checkpoints))
        .route("/runs/{id}/checkpoints/{seq}", get(api::get_checkpoint))
        .route("/runs/{id}/history", get(api::history))
        .route("/runs/{id}/signals/{name}", post(api::signal))
        .route("/runs/{id}/cancel", post(api::cancel))
        .route("/runs/{id}/retry", post(api::retry))
        .route("/runs/{id}/fork", post(api::fork))
        .route("/schedules", get(schedules::list))
        .route("/schedules/{name}/pause", post(schedules::pause))
        .route("/schedules/{name}/unpause", post(schedules::unpause))
        .route("/runs/{id}/stream", get(stream::stream))
        .fallback(api::not_found)
        .method_not_allowed_fallback(api::method_not_allowed)
        .with_state(rt)
        // The body limit: `tower-http`'s, which answers 413 at once for a
        // `Content-Length` past it (axum's own default reads that much
        // first) and stops a longer body without one; axum's is turned off
        // so that one limit holds.
        .layer(DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(BODY_LIMIT))
        .layer(middleware::map_response(error::too_large_as_json))
        .layer(middleware::map_response(no_store))
        .layer(middleware::from_fn_with_state(
            token::Gate::new(token),
            token::require,
        ));
    Router::new()
        .route("/", get(page::index))
        .route("/app.js", get(page::script))
        .route("/style.css", get(page::style))
        .nest("/api", api)
        .layer(middleware::map_response(hardened))
        .layer(log::layer())
}

/// API answers are never cached: they are live state, behind a token.
async fn no_store(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Headers on every answer: no content sniffing, no referrer (a URL may
/// name a run), no framing.
async fn hardened(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}
