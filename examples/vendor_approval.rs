//! The story the README leads with: a vendor onboarding workflow that pauses
//! for finance approval with no process alive, and is finished by another one.
//!
//! ```text
//! cargo run --example vendor_approval
//! ```
//!
//! With no stage given, the example runs the whole story, each stage in its
//! own child process (this same binary, started again with a stage flag):
//!
//! 1. `start`: vendor review and security review run, the state is
//!    checkpointed, finance is notified, and the run suspends on
//!    `ctx.wait_for("finance_approval")`. The process exits.
//! 2. `approve`: a second process delivers the approval (`rt.signal`). It
//!    runs no workflow code.
//! 3. `resume`: a third process opens the same database, resumes the run
//!    right after the wait and runs the onboarding tasks, one checkpoint each.
//! 4. `show`: prints the status, the result, the checkpoint versions and the
//!    history.
//!
//! Each stage can also be run by hand (the default database is
//! `$TMPDIR/checkpoint-vendor-approval.db`; only the full story removes it):
//!
//! ```text
//! cargo run --example vendor_approval -- --db /tmp/v.db start
//! cargo run --example vendor_approval -- --db /tmp/v.db approve            # or: approve --reject "no budget"
//! cargo run --example vendor_approval -- --db /tmp/v.db resume
//! cargo run --example vendor_approval -- --db /tmp/v.db show
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use checkpoint_runtime::prelude::*;
use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};

const RUN_ID: &str = "vendor-42";

