//! [`RetryPolicy`] and [`RetryError`]: what `ctx.retry(name, policy, op)`
//! takes and returns (see [`Ctx::retry`](crate::Ctx::retry)).
//!
//! The policy is plain data plus an optional predicate; nothing of it is
//! stored. What is stored, with each attempt's checkpoint, is how many
//! attempts were made and, once the retry ended, its outcome (see
//! [`RetryMark`](crate::store::RetryMark)).

use std::fmt;
use std::hash::Hasher;
use std::sync::Arc;
use std::time::Duration;

/// The default number of attempts of a policy (the first one included).
pub(crate) const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// The default cap on one backoff delay.
pub(crate) const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(3600);

type Predicate<E> = Arc<dyn Fn(&E) -> bool + Send + Sync>;

/// How `ctx.retry` retries: the delays between attempts, how many attempts,
/// how long one may take, and which errors are worth another one.
///
/// Built with [`RetryPolicy::exponential`] or [`RetryPolicy::fixed`] and
/// the builder methods. By default a policy makes at most 3 attempts (the
/// first one included), caps a delay at one hour,
/// has no jitter, no attempt timeout, and retries every error.
///
/// ```
/// use std::time::Duration;
/// use checkpoint_runtime::prelude::*;
///
/// #[derive(Debug)]
/// enum FetchError { Busy, NotFound }
///
/// let policy = RetryPolicy::exponential(Duration::from_secs(1))
///     .max_attempts(6)
///     .max_delay(Duration::from_secs(60))
///     .jitter(0.2)
///     .attempt_timeout(Duration::from_secs(30))
///     .retry_if(|e: &FetchError| matches!(e, FetchError::Busy));
/// assert_eq!(policy.attempts(), 6);
/// // Without jitter: 1 s, 2 s, 4 s, .. capped at 60 s.
/// let plain = RetryPolicy::<FetchError>::exponential(Duration::from_secs(1)).max_attempts(10);
/// assert_eq!(plain.base_delay(3), Duration::from_secs(4));
/// assert_eq!(plain.max_delay(Duration::from_secs(5)).base_delay(9), Duration::from_secs(5));
/// ```
pub struct RetryPolicy<E> {
    initial: Duration,
    exponential: bool,
    max_attempts: u32,
    max_delay: Duration,
    jitter: f64,
    attempt_timeout: Option<Duration>,
    retry_if: Option<Predicate<E>>,
}

impl<E> Clone for RetryPolicy<E> {
    fn clone(&self) -> Self {
        RetryPolicy {
            initial: self.initial,
            exponential: self.exponential,
            max_attempts: self.max_attempts,
            max_delay: self.max_delay,
            jitter: self.jitter,
            attempt_timeout: self.attempt_timeout,
            retry_if: self.retry_if.clone(),
        }
    }
}

impl<E> fmt::Debug for RetryPolicy<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("initial", &self.initial)
            .field("exponential", &self.exponential)
            .field("max_attempts", &self.max_attempts)
            .field("max_delay", &self.max_delay)
            .field("jitter", &self.jitter)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("retry_if", &self.retry_if.is_some())
            .finish()
    }
}

impl<E> RetryPolicy<E> {
    fn new(initial: Duration, exponential: bool) -> Self {
        RetryPolicy {
            initial,
            exponential,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            max_delay: DEFAULT_MAX_DELAY,
            jitter: 0.0,
            attempt_timeout: None,
            retry_if: None,
        }
    }

    /// Delays that double: `initial`, `2 × initial`, `4 × initial`, ..
    /// (capped by [`RetryPolicy::max_delay`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// let p = RetryPolicy::<String>::exponential(Duration::from_millis(100));
    /// assert_eq!(p.base_delay(1), Duration::from_millis(100));
    /// assert_eq!(p.base_delay(2), Duration::from_millis(200));
    /// ```
    pub fn exponential(initial: Duration) -> Self {
        Self::new(initial, true)
    }

    /// The same delay between every two attempts.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// let p = RetryPolicy::<String>::fixed(Duration::from_secs(2));
    /// assert_eq!(p.base_delay(1), Duration::from_secs(2));
    /// assert_eq!(p.base_delay(5), Duration::from_secs(2));
    /// ```
    pub fn fixed(delay: Duration) -> Self {
        Self::new(delay, false)
    }

