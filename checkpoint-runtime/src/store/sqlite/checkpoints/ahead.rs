//! What the caller of `save_checkpoint` finds out about a large field
//! while the writer thread wakes up: whether its bytes extend those of the
//! same field in the run's previous record.
//!
//! Planning a delta (see [`delta`](super::delta)) compares the field's old
//! body with the new bytes: about 150 us at a 2 MB history, on the writer,
//! after the 50-100 us it takes to wake up, both in every checkpoint's
//! latency. The caller has the previous record at hand (the one it saved
//! last, kept here by reference) and an idle moment: the request is sent
//! first, the caller compares while the writer wakes and opens its
//! transaction, and the writer takes the result ([`Ahead::take`]) instead
//! of comparing again. It uses it only if its own previous record of the
//! run is the very record the caller compared with (the same allocation):
//! otherwise (its cache was reset, another process wrote) it compares
//! itself, as before.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, Weak};

use super::delta::find_extension;
use super::seal::LARGE_FIELD;
use crate::store::CheckpointRecord;

/// Field `field` is `new[..new_header] ++ old[old_header..] ++ tail`,
/// where `old` is field `old_field` of record `prev` (compared).
#[derive(Clone, Debug)]
pub(in crate::store::sqlite) struct Extension {
    pub(in crate::store::sqlite) field: usize,
    pub(in crate::store::sqlite) old_field: usize,
    pub(in crate::store::sqlite) old_header: usize,
    pub(in crate::store::sqlite) new_header: usize,
    prev: Weak<CheckpointRecord>,
}

impl Extension {
    /// Whether this was found against `prev` itself.
    pub(in crate::store::sqlite) fn against(&self, prev: &Arc<CheckpointRecord>) -> bool {
        std::ptr::eq(self.prev.as_ptr(), Arc::as_ptr(prev))
    }
}

/// The extensions found for one request, handed from the caller to the
/// writer.
#[derive(Default)]
pub(in crate::store::sqlite) struct Ahead {
    found: Mutex<Option<Vec<Extension>>>,
    ready: Condvar,
}

impl Ahead {
    /// The extensions, once the caller is done (it is already at it, on its
    /// own thread, when the writer asks: see [`Filler`]).
    pub(in crate::store::sqlite) fn take(&self) -> Vec<Extension> {
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(found) = found.take() {
                return found;
            }
            found = self.ready.wait(found).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn put(&self, found: Vec<Extension>) {
        *self.found.lock().unwrap_or_else(|e| e.into_inner()) = Some(found);
        self.ready.notify_all();
    }
}

/// Fills an [`Ahead`]; if dropped unfilled (a panic while comparing), with
/// nothing, so that the writer never waits for good.
pub(in crate::store::sqlite) struct Filler(Option<Arc<Ahead>>);

impl Ahead {
    /// A hand-over, and what fills it.
    pub(in crate::store::sqlite) fn new() -> (Arc<Ahead>, Filler) {
        let ahead = Arc::new(Ahead::default());
        (ahead.clone(), Filler(Some(ahead)))
    }
}

impl Filler {
    pub(in crate::store::sqlite) fn fill(mut self, found: Vec<Extension>) {
        if let Some(a) = self.0.take() {
            a.put(found);
        }
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        if let Some(a) = self.0.take() {
            a.put(Vec::new());
        }
    }
}

/// The latest record with a large field saved through this store, per run.
#[derive(Default)]
pub(in crate::store::sqlite) struct Recent(Mutex<HashMap<Arc<str>, Weak<CheckpointRecord>>>);

/// Runs whose record is gone are forgotten once the map holds this many.
const PRUNE_AT: usize = 256;

fn large(cp: &CheckpointRecord) -> bool {
    cp.fields.iter().any(|f| f.len >= LARGE_FIELD)
}

impl Recent {
    /// For a record with a large field: notes it as its run's latest, and
    /// returns the run's previous one, if it is the version before.
    pub(in crate::store::sqlite) fn note(
        &self,
        cp: &Arc<CheckpointRecord>,
    ) -> Option<Arc<CheckpointRecord>> {
        if !large(cp) {
            return None;
        }
        let prev = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if map.len() >= PRUNE_AT {
                map.retain(|_, w| w.strong_count() > 0);
            }
            map.insert(cp.run.clone(), Arc::downgrade(cp))
        };
        prev.and_then(|w| w.upgrade())
            .filter(|p| p.seq.checked_add(1) == Some(cp.seq))
    }
}

/// The large fields of `cp` that extend the same field of `prev`.
pub(in crate::store::sqlite) fn extensions(
    cp: &CheckpointRecord,
    prev: &Arc<CheckpointRecord>,
) -> Vec<Extension> {
    let mut found = Vec::new();
    for (i, f) in cp.fields.iter().enumerate() {
        if f.len < LARGE_FIELD {
            continue;
        }
        let Some(j) = prev.fields.iter().position(|pf| pf.name == f.name) else {
            continue;
        };
        let (Some(new), Some(old)) = (cp.field_bytes(i), prev.field_bytes(j)) else {
            continue;
        };
        if let Some((old_header, new_header)) = find_extension(new, old) {
            found.push(Extension {
                field: i,
                old_field: j,
                old_header,
                new_header,
                prev: Arc::downgrade(prev),
            });
        }
    }
    found
}
