//! Test helper for `tests/crash_shapes.rs`: runs one of a few realistic
//! workflows, each built around one of the shapes `#[workflow]` resumes
//! exactly (explicit state machines, hash-map loops, `iter_mut()` writes,
//! `0..q.len()` over a queue the body changes, `let x;` assigned in branches,
//! a suspension call as a `match` scrutinee), on an SQLite file in a child
//! process that the test can step and SIGKILL.
//!
//! The protocol is `checkpoint-test-worker`'s (see `common/`): every side
//! effect is appended (and fsynced) to the log as `<unix nanos> <worker id>
//! <text>`; at every durable point (right after each `checkpoint!()`
//! returns, and right after a resumed `wait_for_timeout` returns) the
//! workflow prints `CHECKPOINT <n> <label> <detail>` and, with `--step`,
//! waits for a line `go` on stdin. Each workflow builds its own input, so a
//! run is determined by `--workflow` alone.
//!
//! ```text
//! checkpoint-shapes-worker start  --workflow W --db F --id ID --log L [--step|--step-blocking] [--worker-id WID]
//! checkpoint-shapes-worker resume --workflow W --db F --id ID --log L [--step|--step-blocking] [--worker-id WID]
//! checkpoint-shapes-worker signal --db F --id ID --name NAME --json JSON
//! checkpoint-shapes-worker result --workflow W --db F --id ID
//! ```
//!
//! Workflows: `agent`, `invoices`, `tickets`, `crawl`, `settle`. `settle`
//! waits (`wait_for_timeout`, [`SETTLE_TIMEOUT_MS`]) for a signal
//! `decision-<order>` with a [`Decision`] per order.
#![forbid(unsafe_code)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use checkpoint_runtime::prelude::*;
use common::{drive, effect, out, print_result, step, Env, Stepping};
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------
// agent: an explicit state machine whose states carry a growing history.

#[derive(Serialize, Deserialize, Clone, Debug)]
enum AgentState {
    Plan {
        goal: String,
        history: Vec<String>,
    },
    Act {
        steps: Vec<String>,
        done: Vec<String>,
        history: Vec<String>,
    },
    Reflect {
        done: Vec<String>,
        history: Vec<String>,
        attempts: u32,
    },
    Done {
        answer: String,
        history: Vec<String>,
    },
}

#[derive(Serialize, Deserialize, Clone, Debug)]
struct AgentReport {
    answer: String,
    history: Vec<String>,
    turns: u32,
}

#[workflow]
async fn agent(ctx: &Ctx, goal: String) -> AgentReport {
    let mut state = AgentState::Plan {
        goal,
        history: Vec::new(),
    };
    let mut turns = 0u32;
    loop {
        turns += 1;
        state = match state {
            AgentState::Plan { goal, mut history } => {
                effect(ctx, &format!("plan {goal}"));
                // A stack of tool calls: the first word is called first.
                let steps: Vec<String> = goal.split(' ').rev().map(str::to_owned).collect();
                history.push(format!("turn {turns}: planned {} calls", steps.len()));
                checkpoint!("planned");
                step(ctx, "planned", &goal.replace(' ', "_")).await;
                AgentState::Act {
                    steps,
                    done: Vec::new(),
                    history,
                }
            }
            AgentState::Act {
                mut steps,
                mut done,
                mut history,
            } => {
                if let Some(call) = steps.pop() {
                    effect(ctx, &format!("tool {call} after {}", done.len()));
                    done.push(call.to_uppercase());
                    history.push(format!("turn {turns}: called {call}"));
                    checkpoint!("acted");
                    step(ctx, "acted", &call).await;
                    AgentState::Act {
                        steps,
                        done,
                        history,
                    }
                } else {
                    AgentState::Reflect {
                        done,
                        history,
                        attempts: 0,
                    }
                }
            }
            AgentState::Reflect {
                done,
                mut history,
                attempts,
            } if attempts < 2 => {
                effect(ctx, &format!("reflect {attempts} on {}", done.len()));
                history.push(format!("turn {turns}: reflected ({attempts})"));
                checkpoint!("reflected");
                step(ctx, "reflected", &attempts.to_string()).await;
                AgentState::Reflect {
                    done,
                    history,
                    attempts: attempts + 1,
                }
            }
            AgentState::Reflect { done, history, .. } => AgentState::Done {
                answer: done.join("+"),
                history,
            },
            AgentState::Done { answer, history } => {
                break AgentReport {
                    answer,
                    history,
                    turns,
                }
            }
        };
    }
}