    /// At most `n` attempts in all, the first one included (`0` is taken
    /// as `1`).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// let p = RetryPolicy::<String>::fixed(Duration::ZERO).max_attempts(0);
    /// assert_eq!(p.attempts(), 1);
    /// ```
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// No delay longer than `d` (with jitter applied).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// let p = RetryPolicy::<String>::exponential(Duration::from_secs(1)).max_delay(Duration::from_secs(3));
    /// assert_eq!(p.base_delay(4), Duration::from_secs(3));
    /// ```
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// Spreads each delay by up to `fraction` of it either way (`0.2`: from
    /// 80 % to 120 %), clamped to `0.0..=1.0`. The spread is derived from
    /// the run id, the site and the attempt, so it is the same whenever the
    /// same attempt's delay is computed (and the delay chosen is stored with
    /// the backoff's checkpoint anyway).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// let p = RetryPolicy::<String>::fixed(Duration::from_secs(10)).jitter(0.5);
    /// let d = p.delay(1, "run-1", "fetch", 7);
    /// assert!(d >= Duration::from_secs(5) && d <= Duration::from_secs(15));
    /// assert_eq!(d, p.delay(1, "run-1", "fetch", 7)); // deterministic
    /// ```
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.jitter = if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        };
        self
    }

    /// Gives up on an attempt that takes longer than `d` on the runtime's
    /// clock (the system's time, unless the runtime was given another: on
    /// a [`TestClock`](crate::TestClock), [`TestClock::advance`](crate::TestClock::advance)
    /// past `d` ends the attempt, and real time spent in it does not). Such
    /// an attempt counts as a failed one; when the last attempt timed out
    /// the retry ends in [`RetryError::TimedOut`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// let p = RetryPolicy::<String>::fixed(Duration::ZERO).attempt_timeout(Duration::from_secs(30));
    /// assert_eq!(p.timeout(), Some(Duration::from_secs(30)));
    /// ```
    pub fn attempt_timeout(mut self, d: Duration) -> Self {
        self.attempt_timeout = Some(d);
        self
    }

    /// Retries only the errors for which `pred` is true; any other ends the
    /// retry at once with [`RetryError::NotRetryable`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// let p = RetryPolicy::fixed(Duration::ZERO).retry_if(|e: &u16| *e >= 500);
    /// assert!(p.retries(&503));
    /// assert!(!p.retries(&404));
    /// ```
    pub fn retry_if(mut self, pred: impl Fn(&E) -> bool + Send + Sync + 'static) -> Self {
        self.retry_if = Some(Arc::new(pred));
        self
    }

    /// The number of attempts the policy allows.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// assert_eq!(RetryPolicy::<()>::fixed(Duration::ZERO).attempts(), 3);
    /// ```
    pub fn attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The attempt timeout, if any.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// assert_eq!(RetryPolicy::<()>::fixed(Duration::ZERO).timeout(), None);
    /// ```
    pub fn timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }

    /// Whether `error` is worth another attempt.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// assert!(RetryPolicy::<&str>::fixed(Duration::ZERO).retries(&"anything"));
    /// ```
    pub fn retries(&self, error: &E) -> bool {
        self.retry_if.as_ref().is_none_or(|p| p(error))
    }

    /// The delay after failed attempt `attempt` (from 1), before jitter:
    /// capped at [`RetryPolicy::max_delay`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// let p = RetryPolicy::<()>::exponential(Duration::from_millis(10));
    /// assert_eq!(p.base_delay(4), Duration::from_millis(80));
    /// ```
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let nanos = if self.exponential {
            let doublings = attempt.saturating_sub(1).min(100);
            self.initial.as_nanos().saturating_mul(1u128 << doublings)
        } else {
            self.initial.as_nanos()
        };
        let nanos = nanos.min(self.max_delay.as_nanos());
        let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
        Duration::new(secs, (nanos % 1_000_000_000) as u32)
    }

    /// The delay after failed attempt `attempt` of the retry `name` in run
    /// `run`, at the run's checkpoint sequence number `seq`: the base delay
    /// spread by the jitter, capped at [`RetryPolicy::max_delay`]. The same
    /// arguments always give the same delay.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use checkpoint_runtime::prelude::*;
    /// let p = RetryPolicy::<()>::fixed(Duration::from_secs(1));
    /// assert_eq!(p.delay(2, "r", "fetch", 3), Duration::from_secs(1)); // no jitter
    /// ```
    pub fn delay(&self, attempt: u32, run: &str, name: &str, seq: u64) -> Duration {
        let base = self.base_delay(attempt);
        if self.jitter == 0.0 || base.is_zero() {
            return base;
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        // `DefaultHasher::new()` has fixed keys: the same value in every
        // process and on every resume.
        h.write(run.as_bytes());
        h.write_u8(0);
        h.write(name.as_bytes());
        h.write_u8(0);
        h.write_u64(seq);
        h.write_u32(attempt);
        let unit = (h.finish() >> 11) as f64 / (1u64 << 53) as f64; // 0.0..1.0
        let factor = 1.0 + self.jitter * (2.0 * unit - 1.0);
        base.mul_f64(factor.max(0.0)).min(self.max_delay)
    }
}

