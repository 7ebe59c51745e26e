//! The runtime's clock: what durable time is.
//!
//! Every durable time decision of a runtime reads its [`Clock`]: the
//! deadline a `ctx.sleep` or `ctx.wait_for_timeout` stores, whether a
//! sleeping run is due and a waiting run's deadline passed (the store's
//! claim compares them with the clock's reading, passed in
//! [`ClaimRequest::clock_now`](crate::store::ClaimRequest::clock_now)),
//! when the worker looks for due timers next, when a cancel request's
//! grace period ends (for a run claimed or executing) and when a retry's
//! attempt times out. The default,
//! [`SystemClock`], is the system's time; [`TestClock`] is a virtual clock
//! for tests, on which a 30-day timer fires in milliseconds.
//!
//! # What stays on real time, and why
//!
//! - **Leases** (their expiry, renewals, takeovers). A lease says that a
//!   live process executes a run; it must lapse when that process has been
//!   silent for its length of *real* time, whatever a test clock reads. On
//!   a clock that jumps 30 days, every lease would lapse at once and another
//!   worker would take over runs still executing. Leases are therefore
//!   computed and compared by the store with the system's time.
//! - **Timestamps** of records (a run's `created_at` and `updated_at`, a
//!   checkpoint's `created_at`, history events, a signal's `received_at`):
//!   they say when something happened, for people; no decision reads them.
//! - **Measurements and pacing**: durations in logs and metrics, poll
//!   intervals, pauses before retrying a failed store write, the crash
//!   harness's `timeout`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::watch;

/// Where a runtime reads durable time (see the [module docs](self)).
///
/// A runtime uses [`SystemClock`] unless it is given another with
/// [`RuntimeBuilder::clock`](crate::RuntimeBuilder::clock); tests give it a
/// [`TestClock`]. Implement it for a clock of your own (a clock shared with
/// a simulator, say).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use checkpoint_runtime::prelude::*;
///
/// let clock = TestClock::manual();
/// let start = Clock::now(&clock);
/// clock.advance(Duration::from_secs(60));
/// assert_eq!(Clock::now(&clock), start + Duration::from_secs(60));
/// assert!(SystemClock.now() >= SystemTime::UNIX_EPOCH);
/// ```
pub trait Clock: fmt::Debug + Send + Sync + 'static {
    /// What time it is on this clock.
    fn now(&self) -> SystemTime;

    /// Resolves once this clock reads `deadline` or later. It may resolve
    /// earlier (the caller reads [`Clock::now`] again), never much later.
    fn wait_until(&self, deadline: SystemTime) -> BoxFuture<'static, ()>;

    /// Whether the runtime moves this clock itself ([`Clock::skip_to`])
    /// when it has nothing to run but timers. `false` by default.
    fn skips(&self) -> bool {
        false
    }

    /// Called when a runtime that waits ([`Runtime::run_until_idle`](crate::Runtime::run_until_idle),
    /// [`WorkflowHandle::result`](crate::WorkflowHandle::result)) has
    /// nothing to run and `deadline` is the earliest timer ahead: moves the
    /// clock to it and returns `true` if this clock [`skips`](Clock::skips);
    /// returns `false` (and does nothing) by default.
    fn skip_to(&self, deadline: SystemTime) -> bool {
        let _ = deadline;
        false
    }
}

/// The system's time: the clock of every runtime not given another.
///
/// ```
/// use std::time::SystemTime;
/// use checkpoint_runtime::prelude::*;
///
/// let before = SystemTime::now();
/// assert!(SystemClock.now() >= before);
/// let rt = Runtime::builder().clock(SystemClock).in_memory();
/// # let _ = rt;
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn wait_until(&self, deadline: SystemTime) -> BoxFuture<'static, ()> {
        let wait = deadline
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        Box::pin(tokio::time::sleep(wait))
    }
}

