//! [`Runtime::stream`]: a run's stream from an index on, stored items read
//! in pages, then the live ones as they come, to the run's end.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use tokio::sync::watch;

use crate::run::RunEnv;
use crate::store::STREAM_PAGE_MAX;
use crate::{Error, Runtime};

/// A run's stream as [`Runtime::stream`] returns it: `(index, item)` pairs,
/// the item as JSON, in index order, each index once; it ends after the
/// last item of a run that has ended. An error (an unknown run, a store
/// that failed) is the last thing it yields.
pub type RunStream = BoxStream<'static, Result<(u64, serde_json::Value), Error>>;

/// How often a reader that has seen everything looks at the store for
/// items another process stored (and whether the run ended), when nothing
/// in this process tells it sooner.
const POLL: Duration = Duration::from_millis(50);

/// The items of one page a reader reads at a time.
const PAGE: usize = 256;

struct Reader {
    env: Arc<RunEnv>,
    id: Arc<str>,
    next: u64,
    buf: VecDeque<(u64, serde_json::Value)>,
    /// The run has ended: after one more empty read of the store, so has
    /// the stream.
    ended: bool,
    done: bool,
    store_changes: watch::Receiver<u64>,
}

impl Reader {
    fn decode(&self, index: u64, bytes: &[u8]) -> Result<(u64, serde_json::Value), Error> {
        serde_json::from_slice(bytes)
            .map(|v| (index, v))
            .map_err(|e| Error::Decode {
                workflow: String::new(),
                run: self.id.to_string(),
                site: "<stream>".to_owned(),
                field: format!("item {index}"),
                detail: e.to_string().into(),
            })
    }

    /// Fills the buffer; `Ok(false)` once the stream is over.
    async fn fill(&mut self) -> Result<bool, Error> {
        loop {
            let live = self.env.streams.get(&self.id);
            let mut live_changes = live.as_ref().map(|l| l.subscribe());
            self.store_changes.borrow_and_update();
            let page = self
                .env
                .store
                .stream_items(&self.id, self.next, PAGE)
                .await?;
            if !page.is_empty() {
                for item in page {
                    if item.index < self.next {
                        continue;
                    }
                    let decoded = self.decode(item.index, &item.value)?;
                    self.next = item.index + 1;
                    self.buf.push_back(decoded);
                }
                return Ok(true);
            }
            if let Some(live) = &live {
                let items = live.pending_from(self.next, PAGE);
                if !items.is_empty() {
                    for (index, value) in items {
                        let decoded = self.decode(index, &value)?;
                        self.next = index + 1;
                        self.buf.push_back(decoded);
                    }
                    return Ok(true);
                }
                if live.has_pending() {
                    // Stored meanwhile (pending items begin after `next`).
                    continue;
                }
            }
            if self.ended {
                return Ok(false);
            }
            let rec = self
                .env
                .store
                .load_run(&self.id)
                .await?
                .ok_or_else(|| Error::unknown_run(&self.id))?;
            if rec.state.is_terminal() {
                // Everything it emitted was stored before it ended: one
                // more read of the store finds the rest.
                self.ended = true;
                continue;
            }
            let live_changed = async {
                match live_changes.as_mut() {
                    Some(rx) => {
                        let _ = rx.changed().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = live_changed => {}
                _ = self.store_changes.changed() => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }
}

impl Runtime {
    /// Run `id`'s stream (the items its workflow emitted with
    /// [`Ctx::emit`](crate::Ctx::emit)) from index `from` on: the stored
    /// items first, read in pages (a stream of any length is never loaded
    /// whole), then the live ones as they come, from this process at once
    /// and from other processes through the store; it ends after the last
    /// item of a run that has ended (completed, failed or cancelled).
    ///
    /// Items are durable with the checkpoint after them. After a crash the
    /// items emitted since the last checkpoint are emitted again by the
    /// re-run segment, under the same indexes: a reader that reconnects
    /// from its next index sees each index once.
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    /// use futures::StreamExt;
    ///
    /// #[workflow]
    /// async fn count(ctx: &Ctx, n: u32) -> u32 {
    ///     for i in 0..n {
    ///         ctx.emit(&i);
    ///         checkpoint!("emitted");
    ///     }
    ///     n
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(count, "c-1", 3).await?;
    /// let items: Vec<_> = rt.stream("c-1", 1).collect().await;
    /// let items: Vec<(u64, serde_json::Value)> = items.into_iter().collect::<Result<_, _>>()?;
    /// assert_eq!(items, [(1, 1.into()), (2, 2.into())]);
    /// # Ok(()) }
    /// ```
    pub fn stream(&self, id: &str, from: u64) -> RunStream {
        let env = self.inner.env.clone();
        let reader = Reader {
            store_changes: env.store.subscribe_streams(),
            env,
            id: Arc::from(id),
            next: from,
            buf: VecDeque::with_capacity(PAGE.min(STREAM_PAGE_MAX)),
            ended: false,
            done: false,
        };
        Box::pin(futures::stream::unfold(reader, |mut r| async move {
            loop {
                if let Some(item) = r.buf.pop_front() {
                    return Some((Ok(item), r));
                }
                if r.done {
                    return None;
                }
                match r.fill().await {
                    Ok(true) => {}
                    Ok(false) => return None,
                    Err(e) => {
                        r.done = true;
                        return Some((Err(e), r));
                    }
                }
            }
        }))
    }
}
