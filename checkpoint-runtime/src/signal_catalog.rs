//! The signal catalog: what each workflow's wait sites take, kept in the
//! store ([`Store::put_signal_sites`]) so that a signal is checked when it is
//! sent, by any client (this runtime, the CLI, the API), before the run
//! waits for it and whether or not the sender has the workflow's code.
//!
//! Two kinds of rows reach it: the names of a workflow's wait sites, noted
//! when a runtime registers the workflow (a computed name is recorded as
//! "any name"), and the schema of a wait site's payload type, noted the
//! first time this runtime runs the site (the type is only known then).
//! Both are written by [`Catalog::flush`], from the worker loop, from
//! `start`, from `signal` and after a wait site's checkpoint: writing never
//! holds up an execution, and a failed write is tried again on the next
//! flush (until then, names are checked as far as the store knows them).

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

use crate::abi::{SiteInfo, SiteKind};
use crate::store::{RunRecord, RunState, SignalSite, Store};
use crate::Error;

/// The rows this runtime has still to write, and the payload schemas it
/// noted already.
#[derive(Default)]
pub(crate) struct Catalog {
    pending: Mutex<Vec<(&'static str, Vec<SignalSite>)>>,
    noted: Mutex<HashSet<(&'static str, String, &'static str)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Catalog {
    /// Notes the names the wait sites of `workflow` (its site table
    /// `sites`) take.
    pub(crate) fn register(&self, workflow: &'static str, sites: &'static [SiteInfo]) {
        let names: Vec<SignalSite> = sites
            .iter()
            .filter(|s| matches!(s.kind, SiteKind::WaitFor | SiteKind::WaitForTimeout))
            .map(|s| SignalSite {
                signal: s.signal.map(str::to_owned),
                payload_schema: None,
            })
            .collect();
        if !names.is_empty() {
            lock(&self.pending).push((workflow, names));
        }
    }

    /// Notes that a wait site of `workflow` for `signal` decodes a payload
    /// whose stored schema is `schema` (once per runtime).
    pub(crate) fn note_payload(&self, workflow: &'static str, signal: &str, schema: &'static str) {
        let first = lock(&self.noted).insert((workflow, signal.to_owned(), schema));
        if first {
            let site = SignalSite {
                signal: Some(signal.to_owned()),
                payload_schema: Some(schema.to_owned()),
            };
            lock(&self.pending).push((workflow, vec![site]));
        }
    }

    /// Writes what is pending; what fails stays pending (and is logged).
    pub(crate) async fn flush(&self, store: &dyn Store) {
        let pending = std::mem::take(&mut *lock(&self.pending));
        let mut failed = Vec::new();
        for (workflow, sites) in pending {
            if let Err(e) = store.put_signal_sites(workflow, sites.clone()).await {
                tracing::warn!(workflow, error = %e, "cannot record the signal names of a workflow");
                failed.push((workflow, sites));
            }
        }
        if !failed.is_empty() {
            lock(&self.pending).extend(failed);
        }
    }
}

/// Refuses signal `name` for `run` when the catalog knows its workflow's
/// wait sites and none of them takes `name`. Taken: a name a site records,
/// any name when a site computes its name, and the signal the run waits
/// for now (its checkpoint says so, whatever the catalog). Returns the
/// schema keys recorded for `name` (the payload must fit one of them).
pub(crate) async fn check_name(
    store: &dyn Store,
    run: &RunRecord,
    name: &str,
) -> Result<Vec<String>, Error> {
    let sites = store.signal_sites(&run.workflow).await?;
    let schemas: Vec<String> = sites
        .iter()
        .filter(|s| s.signal.as_deref() == Some(name))
        .filter_map(|s| s.payload_schema.clone())
        .collect();
    let waits_for_it = matches!(&run.state, RunState::Waiting { signal, .. } if signal == name);
    let known = sites.is_empty()
        || waits_for_it
        || sites
            .iter()
            .any(|s| s.signal.is_none() || s.signal.as_deref() == Some(name));
    if known {
        return Ok(schemas);
    }
    let mut names: Vec<String> = sites.into_iter().filter_map(|s| s.signal).collect();
    names.dedup();
    Err(Error::UnknownSignal {
        run: run.id.clone(),
        workflow: run.workflow.clone(),
        signal: name.to_owned(),
        known: names,
    })
}
