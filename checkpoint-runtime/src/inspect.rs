//! Questions about runs, answered from the store: counts, lists, a run's
//! status, its checkpoints (with their fields as JSON) and its history.
//! Nothing here writes.

use crate::history::{CheckpointInfo, Event, HistoryEntry};
use crate::runtime::Runtime;
use crate::schema::FieldJson;
use crate::status::{RunFilter, RunInfo, Status, StatusKind};
use crate::store::RunRecord;
use crate::Error;

impl Runtime {
    /// Sets the `checkpoint_runs` gauge (label `status`: `queued`,
    /// `running`, `waiting`, `sleeping`, `completed`, `failed`,
    /// `cancelled`, `incompatible`) of the installed `metrics` recorder
    /// from the store, and returns the counts. It lists every run, so call
    /// it every so often (a scrape, a timer), not per request.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn once(ctx: &Ctx) -> u8 { 1 }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(once, "a", ()).await?.result().await?;
    /// let counts = rt.record_run_metrics().await?;
    /// assert_eq!(counts.get(&StatusKind::Completed), Some(&1));
    /// # Ok(()) }
    /// ```
    pub async fn record_run_metrics(
        &self,
    ) -> Result<std::collections::BTreeMap<StatusKind, usize>, Error> {
        let counts = self.count_runs(RunFilter::new()).await?;
        for (kind, n) in &counts {
            metrics::gauge!("checkpoint_runs", "status" => kind.label()).set(*n as f64);
        }
        Ok(counts
            .into_iter()
            .map(|(kind, n)| (kind, usize::try_from(n).unwrap_or(usize::MAX)))
            .collect())
    }

    /// How many runs there are in each status (every kind, zero included),
    /// among those `filter` selects by workflow, id prefix and parent (its
    /// status, limit and offset are ignored). SQLite and PostgreSQL count
    /// in the database, without reading the runs.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn once(ctx: &Ctx) -> u8 { 1 }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(once, "a-1", ()).await?.result().await?;
    /// let counts = rt.count_runs(RunFilter::new().id_prefix("a-")).await?;
    /// assert_eq!(counts[&StatusKind::Completed], 1);
    /// assert_eq!(counts[&StatusKind::Waiting], 0);
    /// # Ok(()) }
    /// ```
    pub async fn count_runs(
        &self,
        filter: RunFilter,
    ) -> Result<std::collections::BTreeMap<StatusKind, u64>, Error> {
        let mut counts: std::collections::BTreeMap<StatusKind, u64> =
            StatusKind::ALL.into_iter().map(|k| (k, 0)).collect();
        for (kind, n) in self.inner.env.store.count_runs(&filter).await? {
            *counts.entry(kind).or_insert(0) += n;
        }
        Ok(counts)
    }

