//! Conformance: what a run's end changes elsewhere (a held sibling
//! promoted, joining runs woken, descendants cancelled), as one script run
//! on the store under test and on a [`MemoryStore`]: every backend applies
//! the same rules (`rules::Ended`), so all must write the same records,
//! histories and signals.

use super::*;
use std::time::UNIX_EPOCH;

use crate::store::MemoryStore;

fn create_child(
    store: &dyn Store,
    id: &str,
    parent: Option<&str>,
    max_running: Option<u32>,
) -> String {
    let r = block_on(store.create_run(NewRun {
        id: id.into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: parent.map(str::to_owned),
        max_running,
        options: Default::default(),
    }));
    format!("create {id}: {:?}", r.map(|_| ()))
}

/// Claims run `id` by name.
fn claim_named(store: &dyn Store, id: &str) -> Lease {
    let req = ClaimRequest {
        only: Some(id.to_owned()),
        ..req("w", "w1")
    };
    let got = block_on(store.claim(&req)).unwrap();
    assert_eq!(got.claimed.len(), 1, "{id} is not claimable");
    got.claimed[0].lease.clone()
}

/// Checkpoint `seq` of run `run`, joining `children`.
fn joining(run: &str, seq: u64, children: &[&str]) -> Arc<CheckpointRecord> {
    let mut cp = (*cp(run, seq)).clone();
    cp.suspend = Some(Suspend::Joining {
        children: children.iter().map(|c| c.to_string()).collect(),
        token: format!("join#{seq}"),
        sites_before: None,
    });
    Arc::new(cp)
}

/// Run `id` (claimed) saves a checkpoint joining `children` and suspends.
fn join_named(store: &dyn Store, id: &str, children: &[&str]) -> String {
    let lease = claim_named(store, id);
    let saved = block_on(store.save_checkpoint(&lease, joining(id, 1, children), None));
    let released = block_on(store.release(id, &lease, Release::Suspend));
    format!("join {id}: {saved:?} {released:?}")
}

fn finish_named(store: &dyn Store, id: &str, output: Option<&[u8]>) -> String {
    let lease = claim_named(store, id);
    let outcome = match output {
        Some(out) => Outcome::Completed {
            output: Arc::from(out),
            error: None,
        },
        None => Outcome::Failed {
            error: crate::Error::internal("boom"),
        },
    };
    format!(
        "finish {id}: {:?}",
        block_on(store.finish(id, &lease, outcome))
    )
}

fn cancel_named(store: &dyn Store, id: &str) -> String {
    format!("cancel {id}: {:?}", block_on(store.cancel(id)))
}

fn norm(r: &RunRecord) -> String {
    let mut r = r.clone();
    r.created_at = UNIX_EPOCH;
    r.updated_at = UNIX_EPOCH;
    if let Some(l) = r.lease.as_mut() {
        l.expires_at = UNIX_EPOCH;
    }
    format!("{r:?}")
}

/// Runs the script on `store` (empty); returns what each step returned,
/// then every run's record, history and pending signals.
fn script(store: &dyn Store) -> Vec<String> {
    let mut out = Vec::new();
    // `p` runs at most one child at a time, and joins them (and one the
    // store does not have); a child under a parent the store does not
    // have is created all the same.
    out.push(create_child(store, "p", None, None));
    for c in ["c1", "c2", "c3"] {
        out.push(create_child(store, c, Some("p"), Some(1)));
    }
    out.push(create_child(store, "orphan", Some("nobody"), None));
    out.push(join_named(store, "p", &["c1", "c2", "ghost", "c3", "c1"]));
    // Each end starts the next held child; the last one wakes `p`.
    out.push(finish_named(store, "c1", Some(b"1")));
    out.push(finish_named(store, "c2", None));
    out.push(cancel_named(store, "c3"));
    // Ended already: nothing changes.
    out.push(cancel_named(store, "c1"));
    // `q` joins `q1` (ended, with an unfinished child `q1a`) and `q2`;
    // cancelling `q` cancels both unfinished descendants, and `q`,
    // cancelled, is not woken by their end.
    out.push(create_child(store, "q", None, None));
    for (c, parent) in [("q1", "q"), ("q2", "q"), ("q1a", "q1")] {
        out.push(create_child(store, c, Some(parent), None));
    }
    out.push(finish_named(store, "q1", Some(b"2")));
    out.push(join_named(store, "q", &["q1", "q2"]));
    out.push(cancel_named(store, "q"));
    // A finished run is not cancelled, nor are its unfinished children.
    out.push(create_child(store, "r", None, None));
    out.push(create_child(store, "r1", Some("r"), None));
    out.push(finish_named(store, "r", Some(b"3")));
    out.push(cancel_named(store, "r"));
    // A fork of `p`'s join: its children all ended, it is woken at once.
    out.push(format!("fork: {:?}", block_on(store.fork("p", 1, "pf"))));
    for r in block_on(store.list_runs(&RunFilter::new())).unwrap() {
        out.push(norm(&r));
        let history: Vec<Event> = block_on(store.history(&r.id))
            .unwrap()
            .into_iter()
            .map(|e| e.event)
            .collect();
        out.push(format!("history {}: {history:?}", r.id));
        let signals: Vec<(String, String)> = block_on(store.pending_signals(&r.id))
            .unwrap()
            .into_iter()
            .map(|s| (s.name, String::from_utf8_lossy(&s.payload).into_owned()))
            .collect();
        out.push(format!("signals {}: {signals:?}", r.id));
    }
    out
}

/// Conformance: ending a run (finished, failed, cancelled) starts the next
/// held sibling, wakes the runs joining it once the last of their children
/// ends, and for a cancel cancels its unfinished descendants; a fork of a
/// join is woken at once. All as the memory store does: the same records,
/// histories and pending signals.
pub fn ends_change_what_they_change_in_memory(store: &dyn Store) {
    let memory = script(&MemoryStore::new());
    let got = script(store);
    for (m, s) in memory.iter().zip(&got) {
        assert_eq!(m, s);
    }
    assert_eq!(memory.len(), got.len());
}
