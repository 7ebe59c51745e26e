//! Fields stored by appending on PostgreSQL (see
//! `tables::checkpoints::segments`): every version of every field loads
//! byte for byte (the model of `store::delta::model`), from this store and
//! from another; retention and a fork keep exactly what the kept versions
//! use; an appended history costs what was appended; a damaged or missing
//! segment refuses its run's versions only, naming the field; a run taken
//! over goes on appending; concurrent runs appending share batches.
//!
//! In these tests a level holds at most 8 segments (64 at level 0 and
//! 1,024 above in the library), so that a few hundred versions fold
//! through several levels.

use super::*;
use crate::store::delta::model::{all_load, enc, norm, record, save_model};
use crate::store::Release;

/// One number the query returns.
fn count(db: &Db, client: &tokio_postgres::Client, sql: &str) -> i64 {
    db.run(client.query_one(sql, &[])).unwrap().get(0)
}

/// Bytes stored for run `id`: its checkpoint rows' data and its segments.
fn stored_bytes(db: &Db, client: &tokio_postgres::Client, id: &str) -> i64 {
    let sql = format!(
        "SELECT (SELECT coalesce(sum(length(data)), 0) FROM cp_checkpoints WHERE run = '{id}') \
         + (SELECT coalesce(sum(length(bytes)), 0) FROM cp_segments WHERE run = '{id}')"
    );
    count(db, client, &sql)
}

macro_rules! pg_test {
    ($name:ident, $db:ident => $body:block) => {
        #[test]
        #[cfg_attr(
            not(checkpoint_test_postgres),
            ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
        )]
        fn $name() {
            let Some($db) = Db::open(stringify!($name)) else {
                return;
            };
            $body
        }
    };
}

pg_test!(every_version_of_every_field_loads_byte_for_byte, db => {
    let client = schema_client(&db);
    for (seed, run) in [(1u64, "r1"), (2, "r2")] {
        let (saved, _) = save_model(db.store(), run, seed, 600, None);
        all_load(db.store(), run, &saved, 1);
        // Appended: fewer segments than appends (folds deleted the rest),
        // and folds of folds (a segment of more than 64 tails' bytes).
        let rows = count(
            &db,
            &client,
            &format!("SELECT count(*) FROM cp_checkpoints WHERE run = '{run}' AND appended IS NOT NULL"),
        );
        assert!(rows > 300, "seed {seed}: {rows} rows append");
        // A version reads a bounded number of segments: a chain has its
        // base and at most 7 per level (of three or four here) ...
        let most = count(&db, &client, &format!(
            "SELECT max(n) FROM (SELECT count(*) AS n FROM cp_segments WHERE run = '{run}' \
             GROUP BY chain) c"
        ));
        assert!(most <= 1 + 7 * 4, "seed {seed}: a chain of {most} segments");
        // ... because folds deleted what they folded: a chain of more
        // versions than segments.
        let folded = count(&db, &client, &format!(
            "SELECT count(*) FROM (SELECT chain, count(*) AS versions FROM \
               (SELECT unnest(chains) AS chain FROM cp_checkpoints WHERE run = '{run}') v \
             GROUP BY chain) v WHERE versions > 16 + (SELECT count(*) FROM cp_segments s \
               WHERE s.run = '{run}' AND s.chain = v.chain)"
        ));
        assert!(folded > 0, "seed {seed}: no chain folded");
        // Another store (no heads) reads the same.
        let other = db.other();
        all_load(&other, run, &saved, 1);
        db.run(other.gc()).unwrap();
        all_load(db.store(), run, &saved, 1);
    }
});

