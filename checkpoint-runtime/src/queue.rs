//! [`Queue`]: a bound on how many runs of a queue execute at once, across
//! every worker and process of a store.

use std::time::Duration;

/// A queue's limits, declared on the builder with
/// [`RuntimeBuilder::queue`](crate::RuntimeBuilder::queue); runs join a
/// queue with [`StartOptions::queue`](crate::StartOptions::queue).
///
/// With a concurrency of `n`, a claim takes a run of the queue only while
/// fewer than `n` runs of it hold a live lease, counted in the store in the
/// claim's own transaction, so the bound holds across every worker and
/// process of the store (declare the queue alike on each of them: a
/// worker that does not declare it claims the queue's runs unbounded). A
/// run waiting for its queue holds no worker; its status is
/// [`Status::InQueue`](crate::Status::InQueue). Within a queue, runs are
/// admitted by priority (higher first), then oldest first. The slot of a
/// run whose worker died frees when its lease expires.
///
/// ```
/// use checkpoint_runtime::Queue;
///
/// let llm = Queue::new().concurrency(8);
/// assert_eq!(llm.concurrency, Some(8));
/// assert_eq!(Queue::new().concurrency, None); // no bound
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Queue {
    /// At most this many runs of the queue execute at once; `None`: no
    /// bound.
    pub concurrency: Option<u32>,
    /// At most this many admissions (claims of its runs) per this long a
    /// window, sliding; `None`: no rate limit.
    pub rate: Option<(u32, Duration)>,
}

impl Queue {
    /// A queue without limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `n` runs of the queue execute at once, across every worker
    /// of the store (0 is taken as 1).
    pub fn concurrency(mut self, n: u32) -> Self {
        self.concurrency = Some(n.max(1));
        self
    }

    /// At most `count` of the queue's runs are admitted (claimed) within
    /// any window of length `per` (a sliding window, on the system's time),
    /// across every worker of the store: each admission is stored with the
    /// queue, and a claim counts those of the last `per`. A run the rate
    /// holds back stays queued ([`Status::InQueue`](crate::Status::InQueue))
    /// and is claimed once the window allows it (workers wake for that by
    /// themselves). Every claim counts: a run claimed again (a retry, a
    /// resumption after a wait) is admitted again. 0 is taken as 1.
    /// [`Runtime::run_until_idle`](crate::Runtime::run_until_idle) does not
    /// wait for a window to free (as it does not wait for another worker's
    /// lease): [`WorkflowHandle::result`](crate::WorkflowHandle::result),
    /// or a worker, does.
    ///
    /// ```
    /// use std::time::Duration;
    /// use checkpoint_runtime::Queue;
    ///
    /// let llm = Queue::new().concurrency(8).rate(600, Duration::from_secs(60));
    /// assert_eq!(llm.rate, Some((600, Duration::from_secs(60))));
    /// ```
    pub fn rate(mut self, count: u32, per: Duration) -> Self {
        self.rate = Some((count.max(1), per));
        self
    }
}
