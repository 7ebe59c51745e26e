//! An AI agent's turn that calls three tools in parallel, each as a child
//! run; one of them (a payment) waits for a person's approval.
//!
//! ```text
//! cargo run --example parallel_tools
//! ```
//!
//! starts the turn on an SQLite file, shows the tree of runs while the
//! payment waits (the turn holds no worker while it waits), approves it the
//! way another process would (`checkpoint signal` does the same), and prints
//! the turn's transcript. Each tool call is its own run with its own
//! checkpoints and history, executed by any worker; a crash of the agent's
//! process while the tools run loses none of them, and runs none twice.

use std::time::Duration;

use checkpoint_runtime::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ToolCall {
    tool: String,
    arg: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Approval {
    approved: bool,
    by: String,
}

/// One tool call (a child run). The payment tool waits for approval first.
#[workflow]
async fn call_tool(ctx: &Ctx, call: ToolCall) -> Result<String, String> {
    if call.tool == "pay" {
        let approval: Approval = ctx.wait_for("approval").await;
        if !approval.approved {
            return Err(format!(
                "payment of {} refused by {}",
                call.arg, approval.by
            ));
        }
    }
    // A real tool calls an API here, with `ctx.idempotency_key()`.
    tokio::time::sleep(Duration::from_millis(20)).await;
    checkpoint!("called");
    Ok(format!("{}({}) -> ok", call.tool, call.arg))
}

/// The agent's turn: the model asked for three tool calls at once.
#[workflow]
async fn agent_turn(ctx: &Ctx, calls: Vec<ToolCall>) -> Vec<String> {
    let mut transcript = vec![format!("model: calling {} tools", calls.len())];
    let mut running = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        running.push(
            ctx.spawn(call_tool, &format!("tool-{i}"), call.clone())
                .await,
        );
    }
    // Suspends durably until all three have ended, in whichever process.
    let results = ctx.join_all(running).await;
    for (call, result) in calls.iter().zip(results) {
        transcript.push(match result {
            Ok(Ok(text)) => text,
            Ok(Err(refused)) => format!("{}: {refused}", call.tool),
            Err(child) => format!("{}: {child}", call.tool),
        });
    }
    checkpoint!("answered");
    transcript.push("model: done".to_owned());
    transcript
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let path = std::env::temp_dir().join(format!("parallel-tools-{}.db", std::process::id()));
    let rt = Runtime::open(path.to_str().expect("a UTF-8 path")).await?;
    rt.register(call_tool);
    let calls = [
        ("search", "flights to Lisbon"),
        ("pay", "$420"),
        ("email", "alice"),
    ]
    .map(|(tool, arg)| ToolCall {
        tool: tool.into(),
        arg: arg.into(),
    })
    .to_vec();
    let turn = rt.start(agent_turn, "turn-1", calls).await?;
    rt.run_until_idle().await?;

    println!("while the payment waits:");
    println!("  {}  {}", turn.id(), turn.status().await?);
    for child in rt.runs(RunFilter::new().parent("turn-1")).await? {
        println!("  └─ {}  {}", child.id, child.status);
    }

    // What a person's click (or `checkpoint signal turn-1/tool-1 approval ..`) does.
    let approval = Approval {
        approved: true,
        by: "dana".into(),
    };
    rt.signal("turn-1/tool-1", "approval", &approval).await?;
    println!("\ntranscript:");
    for line in turn.result().await? {
        println!("  {line}");
    }
    drop(rt);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}
