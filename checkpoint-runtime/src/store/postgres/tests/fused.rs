//! The fused statements of `fused/` against the generic path (load, one
//! rule, `apply`): each runs on fresh runs in the same state, one run
//! through the fused statement and its twin through the generic path, and
//! the two must store the same rows, records and histories (but for the
//! run's name and the times of its creation and events), and refuse the
//! same writes, writing nothing then. Also: the ends of runs behave as the
//! memory store's (the conformance suite's judge).

use super::*;
use crate::store::postgres::apply::{apply, Row};
use crate::store::postgres::conn::{from_ts, ts_after};
use crate::store::postgres::fused::create_batch::{self, NewTop};
use crate::store::postgres::fused::finish::{self as fused_finish, Ending};
use crate::store::postgres::fused::renew::report;
use crate::store::postgres::fused::save::{saved_run, Save};
use crate::store::postgres::fused::save_batch::{Columns, BATCH};
use crate::store::postgres::tables::runs::{lock_run, RENEW};
use crate::store::rules;
use crate::store::{MemoryStore, Renewed};

/// [`stored`] of run `id`, with the times that differ between two runs
/// made one after the other (their creation, their events but saved
/// checkpoints', which carry the checkpoint's time) zeroed first.
fn same_times(db: &Db, client: &tokio_postgres::Client, id: &str) -> Vec<String> {
    db.run(client.batch_execute(
        "UPDATE cp_runs SET created_at = 0, updated_at = 0; \
         UPDATE cp_history SET at = 0 WHERE NOT event ? 'CheckpointSaved'",
    ))
    .unwrap();
    stored(db, client, id)
}

/// Runs `ids`, claimed together by worker `a` (one lease for all).
fn claimed(s: &PostgresStore, ids: &[&str]) -> Lease {
    for id in ids {
        new_run(s, id);
    }
    let mut all = req("a", "a1");
    all.limit = ids.len();
    let claimed = block_on(s.claim(&all)).unwrap().claimed;
    assert_eq!(claimed.len(), ids.len());
    assert!(claimed.iter().all(|c| c.lease == claimed[0].lease));
    claimed[0].lease.clone()
}