/// A virtual clock for tests: durable sleeps, `wait_for_timeout` deadlines
/// and the runtime's other timers fire when this clock says so, not when
/// the system's clock does, so a 30-day approval timeout is tested in
/// milliseconds.
///
/// It starts at the system's time when made, and moves only forward:
///
/// - **Skipping** ([`TestClock::new`]): while a test *waits on the
///   runtime* ([`Runtime::run_until_idle`](crate::Runtime::run_until_idle),
///   [`WorkflowHandle::result`](crate::WorkflowHandle::result)) and nothing
///   is left to run but timers, the clock jumps to the earliest deadline, so
///   that timer fires at once; then to the next, and so on: timers fire in
///   deadline order. Between such calls the clock stands still, so what the
///   test does before it waits (send a signal, say) happens before any
///   deadline passes: a signal sent before `run_until_idle` wins over a
///   timeout, however short.
/// - **Manual** ([`TestClock::manual`]): the clock never moves by itself;
///   [`TestClock::advance`] moves it (scripted time), and exactly the
///   timers due by then fire.
///
/// [`TestClock::advance`] works in both modes. Clones share one clock:
/// keep one to read and move the clock the runtime was given.
///
/// ```
/// use std::time::Duration;
/// use checkpoint_runtime::prelude::*;
///
/// #[workflow]
/// async fn approval(ctx: &Ctx) -> Option<bool> {
///     ctx.wait_for_timeout("approved", Duration::from_secs(30 * 86_400)).await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let clock = TestClock::new();
/// let start = clock.now();
/// let rt = Runtime::builder().clock(clock.clone()).in_memory();
///
/// // Nobody approves: the 30-day timeout fires at once.
/// let h = rt.start(approval, "a-1", ()).await?;
/// assert_eq!(h.result().await?, None);
/// assert_eq!(clock.now(), start + Duration::from_secs(30 * 86_400));
///
/// // Approved before the deadline: the signal wins, no time passes.
/// let h = rt.start(approval, "a-2", ()).await?;
/// rt.signal("a-2", "approved", &true).await?;
/// rt.run_until_idle().await?;
/// assert_eq!(h.result().await?, Some(true));
/// assert_eq!(clock.now(), start + Duration::from_secs(30 * 86_400));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TestClock {
    inner: Arc<Shared>,
}

struct Shared {
    now: watch::Sender<SystemTime>,
    skips: bool,
}

impl TestClock {
    /// A clock that skips to the earliest deadline whenever a waiting
    /// runtime has nothing else to run (see the type's docs), starting at
    /// the system's time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn nap(ctx: &Ctx) -> u32 {
    ///     ctx.sleep(Duration::from_secs(30 * 86_400)).await;
    ///     7
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let clock = TestClock::new();
    /// let start = clock.now();
    /// let rt = Runtime::builder().clock(clock.clone()).in_memory();
    /// rt.start(nap, "n", ()).await?;
    /// rt.run_until_idle().await?; // skips the 30 days: the run completes
    /// assert_eq!(rt.status("n").await?, Status::Completed);
    /// assert_eq!(clock.now(), start + Duration::from_secs(30 * 86_400));
    /// # Ok(()) }
    /// ```
    pub fn new() -> Self {
        Self::make(true)
    }

    /// A clock that moves only when [`TestClock::advance`] moves it,
    /// starting at the system's time: scripted time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn nap(ctx: &Ctx, days: u64) -> u64 {
    ///     ctx.sleep(Duration::from_secs(days * 86_400)).await;
    ///     days
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let clock = TestClock::manual();
    /// let rt = Runtime::builder().clock(clock.clone()).in_memory();
    /// rt.start(nap, "one", 1).await?;
    /// rt.start(nap, "three", 3).await?;
    /// rt.run_until_idle().await?; // both asleep; the clock stands still
    ///
    /// clock.advance(Duration::from_secs(2 * 86_400));
    /// rt.run_until_idle().await?;
    /// assert_eq!(rt.status("one").await?, Status::Completed);
    /// assert!(matches!(rt.status("three").await?, Status::Sleeping { .. }));
    /// # Ok(()) }
    /// ```
    pub fn manual() -> Self {
        Self::make(false)
    }

    fn make(skips: bool) -> Self {
        TestClock {
            inner: Arc::new(Shared {
                now: watch::channel(SystemTime::now()).0,
                skips,
            }),
        }
    }

