//! The subcommands: each reads or changes the store through the public
//! runtime API and returns its output both as text and as JSON.

use std::io::Read;
use std::time::SystemTime;

use checkpoint_runtime::{
    CheckpointInfo, Error, FieldJson, RunFilter, RunInfo, Runtime, StatusKind,
};
use serde_json::{json, Map, Value};

use crate::args::{Command, StatusArg, STORE_ENV};
use crate::format::{bytes, pairs, rfc3339, short_type, status_json, status_text, table, Column};

/// The worker id the command line opens stores with. It never executes runs,
/// so it never takes a lease; a distinct id keeps it apart from real workers.
const CLI_WORKER: &str = "checkpoint-cli";

/// An error: printed as `error: MESSAGE`, or under `--json` as one JSON
/// object (see [`CliError::json`]); the exit code is 1.
#[derive(Debug)]
pub struct CliError {
    /// What went wrong, as a stable snake_case word: the runtime's error
    /// variant (`unknown_run`, `unknown_checkpoint`, `already_exists`,
    /// `store`, ...) or one of the tool's own (`no_store`, `cannot_open_store`,
    /// `invalid_payload`, `no_checkpoints`, `io`).
    pub kind: String,
    /// The message, as in text mode.
    pub message: String,
    /// What the error names (the run, the signal, ...), as JSON fields.
    pub details: Map<String, Value>,
}

impl CliError {
    /// An error of the tool's own, with no details.
    pub fn new(kind: &str, message: impl Into<String>) -> CliError {
        CliError {
            kind: kind.to_owned(),
            message: message.into(),
            details: Map::new(),
        }
    }

    /// Adds a detail.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> CliError {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// `{"kind": "unknown_run", "message": "unknown run `x`", "details":
    /// {"run": "x"}}`.
    pub fn json(&self) -> Value {
        json!({ "kind": self.kind, "message": self.message, "details": self.details })
    }

    /// [`CliError::json`] on one line, keys in that order.
    pub fn json_line(&self) -> String {
        json_error_line(
            &self.kind,
            &self.message,
            &Value::Object(self.details.clone()),
        )
    }
}

/// An error as one line of JSON with its keys in reading order (a
/// `serde_json::Map` would sort them): kind, message, details.
pub fn json_error_line(kind: &str, message: &str, details: &Value) -> String {
    format!(
        "{{\"kind\":{},\"message\":{},\"details\":{details}}}",
        Value::from(kind),
        Value::from(message)
    )
}

impl From<Error> for CliError {
    fn from(e: Error) -> Self {
        // The runtime's errors serialize as their variant and fields, which
        // is what a script wants to match on (the HTTP API's errors are the
        // same objects).
        let mut v = checkpoint_runtime::json::error_json(&e);
        let kind = v["kind"].as_str().unwrap_or("runtime").to_owned();
        let details = match v["details"].take() {
            Value::Object(details) => details,
            _ => Map::new(),
        };
        CliError {
            kind,
            message: e.to_string(),
            details,
        }
    }
}

/// What a command prints: `text` by default, `json` with `--json`.
pub struct Output {
    pub text: String,
    pub json: Value,
}

/// The store URL: `--store`, else `$CHECKPOINT_STORE` (clap reads both).
pub fn store_url(given: Option<String>) -> Result<String, CliError> {
    match given {
        Some(url) if !url.trim().is_empty() => Ok(url),
        _ => Err(CliError::new(
            "no_store",
            format!(
                "no store given: pass --store URL (an SQLite file path, `:memory:` or \
                 `postgres://...`) or set {STORE_ENV}"
            ),
        )),
    }
}

/// Opens the store at `url`, which must already be a store of this build's
/// schema version: the command line reads and operates stores, it never
/// creates or upgrades them (a mistyped path would otherwise show an empty
/// store, and an older command line would upgrade the store under its
/// workers).
pub async fn open(url: &str) -> Result<Runtime, CliError> {
    Runtime::builder()
        .worker_id(CLI_WORKER)
        .client_only()
        .open_existing(url)
        .await
        .map_err(|e| match e {
            Error::UnsupportedStore { .. } => CliError::from(e),
            other => {
                let url = checkpoint_runtime::store::redact_url(url);
                let cause = CliError::from(other);
                CliError::new(
                    "cannot_open_store",
                    format!("cannot open store `{url}`: {}", cause.message),
                )
                .with("url", url.to_string())
                .with("cause", cause.json())
            }
        })
}

