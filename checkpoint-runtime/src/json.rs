//! The JSON shapes of runs, statuses, checkpoints, fields, history entries
//! and errors, as the `checkpoint` command prints them under `--json` and as
//! the HTTP API ([`crate::http`]) answers: one rendering for both, so that a
//! script reads the same objects from either (features `cli` or `http`).
//!
//! Times are RFC 3339 in UTC with milliseconds. Enums are flattened into one
//! object whose tag names the variant in snake case (see [`tagged`]):
//!
//! ```
//! use checkpoint_runtime::{json, Event, Status};
//! use serde_json::json;
//!
//! let waiting = Status::Waiting { signal: "finance_approval".into(), deadline: None };
//! assert_eq!(json::status_json(&waiting), json!({"state": "waiting", "signal": "finance_approval"}));
//! let saved = Event::CheckpointSaved { seq: 2, label: Some("task_done".into()) };
//! assert_eq!(
//!     json::event_json(&saved),
//!     json!({"event": "checkpoint_saved", "seq": 2, "label": "task_done"})
//! );
//! ```

use std::time::SystemTime;

use serde_json::{json, Map, Value};

use crate::{CheckpointInfo, Error, Event, FieldJson, HistoryEntry, RunInfo, Status};

/// `t` as an RFC 3339 UTC timestamp with milliseconds:
/// `2024-05-01T12:30:05.250Z`.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// let t = UNIX_EPOCH + Duration::from_millis(1_709_210_096_789);
/// assert_eq!(checkpoint_runtime::json::rfc3339(t), "2024-02-29T12:34:56.789Z");
/// ```
pub fn rfc3339(t: SystemTime) -> String {
    crate::status::rfc3339(t)
}

/// A status as JSON: `{"state": "waiting", "signal": "approval"}`,
/// `{"state": "sleeping", "until": "2024-..Z"}`, `{"state": "failed",
/// "error": "..."}`, `{"state": "completed"}`, ...
///
/// ```
/// use checkpoint_runtime::{json::status_json, Status};
/// assert_eq!(status_json(&Status::Completed), serde_json::json!({"state": "completed"}));
/// ```
pub fn status_json(s: &Status) -> Value {
    match s {
        Status::Sleeping { until } => json!({"state": "sleeping", "until": rfc3339(*until)}),
        Status::Waiting { signal, deadline } => match deadline {
            None => json!({"state": "waiting", "signal": signal}),
            Some(d) => json!({"state": "waiting", "signal": signal, "deadline": rfc3339(*d)}),
        },
        other => tagged("state", serde_json::to_value(other).unwrap_or(Value::Null)),
    }
}

/// A history event as JSON: `{"event": "checkpoint_saved", "seq": 1,
/// "label": "step"}`, `{"event": "completed"}`, ...
///
/// ```
/// use checkpoint_runtime::{json::event_json, Event};
/// assert_eq!(event_json(&Event::Completed), serde_json::json!({"event": "completed"}));
/// ```
pub fn event_json(e: &Event) -> Value {
    tagged("event", serde_json::to_value(e).unwrap_or(Value::Null))
}

/// A history entry as JSON: [`event_json`] with `at` and `text` (the event
/// in words).
///
/// ```
/// use std::time::UNIX_EPOCH;
/// use checkpoint_runtime::{json::entry_json, Event, HistoryEntry};
///
/// let entry = HistoryEntry { at: UNIX_EPOCH, event: Event::Completed };
/// assert_eq!(
///     entry_json(&entry),
///     serde_json::json!({"event": "completed", "at": "1970-01-01T00:00:00.000Z", "text": "completed"})
/// );
/// ```
pub fn entry_json(e: &HistoryEntry) -> Value {
    let mut v = event_json(&e.event);
    v["at"] = json!(rfc3339(e.at));
    v["text"] = json!(e.event.to_string());
    v
}

