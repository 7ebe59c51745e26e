//! `ctx.retry(name, policy, op)` (see [`crate::retry`]): a suspension site
//! that stores a checkpoint after every failed attempt (the backoff: the
//! run is `Sleeping`, holds no worker, and any worker resumes it when it is
//! due) and one when the retry ends (its outcome). Every one of them is
//! [`Suspend::Sleeping`] with a [`RetryMark`]: how many attempts were made
//! and, at the end, the outcome as JSON. A run resumed at the site goes on
//! with the next attempt, or returns the stored outcome: an attempt whose
//! outcome was stored never runs again.
//!
//! Both paths return the outcome decoded from its JSON, so the body goes on
//! from the same value whether or not it was resumed (docs/exactness.md).

use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::Frame;
use crate::abi::Encoder;
use crate::clock::Clock;
use crate::history::Event;
use crate::retry::{RetryError, RetryPolicy};
use crate::run::Halt;
use crate::store::{RetryMark, RetryOutcome, Suspend};
use crate::type_names::readable_type_name;
use crate::Error;

impl Frame {
    /// `ctx.retry(name, policy, op)`: runs `op` until it succeeds, fails
    /// with an error `policy` does not retry, or the policy's attempts are
    /// used up; each failed attempt stores a checkpoint and sleeps durably
    /// before the next, and the end stores the outcome. Resumed at this
    /// site, goes on from the stored attempts.
    #[allow(clippy::too_many_arguments)]
    pub fn retry<'a, T, E, Op, Fut, F>(
        &'a mut self,
        site: u32,
        loops: &[u64],
        fields: F,
        name: &str,
        policy: &'a RetryPolicy<E>,
        op: &'a Op,
    ) -> impl Future<Output = Result<T, RetryError<E>>> + 'a
    where
        T: Serialize + DeserializeOwned + 'a,
        E: Serialize + DeserializeOwned + Display + 'a,
        Op: Fn() -> Fut + 'a,
        Fut: Future<Output = Result<T, E>> + 'a,
        F: Fn(&mut Encoder) -> Result<(), Error> + 'a,
    {
        let name = name.to_owned();
        let loops = loops.to_vec();
        // Resumed here: the stored mark says where the retry stands.
        let resumed = if self.target == Some(site) {
            self.target = None;
            self.checkpoint.as_ref().and_then(|cp| match &cp.suspend {
                Some(Suspend::Sleeping {
                    retry: Some(mark), ..
                }) => Some(mark.clone()),
                _ => None,
            })
        } else {
            None
        };
        async move {
            let mut made = match resumed {
                Some(RetryMark {
                    attempts,
                    outcome: Some(outcome),
                    ..
                }) => {
                    return match decode_outcome(self, &name, attempts, &outcome) {
                        Ok(v) => v,
                        Err(e) => match self.halt(e).await {},
                    }
                }
                Some(mark) => mark.attempts,
                None => 0,
            };
            loop {
                // A backoff cut short by a cancel request (it wakes a
                // sleeping run at once) ends the retry: no further attempt,
                // and the outcome is stored like any other.
                let cancel = if made > 0 {
                    crate::run::lock(&self.run.cancel).clone()
                } else {
                    None
                };
                if let Some(reason) = cancel {
                    let outcome = RetryOutcome::Cancelled(reason);
                    let suspend = Suspend::Sleeping {
                        until: self.run.env.clock.now(),
                        sites_before: self.sites_before(site),
                        retry: Some(RetryMark {
                            name: name.clone(),
                            attempts: made,
                            outcome: Some(outcome.clone()),
                        }),
                    };
                    let prepared = self.prepare(site, &loops, &fields, Some(suspend));
                    self.commit(prepared).await;
                    self.wake_here().await;
                    return match decode_outcome(self, &name, made, &outcome) {
                        Ok(v) => v,
                        Err(e) => match self.halt(e).await {},
                    };
                }
                let attempt = made + 1;
                made = attempt;
                let last = attempt >= policy.attempts();
                // The value or error becomes JSON (or text) at once: neither
                // is held across a store write (they need not be `Send`).
                let clock = self.run.env.clock.clone();
                let (error, outcome) = match run_attempt(policy, op, &clock).await {
                    Ok(Ok(v)) => (None, Some(to_json(&v).map(RetryOutcome::Ok))),
                    Ok(Err(e)) => {
                        let text = e.to_string();
                        let outcome = if !policy.retries(&e) {
                            Some(to_json(&e).map(RetryOutcome::NotRetryable))
                        } else if last {
                            Some(to_json(&e).map(RetryOutcome::Exhausted))
                        } else {
                            None
                        };
                        (Some(text), outcome)
                    }
                    Err(TimedOut) => (
                        Some("timed out".to_owned()),
                        last.then_some(Ok(RetryOutcome::TimedOut)),
                    ),
                };
                let outcome = match outcome.transpose() {
                    Ok(o) => o,
                    Err(detail) => {
                        let e = encode_error(self, &name, detail);
                        match self.halt(e).await {}
                    }
                };
                let now = clock.now();
                let delay = match &outcome {
                    Some(_) => Duration::ZERO,
                    None => {
                        let seq = self.run.seq.load(Ordering::Acquire);
                        policy.delay(attempt, &self.run.id, &name, seq)
                    }
                };
                let until = due(now, delay);
                let ended = outcome.clone();
                let suspend = Suspend::Sleeping {
                    until,
                    sites_before: self.sites_before(site),
                    retry: Some(RetryMark {
                        name: name.clone(),
                        attempts: attempt,
                        outcome,
                    }),
                };
                if let Some(error) = error {
                    let event = Event::RetryAttemptFailed {
                        name: name.clone(),
                        attempt,
                        error,
                        retry_in_ms: ended
                            .is_none()
                            .then(|| u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
                    };
                    // Recorded before the attempt's outcome is stored, so
                    // that the history names every attempt whose outcome a
                    // crash cannot lose; a crash in between runs the attempt
                    // again, and the history then names both runs of it.
                    let _ = self.run.env.store.append_event(&self.run.id, event).await;
                }
                let prepared = self.prepare(site, &loops, &fields, Some(suspend));
                self.commit(prepared).await;
                if until > clock.now() {
                    // The backoff: any worker resumes the run when it is due.
                    match self.stop(Halt::Suspended).await {}
                }
                self.wake_here().await;
                if let Some(outcome) = ended {
                    return match decode_outcome(self, &name, attempt, &outcome) {
                        Ok(v) => v,
                        Err(e) => match self.halt(e).await {},
                    };
                }
            }
        }
    }
}

