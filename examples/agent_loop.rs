//! An AI agent loop as one `#[workflow]`: plan, call tools, observe, repeat;
//! with retry counters kept in the checkpoint, and a checkpoint right before a
//! risky external action (a booking that charges money), which is sent with
//! `ctx.idempotency_key()` so that running that step again cannot charge twice.
//!
//! The "model" is scripted (deterministic, no network) and the tools fail
//! sometimes, deterministically: `search_flights` fails on its first attempt,
//! `search_hotels` on its first two. Each failure bumps a retry counter that
//! is saved with the next checkpoint, so a crash does not reset it.
//!
//! ```text
//! cargo run --example agent_loop
//! ```
//!
//! runs the whole agent in one process and prints the trace, the checkpoint
//! versions and the history. Kill it and resume it:
//!
//! ```text
//! # exits (status 3) right after this process saved its 4th checkpoint
//! cargo run --example agent_loop -- --crash-after 4
//! # the same command without the flag resumes from that checkpoint: the
//! # plan, the observations and the retry counters are restored, the tools
//! # that already answered are not called again
//! cargo run --example agent_loop
//!
//! # exits right after the booking service charged, before the checkpoint
//! # that records the booking: the step runs again on resume, with the same
//! # idempotency key, and the service returns the first booking
//! cargo run --example agent_loop -- --crash-during-booking
//! cargo run --example agent_loop
//! ```
//!
//! State lives in `--db PATH` (default `$TMPDIR/checkpoint-agent-loop.db`);
//! the booking service keeps its ledger next to it (`PATH.bookings.json`).
//! An unfinished run there is resumed; a finished one is cleared first, so
//! each plain run after a finished one starts a new agent run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use checkpoint_runtime::prelude::*;
use clap::Parser;
use serde::{Deserialize, Serialize};

const RUN_ID: &str = "trip-agent-1";
/// Attempts per tool call before the agent gives up.
const MAX_ATTEMPTS: u32 = 4;

// ---------------------------------------------------------------------------
// The agent's vocabulary.

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Goal {
    destination: String,
    nights: u32,
    budget_eur: u32,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Tool {
    SearchFlights,
    SearchHotels,
    Weather,
}

impl std::fmt::Display for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tool::SearchFlights => "search_flights",
            Tool::SearchHotels => "search_hotels",
            Tool::Weather => "weather",
        })
    }
}

/// What the model decides to do next.
#[derive(Serialize, Deserialize, Clone, Debug)]
enum Action {
    Call { tool: Tool, query: String },
    Book { offer: String, total_eur: u32 },
    Finish { answer: String },
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Call { tool, query } => write!(f, "call {tool}({query:?})"),
            Action::Book { offer, total_eur } => write!(f, "book {offer:?} for {total_eur} EUR"),
            Action::Finish { answer } => write!(f, "finish: {answer}"),
        }
    }
}

/// A tool's answer, as the model sees it.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct Observation {
    tool: Tool,
    text: String,
    price_eur: Option<u32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Booking {
    confirmation: String,
    charged_eur: u32,
    idempotency_key: String,
}

#[derive(Serialize, Deserialize, Debug)]
struct Report {
    answer: String,
    booking: Option<Booking>,
    failed_attempts: BTreeMap<Tool, u32>,
    trace: Vec<String>,
}

#[derive(Serialize, Deserialize, Debug)]
enum AgentError {
    ToolGaveUp {
        tool: Tool,
        attempts: u32,
        last: String,
    },
    Booking(String),
}