/// A run as JSON: id, workflow, status (see [`status_json`]), times, latest
/// checkpoint, and the lease holder and expiry (`null` without a lease);
/// `tags` (an object) when it has any, `queue` and `priority` when it was
/// started in a queue.
///
/// ```
/// # use checkpoint_runtime::prelude::*;
/// # #[workflow]
/// # async fn noop(ctx: &Ctx) {}
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let rt = Runtime::in_memory();
/// rt.start(noop, "n-1", ()).await?.result().await?;
/// let run = &rt.runs(RunFilter::new()).await?[0];
/// let v = checkpoint_runtime::json::run_json(run);
/// assert_eq!(v["id"], "n-1");
/// assert_eq!(v["status"]["state"], "completed");
/// # Ok(()) }
/// ```
pub fn run_json(r: &RunInfo) -> Value {
    let mut v = json!({
        "id": r.id,
        "workflow": r.workflow,
        "status": status_json(&r.status),
        "created_at": rfc3339(r.created_at),
        "updated_at": rfc3339(r.updated_at),
        "latest_seq": r.latest_seq,
        "worker": r.worker,
        "lease_expires_at": r.lease_expires_at.map(rfc3339),
        "parent": r.parent,
    });
    // Only when there is one, so that other runs read as they always did.
    if let Some(reason) = &r.cancel_reason {
        v["cancel_reason"] = json!(reason);
    }
    if !r.tags.is_empty() {
        v["tags"] = json!(r.tags);
    }
    if let Some(queue) = &r.queue {
        v["queue"] = json!(queue);
        v["priority"] = json!(r.priority);
    }
    v
}

/// A schedule as `checkpoint schedules --json` and `GET /api/schedules`
/// show it: its definition, whether it is paused, its last and next tick
/// (RFC 3339) and the run of its last fired tick.
///
/// ```
/// # use checkpoint_runtime::prelude::*;
/// # #[workflow]
/// # async fn sync(ctx: &Ctx) -> u8 { 0 }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let rt = Runtime::in_memory();
/// rt.schedule(Schedule::cron("sync", "*/5 * * * *")?, sync, |_: Tick| ()).await?;
/// let v = checkpoint_runtime::json::schedule_json(&rt.schedules().await?[0]);
/// assert_eq!((v["name"].as_str(), v["cron"].as_str()), (Some("sync"), Some("*/5 * * * *")));
/// assert_eq!(v["overlap"], "Skip");
/// # Ok(()) }
/// ```
pub fn schedule_json(s: &crate::ScheduleInfo) -> Value {
    json!({
        "name": s.name,
        "workflow": s.workflow,
        "cron": s.cron,
        "timezone": s.timezone,
        "overlap": s.overlap,
        "catch_up": s.catch_up,
        "paused": s.paused,
        "last_tick": s.last_tick.map(rfc3339),
        "next_tick": s.next_tick.map(rfc3339),
        "last_run": s.last_run,
    })
}

/// A run's input and, once it completed, its output, as the JSON values the
/// workflow was started with and returned (`null` for an output not yet
/// there, or bytes that are not JSON): the `input` and `output` of
/// `checkpoint show --json` and `GET /api/runs/{id}`.
///
/// ```
/// # use std::{sync::Arc, time::SystemTime};
/// use checkpoint_runtime::json::input_output_json;
/// use checkpoint_runtime::store::{MemoryStore, NewRun, Store};
/// # futures::executor::block_on(async {
/// let store = MemoryStore::new();
/// store.create_run(NewRun {
///     id: "r".into(), workflow: "wf".into(), input: Arc::from(&b"[1,2]"[..]),
///     version: 1, trace: None, parent: None, max_running: None,
///     options: Default::default(),
/// }).await.unwrap();
/// let run = store.load_run("r").await.unwrap().unwrap();
/// assert_eq!(input_output_json(&run), (serde_json::json!([1, 2]), serde_json::Value::Null));
/// # });
/// ```
pub fn input_output_json(run: &crate::store::RunRecord) -> (Value, Value) {
    let input = serde_json::from_slice(&run.input).unwrap_or(Value::Null);
    let output = match &run.state {
        crate::store::RunState::Completed { output, .. } => {
            serde_json::from_slice(output).unwrap_or(Value::Null)
        }
        _ => Value::Null,
    };
    (input, output)
}

