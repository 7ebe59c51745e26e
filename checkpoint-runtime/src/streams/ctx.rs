//! `ctx.emit`, `ctx.set_progress` and [`WorkflowHandle::progress`].

use std::sync::atomic::Ordering;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::flush::kick;
use crate::ctx::Ctx;
use crate::handle::WorkflowHandle;
use crate::run::Halt;
use crate::workflow::Workflow;
use crate::Error;

impl Ctx {
    /// JSON of `value`, or the run halts (failed) with an
    /// [`Error::Encode`] naming `what`.
    fn json_of<T: Serialize + ?Sized>(&self, value: &T, what: &str) -> Option<Vec<u8>> {
        match serde_json::to_vec(value) {
            Ok(bytes) => Some(bytes),
            Err(e) => {
                self.run.halt(Halt::Failed(Error::Encode {
                    workflow: self.run.workflow.to_owned(),
                    run: self.run.id.to_string(),
                    site: "<stream>".to_owned(),
                    field: format!("{what} ({})", std::any::type_name::<T>()),
                    detail: e.to_string().into(),
                }));
                None
            }
        }
    }

    /// Appends `item` (as JSON) to the run's stream, under the run's next
    /// index (from 0). Readers ([`Runtime::stream`](crate::Runtime::stream))
    /// in this process see it at once, others once it is stored: soon, in
    /// the background, and at the latest with the next checkpoint, which is
    /// when it becomes durable. After a crash the items emitted since the
    /// last checkpoint are emitted again by the re-run segment, under the
    /// same indexes. An item that does not serialize as JSON fails the run
    /// ([`Error::Encode`]).
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    /// use futures::StreamExt;
    ///
    /// #[workflow]
    /// async fn agent(ctx: &Ctx, words: Vec<String>) -> usize {
    ///     for w in &words {
    ///         ctx.emit(w);
    ///     }
    ///     checkpoint!("said");
    ///     words.len()
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(agent, "agent-7", vec!["hello".into(), "world".into()]).await?;
    /// let mut s = rt.stream("agent-7", 0);
    /// assert_eq!(s.next().await.transpose()?, Some((0, "hello".into())));
    /// assert_eq!(s.next().await.transpose()?, Some((1, "world".into())));
    /// assert!(s.next().await.is_none()); // the run ended
    /// # Ok(()) }
    /// ```
    pub fn emit<T: Serialize + ?Sized>(&self, item: &T) {
        if self.run.probe || self.run.is_halted() {
            return;
        }
        let Some(bytes) = self.json_of(item, "stream item") else {
            return;
        };
        let after_seq = self.run.seq.load(Ordering::Acquire);
        self.run.emitted.push(after_seq, bytes);
        kick(&self.run);
    }

    /// Sets the run's progress to `value` (as JSON): the latest value wins,
    /// and it is stored with the next checkpoint (or the run's end), from
    /// when [`WorkflowHandle::progress`] in any process reads it, while the
    /// run is running, waiting or parked and after it ended. A value that
    /// does not serialize as JSON fails the run ([`Error::Encode`]).
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Debug, PartialEq, Serialize, Deserialize)]
    /// struct Progress { done: u32, total: u32 }
    ///
    /// #[workflow]
    /// async fn import(ctx: &Ctx, total: u32) -> u32 {
    ///     for done in 1..=total {
    ///         ctx.set_progress(&Progress { done, total });
    ///         checkpoint!("imported");
    ///     }
    ///     let _: () = ctx.wait_for("close").await;
    ///     total
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(import, "import-1", 3).await?;
    /// rt.run_until_idle().await?; // waits for "close"
    /// let p: Option<Progress> = h.progress().await?;
    /// assert_eq!(p, Some(Progress { done: 3, total: 3 }));
    /// # Ok(()) }
    /// ```
    pub fn set_progress<T: Serialize + ?Sized>(&self, value: &T) {
        if self.run.probe || self.run.is_halted() {
            return;
        }
        if let Some(bytes) = self.json_of(value, "progress") {
            self.run.emitted.set_progress(bytes);
        }
    }
}

impl<W: Workflow> WorkflowHandle<W> {
    /// The run's latest stored progress ([`Ctx::set_progress`]), decoded as
    /// `T`; `None` if the run stored none yet. Readable from any process,
    /// while the run is running, waiting or parked, and after it ended.
    /// [`Error::UnknownRun`] for a run that does not exist,
    /// [`Error::Decode`] for a progress that is not a `T`.
    ///
    /// ```
    /// use checkpoint_runtime::prelude::*;
    ///
    /// #[workflow]
    /// async fn halfway(ctx: &Ctx) {
    ///     ctx.set_progress(&50u8);
    ///     checkpoint!("half");
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let h = rt.start(halfway, "h-1", ()).await?;
    /// h.result().await?;
    /// assert_eq!(h.progress::<u8>().await?, Some(50));
    /// # Ok(()) }
    /// ```
    pub async fn progress<T: DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        let Some(bytes) = self.rt.env.store.progress(&self.id).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Decode {
                workflow: W::NAME.to_owned(),
                run: self.id.to_string(),
                site: "<progress>".to_owned(),
                field: format!("progress (expected `{}`)", std::any::type_name::<T>()),
                detail: e.to_string().into(),
            })
    }
}
