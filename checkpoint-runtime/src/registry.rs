//! The workflows a runtime executes: each name with its registered versions,
//! and the choice of the version that runs a claimed run.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::launch::{Launcher, WorkflowLauncher};
use crate::run::RunEnv;
use crate::store::{CheckpointRecord, RunRecord};
use crate::workflow::Workflow;
use crate::Error;

/// The registered workflows: per name, its versions, highest first.
#[derive(Default)]
pub(crate) struct Registry(RwLock<HashMap<&'static str, Vec<Arc<dyn Launcher>>>>);

impl Registry {
    /// Registers `wf`; returns whether that changed the code for its name
    /// (a new version, or another function for a registered one).
    pub(crate) fn register<W: Workflow>(&self, wf: W) -> bool {
        let mut reg = self.0.write().unwrap_or_else(|e| e.into_inner());
        let versions = reg.entry(W::NAME).or_default();
        let launcher: Arc<dyn Launcher> = Arc::new(WorkflowLauncher::new(wf));
        match versions.iter().position(|l| l.version() == W::VERSION) {
            Some(i) if versions[i].workflow_type() == TypeId::of::<W>() => return false,
            Some(i) => versions[i] = launcher,
            None => {
                versions.push(launcher);
                versions.sort_by_key(|l| std::cmp::Reverse(l.version()));
            }
        }
        true
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        let reg = self.0.read().unwrap_or_else(|e| e.into_inner());
        reg.contains_key(name)
    }

    pub(crate) fn names(&self) -> Vec<&'static str> {
        let reg = self.0.read().unwrap_or_else(|e| e.into_inner());
        reg.keys().copied().collect()
    }

    /// The registered name equal to `name` (a `'static` one).
    pub(crate) fn name(&self, name: &str) -> Option<&'static str> {
        let reg = self.0.read().unwrap_or_else(|e| e.into_inner());
        reg.get_key_value(name).map(|(k, _)| *k)
    }

    fn versions(&self, name: &str) -> Vec<Arc<dyn Launcher>> {
        let reg = self.0.read().unwrap_or_else(|e| e.into_inner());
        reg.get(name).cloned().unwrap_or_default()
    }

    /// The version that runs `run` (its latest checkpoint `checkpoint`): a
    /// run without a checkpoint starts on the version that started it; one
    /// with a checkpoint resumes on the highest version whose resume checks
    /// its checkpoint passes (probed, when there are several). `None`: the
    /// workflow is not registered. `Err`: why no version can run it (the
    /// highest version's refusal). With `check_all`, the chosen version is
    /// probed too (the pre-deploy check); otherwise a lone version is left
    /// to check the run as it resumes.
    pub(crate) async fn pick(
        &self,
        env: &Arc<RunEnv>,
        run: &RunRecord,
        checkpoint: Option<Arc<CheckpointRecord>>,
        check_all: bool,
    ) -> Option<Result<Arc<dyn Launcher>, Error>> {
        let versions = self.versions(&run.workflow);
        let highest = versions.first()?.clone();
        let Some(cp) = checkpoint else {
            let Some(started) = versions.iter().find(|l| l.version() == run.version) else {
                let known: Vec<String> = versions.iter().map(|l| l.version().to_string()).collect();
                return Some(Err(Error::Incompatible {
                    workflow: run.workflow.clone(),
                    run: run.id.clone(),
                    site: "<input>".to_owned(),
                    field: "-".to_owned(),
                    detail: format!(
                        "the run was started by version {} of the workflow, which is not \
                         registered here (versions registered: {})",
                        run.version,
                        known.join(", ")
                    )
                    .into(),
                }));
            };
            if check_all {
                if let Err(e) = started.probe(env.clone(), run, None).await {
                    return Some(Err(e));
                }
            }
            return Some(Ok(started.clone()));
        };
        if versions.len() == 1 && !check_all {
            return Some(Ok(highest));
        }
        let mut refusal = None;
        for version in &versions {
            match version.probe(env.clone(), run, Some(cp.clone())).await {
                Ok(()) => return Some(Ok(version.clone())),
                Err(e) => {
                    refusal.get_or_insert(e);
                }
            }
        }
        Some(Err(refusal.unwrap_or_else(|| {
            Error::internal(format!("run `{}`: no version was probed", run.id))
        })))
    }
}