/// Runs one subcommand that prints once; `wide`: table cells whole.
pub async fn run(rt: &Runtime, command: Command, wide: bool) -> Result<Output, CliError> {
    match command {
        Command::Runs {
            status,
            workflow,
            prefix,
            parent,
            tags,
            limit,
        } => {
            let filter = RunsFilter {
                status,
                workflow,
                prefix,
                parent,
                tags,
                limit,
            };
            runs(rt, filter, wide).await
        }
        Command::Tree { id } => tree(rt, &id, wide).await,
        Command::Show { id } => show(rt, &id, wide).await,
        Command::Checkpoints { id, seq, fields } => {
            if seq.is_some() || fields {
                checkpoint_fields(rt, &id, seq, wide).await
            } else {
                checkpoints(rt, &id, wide).await
            }
        }
        Command::History { id } => history(rt, &id, wide).await,
        Command::Signal {
            id,
            name,
            payload,
            force,
        } => signal(rt, &id, &name, &payload, force).await,
        Command::Cancel {
            id,
            reason,
            grace,
            abandon_children,
            now,
        } => {
            if now || (reason.is_none() && grace.is_none()) {
                if abandon_children {
                    return Err(CliError::new(
                        "usage",
                        "--abandon-children goes with a request (--reason, --grace): \
                         a cancel at once cancels the run's children too",
                    ));
                }
                cancel(rt, &id).await
            } else {
                let reason = reason.unwrap_or_else(|| "cancelled from the command line".into());
                let grace = grace.unwrap_or(DEFAULT_GRACE);
                request_cancel(rt, &id, &reason, grace, abandon_children).await
            }
        }
        Command::Retry { id } => retry(rt, &id).await,
        Command::Fork { id, seq, new_id } => fork(rt, &id, seq, &new_id).await,
        Command::Gc => gc(rt).await,
        Command::Schedules { action } => crate::schedules::run(rt, action, wide).await,
        // They print as they go (`watch`, `serve`) or need no store
        // (`completions`): `main` runs them itself.
        Command::Tail { .. } => Err(CliError::new(
            "internal",
            "`tail` does not run through `commands::run`",
        )),
        Command::Watch { .. } | Command::Completions { .. } => Err(CliError::new(
            "internal",
            "`watch` and `completions` do not run through `commands::run`",
        )),
        Command::Serve { .. } => Err(CliError::new(
            "internal",
            "`serve` does not run through `commands::run`",
        )),
    }
}

fn seq_or_dash(seq: u64) -> String {
    if seq == 0 {
        "-".to_owned()
    } else {
        format!("#{seq}")
    }
}

/// A run's status in words, with the lease holder and its expiry for a
/// running run (see [`format::run_status_text`](crate::format::run_status_text)).
pub fn run_status_text(r: &RunInfo) -> String {
    crate::format::run_status_text(
        &r.status,
        r.worker.as_deref(),
        r.lease_expires_at,
        SystemTime::now(),
    )
}

use checkpoint_runtime::json::{checkpoint_json, checkpoint_listing_json, field_json};
pub use checkpoint_runtime::json::{entry_json, run_json};

/// The filters of `runs`.
struct RunsFilter {
    status: Option<StatusArg>,
    workflow: Option<String>,
    prefix: Option<String>,
    parent: Option<String>,
    tags: Vec<(String, String)>,
    limit: Option<usize>,
}

async fn runs(rt: &Runtime, given: RunsFilter, wide: bool) -> Result<Output, CliError> {
    let mut filter = RunFilter::new();
    if let Some(s) = given.status {
        filter = filter.status(StatusKind::from(s));
    }
    if let Some(w) = &given.workflow {
        filter = filter.workflow(w);
    }
    if let Some(p) = &given.prefix {
        filter = filter.id_prefix(p);
    }
    if let Some(p) = &given.parent {
        filter = filter.parent(p);
    }
    for (k, v) in &given.tags {
        filter = filter.tag(k, v);
    }
    if let Some(n) = given.limit {
        filter = filter.limit(n);
    }
    let runs = rt.runs(filter).await?;
    let text = if runs.is_empty() {
        "no runs\n".to_owned()
    } else {
        let rows: Vec<Vec<String>> = runs
            .iter()
            .map(|r| {
                vec![
                    r.id.clone(),
                    r.workflow.clone(),
                    run_status_text(r),
                    seq_or_dash(r.latest_seq),
                    crate::format::tags_text(&r.tags),
                    rfc3339(r.updated_at),
                ]
            })
            .collect();
        table(
            &[
                Column::whole("ID"),
                Column::capped("WORKFLOW", 32),
                Column::capped("STATUS", 80),
                Column::whole("CHECKPOINT"),
                Column::capped("TAGS", 48),
                Column::whole("UPDATED"),
            ],
            &rows,
            wide,
        )
    };
    Ok(Output {
        text,
        json: Value::Array(runs.iter().map(run_json).collect()),
    })
}