/// An attempt that outlived the policy's attempt timeout.
struct TimedOut;

/// Runs one attempt, within the policy's attempt timeout on the runtime's
/// clock (`clock`: the system's time, or a test clock, on which
/// `TestClock::advance` past the timeout ends the attempt).
async fn run_attempt<T, E, Op, Fut>(
    policy: &RetryPolicy<E>,
    op: &Op,
    clock: &Arc<dyn Clock>,
) -> Result<Result<T, E>, TimedOut>
where
    Op: Fn() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let Some(timeout) = policy.timeout() else {
        return Ok(op().await);
    };
    let deadline = due(clock.now(), timeout);
    let expired = async {
        // `wait_until` may resolve early: the clock is read again.
        while clock.now() < deadline {
            clock.wait_until(deadline).await;
        }
    };
    tokio::select! {
        biased;
        r = op() => Ok(r),
        () = expired => Err(TimedOut),
    }
}

fn to_json<V: Serialize>(v: &V) -> Result<String, String> {
    serde_json::to_string(v).map_err(|e| {
        format!(
            "{e} (a value of `{}`)",
            readable_type_name(std::any::type_name::<V>())
        )
    })
}

/// An unrepresentable deadline is as good as "never": capped at ~100 years.
fn due(now: SystemTime, delay: Duration) -> SystemTime {
    now.checked_add(delay)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

fn encode_error(frame: &Frame, name: &str, detail: String) -> Error {
    Error::Encode {
        workflow: frame.run.workflow.to_owned(),
        run: frame.run.id.to_string(),
        site: format!("retry `{name}`"),
        field: "<outcome>".to_owned(),
        detail: detail.into(),
    }
}

/// The retry's result from its stored outcome.
fn decode_outcome<T, E>(
    frame: &Frame,
    name: &str,
    attempts: u32,
    outcome: &RetryOutcome,
) -> Result<Result<T, RetryError<E>>, Error>
where
    T: DeserializeOwned,
    E: DeserializeOwned,
{
    fn decode<V: DeserializeOwned>(frame: &Frame, name: &str, json: &str) -> Result<V, Error> {
        serde_json::from_str(json).map_err(|e| Error::Decode {
            workflow: frame.run.workflow.to_owned(),
            run: frame.run.id.to_string(),
            site: format!("retry `{name}`"),
            field: "<outcome>".to_owned(),
            detail: format!(
                "{e} (expected `{}`)",
                readable_type_name(std::any::type_name::<V>())
            )
            .into(),
        })
    }
    Ok(match outcome {
        RetryOutcome::Ok(v) => Ok(decode(frame, name, v)?),
        RetryOutcome::Exhausted(e) => Err(RetryError::Exhausted {
            attempts,
            last: decode(frame, name, e)?,
        }),
        RetryOutcome::NotRetryable(e) => Err(RetryError::NotRetryable {
            attempt: attempts,
            error: decode(frame, name, e)?,
        }),
        RetryOutcome::TimedOut => Err(RetryError::TimedOut { attempts }),
        RetryOutcome::Cancelled(reason) => Err(RetryError::Cancelled {
            attempts,
            reason: reason.clone(),
        }),
    })
}