fn stale(lease: &Lease) -> Lease {
    Lease {
        epoch: lease.epoch + 7,
        ..lease.clone()
    }
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_batch_of_saves_writes_what_the_generic_save_writes() {
    let Some(db) = Db::open("a_batch_of_saves_writes_what_the_generic_save_writes") else {
        return;
    };
    let s = db.store();
    let client = schema_client(&db);
    let lease = claimed(s, &["b-1", "b-2", "g-1", "g-2"]);
    let wait = Suspend::Waiting {
        signal: "go".into(),
        deadline: None,
        payload_schema: None,
        sites_before: None,
    };
    for (seq, suspend) in [(1, None), (2, Some(wait))] {
        let like = rich_cp("r", seq, suspend);
        let cps: Vec<_> = ["b-1", "b-2"]
            .iter()
            .map(|run| of_run(&like, run))
            .collect();
        let after: Vec<RunRecord> = cps.iter().map(|cp| saved_run(cp)).collect();
        let saves: Vec<Save<'_>> = cps
            .iter()
            .zip(&after)
            .map(|(cp, after)| Save::of(&lease, cp, after, None, None).unwrap())
            .collect();
        let mut columns = Columns::default();
        for (i, save) in saves.iter().enumerate() {
            columns.push(i32::try_from(i).unwrap(), save);
        }
        let rows = db.run(async {
            let mut conn = s.pool.get().await.unwrap();
            let rows = conn.plain().query(BATCH, &columns.params()).await;
            rows.unwrap().len()
        });
        assert_eq!(rows, 2);
        for (b, g) in [("b-1", "g-1"), ("b-2", "g-2")] {
            let cp = of_run(&like, g);
            db.run(async {
                let mut conn = s.pool.get().await.unwrap();
                locked::save_locked(&mut conn, &lease, &cp, None).await
            })
            .unwrap();
            assert_eq!(same_times(&db, &client, b), same_times(&db, &client, g));
        }
    }
    // Refused alike: a stale lease, a seq out of order. Nothing written.
    let before = (
        same_times(&db, &client, "b-1"),
        same_times(&db, &client, "g-1"),
    );
    for (lease, seq) in [(stale(&lease), 3), (lease.clone(), 5)] {
        let cp = of_run(&rich_cp("r", seq, None), "b-1");
        let after = saved_run(&cp);
        let save = Save::of(&lease, &cp, &after, None, None).unwrap();
        let mut columns = Columns::default();
        columns.push(0, &save);
        let (rows, generic) = db.run(async {
            let mut conn = s.pool.get().await.unwrap();
            let rows = conn.plain().query(BATCH, &columns.params()).await;
            let cp = of_run(&cp, "g-1");
            let generic = locked::save_locked(&mut conn, &lease, &cp, None).await;
            (rows.unwrap().len(), generic)
        });
        assert_eq!(rows, 0);
        assert!(generic.is_err());
    }
    let after = (
        same_times(&db, &client, "b-1"),
        same_times(&db, &client, "g-1"),
    );
    assert_eq!(before, after);
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn starts_in_one_statement_write_what_the_generic_create_writes() {
    let Some(db) = Db::open("starts_in_one_statement_write_what_the_generic_create_writes") else {
        return;
    };
    let s = db.store();
    let client = schema_client(&db);
    let new = |id: &str| {
        let run = NewRun {
            id: id.into(),
            workflow: "wf".into(),
            input: Arc::from(&b"[1]"[..]),
            version: 3,
            trace: Some("trace-1".into()),
            parent: None,
            max_running: None,
            options: Default::default(),
        };
        let at = SystemTime::now();
        let (rec, change) = rules::create(run, 0, at);
        NewTop { rec, change, at }
    };
    // The generic create of a top-level run: `apply` inserts it.
    let generic = |id: &str| {
        let top = new(id);
        db.run(async {
            let mut conn = s.pool.get().await.unwrap();
            let mut cx = conn.begin().await.unwrap();
            let made = apply(&mut cx, Row::Insert(&top.rec), top.change, top.at).await;
            cx.commit().await.unwrap();
            made.unwrap()
        })
    };
    let alone = db.run(async {
        let mut conn = s.pool.get().await.unwrap();
        create_batch::create_alone(&mut conn, &new("f-1")).await
    });
    assert!(matches!(alone, Ok(Created::New)));
    let batch = db.run(async {
        let mut conn = s.pool.get().await.unwrap();
        create_batch::insert_batch(&mut conn, &[new("f-2"), new("f-3")]).await
    });
    assert_eq!(batch.unwrap().len(), 2);
    for (f, g) in [("f-1", "g-1"), ("f-2", "g-2"), ("f-3", "g-3")] {
        assert!(generic(g));
        assert_eq!(same_times(&db, &client, f), same_times(&db, &client, g));
    }
    // An id that exists: neither writes anything.
    let before = same_times(&db, &client, "f-1");
    let again = db.run(async {
        let mut conn = s.pool.get().await.unwrap();
        create_batch::create_alone(&mut conn, &new("f-1")).await
    });
    assert!(matches!(again, Ok(Created::Existing(_))));
    let batch = db.run(async {
        let mut conn = s.pool.get().await.unwrap();
        create_batch::insert_batch(&mut conn, &[new("f-1"), new("f-2")]).await
    });
    assert!(batch.unwrap().is_empty());
    assert!(!generic("f-1"));
    assert_eq!(same_times(&db, &client, "f-1"), before);
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn ends_in_one_round_trip_write_what_the_generic_end_writes() {
    let Some(db) = Db::open("ends_in_one_round_trip_write_what_the_generic_end_writes") else {
        return;
    };
    let s = db.store();
    let client = schema_client(&db);
    let ids = ["f-1", "f-2", "f-3", "f-4", "g-1", "g-2", "g-3", "g-4"];
    let lease = claimed(s, &ids);
    let outcomes = [
        Outcome::Completed {
            output: Arc::from(&b"{\"ok\":1}"[..]),
            error: None,
        },
        Outcome::Completed {
            output: Arc::from(&b"null"[..]),
            error: Some("it said no".into()),
        },
        Outcome::Failed {
            error: Error::internal("boom"),
        },
    ];
    let at = SystemTime::now();
    let ending = |id: &str, lease: &Lease, outcome: &Outcome| Ending {
        id: id.to_owned(),
        lease: lease.clone(),
        outcome: outcome.clone(),
        at,
    };
    // Refused alike first: a stale lease. Nothing written.
    let before = (
        same_times(&db, &client, "f-1"),
        same_times(&db, &client, "g-1"),
    );
    let (one, many, generic) = db.run(async {
        let mut conn = s.pool.get().await.unwrap();
        let old = stale(&lease);
        let one = fused_finish::finish_in_one(&mut conn, "f-1", &old, &outcomes[0], at).await;
        let ends = [
            ending("f-1", &old, &outcomes[0]),
            ending("f-2", &old, &outcomes[0]),
        ];
        let many = fused_finish::finish_many(&mut conn, &ends).await;
        let generic = locked::finish_locked(&mut conn, "g-1", &old, outcomes[0].clone(), at).await;
        (one, many, generic)
    });
    assert!(!one.unwrap());
    assert!(many.unwrap().is_empty());
    assert!(
        matches!(generic, Err(Error::LeaseLost { .. })),
        "{generic:?}"
    );
    let after = (
        same_times(&db, &client, "f-1"),
        same_times(&db, &client, "g-1"),
    );
    assert_eq!(before, after);
    // One alone, three together; their twins through the generic end.
    let (one, many) = db.run(async {
        let mut conn = s.pool.get().await.unwrap();
        let one = fused_finish::finish_in_one(&mut conn, "f-1", &lease, &outcomes[0], at).await;
        let ends = [
            ending("f-2", &lease, &outcomes[0]),
            ending("f-3", &lease, &outcomes[1]),
            ending("f-4", &lease, &outcomes[2]),
        ];
        (one, fused_finish::finish_many(&mut conn, &ends).await)
    });
    assert!(one.unwrap());
    assert_eq!(many.unwrap().len(), 3);
    for (g, outcome) in ["g-1", "g-2", "g-3", "g-4"].iter().zip([0, 0, 1, 2]) {
        let outcome = outcomes[outcome].clone();
        db.run(async {
            let mut conn = s.pool.get().await.unwrap();
            locked::finish_locked(&mut conn, g, &lease, outcome, at).await
        })
        .unwrap();
    }
    for (f, g) in [
        ("f-1", "g-1"),
        ("f-2", "g-2"),
        ("f-3", "g-3"),
        ("f-4", "g-4"),
    ] {
        assert_eq!(same_times(&db, &client, f), same_times(&db, &client, g));
        let (f, g) = (
            block_on(s.load_run(f)).unwrap().unwrap(),
            block_on(s.load_run(g)).unwrap().unwrap(),
        );
        assert_eq!((f.state, f.lease), (g.state, g.lease));
    }
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_renewal_in_one_statement_writes_what_the_rule_writes() {
    let Some(db) = Db::open("a_renewal_in_one_statement_writes_what_the_rule_writes") else {
        return;
    };
    let s = db.store();
    let client = schema_client(&db);
    let lease = claimed(s, &["f", "g"]);
    // Both asked to cancel: each renewal reports the request.
    let asked = crate::store::CancelRequest::new(
        "superseded",
        SystemTime::now(),
        Duration::from_secs(30),
        true,
    );
    for id in ["f", "g"] {
        db.run(s.request_cancel(id, asked.clone())).unwrap();
    }
    let expires = ts_after(SystemTime::now(), Duration::from_secs(600));
    let renew = |lease: &Lease| {
        let lease = lease.clone();
        db.run(async move {
            let mut conn = s.pool.get().await.unwrap();
            let epoch = i64::try_from(lease.epoch).unwrap();
            let (worker, instance): (&str, &str) = (&lease.worker, &lease.instance);
            let fused: Vec<Renewed> = conn
                .plain()
                .query(RENEW, &[&"f", &epoch, &worker, &instance, &expires])
                .await
                .unwrap()
                .iter()
                .map(|row| report("f", row).unwrap())
                .collect();
            let mut cx = conn.begin().await.unwrap();
            let mut rec = lock_run(&mut cx, "g").await.unwrap().unwrap();
            let generic = match rules::check_lease("g", &rec, &lease) {
                Ok(()) => {
                    let (change, renewed) = rules::renew(&mut rec, from_ts(expires));
                    apply(&mut cx, Row::Update(&rec), change, SystemTime::now())
                        .await
                        .unwrap();
                    cx.commit().await.unwrap();
                    Ok(renewed)
                }
                Err(e) => Err(e),
            };
            (fused, generic)
        })
    };
    let before = (same_times(&db, &client, "f"), same_times(&db, &client, "g"));
    let (fused, generic) = renew(&stale(&lease));
    assert!(fused.is_empty(), "{fused:?}");
    assert!(
        matches!(generic, Err(Error::LeaseLost { .. })),
        "{generic:?}"
    );
    let after = (same_times(&db, &client, "f"), same_times(&db, &client, "g"));
    assert_eq!(before, after);
    let (fused, generic) = renew(&lease);
    assert_eq!(fused, [generic.unwrap()]);
    assert_eq!(fused[0].cancel.as_ref(), Some(&asked));
    assert_eq!(same_times(&db, &client, "f"), same_times(&db, &client, "g"));
    let run = block_on(s.load_run("f")).unwrap().unwrap();
    assert_eq!(run.lease.map(|l| l.expires_at), Some(from_ts(expires)));
}

/// What a store shows of runs `ids` after a scenario: each run's status
/// and the kinds of its events, and its pending signals.
fn shown(s: &dyn Store, ids: &[&str]) -> Vec<(String, String, Vec<String>, usize)> {
    ids.iter()
        .map(|id| {
            let run = block_on(s.load_run(id)).unwrap().unwrap();
            let events = block_on(s.history(id))
                .unwrap()
                .into_iter()
                .map(|e| {
                    let json = serde_json::to_value(&e.event).unwrap();
                    match json {
                        serde_json::Value::Object(m) => m.keys().next().cloned().unwrap(),
                        other => other.to_string(),
                    }
                })
                .collect();
            let signals = block_on(s.pending_signals(id)).unwrap().len();
            (id.to_string(), run.status().to_string(), events, signals)
        })
        .collect()
}

fn claim_only(s: &dyn Store, id: &str) -> Claimed {
    let mut only = req("a", "a1");
    only.only = Some(id.to_owned());
    let mut claimed = block_on(s.claim(&only)).unwrap().claimed;
    assert_eq!(claimed.len(), 1);
    claimed.remove(0)
}

fn child(s: &dyn Store, id: &str, parent: &str) {
    let made = block_on(s.create_run(NewRun {
        id: id.into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: Some(parent.into()),
        max_running: None,
        options: Default::default(),
    }))
    .unwrap();
    assert!(matches!(made, Created::New));
}

/// Cancelling a run that has ended changes nothing (not its descendants
/// either), and a joining run that is cancelled, with the children it
/// joins, records no `Joined` and receives no join signal: as in the
/// memory store.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn cancels_end_runs_as_the_memory_store_ends_them() {
    let Some(db) = Db::open("cancels_end_runs_as_the_memory_store_ends_them") else {
        return;
    };
    let memory = MemoryStore::new();
    let scenario = |s: &dyn Store| {
        new_run(s, "done");
        let c = claim_only(s, "done");
        child(s, "done-child", "done");
        let output = Arc::from(&b"1"[..]);
        block_on(s.finish(
            "done",
            &c.lease,
            Outcome::Completed {
                output,
                error: None,
            },
        ))
        .unwrap();
        assert!(!block_on(s.cancel("done")).unwrap());
        new_run(s, "joining");
        let c = claim_only(s, "joining");
        child(s, "joining-1", "joining");
        child(s, "joining-2", "joining");
        let join = Suspend::Joining {
            children: vec!["joining-1".into(), "joining-2".into()],
            token: "join#1".into(),
            sites_before: None,
        };
        let cp = of_run(&rich_cp("r", 1, Some(join)), "joining");
        block_on(s.save_checkpoint(&c.lease, cp, None)).unwrap();
        block_on(s.release("joining", &c.lease, Release::Suspend)).unwrap();
        assert!(block_on(s.cancel("joining")).unwrap());
        shown(
            s,
            &["done", "done-child", "joining", "joining-1", "joining-2"],
        )
    };
    let on_memory = scenario(&memory);
    let on_postgres = scenario(db.store());
    assert_eq!(on_postgres, on_memory);
    assert_eq!(on_postgres[1].1, "queued", "{on_postgres:?}");
    assert!(!on_postgres[2].2.contains(&"Joined".to_owned()));
}
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_save_in_one_statement_writes_what_the_fenced_save_writes() {
    let Some(db) = Db::open("a_save_in_one_statement_writes_what_the_fenced_save_writes") else {
        return;
    };
    let s = db.store();
    let client = schema_client(&db);
    // Two runs in the same state under the same lease: "one" saved by the
    // statement, "locked" by the fenced transaction.
    new_run(s, "one");
    new_run(s, "locked");
    let mut both = req("a", "a1");
    both.limit = 2;
    let claimed = block_on(s.claim(&both)).unwrap().claimed;
    assert_eq!(claimed.len(), 2);
    let lease = claimed[0].lease.clone();
    assert_eq!(lease, claimed[1].lease);
    let save = |cp: &Arc<CheckpointRecord>, keep: Option<usize>| {
        db.run(async {
            let mut conn = s.pool.get().await.unwrap();
            let one = crate::store::postgres::fused::save::save_in_one(
                &mut conn,
                &lease,
                &of_run(cp, "one"),
                keep,
                None,
            )
            .await;
            let locked = locked::save_locked(&mut conn, &lease, &of_run(cp, "locked"), keep).await;
            (one, locked)
        })
    };
    let deadline = SystemTime::now() + Duration::from_secs(3600);
    let wait = Suspend::Waiting {
        signal: "go\0now".into(),
        deadline: Some(deadline),
        payload_schema: Some("k-go".into()),
        sites_before: Some(vec!["checkpoint 1".into()]),
    };
    let sleep = Suspend::Sleeping {
        until: deadline + Duration::from_secs(1),
        sites_before: None,
        retry: None,
    };
    let (one, locked) = save(&rich_cp("r", 1, None), None);
    assert_eq!((one.unwrap(), locked.unwrap()), (true, ()));
    let (one, locked) = save(&rich_cp("r", 2, Some(wait)), Some(2));
    assert_eq!((one.unwrap(), locked.unwrap()), (true, ()));
    // A wake value (a consumed signal), which the next save clears.
    for run in ["one", "locked"] {
        block_on(s.put_signal(run, "go\0now", b"7".to_vec())).unwrap();
        assert!(block_on(s.take_signal(run, &lease, "go\0now"))
            .unwrap()
            .is_some());
    }
    let (one, locked) = save(&rich_cp("r", 3, Some(sleep)), Some(2));
    assert_eq!((one.unwrap(), locked.unwrap()), (true, ()));
    // A text the server refuses (a NUL in a label): the statement leaves it
    // to the fenced save, whose error it is; nothing is written.
    let mut bad = (*rich_cp("r", 4, None)).clone();
    bad.label = Some(Cow::Borrowed("bad\0label"));
    let bad = Arc::new(bad);
    let (one, locked) = save(&bad, Some(1));
    assert!(!one.unwrap());
    assert!(matches!(locked, Err(Error::Store { .. })), "{locked:?}");
    let err = block_on(s.save_checkpoint(&lease, of_run(&bad, "one"), Some(1))).unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err}");
    let (one, locked) = save(&rich_cp("r", 4, None), Some(1));
    assert_eq!((one.unwrap(), locked.unwrap()), (true, ()));
    let last = rich_cp("r", 5, None);
    let (one, locked) = save(&last, Some(10));
    assert_eq!((one.unwrap(), locked.unwrap()), (true, ()));
    // Both sealed: read back (and checked against the seal) as saved.
    for run in ["one", "locked"] {
        let back = block_on(s.checkpoint(run, 5)).unwrap();
        assert_eq!(back, Some(of_run(&last, run)));
    }
    // The same rows, but for the times of the runs' creation and signals.
    db.run(client.batch_execute(
        "UPDATE cp_runs SET created_at = 0; \
         UPDATE cp_history SET at = 0 WHERE NOT event ? 'CheckpointSaved'",
    ))
    .unwrap();
    let (one, locked) = (stored(&db, &client, "one"), stored(&db, &client, "locked"));
    assert_eq!(one, locked);
    // Retention kept 4 and 5; the run waits for nothing, at seq 5.
    // Its row, checkpoints 4 and 5 (holding their events), and 5 events:
    // started, saved 1 and 2, the signal received, saved 3 (moved from the
    // rows retention deleted). The history: 7 events, the same for both.
    assert_eq!(one.len(), 1 + 2 + 5, "{one:#?}");
    let history = |run: &str| -> Vec<Event> {
        let h = block_on(s.history(run)).unwrap();
        h.into_iter().map(|e| e.event).collect()
    };
    assert_eq!(history("one"), history("locked"));
    let saved: Vec<u64> = history("one")
        .iter()
        .filter_map(|e| match e {
            Event::CheckpointSaved { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(saved, [1, 2, 3, 4, 5]);
    assert_eq!(history("one").len(), 7);
    assert!(matches!(history("one")[3], Event::SignalReceived { .. }));
    let kept: Vec<u64> = block_on(s.list_checkpoints("one"))
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(kept, vec![4, 5]);
    let run = block_on(s.load_run("one")).unwrap().unwrap();
    assert_eq!((run.latest_seq, run.attempt, run.wake), (5, 1, None));
    assert_eq!(run.lease.map(|l| l.worker), Some("a".to_owned()));
}
