//! Fields stored by appending (see `checkpoints::delta`): every version of
//! every field loads byte for byte, whatever the fields do (append a
//! little or a lot, change in the middle, shrink, get replaced, stop
//! growing, alternate, move to another position of another shape), with
//! and without retention, after `gc`, after a fork from a middle version
//! whose source is then pruned, and after reopening the file; storage and
//! segments stay bounded; damaged or missing segments refuse their run's
//! versions only, naming run, site and field.
//!
//! In these tests a level holds at most 8 segments (64 at level 0 and
//! 1,024 above in the library), so that a few hundred versions go through
//! three levels.

use std::path::Path;
use std::sync::Arc;

use futures::executor::block_on;
use rusqlite::Connection;

use super::checkpoints::delta::fan_out;
use super::SqliteStore;
use crate::store::conformance::{claim_one, new_run};
use crate::store::delta::model::{all_load, enc, record, save_model, Rng};
use crate::store::{CheckpointRecord, Lease, Release, Store};
use crate::Error;

fn open_at(path: &Path) -> SqliteStore {
    SqliteStore::open(path).unwrap()
}

fn peek(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

fn count(path: &Path, sql: &str) -> i64 {
    peek(path).query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn the_test_fan_out_is_small() {
    assert!((0..4).all(|level| fan_out(level) == 8));
}

#[test]
fn every_version_of_every_field_loads_byte_for_byte() {
    for seed in [1u64, 2] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let store = open_at(&path);
        let (saved, _) = save_model(&store, "r", seed, 600, None);
        all_load(&store, "r", &saved, 1);
        // Deltas were used, through three levels.
        let levels = count(&path, "SELECT max(level) FROM segments");
        assert!(levels >= 2, "seed {seed}: levels up to {levels}");
        // A store that did not write them reads them the same, and goes on
        // appending where the first left off.
        drop(store);
        let store = open_at(&path);
        all_load(&store, "r", &saved, 1);
        block_on(store.gc()).unwrap();
        all_load(&store, "r", &saved, 1);
    }
}

#[test]
fn a_reopened_store_goes_on_appending_to_the_chains() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = open_at(&path);
    let (mut saved, lease) = save_model(&store, "r", 9, 100, None);
    drop(store);
    let store = open_at(&path);
    block_on(store.release("r", &lease, Release::Abandon)).unwrap();
    let c = claim_one(&store, "w2", "w2");
    let mut history: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 40]).collect();
    let before = count(&path, "SELECT count(*) FROM segments");
    for seq in 101..=130u64 {
        history.push(vec![seq as u8; 40]);
        let cp = record("r", seq, &[("history", enc(&history))]);
        block_on(store.save_checkpoint(&c.lease, cp.clone(), None)).unwrap();
        saved.push(cp);
    }
    // #101 stores the new history whole; the 29 after append to it: three
    // level-1 segments (at #109, #117, #125, each folding 8 tails) and the
    // level-0 tails of #126 to #130.
    let added = count(&path, "SELECT count(*) FROM segments") - before;
    assert_eq!(added, 8);
    all_load(&store, "r", &saved, 1);
}

#[test]
fn retention_deletes_the_segments_no_kept_version_uses() {
    for (seed, keep) in [(4u64, 1usize), (5, 6), (6, 40)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let store = open_at(&path);
        let (saved, _) = save_model(&store, "r", seed, 500, Some(keep));
        let from = 500 - keep as u64 + 1;
        all_load(&store, "r", &saved, from);
        // What the kept versions use, and what was written since the last
        // pruning (a quarter of `keep`, at least one): at most 7
        // per level and field, plus a segment per field per version.
        let segments = count(&path, "SELECT count(*) FROM segments");
        let bound = 5 * 4 * i64::from(fan_out(0)) + 5 * (keep as i64 + keep as i64 / 4 + 1);
        assert!(
            segments <= bound,
            "keep {keep}: {segments} segments > {bound}"
        );
        block_on(store.gc()).unwrap();
        all_load(&store, "r", &saved, from);
        drop(store);
        let store = open_at(&path);
        all_load(&store, "r", &saved, from);
    }
}

