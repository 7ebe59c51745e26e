//! The schedules a runtime fires ([`Registered`]): each one's definition and
//! the function that starts a tick's run, by name. Held by the runtime's
//! shared state; used by `scheduler.rs`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::Notify;

use crate::schedule::{Schedule, Tick};
use crate::Error;

/// Starts the run of one tick (the workflow and input function given to
/// `Runtime::schedule`): `true` when it created it, `false` when the run
/// existed (another worker fired the tick first).
pub(crate) type Fire = Arc<dyn Fn(Tick) -> BoxFuture<'static, Result<bool, Error>> + Send + Sync>;

/// One registered schedule.
pub(crate) struct Entry {
    pub schedule: Schedule,
    pub fire: Fire,
}

/// The schedules a runtime fires, by name, and its firing loop's wake-up.
#[derive(Default)]
pub(crate) struct Registered {
    entries: Mutex<BTreeMap<String, Arc<Entry>>>,
    changed: Arc<Notify>,
    started: AtomicBool,
}

impl Registered {
    pub fn insert(&self, name: String, entry: Entry) {
        crate::run::lock(&self.entries).insert(name, Arc::new(entry));
        self.wake();
    }

    pub fn remove(&self, name: &str) {
        crate::run::lock(&self.entries).remove(name);
    }

    pub fn get(&self, name: &str) -> Option<Arc<Entry>> {
        crate::run::lock(&self.entries).get(name).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Entry>> {
        crate::run::lock(&self.entries).values().cloned().collect()
    }

    /// Wakes the firing loop (a schedule was added, paused or unpaused).
    pub fn wake(&self) {
        self.changed.notify_one();
    }

    /// What the firing loop waits on (kept without the runtime).
    pub fn changed(&self) -> Arc<Notify> {
        Arc::clone(&self.changed)
    }

    /// `true` once: the caller starts the firing loop.
    pub fn start_loop_once(&self) -> bool {
        !self.started.swap(true, Ordering::AcqRel)
    }
}
