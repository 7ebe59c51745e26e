//! A workflow that reviews a list of documents, pauses for a human approval,
//! and resumes where it was after the process is gone.
//!
//! ```text
//! cargo run --example quickstart
//! ```

use checkpoint_runtime::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Approval {
    approved: bool,
    by: String,
}

#[workflow]
async fn review(ctx: &Ctx, docs: Vec<String>) -> Result<String, String> {
    let mut summaries = Vec::new();
    for doc in &docs {
        // Expensive work (an LLM call, an API request...) runs once per item:
        // after a crash, the run continues at the next document.
        summaries.push(format!("{doc}: {} words", doc.split_whitespace().count()));
        checkpoint!("summarised");
    }
    // Suspends durably: no process needs to stay alive while a person decides.
    let approval: Approval = ctx.wait_for("approval").await;
    if !approval.approved {
        return Err(format!("rejected by {}", approval.by));
    }
    Ok(format!(
        "{} documents approved by {}: {summaries:?}",
        docs.len(),
        approval.by
    ))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let path = std::env::temp_dir().join("checkpoint-quickstart.db");
    let url = path.to_string_lossy().to_string();
    let _ = std::fs::remove_file(&path);

    // 1. Start the run: it executes in the background until it waits for
    // the approval (`run_until_idle` waits for that).
    let rt = Runtime::open(&url).await?;
    rt.register(review);
    let docs = vec![
        "the quick brown fox".to_string(),
        "jumps over".to_string(),
        "the lazy dog".to_string(),
    ];
    let h = rt.start(review, "review-1", docs).await?;
    rt.run_until_idle().await?;
    println!("status after the first run: {:?}", h.status().await?);
    drop(rt); // the process could exit here

    // 2. Later, anywhere: a person approves, and a fresh runtime that
    // registers the workflow resumes the run by itself; `result` waits.
    let rt = Runtime::open(&url).await?;
    rt.register(review);
    rt.signal(
        "review-1",
        "approval",
        &Approval {
            approved: true,
            by: "ada".into(),
        },
    )
    .await?;
    let out = rt.handle(review, "review-1").result().await?;
    println!("result: {out:?}");

    println!("\ncheckpoints:");
    for c in rt.checkpoints("review-1").await? {
        let fields: Vec<String> = c
            .fields
            .iter()
            .map(|f| format!("{}: {}", f.name, f.type_name))
            .collect();
        println!(
            "  #{} {:<12} {:>4} bytes  [{}]",
            c.seq,
            c.label.as_deref().unwrap_or("-"),
            c.size,
            fields.join(", ")
        );
    }
    println!("\nhistory:");
    for e in rt.history("review-1").await? {
        println!("  {e:?}");
    }
    Ok(())
}
