//! The conformance suite on the memory store.

use super::MemoryStore;
use crate::store::conformance::{conformance_tests, Fixture};
use crate::store::Store;

impl Fixture for MemoryStore {
    fn store(&self) -> &dyn Store {
        self
    }

    fn lose_checkpoint(&self, run: &str, seq: u64) {
        let mut st = self.lock();
        if let Some(e) = st.runs.get_mut(run) {
            e.checkpoints.retain(|c| c.seq != seq);
        }
    }
}

conformance_tests!(|_test: &str| Some(MemoryStore::new()));