impl std::fmt::Display for AgentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentError::ToolGaveUp {
                tool,
                attempts,
                last,
            } => write!(f, "{tool} failed {attempts} times, last: {last}"),
            AgentError::Booking(e) => write!(f, "booking failed: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------
// The scripted model: a pure function of the goal and what was observed, so
// the run is reproducible (a real one would be an LLM call).

mod model {
    use super::*;

    pub fn plan(goal: &Goal) -> Vec<String> {
        vec![
            format!("find flights to {}", goal.destination),
            format!("find a hotel for {} nights", goal.nights),
            "check the weather".into(),
            format!("book if the total is within {} EUR", goal.budget_eur),
            "report".into(),
        ]
    }

    pub fn next_action(goal: &Goal, seen: &[Observation], booking: Option<&Booking>) -> Action {
        let find = |t: Tool| seen.iter().find(|o| o.tool == t);
        let (Some(flight), Some(hotel), Some(weather)) = (
            find(Tool::SearchFlights),
            find(Tool::SearchHotels),
            find(Tool::Weather),
        ) else {
            let (tool, query) = if find(Tool::SearchFlights).is_none() {
                (Tool::SearchFlights, format!("BER -> {}", goal.destination))
            } else if find(Tool::SearchHotels).is_none() {
                (
                    Tool::SearchHotels,
                    format!("{}, {} nights", goal.destination, goal.nights),
                )
            } else {
                (Tool::Weather, goal.destination.clone())
            };
            return Action::Call { tool, query };
        };
        let total = flight.price_eur.unwrap_or(0) + hotel.price_eur.unwrap_or(0);
        match booking {
            None if total <= goal.budget_eur => Action::Book {
                offer: format!("{} + {}", flight.text, hotel.text),
                total_eur: total,
            },
            None => Action::Finish {
                answer: format!(
                    "no trip to {} within {} EUR (cheapest is {total} EUR)",
                    goal.destination, goal.budget_eur
                ),
            },
            Some(b) => Action::Finish {
                answer: format!(
                    "booked {} nights in {} for {} EUR (confirmation {}); {}",
                    goal.nights, goal.destination, b.charged_eur, b.confirmation, weather.text
                ),
            },
        }
    }
}

// ---------------------------------------------------------------------------
// Tools that fail sometimes. Whether a call fails depends only on the tool and
// the attempt number, and the attempt number comes from the checkpointed
// retry counters: the same failures happen after a crash.

mod tools {
    use super::*;

    pub async fn call(tool: Tool, query: &str, attempt: u32) -> Result<Observation, String> {
        tokio::time::sleep(Duration::from_millis(40)).await; // the network
        match (tool, attempt) {
            (Tool::SearchFlights, 1) => Err("503 Service Unavailable".into()),
            (Tool::SearchHotels, 1 | 2) => Err(format!("timeout after 2s ({query})")),
            (Tool::SearchFlights, _) => Ok(Observation {
                tool,
                text: "flight TP 541 BER-LIS return".into(),
                price_eur: Some(214),
            }),
            (Tool::SearchHotels, _) => Ok(Observation {
                tool,
                text: "Casa do Rio, 3 nights".into(),
                price_eur: Some(396),
            }),
            (Tool::Weather, _) => Ok(Observation {
                tool,
                text: format!("{query} next week: 24°C and sunny"),
                price_eur: None,
            }),
        }
    }
}

/// The risky external action: a booking service that charges money and
/// deduplicates requests by idempotency key. Its ledger is a file, so it
/// outlives the agent's process like a real service would.
struct BookingService {
    ledger: PathBuf,
}

impl BookingService {
    fn book(&self, key: &str, offer: &str, total_eur: u32) -> Result<Booking, AgentError> {
        let err = |e: &dyn std::fmt::Display| AgentError::Booking(e.to_string());
        let mut ledger: BTreeMap<String, Booking> = match std::fs::read(&self.ledger) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| err(&e))?,
            Err(_) => BTreeMap::new(),
        };
        if let Some(existing) = ledger.get(key) {
            println!(
                "      [booking service] key {key} seen before: returning {}, no second charge",
                existing.confirmation
            );
            return Ok(existing.clone());
        }
        let booking = Booking {
            confirmation: format!("BK-{}", 7000 + ledger.len()),
            charged_eur: total_eur,
            idempotency_key: key.to_owned(),
        };
        println!(
            "      [booking service] charged {total_eur} EUR for {offer:?}: {} (key {key})",
            booking.confirmation
        );
        ledger.insert(key.to_owned(), booking.clone());
        let json = serde_json::to_vec_pretty(&ledger).map_err(|e| err(&e))?;
        std::fs::write(&self.ledger, json).map_err(|e| err(&e))?;
        Ok(booking)
    }

    fn charges(&self) -> usize {
        std::fs::read(&self.ledger)
            .ok()
            .and_then(|b| serde_json::from_slice::<BTreeMap<String, Booking>>(&b).ok())
            .map_or(0, |l| l.len())
    }
}

