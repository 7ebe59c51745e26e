//! What the store is told when an execution ends, and what happens when
//! telling it fails.
//!
//! An execution's end becomes one [`Conclusion`] (finish, release, reject a
//! signal). When the store cannot take it (disk full, a lost connection),
//! the conclusion is kept in [`Troubles`] and written again at each turn of
//! the worker loop, so the run is handed back the moment writes succeed,
//! instead of when its lease expires. A run whose executions keep ending in
//! store errors is reported too: `run_until_idle` and `run_worker` return
//! the error instead of looking idle (issue 11, item 7).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::launch::Finished;
use crate::run::{lock, Halt, RunShared};
use crate::store::{Lease, Outcome, Release, Store};
use crate::Error;

/// Consecutive executions of one run that ended in a store error after
/// which the error is reported (the run is still retried).
pub(crate) const STUCK_AFTER: u32 = 3;

/// The write that ends an execution.
#[derive(Debug, Clone)]
pub(crate) enum Conclusion {
    Finish(Outcome),
    Release(Release),
    /// Discard the delivered signal (its payload did not decode), then wait again.
    Reject(String),
    /// Cancel the run hard (its cancel request's grace period ended while it
    /// executed): what a claim does to a run whose grace ended, so the run
    /// ends the same way whichever worker notices.
    Cancel,
}

impl Conclusion {
    /// The conclusion of an execution that halted with `halt` (`None`:
    /// nothing to write: a crash, a lost lease, a cancellation).
    pub(crate) fn of_halt(halt: Halt) -> Option<Conclusion> {
        Some(match halt {
            Halt::Suspended => Conclusion::Release(Release::Suspend),
            Halt::Failed(error) => Conclusion::Finish(Outcome::Failed { error }),
            Halt::Park(error) => Conclusion::Release(Release::Park { error }),
            Halt::RejectSignal(reason) => Conclusion::Reject(reason),
            Halt::Crash | Halt::Stop | Halt::Fits => return None,
            Halt::Retry(error) => Conclusion::Release(Release::Retry {
                reason: retry_reason(&error),
            }),
            Halt::Shutdown => Conclusion::Release(Release::Abandon),
            Halt::CancelHard => Conclusion::Cancel,
        })
    }

    /// The conclusion of an execution whose workflow returned.
    pub(crate) fn of_output(fin: Finished) -> Conclusion {
        Conclusion::Finish(Outcome::Completed {
            output: fin.output,
            error: fin.error,
        })
    }

    /// Writes it. A store that refuses because the run is no longer ours
    /// (lease lost, cancelled) is not a failure: there is nothing left to do.
    pub(crate) async fn write(
        &self,
        store: &dyn Store,
        id: &str,
        lease: &Lease,
    ) -> Result<(), Error> {
        let written = match self {
            Conclusion::Finish(outcome) => store.finish(id, lease, outcome.clone()).await,
            Conclusion::Release(release) => store.release(id, lease, release.clone()).await,
            Conclusion::Reject(reason) => {
                match store.reject_signal(id, lease, reason.clone()).await {
                    Ok(()) => store.release(id, lease, Release::Suspend).await,
                    Err(e) => Err(e),
                }
            }
            // Not fenced: past its grace the run is cancelled, whoever holds it.
            Conclusion::Cancel => store.cancel(id).await.map(|_| ()),
        };
        match written {
            Err(Error::LeaseLost { .. }) | Err(Error::Cancelled { .. }) => Ok(()),
            other => other,
        }
    }
}

fn retry_reason(error: &Error) -> String {
    match error {
        Error::Store { message, .. } => format!("store error: {message}"),
        other => other.to_string(),
    }
}

/// A conclusion the store did not take yet.
struct Pending {
    id: Arc<str>,
    lease: Lease,
    conclusion: Conclusion,
    error: Error,
    /// Failed writes of it so far.
    failures: u32,
}

