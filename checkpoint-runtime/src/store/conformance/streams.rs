//! Conformance: a run's stream items and progress
//! ([`Store::write_stream`] and the reads and discards that go with it).

use super::*;
use crate::store::{StreamItem, StreamWrite, STREAM_PAGE_MAX};

fn item(index: u64, after_seq: u64) -> StreamItem {
    StreamItem {
        index,
        after_seq,
        value: format!("{{\"i\":{index},\"after\":{after_seq}}}").into_bytes(),
    }
}

fn items(range: std::ops::Range<u64>, after_seq: u64) -> StreamWrite {
    StreamWrite {
        items: range.map(|i| item(i, after_seq)).collect(),
        progress: None,
    }
}

/// Every stored index of run `id` from `from` on, read page by page.
fn all_indexes(store: &dyn Store, id: &str, from: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut next = from;
    loop {
        let page = block_on(store.stream_items(id, next, 400)).unwrap();
        assert!(page.len() <= 400);
        let Some(last) = page.last() else { break };
        next = last.index + 1;
        out.extend(page.iter().map(|i| i.index));
    }
    out
}

/// Conformance: stream items are appended and read back in pages, in index
/// order, from any index; a page is never larger than [`STREAM_PAGE_MAX`];
/// an index written again is replaced.
pub fn stream_items_are_appended_and_read_in_pages(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    assert!(block_on(store.stream_items("r", 0, 10)).unwrap().is_empty());
    let n = STREAM_PAGE_MAX as u64 + 500;
    block_on(store.write_stream("r", &c.lease, items(0..700, 0))).unwrap();
    block_on(store.write_stream("r", &c.lease, items(700..n, 0))).unwrap();
    // A page asked larger than the bound is cut to it.
    let page = block_on(store.stream_items("r", 0, usize::MAX)).unwrap();
    assert_eq!(page.len(), STREAM_PAGE_MAX);
    assert_eq!(page[0], item(0, 0));
    assert_eq!(
        page[STREAM_PAGE_MAX - 1],
        item(STREAM_PAGE_MAX as u64 - 1, 0)
    );
    assert_eq!(all_indexes(store, "r", 0), (0..n).collect::<Vec<_>>());
    // From the middle, a few.
    let mid = block_on(store.stream_items("r", 1234, 3)).unwrap();
    assert_eq!(mid, vec![item(1234, 0), item(1235, 0), item(1236, 0)]);
    assert!(block_on(store.stream_items("r", n, 10)).unwrap().is_empty());
    // Written again (a flush repeated after an error): replaced, not doubled.
    let again = StreamItem {
        index: 5,
        after_seq: 0,
        value: b"\"five\"".to_vec(),
    };
    let write = StreamWrite {
        items: vec![again.clone()],
        progress: None,
    };
    block_on(store.write_stream("r", &c.lease, write)).unwrap();
    let five = block_on(store.stream_items("r", 5, 1)).unwrap();
    assert_eq!(five, vec![again]);
    assert_eq!(all_indexes(store, "r", 0).len() as u64, n);
    // An unknown run is an error, not an empty stream.
    let err = block_on(store.stream_items("nope", 0, 10)).unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err}");
}

/// Conformance: a resume from checkpoint `S` discards the items emitted
/// after it (`after_seq >= S`), keeps the earlier ones, and names the next
/// free index; a resume from the input (0) discards every item.
pub fn a_resume_discards_the_items_emitted_after_its_checkpoint(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    block_on(store.write_stream("r", &c.lease, items(0..2, 0))).unwrap();
    block_on(store.save_checkpoint(&c.lease, cp("r", 1), None)).unwrap();
    block_on(store.write_stream("r", &c.lease, items(2..4, 1))).unwrap();
    block_on(store.save_checkpoint(&c.lease, cp("r", 2), None)).unwrap();
    block_on(store.write_stream("r", &c.lease, items(4..7, 2))).unwrap();
    assert_eq!(all_indexes(store, "r", 0), (0..7).collect::<Vec<_>>());
    // Nothing emitted after checkpoint 3 (there is none): all kept.
    let next = block_on(store.discard_stream("r", &c.lease, 3)).unwrap();
    assert_eq!(next, 7);
    // Resumed from checkpoint 2: the segment after it runs again.
    let next = block_on(store.discard_stream("r", &c.lease, 2)).unwrap();
    assert_eq!(next, 4);
    assert_eq!(all_indexes(store, "r", 0), (0..4).collect::<Vec<_>>());
    // Emitted again under the same indexes, then more.
    block_on(store.write_stream("r", &c.lease, items(4..9, 2))).unwrap();
    assert_eq!(all_indexes(store, "r", 3), (3..9).collect::<Vec<_>>());
    // Resumed from checkpoint 1, then from the input.
    assert_eq!(block_on(store.discard_stream("r", &c.lease, 1)).unwrap(), 2);
    assert_eq!(all_indexes(store, "r", 0), vec![0, 1]);
    assert_eq!(block_on(store.discard_stream("r", &c.lease, 0)).unwrap(), 0);
    assert!(all_indexes(store, "r", 0).is_empty());
}