/// `tree ID`: the run, then its descendants depth first, each under its
/// parent, in spawn order.
async fn tree(rt: &Runtime, id: &str, wide: bool) -> Result<Output, CliError> {
    let root = run_info(rt, id).await?;
    let mut lines = Vec::new();
    let json = subtree(rt, &root, "", "", &mut lines, wide).await?;
    Ok(Output {
        text: lines.concat(),
        json,
    })
}

/// Prints `run` after `lead` and its children below it (`indent` before
/// theirs), and returns them as JSON (`children` nested).
fn subtree<'a>(
    rt: &'a Runtime,
    run: &'a RunInfo,
    lead: &'a str,
    indent: &'a str,
    lines: &'a mut Vec<String>,
    wide: bool,
) -> futures::future::BoxFuture<'a, Result<Value, CliError>> {
    Box::pin(async move {
        let status = crate::format::fit(&run_status_text(run), Some(80), wide);
        lines.push(format!("{lead}{}  {}  {status}\n", run.id, run.workflow));
        let children = rt.runs(RunFilter::new().parent(&run.id)).await?;
        let mut nested = Vec::with_capacity(children.len());
        for (i, child) in children.iter().enumerate() {
            let last = i + 1 == children.len();
            let lead = format!("{indent}{}", if last { "└─ " } else { "├─ " });
            let below = format!("{indent}{}", if last { "   " } else { "│  " });
            nested.push(subtree(rt, child, &lead, &below, lines, wide).await?);
        }
        let mut json = run_json(run);
        json["children"] = Value::Array(nested);
        Ok(json)
    })
}

/// The listing entry of run `id` (exactly that id).
pub async fn run_info(rt: &Runtime, id: &str) -> Result<RunInfo, CliError> {
    rt.runs(RunFilter::new().id_prefix(id))
        .await?
        .into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| Error::UnknownRun { run: id.to_owned() }.into())
}

fn describe_checkpoint(c: &CheckpointInfo) -> String {
    let label = c
        .label
        .as_deref()
        .map(|l| format!(" ({l})"))
        .unwrap_or_default();
    format!(
        "#{}{label}, saved {}, {}",
        c.seq,
        rfc3339(c.created_at),
        bytes(c.size as u64)
    )
}

/// The fields as a `FIELD TYPE VALUE` table, values as compact JSON.
fn fields_table(fields: &[FieldJson], indent: &str, wide: bool) -> String {
    if fields.is_empty() {
        return format!("{indent}(no fields)\n");
    }
    let rows: Vec<Vec<String>> = fields
        .iter()
        .map(|f| {
            let value = match (&f.value, &f.note) {
                (Some(v), _) => v.to_string(),
                (None, Some(note)) => format!("(not shown: {note})"),
                (None, None) => "(not shown)".to_owned(),
            };
            vec![f.name.clone(), short_type(&f.type_name), value]
        })
        .collect();
    let columns = [
        Column::whole("FIELD"),
        Column::capped("TYPE", 40),
        Column::capped("VALUE", 80),
    ];
    table(&columns, &rows, wide)
        .lines()
        .map(|l| format!("{indent}{l}\n"))
        .collect()
}

async fn show(rt: &Runtime, id: &str, wide: bool) -> Result<Output, CliError> {
    let run = run_info(rt, id).await?;
    let (input, output) = match rt.store().load_run(id).await? {
        Some(record) => checkpoint_runtime::json::input_output_json(&record),
        None => (Value::Null, Value::Null),
    };
    let latest = if run.latest_seq == 0 {
        None
    } else {
        let fields = rt.checkpoint_fields_json(id, run.latest_seq).await?;
        let info = rt
            .checkpoints(id)
            .await?
            .into_iter()
            .find(|c| c.seq == run.latest_seq);
        Some((info, fields))
    };

    let mut rows = vec![
        ("run", run.id.clone()),
        ("workflow", run.workflow.clone()),
        ("status", run_status_text(&run)),
        ("created", rfc3339(run.created_at)),
        ("updated", rfc3339(run.updated_at)),
    ];
    if let Some(w) = &run.worker {
        rows.push(("worker", w.clone()));
    }
    // On one line, cut unless `--wide` (an input may be a whole document).
    rows.push((
        "input",
        crate::format::fit(&input.to_string(), Some(120), wide),
    ));
    if !output.is_null() {
        rows.push((
            "output",
            crate::format::fit(&output.to_string(), Some(120), wide),
        ));
    }
    rows.push((
        "checkpoint",
        match &latest {
            None => "none yet".to_owned(),
            Some((Some(info), _)) => describe_checkpoint(info),
            Some((None, _)) => format!("#{}", run.latest_seq),
        },
    ));
    let mut text = pairs(&rows);
    if let Some((_, fields)) = &latest {
        text.push_str("fields:\n");
        text.push_str(&fields_table(fields, "  ", wide));
    }

    let mut json = run_json(&run);
    json["input"] = input;
    json["output"] = output;
    json["checkpoint"] = match &latest {
        None => Value::Null,
        Some((info, fields)) => {
            let mut c = match info {
                Some(info) => checkpoint_json(info),
                None => json!({ "seq": run.latest_seq }),
            };
            c["fields"] = fields.iter().map(field_json).collect();
            c
        }
    };
    Ok(Output { text, json })
}

