//! The records of a run's stream and progress ([`Store::write_stream`],
//! [`Store::stream_items`], [`Store::discard_stream`], [`Store::progress`]):
//! kept per run, apart from its checkpoints and history.
//!
//! [`Store::write_stream`]: super::Store::write_stream
//! [`Store::stream_items`]: super::Store::stream_items
//! [`Store::discard_stream`]: super::Store::discard_stream
//! [`Store::progress`]: super::Store::progress

/// The most items one [`Store::stream_items`](super::Store::stream_items)
/// call returns, whatever limit it is given: a stream is read in pages of
/// at most this many, never whole.
pub const STREAM_PAGE_MAX: usize = 1_000;

/// One item of a run's stream (`ctx.emit`), as stored.
///
/// ```
/// use checkpoint_runtime::store::StreamItem;
///
/// let item = StreamItem { index: 0, after_seq: 0, value: br#"{"token":"hi"}"#.to_vec() };
/// assert_eq!(item.index, 0);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamItem {
    /// Its place in the run's stream, from 0, without gaps.
    pub index: u64,
    /// The sequence number of the run's latest checkpoint when it was
    /// emitted (0: none yet). A resume from checkpoint `S` discards the
    /// items with `after_seq >= S` (their segment runs again and emits them
    /// again, under the same indexes).
    pub after_seq: u64,
    /// The item as JSON.
    pub value: Vec<u8>,
}

/// What one [`Store::write_stream`](super::Store::write_stream) stores:
/// items (an item whose index is stored already replaces it) and, when
/// set, the run's progress (latest value wins).
///
/// ```
/// use checkpoint_runtime::store::{StreamItem, StreamWrite};
///
/// let write = StreamWrite {
///     items: vec![StreamItem { index: 0, after_seq: 0, value: b"1".to_vec() }],
///     progress: Some(br#"{"done":1}"#.to_vec()),
/// };
/// assert!(!write.is_empty());
/// assert!(StreamWrite::default().is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamWrite {
    /// Items, in index order.
    pub items: Vec<StreamItem>,
    /// The run's progress as JSON, if it changed.
    pub progress: Option<Vec<u8>>,
}

impl StreamWrite {
    /// Whether there is nothing to store.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.progress.is_none()
    }
}

/// The page size a backend reads for a `limit` asked of
/// [`Store::stream_items`](super::Store::stream_items): at least 1, at
/// most [`STREAM_PAGE_MAX`].
pub(crate) fn page_size(limit: usize) -> usize {
    limit.clamp(1, STREAM_PAGE_MAX)
}
