//! Test helper for `tests/evolution.rs`, the mutation corpus: one workflow,
//! `vendor-review`, as a base and as the edits a deploy could make to it,
//! each variant compiled into this binary and selected with `--variant`, so
//! that a run started by one variant can be resumed by another in another
//! process, on any store URL (an SQLite path, or `postgres://...?schema=..`).
//!
//! The base scores a vendor's documents (a labelled checkpoint per
//! document, in a `for` loop), asks for approval (`ctx.wait_for("approval")`),
//! then decides. Its locals are what user code keeps: a `Vec<String>`
//! history, a `BTreeMap` of scores, a struct of findings, a counter, and
//! the input, all live across the wait. Side effects are appended to the
//! `--log` file as `<unix nanos> <worker id> <text>` (see `common/`).
//!
//! ```text
//! checkpoint-evolve-worker start  --db URL --id ID --variant V --log L [--worker-id W]
//! checkpoint-evolve-worker resume --db URL --id ID --variant V --log L [--worker-id W] [--signal JSON]
//! checkpoint-evolve-worker check  --db URL --variant V
//! ```
//!
//! Lines on stdout, besides those of `common/` (`WAITING <signal>`,
//! `RESULT <json>`, `FAILED ..`):
//!
//! - `PARKED <field> <site> <detail>`: the variant's code cannot resume the
//!   run; it is parked (exit 0);
//! - `VERSIONS <v>,<v>..`: after `resume`, the workflow version of every
//!   segment resumed so far (`Event::Resumed`);
//! - `INCOMPATIBLE <run> <site> <field> <detail>`, one per run the variant
//!   would park, then `CHECKED <n>`: `check` (`check_compatibility` on a
//!   client-only runtime: it writes nothing).
//!
//! `resume --signal JSON` sends the `approval` signal first; without it the
//! process resumes what is runnable (a parked run, for a rollback).
//!
//! The base and the types every variant shares are here (at the crate root,
//! so that the type names saved in checkpoints stay the same), with the
//! command line and the table of variants; the variants themselves are in
//! `edits.rs` (plain edits) and `upgrades.rs` (versions and migrations).
#![forbid(unsafe_code)]

// The stepping protocol in it serves the crash tests; this worker never steps.
#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;
mod edits;
mod upgrades;

use std::collections::BTreeMap;
use std::path::PathBuf;

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::store::RunState;
use common::{drive, effect, out, Env, Stepping};
use edits::{
    add_checkpoint_after_wait, add_checkpoint_before_wait, add_constant_local,
    add_for_loop_around_wait, add_local, add_retry_loop_around_wait, add_wait_before,
    change_input_type, change_label, change_map_type, change_type, compatible_edit,
    move_step_after_wait, move_wait_before_loop, remove_checkpoint, remove_local, rename_local,
    rename_signal,
};
use serde::{Deserialize, Serialize};
use upgrades::{
    migrate_add_local, migrate_add_local_default, migrate_change_type, migrate_rename_local,
    migrate_signal_constant, review_v2, review_v3, signal_constant,
};

/// The input of every variant but `change-input-type`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct ReviewRequest {
    vendor: String,
    documents: Vec<String>,
}

/// `change-input-type`'s input: another type (a priority added).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct PrioritizedRequest {
    vendor: String,
    documents: Vec<String>,
    priority: u8,
}

impl From<ReviewRequest> for PrioritizedRequest {
    fn from(r: ReviewRequest) -> Self {
        PrioritizedRequest {
            vendor: r.vendor,
            documents: r.documents,
            priority: 1,
        }
    }
}

/// The approval signal's payload.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
struct Approval {
    approved: bool,
    by: String,
}

/// What the scoring found.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
struct Findings {
    flagged: u32,
    worst: Option<String>,
}

impl Findings {
    fn note(&mut self, doc: &str, score: u32) {
        if score < 50 {
            self.flagged += 1;
            self.worst = Some(doc.to_owned());
        }
    }
}

/// Every variant's output; `code` names the variant that computed the part
/// after the wait.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Outcome {
    code: String,
    vendor: String,
    history: Vec<String>,
    scores: BTreeMap<String, u32>,
    findings: Findings,
    checked: u32,
    decision: String,
}

fn score_of(doc: &str) -> u32 {
    (doc.len() as u32 * 37) % 100
}

fn decide(findings: &Findings, approved: bool) -> String {
    match (approved, findings.flagged) {
        (false, _) => "rejected".to_owned(),
        (true, 0) => "approved".to_owned(),
        (true, n) => format!("approved with {n} finding(s)"),
    }
}

