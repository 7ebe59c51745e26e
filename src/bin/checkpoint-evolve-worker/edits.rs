//! The edits a deploy could make to `vendor-review` without declaring
//! anything (one variant each, named as in `main.rs`'s table): changes to
//! its locals, its checkpoints, its waits, its labels and its input type.
//! `tests/evolution.rs` resumes the base's runs on each and checks that it
//! either resumes them exactly or parks them, never resumes them wrong.
//! They share the base's types and helpers (`main.rs`), which stay at the
//! crate root so that the type names saved in checkpoints do not change.

use std::collections::{BTreeMap, HashMap};

use checkpoint_runtime::prelude::*;

use super::common::effect;
use super::{decide, score_of, Approval, Findings, Outcome, PrioritizedRequest, ReviewRequest};

/// The code after the wait changed (wording, one more side effect); the
/// fields saved at the wait did not.
#[workflow(name = "vendor-review")]
pub(crate) async fn compatible_edit(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn add_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn remove_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn rename_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn change_type(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn change_map_type(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn move_wait_before_loop(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn move_step_after_wait(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn add_checkpoint_after_wait(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn add_checkpoint_before_wait(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn remove_checkpoint(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn add_for_loop_around_wait(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn add_retry_loop_around_wait(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn change_label(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn rename_signal(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn change_input_type(ctx: &Ctx, req: PrioritizedRequest) -> Outcome {
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
pub(crate) async fn add_wait_before(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn add_constant_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
