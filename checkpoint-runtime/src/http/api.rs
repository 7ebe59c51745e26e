//! The JSON API's handlers. Each reads or changes the store through the
//! public runtime API; a request that fails validation is refused before
//! anything is written.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use crate::json::{
    checkpoint_json, checkpoint_listing_json, entry_json, error_json, field_diff, field_json,
    run_json, status_json,
};
use crate::store::Suspend;
use crate::{CancelChildren, Error, RunFilter, Runtime, Status, StatusKind};

type ApiResult = Result<Response, ApiError>;

/// A path's parameters, or a 400 naming what did not parse.
fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(t)| t).map_err(|e| {
        ApiError::bad_request(
            "invalid_path",
            format!("the request path does not parse: {e}"),
        )
    })
}

/// The body, or a 400 / 413 saying why it could not be read.
fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|e| match e.status() {
        // A body without a `Content-Length` that runs past the limit (one
        // with it is refused before it is read): the same answer.
        StatusCode::PAYLOAD_TOO_LARGE => super::error::too_large(),
        _ => ApiError::new(e.status(), "invalid_body", e.body_text()),
    })
}

fn ok(v: Value) -> ApiResult {
    Ok(Json(v).into_response())
}

/// A sequence number from the path: a positive integer.
fn parse_seq(id: &str, seq: &str) -> Result<u64, ApiError> {
    match seq.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(ApiError::bad_request(
            "invalid_seq",
            format!("`{seq}` is not a checkpoint sequence number (1, 2, ...) of run `{id}`"),
        )
        .detail("run", id)
        .detail("seq", seq)),
    }
}

fn status_kind(s: &str) -> Option<StatusKind> {
    StatusKind::ALL.into_iter().find(|k| k.label() == s)
}

/// How many runs `GET /api/runs` answers without a `limit`, and at most.
pub(crate) const RUNS_PAGE: usize = 100;
pub(crate) const RUNS_MAX: usize = 1_000;

/// How many history events `GET /api/runs/{id}/history` answers without a
/// `limit`, and at most.
pub(crate) const HISTORY_PAGE: usize = 1_000;
pub(crate) const HISTORY_MAX: usize = 10_000;

/// A count parameter (`limit`, `offset`): a number up to `max`.
fn count(key: &str, value: &str, max: usize) -> Result<usize, ApiError> {
    match value.parse::<usize>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(ApiError::bad_request(
            "invalid_query",
            format!("`{key}={value}` is not a count from 0 to {max}"),
        )
        .detail("parameter", key)),
    }
}

/// `GET /api/runs?status=&workflow=&prefix=&parent=&tag=&limit=&offset=&order=`:
/// runs as `checkpoint runs --json` lists them, oldest first (`order=newest`:
/// newest first), one page: `limit` runs (100 unless given, at most 1,000)
/// after skipping `offset`. An empty parameter is no filter. `parent` lists
/// the children of that run (`ctx.spawn`); `tag=KEY:VALUE` (repeatable: all
/// of them) the runs tagged so (`StartOptions::tag`).
pub(crate) async fn list_runs(
    State(rt): State<Runtime>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    const KNOWN: &[&str] = &[
        "status", "workflow", "prefix", "parent", "limit", "offset", "order", "tag",
    ];
    let filter = run_filter(query, KNOWN, RunFilter::new().limit(RUNS_PAGE))?;
    let runs = rt.runs(filter).await?;
    ok(runs.iter().map(run_json).collect())
}

/// `GET /api/counts?workflow=&prefix=&parent=&tag=`: how many runs there are in
/// each status (`{"counts": {"queued": 0, "running": 2, ..}, "total": 9}`),
/// among those the parameters select, as `GET /api/runs` reads them;
/// counted by the store, without reading the runs.
pub(crate) async fn counts(
    State(rt): State<Runtime>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let known = &["workflow", "prefix", "parent", "tag"];
    let filter = run_filter(query, known, RunFilter::new())?;
    let counts = rt.count_runs(filter).await?;
    let total: u64 = counts.values().sum();
    let by_label: serde_json::Map<String, Value> = counts
        .iter()
        .map(|(kind, n)| (kind.label().to_owned(), json!(n)))
        .collect();
    ok(json!({ "counts": by_label, "total": total }))
}