#[test]
fn a_fork_from_a_middle_version_outlives_its_source_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = open_at(&path);
    let (saved, lease) = save_model(&store, "r", 7, 300, None);
    block_on(store.fork("r", 150, "f")).unwrap();
    let forked = block_on(store.latest_checkpoint("f")).unwrap().unwrap();
    assert_eq!(forked.data, saved[149].data);
    assert_eq!(forked.fields, saved[149].fields);
    // The source keeps only its latest from now on, and is compacted.
    let last = record("r", 301, &[("history", enc(&[vec![1u8; 10]]))]);
    block_on(store.save_checkpoint(&lease, last, Some(1))).unwrap();
    block_on(store.gc()).unwrap();
    let left = count(
        &path,
        "SELECT count(*) FROM segments WHERE run = (SELECT ord FROM runs WHERE id = 'r')",
    );
    assert_eq!(left, 0, "the source's segments");
    let again = block_on(store.latest_checkpoint("f")).unwrap().unwrap();
    assert_eq!(again, forked);
    // The fork appends to its own chains (the source is still held).
    let c = claim_one(&store, "w2", "w2");
    assert_eq!(&*c.run.id, "f");
    let mut prev = forked.clone();
    let mut versions = vec![forked];
    for seq in 2..=40u64 {
        let mut fields: Vec<(&'static str, Vec<u8>)> = prev
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let name: &'static str = match &*f.name {
                    "history" => "history",
                    "log" => "log",
                    "n" => "n",
                    "alt" => "alt",
                    _ => "blob",
                };
                (name, prev.field_bytes(i).unwrap().to_vec())
            })
            .collect();
        for (name, bytes) in &mut fields {
            if *name == "history" {
                let mut h: Vec<Vec<u8>> = postcard::from_bytes(bytes).unwrap();
                h.push(vec![seq as u8; 200]);
                *bytes = enc(&h);
            }
        }
        let cp = record("f", seq, &fields);
        block_on(store.save_checkpoint(&c.lease, cp.clone(), None)).unwrap();
        versions.push(cp.clone());
        prev = cp;
    }
    all_load(&store, "f", &versions, 1);
}

/// The agent of the issue: a history appended one ~500-byte message per
/// checkpoint costs storage in proportion to what was appended.
#[test]
fn an_appended_history_costs_what_was_appended() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = open_at(&path);
    new_run(&store, "r");
    let c = claim_one(&store, "w", "i");
    let mut history: Vec<Vec<u8>> = Vec::new();
    let n = 1000u64;
    let mut last = None;
    for seq in 1..=n {
        history.push(vec![(seq % 251) as u8; 500]);
        let cp = record("r", seq, &[("history", enc(&history)), ("turn", enc(&seq))]);
        block_on(store.save_checkpoint(&c.lease, cp.clone(), None)).unwrap();
        last = Some(cp);
    }
    let last = last.unwrap();
    let stored = count(
        &path,
        "SELECT (SELECT coalesce(sum(length(data)), 0) FROM checkpoints) + \
                (SELECT coalesce(sum(length(data)), 0) FROM segments)",
    );
    // The stream once (folded levels are deleted), the first message in
    // the first row, the turn counter in every row.
    let bound = last.data.len() as i64 + 4 * n as i64;
    assert!(
        stored <= bound,
        "{stored} bytes stored for a {} byte state",
        last.data.len()
    );
    assert!(count(&path, "SELECT max(level) FROM segments") >= 3);
    assert!(stored >= last.data.len() as i64);
    assert_eq!(block_on(store.latest_checkpoint("r")).unwrap(), Some(last));
    for seq in [1, 2, 7, 8, 9, 63, 64, 65, 511, 512, 513, 999] {
        let cp = block_on(store.checkpoint("r", seq)).unwrap().unwrap();
        let h: Vec<Vec<u8>> = postcard::from_bytes(cp.field_bytes(0).unwrap()).unwrap();
        assert_eq!(h.len() as u64, seq);
        assert!(h
            .iter()
            .enumerate()
            .all(|(i, m)| m == &vec![((i as u64 + 1) % 251) as u8; 500]));
    }
}

