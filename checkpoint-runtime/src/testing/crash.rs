//! Simulated crashes around checkpoint writes: the hook the commit path
//! calls ([`SaveHook`]) and the one implementation tests install
//! ([`SimulatedCrash`]). Production runtimes have no hook; the commit path
//! then pays one `Option` check per checkpoint.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Asked by the commit path around each checkpoint write whether the runtime
/// crashes there. Once it answers yes, [`SaveHook::fired`] stays true and the
/// runtime stops executing.
pub(crate) trait SaveHook: Send + Sync {
    /// Numbers the checkpoint about to be stored (from 1, over all runs of
    /// the runtime) and says whether to crash before storing it.
    fn before_save(&self) -> (u64, bool);
    /// Whether to crash right after checkpoint `n` was stored by run `run`.
    fn after_save(&self, n: u64, run: &str) -> bool;
    /// Whether a crash fired.
    fn fired(&self) -> bool;
}

/// A crash simulated at one checkpoint: the execution is dropped where it
/// stands, its lease is left behind and the runtime stops executing, as if
/// the process had been killed there. Install it with
/// [`SimulatedCrash::install`]; [`Harness`](super::Harness) uses it for
/// every crash point.
///
/// ```
/// use checkpoint_runtime::prelude::*;
/// use checkpoint_runtime::testing::SimulatedCrash;
///
/// #[workflow]
/// async fn two_steps(ctx: &Ctx) -> u32 {
///     let mut n = 1;
///     checkpoint!("one");
///     n += 1;
///     checkpoint!("two");
///     n
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let store = std::sync::Arc::new(checkpoint_runtime::store::MemoryStore::new());
/// let crash = SimulatedCrash::after_checkpoint(1);
/// let rt = crash.install(Runtime::builder().store(store.clone())).in_memory();
/// rt.start(two_steps, "r", ()).await?;
/// rt.run_until_idle().await?;
/// assert!(crash.fired());
/// // Another runtime over the same store resumes after checkpoint "one".
/// let rt = Runtime::builder().store(store).in_memory();
/// assert_eq!(rt.handle(two_steps, "r").result().await?, 2);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SimulatedCrash(Arc<CrashState>);

#[derive(Debug)]
struct CrashState {
    /// The checkpoint (counted over all runs of the runtime, from 1).
    at: u64,
    /// Crash right before storing it instead of right after.
    before: bool,
    saves: AtomicU64,
    fired: AtomicBool,
    /// The run whose checkpoint the crash came right after.
    crashed_run: std::sync::Mutex<Option<String>>,
}

impl SimulatedCrash {
    fn new(at: u64, before: bool) -> Self {
        SimulatedCrash(Arc::new(CrashState {
            at,
            before,
            saves: AtomicU64::new(0),
            fired: AtomicBool::new(false),
            crashed_run: std::sync::Mutex::new(None),
        }))
    }

    /// Crash right after the runtime's `k`-th stored checkpoint (from 1).
    pub fn after_checkpoint(k: u64) -> Self {
        SimulatedCrash::new(k, false)
    }

    /// Crash right before the runtime stores its `k`-th checkpoint (from 1):
    /// the code since the previous one then runs again on resume.
    pub fn before_checkpoint(k: u64) -> Self {
        SimulatedCrash::new(k, true)
    }

    /// Whether the crash happened.
    pub fn fired(&self) -> bool {
        self.0.fired.load(Ordering::Acquire)
    }

    /// The run that stored the checkpoint a crash after a checkpoint came
    /// right after (`None` before it fired, and for a crash before one).
    pub fn crashed_run(&self) -> Option<String> {
        self.0
            .crashed_run
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn fire_if(&self, hit: bool) -> bool {
        if hit {
            self.0.fired.store(true, Ordering::Release);
        }
        self.fired()
    }
}

impl SaveHook for SimulatedCrash {
    fn before_save(&self) -> (u64, bool) {
        let n = self.0.saves.fetch_add(1, Ordering::AcqRel) + 1;
        (n, self.fire_if(self.0.before && n == self.0.at))
    }

    fn after_save(&self, n: u64, run: &str) -> bool {
        let hit = !self.0.before && n == self.0.at;
        if hit {
            *self.0.crashed_run.lock().unwrap_or_else(|e| e.into_inner()) = Some(run.to_owned());
        }
        self.fire_if(hit)
    }

    fn fired(&self) -> bool {
        SimulatedCrash::fired(self)
    }
}
