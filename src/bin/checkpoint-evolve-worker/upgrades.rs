//! The edits of `vendor-review` that come with a declaration, so that old
//! runs survive them: new workflow versions (`version = 2`, `3`) and
//! `#[migrate]` / `renamed_site` migrations, each next to the edit it
//! repairs when that edit is not one of `edits.rs` (`signal-constant`).
//! Kept apart from the plain edits: these are the variants
//! `tests/evolution.rs` expects to roll forward, or to run beside the base.

use std::collections::BTreeMap;

use checkpoint_runtime::prelude::*;

use super::common::effect;
use super::{decide, score_of, Approval, Findings, Outcome, ReviewRequest};

/// Version 2: a new local (`sla_hours`, computed from the findings, so
/// saved) live across the wait: version 1's checkpoints do not fit it.
#[workflow(name = "vendor-review", version = 2)]
pub(crate) async fn review_v2(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn review_v3(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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

/// The approval signal's name, for the variants that use a constant.
const APPROVAL_SIGNAL: &str = "approval";

/// `add-local` with a migration: a checkpoint without `reviewers` gets
/// the value the code starts it with.
#[workflow(name = "vendor-review")]
pub(crate) async fn migrate_add_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn migrate_add_local_default(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn migrate_rename_local(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn migrate_change_type(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn signal_constant(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
pub(crate) async fn migrate_signal_constant(ctx: &Ctx, req: ReviewRequest) -> Outcome {
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
