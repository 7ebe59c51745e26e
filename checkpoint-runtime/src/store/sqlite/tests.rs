//! Tests of the SQLite store: its own behaviour and the shared conformance
//! suite, plus ignored benchmarks and a profiling harness.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::checkpoints::chain::{ANCHOR_EVERY, WALK};
use super::checkpoints::refs::{RefsOf, StoredRefs};
use super::checkpoints::rows::{CP_COLS, CP_FROM};
use super::checkpoints::Loc;
use super::error::to_postcard;
use super::migrations::{
    prepare_writer, PAGE_SIZE, WAL_CHECKPOINT_PAGES, WAL_SIZE_LIMIT, WRITER_CACHE_KIB,
};
use super::runs::{RUN_COLS, RUN_SELECT};
use super::writer::SPLIT_AT;
use super::*;
use crate::status::StatusKind;
use crate::store::conformance::{claim_one, conformance_tests, cp, new_run, req, Fixture};
use crate::store::sql::ts;
use crate::store::{FieldRecord, RunState, Suspend};
use crate::store::{MemoryStore, Wake, WakeValue};
use futures::executor::block_on;
use std::time::{SystemTime, UNIX_EPOCH};

fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("runs.db")).unwrap();
    (dir, store)
}

impl Fixture for (tempfile::TempDir, SqliteStore) {
    fn store(&self) -> &dyn Store {
        &self.1
    }

    fn lose_checkpoint(&self, run: &str, seq: u64) {
        let n = peek(&self.1)
            .execute(
                "DELETE FROM checkpoints WHERE seq = ?2 AND run = (SELECT ord FROM runs WHERE id = ?1)",
                params![run, seq as i64],
            )
            .unwrap();
        assert_eq!(n, 1, "no checkpoint #{seq} of `{run}` to lose");
    }
}

/// [`op_save`] as [`SqliteStore::save_checkpoint`] calls it (sealed).
fn save_sealed(cx: &mut TxnCtx<'_>, lease: &Lease, cp: Arc<CheckpointRecord>) -> R<()> {
    let seal = super::checkpoints::seal::PartialSeal::of(&cp);
    op_save(cx, lease, cp, (seal, None), None)
}

conformance_tests!(|_test: &str| Some(open()));

/// A plain connection on the store's file, for looking inside.
fn peek(store: &SqliteStore) -> Connection {
    Connection::open(store.path()).unwrap()
}