/// A checkpoint version's summary: seq, label, site, time and size.
///
/// ```
/// # use checkpoint_runtime::prelude::*;
/// # #[workflow]
/// # async fn once(ctx: &Ctx) { checkpoint!("only"); }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let rt = Runtime::in_memory();
/// rt.start(once, "o-1", ()).await?.result().await?;
/// let v = checkpoint_runtime::json::checkpoint_json(&rt.checkpoints("o-1").await?[0]);
/// assert_eq!((v["seq"].as_u64(), v["label"].as_str()), (Some(1), Some("only")));
/// # Ok(()) }
/// ```
pub fn checkpoint_json(c: &CheckpointInfo) -> Value {
    json!({
        "seq": c.seq,
        "label": c.label,
        "site": c.site,
        "created_at": rfc3339(c.created_at),
        "size": c.size,
    })
}

/// A checkpoint version as a listing shows it: [`checkpoint_json`] with its
/// loop positions and its fields' names, types, sizes and schema keys (no
/// values: see [`field_json`]).
///
/// ```
/// # use checkpoint_runtime::prelude::*;
/// # #[workflow]
/// # async fn steps(ctx: &Ctx, n: u32) -> Vec<u32> {
/// #     let mut done = Vec::new();
/// #     for i in 0..n {
/// #         done.push(i);
/// #         checkpoint!("step");
/// #     }
/// #     done
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let rt = Runtime::in_memory();
/// rt.start(steps, "s-1", 2).await?.result().await?;
/// let v = checkpoint_runtime::json::checkpoint_listing_json(&rt.checkpoints("s-1").await?[0]);
/// let done = v["fields"].as_array().unwrap().iter().find(|f| f["name"] == "done").unwrap();
/// assert_eq!(done["type"], "alloc::vec::Vec<u32>");
/// assert_eq!(v["loops"], serde_json::json!([0]));
/// # Ok(()) }
/// ```
pub fn checkpoint_listing_json(c: &CheckpointInfo) -> Value {
    let mut v = checkpoint_json(c);
    v["loops"] = json!(c.loops);
    v["fields"] = c
        .fields
        .iter()
        .map(|f| {
            json!({
                "name": f.name,
                "type": f.type_name,
                "size": f.size,
                "schema": f.schema,
            })
        })
        .collect();
    v
}

/// A field decoded as JSON: name, type, schema key, value (`null` when it
/// cannot be shown) and the note saying why not.
///
/// ```
/// use checkpoint_runtime::{json::field_json, FieldJson};
/// let f = FieldJson::new("done", "u32", Some(serde_json::json!(2)));
/// assert_eq!(field_json(&f)["value"], 2);
/// ```
pub fn field_json(f: &FieldJson) -> Value {
    json!({
        "name": f.name,
        "type": f.type_name,
        "schema": f.schema,
        "value": f.value,
        "note": f.note,
    })
}

/// An error as JSON: `{"kind": "unknown_run", "message": "unknown run `x`",
/// "details": {"run": "x"}}`. `kind` is the variant's name in snake case,
/// `message` its text, `details` its fields.
///
/// ```
/// use checkpoint_runtime::{json::error_json, Error};
/// let v = error_json(&Error::UnknownRun { run: "x".into() });
/// assert_eq!(
///     v,
///     serde_json::json!({"kind": "unknown_run", "message": "unknown run `x`", "details": {"run": "x"}})
/// );
/// ```
pub fn error_json(e: &Error) -> Value {
    let message = e.to_string();
    let (kind, details) = match serde_json::to_value(e).map(|v| tagged("kind", v)) {
        Ok(Value::Object(mut details)) => match details.remove("kind") {
            Some(Value::String(kind)) => (kind, details),
            _ => ("runtime".to_owned(), details),
        },
        _ => ("runtime".to_owned(), Map::new()),
    };
    json!({ "kind": kind, "message": message, "details": details })
}

