//! [`Queue`]: a bound on how many runs of a queue execute at once, across
//! every worker and process of a store.

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
}