async fn checkpoints(rt: &Runtime, id: &str, wide: bool) -> Result<Output, CliError> {
    let cps = rt.checkpoints(id).await?;
    let text = if cps.is_empty() {
        format!("run `{id}` has no checkpoints yet\n")
    } else {
        let rows: Vec<Vec<String>> = cps
            .iter()
            .map(|c| {
                let fields: Vec<String> = c
                    .fields
                    .iter()
                    .map(|f| format!("{}: {}", f.name, short_type(&f.type_name)))
                    .collect();
                vec![
                    c.seq.to_string(),
                    c.label.clone().unwrap_or_else(|| "-".to_owned()),
                    rfc3339(c.created_at),
                    bytes(c.size as u64),
                    fields.join(", "),
                ]
            })
            .collect();
        let columns = [
            Column::whole("SEQ"),
            Column::capped("LABEL", 32),
            Column::whole("CREATED"),
            Column::whole("SIZE"),
            Column::capped("FIELDS", 80),
        ];
        table(&columns, &rows, wide)
    };
    let json = cps.iter().map(checkpoint_listing_json).collect();
    Ok(Output { text, json })
}

async fn checkpoint_fields(
    rt: &Runtime,
    id: &str,
    seq: Option<u64>,
    wide: bool,
) -> Result<Output, CliError> {
    let (seq, fields, info) = match seq {
        Some(seq) => {
            // First: it reports an unknown run or checkpoint precisely.
            let fields = rt.checkpoint_fields_json(id, seq).await?;
            let info = rt.checkpoints(id).await?.into_iter().find(|c| c.seq == seq);
            (seq, fields, info)
        }
        None => {
            let Some(info) = rt.checkpoints(id).await?.pop() else {
                return Err(CliError::new(
                    "no_checkpoints",
                    format!("run `{id}` has no checkpoints yet"),
                )
                .with("run", id));
            };
            let fields = rt.checkpoint_fields_json(id, info.seq).await?;
            (info.seq, fields, Some(info))
        }
    };
    let mut text = match &info {
        Some(info) => format!("run `{id}`, checkpoint {}\n", describe_checkpoint(info)),
        None => format!("run `{id}`, checkpoint #{seq}\n"),
    };
    text.push_str(&fields_table(&fields, "", wide));
    let mut json = match &info {
        Some(info) => checkpoint_json(info),
        None => json!({ "seq": seq }),
    };
    json["run"] = json!(id);
    json["fields"] = fields.iter().map(field_json).collect();
    Ok(Output { text, json })
}

async fn history(rt: &Runtime, id: &str, wide: bool) -> Result<Output, CliError> {
    let entries = rt.history_entries(id).await?;
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| vec![rfc3339(e.at), e.event.to_string()])
        .collect();
    let columns = [Column::whole("TIME"), Column::capped("EVENT", 100)];
    let text = table(&columns, &rows, wide);
    let json = entries.iter().map(entry_json).collect();
    Ok(Output { text, json })
}