/// Flattens serde's externally tagged enum representation (`"Unit"` or
/// `{"Variant": {fields}}`) into one object whose `tag` key holds the
/// variant's name in snake case.
///
/// ```
/// use serde_json::json;
/// let v = checkpoint_runtime::json::tagged("state", json!({"Failed": {"error": "boom"}}));
/// assert_eq!(v, json!({"state": "failed", "error": "boom"}));
/// ```
pub fn tagged(tag: &str, v: Value) -> Value {
    let mut out = Map::new();
    match v {
        Value::String(name) => {
            out.insert(tag.to_owned(), Value::String(snake_case(&name)));
        }
        Value::Object(map) if map.len() == 1 => {
            for (name, inner) in map {
                out.insert(tag.to_owned(), Value::String(snake_case(&name)));
                match inner {
                    Value::Object(fields) => out.extend(fields),
                    other => {
                        out.insert("value".to_owned(), other);
                    }
                }
            }
        }
        other => {
            out.insert("value".to_owned(), other);
        }
    }
    Value::Object(out)
}

/// `CheckpointSaved` -> `checkpoint_saved`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The most changes [`field_diff`] lists inside one field; past it the
/// field's entry says `"truncated": true` (its whole old and new values are
/// still there).
///
/// ```
/// use checkpoint_runtime::{json, FieldJson};
/// let old = [FieldJson::new("v", "Vec<u32>", Some(serde_json::json!([])))];
/// let new = [FieldJson::new("v", "Vec<u32>", Some(serde_json::json!((0..100).collect::<Vec<u32>>())))];
/// let diff = json::field_diff(Some(&old), &new);
/// assert_eq!(diff[0]["changes"].as_array().unwrap().len(), json::MAX_CHANGES_PER_FIELD);
/// assert_eq!(diff[0]["truncated"], true);
/// ```
pub const MAX_CHANGES_PER_FIELD: usize = 50;

/// What changed between two versions of a checkpoint's fields, field by
/// field: one entry per field of either version, in the new version's
/// order (fields only the old one had come last), each with `change` (one
/// of `added`, `removed`, `changed`, `unchanged`, `unknown`: a value that
/// cannot be shown on one side), `old` and `new` (the values, `null` where
/// absent), and for a changed value `changes`: where inside it, as JSON
/// Pointer paths (`/tasks/2`; `""` for the whole value) with `op` (`add`, `remove`, `replace`) and
/// the values (at most [`MAX_CHANGES_PER_FIELD`]). A field whose type
/// changed says so with `old_type`. `previous` is `None` for the first
/// version: every field is then `added`.
///
/// ```
/// use checkpoint_runtime::{json::field_diff, FieldJson};
/// use serde_json::json;
///
/// let f = |name: &str, v| FieldJson::new(name, "T", Some(v));
/// let old = [f("done", json!(["a"])), f("n", json!(1))];
/// let new = [f("done", json!(["a", "b"])), f("n", json!(1))];
/// let diff = field_diff(Some(&old), &new);
/// assert_eq!(diff[0]["change"], "changed");
/// assert_eq!(diff[0]["changes"], json!([{"path": "/1", "op": "add", "new": "b"}]));
/// assert_eq!(diff[1]["change"], "unchanged");
/// ```
pub fn field_diff(previous: Option<&[FieldJson]>, current: &[FieldJson]) -> Value {
    let previous = previous.unwrap_or(&[]);
    let mut out = Vec::with_capacity(current.len());
    for new in current {
        let old = previous.iter().find(|f| f.name == new.name);
        let mut entry = json!({
            "name": new.name,
            "type": new.type_name,
            "old": old.and_then(|o| o.value.clone()),
            "new": new.value,
        });
        let change = match old {
            None => "added",
            Some(old) => {
                if old.type_name != new.type_name {
                    entry["old_type"] = json!(old.type_name);
                }
                match (&old.value, &new.value) {
                    (Some(a), Some(b)) if a == b && old.type_name == new.type_name => "unchanged",
                    (Some(a), Some(b)) => {
                        let mut changes = Vec::new();
                        let mut truncated = false;
                        value_changes(a, b, &mut String::new(), &mut changes, &mut truncated);
                        entry["changes"] = Value::Array(changes);
                        if truncated {
                            entry["truncated"] = json!(true);
                        }
                        "changed"
                    }
                    _ => "unknown",
                }
            }
        };
        entry["change"] = json!(change);
        out.push(entry);
    }
    for old in previous {
        if !current.iter().any(|f| f.name == old.name) {
            out.push(json!({
                "name": old.name,
                "type": old.type_name,
                "change": "removed",
                "old": old.value,
                "new": null,
            }));
        }
    }
    Value::Array(out)
}

