//! A PostgreSQL schema per test, for the tests that run against the server
//! named by `CHECKPOINT_TEST_POSTGRES_URL` (`postgres.rs`, `load.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use checkpoint_runtime::store::postgres::PostgresStore;

/// The variable that names the test server.
pub const URL_VAR: &str = "CHECKPOINT_TEST_POSTGRES_URL";

/// A PostgreSQL schema for one test; dropped (with its tables) on drop,
/// also when the test fails.
pub struct Schema {
    /// The server's URL, without the schema.
    pub base: String,
    /// The schema's name.
    pub name: String,
}

impl Schema {
    /// A fresh schema named `{prefix}_<pid>_<time>_<n>`; `None` (and a note
    /// that `test` was skipped) without a server.
    pub fn new(test: &str, prefix: &str) -> Option<Schema> {
        let Ok(base) = std::env::var(URL_VAR) else {
            eprintln!("skipped {test}: {URL_VAR} is not set");
            return None;
        };
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() % 1_000_000_000_000)
            .unwrap_or(0);
        let name = format!(
            "{prefix}_{}_{nanos}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        Some(Schema { base, name })
    }

    /// The store URL with this schema.
    pub fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}schema={}", self.base, self.name)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        // Its own thread and runtime: this may run inside a test's runtime.
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(PostgresStore::drop_schema(&base, &name))
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop schema {}: {dropped:?}", self.name);
        }
    }
}