    /// Lists runs, oldest first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), checkpoint_runtime::Error> {
    /// use checkpoint_runtime::{RunFilter, Runtime, StatusKind};
    /// let rt = Runtime::in_memory();
    /// let waiting = rt.runs(RunFilter::new().status(StatusKind::Waiting)).await?;
    /// assert!(waiting.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn runs(&self, filter: RunFilter) -> Result<Vec<RunInfo>, Error> {
        // Stores keep `Queued` and `Running` as one state (runnable), and
        // `Waiting` and `Joining` as another: the lease and the signal's
        // name tell them apart, so those filters are applied here.
        let shares_its_state =
            |k: &StatusKind| matches!(k.stored(), StatusKind::Running | StatusKind::Waiting);
        let Some(kind) = filter.status.filter(shares_its_state) else {
            let runs = self.inner.env.store.list_runs(&filter).await?;
            return Ok(runs.into_iter().map(run_info).collect());
        };
        let (limit, offset) = (filter.limit, filter.offset);
        let runnable = RunFilter {
            limit: None,
            offset: 0,
            ..filter
        };
        let runs = self.inner.env.store.list_runs(&runnable).await?;
        Ok(runs
            .into_iter()
            .map(run_info)
            .filter(|r| r.status.kind() == kind)
            .skip(offset)
            .take(limit.unwrap_or(usize::MAX))
            .collect())
    }

    /// The status of run `id`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let rt = checkpoint_runtime::Runtime::in_memory();
    /// assert!(rt.status("nope").await.is_err());
    /// # }
    /// ```
    pub async fn status(&self, id: &str) -> Result<Status, Error> {
        Ok(self.load(id).await?.status())
    }

    pub(crate) async fn load(&self, id: &str) -> Result<RunRecord, Error> {
        self.inner
            .env
            .store
            .load_run(id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))
    }

    /// The kept checkpoint versions of run `id`, oldest first.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn steps(ctx: &Ctx, n: u32) -> Vec<u32> {
    ///     let mut done = Vec::new();
    ///     for i in 0..n {
    ///         done.push(i);
    ///         checkpoint!("step");
    ///     }
    ///     done
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(steps, "s-1", 3).await?.result().await?;
    /// let cps = rt.checkpoints("s-1").await?;
    /// assert_eq!(cps.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2, 3]);
    /// assert_eq!(cps[0].label.as_deref(), Some("step"));
    /// assert!(cps[0].fields.iter().any(|f| f.name == "done"));
    /// # Ok(()) }
    /// ```
    pub async fn checkpoints(&self, id: &str) -> Result<Vec<CheckpointInfo>, Error> {
        let cps = self.inner.env.store.list_checkpoints(id).await?;
        Ok(cps.iter().map(|c| c.info()).collect())
    }

    /// The fields of checkpoint `seq` of run `id`, each decoded as JSON, in
    /// order. Only the store is needed: the workflow need not be registered
    /// in this runtime, nor its code be in this program (each field was saved
    /// with a schema of its type; see [`crate::schema`]). A field that cannot
    /// be shown (its type had no traceable schema, its bytes do not decode)
    /// has `value: None` and a `note` saying why; that is not an error.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// use std::sync::Arc;
    /// use checkpoint_runtime::store::MemoryStore;
    /// use serde_json::json;
    ///
    /// #[workflow]
    /// async fn tally(ctx: &Ctx, items: Vec<String>) -> usize {
    ///     let mut seen = Vec::new();
    ///     for item in items {
    ///         seen.push(item);
    ///         checkpoint!("item");
    ///     }
    ///     seen.len()
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let store = Arc::new(MemoryStore::new());
    /// let rt = Runtime::builder().store(store.clone()).in_memory();
    /// let input = vec!["a".to_owned(), "b".to_owned()];
    /// rt.start(tally, "t-1", input).await?.result().await?;
    ///
    /// // Another runtime over the same store, which does not know `tally`:
    /// let viewer = Runtime::builder().store(store).in_memory();
    /// let fields = viewer.checkpoint_fields_json("t-1", 2).await?;
    /// let seen = fields.iter().find(|f| f.name == "seen").unwrap();
    /// assert_eq!(seen.value, Some(json!(["a", "b"])));
    /// # Ok(()) }
    /// ```
    pub async fn checkpoint_fields_json(
        &self,
        id: &str,
        seq: u64,
    ) -> Result<Vec<FieldJson>, Error> {
        let store = &self.inner.env.store;
        let cp = match store.checkpoint(id, seq).await? {
            Some(cp) => cp,
            None => {
                if store.load_run(id).await?.is_none() {
                    return Err(Error::unknown_run(id));
                }
                return Err(Error::UnknownCheckpoint {
                    run: id.to_owned(),
                    seq,
                });
            }
        };
        let mut keys: Vec<String> = cp.schemas.iter().flatten().map(|k| k.to_string()).collect();
        keys.sort_unstable();
        keys.dedup();
        let docs = if keys.is_empty() {
            Default::default()
        } else {
            store.schemas(&keys).await?
        };
        Ok(crate::schema::fields_json(&cp, &docs))
    }

    /// The history of run `id`, oldest first.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow]
    /// async fn once(ctx: &Ctx) -> u8 {
    ///     checkpoint!("only");
    ///     7
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(once, "o-1", ()).await?.result().await?;
    /// let events = rt.history("o-1").await?;
    /// assert_eq!(events.first(), Some(&Event::Started { workflow: "once".into(), trace: None }));
    /// assert!(events.contains(&Event::CheckpointSaved { seq: 1, label: Some("only".into()) }));
    /// assert_eq!(events.last(), Some(&Event::Completed));
    /// # Ok(()) }
    /// ```
    pub async fn history(&self, id: &str) -> Result<Vec<Event>, Error> {
        let h = self.inner.env.store.history(id).await?;
        Ok(h.into_iter().map(|e| e.event).collect())
    }

    /// The history of run `id` with timestamps, oldest first.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// # #[workflow]
    /// # async fn noop(ctx: &Ctx) {}
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// # let rt = Runtime::in_memory();
    /// # rt.start(noop, "vendor-42", ()).await?.result().await?;
    /// for entry in rt.history_entries("vendor-42").await? {
    ///     println!("{:?} {}", entry.at, entry.event);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn history_entries(&self, id: &str) -> Result<Vec<HistoryEntry>, Error> {
        self.inner.env.store.history(id).await
    }
}

pub(crate) fn run_info(r: RunRecord) -> RunInfo {
    RunInfo {
        status: r.status(),
        worker: r.lease.as_ref().map(|l| l.worker.clone()),
        lease_expires_at: r.lease.as_ref().map(|l| l.expires_at),
        id: r.id,
        workflow: r.workflow,
        created_at: r.created_at,
        updated_at: r.updated_at,
        latest_seq: r.latest_seq,
        parent: r.parent,
        cancel_reason: r.cancel.map(|c| c.reason),
        tags: r.tags,
        queue: r.queue,
        priority: r.priority,
    }
}
