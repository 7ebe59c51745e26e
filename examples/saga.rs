//! A saga that compensates when it is asked to cancel: a trip books a hotel
//! and a flight, then waits (up to a day) for the customer to pay. The
//! customer cancels instead (`rt.request_cancel`): the wait returns at
//! once, the workflow reads the reason (`ctx.cancel_requested()`), cancels
//! the flight and the hotel it booked, in reverse order, and the run ends
//! `Cancelled`. Had the body not ended within the grace period, the run
//! would have been cancelled where it stood.
//!
//! ```text
//! cargo run --example saga                # on an SQLite file in $TMPDIR
//! cargo run --example saga -- --db URL    # any store URL (postgres://... too)
//! ```
//!
//! `cargo test --example saga` runs the story and checks what it did.

use std::sync::Mutex;
use std::time::Duration;

use checkpoint_runtime::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Trip {
    customer: String,
    hotel: String,
    flight: String,
}

/// A stand-in for the hotel and airline APIs: it records each call, so the
/// story can show (and the test check) what was booked and released.
#[derive(Default)]
struct Bookings(Mutex<Vec<String>>);

impl Bookings {
    fn call(&self, what: String) {
        println!("  {what}");
        self.0.lock().expect("not poisoned").push(what);
    }

    #[cfg_attr(not(test), allow(dead_code))]
    fn calls(&self) -> Vec<String> {
        self.0.lock().expect("not poisoned").clone()
    }
}

#[workflow(name = "trip-saga")]
async fn trip_saga(ctx: &Ctx, trip: Trip) -> String {
    #[transient]
    let api = ctx.resource::<SharedBookings>();
    // Each booking takes the run's idempotency key, so a retry after a crash
    // would not book twice; the checkpoint after it makes it durable.
    api.call(format!(
        "book hotel {} ({})",
        trip.hotel,
        ctx.idempotency_key()
    ));
    checkpoint!("hotel_booked");
    api.call(format!(
        "book flight {} ({})",
        trip.flight,
        ctx.idempotency_key()
    ));
    checkpoint!("flight_booked");
    let paid: Option<String> = ctx
        .wait_for_timeout("paid", Duration::from_secs(86_400))
        .await;
    if let Some(reason) = ctx.cancel_requested() {
        // Compensate, newest first.
        api.call(format!("cancel flight {}: {reason}", trip.flight));
        checkpoint!("flight_released");
        api.call(format!("cancel hotel {}: {reason}", trip.hotel));
        return format!("compensated ({reason})");
    }
    match paid {
        Some(receipt) => format!("confirmed, receipt {receipt}"),
        None => {
            api.call(format!("cancel flight {}: not paid", trip.flight));
            api.call(format!("cancel hotel {}: not paid", trip.hotel));
            "expired".to_owned()
        }
    }
}

/// The story, on the store at `url`: what the test runs too.
async fn story(url: &str) -> Result<(Runtime, std::sync::Arc<Bookings>), Error> {
    let bookings = std::sync::Arc::new(Bookings::default());
    let rt = Runtime::builder()
        .resource(SharedBookings(bookings.clone()))
        .open(url)
        .await?;
    let trip = Trip {
        customer: "ada".into(),
        hotel: "Hotel Lisboa".into(),
        flight: "TP 1234".into(),
    };
    println!("start: the trip books, then waits for payment");
    rt.start(trip_saga, "trip-7", trip).await?;
    rt.run_until_idle().await?;
    println!("status: {}", rt.status("trip-7").await?);
    println!("the customer cancels (30 s to clean up)");
    rt.request_cancel("trip-7", "customer cancelled", Duration::from_secs(30))
        .await?;
    rt.run_until_idle().await?;
    println!("status: {}", rt.status("trip-7").await?);
    println!("history:");
    for e in rt.history("trip-7").await? {
        println!("  {e}");
    }
    Ok((rt, bookings))
}

/// The resource the workflow reads: the shared call log.
struct SharedBookings(std::sync::Arc<Bookings>);

impl std::ops::Deref for SharedBookings {
    type Target = Bookings;
    fn deref(&self) -> &Bookings {
        &self.0
    }
}

fn default_db() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("checkpoint-saga-{}.db", std::process::id()))
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
    let (rt, _) = story(&url).await?;
    rt.close().await;
    if given.is_none() {
        remove_db(&temp);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_saga_compensates_when_asked_to_cancel() {
        let path = std::env::temp_dir().join(format!(
            "checkpoint-saga-test-{}-{}.db",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let url = path.to_string_lossy().into_owned();
        let (rt, bookings) = story(&url).await.unwrap();
        assert_eq!(rt.status("trip-7").await.unwrap(), Status::Cancelled);
        let calls = bookings.calls();
        assert_eq!(
            calls
                .iter()
                .map(|c| c.split(" (").next().unwrap_or(c))
                .collect::<Vec<_>>(),
            [
                "book hotel Hotel Lisboa",
                "book flight TP 1234",
                "cancel flight TP 1234: customer cancelled",
                "cancel hotel Hotel Lisboa: customer cancelled",
            ]
        );
        let history = rt.history("trip-7").await.unwrap();
        assert!(history
            .iter()
            .any(|e| matches!(e, Event::CancelRequested { .. })));
        assert_eq!(history.last(), Some(&Event::Cancelled));
        rt.close().await;
        remove_db(&path);
    }
}