/// The run filter of a listing's query: each parameter at most once, only
/// those in `known`; an empty one is no filter.
fn run_filter(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    known: &[&str],
    mut filter: RunFilter,
) -> Result<RunFilter, ApiError> {
    let Query(pairs) = query.map_err(|e| {
        ApiError::bad_request("invalid_query", format!("the query does not parse: {e}"))
    })?;
    let unknown = |key: &str| {
        ApiError::bad_request(
            "invalid_query",
            format!("unknown parameter `{key}` (known: {})", known.join(", ")),
        )
        .detail("parameter", key)
    };
    let mut seen: Vec<&str> = Vec::new();
    for (key, value) in &pairs {
        if !known.contains(&key.as_str()) {
            return Err(unknown(key));
        }
        // `tag` may be given several times: a run must carry each.
        if key != "tag" && seen.contains(&key.as_str()) {
            return Err(
                ApiError::bad_request("invalid_query", format!("`{key}` is given twice"))
                    .detail("parameter", key.as_str()),
            );
        }
        seen.push(key);
        if value.is_empty() {
            continue;
        }
        match key.as_str() {
            "status" => {
                let kind = status_kind(value).ok_or_else(|| {
                    let known: Vec<&str> = StatusKind::ALL.iter().map(|k| k.label()).collect();
                    ApiError::bad_request(
                        "invalid_query",
                        format!("unknown status `{value}` (one of {})", known.join(", ")),
                    )
                    .detail("parameter", "status")
                })?;
                filter = filter.status(kind);
            }
            "workflow" => filter = filter.workflow(value),
            "prefix" => filter = filter.id_prefix(value),
            "parent" => filter = filter.parent(value),
            "tag" => {
                let (k, v) = value.split_once(':').ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_query",
                        format!("`tag={value}`: give `tag=KEY:VALUE`"),
                    )
                    .detail("parameter", "tag")
                })?;
                filter = filter.tag(k, v);
            }
            "limit" => filter = filter.limit(count("limit", value, RUNS_MAX)?),
            "offset" => filter = filter.offset(count("offset", value, usize::MAX)?),
            "order" => match value.as_str() {
                "newest" => filter = filter.newest_first(),
                "oldest" => {}
                _ => {
                    return Err(ApiError::bad_request(
                        "invalid_query",
                        format!("`order={value}`: give `newest` or `oldest`"),
                    )
                    .detail("parameter", "order"))
                }
            },
            other => return Err(unknown(other)),
        }
    }
    Ok(filter)
}

/// `GET /api/runs/{id}`: the run as `checkpoint show --json` shows it (its
/// status and its latest checkpoint's fields as JSON), with its input, its
/// output once completed, what it waits for (the signal, its deadline, and
/// the payload type's schema with a hint when the wait stored one), which
/// actions apply, and its place in a tree of runs: `parent` (`null` for a
/// run started by `Runtime::start`) and `children` (the runs it spawned,
/// each as `runs` lists it, in spawn order), and `pending_signals`
/// (stored, not consumed yet: `name`, `received_at`, payload `size`).
pub(crate) async fn get_run(
    State(rt): State<Runtime>,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let id = path(id)?;
    let store = rt.store();
    let record = store
        .load_run(&id)
        .await?
        .ok_or_else(|| Error::unknown_run(&id))?;
    let info = crate::inspect::run_info(record.clone());
    let mut v = run_json(&info);
    (v["input"], v["output"]) = crate::json::input_output_json(&record);
    // The latest stored progress (`ctx.set_progress`), as JSON; null if none.
    v["progress"] = store
        .progress(&id)
        .await?
        .and_then(|p| serde_json::from_slice(&p).ok())
        .unwrap_or(Value::Null);

    // The latest checkpoint: its summary and fields; a damaged one is
    // reported in place so that the rest of the run can still be seen.
    let latest = if record.latest_seq == 0 {
        Ok(None)
    } else {
        store.latest_checkpoint(&id).await
    };
    let (checkpoint, suspend) = match latest {
        Ok(None) => (Value::Null, None),
        Ok(Some(cp)) => {
            let mut c = checkpoint_json(&cp.info());
            match rt.checkpoint_fields_json(&id, cp.seq).await {
                Ok(fields) => c["fields"] = fields.iter().map(field_json).collect(),
                Err(e @ (Error::Decode { .. } | Error::Incompatible { .. })) => {
                    c["fields"] = json!([]);
                    c["error"] = error_json(&e);
                }
                Err(e) => return Err(e.into()),
            }
            (c, cp.suspend.clone())
        }
        Err(e @ (Error::Decode { .. } | Error::Incompatible { .. })) => (
            json!({ "seq": record.latest_seq, "fields": [], "error": error_json(&e) }),
            None,
        ),
        Err(e) => return Err(e.into()),
    };
    v["checkpoint"] = checkpoint;

    v["waiting_for"] = match &info.status {
        Status::Waiting { signal, deadline } => {
            let key = match &suspend {
                Some(Suspend::Waiting {
                    signal: s,
                    payload_schema: Some(key),
                    ..
                }) if s == signal => Some(key.clone()),
                _ => None,
            };
            let schema = match key {
                None => Value::Null,
                Some(key) => {
                    let docs = store.schemas(std::slice::from_ref(&key)).await?;
                    match docs.get(&key) {
                        None => Value::Null,
                        Some(doc) => {
                            let mut s = super::payload::hint(doc).unwrap_or_else(|| json!({}));
                            s["key"] = json!(key);
                            s["schema"] = serde_json::from_str(doc).unwrap_or(Value::Null);
                            s
                        }
                    }
                }
            };
            json!({
                "signal": signal,
                "deadline": deadline.map(crate::json::rfc3339),
                "payload_schema": schema,
            })
        }
        _ => Value::Null,
    };
    v["actions"] = json!({
        "signal": matches!(info.status, Status::Waiting { .. }),
        "cancel": !info.status.is_finished(),
        "retry": matches!(info.status, Status::Failed { .. } | Status::Incompatible { .. }),
        "fork": record.latest_seq > 0,
    });
    v["parent"] = json!(info.parent);
    let children = rt.runs(RunFilter::new().parent(&info.id)).await?;
    v["children"] = children.iter().map(run_json).collect();
    // Signals stored and not consumed yet, oldest first: sent before the
    // wait, or while no worker has taken the run up. Their payloads are
    // left out: a page lists them, and a payload may be large.
    let pending = store.pending_signals(&id).await?;
    v["pending_signals"] = pending
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "received_at": crate::json::rfc3339(s.received_at),
                "size": s.payload.len(),
            })
        })
        .collect();
    ok(v)
}