// ---------------------------------------------------------------------------
// invoices: a loop over a HashMap, a checkpoint and a side effect per entry.

#[derive(Serialize, Deserialize, Clone, Debug)]
struct InvoiceReport {
    /// `"<customer>:<amount>"` in the order the loop took them.
    sent: Vec<String>,
    total: u64,
}

#[workflow]
async fn invoices(ctx: &Ctx, due: HashMap<String, u64>) -> InvoiceReport {
    let mut sent = Vec::new();
    let mut total = 0;
    for (customer, amount) in &due {
        effect(ctx, &format!("invoice {customer} {amount}"));
        total += amount;
        sent.push(format!("{customer}:{amount}"));
        checkpoint!("invoiced");
        step(ctx, "invoiced", customer).await;
    }
    InvoiceReport { sent, total }
}

// ---------------------------------------------------------------------------
// tickets: writes through iter_mut() on both sides of two checkpoints.

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Ticket {
    id: u32,
    priority: u8,
    status: String,
    notes: Vec<String>,
}

#[workflow]
async fn tickets(ctx: &Ctx, mut tickets: Vec<Ticket>) -> Vec<Ticket> {
    for t in tickets.iter_mut() {
        t.status = if t.priority >= 3 {
            "escalated"
        } else {
            "queued"
        }
        .to_owned();
        checkpoint!("classified");
        step(ctx, "classified", &t.id.to_string()).await;
        // The status written before the checkpoint must be there after it.
        effect(ctx, &format!("notify {} {}", t.id, t.status));
        t.notes.push(format!("owner notified: {}", t.status));
        checkpoint!("notified");
        step(ctx, "notified", &t.id.to_string()).await;
    }
    tickets
}

// ---------------------------------------------------------------------------
// crawl: breadth-first over a site map, level by level (`0..q.len()` while
// the body pops and pushes `q`).

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Crawl {
    order: Vec<String>,
    /// How many pages had been fetched at the end of each level.
    levels: Vec<usize>,
}

#[workflow]
async fn crawl(ctx: &Ctx, links: BTreeMap<String, Vec<String>>, root: String) -> Crawl {
    let mut q = VecDeque::from([root.clone()]);
    let mut seen = BTreeSet::from([root]);
    let mut order = Vec::new();
    let mut levels = Vec::new();
    while !q.is_empty() {
        for _ in 0..q.len() {
            let page = q.pop_front().unwrap_or_default();
            effect(ctx, &format!("fetch {page}"));
            for link in links.get(&page).into_iter().flatten() {
                if seen.insert(link.clone()) {
                    q.push_back(link.clone());
                }
            }
            order.push(page.clone());
            checkpoint!("fetched");
            step(ctx, "fetched", &page).await;
        }
        levels.push(order.len());
    }
    Crawl { order, levels }
}

// ---------------------------------------------------------------------------
// settle: `let outcome;` assigned in branches (one with a checkpoint), then
// a `wait_for_timeout` as a `match` scrutinee, per order.

/// How long `settle` waits for each order's decision.
const SETTLE_TIMEOUT_MS: u64 = 300;

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Order {
    id: String,
    paid: bool,
    amount: u64,
}

/// The payload of the `decision-<order>` signals.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct Decision {
    approved: bool,
    by: String,
}