/// Prints the trace as it happens and simulates crashes (`--crash-after`,
/// `--crash-during-booking`). A resource: shared, never saved.
struct Console {
    crash_after: Option<u64>,
    crash_during_booking: bool,
    saved: AtomicU64,
}

impl Console {
    /// Called right after each `checkpoint!()` returns (the state is durable).
    fn saved(&self, label: &str) {
        let n = self.saved.fetch_add(1, Ordering::SeqCst) + 1;
        println!("      (checkpoint `{label}` saved; {n} in this process)");
        if self.crash_after == Some(n) {
            println!(
                "\n*** simulated crash: exiting right after checkpoint {n} of this process ***"
            );
            println!("*** run the same command without --crash-after to resume ***");
            std::process::exit(3);
        }
    }

    fn after_charge(&self) {
        if self.crash_during_booking {
            println!("\n*** simulated crash: the booking was charged, the checkpoint after it not saved ***");
            println!("*** run again without --crash-during-booking to resume ***");
            std::process::exit(3);
        }
    }
}

/// Called right after each `checkpoint!()`. A resumed run also starts here
/// (right after its latest checkpoint), with `ctx.attempt() > 1`.
fn saved(ctx: &Ctx, label: &str) {
    if ctx.attempt() > 1 {
        println!(
            "      (resumed right after checkpoint `{label}`, attempt {})",
            ctx.attempt()
        );
    } else {
        ctx.resource::<Console>().saved(label);
    }
}

/// Appends a line to the trace (part of the workflow's state) and prints it.
fn note(trace: &mut Vec<String>, line: String) {
    println!("  {line}");
    trace.push(line);
}

// ---------------------------------------------------------------------------
// The workflow.