/// `GET /api/runs/{id}/checkpoints`: the kept versions, oldest first, as
/// `checkpoint checkpoints --json` lists them, with `damaged` (why, or
/// `null`).
pub(crate) async fn list_checkpoints(
    State(rt): State<Runtime>,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let id = path(id)?;
    let cps = rt.checkpoints(&id).await?;
    ok(cps
        .iter()
        .map(|c| {
            let mut v = checkpoint_listing_json(c);
            v["damaged"] = json!(c.damaged);
            v
        })
        .collect())
}

/// `GET /api/runs/{id}/checkpoints/{seq}`: one version's fields as JSON (as
/// `checkpoint checkpoints ID SEQ --json`), and `diff`: what changed from
/// the kept version before it (`previous_seq`; `null` for the first kept
/// one), field by field (see [`crate::json::field_diff`]).
pub(crate) async fn get_checkpoint(
    State(rt): State<Runtime>,
    params: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult {
    let (id, seq) = path(params)?;
    let seq = parse_seq(&id, &seq)?;
    // First: it names an unknown run or checkpoint precisely.
    let fields = rt.checkpoint_fields_json(&id, seq).await?;
    let cps = rt.checkpoints(&id).await?;
    let info = cps.iter().find(|c| c.seq == seq);
    let previous = cps.iter().rev().find(|c| c.seq < seq);
    let mut v = match info {
        Some(info) => checkpoint_json(info),
        None => json!({ "seq": seq }),
    };
    v["run"] = json!(id);
    v["fields"] = fields.iter().map(field_json).collect();
    v["previous_seq"] = json!(previous.map(|p| p.seq));
    let previous_fields = match previous {
        None => None,
        Some(p) => match rt.checkpoint_fields_json(&id, p.seq).await {
            Ok(f) => Some(f),
            Err(e @ (Error::Decode { .. } | Error::Incompatible { .. })) => {
                v["previous_error"] = error_json(&e);
                Some(Vec::new())
            }
            Err(e) => return Err(e.into()),
        },
    };
    v["diff"] = field_diff(previous_fields.as_deref(), &fields);
    ok(v)
}

/// `GET /api/runs/{id}/history?limit=&offset=`: the events, oldest first,
/// as `checkpoint history --json` prints them, one page: `limit` events
/// (1,000 unless given, at most 10,000) after skipping `offset`.
pub(crate) async fn history(
    State(rt): State<Runtime>,
    id: Result<Path<String>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult {
    let id = path(id)?;
    let Query(pairs) = query.map_err(|e| {
        ApiError::bad_request("invalid_query", format!("the query does not parse: {e}"))
    })?;
    let (mut limit, mut offset) = (HISTORY_PAGE, 0);
    for (key, value) in &pairs {
        match key.as_str() {
            "limit" => limit = count("limit", value, HISTORY_MAX)?,
            "offset" => offset = count("offset", value, usize::MAX)?,
            other => {
                return Err(ApiError::bad_request(
                    "invalid_query",
                    format!("unknown parameter `{other}` (known: limit, offset)"),
                )
                .detail("parameter", other))
            }
        }
    }
    // The store reads the whole history; the answer is one page of it.
    let entries = rt.history_entries(&id).await?;
    ok(entries
        .iter()
        .skip(offset)
        .take(limit)
        .map(entry_json)
        .collect())
}

/// `?force=true` (or `false`, or nothing): the one query a signal takes.
fn force_flag(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<bool, ApiError> {
    let Query(pairs) = query.map_err(|e| {
        ApiError::bad_request("invalid_query", format!("the query does not parse: {e}"))
    })?;
    let mut force = false;
    for (key, value) in &pairs {
        match (key.as_str(), value.as_str()) {
            ("force", "true") => force = true,
            ("force", "false" | "") => force = false,
            ("force", other) => {
                return Err(ApiError::bad_request(
                    "invalid_query",
                    format!("`force={other}`: give `true` or `false`"),
                )
                .detail("parameter", "force"))
            }
            (other, _) => {
                return Err(ApiError::bad_request(
                    "invalid_query",
                    format!("unknown parameter `{other}` (known: force)"),
                )
                .detail("parameter", other))
            }
        }
    }
    Ok(force)
}

/// `POST /api/runs/{id}/signals/{name}[?force=true]` with a JSON body:
/// stores the signal (as `checkpoint signal`). The run must exist; a body
/// that is not JSON is 400, and so is a name reserved for joins (`join#..`);
/// a name no wait site of the run's workflow takes is 422 (`unknown_signal`)
/// unless `force=true`, and so is a payload the waiting site (or, before the
/// run waits, a site of that name) cannot decode; none of them stores
/// anything.
pub(crate) async fn signal(
    State(rt): State<Runtime>,
    params: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    payload: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let (id, name) = path(params)?;
    let force = force_flag(query)?;
    crate::store::user_signal_name(&id, &name).map_err(|e| {
        ApiError::bad_request("reserved_signal", e.to_string())
            .detail("run", id.as_str())
            .detail("signal", name.as_str())
    })?;
    let payload = body(payload)?;
    let value: Value = serde_json::from_slice(&payload).map_err(|e| {
        ApiError::bad_request(
            "invalid_payload",
            format!("invalid JSON payload for signal `{name}` to run `{id}`: {e}"),
        )
        .detail("run", id.as_str())
        .detail("signal", name.as_str())
    })?;
    // A signal for a run that does not exist is an error, not a stored orphan.
    let status = rt.status(&id).await?;
    if force {
        rt.force_signal(&id, &name, &value).await?;
    } else {
        rt.signal(&id, &name, &value).await?;
    }
    let mut v = json!({
        "run": id,
        "signal": name,
        "payload": value,
        "status": status_json(&status),
    });
    if status.is_finished() {
        v["note"] = json!(format!(
            "the run is {}; nothing will consume the signal",
            status_json(&status)["state"].as_str().unwrap_or("finished")
        ));
    }
    ok(v)
}

/// The optional body of `POST /api/runs/{id}/cancel`: a request the run
/// sees (`Runtime::request_cancel_with`) instead of a cancel at once.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    reason: Option<String>,
    grace_ms: Option<u64>,
    children: Option<String>,
}

/// The grace period of a request that gives none.
const DEFAULT_GRACE_MS: u64 = 30_000;

/// `POST /api/runs/{id}/cancel`: without a body (or with `{}`), cancels a
/// run that has not finished at once (as `checkpoint cancel`); a finished
/// one is left as it is (`"cancelled": false`). With a body
/// `{"reason": "..", "grace_ms": N, "children": "cascade" | "abandon"}`
/// (each optional, one at least), asks the run to cancel (as
/// `checkpoint cancel --reason`): 409 for a finished run.
pub(crate) async fn cancel(
    State(rt): State<Runtime>,
    id: Result<Path<String>, PathRejection>,
    request: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = path(id)?;
    let request = body(request)?;
    let asked = if request.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let b: CancelBody = serde_json::from_slice(&request).map_err(|e| {
            ApiError::bad_request(
                "invalid_body",
                format!(
                    "the body must be `{{\"reason\": \"..\", \"grace_ms\": N, \
                     \"children\": \"cascade\" | \"abandon\"}}` (each optional): {e}"
                ),
            )
            .detail("run", id.as_str())
        })?;
        let children = match b.children.as_deref() {
            None | Some("cascade") => CancelChildren::Cascade,
            Some("abandon") => CancelChildren::Abandon,
            Some(other) => {
                return Err(ApiError::bad_request(
                    "invalid_body",
                    format!("`children` is `cascade` or `abandon`, not `{other}`"),
                )
                .detail("run", id.as_str()))
            }
        };
        let any = b.reason.is_some() || b.grace_ms.is_some() || b.children.is_some();
        any.then_some((b.reason, b.grace_ms, children))
    };
    if let Some((reason, grace_ms, children)) = asked {
        let reason = reason.unwrap_or_else(|| "cancelled from the API".to_owned());
        let grace_ms = grace_ms.unwrap_or(DEFAULT_GRACE_MS);
        let grace = std::time::Duration::from_millis(grace_ms);
        rt.request_cancel_with(&id, &reason, grace, children)
            .await?;
        let after = rt.status(&id).await?;
        let children = match children {
            CancelChildren::Abandon => "abandon",
            _ => "cascade",
        };
        return ok(json!({
            "run": id,
            "cancel_requested": true,
            "reason": reason,
            "grace_ms": grace_ms,
            "children": children,
            "status": status_json(&after),
        }));
    }
    let before = rt.status(&id).await?;
    if before.is_finished() {
        return ok(json!({ "run": id, "cancelled": false, "status": status_json(&before) }));
    }
    rt.cancel(&id).await?;
    let after = rt.status(&id).await?;
    let cancelled = after == Status::Cancelled;
    ok(json!({ "run": id, "cancelled": cancelled, "status": status_json(&after) }))
}

/// `POST /api/runs/{id}/retry`: retries a failed or parked run from its
/// latest checkpoint (as `checkpoint retry`); 409 for a run in another state.
pub(crate) async fn retry(
    State(rt): State<Runtime>,
    id: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let id = path(id)?;
    rt.retry(&id).await?;
    let after = rt.status(&id).await?;
    ok(json!({ "run": id, "retried": true, "status": status_json(&after) }))
}

/// The body of `POST /api/runs/{id}/fork`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkRequest {
    seq: u64,
    new_id: String,
}