pg_test!(retention_deletes_the_segments_no_kept_version_uses, db => {
    let client = schema_client(&db);
    for (seed, keep, run) in [(4u64, 1usize, "k1"), (5, 6, "k6"), (6, 40, "k40")] {
        let (saved, _) = save_model(db.store(), run, seed, 500, Some(keep));
        let from = 500 - keep as u64 + 1;
        all_load(db.store(), run, &saved, from);
        // What the kept versions use: at most 7 per level and field (and a
        // base), plus what each kept version wrote.
        let segments = count(&db, &client, &format!("SELECT count(*) FROM cp_segments WHERE run = '{run}'"));
        let bound = 5 * (4 * 8 + 1) + 5 * 2 * keep as i64;
        assert!(segments <= bound, "keep {keep}: {segments} segments > {bound}");
        // No segment of a chain that no kept checkpoint names.
        let orphans = count(
            &db,
            &client,
            &format!(
                "SELECT count(*) FROM cp_segments s WHERE s.run = '{run}' AND NOT EXISTS \
                 (SELECT 1 FROM cp_checkpoints c WHERE c.run = s.run AND s.chain = ANY (c.chains))"
            ),
        );
        assert_eq!(orphans, 0, "keep {keep}");
        all_load(&db.other(), run, &saved, from);
    }
});

pg_test!(a_fork_from_a_middle_version_outlives_its_source_pruned, db => {
    let client = schema_client(&db);
    let s = db.store();
    let (saved, lease) = save_model(s, "r", 7, 300, None);
    db.run(s.fork("r", 150, "f")).unwrap();
    let forked = db.run(s.latest_checkpoint("f")).unwrap().unwrap();
    assert_eq!(forked.data, saved[149].data);
    // The source keeps only its latest from now on.
    let last = record("r", 301, &[("history", enc(&[vec![1u8; 10]]))]);
    db.run(s.save_checkpoint(&lease, last, Some(1))).unwrap();
    assert_eq!(count(&db, &client, "SELECT count(*) FROM cp_segments WHERE run = 'r'"), 0);
    assert_eq!(db.run(s.latest_checkpoint("f")).unwrap().unwrap(), forked);
    // The fork appends to chains of its own.
    let c = claim_one(s, "w2", "w2");
    assert_eq!(&*c.run.id, "f");
    let mut history: Vec<Vec<u8>> = vec![vec![3; 300]];
    let mut versions = vec![forked];
    for seq in 2..=40u64 {
        history.push(vec![seq as u8; 200]);
        let cp = record("f", seq, &[("history", enc(&history))]);
        db.run(s.save_checkpoint(&c.lease, cp.clone(), None)).unwrap();
        versions.push(cp);
    }
    assert!(count(&db, &client, "SELECT count(*) FROM cp_segments WHERE run = 'f'") > 0);
    all_load(s, "f", &versions, 1);
});

// The agent of the issue: a history appended one ~500-byte message per
// checkpoint costs storage in proportion to what was appended.
pg_test!(an_appended_history_costs_what_was_appended, db => {
    let client = schema_client(&db);
    let s = db.store();
    new_run(s, "r");
    let c = claim_one(s, "w", "i");
    let mut history: Vec<Vec<u8>> = Vec::new();
    let n = 1000u64;
    let mut last = None;
    for seq in 1..=n {
        history.push(vec![(seq % 251) as u8; 500]);
        let cp = record("r", seq, &[("history", enc(&history)), ("turn", enc(&seq))]);
        db.run(s.save_checkpoint(&c.lease, cp.clone(), None)).unwrap();
        last = Some(cp);
    }
    let last = last.unwrap();
    let stored = stored_bytes(&db, &client, "r");
    // The stream once (folded segments are deleted), the first message in
    // the first row and again as the base, the turn counter in every row.
    let bound = last.data.len() as i64 + 4 * n as i64 + 1_100;
    assert!(stored <= bound, "{stored} bytes stored for a {} byte state", last.data.len());
    assert!(stored >= last.data.len() as i64);
    assert_eq!(db.run(s.latest_checkpoint("r")).unwrap().map(|c| norm(&c)), Some(norm(&last)));
    for seq in [1, 2, 7, 8, 9, 63, 64, 65, 511, 512, 513, 999] {
        let cp = db.run(s.checkpoint("r", seq)).unwrap().unwrap();
        let h: Vec<Vec<u8>> = postcard::from_bytes(cp.field_bytes(0).unwrap()).unwrap();
        assert_eq!(h.len() as u64, seq);
        assert!(h
            .iter()
            .enumerate()
            .all(|(i, m)| m == &vec![((i as u64 + 1) % 251) as u8; 500]));
    }
});

