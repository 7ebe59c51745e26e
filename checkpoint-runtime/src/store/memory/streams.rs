//! The stream and progress of runs in a [`MemoryStore`]: per run, an
//! ordered map of items and the latest progress, apart from its entry.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Entry, MemoryStore, State};
use crate::store::{page_size, rules, Lease, StreamItem, StreamWrite};
use crate::Error;

/// One run's stream and progress.
#[derive(Default)]
pub(super) struct RunStream {
    items: BTreeMap<u64, StreamItem>,
    progress: Option<Vec<u8>>,
}

impl MemoryStore {
    fn stream_fenced<'s>(
        st: &'s mut State,
        id: &str,
        lease: &Lease,
    ) -> Result<&'s mut RunStream, Error> {
        let e: &Entry = st.runs.get(id).ok_or_else(|| Error::unknown_run(id))?;
        rules::streams::may_write(id, &e.rec, lease)?;
        Ok(st.streams.entry(Arc::from(id)).or_default())
    }

    pub(super) fn do_write_stream(
        &self,
        id: &str,
        lease: &Lease,
        write: StreamWrite,
    ) -> Result<(), Error> {
        let mut st = self.lock();
        let s = Self::stream_fenced(&mut st, id, lease)?;
        for item in write.items {
            s.items.insert(item.index, item);
        }
        if let Some(p) = write.progress {
            s.progress = Some(p);
        }
        Ok(())
    }

    pub(super) fn do_discard_stream(
        &self,
        id: &str,
        lease: &Lease,
        from_seq: u64,
    ) -> Result<u64, Error> {
        let mut st = self.lock();
        let s = Self::stream_fenced(&mut st, id, lease)?;
        s.items
            .retain(|_, item| rules::streams::kept_on_resume(item, from_seq));
        Ok(rules::streams::next_index(
            s.items.last_key_value().map(|(i, _)| *i),
        ))
    }

    pub(super) fn do_stream_items(
        &self,
        id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<StreamItem>, Error> {
        let st = self.lock();
        if !st.runs.contains_key(id) {
            return Err(Error::unknown_run(id));
        }
        Ok(st.streams.get(id).map_or_else(Vec::new, |s| {
            s.items
                .range(from..)
                .take(page_size(limit))
                .map(|(_, item)| item.clone())
                .collect()
        }))
    }

    pub(super) fn do_progress(&self, id: &str) -> Result<Option<Vec<u8>>, Error> {
        let st = self.lock();
        if !st.runs.contains_key(id) {
            return Err(Error::unknown_run(id));
        }
        Ok(st.streams.get(id).and_then(|s| s.progress.clone()))
    }
}