#[test]
fn large_fields_are_sealed_as_if_summed_whole() {
    // Fields past `seal::LARGE_FIELD` are summed by the writer, from the
    // previous version's sum when they appended or did not change: every
    // row's seal must be the record's own checksums, across a reopen (the
    // previous version's sums then come from its row) and a change in the
    // middle (stored whole, summed from its bytes).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let big = super::checkpoints::seal::LARGE_FIELD;
    let mut store = open_at(&path);
    new_run(&store, "r");
    let mut lease = claim_one(&store, "w", "i").lease;
    let mut rng = Rng(5);
    let mut history: Vec<Vec<u8>> = (0..big / 500 + 2).map(|_| rng.bytes(500)).collect();
    let still = enc(&rng.bytes(big + 3));
    let mut saved = Vec::new();
    for seq in 1..=40u64 {
        if seq == 20 {
            drop(store);
            store = open_at(&path);
            block_on(store.release("r", &lease, Release::Abandon)).unwrap();
            lease = claim_one(&store, "w2", "i").lease;
        }
        if seq == 30 {
            history[3][7] ^= 1;
        } else {
            let n = 1 + rng.below(600) as usize;
            history.push(rng.bytes(n));
        }
        let fields = [
            ("history", enc(&history)),
            ("still", still.clone()),
            ("turn", enc(&seq)),
        ];
        let cp = record("r", seq, &fields);
        block_on(store.save_checkpoint(&lease, cp.clone(), None)).unwrap();
        saved.push(cp);
    }
    all_load(&store, "r", &saved, 1);
    let conn = peek(&path);
    let mut stmt = conn
        .prepare("SELECT checksum FROM checkpoints WHERE seq = ?1")
        .unwrap();
    for cp in &saved {
        let seal: Vec<u8> = stmt.query_row([cp.seq as i64], |r| r.get(0)).unwrap();
        assert_eq!(seal, crate::store::checksums(cp), "version #{}", cp.seq);
    }
    assert!(count(&path, "SELECT count(*) FROM segments") > 0);
}

/// The decode error of a version read back.
fn refused(r: Result<Option<Arc<CheckpointRecord>>, Error>) -> String {
    match r {
        Err(e @ Error::Decode { .. }) => e.to_string(),
        other => panic!("expected a decode error, got {other:?}"),
    }
}

/// The records of two runs.
type TwoRuns = (Vec<Arc<CheckpointRecord>>, Vec<Arc<CheckpointRecord>>);

/// Two runs appending to a history (held by workers `a` and `b`, whose
/// leases are returned); `r`'s is then damaged.
fn two_runs(path: &Path) -> (SqliteStore, TwoRuns, [Lease; 2]) {
    let store = open_at(path);
    let mut out = Vec::new();
    new_run(&store, "r");
    let r_lease = claim_one(&store, "a", "a1").lease;
    new_run(&store, "s");
    let s_lease = claim_one(&store, "b", "b1").lease;
    for (run, lease) in [("r", &r_lease), ("s", &s_lease)] {
        let mut history: Vec<Vec<u8>> = vec![vec![0; 300]];
        let mut saved = Vec::new();
        for seq in 1..=20u64 {
            history.push(vec![seq as u8; 100]);
            let cp = record(run, seq, &[("goal", enc("g")), ("history", enc(&history))]);
            block_on(store.save_checkpoint(lease, cp.clone(), None)).unwrap();
            saved.push(cp);
        }
        out.push(saved);
    }
    let s = out.pop().unwrap();
    let r = out.pop().unwrap();
    (store, (r, s), [r_lease, s_lease])
}