#[workflow]
async fn settle(ctx: &Ctx, orders: Vec<Order>) -> Vec<String> {
    let mut settled = Vec::new();
    for order in &orders {
        let outcome;
        if order.paid {
            effect(ctx, &format!("capture {} {}", order.id, order.amount));
            checkpoint!("paid");
            step(ctx, "paid", &order.id).await;
            outcome = format!("captured {}", order.amount);
        } else {
            effect(ctx, &format!("remind {}", order.id));
            outcome = "reminded".to_owned();
        }
        let verdict = match ctx
            .wait_for_timeout::<Decision>(
                &format!("decision-{}", order.id),
                Duration::from_millis(SETTLE_TIMEOUT_MS),
            )
            .await
        {
            Some(d) if d.approved => {
                step(ctx, "decided", &format!("{}-approved", order.id)).await;
                effect(ctx, &format!("ship {} for {}", order.id, d.by));
                format!("approved by {}", d.by)
            }
            Some(d) => {
                step(ctx, "decided", &format!("{}-rejected", order.id)).await;
                effect(ctx, &format!("refund {} for {}", order.id, d.by));
                format!("rejected by {}", d.by)
            }
            None => {
                step(ctx, "decided", &format!("{}-timeout", order.id)).await;
                effect(ctx, &format!("escalate {}", order.id));
                "timed out".to_owned()
            }
        };
        settled.push(format!("{}: {outcome}, {verdict}", order.id));
    }
    settled
}

// ---------------------------------------------------------------------------
// Inputs.

fn agent_input() -> String {
    "search compare book pay confirm".to_owned()
}

fn invoices_input() -> HashMap<String, u64> {
    (1..=20)
        .map(|i: u64| (format!("customer-{i:02}"), 100 + (i * 37) % 90))
        .collect()
}

fn tickets_input() -> Vec<Ticket> {
    [(101, 1), (102, 4), (103, 3), (104, 2)]
        .into_iter()
        .map(|(id, priority)| Ticket {
            id,
            priority,
            status: "new".to_owned(),
            notes: vec!["opened".to_owned()],
        })
        .collect()
}

fn crawl_input() -> (BTreeMap<String, Vec<String>>, String) {
    let links = [
        ("home", &["docs", "blog", "about"][..]),
        ("docs", &["install", "api", "home"]),
        ("blog", &["post-1", "post-2", "docs"]),
        ("about", &["home"]),
        ("api", &["install"]),
        ("post-2", &["post-1", "api"]),
    ];
    let links = links
        .into_iter()
        .map(|(page, to)| {
            (
                page.to_owned(),
                to.iter().map(|s| (*s).to_owned()).collect(),
            )
        })
        .collect();
    (links, "home".to_owned())
}

fn settle_input() -> Vec<Order> {
    [
        ("o1", true, 120),
        ("o2", false, 80),
        ("o3", true, 45),
        ("o4", false, 60),
    ]
    .into_iter()
    .map(|(id, paid, amount)| Order {
        id: id.to_owned(),
        paid,
        amount,
    })
    .collect()
}

// ---------------------------------------------------------------------------
// Command line.

#[derive(Default)]
struct Args {
    command: String,
    workflow: Option<String>,
    db: Option<String>,
    id: Option<String>,
    log: Option<PathBuf>,
    step: Stepping,
    worker_id: Option<String>,
    name: Option<String>,
    json: Option<String>,
}