/// Two runs appending a history, `r` and `s`, each held by a worker of
/// its own; their versions and leases.
fn two_runs(
    db: &Db,
) -> (
    Vec<Arc<CheckpointRecord>>,
    Vec<Arc<CheckpointRecord>>,
    Lease,
) {
    let s = db.store();
    let mut out = Vec::new();
    let mut leases = Vec::new();
    for (run, worker) in [("r", "a"), ("s", "b")] {
        new_run(s, run);
        let lease = claim_one(s, worker, worker).lease;
        let mut history: Vec<Vec<u8>> = vec![vec![0; 300]];
        let mut saved = Vec::new();
        for seq in 1..=20u64 {
            history.push(vec![seq as u8; 100]);
            let cp = record(run, seq, &[("goal", enc("g")), ("history", enc(&history))]);
            db.run(s.save_checkpoint(&lease, cp.clone(), None)).unwrap();
            saved.push(cp);
        }
        out.push(saved);
        leases.push(lease);
    }
    let other = out.pop().unwrap();
    (out.pop().unwrap(), other, leases.swap_remove(0))
}

/// The decode error of a version read back.
fn refused(r: Result<Option<Arc<CheckpointRecord>>, Error>) -> String {
    match r {
        Err(e @ Error::Decode { .. }) => e.to_string(),
        other => panic!("expected a decode error, got {other:?}"),
    }
}

pg_test!(a_damaged_or_missing_segment_refuses_that_runs_versions_only, db => {
    let (r, s_saved, _) = two_runs(&db);
    let s = db.store();
    // A flipped bit in one of r's segments (same length): the versions
    // that read it are refused by the checksum, naming the field.
    db.sql(
        "UPDATE cp_segments SET bytes = set_bit(bytes, 3, 1 - get_bit(bytes, 3)) \
         WHERE run = 'r' AND lo = 0",
    );
    let e = refused(db.run(s.latest_checkpoint("r")));
    assert!(e.contains("history") && e.contains("`r`"), "{e}");
    assert_eq!(db.run(s.checkpoint("r", 1)).unwrap().map(|c| norm(&c)), Some(norm(&r[0])));
    all_load(s, "s", &s_saved, 1);
    // The listing flags the damaged versions and lists the intact one.
    let listed = db.run(s.list_checkpoints("r")).unwrap();
    assert_eq!(listed.len(), 20);
    assert!(listed[0].damage.is_none());
    assert!(listed[1..].iter().all(|c| c.damage.is_some()));
    // A segment gone: its versions are refused, saying what is missing.
    db.sql("DELETE FROM cp_segments WHERE run = 's' AND lo = 0");
    let e = refused(db.run(s.latest_checkpoint("s")));
    assert!(e.contains("history") && e.contains("missing"), "{e}");
    // A fork from an intact version still works.
    db.run(s.fork("r", 1, "r2")).unwrap();
    assert_eq!(db.run(s.latest_checkpoint("r2")).unwrap().unwrap().data, r[0].data);
});

pg_test!(a_damaged_run_is_set_aside_when_claimed_and_the_others_go_on, db => {
    let (_, _, r_lease) = two_runs(&db);
    let s = db.store();
    db.run(s.release("r", &r_lease, Release::Abandon)).unwrap();
    db.sql("DELETE FROM cp_segments WHERE run = 'r' AND lo = 0");
    new_run(s, "t");
    let c = claim_one(s, "c", "c1");
    assert_eq!(&*c.run.id, "t");
    let r = db.run(s.load_run("r")).unwrap().unwrap();
    assert!(matches!(r.state, RunState::Failed { .. }), "{:?}", r.state);
});