/// Appends to `out` the changes from `a` to `b` below the JSON Pointer
/// `path` (`""`: the whole value): objects key by key, arrays index by
/// index, anything else whole. Sets `truncated` instead of going past
/// [`MAX_CHANGES_PER_FIELD`].
fn value_changes(
    a: &Value,
    b: &Value,
    path: &mut String,
    out: &mut Vec<Value>,
    truncated: &mut bool,
) {
    if a == b || *truncated {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                let len = path.len();
                push_token(path, k);
                match y.get(k) {
                    Some(vb) => value_changes(va, vb, path, out, truncated),
                    None => push_change(
                        out,
                        truncated,
                        json!({"path": path, "op": "remove", "old": va}),
                    ),
                }
                path.truncate(len);
            }
            for (k, vb) in y.iter().filter(|(k, _)| !x.contains_key(*k)) {
                let len = path.len();
                push_token(path, k);
                push_change(
                    out,
                    truncated,
                    json!({"path": path, "op": "add", "new": vb}),
                );
                path.truncate(len);
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                if *truncated {
                    return;
                }
                let len = path.len();
                push_token(path, &i.to_string());
                match (x.get(i), y.get(i)) {
                    (Some(va), Some(vb)) => value_changes(va, vb, path, out, truncated),
                    (Some(va), None) => push_change(
                        out,
                        truncated,
                        json!({"path": path, "op": "remove", "old": va}),
                    ),
                    (None, Some(vb)) => push_change(
                        out,
                        truncated,
                        json!({"path": path, "op": "add", "new": vb}),
                    ),
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        _ => push_change(
            out,
            truncated,
            json!({"path": path, "op": "replace", "old": a, "new": b}),
        ),
    }
}

/// Appends `/token` to a JSON Pointer, escaped (`~` as `~0`, `/` as `~1`).
fn push_token(path: &mut String, token: &str) {
    path.push('/');
    path.push_str(&token.replace('~', "~0").replace('/', "~1"));
}

fn push_change(out: &mut Vec<Value>, truncated: &mut bool, change: Value) {
    if out.len() == MAX_CHANGES_PER_FIELD {
        *truncated = true;
    } else {
        out.push(change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_run_in_a_queue_reads_with_its_queue() {
        let s = Status::InQueue {
            queue: "llm".into(),
        };
        assert_eq!(
            status_json(&s),
            json!({"state": "in_queue", "queue": "llm"})
        );
        assert_eq!(s.to_string(), "queued in queue `llm`");
        assert_eq!(s.kind(), crate::StatusKind::Queued);
    }

    #[test]
    fn times_are_rfc3339_utc() {
        use std::time::UNIX_EPOCH;
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_210_096_789); // a leap day
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56.789Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_868_800); // 2000-03-01
        assert_eq!(rfc3339(t), "2000-03-01T00:00:00.000Z");
        let t = UNIX_EPOCH - Duration::from_millis(1);
        assert_eq!(rfc3339(t), "1969-12-31T23:59:59.999Z");
        // Truncated to the millisecond, towards the past.
        let t = UNIX_EPOCH + Duration::from_nanos(1_999_999_999);
        assert_eq!(rfc3339(t), "1970-01-01T00:00:01.999Z");
        let t = UNIX_EPOCH - Duration::from_nanos(1_500_000);
        assert_eq!(rfc3339(t), "1969-12-31T23:59:59.998Z");
        // Beyond year 9999 (a damaged time): the last time RFC 3339 has.
        let t = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        assert!(rfc3339(t).starts_with("9999-12-"), "{}", rfc3339(t));
        let t = UNIX_EPOCH - Duration::from_secs(400_000_000_000);
        assert_eq!(rfc3339(t), "0001-01-01T00:00:00.000Z");
    }

    #[test]
    fn statuses_and_events_flatten() {
        assert_eq!(
            status_json(&Status::Completed),
            json!({"state": "completed"})
        );
        assert_eq!(
            status_json(&Status::Waiting {
                signal: "ok".into(),
                deadline: None,
            }),
            json!({"state": "waiting", "signal": "ok"})
        );
        assert_eq!(
            event_json(&Event::CheckpointSaved {
                seq: 2,
                label: None
            }),
            json!({"event": "checkpoint_saved", "seq": 2, "label": null})
        );
    }

    #[test]
    fn errors_name_their_kind_and_details() {
        let e = Error::UnknownCheckpoint {
            run: "r".into(),
            seq: 9,
        };
        let v = error_json(&e);
        assert_eq!(v["kind"], "unknown_checkpoint");
        assert_eq!(v["details"], json!({"run": "r", "seq": 9}));
        assert_eq!(v["message"], e.to_string());
    }

    fn f(name: &str, ty: &str, v: Option<Value>) -> FieldJson {
        FieldJson::new(name, ty, v)
    }

    #[test]
    fn diffs_say_what_changed_field_by_field() {
        let old = [
            f("goal", "String", Some(json!("ship"))),
            f("done", "Vec<String>", Some(json!(["a", "b"]))),
            f(
                "state",
                "S",
                Some(json!({"n": 1, "tag": "x", "gone": true})),
            ),
            f("opaque", "Value", None),
            f("dropped", "u8", Some(json!(3))),
            f("retyped", "u8", Some(json!(3))),
        ];
        let new = [
            f("goal", "String", Some(json!("ship"))),
            f("done", "Vec<String>", Some(json!(["a"]))),
            f("state", "S", Some(json!({"n": 2, "tag": "x", "a/b": 0}))),
            f("opaque", "Value", None),
            f("retyped", "u16", Some(json!(3))),
            f("fresh", "bool", Some(json!(false))),
        ];
        let diff = field_diff(Some(&old), &new);
        let by = |name: &str| {
            diff.as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == name)
                .unwrap()
                .clone()
        };
        assert_eq!(by("goal")["change"], "unchanged");
        assert_eq!(by("done")["change"], "changed");
        assert_eq!(
            by("done")["changes"],
            json!([{"path": "/1", "op": "remove", "old": "b"}])
        );
        assert_eq!(
            by("state")["changes"],
            json!([
                {"path": "/gone", "op": "remove", "old": true},
                {"path": "/n", "op": "replace", "old": 1, "new": 2},
                {"path": "/a~1b", "op": "add", "new": 0},
            ])
        );
        assert_eq!(by("opaque")["change"], "unknown");
        assert_eq!(by("dropped")["change"], "removed");
        assert_eq!(by("dropped")["old"], 3);
        assert_eq!(by("retyped")["change"], "changed");
        assert_eq!(by("retyped")["old_type"], "u8");
        assert_eq!(by("fresh")["change"], "added");
        // Fields only the old version had come last.
        assert_eq!(diff.as_array().unwrap().last().unwrap()["name"], "dropped");
    }

    #[test]
    fn a_first_version_adds_every_field_and_big_diffs_are_cut() {
        let new = [f("n", "u8", Some(json!(1)))];
        assert_eq!(field_diff(None, &new)[0]["change"], "added");

        let old = [f("v", "Vec<u32>", Some(json!([])))];
        let many: Vec<u32> = (0..200).collect();
        let new = [f("v", "Vec<u32>", Some(json!(many)))];
        let diff = field_diff(Some(&old), &new);
        assert_eq!(
            diff[0]["changes"].as_array().unwrap().len(),
            MAX_CHANGES_PER_FIELD
        );
        assert_eq!(diff[0]["truncated"], true);
        // A scalar that changed is replaced whole (the pointer "" is the
        // whole value).
        let diff = field_diff(
            Some(&[f("n", "u8", Some(json!(1)))]),
            &[f("n", "u8", Some(json!(2)))],
        );
        assert_eq!(
            diff[0]["changes"],
            json!([{"path": "", "op": "replace", "old": 1, "new": 2}])
        );
    }
}
