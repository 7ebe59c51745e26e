//! API errors: JSON objects in the command line's shape (`kind`, `message`,
//! `details`) with a status code that says whose fault it is.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use crate::Error;

/// An error answer: `{"kind": .., "message": .., "details": {..}}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) kind: String,
    pub(crate) message: String,
    pub(crate) details: Map<String, Value>,
}

impl ApiError {
    /// An error of the API's own (not the runtime's).
    pub(crate) fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind: kind.to_owned(),
            message: message.into(),
            details: Map::new(),
        }
    }

    /// A 400 with `kind`.
    pub(crate) fn bad_request(kind: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, kind, message)
    }

    /// Adds a detail.
    pub(crate) fn detail(mut self, key: &str, value: impl Into<Value>) -> ApiError {
        self.details.insert(key.to_owned(), value.into());
        self
    }
}

/// The status code of a runtime error: 404 for what does not exist, 400 for
/// a malformed id, 422 for a payload the waiting site cannot decode or a
/// signal name no wait site takes, 409 for
/// a request the run's state refuses (an existing id, a run that is not
/// retryable, a signal to a run that has ended, a damaged or incompatible
/// checkpoint), 503 for a store that
/// fails, 500 for the rest.
pub(crate) fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::UnknownRun { .. }
        | Error::UnknownCheckpoint { .. }
        | Error::UnknownSchedule { .. } => StatusCode::NOT_FOUND,
        Error::InvalidId { .. } => StatusCode::BAD_REQUEST,
        Error::SignalPayload { .. } | Error::UnknownSignal { .. } => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        Error::AlreadyExists { .. }
        | Error::NotRetryable { .. }
        | Error::CancelRefused { .. }
        | Error::RunEnded { .. }
        | Error::WorkflowMismatch { .. }
        | Error::Incompatible { .. }
        | Error::Decode { .. }
        | Error::Diverged { .. } => StatusCode::CONFLICT,
        Error::Store { .. } => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        let mut v = crate::json::error_json(&e);
        ApiError {
            status: status_of(&e),
            kind: v["kind"].as_str().unwrap_or("runtime").to_owned(),
            message: e.to_string(),
            details: match v["details"].take() {
                Value::Object(details) => details,
                _ => Map::new(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "kind": self.kind, "message": self.message, "details": self.details });
        let mut response = (self.status, axum::Json(body)).into_response();
        response
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}

/// The most bytes an API request's body may hold (2 MiB: a signal's JSON
/// payload, a cancel or fork request); past it the answer is 413
/// `invalid_body` and nothing is read further or changed. (Here, beside
/// the error that names it, so that this module needs nothing of its
/// parent's.)
///
/// ```
/// assert_eq!(checkpoint_runtime::http::BODY_LIMIT, 2 * 1024 * 1024);
/// ```
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// The 413 of a body past [`BODY_LIMIT`], as every error: `invalid_body`,
/// naming the limit.
pub(crate) fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_body",
        format!("the request body is longer than {BODY_LIMIT} bytes"),
    )
    .detail("limit", BODY_LIMIT)
}

/// The limit layer answers a `Content-Length` past the limit itself, in
/// plain text; this gives that answer the API's JSON shape.
pub(crate) async fn too_large_as_json(response: Response) -> Response {
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE && !json {
        return too_large().into_response();
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_errors_get_the_status_of_whose_fault_it_is() {
        let run = || "r".to_owned();
        assert_eq!(
            status_of(&Error::UnknownRun { run: run() }),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status_of(&Error::UnknownCheckpoint { run: run(), seq: 3 }),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status_of(&Error::AlreadyExists { run: run() }),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status_of(&Error::NotRetryable {
                run: run(),
                status: "completed".into()
            }),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status_of(&Error::RunEnded {
                run: run(),
                status: "completed".into(),
                signal: "approval".into()
            }),
            StatusCode::CONFLICT
        );
        assert_eq!(
            status_of(&Error::SignalPayload {
                run: run(),
                signal: "s".into(),
                detail: "d".into()
            }),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            status_of(&Error::store("down")),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let e = ApiError::from(Error::UnknownRun { run: run() });
        assert_eq!(e.kind, "unknown_run");
        assert_eq!(e.details["run"], "r");
    }
}
