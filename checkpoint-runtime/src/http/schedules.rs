//! The schedule endpoints: `GET /api/schedules`, and
//! `POST /api/schedules/{name}/pause` / `unpause` (as `checkpoint
//! schedules`).

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use crate::json::schedule_json;
use crate::Runtime;

fn name(p: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    p.map(|Path(n)| n).map_err(|e| {
        ApiError::bad_request(
            "invalid_path",
            format!("the request path does not parse: {e}"),
        )
    })
}

/// `GET /api/schedules`: every stored schedule, by name
/// ([`schedule_json`]).
pub(crate) async fn list(State(rt): State<Runtime>) -> Result<Response, ApiError> {
    let all: Vec<Value> = rt.schedules().await?.iter().map(schedule_json).collect();
    Ok(Json(Value::Array(all)).into_response())
}

/// `POST /api/schedules/{name}/pause`: no tick fires until it is unpaused;
/// 404 (`unknown_schedule`) when none is stored.
pub(crate) async fn pause(
    State(rt): State<Runtime>,
    n: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let n = name(n)?;
    rt.pause_schedule(&n).await?;
    Ok(Json(json!({ "schedule": n, "paused": true })).into_response())
}

/// `POST /api/schedules/{name}/unpause`: its ticks fire again.
pub(crate) async fn unpause(
    State(rt): State<Runtime>,
    n: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let n = name(n)?;
    rt.unpause_schedule(&n).await?;
    Ok(Json(json!({ "schedule": n, "paused": false })).into_response())
}