#[workflow(name = "vendor-review")]
async fn base(ctx: &Ctx, req: ReviewRequest) -> Outcome {
    effect(ctx, "begin");
    let mut history: Vec<String> = vec![format!("review {}", req.vendor)];
    let mut scores: BTreeMap<String, u32> = BTreeMap::new();
    let mut findings = Findings::default();
    let mut checked: u32 = 0;
    for doc in &req.documents {
        effect(ctx, &format!("score {doc}"));
        let score = score_of(doc);
        scores.insert(doc.clone(), score);
        findings.note(doc, score);
        history.push(format!("scored {doc}: {score}"));
        checked += 1;
        checkpoint!("document");
    }
    history.push("sent for approval".to_owned());
    effect(ctx, "ask for approval");
    let approval: Approval = ctx.wait_for("approval").await;
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "base".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// The input every `start` gives (converted for `change-input-type`).
fn request() -> ReviewRequest {
    ReviewRequest {
        vendor: "acme".into(),
        documents: vec!["contract".into(), "insurance".into(), "audit".into()],
    }
}

/// Each variant: its name, the workflows it registers (the first one starts
/// runs) and what `register` / `start` do with them. One arm per variant
/// keeps each workflow's own types (input, output) in the calls.
macro_rules! variants {
    ($($name:literal => [$first:ident $(, $more:ident)*]),* $(,)?) => {
        fn register(rt: &Runtime, variant: &str) {
            match variant {
                $($name => {
                    rt.register($first);
                    $(rt.register($more);)*
                })*
                other => usage(&format!("unknown variant {other}")),
            }
        }

        async fn start(rt: &Runtime, variant: &str, id: &str) -> Result<(), Error> {
            match variant {
                $($name => drop(rt.start($first, id, request().into()).await?),)*
                other => usage(&format!("unknown variant {other}")),
            }
            Ok(())
        }
    };
}

variants! {
    "base" => [base],
    "compatible-edit" => [compatible_edit],
    "add-local" => [add_local],
    "remove-local" => [remove_local],
    "rename-local" => [rename_local],
    "change-type" => [change_type],
    "change-map-type" => [change_map_type],
    "move-wait-before-loop" => [move_wait_before_loop],
    "move-step-after-wait" => [move_step_after_wait],
    "add-checkpoint-after-wait" => [add_checkpoint_after_wait],
    "add-checkpoint-before-wait" => [add_checkpoint_before_wait],
    "remove-checkpoint" => [remove_checkpoint],
    "add-for-loop-around-wait" => [add_for_loop_around_wait],
    "add-retry-loop-around-wait" => [add_retry_loop_around_wait],
    "change-label" => [change_label],
    "rename-signal" => [rename_signal],
    "change-input-type" => [change_input_type],
    "add-constant-local" => [add_constant_local],
    "add-wait-before" => [add_wait_before],
    "v2" => [review_v2],
    "v2-beside-base" => [base, review_v2],
    "v3" => [review_v3],
    "v3-beside-v1-v2" => [review_v3, base, review_v2],
    "migrate-add-local" => [migrate_add_local],
    "migrate-add-local-default" => [migrate_add_local_default],
    "migrate-rename-local" => [migrate_rename_local],
    "migrate-change-type" => [migrate_change_type],
    "signal-constant" => [signal_constant],
    "migrate-signal-constant" => [migrate_signal_constant],
}

/// Parsed command line.
#[derive(Default)]
struct Args {
    command: String,
    db: Option<String>,
    id: Option<String>,
    variant: Option<String>,
    log: Option<PathBuf>,
    worker_id: Option<String>,
    signal: Option<String>,
}

fn usage(msg: &str) -> ! {
    eprintln!("checkpoint-evolve-worker: {msg}");
    eprintln!(
        "usage: checkpoint-evolve-worker start|resume|check --db URL --variant V \
         [--id ID] [--log FILE] [--worker-id W] [--signal JSON]"
    );
    std::process::exit(64);
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        command: it.next().unwrap_or_else(|| usage("missing command")),
        ..Args::default()
    };
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--db" => a.db = Some(value()),
            "--id" => a.id = Some(value()),
            "--variant" => a.variant = Some(value()),
            "--log" => a.log = Some(PathBuf::from(value())),
            "--worker-id" => a.worker_id = Some(value()),
            "--signal" => a.signal = Some(value()),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    a
}

/// The run's stored output (the JSON every variant's `Outcome` was saved as).
async fn stored_output(rt: &Runtime, id: &str) -> Result<serde_json::Value, Error> {
    match rt.store().load_run(id).await?.map(|r| r.state) {
        Some(RunState::Completed { output, .. }) => Ok(serde_json::from_slice(&output)
            .unwrap_or_else(|e| panic!("the stored output is not JSON: {e}"))),
        other => panic!("run `{id}` completed but its record is {other:?}"),
    }
}

async fn main_async(a: Args) -> Result<i32, Error> {
    let db = a.db.clone().unwrap_or_else(|| usage("--db is required"));
    let variant = a
        .variant
        .clone()
        .unwrap_or_else(|| usage("--variant is required"));
    if a.command == "check" {
        let rt = Runtime::builder().client_only().open(&db).await?;
        register(&rt, &variant);
        let refused = rt.check_compatibility().await?;
        for r in &refused {
            out(&format!(
                "INCOMPATIBLE {} {} {} {}",
                r.run, r.site, r.field, r.detail
            ));
        }
        out(&format!("CHECKED {}", refused.len()));
        return Ok(0);
    }
    let id = a.id.clone().unwrap_or_else(|| usage("--id is required"));
    let log = a.log.clone().unwrap_or_else(|| usage("--log is required"));
    let mut b = Runtime::builder().resource(Env::new(log, Stepping::No));
    if let Some(w) = &a.worker_id {
        b = b.worker_id(w);
    }
    let rt = b.open(&db).await?;
    register(&rt, &variant);
    match a.command.as_str() {
        "start" => {
            start(&rt, &variant, &id).await?;
            out("STARTED");
        }
        "resume" => {
            if let Some(json) = &a.signal {
                let payload: serde_json::Value = serde_json::from_str(json)
                    .unwrap_or_else(|e| usage(&format!("bad --signal: {e}")));
                rt.signal(&id, "approval", &payload).await?;
            }
        }
        other => usage(&format!("unknown command {other}")),
    }
    let code = match drive(&rt, &id).await? {
        Some(code) => code,
        None => {
            common::print_result(&stored_output(&rt, &id).await?);
            0
        }
    };
    if a.command == "resume" {
        let versions: Vec<String> = rt
            .history(&id)
            .await?
            .iter()
            .filter_map(|e| match e {
                Event::Resumed { version, .. } => Some(version.to_string()),
                _ => None,
            })
            .collect();
        out(&format!("VERSIONS {}", versions.join(",")));
    }
    Ok(code)
}

fn main() {
    common::exit_with(main_async(parse_args()))
}