#[workflow]
async fn trip_agent(ctx: &Ctx, goal: Goal) -> Result<Report, AgentError> {
    let mut trace = Vec::new();
    let plan = model::plan(&goal);
    note(&mut trace, format!("plan: {}", plan.join(" -> ")));
    let mut observations: Vec<Observation> = Vec::new();
    let mut failed_attempts: BTreeMap<Tool, u32> = BTreeMap::new();
    let mut booking: Option<Booking> = None;
    checkpoint!("planned");
    saved(ctx, "planned");

    loop {
        let action = model::next_action(&goal, &observations, booking.as_ref());
        note(&mut trace, format!("think: {action}"));
        match action {
            Action::Call { tool, query } => {
                let attempt = failed_attempts.get(&tool).copied().unwrap_or(0) + 1;
                match tools::call(tool, &query, attempt).await {
                    Ok(obs) => {
                        note(
                            &mut trace,
                            format!("observe: {} (attempt {attempt})", obs.text),
                        );
                        // A clone, not a move: the macro currently saves a
                        // match binding at a checkpoint in its arm even when it
                        // was moved before it (E0382 on `checkpoint!`).
                        observations.push(obs.clone());
                        checkpoint!("observed");
                        saved(ctx, "observed");
                    }
                    Err(e) if attempt >= MAX_ATTEMPTS => {
                        return Err(AgentError::ToolGaveUp {
                            tool,
                            attempts: attempt,
                            last: e,
                        });
                    }
                    Err(e) => {
                        failed_attempts.insert(tool, attempt);
                        note(
                            &mut trace,
                            format!("error: {tool} attempt {attempt}/{MAX_ATTEMPTS} failed: {e}"),
                        );
                        // The counter is saved: after a crash the agent does
                        // not get a fresh set of attempts.
                        checkpoint!("tool_failed");
                        saved(ctx, "tool_failed");
                        tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                    }
                }
            }
            Action::Book { offer, total_eur } => {
                // Everything the agent knows is durable before money moves.
                checkpoint!("before_booking");
                saved(ctx, "before_booking");
                if ctx.attempt() > 1 {
                    note(
                        &mut trace,
                        format!(
                            "note: the booking step runs again (attempt {}); same idempotency key",
                            ctx.attempt()
                        ),
                    );
                }
                // Stable for this run and position: the same key if this step
                // runs again after a crash.
                let key = ctx.idempotency_key();
                let confirmed = ctx
                    .resource::<BookingService>()
                    .book(&key, &offer, total_eur)?;
                ctx.resource::<Console>().after_charge();
                note(
                    &mut trace,
                    format!(
                        "act: booked, confirmation {} ({} EUR)",
                        confirmed.confirmation, confirmed.charged_eur
                    ),
                );
                booking = Some(confirmed);
                checkpoint!("booked");
                saved(ctx, "booked");
            }
            Action::Finish { answer } => {
                note(&mut trace, "done".into());
                return Ok(Report {
                    answer,
                    booking,
                    failed_attempts,
                    trace,
                });
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Driver.

#[derive(Parser, Debug)]
#[command(about = "A checkpointed agent loop with a scripted model")]
struct Args {
    /// The SQLite database holding the run.
    #[arg(long)]
    db: Option<PathBuf>,
    /// Exit the process right after it has saved this many checkpoints.
    #[arg(long, value_name = "N")]
    crash_after: Option<u64>,
    /// Exit the process right after the booking is charged, before the
    /// checkpoint that records it.
    #[arg(long)]
    crash_during_booking: bool,
}

fn remove_db(db: &Path) {
    for suffix in ["", "-wal", "-shm", ".bookings.json"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if let Err(e) = run(Args::parse()).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let db = args
        .db
        .unwrap_or_else(|| std::env::temp_dir().join("checkpoint-agent-loop.db"));
    let url = db.to_string_lossy().to_string();
    let mut ledger = db.as_os_str().to_owned();
    ledger.push(".bookings.json");
    let ledger = PathBuf::from(ledger);

    // What is in the database already?
    {
        let rt = Runtime::open(&url).await?;
        match rt.status(RUN_ID).await {
            Ok(s) if s.is_finished() => {
                println!("a finished run is in {}: clearing it\n", db.display());
                drop(rt);
                remove_db(&db);
            }
            Ok(s) => {
                let latest = rt.checkpoints(RUN_ID).await?.last().map_or(0, |c| c.seq);
                println!(
                    "found run `{RUN_ID}` ({s}) in {}: resuming from checkpoint #{latest}\n",
                    db.display()
                );
            }
            Err(Error::UnknownRun { .. }) => {
                println!("new run `{RUN_ID}` in {}\n", db.display())
            }
            Err(e) => return Err(e),
        }
    }

    let rt = Runtime::builder()
        .resource(Console {
            crash_after: args.crash_after,
            crash_during_booking: args.crash_during_booking,
            saved: AtomicU64::new(0),
        })
        .resource(BookingService {
            ledger: ledger.clone(),
        })
        .open(&url)
        .await?;
    rt.register(trip_agent);
    let goal = Goal {
        destination: "Lisbon".into(),
        nights: 3,
        budget_eur: 900,
    };
    println!(
        "goal: {} nights in {} within {} EUR\n",
        goal.nights, goal.destination, goal.budget_eur
    );
    // Idempotent per id: if the run exists, this is a handle to it.
    let h = rt.start(trip_agent, RUN_ID, goal).await?;
    let report = h.result().await?; // executes (or resumes) the run to its end

    println!("\n== result ==");
    match &report {
        Ok(r) => {
            println!("answer: {}", r.answer);
            println!(
                "failed attempts per tool (from the checkpoints): {:?}",
                r.failed_attempts
            );
            if let Some(b) = &r.booking {
                println!(
                    "booking: {} ({} EUR, key {})",
                    b.confirmation, b.charged_eur, b.idempotency_key
                );
            }
            println!(
                "charges in the booking service's ledger: {}",
                BookingService { ledger }.charges()
            );
            println!("\n== trace (kept in the checkpoints, so it spans processes) ==");
            for (i, line) in r.trace.iter().enumerate() {
                println!("  {:>2}. {line}", i + 1);
            }
        }
        Err(e) => println!("the agent failed: {e}"),
    }

    println!("\n== checkpoints ==");
    for c in rt.checkpoints(RUN_ID).await? {
        let fields: Vec<String> = c
            .fields
            .iter()
            .map(|f| format!("{}:{}B", f.name, f.size))
            .collect();
        println!(
            "  #{:<3} {:<15} {}  {:>5} B  {}",
            c.seq,
            c.label.as_deref().unwrap_or("-"),
            clock(c.created_at),
            c.size,
            fields.join(" ")
        );
    }
    println!("\n== history ==");
    for e in rt.history_entries(RUN_ID).await? {
        println!("  {}  {}", clock(e.at), e.event);
    }
    Ok(())
}

/// `HH:MM:SS.mmm` (UTC).
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