/// How `ctx.retry` failed.
///
/// ```
/// use checkpoint_runtime::prelude::*;
///
/// let e: RetryError<String> = RetryError::Exhausted { attempts: 3, last: "busy".into() };
/// assert_eq!(e.to_string(), "gave up after 3 attempts: busy");
/// assert_eq!(e.attempts(), 3);
/// assert_eq!(e.last_error().map(String::as_str), Some("busy"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RetryError<E> {
    /// Every attempt the policy allows failed; `last` is the last one's error.
    Exhausted {
        /// How many attempts were made.
        attempts: u32,
        /// The error of the last one.
        last: E,
    },
    /// Attempt `attempt` failed with an error the policy's
    /// [`retry_if`](RetryPolicy::retry_if) does not retry.
    NotRetryable {
        /// Which attempt (from 1).
        attempt: u32,
        /// Its error.
        error: E,
    },
    /// Every attempt the policy allows failed and the last one took longer
    /// than the policy's [`attempt_timeout`](RetryPolicy::attempt_timeout).
    TimedOut {
        /// How many attempts were made.
        attempts: u32,
    },
    /// A cancel request ([`Runtime::request_cancel`](crate::Runtime::request_cancel))
    /// cut the backoff short: no further attempt was made, so that the
    /// workflow can clean up and end.
    Cancelled {
        /// How many attempts were made.
        attempts: u32,
        /// The request's reason.
        reason: String,
    },
}

impl<E> RetryError<E> {
    /// How many attempts were made.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// let e = RetryError::NotRetryable { attempt: 2, error: 404 };
    /// assert_eq!(e.attempts(), 2);
    /// ```
    pub fn attempts(&self) -> u32 {
        match self {
            RetryError::Exhausted { attempts, .. }
            | RetryError::TimedOut { attempts }
            | RetryError::Cancelled { attempts, .. } => *attempts,
            RetryError::NotRetryable { attempt, .. } => *attempt,
        }
    }

    /// The last attempt's error (`None` when it timed out or the retry was
    /// cancelled).
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// let e = RetryError::<u16>::TimedOut { attempts: 4 };
    /// assert_eq!(e.last_error(), None);
    /// ```
    pub fn last_error(&self) -> Option<&E> {
        match self {
            RetryError::Exhausted { last, .. } => Some(last),
            RetryError::NotRetryable { error, .. } => Some(error),
            RetryError::TimedOut { .. } | RetryError::Cancelled { .. } => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryError::Exhausted { attempts, last } => {
                write!(f, "gave up after {attempts} attempts: {last}")
            }
            RetryError::NotRetryable { attempt, error } => {
                write!(
                    f,
                    "attempt {attempt} failed with an error not retried: {error}"
                )
            }
            RetryError::TimedOut { attempts } => {
                write!(
                    f,
                    "gave up after {attempts} attempts: the last one timed out"
                )
            }
            RetryError::Cancelled { attempts, reason } => {
                write!(
                    f,
                    "stopped after {attempts} attempts: cancel requested ({reason})"
                )
            }
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RetryError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.last_error()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
