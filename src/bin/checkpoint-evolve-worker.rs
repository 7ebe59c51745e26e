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
#![forbid(unsafe_code)]

// The stepping protocol in it serves the crash tests; this worker never steps.
#[allow(dead_code)]
mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::store::RunState;
use common::{drive, effect, out, Env, Stepping};
use serde::{Deserialize, Serialize};

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

/// The code after the wait changed (wording, one more side effect); the
/// fields saved at the wait did not.
#[workflow(name = "vendor-review")]
async fn compatible_edit(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let verdict = if approval.approved { "yes" } else { "no" };
    history.push(format!("{} said {verdict}", approval.by));
    let decision = decide(&findings, approval.approved).to_uppercase();
    effect(ctx, &format!("decided by {}", approval.by));
    effect(ctx, &format!("notify {}", req.vendor));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "compatible-edit".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// A new local, `reviewers`, live across the wait.
#[workflow(name = "vendor-review")]
async fn add_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let reviewers: Vec<String> = vec!["risk".to_owned(), "legal".to_owned()];
    history.push("sent for approval".to_owned());
    effect(ctx, "ask for approval");
    let approval: Approval = ctx.wait_for("approval").await;
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    history.push(format!("reviewed by {}", reviewers.join("+")));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "add-local".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// `checked` removed (the count comes from `scores`).
#[workflow(name = "vendor-review")]
async fn remove_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
    effect(ctx, "begin");
    let mut history: Vec<String> = vec![format!("review {}", req.vendor)];
    let mut scores: BTreeMap<String, u32> = BTreeMap::new();
    let mut findings = Findings::default();
    for doc in &req.documents {
        effect(ctx, &format!("score {doc}"));
        let score = score_of(doc);
        scores.insert(doc.clone(), score);
        findings.note(doc, score);
        history.push(format!("scored {doc}: {score}"));
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
        code: "remove-local".into(),
        vendor: req.vendor,
        history,
        checked: scores.len() as u32,
        scores,
        findings,
        decision,
    }
}

/// `checked` renamed `documents_checked`.
#[workflow(name = "vendor-review")]
async fn rename_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
    effect(ctx, "begin");
    let mut history: Vec<String> = vec![format!("review {}", req.vendor)];
    let mut scores: BTreeMap<String, u32> = BTreeMap::new();
    let mut findings = Findings::default();
    let mut documents_checked: u32 = 0;
    for doc in &req.documents {
        effect(ctx, &format!("score {doc}"));
        let score = score_of(doc);
        scores.insert(doc.clone(), score);
        findings.note(doc, score);
        history.push(format!("scored {doc}: {score}"));
        documents_checked += 1;
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
        code: "rename-local".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked: documents_checked,
        decision,
    }
}

/// `checked` is a `u64`.
#[workflow(name = "vendor-review")]
async fn change_type(ctx: &Ctx, req: ReviewRequest) -> Outcome {
    effect(ctx, "begin");
    let mut history: Vec<String> = vec![format!("review {}", req.vendor)];
    let mut scores: BTreeMap<String, u32> = BTreeMap::new();
    let mut findings = Findings::default();
    let mut checked: u64 = 0;
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
        code: "change-type".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked: u32::try_from(checked).unwrap_or(u32::MAX),
        decision,
    }
}

/// `scores` is a `HashMap` (same serde shape as the `BTreeMap`, another type).
#[workflow(name = "vendor-review")]
async fn change_map_type(ctx: &Ctx, req: ReviewRequest) -> Outcome {
    effect(ctx, "begin");
    let mut history: Vec<String> = vec![format!("review {}", req.vendor)];
    let mut scores: HashMap<String, u32> = HashMap::new();
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
        code: "change-map-type".into(),
        vendor: req.vendor,
        history,
        scores: scores.into_iter().collect(),
        findings,
        checked,
        decision,
    }
}