fn usage(msg: &str) -> ! {
    eprintln!("checkpoint-shapes-worker: {msg}");
    eprintln!(
        "usage: checkpoint-shapes-worker start|resume|signal|result --db FILE --id ID \
         [--workflow agent|invoices|tickets|crawl|settle] [--log FILE] [--step|--step-blocking] \
         [--worker-id W] [--name NAME --json JSON]"
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
            "--workflow" => a.workflow = Some(value()),
            "--db" => a.db = Some(value()),
            "--id" => a.id = Some(value()),
            "--log" => a.log = Some(PathBuf::from(value())),
            "--step" => a.step = Stepping::Async,
            "--step-blocking" => a.step = Stepping::Blocking,
            "--worker-id" => a.worker_id = Some(value()),
            "--name" => a.name = Some(value()),
            "--json" => a.json = Some(value()),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    a
}

/// What a process opens its runtime as.
enum Role {
    /// Executes runs (with the side-effect log, when it has one).
    Worker(Option<Env>),
    /// Signals and inspects, never executes.
    Client,
}

async fn open(a: &Args, role: Role) -> Result<Runtime, Error> {
    let db = a.db.as_deref().unwrap_or_else(|| usage("--db is required"));
    let mut b = Runtime::builder();
    if let Some(w) = &a.worker_id {
        b = b.worker_id(w);
    }
    match role {
        Role::Worker(Some(env)) => b = b.resource(env),
        Role::Worker(None) => {}
        // A client (signal, result): it signals and inspects, never executes.
        Role::Client => b = b.client_only(),
    }
    let rt = b.open(db).await?;
    rt.register(agent);
    rt.register(invoices);
    rt.register(tickets);
    rt.register(crawl);
    rt.register(settle);
    Ok(rt)
}

/// Starts the run of `workflow` with its input.
async fn start(rt: &Runtime, workflow: &str, id: &str) -> Result<(), Error> {
    match workflow {
        "agent" => drop(rt.start(agent, id, agent_input()).await?),
        "invoices" => drop(rt.start(invoices, id, invoices_input()).await?),
        "tickets" => drop(rt.start(tickets, id, tickets_input()).await?),
        "crawl" => drop(rt.start(crawl, id, crawl_input()).await?),
        "settle" => drop(rt.start(settle, id, settle_input()).await?),
        other => usage(&format!("unknown workflow {other}")),
    }
    Ok(())
}

/// Prints the output of the completed run of `workflow`.
async fn print_output(rt: &Runtime, workflow: &str, id: &str) -> Result<(), Error> {
    match workflow {
        "agent" => print_result(&rt.handle(agent, id).result().await?),
        "invoices" => print_result(&rt.handle(invoices, id).result().await?),
        "tickets" => print_result(&rt.handle(tickets, id).result().await?),
        "crawl" => print_result(&rt.handle(crawl, id).result().await?),
        "settle" => print_result(&rt.handle(settle, id).result().await?),
        other => usage(&format!("unknown workflow {other}")),
    }
    Ok(())
}

async fn main_async(a: Args) -> Result<i32, Error> {
    let id = a.id.clone().unwrap_or_else(|| usage("--id is required"));
    let workflow = || {
        a.workflow
            .as_deref()
            .unwrap_or_else(|| usage("--workflow is required"))
    };
    match a.command.as_str() {
        "start" | "resume" => {
            let log = a.log.clone().unwrap_or_else(|| usage("--log is required"));
            let rt = open(&a, Role::Worker(Some(Env::new(log, a.step)))).await?;
            if a.command == "start" {
                start(&rt, workflow(), &id).await?;
                out("STARTED");
            }
            match drive(&rt, &id).await? {
                Some(code) => Ok(code),
                None => {
                    print_output(&rt, workflow(), &id).await?;
                    Ok(0)
                }
            }
        }
        "signal" => {
            let name = a.name.as_deref().unwrap_or_else(|| usage("--name needed"));
            let json = a.json.as_deref().unwrap_or_else(|| usage("--json needed"));
            let payload: serde_json::Value =
                serde_json::from_str(json).unwrap_or_else(|e| usage(&format!("bad --json: {e}")));
            let rt = open(&a, Role::Client).await?;
            rt.signal(&id, name, &payload).await?;
            out("SIGNALLED");
            Ok(0)
        }
        "result" => {
            let rt = open(&a, Role::Client).await?;
            match rt.status(&id).await? {
                Status::Completed => {
                    print_output(&rt, workflow(), &id).await?;
                    Ok(0)
                }
                other => {
                    out(&format!("STATUS {other}"));
                    Ok(1)
                }
            }
        }
        other => usage(&format!("unknown command {other}")),
    }
}

fn main() {
    common::exit_with(main_async(parse_args()))
}
