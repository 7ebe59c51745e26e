//! Lease renewal for every run a runtime executes, in one store call per
//! period.
//!
//! A lease is renewed every third of its TTL. Renewing each run on its own
//! costs one store transaction per run per period: with hundreds of runs
//! per worker on PostgreSQL that is hundreds of commits a second, and on a
//! loaded machine the renewals fall behind until leases lapse and healthy
//! runs are taken over (seen as `Resumed` in their history under a
//! 1,000-run load on two processes). The keeper renews all of them with
//! [`Store::renew_many`] instead: one statement per period, whatever the
//! number of runs.
//!
//! The keeper is a task of its own, never polled instead of a workflow
//! future: a run may be inside a store transaction that locks its row, and
//! renewing it must not wait on that transaction's progress.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;

use crate::run::{lock, Halt, RunShared};
use crate::store::{Lease, Store};
use crate::Error;

/// The runs a runtime executes now, by id.
#[derive(Default)]
pub(crate) struct ActiveRuns(Mutex<HashMap<Arc<str>, Arc<RunShared>>>);

impl ActiveRuns {
    pub(crate) fn get(&self, id: &str) -> Option<Arc<RunShared>> {
        lock(&self.0).get(id).cloned()
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.0).len()
    }

    /// Adds an execution; returns the one it replaces (an earlier execution
    /// of the same run on this runtime whose lease lapsed).
    pub(crate) fn insert(&self, run: Arc<RunShared>) -> Option<Arc<RunShared>> {
        lock(&self.0).insert(run.id.clone(), run)
    }

    /// Removes `run`'s own entry only: if the run was claimed again
    /// meanwhile, the newer execution's entry stays.
    pub(crate) fn remove(&self, run: &Arc<RunShared>) {
        let mut active = lock(&self.0);
        if active.get(&run.id).is_some_and(|a| Arc::ptr_eq(a, run)) {
            active.remove(&run.id);
        }
    }

    pub(crate) fn halt_all(&self, h: impl Fn() -> Halt) {
        for run in lock(&self.0).values() {
            run.halt(h());
        }
    }

    /// The executions still going (not halted).
    fn going(&self) -> Vec<Arc<RunShared>> {
        lock(&self.0)
            .values()
            .filter(|r| !r.is_halted())
            .cloned()
            .collect()
    }
}

/// Renews the leases of a runtime's [`ActiveRuns`] (see the module docs).
pub(crate) struct LeaseKeeper {
    started: AtomicBool,
}

impl LeaseKeeper {
    pub(crate) fn new() -> Self {
        LeaseKeeper {
            started: AtomicBool::new(false),
        }
    }

    /// Starts the keeper task, once (inside a tokio runtime). It ends when
    /// the runtime is gone, or shut down with no execution left.
    pub(crate) fn ensure_started(
        &self,
        runs: &Arc<ActiveRuns>,
        store: Arc<dyn Store>,
        ttl: Duration,
        shutdown: watch::Receiver<bool>,
    ) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::spawn(keep(Arc::downgrade(runs), store, ttl, shutdown));
    }
}

/// How often leases are renewed: a lease outlives two missed renewals.
pub(crate) fn renewal_period(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(10))
}

async fn keep(
    runs: Weak<ActiveRuns>,
    store: Arc<dyn Store>,
    ttl: Duration,
    shutdown: watch::Receiver<bool>,
) {
    let period = renewal_period(ttl);
    let mut pause = period;
    loop {
        tokio::time::sleep(pause).await;
        let Some(active) = runs.upgrade() else { return };
        let going = active.going();
        if going.is_empty() {
            if *shutdown.borrow() && active.len() == 0 {
                return;
            }
            pause = period;
            continue;
        }
        drop(active);
        let leases: Vec<(Arc<str>, Lease)> = going
            .iter()
            .map(|r| (r.id.clone(), r.lease.clone()))
            .collect();
        let mut results = store.renew_many(&leases, ttl).await.into_iter();
        let mut missed = false;
        for run in &going {
            match results.next() {
                Some(Ok(())) => {}
                // Fenced off (another worker holds the run now) or cancelled:
                // the execution stops and hands nothing back.
                Some(Err(Error::Cancelled { .. }) | Err(Error::LeaseLost { .. })) => {
                    run.halt(Halt::Stop)
                }
                // Transient (a dropped connection, a row locked too long),
                // or a backend that answered for fewer runs than asked:
                // tried again soon; the lease outlives a few misses.
                Some(Err(_)) | None => missed = true,
            }
        }
        pause = if missed { period / 4 } else { period };
    }
}