#[test]
fn a_missing_or_damaged_segment_refuses_that_runs_versions_only() {
    // Deleted: the versions that use it are refused, naming the field;
    // the others, and the other run, load.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let (store, (r, s), _) = two_runs(&path);
    let n = peek(&path)
        .execute(
            "DELETE FROM segments WHERE level = 0 AND last = 19 \
             AND run = (SELECT ord FROM runs WHERE id = 'r')",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);
    // With 8 per level: #2 to #8 append level-0 segments, #9 folds them
    // into one of level 1 (and deletes them), #10 to #16 append level-0 ones
    // again, #17 folds; #18 to #20 append. So #19 and #20 use #19's tail.
    let err = refused(block_on(store.checkpoint("r", 19)));
    assert!(
        err.starts_with(
            "cannot decode field `history` of run `r` (workflow `wf`) at site `goal+history`: \
             checkpoint #19 is damaged: its bytes cannot be read: its level-0 segments"
        ),
        "{err}"
    );
    let damaged = |seq: u64| seq >= 19;
    for cp in &r {
        let got = block_on(store.checkpoint("r", cp.seq));
        if damaged(cp.seq) {
            let err = refused(got);
            assert!(err.contains("field `history`"), "#{}: {err}", cp.seq);
        } else {
            assert_eq!(got.unwrap().as_ref(), Some(cp), "#{}", cp.seq);
        }
    }
    all_load(&store, "s", &s, 1);
    // The listing flags the damaged versions and lists the others.
    let listed = block_on(store.list_checkpoints("r")).unwrap();
    assert_eq!(listed.len(), 20);
    for c in &listed {
        assert_eq!(c.is_damaged(), damaged(c.seq), "#{}", c.seq);
    }
    drop(store);

    // A fold's bytes changed (same length): every version that reads them,
    // its own or through the fold (#2 to #8), is refused by the checksum,
    // naming the field.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let (store, (r, s), _) = two_runs(&path);
    let n = peek(&path)
        .execute(
            "UPDATE segments SET data = zeroblob(length(data)) WHERE level = 1 AND last = 9 \
             AND run = (SELECT ord FROM runs WHERE id = 'r')",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);
    for seq in [2, 5, 9, 12, 20] {
        let err = refused(block_on(store.checkpoint("r", seq)));
        assert!(
            err.contains("field `history` of run `r`")
                && err.contains(&format!(
                    "checkpoint #{seq} is damaged: the field's bytes do not match"
                )),
            "{err}"
        );
    }
    assert_eq!(
        block_on(store.checkpoint("r", 1)).unwrap().as_ref(),
        Some(&r[0])
    );
    all_load(&store, "s", &s, 1);

    // Shortened: a version that reads the level itself finds its byte count
    // wrong; one that reads a prefix of it, its bytes.
    let n = peek(&path)
        .execute(
            "UPDATE segments SET data = substr(data, 2) WHERE level = 1 AND last = 17 \
             AND run = (SELECT ord FROM runs WHERE id = 'r')",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);
    let err = refused(block_on(store.checkpoint("r", 18)));
    assert!(
        err.contains("field `history`") && err.contains("level-1 segments"),
        "{err}"
    );
    let err = refused(block_on(store.checkpoint("r", 12)));
    assert!(
        err.contains("field `history`") && err.contains("#12"),
        "{err}"
    );
    all_load(&store, "s", &s, 1);
}

#[test]
fn a_damaged_run_is_set_aside_when_claimed_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let (store, (_, s), leases) = two_runs(&path);
    // Both runs released, `r`'s segments lost.
    for (run, lease) in ["r", "s"].into_iter().zip(&leases) {
        block_on(store.release(run, lease, Release::Abandon)).unwrap();
    }
    peek(&path)
        .execute(
            "DELETE FROM segments WHERE run = (SELECT ord FROM runs WHERE id = 'r')",
            [],
        )
        .unwrap();
    drop(store);
    let store = open_at(&path);
    let got = block_on(store.claim(&crate::store::conformance::req("b", "b1"))).unwrap();
    let ids: Vec<&str> = got.claimed.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(ids, ["s"]);
    assert_eq!(got.claimed[0].checkpoint.as_ref(), s.last());
    let rec = block_on(store.load_run("r")).unwrap().unwrap();
    let crate::store::RunState::Failed { error } = rec.state else {
        panic!("r: {:?}", rec.state)
    };
    let error = error.to_string();
    assert!(
        error.contains("field `history` of run `r`") && error.contains("set aside"),
        "{error}"
    );
}