fn count(store: &SqliteStore, sql: &str) -> i64 {
    peek(store).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// A checkpoint with these fields (name, bytes), concatenated.
fn cp_fields(
    run: &str,
    seq: u64,
    fields: &[(&'static str, &[u8])],
    suspend: Option<Suspend>,
) -> Arc<CheckpointRecord> {
    let mut data = Vec::new();
    let mut recs = Vec::new();
    for (name, bytes) in fields {
        recs.push(FieldRecord {
            name: Cow::Borrowed(*name),
            type_name: Cow::Borrowed("alloc::vec::Vec<u8>"),
            offset: data.len(),
            len: bytes.len(),
        });
        data.extend_from_slice(bytes);
    }
    Arc::new(CheckpointRecord::new(
        Arc::from(run),
        seq,
        Cow::Borrowed("step"),
        Some(Cow::Borrowed("step")),
        vec![7, seq],
        recs,
        data,
        suspend,
        SystemTime::now(),
    ))
}

/// A writer on the database at `path`, driven by the test itself (no
/// thread), and where it hands large batches to be answered.
fn bare_writer(path: &Path) -> (Writer, mpsc::Receiver<Answers>) {
    let mut conn = connect(path).unwrap();
    prepare_writer(&mut conn).unwrap();
    let (answers, answered) = mpsc::channel();
    let writer = Writer::new(conn, Arc::new(watch::channel(0).0), answers);
    (writer, answered)
}

/// `n` new runs claimed in a store at `path`, closed again, and a writer of
/// the test's own on the file.
fn claimed_writer(
    path: &Path,
    n: usize,
) -> (Vec<(String, Lease)>, Writer, mpsc::Receiver<Answers>) {
    let leases = claim_all(&SqliteStore::open(path).unwrap(), n);
    let (writer, answered) = bare_writer(path);
    (leases, writer, answered)
}

/// A request's work, for tests that queue different ones in one batch.
type SaveOp = Box<dyn FnOnce(&mut TxnCtx<'_>) -> R<()> + Send>;

/// A write request as the store queues one (see `SqliteStore::queue`), and
/// where its answer arrives.
fn request<T, F>(keeps_deferred: bool, f: F) -> (Box<dyn Job>, oneshot::Receiver<Result<T, Error>>)
where
    T: Send + 'static,
    F: FnOnce(&mut TxnCtx<'_>) -> R<T> + Send + 'static,
{
    let (reply, replied) = oneshot::channel();
    let job = Pending {
        f: Some(f),
        out: None,
        tx: reply,
        keeps_deferred,
    };
    (Box::new(job), replied)
}

fn events(store: &dyn Store, id: &str) -> Vec<Event> {
    block_on(store.history(id))
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect()
}

// -- The behavioural tests of memory.rs, on SQLite ---------------------

// -- More of the contract ----------------------------------------------

#[test]
fn create_load_and_list_runs() {
    let (_dir, store) = open();
    new_run(&store, "a-1");
    new_run(&store, "a-2");
    block_on(store.create_run(NewRun {
        id: "b-1".into(),
        workflow: "other".into(),
        input: Arc::from(&b"[1,2]"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    }))
    .unwrap();
    let again = block_on(store.create_run(NewRun {
        id: "b-1".into(),
        workflow: "changed".into(),
        input: Arc::from(&b"0"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    }))
    .unwrap();
    let Created::Existing(rec) = again else {
        panic!("expected the existing run")
    };
    assert_eq!(rec.workflow, "other");
    assert_eq!(&rec.input[..], b"[1,2]");
    assert_eq!(rec.state, RunState::Ready);
    assert_eq!((rec.epoch, rec.attempt, rec.latest_seq), (0, 0, 0));
    assert!(block_on(store.load_run("nope")).unwrap().is_none());

    let ids = |f: RunFilter| -> Vec<String> {
        block_on(store.list_runs(&f))
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect()
    };
    assert_eq!(ids(RunFilter::new()), ["a-1", "a-2", "b-1"]);
    assert_eq!(ids(RunFilter::new().workflow("wf")), ["a-1", "a-2"]);
    assert_eq!(ids(RunFilter::new().id_prefix("b-")), ["b-1"]);
    assert_eq!(ids(RunFilter::new().limit(2)), ["a-1", "a-2"]);

    // Finish a-1 with an `Err` output: it lists as failed.
    let mut only = req("w", "i");
    only.only = Some("a-1".into());
    let c = block_on(store.claim(&only)).unwrap().claimed.remove(0);
    assert_eq!(c.run.id, "a-1");
    block_on(store.finish(
        "a-1",
        &c.lease,
        Outcome::Completed {
            output: Arc::from(&b"{\"Err\":\"no\"}"[..]),
            error: Some("no".into()),
        },
    ))
    .unwrap();
    assert_eq!(ids(RunFilter::new().status(StatusKind::Failed)), ["a-1"]);
    assert!(ids(RunFilter::new().status(StatusKind::Completed)).is_empty());
    assert_eq!(
        ids(RunFilter::new().status(StatusKind::Running)),
        ["a-2", "b-1"]
    );
}

#[test]
fn checkpoints_round_trip_exactly() {
    let (_dir, store) = open();
    new_run(&store, "r");
    let c = claim_one(&store, "w", "i");
    let first = cp_fields(
        "r",
        1,
        &[("goal", b"ship it"), ("done", b""), ("n", &[3])],
        None,
    );
    block_on(store.save_checkpoint(&c.lease, first.clone(), None)).unwrap();
    let until = SystemTime::now() + Duration::from_secs(3600);
    let second = cp_fields(
        "r",
        2,
        &[("goal", b"ship it"), ("n", &[4]), ("extra", &[9; 40])],
        Some(Suspend::Waiting {
            signal: "approval".into(),
            deadline: Some(until),
            payload_schema: None,
            sites_before: None,
        }),
    );
    block_on(store.save_checkpoint(&c.lease, second.clone(), None)).unwrap();
    // Data that is not the plain concatenation of its fields.
    let odd = Arc::new(CheckpointRecord::new(
        Arc::from("r"),
        3,
        Cow::Borrowed("odd"),
        None,
        vec![],
        vec![FieldRecord {
            name: Cow::Borrowed("x"),
            type_name: Cow::Borrowed("u8"),
            offset: 2,
            len: 1,
        }],
        vec![0, 1, 2, 3],
        None,
        SystemTime::now(),
    ));
    assert_eq!(
        block_on(store.load_run("r")).unwrap().unwrap().state,
        RunState::Waiting {
            signal: "approval".into(),
            deadline: Some(until)
        }
    );
    block_on(store.save_checkpoint(&c.lease, odd.clone(), None)).unwrap();

    assert_eq!(
        *block_on(store.checkpoint("r", 1)).unwrap().unwrap(),
        *first
    );
    assert_eq!(
        *block_on(store.checkpoint("r", 2)).unwrap().unwrap(),
        *second
    );
    assert_eq!(
        *block_on(store.latest_checkpoint("r")).unwrap().unwrap(),
        *odd
    );
    assert!(block_on(store.checkpoint("r", 9)).unwrap().is_none());
    let all = block_on(store.list_checkpoints("r")).unwrap();
    let all: Vec<CheckpointRecord> = all.iter().map(|c| (**c).clone()).collect();
    assert_eq!(
        all,
        vec![(*first).clone(), (*second).clone(), (*odd).clone()]
    );
    assert_eq!(all[1].info().fields[2].size, 40);
    assert!(matches!(
        block_on(store.list_checkpoints("nope")),
        Err(Error::UnknownRun { .. })
    ));
    assert!(matches!(
        block_on(store.latest_checkpoint("nope")),
        Err(Error::UnknownRun { .. })
    ));
    // A claim hands out the latest checkpoint.
    let again = claim_one(&store, "w", "i2");
    assert_eq!(*again.checkpoint.unwrap(), *odd);
}

#[test]
fn signals_wake_waiting_runs_exactly_once() {
    let (_dir, store) = open();
    new_run(&store, "r");
    let c = claim_one(&store, "w", "i");
    let wait = Some(Suspend::Waiting {
        signal: "approval".into(),
        deadline: None,
        payload_schema: None,
        sites_before: None,
    });
    block_on(store.save_checkpoint(&c.lease, cp_fields("r", 1, &[], wait), None)).unwrap();
    block_on(store.release("r", &c.lease, Release::Suspend)).unwrap();
    let rec = block_on(store.load_run("r")).unwrap().unwrap();
    assert_eq!((rec.attempt, rec.lease.is_none()), (0, true));
    assert!(block_on(store.claim(&req("w", "i")))
        .unwrap()
        .claimed
        .is_empty());
    // Another signal name does not wake it.
    block_on(store.put_signal("r", "other", b"1".to_vec())).unwrap();
    assert!(block_on(store.claim(&req("w", "i")))
        .unwrap()
        .claimed
        .is_empty());
    block_on(store.put_signal("r", "approval", b"true".to_vec())).unwrap();
    block_on(store.put_signal("r", "approval", b"false".to_vec())).unwrap();
    let c = claim_one(&store, "w", "i");
    assert_eq!(
        c.run.wake,
        Some(Wake {
            seq: 1,
            value: WakeValue::Signal {
                name: "approval".into(),
                payload: Arc::from(&b"true"[..]),
            },
        })
    );
    let pending: Vec<(String, Vec<u8>)> = block_on(store.pending_signals("r"))
        .unwrap()
        .into_iter()
        .map(|s| (s.name, s.payload.to_vec()))
        .collect();
    assert_eq!(
        pending,
        vec![
            ("other".to_owned(), b"1".to_vec()),
            ("approval".to_owned(), b"false".to_vec())
        ]
    );
    assert!(matches!(
        block_on(store.put_signal("nope", "x", vec![])),
        Err(Error::UnknownRun { .. })
    ));
    // The payload was unusable: back to waiting, the next signal wakes it.
    block_on(store.reject_signal("r", &c.lease, "bad".into())).unwrap();
    let rec = block_on(store.load_run("r")).unwrap().unwrap();
    assert_eq!(rec.wake, None);
    assert!(matches!(rec.state, RunState::Waiting { .. }));
    let taken = block_on(store.take_signal("r", &c.lease, "approval"))
        .unwrap()
        .unwrap();
    assert_eq!(&taken.payload[..], b"false");
    assert!(block_on(store.take_signal("r", &c.lease, "approval"))
        .unwrap()
        .is_none());
    let rec = block_on(store.load_run("r")).unwrap().unwrap();
    assert_eq!(rec.state, RunState::Ready);
    assert!(matches!(
        rec.wake,
        Some(Wake {
            seq: 1,
            value: WakeValue::Signal { .. }
        })
    ));
    block_on(store.time_out("r", &c.lease)).unwrap();
    let rec = block_on(store.load_run("r")).unwrap().unwrap();
    assert_eq!(
        rec.wake,
        Some(Wake {
            seq: 1,
            value: WakeValue::TimedOut
        })
    );
    let ev = events(&store, "r");
    assert!(ev.contains(&Event::SignalRejected {
        name: "approval".into(),
        reason: "bad".into()
    }));
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, Event::SignalReceived { .. }))
            .count(),
        3
    );
}

#[test]
fn timers_and_deadlines_make_runs_claimable() {
    let (_dir, store) = open();
    assert_eq!(
        block_on(store.next_wakeup(SystemTime::UNIX_EPOCH))
            .unwrap()
            .earliest(),
        None
    );
    new_run(&store, "sleeper");
    new_run(&store, "waiter");
    let soon = SystemTime::now() + Duration::from_millis(300);
    for c in block_on(store.claim(&req("w", "i"))).unwrap().claimed {
        let suspend = if c.run.id == "sleeper" {
            Suspend::Sleeping {
                until: soon,
                sites_before: None,
                retry: None,
            }
        } else {
            Suspend::Waiting {
                signal: "s".into(),
                deadline: Some(soon + Duration::from_millis(100)),
                payload_schema: None,
                sites_before: None,
            }
        };
        let cp = cp_fields(&c.run.id, 1, &[], Some(suspend));
        block_on(store.save_checkpoint(&c.lease, cp, None)).unwrap();
        // The lease is still held: the wake-up is its expiry or earlier.
        block_on(store.release(&c.run.id, &c.lease, Release::Suspend)).unwrap();
    }
    assert_eq!(
        block_on(store.next_wakeup(SystemTime::UNIX_EPOCH))
            .unwrap()
            .earliest(),
        Some(soon)
    );
    assert!(block_on(store.claim(&req("w", "i")))
        .unwrap()
        .claimed
        .is_empty());
    std::thread::sleep(Duration::from_millis(450));
    let mut got = block_on(store.claim(&req("w", "i"))).unwrap().claimed;
    got.sort_by(|a, b| a.run.id.cmp(&b.run.id));
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].run.id, "sleeper");
    assert_eq!(got[0].run.wake, None);
    assert_eq!(
        got[1].run.wake,
        Some(Wake {
            seq: 1,
            value: WakeValue::TimedOut
        })
    );
    // Both are leased now: the next wake-up is a lease expiry.
    let next = block_on(store.next_wakeup(SystemTime::UNIX_EPOCH))
        .unwrap()
        .earliest()
        .unwrap();
    assert!(next > SystemTime::now() + Duration::from_secs(20));
}

#[test]
fn finish_release_and_history() {
    let (_dir, store) = open();
    new_run(&store, "ok");
    new_run(&store, "bad");
    new_run(&store, "retry");
    let claimed = block_on(store.claim(&req("w", "i"))).unwrap().claimed;
    let lease = |id: &str| {
        claimed
            .iter()
            .find(|c| c.run.id == id)
            .unwrap()
            .lease
            .clone()
    };
    block_on(store.save_checkpoint(&lease("ok"), cp("ok", 1), None)).unwrap();
    block_on(store.finish(
        "ok",
        &lease("ok"),
        Outcome::Completed {
            output: Arc::from(&b"42"[..]),
            error: None,
        },
    ))
    .unwrap();
    let failure = Error::Incompatible {
        workflow: "wf".into(),
        run: "bad".into(),
        site: "step".into(),
        field: "n".into(),
        detail: "type changed".into(),
    };
    block_on(store.finish(
        "bad",
        &lease("bad"),
        Outcome::Failed {
            error: failure.clone(),
        },
    ))
    .unwrap();
    block_on(store.release(
        "retry",
        &lease("retry"),
        Release::Retry {
            reason: "panicked".into(),
        },
    ))
    .unwrap();

    let ok = block_on(store.load_run("ok")).unwrap().unwrap();
    assert_eq!(
        ok.state,
        RunState::Completed {
            output: Arc::from(&b"42"[..]),
            error: None
        }
    );
    assert!(ok.lease.is_none());
    let bad = block_on(store.load_run("bad")).unwrap().unwrap();
    assert_eq!(bad.state, RunState::Failed { error: failure });
    // Finished runs refuse fenced writes and cancellation.
    let err = block_on(store.save_checkpoint(&lease("ok"), cp("ok", 2), None)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert!(!block_on(store.cancel("ok")).unwrap());
    assert_eq!(
        events(&store, "ok"),
        vec![
            Event::Started {
                workflow: "wf".into(),
                trace: None,
            },
            Event::CheckpointSaved {
                seq: 1,
                label: None
            },
            Event::Completed
        ]
    );
    assert_eq!(
        events(&store, "retry").last(),
        Some(&Event::Retried {
            attempt: 1,
            reason: "panicked".into()
        })
    );
    let again = claim_one(&store, "w", "i");
    assert_eq!((again.run.id.as_str(), again.run.attempt), ("retry", 2));
    // Abandon leaves the run as it is, without a lease.
    block_on(store.release("retry", &again.lease, Release::Abandon)).unwrap();
    let rec = block_on(store.load_run("retry")).unwrap().unwrap();
    assert!(rec.lease.is_none());
    assert_eq!(rec.attempt, 2);
    // Releasing a cancelled run clears its lease and succeeds.
    let again = claim_one(&store, "w", "i");
    assert!(block_on(store.cancel("retry")).unwrap());
    block_on(store.release("retry", &again.lease, Release::Suspend)).unwrap();
    block_on(store.append_event("retry", Event::Completed)).unwrap();
    assert_eq!(events(&store, "retry").last(), Some(&Event::Completed));
    assert!(matches!(
        block_on(store.history("nope")),
        Err(Error::UnknownRun { .. })
    ));
    // Renew is fenced too.
    assert!(matches!(
        block_on(store.renew("ok", &lease("ok"), Duration::from_secs(1))),
        Err(Error::LeaseLost { .. })
    ));
}

#[test]
fn renew_extends_the_lease() {
    let (_dir, store) = open();
    new_run(&store, "r");
    let mut short = req("a", "a1");
    short.ttl = Duration::from_millis(200);
    let c = block_on(store.claim(&short)).unwrap().claimed.remove(0);
    block_on(store.renew("r", &c.lease, Duration::from_secs(60))).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
}

#[test]
fn fork_copies_a_checkpoint_into_a_new_run() {
    let (_dir, store) = open();
    new_run(&store, "src");
    let c = claim_one(&store, "w", "i");
    let wait = Suspend::Waiting {
        signal: "go".into(),
        deadline: None,
        payload_schema: None,
        sites_before: None,
    };
    block_on(store.save_checkpoint(&c.lease, cp_fields("src", 1, &[("a", b"1")], None), None))
        .unwrap();
    let second = cp_fields("src", 2, &[("a", b"1"), ("b", b"2")], Some(wait.clone()));
    block_on(store.save_checkpoint(&c.lease, second.clone(), None)).unwrap();
    block_on(store.fork("src", 2, "copy")).unwrap();
    assert!(matches!(
        block_on(store.fork("src", 2, "copy")),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        block_on(store.fork("src", 7, "copy2")),
        Err(Error::UnknownCheckpoint { seq: 7, .. })
    ));
    assert!(matches!(
        block_on(store.fork("nope", 1, "copy3")),
        Err(Error::UnknownRun { .. })
    ));
    let copy = block_on(store.load_run("copy")).unwrap().unwrap();
    assert_eq!(copy.latest_seq, 1);
    assert_eq!(
        copy.state,
        RunState::Waiting {
            signal: "go".into(),
            deadline: None
        }
    );
    let cps = block_on(store.list_checkpoints("copy")).unwrap();
    assert_eq!(cps.len(), 1);
    assert_eq!(cps[0].seq, 1);
    assert_eq!(&*cps[0].run, "copy");
    assert_eq!(cps[0].data, second.data);
    assert_eq!(cps[0].fields, second.fields);
    let forked = Event::Forked {
        from: "src".into(),
        seq: 2,
        to: "copy".into(),
    };
    assert_eq!(events(&store, "copy"), vec![forked.clone()]);
    assert_eq!(events(&store, "src").last(), Some(&forked));
}

#[test]
fn any_checkpoint_is_found_along_the_chain() {
    let (_dir, store) = open();
    new_run(&store, "r");
    new_run(&store, "other");
    let c = block_on(store.claim(&req("w", "i"))).unwrap().claimed;
    let (r, o) = (&c[0].lease, &c[1].lease);
    for seq in 1..=300u64 {
        let bytes = seq.to_le_bytes();
        let cp = cp_fields("r", seq, &[("n", &bytes)], None);
        let keep = (seq > 200).then_some(90);
        block_on(store.save_checkpoint(r, cp, keep)).unwrap();
        if seq % 3 == 0 {
            let cp = cp_fields("other", seq / 3, &[("n", &bytes)], None);
            block_on(store.save_checkpoint(o, cp, None)).unwrap();
        }
    }
    // Kept: 211..=300.
    for seq in 0..=310u64 {
        let got = block_on(store.checkpoint("r", seq)).unwrap();
        if (211..=300).contains(&seq) {
            let got = got.unwrap_or_else(|| panic!("#{seq}"));
            assert_eq!(
                (got.seq, got.field_bytes(0)),
                (seq, Some(&seq.to_le_bytes()[..]))
            );
        } else {
            assert!(got.is_none(), "#{seq}");
        }
    }
    let kept: Vec<u64> = block_on(store.list_checkpoints("r"))
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(kept, (211..=300).collect::<Vec<_>>());
    assert_eq!(
        block_on(store.list_checkpoints("other")).unwrap().len(),
        100
    );
    let saved: Vec<u64> = events(&store, "r")
        .iter()
        .filter_map(|e| match e {
            Event::CheckpointSaved { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(saved, (1..=300).collect::<Vec<_>>());
    // Hidden rows are cut down in steps of keep / 4: at most 22 of them
    // still hold bytes (no field is shared here).
    let holding = count(
        &store,
        "SELECT count(*) FROM checkpoints WHERE data IS NOT NULL",
    );
    assert!((100 + 90..=100 + 90 + 22).contains(&holding), "{holding}");
    let report = block_on(store.gc()).unwrap();
    assert_eq!(report.checkpoints_compacted, 0);
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM checkpoints WHERE data IS NOT NULL"
        ),
        100 + 90
    );
    assert_eq!(block_on(store.list_checkpoints("r")).unwrap().len(), 90);
}

#[test]
fn resume_reads_do_not_scan() {
    let (_dir, store) = open();
    let conn = peek(&store);
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        rows.join("; ")
    };
    for sql in [
        format!("SELECT {RUN_COLS} FROM runs r WHERE r.id = 'x'"),
        format!("{RUN_SELECT} WHERE r.id = 'x'"),
        "SELECT h.latest, h.pruned, c.seq, c.floor, c.created_at FROM heads h \
         LEFT JOIN checkpoints c ON c.id = h.latest WHERE h.run = 1"
            .to_owned(),
        format!("SELECT {CP_COLS} {CP_FROM} WHERE c.id = 1"),
        format!(
            "SELECT id FROM checkpoints WHERE run = 1 AND seq >= 5 \
             AND seq % {ANCHOR_EVERY} = 0 ORDER BY seq LIMIT 1"
        ),
        format!(
            "{} SELECT id FROM walk WHERE seq = 5",
            WALK.replace("?1", "7").replace("?2", "5")
        ),
        "SELECT size, refs, data FROM checkpoints WHERE id = 1 AND run = 1".to_owned(),
    ] {
        let p = plan(&sql);
        assert!(
            !p.contains("SCAN c") && !p.contains("SCAN checkpoints"),
            "{sql}: {p}"
        );
        assert!(
            !p.contains("SCAN r") && !p.contains("SCAN runs"),
            "{sql}: {p}"
        );
        assert!(!p.contains("TEMP B-TREE"), "{sql}: {p}");
    }
    assert!(plan("SELECT id FROM checkpoints WHERE run = 1 AND seq >= 5 AND seq % 64 = 0 ORDER BY seq LIMIT 1")
        .contains("checkpoint_anchors"));
}

#[test]
fn gc_compacts_shared_rows_and_rewrites_a_mostly_free_file() {
    let (_dir, store) = open();
    new_run(&store, "r");
    let c = claim_one(&store, "w", "i");
    let constant = vec![7u8; 20_000];
    for seq in 1..=300u64 {
        // `big` changes every time; `constant` is stored by #1 only.
        let big = vec![seq as u8; 20_000];
        let cp = cp_fields("r", seq, &[("constant", &constant), ("big", &big)], None);
        block_on(store.save_checkpoint(&c.lease, cp, None)).unwrap();
    }
    let last = cp_fields("r", 301, &[("constant", &constant), ("big", b"x")], None);
    block_on(store.save_checkpoint(&c.lease, last.clone(), Some(1))).unwrap();
    // #1 keeps all its bytes (its `big` too) while #301 uses `constant`.
    assert_eq!(
        count(&store, "SELECT sum(length(data)) FROM checkpoints"),
        40_000 + 1
    );
    let report = block_on(store.gc()).unwrap();
    assert_eq!(report.checkpoints_compacted, 1);
    assert_eq!(report.bytes_compacted, 20_000);
    assert!(report.pages_released > 500, "{report:?}");
    assert!(report.wal_truncated, "{report:?}");
    assert!(report.bytes_after * 10 < report.bytes_before, "{report:?}");
    assert_eq!(
        count(&store, "SELECT sum(length(data)) FROM checkpoints"),
        20_000 + 1
    );
    assert_eq!(
        *block_on(store.latest_checkpoint("r")).unwrap().unwrap(),
        *last
    );
    assert_eq!(events(&store, "r").len(), 302);
    // The next checkpoint still shares `constant`, and later pruning
    // frees the packed row once nothing uses it.
    let next = cp_fields("r", 302, &[("big", b"y")], None);
    block_on(store.save_checkpoint(&c.lease, next.clone(), Some(1))).unwrap();
    assert_eq!(
        *block_on(store.latest_checkpoint("r")).unwrap().unwrap(),
        *next
    );
    assert_eq!(
        count(&store, "SELECT sum(length(data)) FROM checkpoints"),
        1
    );
    // Nothing to do the second time.
    let again = block_on(store.gc()).unwrap();
    assert_eq!((again.checkpoints_compacted, again.pages_released), (0, 0));
}

#[test]
fn the_writer_notices_another_process() {
    let (_dir, one) = open();
    let two = SqliteStore::open(one.path()).unwrap();
    new_run(&one, "r");
    let c = claim_one(&one, "w", "i");
    block_on(one.save_checkpoint(&c.lease, cp("r", 1), None)).unwrap();
    // `one` knows the run; `two` cancels it behind its back.
    assert!(block_on(two.cancel("r")).unwrap());
    let err = block_on(one.save_checkpoint(&c.lease, cp("r", 2), None)).unwrap_err();
    assert!(matches!(err, Error::Cancelled { .. }), "{err}");
    // Rows written by both share one counter for the history order.
    new_run(&two, "s");
    let c = claim_one(&two, "w", "i");
    block_on(two.save_checkpoint(&c.lease, cp("s", 1), None)).unwrap();
    block_on(one.put_signal("s", "go", b"1".to_vec())).unwrap();
    block_on(two.save_checkpoint(&c.lease, cp("s", 2), None)).unwrap();
    let ev = events(&one, "s");
    assert_eq!(ev.len(), 4, "{ev:?}");
    assert!(matches!(ev[2], Event::SignalReceived { .. }), "{ev:?}");
}

#[test]
fn schema_keys_and_documents_are_kept() {
    fn script(store: &dyn Store) -> Vec<String> {
        new_run(store, "r");
        let c = claim_one(store, "w", "i");
        let keys: Vec<Option<Cow<'static, str>>> = vec![Some("k1".into()), None];
        let cp = (*cp_fields("r", 1, &[("a", b"1"), ("b", b"2")], None))
            .clone()
            .with_schemas(keys.clone());
        block_on(store.save_checkpoint(&c.lease, Arc::new(cp), None)).unwrap();
        // Same shape, other keys: a shape of its own.
        let cp = (*cp_fields("r", 2, &[("a", b"1"), ("b", b"3")], None))
            .clone()
            .with_schemas(vec![Some(Cow::Borrowed("k2"))]);
        block_on(store.save_checkpoint(&c.lease, Arc::new(cp), None)).unwrap();
        let docs = vec![("k1".to_owned(), "{}".to_owned())];
        block_on(store.put_schemas(docs)).unwrap();
        let again = vec![
            ("k1".to_owned(), "changed".to_owned()),
            ("k2".to_owned(), "[]".to_owned()),
        ];
        block_on(store.put_schemas(again)).unwrap();
        let mut out: Vec<String> = block_on(store.list_checkpoints("r"))
            .unwrap()
            .iter()
            .map(|c| format!("{:?}", c.schemas))
            .collect();
        let asked = ["k1".to_owned(), "k2".to_owned(), "k3".to_owned()];
        let mut found: Vec<(String, String)> = block_on(store.schemas(&asked))
            .unwrap()
            .into_iter()
            .collect();
        found.sort();
        out.push(format!("{found:?}"));
        out
    }
    let (_dir, sqlite) = open();
    let got = script(&sqlite);
    assert_eq!(got, script(&MemoryStore::new()));
    assert_eq!(got[0], r#"[Some("k1"), None]"#);
    assert_eq!(count(&sqlite, "SELECT count(*) FROM shapes"), 2);
}

// -- Durability, sharing, group commit, dedup ----------------------------

#[test]
fn reopening_finds_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let saved;
    {
        let store = SqliteStore::open(&path).unwrap();
        new_run(&store, "r");
        let c = claim_one(&store, "w", "i");
        saved = cp_fields("r", 1, &[("goal", b"g"), ("n", &[1, 2, 3])], None);
        block_on(store.save_checkpoint(&c.lease, saved.clone(), None)).unwrap();
        block_on(store.put_signal("r", "later", b"\"x\"".to_vec())).unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let rec = block_on(store.load_run("r")).unwrap().unwrap();
    assert_eq!((rec.latest_seq, rec.epoch, rec.attempt), (1, 1, 1));
    assert_eq!(rec.lease.as_ref().map(|l| l.worker.as_str()), Some("w"));
    assert_eq!(
        *block_on(store.latest_checkpoint("r")).unwrap().unwrap(),
        *saved
    );
    assert_eq!(block_on(store.pending_signals("r")).unwrap().len(), 1);
    assert_eq!(events(&store, "r").len(), 3);
    // A restart with the same worker id takes its run back at once.
    let c = claim_one(&store, "w", "i-restarted");
    assert_eq!(*c.checkpoint.unwrap(), *saved);
}

#[test]
fn two_stores_on_one_file_share_leases() {
    let (_dir, one) = open();
    let two = SqliteStore::open(one.path()).unwrap();
    new_run(&one, "r");
    let mut short = req("a", "a1");
    short.ttl = Duration::from_millis(400);
    let a = block_on(one.claim(&short)).unwrap().claimed;
    assert_eq!(a.len(), 1);
    // The other "process" sees the run but cannot take it yet.
    assert!(block_on(two.load_run("r")).unwrap().is_some());
    assert!(block_on(two.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    assert!(block_on(one.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    std::thread::sleep(Duration::from_millis(500));
    let b = block_on(two.claim(&req("b", "b1"))).unwrap().claimed;
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].run.epoch, 2);
    // Now `a` (paused past its lease) is fenced out, in either store.
    let err = block_on(one.save_checkpoint(&a[0].lease, cp("r", 1), None)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    let err = block_on(one.renew("r", &a[0].lease, Duration::from_secs(9))).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    block_on(two.save_checkpoint(&b[0].lease, cp("r", 1), None)).unwrap();
    assert_eq!(block_on(one.load_run("r")).unwrap().unwrap().latest_seq, 1);
}

#[test]
fn stale_epoch_write_is_rejected() {
    let (_dir, one) = open();
    let two = SqliteStore::open(one.path()).unwrap();
    new_run(&one, "r");
    let a = claim_one(&one, "a", "a1");
    block_on(one.save_checkpoint(&a.lease, cp("r", 1), None)).unwrap();
    // Forge a stale lease: right worker, old epoch.
    let mut stale = a.lease.clone();
    stale.epoch -= 1;
    let err = block_on(two.save_checkpoint(&stale, cp("r", 2), None)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    let err = block_on(two.finish(
        "r",
        &stale,
        Outcome::Completed {
            output: Arc::from(&b"1"[..]),
            error: None,
        },
    ))
    .unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    let rec = block_on(two.load_run("r")).unwrap().unwrap();
    assert_eq!((rec.latest_seq, rec.state), (1, RunState::Ready));
    block_on(two.save_checkpoint(&a.lease, cp("r", 2), None)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_saves_share_commits() {
    let (_dir, store) = open();
    let store = Arc::new(store);
    let mut leases = Vec::new();
    for i in 0..64 {
        new_run(&*store, &format!("r{i}"));
    }
    let mut r = req("w", "i");
    r.limit = 64;
    for c in store.claim(&r).await.unwrap().claimed {
        leases.push((c.run.id.clone(), c.lease));
    }
    assert_eq!(leases.len(), 64);
    let tasks: Vec<_> = leases
        .into_iter()
        .map(|(id, lease)| {
            let store = store.clone();
            tokio::spawn(async move {
                for seq in 1..=5u64 {
                    let payload = format!("{id}:{seq}");
                    let cp = cp_fields(&id, seq, &[("v", payload.as_bytes())], None);
                    store.save_checkpoint(&lease, cp, None).await?;
                }
                Ok::<_, Error>(id)
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    for i in 0..64 {
        let id = format!("r{i}");
        let cps = store.list_checkpoints(&id).await.unwrap();
        assert_eq!(cps.len(), 5, "{id}");
        for (k, cp) in cps.iter().enumerate() {
            assert_eq!(
                cp.field_bytes(0).unwrap(),
                format!("{id}:{}", k + 1).as_bytes()
            );
        }
    }
    assert_eq!(count(&store, "SELECT count(*) FROM checkpoints"), 320);
}

#[test]
fn group_commit_batches_requests() {
    // Queue many writes before the writer can drain them: they commit
    // together, and each still gets its own answer.
    let (_dir, store) = open();
    let futures: Vec<_> = (0..200)
        .map(|i| {
            store.create_run(NewRun {
                id: format!("r{i}"),
                workflow: "wf".into(),
                input: Arc::from(&b"null"[..]),
                version: 1,
                trace: None,
                parent: None,
                max_running: None,
                options: Default::default(),
            })
        })
        .collect();
    let dup = store.create_run(NewRun {
        id: "r0".into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    });
    for f in futures {
        assert!(matches!(block_on(f).unwrap(), Created::New));
    }
    assert!(matches!(block_on(dup).unwrap(), Created::Existing(_)));
    assert_eq!(count(&store, "SELECT count(*) FROM runs"), 200);
}

#[test]
fn a_failing_request_does_not_abort_its_batch() {
    let (_dir, store) = open();
    new_run(&store, "r");
    let c = claim_one(&store, "w", "i");
    // Queued together: a good save, a bad one (out of order), a good one.
    let one = store.save_checkpoint(&c.lease, cp("r", 1), None);
    let bad = store.save_checkpoint(&c.lease, cp("r", 7), None);
    let two = store.save_checkpoint(&c.lease, cp("r", 2), None);
    block_on(one).unwrap();
    assert!(block_on(bad).is_err());
    block_on(two).unwrap();
    let seqs: Vec<u64> = block_on(store.list_checkpoints("r"))
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(
        events(&store, "r")
            .iter()
            .filter(|e| matches!(e, Event::CheckpointSaved { .. }))
            .count(),
        2
    );
}

#[test]
fn unchanged_fields_are_stored_once() {
    let (_dir, store) = open();
    new_run(&store, "r");
    let c = claim_one(&store, "w", "i");
    let big = vec![0xAB; 1024];
    for seq in 1..=100u64 {
        let counter = seq.to_le_bytes();
        let cp = cp_fields("r", seq, &[("big", &big), ("counter", &counter)], None);
        block_on(store.save_checkpoint(&c.lease, cp, None)).unwrap();
    }
    // The 1 KB field is stored once; the counter once per checkpoint.
    let stored = count(&store, "SELECT sum(length(data)) FROM checkpoints");
    assert_eq!(stored, 1024 + 100 * 8);
    assert_eq!(count(&store, "SELECT count(*) FROM shapes"), 1);
    for cp in block_on(store.list_checkpoints("r")).unwrap() {
        assert_eq!(cp.field_bytes(0).unwrap(), &big[..]);
        assert_eq!(cp.field_bytes(1).unwrap(), &cp.seq.to_le_bytes());
    }
    // A store that did not write them (no cache) dedups the same way.
    let other = SqliteStore::open(store.path()).unwrap();
    let cp = cp_fields("r", 101, &[("big", &big), ("counter", &[1])], None);
    block_on(other.save_checkpoint(&c.lease, cp, None)).unwrap();
    assert_eq!(
        count(&store, "SELECT sum(length(data)) FROM checkpoints"),
        stored + 1
    );
}

#[test]
fn retention_never_drops_bytes_a_kept_checkpoint_uses() {
    let (_dir, store) = open();
    new_run(&store, "r");
    let c = claim_one(&store, "w", "i");
    let constant = vec![7u8; 500];
    for seq in 1..=50u64 {
        // `slow` changes every 10 checkpoints, `fast` every time.
        let slow = [(seq / 10) as u8; 100];
        let fast = seq.to_le_bytes();
        let cp = cp_fields(
            "r",
            seq,
            &[("constant", &constant), ("slow", &slow), ("fast", &fast)],
            None,
        );
        block_on(store.save_checkpoint(&c.lease, cp, Some(3))).unwrap();
        let kept = block_on(store.list_checkpoints("r")).unwrap();
        assert_eq!(kept.len(), seq.min(3) as usize);
        for k in &kept {
            assert_eq!(k.field_bytes(0).unwrap(), &constant[..]);
            assert_eq!(k.field_bytes(1).unwrap(), &[(k.seq / 10) as u8; 100]);
            assert_eq!(k.field_bytes(2).unwrap(), &k.seq.to_le_bytes());
        }
    }
    // Kept: #48, #49, #50. A pruned checkpoint keeps its bytes while a
    // kept one uses any of them: #1 (constant, slow 0, fast 1) for the
    // constant, #40 (slow 4, fast 40) for slow 4; then #48 and #49
    // (fast), #50 (slow 5, fast 50). The other 45 are stubs.
    let holding = "SELECT count(*) FROM checkpoints WHERE data IS NOT NULL";
    assert_eq!(count(&store, holding), 5);
    assert_eq!(
        count(&store, "SELECT sum(length(data)) FROM checkpoints"),
        608 + 108 + 8 + 8 + 108
    );
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM checkpoints WHERE refs IS NULL"
        ),
        45
    );
    // Pruning with the latest checkpoint only.
    let cp = cp_fields("r", 51, &[("constant", &constant)], None);
    block_on(store.save_checkpoint(&c.lease, cp, Some(1))).unwrap();
    assert_eq!(count(&store, holding), 1);
    assert_eq!(
        count(&store, "SELECT sum(length(data)) FROM checkpoints"),
        608
    );
    let kept: Vec<u64> = block_on(store.list_checkpoints("r"))
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(kept, [51]);
    // Every checkpoint is still in the history.
    let saved = events(&store, "r")
        .iter()
        .filter(|e| matches!(e, Event::CheckpointSaved { .. }))
        .count();
    assert_eq!(saved, 51);
}

#[test]
fn schema_version_is_set_and_newer_is_refused() {
    let (_dir, store) = open();
    assert_eq!(SCHEMA_VERSION, 11);
    assert_eq!(count(&store, "PRAGMA user_version"), SCHEMA_VERSION);
    let mode: String = peek(&store)
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    assert_eq!(count(&store, "PRAGMA page_size"), PAGE_SIZE);
    let path = store.path().to_path_buf();
    drop(store);
    // Reopening an up-to-date file runs no migration.
    drop(SqliteStore::open(&path).unwrap());
    peek_path(&path)
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(err.to_string().contains("newer"), "{err}");
}

fn peek_path(path: &Path) -> Connection {
    Connection::open(path).unwrap()
}

#[test]
fn not_a_database_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.db");
    std::fs::write(&path, vec![0x42; 8192]).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err}");
    let err = SqliteStore::open(dir.path().join("no/such/dir/x.db")).unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err}");
}

#[test]
fn a_full_disk_surfaces_and_keeps_the_previous_checkpoint() {
    let (_dir, store) = open();
    new_run(&store, "r");
    let c = claim_one(&store, "w", "i");
    let first = cp_fields("r", 1, &[("v", b"first")], None);
    block_on(store.save_checkpoint(&c.lease, first.clone(), None)).unwrap();
    // Cap the file at its current size (SQLITE_FULL on growth).
    let pages = count(&store, "PRAGMA page_count");
    block_on(store.write(move |cx| {
        cx.conn.query_row(
            &format!("PRAGMA max_page_count = {}", pages + 2),
            [],
            |_| Ok(()),
        )?;
        Ok(())
    }))
    .unwrap();
    let huge = vec![1u8; 1 << 20];
    let second = cp_fields("r", 2, &[("v", &huge)], None);
    let err = block_on(store.save_checkpoint(&c.lease, second.clone(), None)).unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err}");
    assert!(err.to_string().contains("full"), "{err}");
    let rec = block_on(store.load_run("r")).unwrap().unwrap();
    assert_eq!(rec.latest_seq, 1);
    assert_eq!(
        *block_on(store.latest_checkpoint("r")).unwrap().unwrap(),
        *first
    );
    // Space comes back: the same checkpoint now saves.
    block_on(store.write(|cx| {
        cx.conn
            .query_row("PRAGMA max_page_count = 1073741823", [], |_| Ok(()))?;
        Ok(())
    }))
    .unwrap();
    block_on(store.save_checkpoint(&c.lease, second.clone(), None)).unwrap();
    assert_eq!(
        *block_on(store.latest_checkpoint("r")).unwrap().unwrap(),
        *second
    );
}

#[tokio::test]
async fn subscribers_hear_local_and_remote_changes() {
    let (_dir, one) = open();
    let two = SqliteStore::open(one.path()).unwrap();
    let mut local = one.subscribe();
    let mut remote = two.subscribe();
    local.borrow_and_update();
    remote.borrow_and_update();
    one.create_run(NewRun {
        id: "r".into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    })
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_millis(100), local.changed())
        .await
        .expect("a local commit notifies at once")
        .unwrap();
    tokio::time::timeout(Duration::from_secs(2), remote.changed())
        .await
        .expect("the poller notices another connection's commit")
        .unwrap();
}

#[test]
fn busy_database_is_retried() {
    let (_dir, store) = open();
    // Another connection holds the write lock for a while.
    let blocker = peek(&store);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let pending = store.create_run(NewRun {
        id: "r".into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    });
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        blocker.execute_batch("COMMIT").unwrap();
    });
    assert!(matches!(block_on(pending).unwrap(), Created::New));
    release.join().unwrap();
}

#[test]
fn refs_are_written_as_stored_refs() {
    let locs: Vec<Loc> = vec![(9, 0, 3), (0, 0, 0), (4, 300, 70_000), (9, 3, 5)];
    for raw in [false, true] {
        let written = to_postcard(&RefsOf {
            raw,
            locs: &locs,
            own: 9,
            deltas: &[],
        })
        .unwrap();
        let expected = postcard::to_allocvec(&StoredRefs {
            raw,
            fields: vec![(0, 0, 3), (0, 0, 0), (4, 300, 70_000), (0, 3, 5)],
        })
        .unwrap();
        assert_eq!(written, expected);
    }
}

/// Requests queued while another connection holds the write lock share
/// one batch: plain checkpoints (rows deferred to the end of the batch)
/// mixed with requests that read them back, requests that fail, and two
/// checkpoints of one run. Read back from a fresh store, everything is
/// as if each request had been written on its own.
#[test]
fn one_batch_mixes_deferred_rows_with_other_requests() {
    let (_dir, store) = open();
    new_run(&store, "a");
    new_run(&store, "b");
    let claimed = block_on(store.claim(&req("w", "w1"))).unwrap().claimed;
    assert_eq!(claimed.len(), 2);
    let lease = claimed[0].lease.clone();
    let stale = Lease {
        instance: Arc::from("w0"),
        ..lease.clone()
    };
    let field = |run: &str, seq: u64, b: u8| cp_fields(run, seq, &[("x", &[b; 40])], None);
    block_on(store.save_checkpoint(&lease, field("a", 1, 1), None)).unwrap();
    block_on(store.save_checkpoint(&lease, field("b", 1, 1), None)).unwrap();

    let blocker = peek(&store);
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    // The writer takes this one alone and waits for the lock; the rest
    // queue behind it and form the next batch.
    let first = store.append_event("a", Event::Cancelled);
    std::thread::sleep(Duration::from_millis(50));
    let a2 = store.save_checkpoint(&lease, field("a", 2, 2), None);
    let a3 = store.save_checkpoint(&lease, field("a", 3, 3), None);
    // Reads checkpoint 2 from the table: the rows above are written first.
    let fork = store.fork("a", 2, "a-fork");
    let lost = store.save_checkpoint(&stale, field("b", 2, 9), None);
    let b2 = store.save_checkpoint(&lease, field("b", 2, 2), None);
    let bad_fork = store.fork("nope", 1, "x");
    let out_of_order = store.save_checkpoint(&lease, field("b", 9, 9), None);
    std::thread::sleep(Duration::from_millis(50));
    blocker.execute_batch("COMMIT").unwrap();

    block_on(first).unwrap();
    block_on(a2).unwrap();
    block_on(fork).unwrap();
    assert!(matches!(block_on(lost), Err(Error::LeaseLost { .. })));
    block_on(b2).unwrap();
    assert!(block_on(bad_fork).is_err());
    block_on(a3).unwrap();
    assert!(block_on(out_of_order).is_err());
    let path = store.path().to_owned();
    drop(store);

    let store = SqliteStore::open(&path).unwrap();
    let seqs = |id: &str| -> Vec<(u64, Vec<u8>)> {
        block_on(store.list_checkpoints(id))
            .unwrap()
            .iter()
            .map(|c| (c.seq, c.data.clone()))
            .collect()
    };
    assert_eq!(
        seqs("a"),
        vec![(1, vec![1; 40]), (2, vec![2; 40]), (3, vec![3; 40])]
    );
    assert_eq!(seqs("b"), vec![(1, vec![1; 40]), (2, vec![2; 40])]);
    assert_eq!(seqs("a-fork"), vec![(1, vec![2; 40])]);
    let latest = block_on(store.latest_checkpoint("a")).unwrap().unwrap();
    assert_eq!((latest.seq, latest.data.clone()), (3, vec![3; 40]));
    assert_eq!(
        block_on(store.load_run("b")).unwrap().unwrap().latest_seq,
        2
    );
    assert_eq!(count(&store, "SELECT count(*) FROM checkpoints"), 6);
    assert!(events(&store, "a-fork")
        .iter()
        .any(|e| matches!(e, Event::Forked { .. })));
}

/// Rows written by one statement after rows of an earlier chunk: a
/// column that is NULL in a row (no previous checkpoint, no bytes of its
/// own) stays NULL whatever the same place held in the chunk before.
#[test]
fn deferred_rows_do_not_inherit_the_previous_chunks_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chunks.db");
    let (leases, mut writer, answered) = claimed_writer(&path, 192);
    let state = |b: u8| vec![b; 100];
    let mut replies = Vec::new();
    let mut job = |f: SaveOp| {
        let (job, replied) = request(true, f);
        replies.push(replied);
        job
    };
    // First every run's head in the writer's cache (a run it has to read
    // from the table makes it write what it deferred first): checkpoint
    // 1 of the first 128 runs, a lease renewal of the others.
    let mut first: Vec<Box<dyn Job>> = Vec::new();
    for (i, (id, lease)) in leases.iter().enumerate() {
        let (id, lease) = (id.clone(), lease.clone());
        first.push(job(if i < 128 {
            let cp = cp_fields(&id, 1, &[("x", &state(1))], None);
            Box::new(move |cx| save_sealed(cx, &lease, cp))
        } else {
            Box::new(move |cx| op_renew(cx, &id, &lease, Duration::from_secs(60)).map(drop))
        }));
    }
    writer.run_batch(first);
    // Then one batch, three chunks of 64 rows: changed bytes (a row with
    // data and a previous row), unchanged bytes (no data of its own),
    // first checkpoints (no previous row).
    let expected = |i: usize| match i {
        0..64 => (2, 2),
        64..128 => (2, 1),
        _ => (1, 3),
    };
    let mut second: Vec<Box<dyn Job>> = Vec::new();
    for (i, (id, lease)) in leases.iter().enumerate() {
        let (seq, b) = expected(i);
        let cp = cp_fields(id, seq, &[("x", &state(b))], None);
        let lease = lease.clone();
        second.push(job(Box::new(move |cx| save_sealed(cx, &lease, cp))));
    }
    writer.run_batch(second);
    drop(writer);
    answer_loop(answered);
    for replied in replies {
        block_on(replied).unwrap().unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let rows = |filter: &str| {
        count(
            &store,
            &format!("SELECT count(*) FROM checkpoints WHERE {filter}"),
        )
    };
    assert_eq!(rows("seq = 2 AND data IS NOT NULL"), 64);
    assert_eq!(rows("seq = 2 AND prev IS NULL"), 0);
    assert_eq!(rows("seq = 1 AND prev IS NOT NULL"), 0);
    for (i, (id, _)) in leases.iter().enumerate() {
        let latest = block_on(store.latest_checkpoint(id)).unwrap().unwrap();
        assert_eq!(latest.data, state(expected(i).1), "run {id}");
    }
}

/// The bytes deferred rows own share one buffer: a request that failed
/// after queuing its row takes its bytes back out, and neither the rows
/// queued before it nor those after it lose theirs.
#[test]
fn a_failed_request_takes_back_only_its_own_deferred_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arena.db");
    let (leases, mut writer, answered) = claimed_writer(&path, 3);
    // Checkpoint 1 of each run: a field that will not change, one that will.
    let first_cp = |id: &str| cp_fields(id, 1, &[("kept", &[7; 40]), ("moved", &[1; 40])], None);
    let mut replies = Vec::new();
    let mut job = |f: SaveOp| {
        let (job, replied) = request(true, f);
        replies.push(replied);
        job
    };
    let mut first: Vec<Box<dyn Job>> = Vec::new();
    for (id, lease) in &leases {
        let (cp, lease) = (first_cp(id), lease.clone());
        first.push(job(Box::new(move |cx| save_sealed(cx, &lease, cp))));
    }
    writer.run_batch(first);
    // Checkpoint 2, one batch: each row owns only the changed field's
    // bytes; the middle request fails once its row is queued.
    let second_cp =
        |id: &str, b: u8| cp_fields(id, 2, &[("kept", &[7; 40]), ("moved", &[b; 40])], None);
    let mut second: Vec<Box<dyn Job>> = Vec::new();
    for (i, (id, lease)) in leases.iter().enumerate() {
        let (cp, lease) = (second_cp(id, 10 + i as u8), lease.clone());
        second.push(job(Box::new(move |cx| {
            save_sealed(cx, &lease, cp)?;
            if i == 1 {
                return Err(Error::internal("refused after queuing").into());
            }
            Ok(())
        })));
    }
    writer.run_batch(second);
    drop(writer);
    answer_loop(answered);
    let outcomes: Vec<bool> = replies
        .into_iter()
        .map(|r| block_on(r).unwrap().is_ok())
        .collect();
    assert_eq!(outcomes, [true, true, true, true, false, true]);
    let store = SqliteStore::open(&path).unwrap();
    for (i, (id, _)) in leases.iter().enumerate() {
        let latest = block_on(store.latest_checkpoint(id)).unwrap().unwrap();
        let expected = if i == 1 {
            first_cp(id)
        } else {
            second_cp(id, 10 + i as u8)
        };
        assert_eq!(latest.seq, expected.seq, "run {id}");
        assert_eq!(latest.data, expected.data, "run {id}");
    }
    // The rows of checkpoint 2 hold the changed field only.
    assert_eq!(
        count(
            &store,
            "SELECT count(*) FROM checkpoints WHERE seq = 2 AND length(data) = 40"
        ),
        2
    );
}

/// Requests that piled up while the writer slept are committed in two
/// halves from `SPLIT_AT` requests on, and together below that; every
/// request is answered either way.
#[test]
fn a_pile_of_requests_is_committed_in_two_halves() {
    for (n, commits, last) in [
        (SPLIT_AT, 2, SPLIT_AT - SPLIT_AT / 2),
        (SPLIT_AT - 1, 1, SPLIT_AT - 1),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pile.db");
        let (writer, answered) = bare_writer(&path);
        let batch_size = writer.batch_size.clone();
        // Queued before the writer looks: it finds them all when it wakes.
        let (tx, rx) = mpsc::channel();
        let mut replies = Vec::new();
        for i in 0..n {
            let run = NewRun {
                id: format!("run-{i}"),
                workflow: "wf".into(),
                input: Arc::from(&b"null"[..]),
                version: 1,
                trace: None,
                parent: None,
                max_running: None,
                options: Default::default(),
            };
            let (job, replied) = request(false, move |cx| op_create(cx, run));
            tx.send(Msg::Job(job)).unwrap();
            replies.push(replied);
        }
        drop(tx);
        // Another connection keeps the WAL from being folded away when
        // the writer's connection closes.
        let other = connect(&path).unwrap();
        other
            .query_row("SELECT count(*) FROM runs", [], |_| Ok(()))
            .unwrap();
        let from = wal_frames(&path);
        writer.run(rx);
        answer_loop(answered);
        for replied in replies {
            assert!(matches!(block_on(replied).unwrap(), Ok(Created::New)));
        }
        assert_eq!(wal_commits(&path, from).len(), commits, "{n} requests");
        assert_eq!(batch_size.load(Ordering::Relaxed), last, "{n} requests");
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(count(&store, "SELECT count(*) FROM runs"), n as i64);
    }
}

/// The same script on a `MemoryStore` and a `SqliteStore` gives the same
/// results (times aside).
#[test]
fn behaves_like_the_memory_store() {
    fn script(store: &dyn Store) -> Vec<String> {
        let mut out = Vec::new();
        let mut log = |what: &str, v: String| out.push(format!("{what}: {v}"));
        let norm = |r: &RunRecord| {
            let mut r = r.clone();
            r.created_at = UNIX_EPOCH;
            r.updated_at = UNIX_EPOCH;
            if let Some(l) = r.lease.as_mut() {
                l.expires_at = UNIX_EPOCH;
            }
            format!("{r:?}")
        };
        for id in ["a", "b", "c"] {
            new_run(store, id);
        }
        let claimed = block_on(store.claim(&req("w", "i"))).unwrap();
        log("claim", format!("{:?}", claimed.unregistered));
        let lease = |id: &str| {
            claimed
                .claimed
                .iter()
                .find(|c| c.run.id == id)
                .unwrap()
                .lease
                .clone()
        };
        let wait = Some(Suspend::Waiting {
            signal: "go".into(),
            deadline: None,
            payload_schema: None,
            sites_before: None,
        });
        let cp_a = cp_fields("a", 1, &[("x", b"1")], wait);
        log(
            "save a",
            format!(
                "{:?}",
                block_on(store.save_checkpoint(&lease("a"), cp_a, None))
            ),
        );
        log(
            "release a",
            format!(
                "{:?}",
                block_on(store.release("a", &lease("a"), Release::Suspend))
            ),
        );
        log(
            "put",
            format!("{:?}", block_on(store.put_signal("a", "go", b"1".to_vec()))),
        );
        log(
            "save stale",
            format!(
                "{:?}",
                block_on(store.save_checkpoint(&lease("a"), cp("a", 2), None))
            ),
        );
        let again = block_on(store.claim(&req("w", "i2"))).unwrap();
        for c in &again.claimed {
            log("reclaimed", norm(&c.run));
        }
        let la = again
            .claimed
            .iter()
            .find(|c| c.run.id == "a")
            .unwrap()
            .lease
            .clone();
        log(
            "reject",
            format!(
                "{:?}",
                block_on(store.reject_signal("a", &la, "bad".into()))
            ),
        );
        log(
            "take",
            format!(
                "{:?}",
                block_on(store.take_signal("a", &la, "go")).map(|s| s.is_some())
            ),
        );
        log(
            "timeout",
            format!("{:?}", block_on(store.time_out("a", &la))),
        );
        log(
            "finish b",
            format!(
                "{:?}",
                block_on(store.finish(
                    "b",
                    &lease("b"),
                    Outcome::Completed {
                        output: Arc::from(&b"2"[..]),
                        error: Some("e".into())
                    }
                ))
            ),
        );
        log("cancel c", format!("{:?}", block_on(store.cancel("c"))));
        log("cancel c", format!("{:?}", block_on(store.cancel("c"))));
        log(
            "release c",
            format!(
                "{:?}",
                block_on(store.release("c", &lease("c"), Release::Abandon))
            ),
        );
        log("fork", format!("{:?}", block_on(store.fork("a", 1, "d"))));
        log(
            "fork again",
            format!("{:?}", block_on(store.fork("a", 1, "d"))),
        );
        log(
            "fork missing",
            format!("{:?}", block_on(store.fork("a", 3, "e"))),
        );
        for r in block_on(store.list_runs(&RunFilter::new())).unwrap() {
            log("run", norm(&r));
        }
        for id in ["a", "b", "c", "d"] {
            let h: Vec<Event> = events(store, id);
            log("history", format!("{h:?}"));
            let cps: Vec<(u64, Vec<u8>)> = block_on(store.list_checkpoints(id))
                .unwrap()
                .iter()
                .map(|c| (c.seq, c.data.clone()))
                .collect();
            log("checkpoints", format!("{cps:?}"));
            log(
                "signals",
                format!("{:?}", block_on(store.pending_signals(id)).map(|s| s.len())),
            );
        }
        log("unknown", format!("{:?}", block_on(store.load_run("zz"))));
        out
    }
    let memory = script(&MemoryStore::new());
    let (_dir, sqlite) = open();
    let sqlite = script(&sqlite);
    assert_eq!(memory, sqlite);
}

// -- Measurements (not run by default) ---------------------------------
//
// cargo test --release -p checkpoint-runtime --lib sqlite::tests::bench -- --ignored --nocapture --test-threads 1

/// The page size of the WAL at `path` (4096 if there is none yet).
fn wal_page(path: &Path) -> u64 {
    let wal = std::fs::read(format!("{}-wal", path.display())).unwrap_or_default();
    match wal.get(8..12) {
        Some(b) => u64::from(u32::from_be_bytes(b.try_into().unwrap())).max(512),
        None => 4096,
    }
}

/// WAL frames (pages written) so far, from the WAL file's size.
fn wal_frames(path: &Path) -> u64 {
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    let len = std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0);
    len.saturating_sub(32) / (wal_page(path) + 24)
}

/// The WAL at `path`: its first salt (new each time the WAL starts over)
/// and its live frames, those after the header that carry the header's
/// salts (what a recovery after a crash reads; the rest is stale).
fn wal_live(path: &Path) -> (u32, u64) {
    let wal = std::fs::read(format!("{}-wal", path.display())).unwrap_or_default();
    if wal.len() < 32 {
        return (0, 0);
    }
    let size = wal_page(path) as usize;
    let salts = &wal[16..24];
    let (mut frames, mut at) = (0, 32);
    while at + 24 + size <= wal.len() && &wal[at + 8..at + 16] == salts {
        frames += 1;
        at += 24 + size;
    }
    (u32::from_be_bytes(wal[16..20].try_into().unwrap()), frames)
}

/// While the store is open, its WAL starts over every
/// `WAL_CHECKPOINT_PAGES` pages or so, whatever the history: a crash leaves
/// that much at most for the next open to recover, and the file stays small.
#[test]
fn the_wal_stays_bounded_while_the_store_is_open() {
    let (_dir, store) = open();
    // The poller's folding is for light loads only: the bound must hold
    // without it.
    store.fold.store(false, Ordering::Relaxed);
    new_run(&store, "r");
    let c = claim_one(&store, "w", "i");
    // Room for a checkpoint skipped while the poller's own one ran (the
    // next commit's does it) and for the commit that crossed the line.
    let bound = 2 * WAL_CHECKPOINT_PAGES as u64;
    let frame = PAGE_SIZE as u64 + 24;
    let wal = PathBuf::from(format!("{}-wal", store.path().display()));
    let (mut most, mut biggest, mut restarts, mut salt) = (0, 0, 0, 0);
    for seq in 1..=1500u64 {
        // A state that changes as a whole: each checkpoint stores 1 KiB.
        let state: Vec<u8> = (0..1024u64).map(|i| (i + seq) as u8).collect();
        let cp = cp_fields("r", seq, &[("state", &state)], None);
        block_on(store.save_checkpoint(&c.lease, cp, None)).unwrap();
        let (now, live) = wal_live(store.path());
        if now != salt {
            (restarts, salt) = (restarts + 1, now);
        }
        most = most.max(live);
        biggest = biggest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
    }
    // 1,500 commits of two pages or more: the WAL must have started over
    // several times to stay under the bound.
    assert!(restarts >= 4, "the WAL started over {restarts} times");
    assert!(
        most <= bound,
        "{most} live frames, bound {bound} ({restarts} starts)"
    );
    assert!(
        biggest <= (bound * frame + 32).max(WAL_SIZE_LIMIT as u64),
        "the WAL file reached {biggest} bytes"
    );
    // Nothing was lost to the folding.
    let cps = block_on(store.list_checkpoints("r")).unwrap();
    assert_eq!(cps.len(), 1500);
    let last: Vec<u8> = (0..1024u64).map(|i| (i + 1500) as u8).collect();
    assert_eq!(cps[1499].field_bytes(0).unwrap(), &last[..]);
}

/// The pages of each commit in the WAL from frame `from` on.
fn wal_commits(path: &Path, from: u64) -> Vec<Vec<u32>> {
    let wal = std::fs::read(format!("{}-wal", path.display())).unwrap_or_default();
    let size = wal_page(path) as usize;
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut at = 32 + from as usize * (size + 24);
    while at + 24 <= wal.len() {
        let page = u32::from_be_bytes(wal[at..at + 4].try_into().unwrap());
        let commit = u32::from_be_bytes(wal[at + 4..at + 8].try_into().unwrap());
        cur.push(page);
        if commit != 0 {
            out.push(std::mem::take(&mut cur));
        }
        at += size + 24;
    }
    out
}

fn no_autocheckpoint(store: &SqliteStore) {
    store.fold.store(false, Ordering::Relaxed);
    block_on(store.write(|cx| {
        cx.conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        Ok(())
    }))
    .unwrap();
    peek(store)
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

/// A raw connection with the store's pragmas and a one-table schema.
fn raw_conn(path: &Path) -> Connection {
    let c = Connection::open(path).unwrap();
    if let Ok(page) = std::env::var("BENCH_RAW_PAGE_SIZE") {
        c.pragma_update(None, "page_size", page).unwrap();
    }
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.pragma_update(None, "synchronous", "FULL").unwrap();
    c.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)
        .unwrap();
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    c.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, run INTEGER, data BLOB)")
        .unwrap();
    c
}

/// A store; `BENCH_PAGE_SIZE` makes the file with another page size.
fn open_bench(path: &Path) -> SqliteStore {
    if let Ok(page) = std::env::var("BENCH_PAGE_SIZE") {
        // Set before the first table.
        let c = Connection::open(path).unwrap();
        c.execute_batch(&format!(
            "PRAGMA page_size = {page}; CREATE TABLE placeholder (x)"
        ))
        .unwrap();
    }
    SqliteStore::open(path).unwrap()
}

fn state_bytes(i: u64) -> Vec<u8> {
    let mut v: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    let at = (i % 1000) as usize;
    v[at] = v[at].wrapping_add(1 + (i / 1000) as u8);
    v
}

fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    times[((times.len() - 1) as f64 * p) as usize]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn claim_all(store: &SqliteStore, n: usize) -> Vec<(String, Lease)> {
    for i in 0..n {
        new_run(store, &format!("r{i}"));
    }
    let mut r = req("w", "i");
    r.limit = n;
    block_on(store.claim(&r))
        .unwrap()
        .claimed
        .into_iter()
        .map(|c| (c.run.id, c.lease))
        .collect()
}

/// Sequential durable saves of a ~1 KB state vs raw INSERT + COMMIT, in
/// alternating blocks of 100 (the disk's speed drifts).
fn bench_sequential(n: u64) {
    let dir = tempfile::tempdir().unwrap();
    let store = open_bench(&dir.path().join("s.db"));
    let runs = claim_all(&store, 1);
    let (id, lease) = &runs[0];
    for seq in 1..=50 {
        let cp = cp_fields(id, seq, &[("state", &state_bytes(seq))], None);
        block_on(store.save_checkpoint(lease, cp, None)).unwrap();
    }
    no_autocheckpoint(&store);
    let sync = std::env::var("BENCH_SYNC").unwrap_or_else(|_| "FULL".into());
    {
        let sync = sync.clone();
        block_on(store.alone(move |w| {
            w.conn.pragma_update(None, "synchronous", &sync)?;
            Ok(())
        }))
        .unwrap();
    }
    let rpath = dir.path().join("raw.db");
    let raw = raw_conn(&rpath);
    raw.pragma_update(None, "synchronous", &sync).unwrap();
    for i in 0..50 {
        raw.execute("INSERT INTO t (run, data) VALUES (1, ?1)", [state_bytes(i)])
            .unwrap();
    }
    let (f0, rf0) = (wal_frames(store.path()), wal_frames(&rpath));
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut seq = 50;
    for block in 0..n / 100 {
        for _ in 0..100 {
            seq += 1;
            let cp = cp_fields(id, seq, &[("state", &state_bytes(seq))], None);
            let t = Instant::now();
            block_on(store.save_checkpoint(lease, cp, None)).unwrap();
            ours.push(t.elapsed());
        }
        for i in 0..100 {
            let data = state_bytes(block * 100 + i);
            let t = Instant::now();
            raw.execute_batch("BEGIN IMMEDIATE").unwrap();
            raw.prepare_cached("INSERT INTO t (run, data) VALUES (1, ?1)")
                .unwrap()
                .execute([data])
                .unwrap();
            raw.execute_batch("COMMIT").unwrap();
            theirs.push(t.elapsed());
        }
    }
    let done = (n / 100 * 100) as f64;
    let frames = (wal_frames(store.path()) - f0) as f64 / done;
    let rframes = (wal_frames(&rpath) - rf0) as f64 / done;
    let kib = frames * wal_page(store.path()) as f64 / 1024.0;
    if std::env::var("BENCH_PAGES").is_ok() {
        for c in wal_commits(store.path(), f0).iter().rev().take(12) {
            println!("  store commit pages: {c:?}");
        }
    }
    let (med_s, med_r) = (percentile(&mut ours, 0.5), percentile(&mut theirs, 0.5));
    println!(
        "sequential ({n} + {n}, synchronous={sync}): store median {:.0} us (p90 {:.0}), \
         {frames:.2} pages/commit ({kib:.1} KiB) | raw median {:.0} us (p90 {:.0}), {rframes:.2} \
         pages/commit | ratio {:.2}",
        micros(med_s),
        micros(percentile(&mut ours, 0.9)),
        micros(med_r),
        micros(percentile(&mut theirs, 0.9)),
        med_s.as_secs_f64() / med_r.as_secs_f64(),
    );
}

/// `runs` concurrent runs, `each` saves each, vs raw batched inserts (one
/// transaction per `runs` rows), alternating three times.
fn bench_concurrent(runs: usize, each: u64) {
    let total = runs as u64 * each;
    let mut ratios = Vec::new();
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(open_bench(&dir.path().join("c.db")));
        let leases = claim_all(&store, runs);
        assert_eq!(leases.len(), runs);
        no_autocheckpoint(&store);
        let sync = std::env::var("BENCH_SYNC").unwrap_or_else(|_| "FULL".into());
        {
            let sync = sync.clone();
            block_on(store.alone(move |w| {
                w.conn.pragma_update(None, "synchronous", &sync)?;
                Ok(())
            }))
            .unwrap();
        }
        let f0 = wal_frames(store.path());
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let start = Instant::now();
        tokio.block_on(async {
            let tasks: Vec<_> = leases
                .into_iter()
                .map(|(id, lease)| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        for seq in 1..=each {
                            let state = state_bytes(seq);
                            let cp = cp_fields(&id, seq, &[("state", &state)], None);
                            store.save_checkpoint(&lease, cp, None).await.unwrap();
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        let per_s = total as f64 / start.elapsed().as_secs_f64();
        let frames = (wal_frames(store.path()) - f0) as f64 / total as f64;
        drop(store);

        let rpath = dir.path().join("raw.db");
        let raw = raw_conn(&rpath);
        raw.pragma_update(None, "synchronous", &sync).unwrap();
        let f0 = wal_frames(&rpath);
        let start = Instant::now();
        for b in 0..each {
            raw.execute_batch("BEGIN IMMEDIATE").unwrap();
            for r in 0..runs {
                raw.prepare_cached("INSERT INTO t (run, data) VALUES (?1, ?2)")
                    .unwrap()
                    .execute(params![r as i64, state_bytes(b)])
                    .unwrap();
            }
            raw.execute_batch("COMMIT").unwrap();
        }
        let raw_s = total as f64 / start.elapsed().as_secs_f64();
        let rframes = (wal_frames(&rpath) - f0) as f64 / total as f64;
        ratios.push(per_s / raw_s);
        println!(
            "concurrent {runs} runs x {each} (round {round}): store {per_s:.0}/s, \
             {frames:.2} pages/checkpoint | raw batched {raw_s:.0} rows/s, {rframes:.2} \
             pages/row | {:.0}%",
            100.0 * per_s / raw_s,
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "concurrent {runs} runs x {each}: median ratio {:.0}%",
        100.0 * ratios[1]
    );
}

/// Resume (fresh open, claim with the latest checkpoint, load it) after
/// `n` prior checkpoints.
fn bench_resume(n: u64) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        // Other runs interleaved, so the run's rows are not alone.
        let leases = claim_all(&store, 4);
        let mut seq = 0;
        while seq < n {
            let batch: Vec<_> = (0..1000.min(n - seq))
                .flat_map(|k| {
                    let s = seq + k + 1;
                    leases
                        .iter()
                        .take(if s % 100 == 0 { 4 } else { 1 })
                        .map(|(id, lease)| {
                            let cs = if id == "r0" { s } else { s / 100 };
                            let cp = cp_fields(id, cs, &[("state", &state_bytes(s))], None);
                            store.save_checkpoint(lease, cp, None)
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            for f in batch {
                block_on(f).unwrap();
            }
            seq += 1000.min(n - seq);
        }
    }
    let mut times = Vec::new();
    for round in 0..21 {
        let t = Instant::now();
        let store = SqliteStore::open(&path).unwrap();
        let mut r = req("w", &format!("j{round:03}"));
        r.only = Some("r0".into());
        let c = block_on(store.claim(&r)).unwrap().claimed.remove(0);
        assert_eq!(c.checkpoint.as_ref().unwrap().seq, n);
        let latest = block_on(store.latest_checkpoint("r0")).unwrap().unwrap();
        assert_eq!(latest.seq, n);
        times.push(t.elapsed());
    }
    let med = percentile(&mut times, 0.5);
    println!("resume after {n} checkpoints: median {:.0} us", micros(med));
    med
}

/// The writer's work for batches of 500 checkpoints of 1,000 runs taking
/// turns in two groups, applied directly (no threads), for a profiler:
/// `valgrind --tool=callgrind --toggle-collect='*run_batch*' <test binary>
/// profile_writer_batches --ignored` counts instructions per checkpoint.
#[test]
#[ignore]
fn profile_writer_batches() {
    let rounds: u64 = std::env::var("PROFILE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    drop(open_bench(&path));
    let (leases, mut writer, answered) = claimed_writer(&path, 1000);
    let answering = std::thread::spawn(move || answer_loop(answered));
    let mut replies = Vec::new();
    for round in 0..rounds {
        let group = (round % 2) as usize * 500;
        let seq = round / 2 + 1;
        let mut batch: Vec<Box<dyn Job>> = Vec::new();
        for (id, lease) in &leases[group..group + 500] {
            let cp = cp_fields(id, seq, &[("state", &state_bytes(seq))], None);
            let lease = lease.clone();
            let (job, replied) = request(true, move |cx| save_sealed(cx, &lease, cp));
            batch.push(job);
            replies.push(replied);
        }
        writer.run_batch(batch);
    }
    drop(writer);
    answering.join().unwrap();
    for replied in replies {
        block_on(replied).unwrap().unwrap();
    }
}

#[test]
#[ignore]
fn bench_1_sequential() {
    bench_sequential(2000);
}

#[test]
#[ignore]
fn bench_2_concurrent() {
    bench_concurrent(1000, 20);
    bench_concurrent(50, 200);
}

/// The schema's floor: the statements of a plain checkpoint (row + head)
/// issued directly, in transactions of 1,000, vs the raw two-column insert.
#[test]
#[ignore]
fn bench_5_statements() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_bench(&dir.path().join("f.db"));
    let path = store.path().to_path_buf();
    drop(store);
    let c = Connection::open(&path).unwrap();
    c.pragma_update(None, "synchronous", "OFF").unwrap();
    for r in 0..1000 {
        c.execute("INSERT INTO heads (run) VALUES (?1)", [r])
            .unwrap();
    }
    let raw = raw_conn(&dir.path().join("raw.db"));
    raw.pragma_update(None, "synchronous", "OFF").unwrap();
    let loops = postcard::to_allocvec(&[7u64, 1]).unwrap();
    let refs = postcard::to_allocvec(&StoredRefs {
        raw: false,
        fields: vec![(0, 0, 1000)],
    })
    .unwrap();
    for round in 0..3 {
        let start = Instant::now();
        let mut id = 1_000_000 * (round + 1);
        for b in 0..50i64 {
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            for r in 0..1000i64 {
                id += 1;
                let what = std::env::var("BENCH_STMT").unwrap_or_default();
                if what == "auto" {
                    c.prepare_cached(
                        "INSERT INTO checkpoints (run, seq, shape, created_at, data) \
                         VALUES (?1, ?2, 1, ?3, ?4)",
                    )
                    .unwrap()
                    .execute(params![
                        r,
                        b + 1,
                        ts(SystemTime::now()),
                        state_bytes(b as u64)
                    ])
                    .unwrap();
                    continue;
                }
                if what == "small" {
                    c.prepare_cached(
                        "INSERT INTO checkpoints (id, run, seq, shape, created_at, data) \
                         VALUES (?1, ?2, ?3, 1, ?4, ?5)",
                    )
                    .unwrap()
                    .execute(params![
                        id,
                        r,
                        b + 1,
                        ts(SystemTime::now()),
                        state_bytes(b as u64)
                    ])
                    .unwrap();
                    continue;
                }
                c.prepare_cached(
                    "INSERT INTO checkpoints (id, run, seq, prev, shape, created_at, floor, quiet, \
                     loops, suspend, size, refs, data) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                )
                .unwrap()
                .execute(params![
                    id,
                    r,
                    b + 1,
                    id - 1000,
                    1,
                    ts(SystemTime::now()),
                    None::<i64>,
                    None::<i64>,
                    &loops,
                    None::<String>,
                    1000,
                    &refs,
                    state_bytes(b as u64)
                ])
                .unwrap();
                if what == "insert" {
                    continue;
                }
                c.prepare_cached("UPDATE heads SET latest = ?2, pruned = ?3 WHERE run = ?1")
                    .unwrap()
                    .execute(params![r, id, 1])
                    .unwrap();
            }
            c.execute_batch("COMMIT").unwrap();
        }
        let ours = 50_000.0 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        for b in 0..50i64 {
            raw.execute_batch("BEGIN IMMEDIATE").unwrap();
            for r in 0..1000i64 {
                raw.prepare_cached("INSERT INTO t (run, data) VALUES (?1, ?2)")
                    .unwrap()
                    .execute(params![r, state_bytes(b as u64)])
                    .unwrap();
            }
            raw.execute_batch("COMMIT").unwrap();
        }
        let theirs = 50_000.0 / start.elapsed().as_secs_f64();
        println!(
            "statements of a checkpoint, synchronous=OFF: {ours:.0}/s vs raw {theirs:.0}/s ({:.0}%)",
            100.0 * ours / theirs
        );
    }
}

#[test]
#[ignore]
fn bench_4_long() {
    bench_concurrent(1000, 100);
}

#[test]
#[ignore]
fn bench_3_resume() {
    let small = bench_resume(10);
    let big = bench_resume(100_000);
    println!(
        "resume ratio 100k/10: {:.2}",
        big.as_secs_f64() / small.as_secs_f64()
    );
}

#[test]
fn sqlite_errors_keep_the_sqlite_error_as_source() {
    use std::error::Error as _;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-database.db");
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err}");
    let source = err.source().expect("a source");
    let sql = source
        .downcast_ref::<rusqlite::Error>()
        .expect("a rusqlite error");
    assert_eq!(
        sql.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase)
    );
}

#[test]
fn a_worker_id_is_held_by_one_live_instance() {
    let (_dir, store) = open();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let block_on = |f| rt.block_on(f);
    let first = block_on(store.hold_worker("w")).unwrap();
    assert!(first.is_some(), "a free worker id is granted");
    assert!(
        block_on(store.hold_worker("w")).unwrap().is_none(),
        "held twice"
    );
    assert!(
        block_on(store.hold_worker("v")).unwrap().is_some(),
        "ids are apart"
    );
    drop(first);
    assert!(
        block_on(store.hold_worker("w")).unwrap().is_some(),
        "released"
    );
}

/// Prints how many pages a commit writes to the WAL with a history that
/// does not grow and with one that grows by 500 B per checkpoint (its
/// segments' b-tree is a third page, and a split every few commits
/// rewrites its neighbours: 3.8 pages per commit against 2.0).
#[test]
#[ignore]
fn pages_per_commit_of_a_growing_history() {
    for grow in [false, true] {
        let (_dir, store) = open();
        no_autocheckpoint(&store);
        new_run(&store, "r");
        let c = claim_one(&store, "w", "i");
        let mut history: Vec<Vec<u8>> = (0..8).map(|i| vec![i as u8; 500]).collect();
        for seq in 1..=300u64 {
            if grow {
                history.push(vec![seq as u8; 500]);
            }
            let h = postcard::to_allocvec(&history).unwrap();
            let cp = cp_fields(
                "r",
                seq,
                &[("history", &h), ("turn", &seq.to_le_bytes())],
                None,
            );
            block_on(store.save_checkpoint(&c.lease, cp, None)).unwrap();
        }
        let commits = wal_commits(store.path(), 0);
        let last: Vec<_> = commits.iter().rev().take(12).collect();
        let total: usize = commits.iter().skip(20).map(|c| c.len()).sum();
        eprintln!(
            "grow {grow}: {} commits, {:.2} pages per commit after the 20th; last: {last:?}",
            commits.len(),
            total as f64 / (commits.len() - 20) as f64
        );
    }
}

/// A claim reads the runs that can be due, not every unfinished one: with
/// 30,000 runs waiting for a signal or a far timer (approvals waiting for
/// a person), it takes each runnable run and only those, and its query,
/// like the next wake-up's, steps through a small part of them (both used
/// to walk every unfinished run).
#[test]
fn claims_read_the_runs_that_can_be_due_not_every_waiting_one() {
    use crate::store::conformance::{claim_all, runs_of_every_kind, RUNNABLE};
    use rusqlite::StatementStatus;
    let (_dir, store) = open();
    let soon = runs_of_every_kind(&store);
    let c = peek(&store);
    let cols = "workflow, state, signal, due, error, lease_worker, lease_instance, \
                lease_expires, epoch, attempt, wake_seq, wake_signal, wake_payload, \
                created_at, updated_at, output, input, version, parent, join_pending";
    let filler = 30_000;
    for (like, n) in [("waiting", 20_000), ("asleep", filler - 20_000)] {
        c.execute_batch(&format!(
            "WITH RECURSIVE i (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < {n}) \
             INSERT INTO runs (id, {cols}) SELECT '{like}-' || n, {cols} \
             FROM runs, i WHERE id = '{like}'"
        ))
        .unwrap();
    }
    let next = block_on(store.next_wakeup(SystemTime::UNIX_EPOCH))
        .unwrap()
        .earliest()
        .unwrap();
    // No later than the deadlines set: the short leases expire before them,
    // unless setting up took longer than a lease (on a loaded machine),
    // and then the deadlines themselves come first.
    assert!(next <= soon, "{next:?}");
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_eq!(claim_all(&store), RUNNABLE);

    // The steps of each query's program: a few per run it looks at.
    let steps = |sql: &str, params: &[&dyn rusqlite::ToSql]| {
        let mut st = c.prepare(sql).unwrap();
        let mut rows = st.query(params).unwrap();
        while rows.next().unwrap().is_some() {}
        drop(rows);
        st.get_status(StatementStatus::VmStep)
    };
    let now = ts(SystemTime::now());
    let claim = steps(super::claim::RUNNABLE, &[&now, &"z", &"1", &now, &"[]"]);
    let wakeup = steps(super::reads::NEXT_WAKEUP, &[&now, &now]);
    eprintln!("steps: claim {claim}, next wake-up {wakeup}");
    for (what, n) in [("claim", claim), ("next wake-up", wakeup)] {
        assert!(
            n < filler / 10,
            "the {what} took {n} steps over {filler} waiting runs"
        );
    }
}
