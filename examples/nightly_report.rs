//! A nightly report on a schedule: at 03:00 in Berlin, every night, a run
//! gathers the day's figures and writes the report, durably, exactly once
//! per night whichever worker fires it. Here a virtual clock
//! (`TestClock::manual`) moves three nights in a moment; the worker is then
//! "down" for two nights, and the schedule's catch-up policy (`Latest`)
//! starts only the last night it missed.
//!
//! ```text
//! cargo run --example nightly_report              # on an SQLite file in $TMPDIR
//! cargo run --example nightly_report -- --db URL  # any store URL (postgres://... too)
//! ```
//!
//! `cargo test --example nightly_report` runs the story and checks it.

use std::time::Duration;

use checkpoint_runtime::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct ReportInput {
    /// The night's date in Berlin, `2026-12-07`.
    day: String,
}

#[workflow(name = "nightly-report")]
async fn nightly_report(ctx: &Ctx, input: ReportInput) -> String {
    // A stand-in for the day's queries: each step is saved as it is done.
    let orders = input.day.len() as u32 * 7;
    checkpoint!("orders_counted");
    let revenue = orders * 42;
    checkpoint!("revenue_summed");
    format!("{}: {orders} orders, {revenue} EUR", input.day)
}

const DAY: Duration = Duration::from_secs(86_400);

/// The story, on the store at `url`: the reports it made, in order.
async fn story(url: &str) -> Result<Vec<String>, Error> {
    let clock = TestClock::manual();
    let rt = Runtime::builder().clock(clock.clone()).open(url).await?;
    let nightly = Schedule::cron("nightly-report", "0 3 * * *")?
        .timezone("Europe/Berlin")?
        .overlap(Overlap::Skip)
        .catch_up(CatchUp::Latest);
    rt.schedule(nightly, nightly_report, |tick: Tick| ReportInput {
        day: tick.local_date().to_string(),
    })
    .await?;

    // The runs of the nights handled so far, reported once each (the
    // runtime's background loop may fire a tick before `run_schedules`).
    let mut reports = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    println!("three nights, a worker up each night:");
    for nights in [1, 1, 1, 2] {
        if nights == 2 {
            println!("two nights with no worker, then one catches up (the latest only):");
        }
        clock.advance(DAY * nights);
        rt.run_schedules().await?;
        let runs = rt.runs(RunFilter::new().workflow("nightly-report")).await?;
        for run in runs.into_iter().filter(|r| seen.insert(r.id.clone())) {
            let out = rt.handle(nightly_report, &run.id).result().await?;
            println!("  {}: {out}", run.id);
            reports.push(out);
        }
    }
    for s in rt.schedules().await? {
        println!(
            "schedule {}: {} ({}), next tick {}",
            s.name,
            s.cron,
            s.timezone,
            s.next_tick
                .map(checkpoint_runtime::json::rfc3339)
                .unwrap_or_default()
        );
    }
    rt.close().await;
    Ok(reports)
}

fn default_db() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("checkpoint-nightly-{}.db", std::process::id()))
}

fn remove_db(path: &std::path::Path) {
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", path.to_string_lossy()));
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let given = args
        .windows(2)
        .find(|w| w[0] == "--db")
        .map(|w| w[1].clone());
    let temp = default_db();
    let url = given
        .clone()
        .unwrap_or_else(|| temp.to_string_lossy().into_owned());
    story(&url).await?;
    if given.is_none() {
        remove_db(&temp);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_report_per_night_and_the_latest_missed_one() {
        let path = std::env::temp_dir().join(format!(
            "checkpoint-nightly-test-{}-{}.db",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let reports = story(&path.to_string_lossy()).await.unwrap();
        // Three nights in a row, then one for the two missed.
        assert_eq!(reports.len(), 4, "{reports:?}");
        let days: Vec<&str> = reports.iter().map(|r| &r[..10]).collect();
        let date = |s: &str| s.parse::<jiff::civil::Date>().unwrap();
        let gap = |a: &str, b: &str| (date(b) - date(a)).get_days();
        assert_eq!((gap(days[0], days[1]), gap(days[1], days[2])), (1, 1));
        assert_eq!(gap(days[2], days[3]), 2, "the latest missed night only");
        remove_db(&path);
    }
}