/// The approval is asked for before the documents are scored.
#[workflow(name = "vendor-review")]
async fn move_wait_before_loop(ctx: &Ctx, req: ReviewRequest) -> Outcome {
    effect(ctx, "begin");
    let mut history: Vec<String> = vec![format!("review {}", req.vendor)];
    let mut scores: BTreeMap<String, u32> = BTreeMap::new();
    let mut findings = Findings::default();
    let mut checked: u32 = 0;
    history.push("sent for approval".to_owned());
    effect(ctx, "ask for approval");
    let approval: Approval = ctx.wait_for("approval").await;
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    for doc in &req.documents {
        effect(ctx, &format!("score {doc}"));
        let score = score_of(doc);
        scores.insert(doc.clone(), score);
        findings.note(doc, score);
        history.push(format!("scored {doc}: {score}"));
        checked += 1;
        checkpoint!("document");
    }
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "move-wait-before-loop".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// The wait moved before the step that records the request in `history`:
/// same site, same saved fields, but the step now runs after the wait.
#[workflow(name = "vendor-review")]
async fn move_step_after_wait(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    effect(ctx, "ask for approval");
    let approval: Approval = ctx.wait_for("approval").await;
    history.push("sent for approval".to_owned());
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "move-step-after-wait".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// A checkpoint added after the wait.
#[workflow(name = "vendor-review")]
async fn add_checkpoint_after_wait(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    checkpoint!("recorded");
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "add-checkpoint-after-wait".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// A checkpoint added between the loop and the wait (the wait's position
/// key moves from `#2` to `#3`).
#[workflow(name = "vendor-review")]
async fn add_checkpoint_before_wait(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    checkpoint!("scored");
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
        code: "add-checkpoint-before-wait".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// The per-document checkpoint removed (the wait's key moves to `#1`).
#[workflow(name = "vendor-review")]
async fn remove_checkpoint(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
        code: "remove-checkpoint".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// The wait inside a `for` loop over review rounds.
#[workflow(name = "vendor-review")]
async fn add_for_loop_around_wait(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let mut approvals: Vec<Approval> = Vec::new();
    for round in 1..=1u32 {
        let approval: Approval = ctx.wait_for("approval").await;
        history.push(format!(
            "round {round}: approval by {}: {}",
            approval.by, approval.approved
        ));
        approvals.push(approval);
    }
    let approval = approvals.pop().unwrap_or_default();
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "add-for-loop-around-wait".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// The wait inside a `loop` that asks again until someone answers.
#[workflow(name = "vendor-review")]
async fn add_retry_loop_around_wait(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let approval: Approval = loop {
        let answer: Approval = ctx.wait_for("approval").await;
        if !answer.by.is_empty() {
            break answer;
        }
        effect(ctx, "ask again");
    };
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "add-retry-loop-around-wait".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// The per-document checkpoint's label changed.
#[workflow(name = "vendor-review")]
async fn change_label(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
        checkpoint!("scored-document");
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
        code: "change-label".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// The approval signal renamed `sign-off`: same site key, fields and kind.
#[workflow(name = "vendor-review")]
async fn rename_signal(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let approval: Approval = ctx.wait_for("sign-off").await;
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "rename-signal".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// The input is a `PrioritizedRequest`.
#[workflow(name = "vendor-review")]
async fn change_input_type(ctx: &Ctx, req: PrioritizedRequest) -> Outcome {
    effect(ctx, "begin");
    let mut history: Vec<String> = vec![format!("review {} (p{})", req.vendor, req.priority)];
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
        code: "change-input-type".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// A second wait (a manager's sign-off) inserted before the approval: it
/// takes the position key `#2` the approval wait had, with the same saved
/// fields and the same kind of site.
#[workflow(name = "vendor-review")]
async fn add_wait_before(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let manager: Approval = ctx.wait_for("manager").await;
    history.push(format!("manager sign-off by {}", manager.by));
    let approval: Approval = ctx.wait_for("approval").await;
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    let decision = decide(&findings, approval.approved && manager.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "add-wait-before".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// A new local, `sla_hours`, used after the wait but set to a constant:
/// the macro re-creates constants on resume instead of saving them, so the
/// saved fields stay the base's.
#[workflow(name = "vendor-review")]
async fn add_constant_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let sla_hours: u32 = 48;
    history.push("sent for approval".to_owned());
    effect(ctx, "ask for approval");
    let approval: Approval = ctx.wait_for("approval").await;
    history.push(format!(
        "approval by {} within {sla_hours}h: {}",
        approval.by, approval.approved
    ));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "add-constant-local".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// Version 2: a new local (`sla_hours`, computed from the findings, so
/// saved) live across the wait: version 1's checkpoints do not fit it.
#[workflow(name = "vendor-review", version = 2)]
async fn review_v2(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let sla_hours: u32 = 24 * (findings.flagged + 1);
    history.push("sent for approval".to_owned());
    effect(ctx, "ask for approval");
    let approval: Approval = ctx.wait_for("approval").await;
    history.push(format!(
        "approval by {} within {sla_hours}h: {}",
        approval.by, approval.approved
    ));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "v2".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// Version 3: a fix with version 1's saved fields (only the code after the
/// wait differs), so version 1's runs roll forward onto it.
#[workflow(name = "vendor-review", version = 3)]
async fn review_v3(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let decision = format!("{} (v3)", decide(&findings, approval.approved));
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "v3".into(),
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

/// The approval signal's name, for the variants that use a constant.
const APPROVAL_SIGNAL: &str = "approval";

/// `add-local` with a migration: a checkpoint without `reviewers` gets
/// the value the code starts it with.
#[workflow(name = "vendor-review")]
async fn migrate_add_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    #[migrate(value = vec!["risk".to_owned(), "legal".to_owned()])]
    let reviewers: Vec<String> = vec!["risk".to_owned(), "legal".to_owned()];
    history.push("sent for approval".to_owned());
    effect(ctx, "ask for approval");
    let approval: Approval = ctx.wait_for("approval").await;
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    history.push(format!("reviewed by {}", reviewers.join("+")));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "migrate-add-local".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// `add-local` with `#[migrate(default)]`: a checkpoint without
/// `reviewers` gets an empty list (not what the code starts it with).
#[workflow(name = "vendor-review")]
async fn migrate_add_local_default(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    #[migrate(default)]
    let reviewers: Vec<String> = vec!["risk".to_owned(), "legal".to_owned()];
    history.push("sent for approval".to_owned());
    effect(ctx, "ask for approval");
    let approval: Approval = ctx.wait_for("approval").await;
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    history.push(format!("reviewed by {}", reviewers.join("+")));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "migrate-add-local-default".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// `rename-local` with a migration from the old name.
#[workflow(name = "vendor-review")]
async fn migrate_rename_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
    effect(ctx, "begin");
    let mut history: Vec<String> = vec![format!("review {}", req.vendor)];
    let mut scores: BTreeMap<String, u32> = BTreeMap::new();
    let mut findings = Findings::default();
    #[migrate(renamed_from = "checked")]
    let mut documents_checked: u32 = 0;
    for doc in &req.documents {
        effect(ctx, &format!("score {doc}"));
        let score = score_of(doc);
        scores.insert(doc.clone(), score);
        findings.note(doc, score);
        history.push(format!("scored {doc}: {score}"));
        documents_checked += 1;
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
        code: "migrate-rename-local".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked: documents_checked,
        decision,
    }
}

/// `change-type` with a migration from the old type.
#[workflow(name = "vendor-review")]
async fn migrate_change_type(ctx: &Ctx, req: ReviewRequest) -> Outcome {
    effect(ctx, "begin");
    let mut history: Vec<String> = vec![format!("review {}", req.vendor)];
    let mut scores: BTreeMap<String, u32> = BTreeMap::new();
    let mut findings = Findings::default();
    #[migrate(from = u32, with = u64::from)]
    let mut checked: u64 = 0;
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
        code: "migrate-change-type".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked: u32::try_from(checked).unwrap_or(u32::MAX),
        decision,
    }
}

/// The signal's name moved into a constant: the wait's site is no longer
/// named after a literal (`wait_for 1`, not `wait_for("approval")`).
#[workflow(name = "vendor-review")]
async fn signal_constant(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let approval: Approval = ctx.wait_for(APPROVAL_SIGNAL).await;
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "signal-constant".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
}

/// `signal-constant` with the site's old name declared.
#[workflow(
    name = "vendor-review",
    renamed_site(from = "wait_for(\"approval\")", to = "wait_for 1")
)]
async fn migrate_signal_constant(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
    let approval: Approval = ctx.wait_for(APPROVAL_SIGNAL).await;
    history.push(format!(
        "approval by {}: {}",
        approval.by, approval.approved
    ));
    let decision = decide(&findings, approval.approved);
    effect(ctx, &format!("decided by {}", approval.by));
    checkpoint!("decided");
    effect(ctx, "end");
    Outcome {
        code: "migrate-signal-constant".into(),
        vendor: req.vendor,
        history,
        scores,
        findings,
        checked,
        decision,
    }
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
