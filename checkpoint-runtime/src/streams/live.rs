//! What one execution of a run emitted and has not stored yet
//! ([`Emitted`]), and the runtime's map from run id to the emitted items of
//! the execution it runs ([`Hub`]), where readers in this process find
//! them before they are stored.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::watch;

use crate::store::StreamItem;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The stream state of one execution: the next index, the items emitted
/// and not yet stored (oldest first, contiguous), the progress set and
/// not yet stored.
pub(crate) struct Emitted {
    next: AtomicU64,
    pending: Mutex<VecDeque<StreamItem>>,
    progress: Mutex<Option<Vec<u8>>>,
    /// Held by whoever writes pending items to the store, so that items
    /// are stored in order and each once.
    pub(crate) flush_lock: tokio::sync::Mutex<()>,
    /// Whether a background flush is under way (see `flush::kick`).
    pub(crate) flushing: AtomicBool,
    /// Bumped on every emit, store and end: readers wait on it.
    changed: watch::Sender<u64>,
}

impl Default for Emitted {
    fn default() -> Self {
        Emitted {
            next: AtomicU64::new(0),
            pending: Mutex::new(VecDeque::new()),
            progress: Mutex::new(None),
            flush_lock: tokio::sync::Mutex::new(()),
            flushing: AtomicBool::new(false),
            changed: watch::channel(0).0,
        }
    }
}

impl Emitted {
    /// The next item gets index `next` (after a resume's discard).
    pub(crate) fn start_at(&self, next: u64) {
        self.next.store(next, Ordering::Release);
    }

    /// Queues an item emitted after checkpoint `after_seq`; returns its index.
    pub(crate) fn push(&self, after_seq: u64, value: Vec<u8>) -> u64 {
        let index = {
            let mut pending = lock(&self.pending);
            let index = self.next.fetch_add(1, Ordering::AcqRel);
            pending.push_back(StreamItem {
                index,
                after_seq,
                value,
            });
            index
        };
        self.bump();
        index
    }

    pub(crate) fn set_progress(&self, value: Vec<u8>) {
        *lock(&self.progress) = Some(value);
    }

    /// Up to `max` pending items from the oldest, copied (they stay
    /// pending, visible to readers, until [`Emitted::stored`]).
    pub(crate) fn batch(&self, max: usize) -> Vec<StreamItem> {
        lock(&self.pending).iter().take(max).cloned().collect()
    }

    /// The progress to store with a checkpoint, taken.
    pub(crate) fn take_progress(&self) -> Option<Vec<u8>> {
        lock(&self.progress).take()
    }

    /// Puts back a progress value whose write failed, unless a newer one
    /// was set meanwhile.
    pub(crate) fn restore_progress(&self, value: Vec<u8>) {
        lock(&self.progress).get_or_insert(value);
    }

    /// The `n` oldest pending items are stored.
    pub(crate) fn stored(&self, n: usize) {
        {
            let mut pending = lock(&self.pending);
            let n = n.min(pending.len());
            pending.drain(..n);
        }
        self.bump();
    }

    pub(crate) fn has_pending(&self) -> bool {
        !lock(&self.pending).is_empty()
    }

    /// The pending items from index `from` on, if the oldest of them is
    /// `from` itself (else the ones before it are stored already, or were
    /// never emitted here: the caller reads the store).
    pub(crate) fn pending_from(&self, from: u64, max: usize) -> Vec<(u64, Vec<u8>)> {
        let pending = lock(&self.pending);
        let mut it = pending.iter().skip_while(|i| i.index < from).peekable();
        if it.peek().is_none_or(|i| i.index != from) {
            return Vec::new();
        }
        it.take(max).map(|i| (i.index, i.value.clone())).collect()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    pub(crate) fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// The executions of this runtime, by run id, as readers in this process
/// find their items before they are stored.
#[derive(Default)]
pub(crate) struct Hub {
    runs: Mutex<HashMap<Arc<str>, Weak<Emitted>>>,
}

impl Hub {
    /// Run `id` executes here with `emitted` (replacing an earlier execution).
    pub(crate) fn register(&self, id: &Arc<str>, emitted: &Arc<Emitted>) {
        lock(&self.runs).insert(id.clone(), Arc::downgrade(emitted));
    }

    /// The execution with `emitted` ended: readers go back to the store.
    pub(crate) fn unregister(&self, id: &str, emitted: &Arc<Emitted>) {
        let mut runs = lock(&self.runs);
        if runs
            .get(id)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(emitted)))
        {
            runs.remove(id);
        }
        drop(runs);
        emitted.bump();
    }

    /// The execution of run `id` in this runtime, if any.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Emitted>> {
        lock(&self.runs).get(id).and_then(Weak::upgrade)
    }
}