#[test]
fn a_version_3_file_opens_and_its_fields_start_appending() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    // A file as version 3 wrote it: no `segments` (histories stored whole).
    let (saved, lease) = {
        let store = open_at(&path);
        new_run(&store, "r");
        let c = claim_one(&store, "w", "i");
        let mut saved = Vec::new();
        for seq in 1..=3u64 {
            let h: Vec<Vec<u8>> = (0..seq * 10).map(|i| vec![i as u8; 30]).collect();
            let cp = record("r", seq, &[("history", enc(&h))]);
            // Replaced, not appended: stored whole, as version 3 did.
            let cp = if seq < 3 {
                record(
                    "r",
                    seq,
                    &[("history", cp.data.iter().rev().copied().collect())],
                )
            } else {
                cp
            };
            block_on(store.save_checkpoint(&c.lease, cp.clone(), None)).unwrap();
            saved.push(cp);
        }
        (saved, c.lease)
    };
    assert_eq!(count(&path, "SELECT count(*) FROM segments"), 0);
    peek(&path)
        .execute_batch(
            "DROP INDEX runs_ready; DROP INDEX runs_due; DROP INDEX runs_held; \
             CREATE INDEX runs_active ON runs (ord) WHERE state < 3; \
             DROP TABLE segments; DROP TABLE signal_sites; DROP TABLE joins; DROP INDEX runs_parent; \
             ALTER TABLE runs DROP COLUMN parent; ALTER TABLE runs DROP COLUMN join_pending; \
             ALTER TABLE runs DROP COLUMN cancel_request; \
             DROP TABLE stream_items; DROP TABLE run_progress; DROP TABLE schedules; \
             DROP INDEX runs_queue; DROP INDEX runs_queue_order; DROP TABLE queue_admissions; ALTER TABLE runs DROP COLUMN tags; ALTER TABLE runs DROP COLUMN queue; \
             ALTER TABLE runs DROP COLUMN priority; \
             PRAGMA user_version = 3",
        )
        .unwrap();
    let store = open_at(&path);
    assert_eq!(count(&path, "PRAGMA user_version"), super::SCHEMA_VERSION);
    all_load(&store, "r", &saved, 1);
    let mut saved = saved;
    let mut h: Vec<Vec<u8>> = (0..30u64).map(|i| vec![i as u8; 30]).collect();
    for seq in 4..=10u64 {
        h.push(vec![seq as u8; 30]);
        let cp = record("r", seq, &[("history", enc(&h))]);
        block_on(store.save_checkpoint(&lease, cp.clone(), None)).unwrap();
        saved.push(cp);
    }
    assert_eq!(count(&path, "SELECT count(*) FROM segments"), 7);
    all_load(&store, "r", &saved, 1);
}

