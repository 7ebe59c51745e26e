//! `GET /api/runs/{id}/stream?from=N`: a run's stream as server-sent
//! events, from index `N` (or one past the `Last-Event-ID` a reconnecting
//! browser sends), live, until the run ends.
//!
//! Each item is an `item` event whose `id` is its index and whose data is
//! the item's JSON; the end of the run is an `end` event; an error (the
//! store failed) an `error` event with the error's JSON, after which the
//! response ends.

use std::convert::Infallible;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;

use super::error::ApiError;
use crate::json::error_json;
use crate::{Error, Runtime};

/// The index a stream request starts from: `from`, else one past its
/// `Last-Event-ID`, else 0.
fn start(pairs: &[(String, String)], headers: &HeaderMap) -> Result<u64, ApiError> {
    let mut from = None;
    for (key, value) in pairs {
        match key.as_str() {
            "from" => {
                from = Some(value.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(
                        "invalid_query",
                        format!("`from={value}` is not an index (0 or more)"),
                    )
                    .detail("parameter", "from")
                })?)
            }
            other => {
                return Err(ApiError::bad_request(
                    "invalid_query",
                    format!("unknown parameter `{other}` (known: from)"),
                )
                .detail("parameter", other))
            }
        }
    }
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    Ok(from.or(last.map(|i| i.saturating_add(1))).unwrap_or(0))
}

pub(crate) async fn stream(
    State(rt): State<Runtime>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(|e| {
        ApiError::bad_request(
            "invalid_path",
            format!("the request path does not parse: {e}"),
        )
    })?;
    let Query(pairs) = query.map_err(|e| {
        ApiError::bad_request("invalid_query", format!("the query does not parse: {e}"))
    })?;
    let from = start(&pairs, &headers)?;
    // An unknown run is a 404, not an event stream.
    rt.store()
        .load_run(&id)
        .await?
        .ok_or_else(|| Error::unknown_run(&id))?;
    let items = rt.stream(&id, from);
    let events = items
        .map(Some)
        .chain(futures::stream::once(async { None }))
        .scan(false, |failed, item| {
            let out = if *failed {
                None
            } else {
                Some(match item {
                    Some(Ok((index, value))) => Event::default()
                        .event("item")
                        .id(index.to_string())
                        .data(value.to_string()),
                    Some(Err(e)) => {
                        *failed = true;
                        Event::default()
                            .event("error")
                            .data(error_json(&e).to_string())
                    }
                    None => Event::default().event("end").data(json!({}).to_string()),
                })
            };
            futures::future::ready(out)
        })
        .map(Ok::<_, Infallible>);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