async fn signal(
    rt: &Runtime,
    id: &str,
    name: &str,
    payload: &str,
    force: bool,
) -> Result<Output, CliError> {
    let mut stdin_payload = String::new();
    let source = if payload == "-" {
        std::io::stdin()
            .read_to_string(&mut stdin_payload)
            .map_err(|e| {
                CliError::new(
                    "io",
                    format!("cannot read the payload from standard input: {e}"),
                )
            })?;
        stdin_payload.as_str()
    } else {
        payload
    };
    let value: Value = serde_json::from_str(source).map_err(|e| {
        let bare_word = source.trim_start().starts_with(|c: char| c.is_alphabetic());
        let hint = if bare_word {
            " (a JSON string needs quotes: '\"text\"')"
        } else {
            ""
        };
        CliError::new(
            "invalid_payload",
            format!("invalid JSON payload for signal `{name}` to run `{id}`: {e}{hint}"),
        )
        .with("run", id)
        .with("signal", name)
    })?;
    // A signal for a run that does not exist, or that has ended, is an
    // error (the store refuses it), not a stored orphan.
    let status = rt.status(id).await?;
    if force {
        rt.force_signal(id, name, &value).await?;
    } else {
        rt.signal(id, name, &value).await?;
    }
    let text = format!("signal `{name}` stored for run `{id}`\n");
    Ok(Output {
        text,
        json: json!({
            "run": id,
            "signal": name,
            "payload": value,
            "status": status_json(&status),
        }),
    })
}

async fn cancel(rt: &Runtime, id: &str) -> Result<Output, CliError> {
    let before = rt.status(id).await?;
    if before.is_finished() {
        return Ok(Output {
            text: format!(
                "run `{id}` is already finished ({}); nothing to cancel\n",
                status_text(&before)
            ),
            json: json!({ "run": id, "cancelled": false, "status": status_json(&before) }),
        });
    }
    rt.cancel(id).await?;
    let after = rt.status(id).await?;
    let cancelled = after == checkpoint_runtime::Status::Cancelled;
    let text = if cancelled {
        format!("run `{id}` cancelled\n")
    } else {
        format!(
            "run `{id}` finished before it could be cancelled ({})\n",
            status_text(&after)
        )
    };
    Ok(Output {
        text,
        json: json!({ "run": id, "cancelled": cancelled, "status": status_json(&after) }),
    })
}

/// The grace period of `cancel --reason` without `--grace`.
const DEFAULT_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

async fn request_cancel(
    rt: &Runtime,
    id: &str,
    reason: &str,
    grace: std::time::Duration,
    abandon_children: bool,
) -> Result<Output, CliError> {
    let children = if abandon_children {
        checkpoint_runtime::CancelChildren::Abandon
    } else {
        checkpoint_runtime::CancelChildren::Cascade
    };
    rt.request_cancel_with(id, reason, grace, children).await?;
    let after = rt.status(id).await?;
    let kids = if abandon_children {
        "its children keep running"
    } else {
        "its children are asked too"
    };
    Ok(Output {
        text: format!(
            "run `{id}` asked to cancel ({reason}); it has {:.3}s to clean up, {kids} ({})\n",
            grace.as_secs_f64(),
            status_text(&after)
        ),
        json: json!({
            "run": id,
            "cancel_requested": true,
            "reason": reason,
            "grace_ms": u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            "children": if abandon_children { "abandon" } else { "cascade" },
            "status": status_json(&after),
        }),
    })
}

async fn retry(rt: &Runtime, id: &str) -> Result<Output, CliError> {
    rt.retry(id).await?;
    let after = rt.status(id).await?;
    Ok(Output {
        text: format!(
            "run `{id}` will be retried from its latest checkpoint by a worker with its \
             workflow registered ({})\n",
            status_text(&after)
        ),
        json: json!({ "run": id, "retried": true, "status": status_json(&after) }),
    })
}

async fn fork(rt: &Runtime, id: &str, seq: u64, new_id: &str) -> Result<Output, CliError> {
    rt.fork(id, seq, new_id).await?;
    Ok(Output {
        text: format!(
            "run `{new_id}` created from checkpoint #{seq} of run `{id}`; a worker with its \
             workflow registered resumes it from there\n"
        ),
        json: json!({ "run": new_id, "from": id, "seq": seq }),
    })
}

async fn gc(rt: &Runtime) -> Result<Output, CliError> {
    let r = rt.gc().await?;
    let text = pairs(&[
        ("checkpoints compacted", r.checkpoints_compacted.to_string()),
        ("bytes compacted", bytes(r.bytes_compacted)),
        ("pages released", r.pages_released.to_string()),
        (
            "wal truncated",
            if r.wal_truncated { "yes" } else { "no" }.to_owned(),
        ),
        (
            "store size",
            format!("{} -> {}", bytes(r.bytes_before), bytes(r.bytes_after)),
        ),
    ]);
    let json = json!({
        "checkpoints_compacted": r.checkpoints_compacted,
        "bytes_compacted": r.bytes_compacted,
        "pages_released": r.pages_released,
        "wal_truncated": r.wal_truncated,
        "bytes_before": r.bytes_before,
        "bytes_after": r.bytes_after,
    });
    Ok(Output { text, json })
}
