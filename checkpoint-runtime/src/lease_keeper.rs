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
//! Each lease is renewed a third of its TTL after its expiry was last set
//! (see [`keep`]), so a slow claim is followed by a prompt renewal.
//!
//! The keeper is a task of its own, never polled instead of a workflow
//! future: a run may be inside a store transaction that locks its row, and
//! renewing it must not wait on that transaction's progress.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

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
    /// Wakes the keeper to look at runs claimed since it last did.
    poke: Arc<Notify>,
}

impl LeaseKeeper {
    pub(crate) fn new() -> Self {
        LeaseKeeper {
            started: AtomicBool::new(false),
            poke: Arc::new(Notify::new()),
        }
    }

    /// Starts the keeper task, once (inside a tokio runtime), and has it
    /// look at the runs claimed since it last did: a claim that took long
    /// may have left them little of their TTL. The task ends when the
    /// runtime is gone, or shut down with no execution left.
    pub(crate) fn claimed(
        &self,
        runs: &Arc<ActiveRuns>,
        store: Arc<dyn Store>,
        ttl: Duration,
        shutdown: watch::Receiver<bool>,
    ) {
        if !self.started.swap(true, Ordering::AcqRel) {
            let poke = self.poke.clone();
            tokio::spawn(keep(Arc::downgrade(runs), store, ttl, shutdown, poke));
        }
        self.poke.notify_one();
    }
}

/// How long after its expiry was set a lease is renewed: a third of the
/// TTL, so that it outlives two missed renewals.
pub(crate) fn renewal_period(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(10))
}

/// The keeper's loop. Each lease is renewed a [`renewal_period`] after its
/// expiry was last set ([`RunShared::lease_set`]), not on one clock for
/// all: a claim computes its runs' expiry before it begins, and a claim of
/// hundreds of runs can take a second on a loaded machine (251 runs in
/// 0.9 s on PostgreSQL here, with the CPU busy), so a run may begin its
/// execution with a good part of its TTL gone; a first renewal a whole
/// period after the claim returned could then come too late (see
/// `a_slow_claim_is_followed_by_a_prompt_renewal`). The runs due within
/// half a period are renewed with those due now, so that runs claimed at
/// different times share calls.
async fn keep(
    runs: Weak<ActiveRuns>,
    store: Arc<dyn Store>,
    ttl: Duration,
    mut shutdown: watch::Receiver<bool>,
    poke: Arc<Notify>,
) {
    let period = renewal_period(ttl);
    let mut wake = Instant::now() + period;
    loop {
        // A shutdown is seen at once, not a period later: the keeper holds
        // the store, and a dropped runtime must let go of its files (a
        // period is 40 s with a two-minute TTL; the disk of a dropped
        // runtime could not be unmounted meanwhile).
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = poke.notified() => {}
            changed = shutdown.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        let Some(active) = runs.upgrade() else { return };
        let going = active.going();
        if going.is_empty() {
            if *shutdown.borrow() && active.len() == 0 {
                return;
            }
            wake = Instant::now() + period;
            continue;
        }
        drop(active);
        let now = Instant::now();
        let due: Vec<&Arc<RunShared>> = going
            .iter()
            .filter(|r| r.lease_set() + period / 2 <= now)
            .collect();
        let missed = !due.is_empty() && !renew(&*store, &due, ttl).await;
        let next = going
            .iter()
            .filter(|r| !r.is_halted())
            .map(|r| r.lease_set() + period)
            .min()
            .unwrap_or(now + period);
        // A miss is tried again soon, not at once: the lease outlives a few.
        let soonest = Instant::now() + if missed { period / 4 } else { MIN_PAUSE };
        wake = next.max(soonest);
    }
}

/// The least time between two rounds of the keeper.
const MIN_PAUSE: Duration = Duration::from_millis(10);

/// Renews the leases of `due` in one store call, and hands each execution
/// the cancel request its renewal reports. Returns whether every one was
/// renewed or found fenced off (its execution then stops).
async fn renew(store: &dyn Store, due: &[&Arc<RunShared>], ttl: Duration) -> bool {
    let leases: Vec<(Arc<str>, Lease)> = due
        .iter()
        .map(|r| (r.id.clone(), r.lease.clone()))
        .collect();
    let asked = Instant::now();
    let mut results = store.renew_many(&leases, ttl).await.into_iter();
    let mut all = true;
    for run in due {
        match results.next() {
            Some(Ok(renewed)) => {
                run.note_lease_set(asked);
                // Asked to cancel, maybe by another process: the body
                // sees it now, not at its next suspension, and the
                // execution watches the grace period (see `run_to_end`).
                if let Some(req) = &renewed.cancel {
                    run.note_cancel(req);
                }
            }
            // Fenced off (another worker holds the run now) or cancelled:
            // the execution stops and hands nothing back.
            Some(Err(Error::Cancelled { .. }) | Err(Error::LeaseLost { .. })) => {
                run.halt(Halt::Stop)
            }
            // Transient (a dropped connection, a row locked too long),
            // or a backend that answered for fewer runs than asked:
            // tried again soon; the lease outlives a few misses.
            Some(Err(_)) | None => all = false,
        }
    }
    all
}