/// Requests queued while another connection holds the write lock share one
/// batch: consecutive appending versions of two runs (each folding its
/// level 0 in the batch), a request that fails in between, and a fork of a
/// version written earlier in the batch. Read back from a fresh store,
/// everything is as if each request had been written on its own.
#[test]
fn a_batch_of_appends_and_folds_is_as_if_each_was_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = open_at(&path);
    new_run(&store, "a");
    new_run(&store, "b");
    let mut r = crate::store::conformance::req("w", "w1");
    r.limit = 2;
    let claimed = block_on(store.claim(&r)).unwrap().claimed;
    let lease = claimed[0].lease.clone();
    let stale = Lease {
        instance: Arc::from("w0"),
        ..lease.clone()
    };
    let version = |run: &str, seq: u64| {
        let history: Vec<Vec<u8>> = (0..seq).map(|i| vec![i as u8; 300]).collect();
        record(run, seq, &[("history", enc(&history)), ("n", enc(&seq))])
    };
    let mut saved: Vec<Arc<CheckpointRecord>> = Vec::new();
    for seq in 1..=5 {
        for run in ["a", "b"] {
            let cp = version(run, seq);
            block_on(store.save_checkpoint(&lease, cp.clone(), None)).unwrap();
            saved.push(cp);
        }
    }
    let blocker = peek(&path);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let first = store.append_event("a", crate::history::Event::Cancelled);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut pending = Vec::new();
    for seq in 6..=10 {
        for run in ["a", "b"] {
            let cp = version(run, seq);
            pending.push(store.save_checkpoint(&lease, cp.clone(), None));
            saved.push(cp);
        }
        if seq == 7 {
            pending.push(store.save_checkpoint(&stale, version("b", 8), None));
        }
    }
    let fork = store.fork("a", 8, "a-fork");
    std::thread::sleep(std::time::Duration::from_millis(50));
    blocker.execute_batch("COMMIT").unwrap();
    block_on(first).unwrap();
    let outcomes: Vec<bool> = pending.into_iter().map(|p| block_on(p).is_ok()).collect();
    assert_eq!(
        outcomes.iter().filter(|ok| !**ok).count(),
        1,
        "{outcomes:?}"
    );
    block_on(fork).unwrap();
    drop(store);

    let store = open_at(&path);
    for run in ["a", "b"] {
        let mine: Vec<_> = saved.iter().filter(|c| &*c.run == run).cloned().collect();
        all_load(&store, run, &mine, 1);
    }
    let forked = block_on(store.latest_checkpoint("a-fork"))
        .unwrap()
        .unwrap();
    assert_eq!(forked.data, version("a", 8).data);
    // Each run folded its level 0 at #9: one level-1 segment, #10's tail.
    let per_run = "SELECT count(*) FROM segments WHERE run = (SELECT ord FROM runs WHERE id = ?1) \
                   AND level = ?2";
    for run in ["a", "b"] {
        let n = |level: i64| -> i64 {
            peek(&path)
                .query_row(per_run, rusqlite::params![run, level], |r| r.get(0))
                .unwrap()
        };
        assert_eq!((n(0), n(1)), (1, 1), "run {run}");
    }
}

/// Many runs appending at once (their checkpoints share group commits):
/// every version of every run loads.
#[test]
fn concurrent_runs_appending_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let store = Arc::new(open_at(&path));
    let runs = 24;
    for i in 0..runs {
        new_run(&*store, &format!("r{i}"));
    }
    let mut r = crate::store::conformance::req("w", "w1");
    r.limit = runs;
    let claimed = block_on(store.claim(&r)).unwrap().claimed;
    assert_eq!(claimed.len(), runs);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let all = tokio.block_on(async {
        let mut tasks = Vec::new();
        for c in claimed {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let run = c.run.id.clone();
                let mut rng = Rng(run.len() as u64 * 7919 + u64::from(run.as_bytes()[1]));
                let mut history: Vec<Vec<u8>> = Vec::new();
                let mut saved = Vec::new();
                for seq in 1..=80u64 {
                    let n = 50 + rng.below(400) as usize;
                    history.push(rng.bytes(n));
                    let cp = record(&run, seq, &[("history", enc(&history)), ("n", enc(&seq))]);
                    store
                        .save_checkpoint(&c.lease, cp.clone(), None)
                        .await
                        .unwrap();
                    saved.push(cp);
                }
                (run, saved)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.unwrap());
        }
        all
    });
    drop(tokio);
    drop(store);
    let store = open_at(&path);
    for (run, saved) in &all {
        all_load(&store, run, saved, 1);
    }
}