/// Conformance: only the holder of the run's current lease writes or
/// discards its stream and progress: a worker that lost its lease (taken
/// over) writes nothing, and nobody writes once the run has ended.
pub fn a_stale_lease_cannot_write_the_stream(store: &dyn Store) {
    new_run(store, "r");
    let old = claim_one(store, "a", "a1").lease;
    block_on(store.write_stream("r", &old, items(0..2, 0))).unwrap();
    // Same worker id, new instance: takes the run over at once.
    let new = claim_one(store, "a", "a2").lease;
    let stale = StreamWrite {
        items: vec![item(2, 0)],
        progress: Some(b"1".to_vec()),
    };
    let err = block_on(store.write_stream("r", &old, stale)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    let err = block_on(store.discard_stream("r", &old, 0)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    // Nothing of the stale writes is stored.
    assert_eq!(all_indexes(store, "r", 0), vec![0, 1]);
    assert_eq!(block_on(store.progress("r")).unwrap(), None);
    // The new holder starts over (from the input).
    assert_eq!(block_on(store.discard_stream("r", &new, 0)).unwrap(), 0);
    block_on(store.write_stream("r", &new, items(0..1, 0))).unwrap();
    let done = Outcome::Completed {
        output: Arc::from(&b"null"[..]),
        error: None,
    };
    block_on(store.finish("r", &new, done)).unwrap();
    let err = block_on(store.write_stream("r", &new, items(1..2, 0))).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert_eq!(all_indexes(store, "r", 0), vec![0]);
    let err = block_on(store.write_stream("nope", &new, items(0..1, 0))).unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err}");
}

/// Conformance: a run's progress is the latest value written (a write of
/// items alone keeps it), readable while it runs, waits and after it ends.
pub fn progress_is_the_latest_value_and_outlives_the_run(store: &dyn Store) {
    new_run(store, "r");
    new_run(store, "other");
    let claimed = block_on(store.claim(&req("a", "a1"))).unwrap().claimed;
    let lease = lease_of(&claimed, "r");
    assert_eq!(block_on(store.progress("r")).unwrap(), None);
    for p in [&b"{\"done\":1}"[..], b"{\"done\":2}"] {
        let write = StreamWrite {
            items: vec![],
            progress: Some(p.to_vec()),
        };
        block_on(store.write_stream("r", &lease, write)).unwrap();
    }
    block_on(store.write_stream("r", &lease, items(0..3, 0))).unwrap();
    let latest = Some(b"{\"done\":2}".to_vec());
    assert_eq!(block_on(store.progress("r")).unwrap(), latest);
    // Per run.
    assert_eq!(block_on(store.progress("other")).unwrap(), None);
    // Waiting.
    let wait = suspended_cp("r", 1, waiting("go", None));
    block_on(store.save_checkpoint(&lease, wait, None)).unwrap();
    block_on(store.release("r", &lease, Release::Suspend)).unwrap();
    assert_eq!(block_on(store.progress("r")).unwrap(), latest);
    // Ended.
    block_on(store.cancel("r")).unwrap();
    assert_eq!(block_on(store.progress("r")).unwrap(), latest);
    let err = block_on(store.progress("nope")).unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err}");
}
