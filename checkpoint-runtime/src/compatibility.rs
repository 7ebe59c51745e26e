//! The pre-deploy check: which unfinished runs the code registered on a
//! runtime could not resume ([`Runtime::check_compatibility`]).

use serde::{Deserialize, Serialize};

use crate::status::RunFilter;
use crate::{Error, Runtime};

/// An unfinished run that the registered code would park instead of
/// resuming, and why (see [`Runtime::check_compatibility`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Incompatibility {
    /// The run id.
    pub run: String,
    /// The run's workflow.
    pub workflow: String,
    /// The site of its latest checkpoint (`<input>` for a run without one,
    /// `-` when the workflow is not registered).
    pub site: String,
    /// The field that does not fit (`-` when it is the site or the workflow).
    pub field: String,
    /// Why.
    pub detail: String,
}

impl std::fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "run `{}` (workflow `{}`) at site `{}`, field `{}`: {}",
            self.run, self.workflow, self.site, self.field, self.detail
        )
    }
}

impl Incompatibility {
    fn of(run: &str, workflow: &str, error: Error) -> Incompatibility {
        let (site, field, detail) = error.refused_at();
        Incompatibility {
            run: run.to_owned(),
            workflow: workflow.to_owned(),
            site,
            field,
            detail,
        }
    }
}

impl Runtime {
    /// Lists every unfinished run (parked ones included) that the code
    /// registered on this runtime could not resume: its workflow is not
    /// registered, its latest checkpoint's site or fields fit none of the
    /// registered versions, a field's bytes do not decode as the code's
    /// type, or (a run without a checkpoint) the version that started it is
    /// not registered or its input does not decode. Each run is checked
    /// exactly as a claim would resume it, stopped before any user code
    /// runs; nothing is written, so a deploy can be checked against the
    /// production store from a client-only runtime that registers the new
    /// code (see [`testing::assert_compatible`](crate::testing::assert_compatible)).
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// #[workflow(name = "approval")]
    /// async fn approval(ctx: &Ctx, vendor: String) -> bool {
    ///     let score = vendor.len() as u32;
    ///     let ok: bool = ctx.wait_for("ok").await;
    ///     ok && score > 0
    /// }
    ///
    /// // The next version keeps `score` as a `u64`: old runs would not fit.
    /// #[workflow(name = "approval")]
    /// async fn approval_next(ctx: &Ctx, vendor: String) -> bool {
    ///     let score = vendor.len() as u64;
    ///     let ok: bool = ctx.wait_for("ok").await;
    ///     ok && score > 0
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.start(approval, "a-1", "acme".into()).await?;
    /// rt.run_until_idle().await?;
    /// assert!(rt.check_compatibility().await?.is_empty());
    ///
    /// let next = Runtime::builder().store(rt.store()).client_only().in_memory();
    /// next.register(approval_next);
    /// let refused = next.check_compatibility().await?;
    /// assert_eq!(refused.len(), 1);
    /// assert_eq!((refused[0].run.as_str(), refused[0].field.as_str()), ("a-1", "score"));
    /// # Ok(()) }
    /// ```
    pub async fn check_compatibility(&self) -> Result<Vec<Incompatibility>, Error> {
        let store = &self.inner.env.store;
        let mut refused = Vec::new();
        for listed in store.list_runs(&RunFilter::new()).await? {
            if listed.state.is_terminal() {
                continue;
            }
            let (id, workflow) = (listed.id.as_str(), listed.workflow.as_str());
            if !self.inner.is_registered(workflow) {
                refused.push(Incompatibility {
                    run: id.to_owned(),
                    workflow: workflow.to_owned(),
                    site: "-".to_owned(),
                    field: "-".to_owned(),
                    detail: format!("workflow `{workflow}` is not registered"),
                });
                continue;
            }
            // Listings may leave the input out: the run as a claim sees it.
            let Some(run) = store.load_run(id).await? else {
                continue; // removed meanwhile
            };
            let checkpoint = match store.latest_checkpoint(id).await {
                Ok(cp) => cp.filter(|_| run.latest_seq > 0),
                Err(e) => {
                    refused.push(Incompatibility::of(id, workflow, e));
                    continue;
                }
            };
            let picked = self
                .inner
                .registry
                .pick(&self.inner.env, &run, checkpoint, true)
                .await;
            if let Some(Err(e)) = picked {
                refused.push(Incompatibility::of(id, workflow, e));
            }
        }
        Ok(refused)
    }
}