/// `POST /api/runs/{id}/fork` with `{"seq": N, "new_id": ".."}`: creates
/// run `new_id` from checkpoint `seq` (as `checkpoint fork`): 201; 409 when
/// `new_id` exists, 404 for an unknown run or checkpoint.
pub(crate) async fn fork(
    State(rt): State<Runtime>,
    id: Result<Path<String>, PathRejection>,
    request: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let id = path(id)?;
    let request = body(request)?;
    let ForkRequest { seq, new_id } = serde_json::from_slice(&request).map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!("the body must be `{{\"seq\": N, \"new_id\": \"..\"}}`: {e}"),
        )
        .detail("run", id.as_str())
    })?;
    if seq == 0 {
        return Err(parse_seq(&id, "0").unwrap_err());
    }
    rt.fork(&id, seq, &new_id).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "run": new_id, "from": id, "seq": seq })),
    )
        .into_response())
}

/// Any other path under `/api`: 404.
pub(crate) async fn not_found(OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no API route `{}`", uri.path()),
    )
    .detail("path", uri.path())
}

/// A known path with another method: 405.
pub(crate) async fn method_not_allowed(OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("`{}` does not take this method", uri.path()),
    )
    .detail("path", uri.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_are_positive_integers() {
        assert_eq!(parse_seq("r", "3").unwrap(), 3);
        for bad in ["0", "-1", "two", "", "1.5", "99999999999999999999999"] {
            let e = parse_seq("r", bad).unwrap_err();
            assert_eq!(
                (e.status, e.kind.as_str()),
                (StatusCode::BAD_REQUEST, "invalid_seq")
            );
        }
    }

    #[test]
    fn every_status_filter_is_known() {
        for s in ["queued", "waiting", "held", "joining", "incompatible"] {
            assert_eq!(status_kind(s).map(StatusKind::label), Some(s));
        }
        assert!(status_kind("done").is_none());
    }
}