// ---------------------------------------------------------------------------
// The domain: a vendor, the reviews, finance's approval, the decision.

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Vendor {
    name: String,
    country: String,
    annual_spend_eur: u64,
    handles_customer_data: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct SecurityReport {
    risk: String,
    findings: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Approval {
    approved: bool,
    by: String,
    reason: String,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
enum Decision {
    Approved {
        security: SecurityReport,
        approved_by: String,
        done: Vec<String>,
    },
    Rejected {
        by: String,
        reason: String,
    },
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
enum ReviewError {
    Sanctioned(String),
    TaskFailed(String),
}

impl std::fmt::Display for ReviewError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReviewError::Sanctioned(c) => write!(f, "vendor is in a sanctioned country ({c})"),
            ReviewError::TaskFailed(t) => write!(f, "onboarding task failed: {t}"),
        }
    }
}

/// Stand-ins for real services (a KYC provider, a scanner, a mailer, an ERP).
/// Each prints what it does, so the narration shows what runs in which process.
async fn vendor_review(v: &Vendor) -> Result<(), ReviewError> {
    say(&format!(
        "vendor review: {} ({}), {} EUR/year",
        v.name, v.country, v.annual_spend_eur
    ));
    if v.country == "Atlantis" {
        return Err(ReviewError::Sanctioned(v.country.clone()));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

async fn security_review(v: &Vendor) -> Result<SecurityReport, ReviewError> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    let report = if v.handles_customer_data {
        SecurityReport {
            risk: "medium".into(),
            findings: vec![
                "SOC 2 type II report on file".into(),
                "DPA required (handles customer data)".into(),
            ],
        }
    } else {
        SecurityReport {
            risk: "low".into(),
            findings: vec![],
        }
    };
    say(&format!(
        "security review: risk {}, {} finding(s)",
        report.risk,
        report.findings.len()
    ));
    Ok(report)
}

async fn notify_finance(v: &Vendor, security: &SecurityReport) {
    say(&format!(
        "notified finance: please approve {} (risk {})",
        v.name, security.risk
    ));
}

fn onboarding_tasks(v: &Vendor) -> Vec<String> {
    let mut tasks = vec![
        "create supplier record in ERP".to_string(),
        "collect bank details".to_string(),
        "sign master services agreement".to_string(),
    ];
    if v.handles_customer_data {
        tasks.push("sign data processing agreement".to_string());
    }
    tasks
}

async fn run_task(task: &str) -> Result<String, ReviewError> {
    tokio::time::sleep(Duration::from_millis(30)).await;
    say(&format!("onboarding task done: {task}"));
    Ok(format!("{task}: ok"))
}

// ---------------------------------------------------------------------------
// The workflow: ordinary async Rust, with checkpoints and one durable wait.

#[workflow(name = "vendor-approval")]
async fn vendor_approval(ctx: &Ctx, vendor: Vendor) -> Result<Decision, ReviewError> {
    vendor_review(&vendor).await?;
    let security = security_review(&vendor).await?;
    checkpoint!("security_reviewed");

    notify_finance(&vendor, &security).await;
    say("waiting for `finance_approval` (the process may exit now)");
    // Suspends durably: the run is stored and this execution ends.
    let approval: Approval = ctx.wait_for("finance_approval").await;
    say(&format!(
        "resumed with finance's answer: {} by {}",
        if approval.approved {
            "approved"
        } else {
            "rejected"
        },
        approval.by
    ));
    if !approval.approved {
        return Ok(Decision::Rejected {
            by: approval.by,
            reason: approval.reason,
        });
    }

    let mut done = Vec::new();
    for task in onboarding_tasks(&vendor) {
        done.push(run_task(&task).await?);
        checkpoint!("task_done");
    }
    Ok(Decision::Approved {
        security,
        approved_by: approval.by,
        done,
    })
}

// ---------------------------------------------------------------------------
// The command line: one stage per process.

#[derive(Parser, Debug)]
#[command(about = "A vendor onboarding workflow that pauses for finance approval")]
struct Args {
    /// The SQLite database holding the run.
    #[arg(long, global = true)]
    db: Option<PathBuf>,
    /// One stage of the story; without one, the whole story runs, each stage
    /// in a child process.
    #[command(subcommand)]
    stage: Option<Stage>,
}

#[derive(Subcommand, Debug, Clone)]
enum Stage {
    /// Start the run: it works until it waits for finance approval.
    Start,
    /// Deliver finance's answer (a signal) without running the workflow.
    Approve {
        /// Reject the vendor, with this reason.
        #[arg(long, value_name = "REASON")]
        reject: Option<String>,
        /// Who decides.
        #[arg(long, default_value = "grace@finance")]
        by: String,
    },
    /// Resume the run after the approval and finish it.
    Resume,
    /// Print status, result, checkpoint versions and history.
    Show,
}

fn default_db() -> PathBuf {
    std::env::temp_dir().join("checkpoint-vendor-approval.db")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    let db = args.db.clone().unwrap_or_else(default_db);
    let result = match args.stage {
        None => full_story(&db),
        Some(stage) => run_stage(&db, stage).await,
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Runs each stage in a child process, as separate programs would.
fn full_story(db: &Path) -> Result<(), Box<dyn std::error::Error>> {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
    println!("== vendor approval: the whole story, one process per stage ==");
    println!("database: {} (removed first)\n", db.display());

    let stages: [(&str, &[&str]); 4] = [
        (
            "1. start the run; it pauses for finance approval and the process exits",
            &["start"],
        ),
        (
            "2. later, another process: finance approves (a signal; no workflow code runs)",
            &["approve"],
        ),
        (
            "3. a third process resumes the run right after the wait and completes it",
            &["resume"],
        ),
        ("4. inspect the run", &["show"]),
    ];
    let exe = std::env::current_exe()?;
    for (title, stage_args) in stages {
        println!("--- {title}");
        let status = Command::new(&exe)
            .arg("--db")
            .arg(db)
            .args(stage_args)
            .status()?;
        if !status.success() {
            return Err(format!("stage `{}` failed: {status}", stage_args.join(" ")).into());
        }
        println!();
    }
    println!("== done: three processes, one run ==");
    Ok(())
}

/// The store as a worker (it executes the runs of `vendor_approval` in the
/// background from now on), or as a client that only signals and inspects.
async fn open(db: &Path, executes: bool) -> Result<Runtime, Error> {
    let url = db.to_string_lossy();
    if !executes {
        return Runtime::builder().client_only().open(&url).await;
    }
    let rt = Runtime::open(&url).await?;
    rt.register(vendor_approval);
    Ok(rt)
}

async fn run_stage(db: &Path, stage: Stage) -> Result<(), Box<dyn std::error::Error>> {
    let rt = open(db, matches!(stage, Stage::Start | Stage::Resume)).await?;
    if !matches!(stage, Stage::Start) {
        if let Err(Error::UnknownRun { .. }) = rt.status(RUN_ID).await {
            return Err(format!(
                "no run `{RUN_ID}` in {}: run the `start` stage first",
                db.display()
            )
            .into());
        }
    }
    match stage {
        Stage::Start => {
            say(&format!("opened {}", db.display()));
            let vendor = Vendor {
                name: "Acme Analytics GmbH".into(),
                country: "Germany".into(),
                annual_spend_eur: 120_000,
                handles_customer_data: true,
            };
            let existed = rt.status(RUN_ID).await.is_ok();
            // Idempotent per id: starting it again does not create a second run.
            let h = rt.start(vendor_approval, RUN_ID, vendor).await?;
            if existed {
                say(&format!(
                    "run `{}` already exists; not started again",
                    h.id()
                ));
            } else {
                say(&format!("started run `{}`", h.id()));
            }
            // It executes in the background; wait until it waits for finance.
            rt.run_until_idle().await?;
            say(&format!("status: {}", h.status().await?));
            say("exiting; nothing about this run is left in memory anywhere");
        }
        Stage::Approve { reject, by } => {
            let status = rt.status(RUN_ID).await?;
            say(&format!("status: {status}"));
            if status.is_finished() {
                return Err(format!("run `{RUN_ID}` is {status}: nothing to approve").into());
            }
            let approval = match reject {
                Some(reason) => Approval {
                    approved: false,
                    by,
                    reason,
                },
                None => Approval {
                    approved: true,
                    by,
                    reason: "within budget".into(),
                },
            };
            rt.signal(RUN_ID, "finance_approval", &approval).await?;
            say(&format!(
                "sent `finance_approval` to `{RUN_ID}`: {}",
                serde_json::to_string(&approval)?
            ));
            say("exiting without running the workflow (a client-only runtime executes nothing)");
        }
        Stage::Resume => {
            say(&format!("status before: {}", rt.status(RUN_ID).await?));
            // Opening the store and registering the workflow resumed the
            // signalled run in the background, from its latest checkpoint;
            // wait until nothing is left to do.
            rt.run_until_idle().await?;
            let status = rt.status(RUN_ID).await?;
            say(&format!("status after: {status}"));
            if status.is_finished() {
                let out = rt.handle(vendor_approval, RUN_ID).result().await?;
                say(&format!("result: {out:?}"));
            }
        }
        Stage::Show => show(&rt).await?,
    }
    Ok(())
}

async fn show(rt: &Runtime) -> Result<(), Error> {
    let status = rt.status(RUN_ID).await?;
    println!("run `{RUN_ID}`: {status}");
    if status.is_finished() {
        match rt.handle(vendor_approval, RUN_ID).result().await? {
            Ok(decision) => println!("decision: {decision:#?}"),
            Err(e) => println!("workflow error: {e}"),
        }
    }

    println!("\ncheckpoint versions:");
    println!(
        "  {:>3}  {:<18} {:<12} {:>6}  fields",
        "seq", "label", "time (UTC)", "bytes"
    );
    for c in rt.checkpoints(RUN_ID).await? {
        let fields: Vec<String> = c
            .fields
            .iter()
            .map(|f| format!("{}: {}", f.name, short_type(&f.type_name)))
            .collect();
        println!(
            "  {:>3}  {:<18} {:<12} {:>6}  {}",
            c.seq,
            c.label
                .clone()
                .unwrap_or_else(|| format!("(site {})", c.site)),
            clock(c.created_at),
            c.size,
            fields.join(", ")
        );
    }

    println!("\nhistory:");
    for e in rt.history_entries(RUN_ID).await? {
        println!("  {}  {}", clock(e.at), e.event);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Output helpers.

/// One line of narration, tagged with the process id so the three processes
/// of the story are told apart.
fn say(msg: &str) {
    println!("  [pid {:>6}] {msg}", std::process::id());
}

/// `HH:MM:SS.mmm` (UTC) of a time stamp.
fn clock(t: SystemTime) -> String {
    let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis();
    let secs = (ms / 1000) % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60,
        ms % 1000
    )
}

/// `alloc::vec::Vec<alloc::string::String>` -> `Vec<String>`.
fn short_type(t: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    for ch in t.chars() {
        if ch.is_alphanumeric() || ch == '_' || ch == ':' {
            word.push(ch);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or(&word));
            word.clear();
            out.push(ch);
        }
    }
    out.push_str(word.rsplit("::").next().unwrap_or(&word));
    out
}