pg_test!(a_run_taken_over_goes_on_appending, db => {
    let client = schema_client(&db);
    let s = db.store();
    let (mut saved, lease) = save_model(s, "r", 9, 100, None);
    db.run(s.release("r", &lease, Release::Abandon)).unwrap();
    // Another store (another worker) takes the run over: its first save
    // is stored whole, the next ones append to it.
    let other = db.other();
    let c = claim_one(&other, "w2", "w2");
    let mut history: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 40]).collect();
    for seq in 101..=130u64 {
        history.push(vec![seq as u8; 40]);
        let cp = record("r", seq, &[("history", enc(&history))]);
        db.run(other.save_checkpoint(&c.lease, cp.clone(), None)).unwrap();
        saved.push(cp);
    }
    let appended = count(
        &db,
        &client,
        "SELECT count(*) FROM cp_checkpoints WHERE run = 'r' AND seq > 101 AND appended IS NOT NULL",
    );
    assert_eq!(appended, 29);
    // The first worker's save under its old lease is refused and writes
    // nothing; every version still loads.
    let stale = record("r", 131, &[("history", enc(&history))]);
    assert!(db.run(s.save_checkpoint(&lease, stale, None)).is_err());
    all_load(s, "r", &saved, 1);
    all_load(&other, "r", &saved, 1);
    // Claimed back: the claim read the latest version, and the next saves
    // append to its chain from the first on.
    db.run(other.release("r", &c.lease, Release::Abandon)).unwrap();
    let back = claim_one(s, "w3", "w3");
    for seq in 131..=135u64 {
        history.push(vec![seq as u8; 40]);
        let cp = record("r", seq, &[("history", enc(&history))]);
        db.run(s.save_checkpoint(&back.lease, cp.clone(), None)).unwrap();
        saved.push(cp);
    }
    let appended = count(
        &db,
        &client,
        "SELECT count(*) FROM cp_checkpoints WHERE run = 'r' AND seq > 130 AND appended IS NOT NULL",
    );
    assert_eq!(appended, 5);
    all_load(&db.other(), "r", &saved, 1);
});

pg_test!(concurrent_runs_appending_share_batches, db => {
    let s = Arc::new(db.other());
    let runs = 24usize;
    let mut leases = Vec::new();
    for i in 0..runs {
        let id = format!("c{i}");
        new_run(&*s, &id);
        leases.push(claim_one(&*s, &id, &id).lease);
    }
    let saved = db.run(async {
        let mut tasks = Vec::new();
        for (i, lease) in leases.into_iter().enumerate() {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let id = format!("c{i}");
                let mut history: Vec<Vec<u8>> = vec![vec![i as u8; 200]];
                let mut saved = Vec::new();
                for seq in 1..=80u64 {
                    history.push(vec![(seq + i as u64) as u8; 1 + (seq as usize * 7) % 300]);
                    let cp = record(&id, seq, &[("history", enc(&history)), ("n", enc(&seq))]);
                    // Half the runs keep every version (their saves share
                    // the batch statement), half keep 30 (theirs share a
                    // pipelined transaction).
                    let keep = (i % 2 == 1).then_some(30);
                    s.save_checkpoint(&lease, cp.clone(), keep).await.unwrap();
                    saved.push(cp);
                }
                saved
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.unwrap());
        }
        all
    });
    let (batches, _, appended) = s.group.batches();
    assert!(batches > 0, "no batch of several saves");
    assert!(appended > 0, "no appending save written by the batch statement");
    for (i, versions) in saved.iter().enumerate() {
        let from = if i % 2 == 1 { 51 } else { 1 };
        all_load(db.store(), &format!("c{i}"), versions, from);
    }
});
