//! The storage boundary: the [`Store`] trait every backend implements, the
//! records it exchanges with the executor, the rules of a run's state, and
//! the backends themselves ([`MemoryStore`], `sqlite::SqliteStore`,
//! `postgres::PostgresStore`).
//!
//! Most users never touch this module: [`Runtime::open`](crate::Runtime::open)
//! picks the backend from a URL. It is public so that custom backends can be
//! written and so that several runtimes can share one store in tests:
//!
//! ```
//! use std::sync::Arc;
//! use checkpoint_runtime::{store::MemoryStore, Runtime};
//!
//! let store = Arc::new(MemoryStore::new());
//! let a = Runtime::builder().worker_id("a").store(store.clone()).in_memory();
//! let b = Runtime::builder().worker_id("b").store(store).in_memory();
//! # let _ = (a, b);
//! ```
//!
//! # Shape
//!
//! Dependencies point one way, `records ← rules ← backends ← store::open ←
//! runtime` (`.ci/import-cycles.py` checks that no file here imports another
//! that imports it back):
//!
//! - `records`: the plain data the store exchanges ([`RunRecord`],
//!   [`RunState`], [`Lease`], [`CheckpointRecord`], ...);
//! - `contract`: the [`Store`] trait and what a backend must guarantee;
//! - `integrity`: the checksums a durable backend seals each checkpoint
//!   with ([`checksums`], checked by [`verify_checksums`]) and the errors
//!   that report a damaged one;
//! - `rules`: every run-state transition (create, claim, renew, release,
//!   suspend, consume or reject a signal, time out, finish, fail, set aside,
//!   cancel, retry, fork, join, promote, retention, fencing) as a pure
//!   function on the records that returns a `rules::Change`; the only code
//!   that sets a [`RunState`] or builds an [`Event`](crate::Event). Each
//!   backend loads, calls one rule, and applies the change with one `apply`
//!   of its own (rules decide, backends apply);
//! - backends: [`MemoryStore`] (maps and the rules), [`sqlite`] (feature
//!   `sqlite`) and [`postgres`] (feature `postgres`), the last two sharing
//!   `sql` (the run row, value and time conversions, and `state_sql!`: state
//!   codes rendered into SQL from the one table). PostgreSQL's one-statement
//!   speed paths (`postgres/fused/`: save, batches of saves and starts,
//!   ends, renewals) are the rules written a second time in SQL; its
//!   `tests/fused.rs` proves each stores what the rule and `apply` store;
//! - [`open`] and [`StoreUrl`]: a URL to a backend, in one place;
//! - `conformance`: the validation suite every backend passes (a macro
//!   makes a test of each per backend); among them, what a run's end
//!   changes elsewhere (held siblings, joins, descendants), compared with
//!   the memory store.
//!
//! With the `backend-kit` feature, `rules` and `conformance` are public, so
//! that a custom backend reuses the transitions and runs the suite (see
//! `conformance`'s docs for an example).

#[cfg(any(test, feature = "backend-kit"))]
pub mod conformance;
mod contract;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod delta;
mod integrity;
mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
mod records;
#[cfg(feature = "backend-kit")]
pub mod rules;
#[cfg(not(feature = "backend-kit"))]
pub(crate) mod rules;
mod schedules;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod streams;
mod url;

use std::sync::Arc;

use crate::Error;

pub use crate::error::StoreSource;
pub use contract::Store;
pub use integrity::{checksums, verify_checksums, verify_stored_checksums, ChecksumMismatch};
pub use memory::MemoryStore;
pub(crate) use records::{user_signal_name, JOIN_SIGNAL_PREFIX};
pub use records::{
    CancelRequest, CheckpointRecord, ClaimRequest, ClaimResult, Claimed, Created, FieldRecord,
    GcReport, Lease, LeaseInfo, NewRun, Outcome, Release, Renewed, RetryMark, RetryOutcome,
    RunRecord, RunState, SchemaKeys, SignalRecord, SignalSite, Suspend, Wake, WakeValue, Wakeup,
    WorkerHold, LOOP_ITEMS,
};
pub use schedules::ScheduleRecord;
pub(crate) use schedules::ScheduleTable;
pub(crate) use streams::page_size;
pub use streams::{StreamItem, StreamWrite, STREAM_PAGE_MAX};
pub use url::{redact_url, StoreUrl};

/// Opens the store `url` names (see [`StoreUrl`]): a fresh in-memory store,
/// an SQLite file (created if missing), or a PostgreSQL database (its tables
/// created or upgraded). What [`Runtime::open`](crate::Runtime::open) and the
/// command line open stores with.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), checkpoint_runtime::Error> {
/// let store = checkpoint_runtime::store::open(":memory:").await?;
/// assert_eq!(store.kind(), "memory");
/// # Ok(()) }
/// ```
pub async fn open(url: &str) -> Result<Arc<dyn Store>, Error> {
    open_url(url, false).await
}

/// Like [`open`], but only a store that already exists at this build's
/// schema version: never creates an SQLite file, a PostgreSQL schema or
/// their tables, never upgrades them (see
/// [`SqliteStore::open_existing`](sqlite::SqliteStore::open_existing) and
/// `PostgresStore::open_existing`). What the command line opens stores with.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), checkpoint_runtime::Error> {
/// use checkpoint_runtime::{store, Error};
/// let err = store::open_existing("no-such-store.db").await.err().unwrap();
/// assert!(matches!(err, Error::Store { .. }) && err.to_string().contains("not a checkpoint store"));
/// assert!(!std::path::Path::new("no-such-store.db").exists());
/// # Ok(()) }
/// ```
pub async fn open_existing(url: &str) -> Result<Arc<dyn Store>, Error> {
    open_url(url, true).await
}

/// [`open`], or with `existing` [`open_existing`] (a memory store is new
/// either way).
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(unused_variables)
)]
async fn open_url(url: &str, existing: bool) -> Result<Arc<dyn Store>, Error> {
    Ok(match StoreUrl::parse(url)? {
        StoreUrl::Memory => Arc::new(MemoryStore::new()),
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(url) if existing => {
            Arc::new(postgres::PostgresStore::open_existing(&url).await?)
        }
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres(url) => Arc::new(postgres::PostgresStore::open(&url).await?),
        #[cfg(feature = "sqlite")]
        StoreUrl::Sqlite(path) => {
            let store = tokio::task::spawn_blocking(move || {
                if existing {
                    sqlite::SqliteStore::open_existing(path)
                } else {
                    sqlite::SqliteStore::open(path)
                }
            })
            .await
            .map_err(|e| Error::internal(format!("opening the SQLite store: {e}")))??;
            Arc::new(store)
        }
        #[allow(unreachable_patterns)]
        other => return Err(not_built(url, &other)),
    })
}

/// The error for a store whose backend this build leaves out (its cargo
/// feature is off).
#[allow(dead_code)]
fn not_built(url: &str, parsed: &StoreUrl) -> Error {
    let (backend, feature) = match parsed {
        StoreUrl::Postgres(_) => ("PostgreSQL", "postgres"),
        _ => ("SQLite", "sqlite"),
    };
    Error::UnsupportedStore {
        url: redact_url(url),
        reason: format!(
            "this build of checkpoint-runtime has no {backend} store (enable the `{feature}` feature)"
        ),
    }
}