/// Store failures of this runtime's executions that are not resolved yet.
#[derive(Default)]
pub(crate) struct Troubles {
    inner: std::sync::Mutex<TroubleState>,
}

#[derive(Default)]
struct TroubleState {
    pending: Vec<Pending>,
    /// Per run: consecutive executions that ended in a store error, and the latest.
    streaks: HashMap<Arc<str>, (u32, Error)>,
}

impl Troubles {
    /// Notes how an execution of `run` ended: in a store error (`Some`), or
    /// otherwise. Returns how long to wait before handing the run back for
    /// a retry (a growing pause, so a store that keeps failing is not
    /// hammered).
    pub(crate) fn note_end(&self, run: &RunShared, store_error: Option<&Error>) -> Duration {
        let mut g = lock(&self.inner);
        match store_error {
            None => {
                g.streaks.remove(&run.id);
                Duration::ZERO
            }
            Some(e) => {
                let entry = g.streaks.entry(run.id.clone()).or_insert((0, e.clone()));
                entry.0 += 1;
                entry.1 = e.clone();
                Duration::from_millis(20 << entry.0.min(7))
            }
        }
    }

    /// Keeps `conclusion` of run `run` to be written again later.
    pub(crate) fn keep(&self, run: &RunShared, conclusion: Conclusion, error: Error) {
        lock(&self.inner).pending.push(Pending {
            id: run.id.clone(),
            lease: run.lease.clone(),
            conclusion,
            error,
            failures: 1,
        });
    }

    /// Writes the kept conclusions again; keeps those that fail still.
    /// Returns whether any was written.
    pub(crate) async fn retry(&self, store: &dyn Store) -> bool {
        let pending = std::mem::take(&mut lock(&self.inner).pending);
        if pending.is_empty() {
            return false;
        }
        let mut left = Vec::new();
        let mut written = false;
        for mut p in pending {
            match p.conclusion.write(store, &p.id, &p.lease).await {
                Ok(()) => written = true,
                Err(e) => {
                    p.error = e;
                    p.failures += 1;
                    left.push(p);
                }
            }
        }
        lock(&self.inner).pending.extend(left);
        written
    }

    /// Whether a conclusion is still waiting for the store: its run is
    /// neither handed back nor ended, so this runtime is not idle.
    pub(crate) fn has_pending(&self) -> bool {
        !lock(&self.inner).pending.is_empty()
    }

    /// Forgets how often the store failed so far (a caller that starts
    /// waiting counts its own failures): the runs and conclusions are still
    /// retried.
    pub(crate) fn recount(&self) {
        let mut g = lock(&self.inner);
        g.streaks.clear();
        for p in &mut g.pending {
            p.failures = 0;
        }
    }

    /// The error to report, if the store keeps failing this runtime's
    /// executions: a conclusion it refused [`STUCK_AFTER`] times, or a run
    /// whose last [`STUCK_AFTER`] executions ended in a store error. (One
    /// failure is not reported: a server restarting, a busy file.)
    pub(crate) fn stuck(&self) -> Option<Error> {
        let g = lock(&self.inner);
        if let Some(p) = g.pending.iter().find(|p| p.failures >= STUCK_AFTER) {
            return Some(stuck_error(&p.id, &p.error));
        }
        g.streaks
            .iter()
            .filter(|(_, (n, _))| *n >= STUCK_AFTER)
            .min_by(|a, b| a.0.cmp(b.0))
            .map(|(id, (_, e))| stuck_error(id, e))
    }
}

/// A store error, naming the run it keeps from progressing.
fn stuck_error(run: &str, error: &Error) -> Error {
    match error {
        Error::Store { message, source } => Error::Store {
            message: format!(
                "run `{run}` cannot progress: {message} (it is retried, and resumes as soon as the store accepts writes again)"
            ),
            source: source.clone(),
        },
        other => other.clone(),
    }
}