    /// What time it is on this clock (for assertions).
    ///
    /// ```
    /// use std::time::Duration;
    /// use checkpoint_runtime::TestClock;
    ///
    /// let clock = TestClock::new();
    /// let t = clock.now();
    /// assert_eq!(clock.now(), t); // it stands still until moved
    /// clock.advance(Duration::from_millis(1));
    /// assert_eq!(clock.now(), t + Duration::from_millis(1));
    /// ```
    pub fn now(&self) -> SystemTime {
        *self.inner.now.borrow()
    }

    /// Moves the clock `d` forward and wakes the runtimes on it: the runs
    /// whose timers are due by the new time become runnable (a worker loop
    /// takes them up; `run_until_idle` waits until they are done), later
    /// ones are not. A `d` that would overflow the clock moves it as far as
    /// it goes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use checkpoint_runtime::TestClock;
    ///
    /// let clock = TestClock::manual();
    /// let t = clock.now();
    /// clock.advance(Duration::from_secs(86_400));
    /// assert_eq!(clock.now(), t + Duration::from_secs(86_400));
    /// ```
    pub fn advance(&self, d: Duration) {
        self.inner.now.send_modify(|now| {
            *now = now
                .checked_add(d)
                .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
                .unwrap_or(*now);
        });
    }

    /// Moves the clock to `t` if that is later (never back), waking the
    /// runtimes on it like [`TestClock::advance`].
    pub(crate) fn advance_to(&self, t: SystemTime) {
        self.inner.now.send_if_modified(|now| {
            let later = t > *now;
            if later {
                *now = t;
            }
            later
        });
    }

    /// Whether this clock skips to the earliest deadline by itself
    /// ([`TestClock::new`]) or only moves when advanced
    /// ([`TestClock::manual`]).
    ///
    /// ```
    /// use checkpoint_runtime::TestClock;
    ///
    /// assert!(TestClock::new().skips_time());
    /// assert!(!TestClock::manual().skips_time());
    /// ```
    pub fn skips_time(&self) -> bool {
        self.inner.skips
    }
}

impl Default for TestClock {
    /// [`TestClock::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for TestClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestClock")
            .field("now", &self.now())
            .field("skips", &self.inner.skips)
            .finish()
    }
}

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        TestClock::now(self)
    }

    fn wait_until(&self, deadline: SystemTime) -> BoxFuture<'static, ()> {
        let mut rx = self.inner.now.subscribe();
        Box::pin(async move {
            if rx.wait_for(|now| *now >= deadline).await.is_err() {
                // The clock is gone (it cannot be while a runtime holds it):
                // its time never comes.
                std::future::pending::<()>().await;
            }
        })
    }

    fn skips(&self) -> bool {
        self.inner.skips
    }

    fn skip_to(&self, deadline: SystemTime) -> bool {
        if self.inner.skips {
            self.advance_to(deadline);
        }
        self.inner.skips
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_clock_moves_only_forward_and_clones_share_it() {
        let clock = TestClock::manual();
        let other = clock.clone();
        let t = clock.now();
        other.advance(Duration::from_secs(5));
        assert_eq!(clock.now(), t + Duration::from_secs(5));
        clock.advance_to(t);
        assert_eq!(clock.now(), t + Duration::from_secs(5));
        assert!(!Clock::skip_to(&clock, t + Duration::from_secs(60)));
        assert_eq!(clock.now(), t + Duration::from_secs(5));
        let skipping = TestClock::new();
        let t = skipping.now();
        assert!(Clock::skip_to(&skipping, t + Duration::from_secs(60)));
        assert_eq!(skipping.now(), t + Duration::from_secs(60));
    }

    #[tokio::test]
    async fn wait_until_resolves_when_the_clock_gets_there() {
        let clock = TestClock::manual();
        let at = clock.now() + Duration::from_secs(10);
        let waiting = tokio::spawn(Clock::wait_until(&clock, at));
        clock.advance(Duration::from_secs(9));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        clock.advance(Duration::from_secs(1));
        waiting.await.unwrap();
    }
}
