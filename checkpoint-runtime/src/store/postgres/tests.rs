//! Tests of the PostgreSQL backend. Each that needs a server reads its URL
//! from `CHECKPOINT_TEST_POSTGRES_URL`. Built without the variable, those
//! tests are ignored (`cfg(checkpoint_test_postgres)`, set by `build.rs`), so
//! a run without a server never reports them as passed; built with it but
//! run without it, a test prints that it was skipped. Each test works in a
//! fresh PostgreSQL schema, dropped at the end, so tests run in parallel and
//! repeatably.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::executor::block_on;

use super::conn::{redact, Target};
use super::*;
use crate::store::conformance::{
    claim_all, claim_one, conformance_tests, cp, new_run, req, runs_of_every_kind, Fixture,
    RUNNABLE,
};
use crate::store::{Claimed, FieldRecord, RunState, Suspend, WakeValue};
use crate::StatusKind;

const URL_VAR: &str = "CHECKPOINT_TEST_POSTGRES_URL";

/// A store in a fresh schema, with the tokio runtime its connections run on.
/// The schema is dropped when this is dropped (also when the test fails).
struct Db {
    rt: tokio::runtime::Runtime,
    url: String,
    schema: String,
    store: Option<PostgresStore>,
}

fn fresh_schema() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "cp_test_{}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

impl Db {
    /// `None` (after printing why) when no server is configured.
    fn open(test: &str) -> Option<Db> {
        let Ok(url) = std::env::var(URL_VAR) else {
            eprintln!("skipped {test}: {URL_VAR} is not set");
            return None;
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let schema = fresh_schema();
        let store = rt
            .block_on(PostgresStore::open_in_schema(&url, &schema))
            .unwrap();
        Some(Db {
            rt,
            url,
            schema,
            store: Some(store),
        })
    }

    fn store(&self) -> &PostgresStore {
        self.store.as_ref().unwrap()
    }

    /// Another store over the same tables (another worker).
    fn other(&self) -> PostgresStore {
        self.rt
            .block_on(PostgresStore::open_in_schema(&self.url, &self.schema))
            .unwrap()
    }

    fn run<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Runs SQL in the test's schema, on a connection of its own.
    fn sql(&self, sql: &str) {
        let url = format!("{}{}schema={}", self.url, sep(&self.url), self.schema);
        self.run(async {
            let target = Target::parse(&url, None).unwrap();
            let client = conn::connect(&tokio::runtime::Handle::current(), &target)
                .await
                .unwrap();
            client.batch_execute(sql).await.unwrap();
        });
    }

    /// The one `bigint` `sql` (run in the test's schema) returns.
    fn sql_i64(&self, sql: &str) -> i64 {
        let row = self.run(schema_client(self).query_one(sql, &[])).unwrap();
        match row.try_get::<_, i64>(0) {
            Ok(n) => n,
            Err(_) => i64::from(row.get::<_, i32>(0)),
        }
    }
}

impl Db {
    /// The blocks (shared buffers hit or read) that `sql` reads when run
    /// as the store runs its statements, prepared with a generic plan,
    /// with `args` (SQL literals) as its parameters.
    fn blocks_read(&self, sql: &str, args: &str) -> u64 {
        self.blocks_read_planned(sql, args, "force_generic_plan").0
    }

    /// [`Db::blocks_read`] planned as `plan_cache_mode` says, in a
    /// transaction rolled back after (so a write writes nothing), with the
    /// rows the statement returned and the rows its plan's nodes produced,
    /// every loop counted.
    fn blocks_read_planned(&self, sql: &str, args: &str, plan_cache_mode: &str) -> (u64, u64, u64) {
        let url = format!("{}{}schema={}", self.url, sep(&self.url), self.schema);
        let plan: serde_json::Value = self.run(async {
            let target = Target::parse(&url, None).unwrap();
            let client = conn::connect(&tokio::runtime::Handle::current(), &target)
                .await
                .unwrap();
            client
                .batch_execute(&format!(
                    "BEGIN; SET LOCAL plan_cache_mode = {plan_cache_mode}; PREPARE q AS {sql}"
                ))
                .await
                .unwrap();
            let rows = client
                .simple_query(&format!(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE q{}",
                    if args.is_empty() {
                        String::new()
                    } else {
                        format!("({args})")
                    }
                ))
                .await
                .unwrap();
            let text = rows
                .iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
                    _ => None,
                })
                .unwrap();
            client.batch_execute("ROLLBACK").await.unwrap();
            serde_json::from_str(&text).unwrap()
        });
        if std::env::var("SHOW_PLAN").is_ok() {
            eprintln!("{}", serde_json::to_string_pretty(&plan).unwrap());
        }
        let top = &plan[0]["Plan"];
        let n = |k: &str| top[k].as_u64().unwrap_or_else(|| panic!("{k} in {plan}"));
        fn produced(node: &serde_json::Value) -> u64 {
            let own = node["Actual Rows"].as_u64().unwrap_or(0)
                * node["Actual Loops"].as_u64().unwrap_or(1);
            let children = node["Plans"]
                .as_array()
                .map_or(0, |c| c.iter().map(produced).sum());
            own + children
        }
        (
            n("Shared Hit Blocks") + n("Shared Read Blocks"),
            n("Actual Rows"),
            produced(top),
        )
    }

    /// The pages of the table `cp_runs`.
    fn runs_pages(&self) -> u64 {
        let url = format!("{}{}schema={}", self.url, sep(&self.url), self.schema);
        self.run(async {
            let target = Target::parse(&url, None).unwrap();
            let client = conn::connect(&tokio::runtime::Handle::current(), &target)
                .await
                .unwrap();
            let row = client
                .query_one(
                    "SELECT (pg_relation_size('cp_runs') / current_setting('block_size')::int)::bigint",
                    &[],
                )
                .await
                .unwrap();
            u64::try_from(row.get::<_, i64>(0)).unwrap()
        })
    }
}

/// The columns of `cp_runs` that a copy of a run takes: all but `id` and
/// `ord`.
const RUN_COPY_COLS: &str = "workflow, input, state, signal, due, output, error, \
     lease_worker, lease_instance, lease_expires, epoch, attempt, latest_seq, wake_seq, \
     wake_signal, wake_payload, created_at, updated_at, version, parent";

impl Db {
    /// `n` copies of run `like`, `like-1` to `like-n`, made in SQL (they
    /// have no checkpoints: for runs no claim takes).
    fn copy_run(&self, like: &str, n: usize) {
        self.sql(&format!(
            "INSERT INTO cp_runs (id, {RUN_COPY_COLS}) SELECT '{like}-' || i, {RUN_COPY_COLS} \
             FROM cp_runs, generate_series(1, {n}) i WHERE id = '{like}'"
        ));
    }

    /// The statistics of a store of 20,000 runs of state and `column`
    /// `values` (SQL, e.g. `1, 'go'`: waiting for `go`), none ready and
    /// none leased; then, before the next analysis (autovacuum is off),
    /// run `busy`, claimed by worker `b`, and `n` copies of it
    /// (`busy-1` ..). Returns `busy`.
    fn leased_after_analysis(&self, column: &str, values: &str, n: usize) -> RunRecord {
        self.sql(&format!(
            "ALTER TABLE cp_runs SET (autovacuum_enabled = false); \
             INSERT INTO cp_runs (id, workflow, input, state, {column}, epoch, attempt, \
                                  latest_seq, created_at, updated_at) \
             SELECT 'other-' || i, 'wf', '\\x00', {values}, 1, 0, 1, 0, 0 \
             FROM generate_series(1, 20000) i; ANALYZE cp_runs"
        ));
        let s = self.store();
        new_run(s, "busy");
        claim_one(s, "b", "1");
        self.copy_run("busy", n);
        block_on(s.load_run("busy")).unwrap().unwrap()
    }
}

fn sep(url: &str) -> &'static str {
    if url.contains('?') {
        "&"
    } else {
        "?"
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        drop(self.store.take());
        let r = self
            .rt
            .block_on(PostgresStore::drop_schema(&self.url, &self.schema));
        if let Err(e) = r {
            eprintln!("could not drop schema {}: {e}", self.schema);
        }
    }
}

impl Fixture for Db {
    fn store(&self) -> &dyn Store {
        // The conformance tests block on the store's futures from the test's
        // thread; the connections run on `self.rt`.
        Db::store(self)
    }

    fn lose_checkpoint(&self, run: &str, seq: u64) {
        assert!(!run.contains('\''));
        self.sql(&format!(
            "DELETE FROM cp_checkpoints WHERE run = '{run}' AND seq = {seq}"
        ));
    }
}

conformance_tests!(postgres: |test: &str| Db::open(test));

/// A checkpoint with fields, schema keys, loop positions and a suspension.
fn rich_cp(run: &str, seq: u64, suspend: Option<Suspend>) -> Arc<CheckpointRecord> {
    let fields = vec![
        FieldRecord {
            name: Cow::Borrowed("goal"),
            type_name: Cow::Borrowed("alloc::string::String"),
            offset: 0,
            len: 3,
        },
        FieldRecord {
            name: Cow::Borrowed("done"),
            type_name: Cow::Borrowed("alloc::vec::Vec<u32>"),
            offset: 3,
            len: 2,
        },
    ];
    Arc::new(
        CheckpointRecord::new(
            Arc::from(run),
            seq,
            Cow::Borrowed("task_done"),
            Some(Cow::Borrowed("task_done")),
            vec![2, u64::from(u32::MAX) + 7],
            fields,
            vec![2, b'h', b'i', 1, 9],
            suspend,
            SystemTime::now(),
        )
        .with_schemas(vec![Some(Cow::Borrowed("k-goal")), None]),
    )
}

/// Run `r` claimed by worker `a` (instance `a1`) and its checkpoint #1
/// ([`rich_cp`]) saved.
fn first_checkpoint(s: &PostgresStore) -> (Claimed, Arc<CheckpointRecord>) {
    new_run(s, "r");
    let c = claim_one(s, "a", "a1");
    let one = rich_cp("r", 1, None);
    block_on(s.save_checkpoint(&c.lease, one.clone(), None)).unwrap();
    (c, one)
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn checkpoints_round_trip_exactly() {
    let Some(db) = Db::open("checkpoints_round_trip_exactly") else {
        return;
    };
    let s = db.store();
    new_run(s, "r");
    let c = block_on(s.claim(&req("a", "a1"))).unwrap().claimed;
    assert!(c[0].checkpoint.is_none());
    let one = rich_cp("r", 1, None);
    let deadline = SystemTime::now() + Duration::from_secs(3600);
    let two = rich_cp(
        "r",
        2,
        Some(Suspend::Waiting {
            signal: "approval".into(),
            deadline: Some(deadline),
            payload_schema: None,
            sites_before: None,
        }),
    );
    block_on(s.save_checkpoint(&c[0].lease, one.clone(), None)).unwrap();
    block_on(s.save_checkpoint(&c[0].lease, two.clone(), None)).unwrap();
    assert_eq!(
        block_on(s.latest_checkpoint("r")).unwrap(),
        Some(two.clone())
    );
    assert_eq!(block_on(s.checkpoint("r", 1)).unwrap(), Some(one.clone()));
    assert_eq!(block_on(s.checkpoint("r", 3)).unwrap(), None);
    assert_eq!(block_on(s.list_checkpoints("r")).unwrap(), vec![one, two]);
    // The run took the checkpoint's state in the same transaction.
    let run = block_on(s.load_run("r")).unwrap().unwrap();
    assert_eq!(
        run.state,
        RunState::Waiting {
            signal: "approval".into(),
            deadline: Some(deadline)
        }
    );
    assert_eq!((run.latest_seq, run.attempt), (2, 1));
    assert_eq!(&*run.input, b"null");
    // Unknown runs are errors, not empty answers.
    for r in [
        block_on(s.latest_checkpoint("nope")).map(|_| ()),
        block_on(s.checkpoint("nope", 1)).map(|_| ()),
        block_on(s.list_checkpoints("nope")).map(|_| ()),
        block_on(s.history("nope")).map(|_| ()),
        block_on(s.pending_signals("nope")).map(|_| ()),
        block_on(s.put_signal("nope", "x", b"1".to_vec())),
        block_on(s.append_event("nope", Event::Completed)),
    ] {
        assert!(matches!(r, Err(Error::UnknownRun { .. })), "{r:?}");
    }
    assert!(block_on(s.load_run("nope")).unwrap().is_none());
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn old_owner_cannot_overwrite_new_owners_checkpoint() {
    let Some(db) = Db::open("old_owner_cannot_overwrite_new_owners_checkpoint") else {
        return;
    };
    let (a, b) = (db.store(), db.other());
    new_run(a, "r");
    let mut short = req("a", "a1");
    // Long enough that the claim, the save and b's claim fit in it on a
    // loaded machine (50 ms did not, with builds running beside the tests).
    short.ttl = Duration::from_millis(500);
    let old = block_on(a.claim(&short)).unwrap().claimed.remove(0);
    block_on(a.save_checkpoint(&old.lease, cp("r", 1), None)).unwrap();
    // Live lease: b gets nothing.
    assert!(block_on(b.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    std::thread::sleep(Duration::from_millis(550));
    let new = claim_one(&b, "b", "b1");
    assert_eq!(new.lease.epoch, old.lease.epoch + 1);
    assert_eq!(new.checkpoint.as_ref().map(|c| c.seq), Some(1));
    let mine = rich_cp("r", 2, None);
    block_on(b.save_checkpoint(&new.lease, mine.clone(), None)).unwrap();
    // Every fenced write of the old owner is refused and changes nothing.
    let stale = rich_cp("r", 2, None);
    for r in [
        block_on(a.save_checkpoint(&old.lease, stale, None)),
        block_on(a.save_checkpoint(&old.lease, cp("r", 3), None)),
        block_on(a.renew("r", &old.lease, Duration::from_secs(60))).map(drop),
        block_on(a.time_out("r", &old.lease)),
        block_on(a.release("r", &old.lease, Release::Abandon)),
        block_on(a.finish(
            "r",
            &old.lease,
            Outcome::Completed {
                output: Arc::from(&b"1"[..]),
                error: None,
            },
        )),
    ] {
        assert!(matches!(r, Err(Error::LeaseLost { .. })), "{r:?}");
    }
    assert_eq!(block_on(a.latest_checkpoint("r")).unwrap(), Some(mine));
    let run = block_on(a.load_run("r")).unwrap().unwrap();
    assert_eq!(run.lease.unwrap().worker, "b");
    assert_eq!(run.state, RunState::Ready);
}

/// A claim writes all its runs back in one statement and loads their
/// checkpoints in one query (`write_runs`, `load_seqs_checked`): each run
/// of a claim of many, half of them with a checkpoint and all taken over
/// from an expired lease, is claimed with its own record, checkpoint and
/// `TakenOver` event, and fenced as if it had been claimed alone.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_claim_of_many_runs_writes_each_back() {
    let Some(db) = Db::open("a_claim_of_many_runs_writes_each_back") else {
        return;
    };
    let (a, b) = (db.store(), db.other());
    let ids: Vec<String> = (0..30).map(|i| format!("r{i:02}")).collect();
    for id in &ids {
        new_run(a, id);
    }
    let mut short = req("a", "a1");
    (short.ttl, short.limit) = (Duration::from_millis(50), 100);
    let old = block_on(a.claim(&short)).unwrap().claimed;
    assert_eq!(old.len(), 30);
    for c in old
        .iter()
        .filter(|c| c.run.id.ends_with(['0', '2', '4', '6', '8']))
    {
        block_on(a.save_checkpoint(&c.lease, rich_cp(&c.run.id, 1, None), None)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(80));
    let mut all = req("b", "b1");
    all.limit = 100;
    let mut new = block_on(b.claim(&all)).unwrap().claimed;
    new.sort_by(|x, y| x.run.id.cmp(&y.run.id));
    assert_eq!(
        new.iter().map(|c| c.run.id.clone()).collect::<Vec<_>>(),
        ids
    );
    for (c, was) in new.iter().zip(&old) {
        let id = &c.run.id;
        let even = id.ends_with(['0', '2', '4', '6', '8']);
        assert_eq!(c.lease.epoch, was.lease.epoch + 1, "{id}");
        assert_eq!(
            c.checkpoint.as_ref().map(|cp| cp.seq),
            even.then_some(1),
            "{id}"
        );
        let stored = block_on(b.load_run(id)).unwrap().unwrap();
        assert_eq!(stored, c.run, "{id}: the claimed record is the stored one");
        let lease = stored.lease.as_ref().expect("leased");
        assert_eq!((&*lease.worker, &*lease.instance), ("b", "b1"), "{id}");
        assert_eq!(stored.attempt, 2, "{id}");
        let history = block_on(b.history(id)).unwrap();
        let taken: Vec<_> = history
            .iter()
            .filter(|h| matches!(h.event, Event::TakenOver { .. }))
            .collect();
        assert_eq!(taken.len(), 1, "{id}: {history:?}");
        // Fenced as a claim of its own would fence it: the old owner's save
        // is refused, the new owner's goes on from the claimed seq.
        let next = if even { 2 } else { 1 };
        let stale = block_on(a.save_checkpoint(&was.lease, cp(id, next), None));
        assert!(
            matches!(stale, Err(Error::LeaseLost { .. })),
            "{id}: {stale:?}"
        );
        block_on(b.save_checkpoint(&c.lease, cp(id, next), None)).unwrap();
    }
    // Every lease is live: nothing is left to claim.
    assert!(block_on(a.claim(&req("c", "c1")))
        .unwrap()
        .claimed
        .is_empty());
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn concurrent_claims_never_share_a_run() {
    let Some(db) = Db::open("concurrent_claims_never_share_a_run") else {
        return;
    };
    let (a, b) = (db.store(), db.other());
    for i in 0..40 {
        new_run(a, &format!("r{i:02}"));
    }
    let mut ra = req("a", "a1");
    let mut rb = req("b", "b1");
    ra.limit = 3;
    rb.limit = 3;
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    db.run(async {
        loop {
            let (x, y) = futures::join!(a.claim(&ra), b.claim(&rb));
            let (x, y) = (x.unwrap().claimed, y.unwrap().claimed);
            if x.is_empty() && y.is_empty() {
                break;
            }
            got_a.extend(x.into_iter().map(|c| c.run.id));
            got_b.extend(y.into_iter().map(|c| c.run.id));
        }
    });
    let mut all: Vec<String> = got_a.iter().chain(&got_b).cloned().collect();
    all.sort();
    let expected: Vec<String> = (0..40).map(|i| format!("r{i:02}")).collect();
    assert_eq!(all, expected, "a: {got_a:?}, b: {got_b:?}");
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn signals_are_consumed_once_in_order() {
    let Some(db) = Db::open("signals_are_consumed_once_in_order") else {
        return;
    };
    let (a, b) = (db.store(), db.other());
    new_run(a, "r");
    let c = claim_one(a, "a", "a1");
    let wait = Suspend::Waiting {
        signal: "go".into(),
        deadline: None,
        payload_schema: None,
        sites_before: None,
    };
    block_on(a.save_checkpoint(&c.lease, rich_cp("r", 1, Some(wait)), None)).unwrap();
    block_on(a.release("r", &c.lease, Release::Suspend)).unwrap();
    // Waiting without a signal: not claimable.
    assert!(block_on(a.claim(&req("a", "a1")))
        .unwrap()
        .claimed
        .is_empty());
    block_on(b.put_signal("r", "other", b"0".to_vec())).unwrap();
    block_on(b.put_signal("r", "go", b"1".to_vec())).unwrap();
    block_on(b.put_signal("r", "go", b"2".to_vec())).unwrap();
    // Two workers race for it: exactly one wins, with the oldest signal.
    let (ra, rb) = (req("a", "a2"), req("b", "b1"));
    let (x, y) = db.run(async { futures::join!(a.claim(&ra), b.claim(&rb)) });
    let mut won: Vec<_> = x
        .unwrap()
        .claimed
        .into_iter()
        .chain(y.unwrap().claimed)
        .collect();
    assert_eq!(won.len(), 1);
    let won = won.remove(0);
    assert_eq!(
        won.run.wake.as_ref().map(|w| (&w.value, w.seq)),
        Some((
            &WakeValue::Signal {
                name: "go".into(),
                payload: Arc::from(&b"1"[..])
            },
            1
        ))
    );
    let left: Vec<Vec<u8>> = block_on(a.pending_signals("r"))
        .unwrap()
        .into_iter()
        .map(|s| s.payload.to_vec())
        .collect();
    assert_eq!(left, vec![b"0".to_vec(), b"2".to_vec()]);
    // take_signal consumes the next one, once.
    let sig = block_on(a.take_signal("r", &won.lease, "go"))
        .unwrap()
        .unwrap();
    assert_eq!(&*sig.payload, b"2");
    assert!(block_on(a.take_signal("r", &won.lease, "go"))
        .unwrap()
        .is_none());
    // A rejected payload: the run waits again, and the history says why.
    block_on(a.reject_signal("r", &won.lease, "bad payload".into())).unwrap();
    let run = block_on(a.load_run("r")).unwrap().unwrap();
    assert!(run.wake.is_none());
    assert!(matches!(run.state, RunState::Waiting { .. }));
    let events = block_on(a.history("r")).unwrap();
    assert!(events.iter().any(|e| matches!(
        &e.event,
        Event::SignalRejected { name, reason } if name == "go" && reason == "bad payload"
    )));
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn timers_deadlines_and_next_wakeup() {
    let Some(db) = Db::open("timers_deadlines_and_next_wakeup") else {
        return;
    };
    let s = db.store();
    assert_eq!(
        block_on(s.next_wakeup(SystemTime::UNIX_EPOCH))
            .unwrap()
            .earliest(),
        None
    );
    new_run(s, "r");
    let c = claim_one(s, "a", "a1");
    // While leased, the lease expiry is the next wake-up.
    let lease_until = c.run.lease.as_ref().unwrap().expires_at;
    assert_eq!(
        block_on(s.next_wakeup(SystemTime::UNIX_EPOCH))
            .unwrap()
            .earliest(),
        Some(lease_until)
    );
    let until = SystemTime::now() + Duration::from_millis(300);
    let sleep = Suspend::Sleeping {
        until,
        sites_before: None,
        retry: None,
    };
    block_on(s.save_checkpoint(&c.lease, rich_cp("r", 1, Some(sleep)), None)).unwrap();
    block_on(s.release("r", &c.lease, Release::Suspend)).unwrap();
    assert_eq!(
        block_on(s.next_wakeup(SystemTime::UNIX_EPOCH))
            .unwrap()
            .earliest(),
        Some(until)
    );
    assert!(block_on(s.claim(&req("a", "a1")))
        .unwrap()
        .claimed
        .is_empty());
    std::thread::sleep(Duration::from_millis(350));
    let c = claim_one(s, "a", "a1");
    assert_eq!(c.run.state, RunState::Ready);
    // A wait with a deadline: claimable once it passes, with `TimedOut`.
    let deadline = SystemTime::now() + Duration::from_millis(200);
    let wait = Suspend::Waiting {
        signal: "never".into(),
        deadline: Some(deadline),
        payload_schema: None,
        sites_before: None,
    };
    block_on(s.save_checkpoint(&c.lease, rich_cp("r", 2, Some(wait)), None)).unwrap();
    block_on(s.release("r", &c.lease, Release::Suspend)).unwrap();
    assert!(block_on(s.claim(&req("a", "a1")))
        .unwrap()
        .claimed
        .is_empty());
    std::thread::sleep(Duration::from_millis(250));
    let c = claim_one(s, "a", "a1");
    assert_eq!(
        c.run.wake.map(|w| (w.seq, w.value)),
        Some((2, WakeValue::TimedOut))
    );
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn history_fork_and_listing() {
    let Some(db) = Db::open("history_fork_and_listing") else {
        return;
    };
    let s = db.store();
    new_run(s, "r");
    new_run(s, "q");
    let c = block_on(s.claim(&req("a", "a1"))).unwrap().claimed;
    let lease = &c.iter().find(|c| c.run.id == "r").unwrap().lease;
    for seq in 1..=4 {
        block_on(s.save_checkpoint(lease, rich_cp("r", seq, None), Some(2))).unwrap();
    }
    // Pruned versions cannot be forked; kept ones can.
    assert!(matches!(
        block_on(s.fork("r", 1, "f")),
        Err(Error::UnknownCheckpoint { seq: 1, .. })
    ));
    block_on(s.fork("r", 3, "f")).unwrap();
    assert!(matches!(
        block_on(s.fork("r", 3, "f")),
        Err(Error::AlreadyExists { .. })
    ));
    assert!(matches!(
        block_on(s.fork("nope", 1, "g")),
        Err(Error::UnknownRun { .. })
    ));
    let forked = block_on(s.list_checkpoints("f")).unwrap();
    assert_eq!(forked.len(), 1);
    let original = block_on(s.checkpoint("r", 3)).unwrap().unwrap();
    assert_eq!(forked[0].seq, 1);
    assert_eq!(forked[0].data, original.data);
    assert_eq!(forked[0].fields, original.fields);
    assert_eq!(forked[0].schemas, original.schemas);
    let f = block_on(s.load_run("f")).unwrap().unwrap();
    assert_eq!((f.workflow.as_str(), f.latest_seq, f.epoch), ("wf", 1, 0));
    // History keeps every checkpoint event, pruned or not, in order.
    block_on(s.append_event("r", Event::Completed)).unwrap();
    let events: Vec<Event> = block_on(s.history("r"))
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect();
    let saved = |seq| Event::CheckpointSaved {
        seq,
        label: Some("task_done".into()),
    };
    let forked_ev = Event::Forked {
        from: "r".into(),
        seq: 3,
        to: "f".into(),
    };
    assert_eq!(
        events,
        vec![
            Event::Started {
                workflow: "wf".into(),
                trace: None,
            },
            saved(1),
            saved(2),
            saved(3),
            saved(4),
            forked_ev.clone(),
            Event::Completed,
        ]
    );
    let f_events: Vec<Event> = block_on(s.history("f"))
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert_eq!(f_events, vec![forked_ev]);
    // Listing: creation order, filters.
    let ids = |f: &RunFilter| -> Vec<String> {
        block_on(s.list_runs(f))
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect()
    };
    assert_eq!(ids(&RunFilter::new()), vec!["r", "q", "f"]);
    assert_eq!(ids(&RunFilter::new().limit(2)), vec!["r", "q"]);
    let mut by_prefix = RunFilter::new();
    by_prefix.id_prefix = Some("q".into());
    assert_eq!(ids(&by_prefix), vec!["q"]);
    assert!(block_on(s.cancel("q")).unwrap());
    let mut cancelled = RunFilter::new();
    cancelled.status = Some(StatusKind::Cancelled);
    assert_eq!(ids(&cancelled), vec!["q"]);
    let mut other = RunFilter::new();
    other.workflow = Some("other".into());
    assert!(ids(&other).is_empty());
    // A completed run with an `Err` output lists as failed.
    block_on(s.finish(
        "r",
        lease,
        Outcome::Completed {
            output: Arc::from(&b"{\"Err\":\"no\"}"[..]),
            error: Some("no".into()),
        },
    ))
    .unwrap();
    let mut failed = RunFilter::new();
    failed.status = Some(StatusKind::Failed);
    assert_eq!(ids(&failed), vec!["r"]);
    let r = block_on(s.load_run("r")).unwrap().unwrap();
    assert!(r.lease.is_none());
    assert_eq!(
        r.state,
        RunState::Completed {
            output: Arc::from(&b"{\"Err\":\"no\"}"[..]),
            error: Some("no".into())
        }
    );
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn failed_runs_keep_their_error() {
    let Some(db) = Db::open("failed_runs_keep_their_error") else {
        return;
    };
    let s = db.store();
    new_run(s, "r");
    let c = claim_one(s, "a", "a1");
    let error = Error::Panicked {
        workflow: "wf".into(),
        run: "r".into(),
        message: "boom".into(),
    };
    block_on(s.finish(
        "r",
        &c.lease,
        Outcome::Failed {
            error: error.clone(),
        },
    ))
    .unwrap();
    let r = block_on(s.load_run("r")).unwrap().unwrap();
    assert_eq!(r.state, RunState::Failed { error });
    // Terminal: never claimed again, fenced writes refused.
    assert!(block_on(s.claim(&req("a", "a2")))
        .unwrap()
        .claimed
        .is_empty());
    assert!(matches!(
        block_on(s.renew("r", &c.lease, Duration::from_secs(1))),
        Err(Error::LeaseLost { .. })
    ));
    assert!(!block_on(s.cancel("r")).unwrap());
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn notifications_reach_other_stores() {
    let Some(db) = Db::open("notifications_reach_other_stores") else {
        return;
    };
    let other = db.other();
    let mut rx = db.store().subscribe();
    rx.borrow_and_update();
    // A write through the *other* store: only NOTIFY can tell this one.
    block_on(other.create_run(crate::store::NewRun {
        id: "r".into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    }))
    .unwrap();
    let changed =
        db.run(async { tokio::time::timeout(Duration::from_secs(5), rx.changed()).await });
    assert!(matches!(changed, Ok(Ok(()))), "no notification arrived");
    // A store in another schema of the same database is not woken.
    let elsewhere = Db::open("notifications_reach_other_stores (2)").unwrap();
    let mut rx2 = elsewhere.store().subscribe();
    rx2.borrow_and_update();
    block_on(other.put_signal("r", "x", b"1".to_vec())).unwrap();
    let changed =
        db.run(async { tokio::time::timeout(Duration::from_secs(5), rx.changed()).await });
    assert!(matches!(changed, Ok(Ok(()))), "no notification arrived");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!rx2.has_changed().unwrap());
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn schemas_and_gc() {
    let Some(db) = Db::open("schemas_and_gc") else {
        return;
    };
    let s = db.store();
    block_on(s.put_schemas(vec![
        ("k1".into(), "{\"a\":1}".into()),
        ("k2".into(), "{\"b\":2}".into()),
    ]))
    .unwrap();
    // A key names its document for good: a second put changes nothing.
    block_on(s.put_schemas(vec![("k1".into(), "{\"other\":true}".into())])).unwrap();
    let got = block_on(s.schemas(&["k1".into(), "k3".into()])).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got["k1"], "{\"a\":1}");
    new_run(s, "r");
    let c = claim_one(s, "a", "a1");
    for seq in 1..=20 {
        block_on(s.save_checkpoint(&c.lease, rich_cp("r", seq, None), Some(3))).unwrap();
    }
    let report = block_on(s.gc()).unwrap();
    assert!(
        report.bytes_before > 0 && report.bytes_after > 0,
        "{report:?}"
    );
    let kept: Vec<u64> = block_on(s.list_checkpoints("r"))
        .unwrap()
        .iter()
        .map(|c| c.seq)
        .collect();
    assert_eq!(kept, vec![18, 19, 20]);
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn tables_are_versioned_and_newer_ones_refused() {
    let Some(db) = Db::open("tables_are_versioned_and_newer_ones_refused") else {
        return;
    };
    // Opening again over existing tables is fine (nothing to migrate).
    drop(db.other());
    db.sql("UPDATE cp_schema_version SET version = version + 1");
    let err = db
        .run(PostgresStore::open_in_schema(&db.url, &db.schema))
        .unwrap_err();
    assert!(matches!(err, Error::UnsupportedStore { .. }), "{err}");
    assert!(err.to_string().contains("newer than this build"), "{err}");
    // The same through the URL parameter.
    let url = format!("{}{}schema={}", db.url, sep(&db.url), db.schema);
    assert!(db.run(PostgresStore::open(&url)).is_err());
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn workers_starting_together_migrate_once() {
    let Some(db) = Db::open("workers_starting_together_migrate_once") else {
        return;
    };
    let url = db.url.clone();
    let schema = fresh_schema();
    let opened = db.run(async {
        futures::future::join_all((0..4).map(|_| PostgresStore::open_in_schema(&url, &schema)))
            .await
    });
    for o in &opened {
        assert!(o.is_ok(), "{o:?}");
    }
    drop(opened);
    db.run(PostgresStore::drop_schema(&url, &schema)).unwrap();
}

#[test]
fn urls_are_parsed_and_passwords_hidden() {
    assert_eq!(
        redact("postgres://u:secret@h:5432/db?schema=x"),
        "postgres://u:***@h:5432/db?schema=x"
    );
    assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    let t = Target::parse(
        "postgres://u@h/db?schema=s_1&pool_size=3&application_name=me",
        None,
    )
    .unwrap();
    assert_eq!(t.schema.as_deref(), Some("s_1"));
    assert_eq!(t.pool_size, 3);
    assert_eq!(t.config.get_application_name(), Some("me"));
    assert_eq!(t.config.get_dbname(), Some("db"));
    let t = Target::parse("postgres://u@h/db?schema=s_1", Some("other")).unwrap();
    assert_eq!(t.schema.as_deref(), Some("other"));
    for bad in [
        "postgres://u@h/db?schema=bad-name",
        "postgres://u@h/db?schema=",
        "postgres://u@h/db?pool_size=0",
        "postgres://u@h/db?pool_size=1025",
        "postgres://u@h/db?pool_size=99999999999999999999999",
        "postgres://u@h/db?pool_size=-1",
        "postgres://u:pw@h/db?nonsense=1",
    ] {
        let err = Target::parse(bad, None).unwrap_err();
        assert!(
            matches!(err, Error::UnsupportedStore { .. }),
            "{bad}: {err}"
        );
        assert!(!err.to_string().contains("pw@"), "{err}");
    }
    // The largest pool accepted; one more is refused, naming the option
    // (it used to reach `Semaphore::new`, which panics above its maximum).
    assert_eq!(
        Target::parse("postgres://u@h/db?pool_size=1024", None)
            .unwrap()
            .pool_size,
        1024
    );
    let err = Target::parse("postgres://u@h/db?pool_size=18446744073709551615", None).unwrap_err();
    assert!(matches!(err, Error::UnsupportedStore { .. }), "{err}");
    assert!(err.to_string().contains("pool_size"), "{err}");
}

#[tokio::test]
async fn unreachable_server_is_an_error_naming_the_url() {
    // Port 1 on the loopback: refused at once, no server needed.
    let url = "postgres://postgres:hunter2@127.0.0.1:1/test?connect_timeout=5";
    let err = PostgresStore::open(url).await.unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("127.0.0.1:1/test"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn connections_recover_after_the_server_drops_them() {
    let Some(db) = Db::open("connections_recover_after_the_server_drops_them") else {
        return;
    };
    let s = db.store();
    let other = db.other();
    new_run(s, "r");
    let pooled: i32 = db.run(async {
        let mut c = s.pool.get().await.unwrap();
        let row = c
            .plain()
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap();
        get(&row, 0).unwrap()
    });
    let listener = s.listener_pid.load(Ordering::Relaxed);
    assert!(listener > 0 && pooled > 0);
    let mut rx = s.subscribe();
    rx.borrow_and_update();
    db.sql(&format!(
        "SELECT pg_terminate_backend({listener}); SELECT pg_terminate_backend({pooled})"
    ));
    // The listener reconnects, and says that it may have missed something.
    let started = std::time::Instant::now();
    while s.listener_pid.load(Ordering::Relaxed) == listener {
        assert!(started.elapsed() < Duration::from_secs(10), "no reconnect");
        std::thread::sleep(Duration::from_millis(20));
    }
    let bumped = db.run(async { tokio::time::timeout(Duration::from_secs(5), rx.changed()).await });
    assert!(matches!(bumped, Ok(Ok(()))));
    // The dropped pool connection is replaced.
    assert_eq!(block_on(s.load_run("r")).unwrap().unwrap().id, "r");
    // And notifications flow again.
    rx.borrow_and_update();
    block_on(other.put_signal("r", "x", b"1".to_vec())).unwrap();
    let changed =
        db.run(async { tokio::time::timeout(Duration::from_secs(5), rx.changed()).await });
    assert!(
        matches!(changed, Ok(Ok(()))),
        "no notification after reconnecting"
    );
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_user_without_create_rights_uses_existing_tables() {
    let Some(db) = Db::open("a_user_without_create_rights_uses_existing_tables") else {
        return;
    };
    new_run(db.store(), "r");
    let role = format!("{}_user", db.schema);
    let schema = &db.schema;
    db.sql(&format!(
        "CREATE ROLE {role} LOGIN; \
         GRANT USAGE ON SCHEMA {schema} TO {role}; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}; \
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}"
    ));
    let mut target = Target::parse(&db.url, Some(schema)).unwrap();
    target.config.user(&role);
    // The store (and its connections) is dropped before the role.
    let load = match db.run(PostgresStore::open_target(target, false)) {
        Ok(s) => block_on(s.load_run("r")).map(|r| r.map(|r| r.id)),
        Err(e) => Err(e),
    };
    db.sql(&format!("DROP OWNED BY {role}; DROP ROLE {role}"));
    assert_eq!(load, Ok(Some("r".to_owned())));
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn nul_characters_in_workflow_texts_are_stored_replaced() {
    let Some(db) = Db::open("nul_characters_in_workflow_texts_are_stored_replaced") else {
        return;
    };
    let s = db.store();
    // An `Err(String)` output with a NUL: stored (as a failed run) with the
    // NUL replaced, instead of the write failing and the run being redone.
    new_run(s, "r");
    let c = claim_one(s, "a", "a1");
    block_on(s.release(
        "r",
        &c.lease,
        Release::Retry {
            reason: "retry\0reason".into(),
        },
    ))
    .unwrap();
    let c = claim_one(s, "a", "a2");
    block_on(s.finish(
        "r",
        &c.lease,
        Outcome::Completed {
            output: Arc::from(&b"null"[..]),
            error: Some("bad\0byte".into()),
        },
    ))
    .unwrap();
    let r = block_on(s.load_run("r")).unwrap().unwrap();
    assert_eq!(
        r.state,
        RunState::Completed {
            output: Arc::from(&b"null"[..]),
            error: Some("bad\u{FFFD}byte".into())
        }
    );
    assert_eq!(
        block_on(s.list_runs(&RunFilter {
            status: Some(StatusKind::Failed),
            ..RunFilter::default()
        }))
        .unwrap()
        .len(),
        1
    );
    let events: Vec<Event> = block_on(s.history("r"))
        .unwrap()
        .into_iter()
        .map(|h| h.event)
        .collect();
    assert!(
        events.contains(&Event::Failed {
            error: "bad\u{FFFD}byte".into()
        }),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Retried { reason, .. }
            if reason.as_str() == "retry\u{FFFD}reason")),
        "{events:?}"
    );
    // A panic message (the runtime's error, kept as JSON).
    new_run(s, "p");
    let c = claim_one(s, "a", "a3");
    let error = |message: &str| Error::Panicked {
        workflow: "wf".into(),
        run: "p".into(),
        message: message.into(),
    };
    block_on(s.finish(
        "p",
        &c.lease,
        Outcome::Failed {
            error: error("panic\0here"),
        },
    ))
    .unwrap();
    let p = block_on(s.load_run("p")).unwrap().unwrap();
    assert_eq!(
        p.state,
        RunState::Failed {
            error: error("panic\u{FFFD}here")
        }
    );
    assert!(block_on(s.history("p")).unwrap().iter().any(
        |h| matches!(&h.event, Event::Failed { error } if error.contains("panic\u{FFFD}here"))
    ));
    // Signal names: stored and consumed under the same replaced name.
    new_run(s, "w");
    block_on(s.put_signal("w", "go\0now", b"1".to_vec())).unwrap();
    let pending = block_on(s.pending_signals("w")).unwrap();
    assert_eq!(pending[0].name, "go\u{FFFD}now");
    let c = claim_one(s, "a", "a4");
    let got = block_on(s.take_signal("w", &c.lease, "go\0now")).unwrap();
    assert_eq!(got.map(|g| g.name).as_deref(), Some("go\u{FFFD}now"));
}

/// `idle_in_transaction_session_timeout` of a connection of `store`'s pool.
fn idle_timeout(db: &Db, store: &PostgresStore) -> String {
    db.run(async {
        let mut c = store.pool.get().await.unwrap();
        let row = c
            .plain()
            .query_one("SHOW idle_in_transaction_session_timeout", &[])
            .await
            .unwrap();
        get(&row, 0).unwrap()
    })
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn stalled_transactions_are_ended_by_the_server() {
    let Some(db) = Db::open("stalled_transactions_are_ended_by_the_server") else {
        return;
    };
    // Every pooled connection has the timeout, so a worker paused inside a
    // transaction cannot keep a run's row locked past its lease.
    assert_eq!(idle_timeout(&db, db.store()), "10s");
    let s = db.store();
    let several = db.run(async {
        let a = s.pool.get().await.unwrap();
        let b = s.pool.get().await.unwrap();
        (a, b)
    });
    drop(several);
    assert_eq!(idle_timeout(&db, s), "10s");
    // A value set in the URL's `options` is kept.
    let url = format!(
        "{}{}options=-c%20idle_in_transaction_session_timeout%3D5min",
        db.url,
        sep(&db.url)
    );
    let own = db
        .run(PostgresStore::open_in_schema(&url, &db.schema))
        .unwrap();
    assert_eq!(idle_timeout(&db, &own), "5min");
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn an_undecodable_run_does_not_block_claims() {
    let Some(db) = Db::open("an_undecodable_run_does_not_block_claims") else {
        return;
    };
    let s = db.store();
    // `d`, first in creation order, gets a checkpoint, then `a`, `b`, `c`.
    new_run(s, "d");
    let c = claim_one(s, "a", "a1");
    block_on(s.save_checkpoint(&c.lease, rich_cp("d", 1, None), None)).unwrap();
    block_on(s.release("d", &c.lease, Release::Abandon)).unwrap();
    for id in ["a", "b", "c"] {
        new_run(s, id);
    }
    // `b`'s row and `d`'s latest checkpoint become unreadable.
    db.sql(
        "UPDATE cp_runs SET epoch = -1 WHERE id = 'b'; \
         UPDATE cp_checkpoints SET meta = substring(meta from 2) WHERE run = 'd'",
    );
    assert!(block_on(s.load_run("b")).is_err());
    // A claim of one run gets the first readable one.
    let one = ClaimRequest {
        limit: 1,
        ..req("w", "w1")
    };
    let got = block_on(s.claim(&one)).unwrap();
    let ids: Vec<&str> = got.claimed.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(ids, ["a"]);
    // And another worker gets the rest.
    let got = block_on(s.claim(&req("v", "v1"))).unwrap();
    let ids: Vec<&str> = got.claimed.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(ids, ["c"]);
    // The unreadable runs are marked failed, naming what can be read, and
    // no claim takes them again.
    let d = block_on(s.load_run("d")).unwrap().unwrap();
    assert_eq!((d.epoch, d.lease.is_none()), (1, true));
    let RunState::Failed { error } = &d.state else {
        panic!("d: {:?}", d.state);
    };
    let error = error.to_string();
    for part in [
        "run `d`",
        "workflow `wf`",
        "site `task_done`",
        "what names and locates its fields does not decode",
    ] {
        assert!(error.contains(part), "`{part}` missing from: {error}");
    }
    // `b`'s row, marked failed, reads back as failed, with what was wrong
    // (it did not, and `status()` of it failed, before); its history says why.
    let b = block_on(s.load_run("b")).unwrap().unwrap();
    let crate::Status::Failed { error } = b.status() else {
        panic!("b: {:?}", b.state);
    };
    for part in ["run `b`", "workflow `wf`", "negative epoch -1"] {
        assert!(error.contains(part), "`{part}` missing from: {error}");
    }
    let listed = block_on(s.list_runs(&RunFilter::default())).unwrap();
    assert!(listed.iter().any(|r| r.id == "b" && r.state.is_terminal()));
    let history = block_on(s.history("b")).unwrap();
    let failed = history.iter().find_map(|h| match &h.event {
        Event::Failed { error } => Some(error.clone()),
        _ => None,
    });
    let failed = failed.expect("a failure in b's history");
    assert!(failed.contains("run `b`"), "{failed}");
    let again = block_on(s.claim(&req("u", "u1"))).unwrap();
    assert!(again.claimed.is_empty(), "{:?}", again.claimed);
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn sequence_numbers_above_i64_max() {
    let Some(db) = Db::open("sequence_numbers_above_i64_max") else {
        return;
    };
    let s = db.store();
    new_run(s, "r");
    for seq in [u64::MAX, i64::MAX as u64 + 1] {
        let err = block_on(s.fork("r", seq, "f")).unwrap_err();
        assert_eq!(
            err,
            Error::UnknownCheckpoint {
                run: "r".into(),
                seq
            }
        );
        assert!(block_on(s.load_run("f")).unwrap().is_none());
        // As in the memory store: the run must exist.
        assert!(matches!(
            block_on(s.checkpoint("nope", seq)),
            Err(Error::UnknownRun { .. })
        ));
        assert_eq!(block_on(s.checkpoint("r", seq)).unwrap(), None);
    }
}

#[test]
fn connection_errors_keep_the_postgres_error_as_source() {
    use std::error::Error as _;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Nothing listens on port 1: refused at once, no server needed.
    let err = rt
        .block_on(PostgresStore::open("postgres://postgres@127.0.0.1:1/none"))
        .unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err}");
    let source = err.source().expect("a source");
    assert!(
        source.downcast_ref::<tokio_postgres::Error>().is_some(),
        "{source:?}"
    );
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_worker_id_is_held_by_one_live_session() {
    let Some(db) = Db::open("a_worker_id_is_held_by_one_live_session") else {
        return;
    };
    let s = db.store();
    let first = db.run(s.hold_worker("w")).unwrap();
    assert!(first.is_some(), "a free worker id is granted");
    assert!(db.run(s.hold_worker("w")).unwrap().is_none(), "held twice");
    assert!(
        db.run(s.hold_worker("v")).unwrap().is_some(),
        "ids are apart"
    );
    // Gone with its session: granted again.
    drop(first);
    let again = std::time::Instant::now();
    loop {
        if db.run(s.hold_worker("w")).unwrap().is_some() {
            break;
        }
        assert!(again.elapsed() < Duration::from_secs(10), "never released");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How every damage error ends.
const REFUSED: &str = "; it is refused rather than resumed with wrong values (restore the \
                       store from a backup, or fork an intact version of the run)";

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_flipped_bit_in_a_field_is_refused_naming_run_site_and_field() {
    let Some(db) = Db::open("a_flipped_bit_in_a_field_is_refused_naming_run_site_and_field") else {
        return;
    };
    let s = db.store();
    new_run(s, "r");
    let c = claim_one(s, "a", "a1");
    let (one, two) = (rich_cp("r", 1, None), rich_cp("r", 2, None));
    block_on(s.save_checkpoint(&c.lease, one.clone(), None)).unwrap();
    block_on(s.save_checkpoint(&c.lease, two.clone(), None)).unwrap();
    block_on(s.release("r", &c.lease, Release::Abandon)).unwrap();
    // Bit 0 of byte 4: `done`'s bytes of checkpoint #2.
    db.sql(
        "UPDATE cp_checkpoints SET data = set_bit(data, 32, 1 - get_bit(data, 32)) \
         WHERE run = 'r' AND seq = 2",
    );
    let expected = format!(
        "cannot decode field `done` of run `r` (workflow `wf`) at site `task_done`: checkpoint \
         #2 is damaged: the field's bytes do not match the checksum stored with them{REFUSED}"
    );
    let err = block_on(s.latest_checkpoint("r")).unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err}");
    assert_eq!(err.to_string(), expected);
    assert_eq!(
        block_on(s.checkpoint("r", 2)).unwrap_err().to_string(),
        expected
    );
    // The intact version still reads, lists and forks; the damaged one is
    // listed, flagged.
    assert_eq!(block_on(s.checkpoint("r", 1)).unwrap(), Some(one.clone()));
    let listed = block_on(s.list_checkpoints("r")).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0], one);
    assert_eq!((listed[1].seq, listed[1].is_damaged()), (2, true));
    assert_eq!(listed[1].site_key, "task_done");
    assert_eq!(listed[1].damage.as_ref().unwrap().to_string(), expected);
    block_on(s.fork("r", 1, "r-from-1")).unwrap();
    let forked = block_on(s.latest_checkpoint("r-from-1")).unwrap().unwrap();
    assert_eq!(forked.data, one.data);
    let err = block_on(s.fork("r", 2, "r-from-2")).unwrap_err();
    assert_eq!(err.to_string(), expected);
    // A claim sets the run aside, naming the field; the others go on.
    let got = block_on(s.claim(&req("b", "b1"))).unwrap();
    let ids: Vec<&str> = got.claimed.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(ids, ["r-from-1"]);
    let crate::Status::Failed { error } = block_on(s.load_run("r")).unwrap().unwrap().status()
    else {
        panic!("r is not failed");
    };
    for part in [
        "cannot decode field `done` of run `r` (workflow `wf`) at site `task_done`",
        "set aside",
        "checkpoint #2 is damaged",
    ] {
        assert!(error.contains(part), "`{part}` missing from: {error}");
    }
    // Damage to what locates or names the bytes is refused too.
    db.sql("CREATE TABLE intact AS SELECT * FROM cp_checkpoints WHERE run = 'r-from-1'");
    for (what, sql) in [
        (
            "meta",
            "UPDATE cp_checkpoints SET meta = substring(meta from 2)",
        ),
        (
            "meta bit",
            "UPDATE cp_checkpoints SET meta = set_bit(meta, 20, 1 - get_bit(meta, 20))",
        ),
        ("site", "UPDATE cp_checkpoints SET site_key = 'task_dome'"),
        ("seq", "UPDATE cp_checkpoints SET seq = 3"),
        (
            "meta trailing",
            "UPDATE cp_checkpoints SET meta = meta || '\\x00'::bytea",
        ),
        (
            "checksum",
            "UPDATE cp_checkpoints SET checksum = substring(checksum from 2)",
        ),
    ] {
        db.sql(&format!("{sql} WHERE run = 'r-from-1'"));
        let err = block_on(s.latest_checkpoint("r-from-1"));
        let ok = matches!(&err, Err(Error::Decode { .. }) | Ok(None));
        assert!(ok, "{what}: {err:?}");
        db.sql(
            "DELETE FROM cp_checkpoints WHERE run = 'r-from-1'; \
             INSERT INTO cp_checkpoints SELECT * FROM intact",
        );
        assert_eq!(
            block_on(s.latest_checkpoint("r-from-1"))
                .unwrap()
                .map(|c| c.data.clone()),
            Some(one.data.clone())
        );
    }
}

/// SQL that turns the tables back into version-9 ones, every checkpoint
/// row (each one of [`rich_cp`]) as version 9 wrote it: its fields and
/// loop positions in six arrays, no `meta`.
const AS_VERSION_9: &str = "\
    UPDATE cp_checkpoints SET v9_loops = '{2,4294967302}', \
      v9_field_names = '{goal,done}', \
      v9_field_types = '{alloc::string::String,alloc::vec::Vec<u32>}', \
      v9_field_offsets = '{0,3}', v9_field_lens = '{3,2}', \
      v9_field_schemas = '{k-goal,NULL}'; \
    ALTER TABLE cp_checkpoints DROP COLUMN meta; \
    ALTER TABLE cp_checkpoints RENAME COLUMN v9_loops TO loops; \
    ALTER TABLE cp_checkpoints RENAME COLUMN v9_field_names TO field_names; \
    ALTER TABLE cp_checkpoints RENAME COLUMN v9_field_types TO field_types; \
    ALTER TABLE cp_checkpoints RENAME COLUMN v9_field_offsets TO field_offsets; \
    ALTER TABLE cp_checkpoints RENAME COLUMN v9_field_lens TO field_lens; \
    ALTER TABLE cp_checkpoints RENAME COLUMN v9_field_schemas TO field_schemas; \
    ALTER TABLE cp_checkpoints ALTER COLUMN loops SET NOT NULL, \
      ALTER COLUMN field_names SET NOT NULL, ALTER COLUMN field_types SET NOT NULL, \
      ALTER COLUMN field_offsets SET NOT NULL, ALTER COLUMN field_lens SET NOT NULL, \
      ALTER COLUMN field_schemas SET NOT NULL; \
    ALTER TABLE cp_runs DROP COLUMN cancel_request; \
    DROP INDEX cp_runs_tags; DROP INDEX cp_runs_queue; DROP INDEX cp_runs_queue_order; \
    DROP TABLE cp_queue_admissions; \
    ALTER TABLE cp_runs DROP COLUMN tags, DROP COLUMN queue, DROP COLUMN priority; \
    UPDATE cp_schema_version SET version = 9;";

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn rows_written_before_meta_still_load() {
    let Some(db) = Db::open("rows_written_before_meta_still_load") else {
        return;
    };
    let s = db.store();
    let (c, one) = first_checkpoint(s);
    db.sql(AS_VERSION_9);
    // An older build's read of the tables once they are at version 10
    // fails on the renamed columns (it would read a new row's NULL arrays
    // as damage).
    let other = db.other();
    let old_read = "SELECT field_names FROM cp_checkpoints";
    let err = db.run(schema_client(&db).query(old_read, &[])).unwrap_err();
    let message = err.as_db_error().map(|e| e.message().to_owned());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("does not exist")),
        "{err:?}"
    );
    // The version-9 row reads back as it was, beside a new one.
    assert_eq!(
        block_on(other.latest_checkpoint("r")).unwrap(),
        Some(one.clone())
    );
    let two = rich_cp("r", 2, None);
    block_on(other.save_checkpoint(&c.lease, two.clone(), None)).unwrap();
    assert_eq!(
        block_on(other.list_checkpoints("r")).unwrap(),
        vec![one.clone(), two.clone()]
    );
    assert_eq!(
        db.sql_i64(
            "SELECT count(*) FROM cp_checkpoints WHERE meta IS NULL AND v9_loops IS NOT NULL"
        ),
        1
    );
    // Its arrays are still checked against its seal.
    db.sql("UPDATE cp_checkpoints SET v9_field_offsets = '{0,2}', v9_field_lens = '{2,3}' WHERE seq = 1");
    assert!(matches!(
        block_on(other.checkpoint("r", 1)),
        Err(Error::Decode { .. })
    ));
    // A row with neither is damaged, and says so.
    db.sql("UPDATE cp_checkpoints SET v9_loops = NULL WHERE seq = 1");
    match block_on(other.checkpoint("r", 1)) {
        Err(e @ Error::Decode { .. }) => {
            assert!(
                e.to_string().contains("neither `meta` nor its loops"),
                "{e}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(block_on(other.checkpoint("r", 2)).unwrap(), Some(two));
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn rows_written_before_checksums_still_load() {
    let Some(db) = Db::open("rows_written_before_checksums_still_load") else {
        return;
    };
    let s = db.store();
    let (c, one) = first_checkpoint(s);
    // As version-1 tables: no checksum column (nor a run version).
    db.sql(AS_VERSION_9);
    db.sql(
        "DROP INDEX cp_runs_queued, cp_runs_expiring, cp_runs_holder, cp_runs_due, cp_runs_held; \
         CREATE INDEX cp_runs_active ON cp_runs (ord) WHERE state < 3; \
         ALTER TABLE cp_checkpoints DROP COLUMN checksum; DROP INDEX cp_runs_parked; \
         ALTER TABLE cp_runs DROP COLUMN version; \
         DROP TABLE cp_joins; ALTER TABLE cp_runs DROP COLUMN parent; \
         ALTER TABLE cp_runs DROP COLUMN join_pending; \
         ALTER TABLE cp_runs DROP COLUMN IF EXISTS cancel_request; \
         UPDATE cp_schema_version SET version = 1",
    );
    let other = db.other();
    assert_eq!(
        block_on(other.latest_checkpoint("r")).unwrap(),
        Some(one.clone())
    );
    assert_eq!(block_on(other.list_checkpoints("r")).unwrap(), vec![one]);
    let two = rich_cp("r", 2, None);
    block_on(other.save_checkpoint(&c.lease, two.clone(), None)).unwrap();
    assert_eq!(block_on(other.latest_checkpoint("r")).unwrap(), Some(two));
    // NULL is "not checked": the old row's damage goes unseen.
    db.sql(
        "UPDATE cp_checkpoints SET data = set_bit(data, 32, 1 - get_bit(data, 32)) \
         WHERE run = 'r' AND seq = 1",
    );
    let old = block_on(other.checkpoint("r", 1)).unwrap().unwrap();
    assert_eq!(old.field_bytes(1), Some(&[1, 8][..]));
    assert!(block_on(other.checkpoint("r", 2)).is_ok());
    db.sql(
        "UPDATE cp_checkpoints SET data = set_bit(data, 32, 1 - get_bit(data, 32)) \
         WHERE run = 'r' AND seq = 2",
    );
    assert!(matches!(
        block_on(other.checkpoint("r", 2)),
        Err(Error::Decode { .. })
    ));
}

/// Every bit of a row's field bytes, and every bit of the numbers that
/// locate them (offsets, lengths, loop positions, site index), flipped one
/// at a time: each read of the checkpoint is refused (a decode error naming
/// the run), and reads back intact once the bit is flipped back.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn every_flipped_bit_of_a_row_is_refused() {
    let Some(db) = Db::open("every_flipped_bit_of_a_row_is_refused") else {
        return;
    };
    let s = db.store();
    let (_, one) = first_checkpoint(s);
    let mut flips = Vec::new();
    for bit in 0..one.data.len() * 8 {
        flips.push(format!(
            "data = set_bit(data, {bit}, 1 - get_bit(data, {bit}))"
        ));
    }
    // Every bit of what names and locates the fields, and the loop
    // positions (`meta`).
    let meta_bits = db.sql_i64("SELECT 8 * length(meta) FROM cp_checkpoints WHERE run = 'r'");
    assert!(meta_bits > 0);
    for bit in 0..meta_bits {
        flips.push(format!(
            "meta = set_bit(meta, {bit}, 1 - get_bit(meta, {bit}))"
        ));
    }
    for flip in &flips {
        let sql = format!("UPDATE cp_checkpoints SET {flip} WHERE run = 'r'");
        db.sql(&sql);
        match block_on(s.latest_checkpoint("r")) {
            Err(Error::Decode { run, .. }) if run == "r" => {}
            other => panic!("{flip}: {other:?}"),
        }
        // The same flip again restores the row.
        db.sql(&sql);
        assert_eq!(
            block_on(s.latest_checkpoint("r")).unwrap(),
            Some(one.clone()),
            "{flip}"
        );
    }
}

/// A row sealed in format 1 (before 2026-12-05: its metadata sum covered
/// the `site_index` column, which no record carries any more) is checked
/// against that column: it reads back intact, and a flipped bit of the
/// column is refused.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_row_sealed_in_format_1_is_checked_against_its_site_index() {
    let Some(db) = Db::open("a_row_sealed_in_format_1_is_checked_against_its_site_index") else {
        return;
    };
    let s = db.store();
    let (_, one) = first_checkpoint(s);
    let seal: String = crate::store::integrity::format_1_seal(&one, 5)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    db.sql(&format!(
        "UPDATE cp_checkpoints SET site_index = 5, checksum = '\\x{seal}'::bytea WHERE run = 'r'"
    ));
    assert_eq!(
        block_on(s.latest_checkpoint("r")).unwrap(),
        Some(one.clone())
    );
    for bit in 0..31 {
        let sql = format!(
            "UPDATE cp_checkpoints SET site_index = site_index # (1 << {bit}) WHERE run = 'r'"
        );
        db.sql(&sql);
        match block_on(s.latest_checkpoint("r")) {
            Err(Error::Decode { run, .. }) if run == "r" => {}
            other => panic!("bit {bit}: {other:?}"),
        }
        db.sql(&sql);
    }
    assert_eq!(block_on(s.latest_checkpoint("r")).unwrap(), Some(one));
}

/// The server process holding the advisory lock of worker id `worker` in
/// `db`'s schema, if any, asked on `client`.
fn lock_holder(db: &Db, client: &tokio_postgres::Client, worker: &str) -> Option<i32> {
    let key = format!("checkpoint-runtime worker {} {worker}", db.schema);
    db.run(client.query_opt(
        "SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted \
         AND l.objsubid = 1 \
         AND l.classid = ((hashtextextended($1, 0) >> 32) & 4294967295)::oid \
         AND l.objid = (hashtextextended($1, 0) & 4294967295)::oid",
        &[&key],
    ))
    .unwrap()
    .map(|row| row.get(0))
}

/// A plain client on `db`'s server (its connection runs on `db.rt`).
fn raw_client(db: &Db) -> tokio_postgres::Client {
    let target = Target::parse(&db.url, None).unwrap();
    db.run(conn::connect(db.rt.handle(), &target)).unwrap()
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_worker_hold_is_taken_again_after_its_session_ends() {
    let Some(db) = Db::open("a_worker_hold_is_taken_again_after_its_session_ends") else {
        return;
    };
    let s = db.store();
    let hold = db.run(s.hold_worker("w")).unwrap().expect("granted");
    let client = raw_client(&db);
    let first = lock_holder(&db, &client, "w").expect("the lock is held");
    let ended: bool = db
        .run(client.query_one("SELECT pg_terminate_backend($1)", &[&first]))
        .unwrap()
        .get(0);
    assert!(ended);
    // Taken again, by a new session of the same hold.
    let since = std::time::Instant::now();
    let again = loop {
        match lock_holder(&db, &client, "w") {
            Some(pid) if pid != first => break pid,
            _ => {}
        }
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "the hold was not taken again after its session ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_ne!(again, first);
    // Still this store's: another store cannot take it, and claims under
    // the id go out under the id itself.
    let other = db.other();
    assert!(db.run(other.hold_worker("w")).unwrap().is_none());
    new_run(s, "r1");
    let claimed = db.run(s.claim(&req("w", "i1"))).unwrap().claimed;
    assert_eq!(claimed.len(), 1);
    assert_eq!(&*claimed[0].lease.worker, "w");
    drop(hold);
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_worker_hold_taken_by_another_instance_meanwhile_is_given_up() {
    let Some(db) = Db::open("a_worker_hold_taken_by_another_instance_meanwhile_is_given_up") else {
        return;
    };
    let s = db.store();
    let _hold = db.run(s.hold_worker("w")).unwrap().expect("granted");
    new_run(s, "r1");
    let before = claim_one(s, "w", "i1");
    assert_eq!(&*before.lease.worker, "w");
    // Another instance's session takes the lock the moment the hold's
    // session ends: it queues for the lock before the hold can reconnect.
    let client = raw_client(&db);
    let holder = lock_holder(&db, &client, "w").expect("the lock is held");
    let key = format!("checkpoint-runtime worker {} w", db.schema);
    let rival = raw_client(&db);
    db.run(async {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&key];
        let take = rival.query_one("SELECT pg_advisory_lock(hashtextextended($1, 0))", &params);
        let end = async {
            // Let the rival's statement reach the server and queue first.
            tokio::time::sleep(Duration::from_millis(200)).await;
            client
                .query_one("SELECT pg_terminate_backend($1)", &[&holder])
                .await
        };
        let (took, ended) = tokio::join!(take, end);
        took.unwrap();
        ended.unwrap();
    });
    // The store notices, and from then on claims under `w~<instance>`
    // and refuses to renew its lease under `w`.
    new_run(s, "r2");
    let since = std::time::Instant::now();
    let claimed = loop {
        match db.run(s.claim(&req("w", "i1"))) {
            Ok(res) if !res.claimed.is_empty() => break res.claimed,
            Ok(_) => panic!("r2 was not claimed"),
            Err(e) => assert!(matches!(e, Error::Store { .. }), "{e}"),
        }
        assert!(since.elapsed() < Duration::from_secs(10), "never decided");
    };
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].run.id, "r2");
    assert_eq!(&*claimed[0].lease.worker, "w~i1");
    let renewed = db.run(s.renew("r1", &before.lease, Duration::from_secs(30)));
    assert!(
        matches!(renewed, Err(Error::LeaseLost { .. })),
        "{renewed:?}"
    );
    // The demoted lease renews as any other.
    db.run(s.renew("r2", &claimed[0].lease, Duration::from_secs(30)))
        .unwrap();
    drop(rival);
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_transaction_dropped_without_commit_is_rolled_back_at_once() {
    let Some(db) = Db::open("a_transaction_dropped_without_commit_is_rolled_back_at_once") else {
        return;
    };
    let s = db.store();
    new_run(s, "r");
    db.run(async {
        let mut conn = s.pool.get().await.unwrap();
        let mut cx = conn.begin().await.unwrap();
        // Locks the run's row, then is dropped (as on an early `?`).
        super::tables::runs::lock_run(&mut cx, "r").await.unwrap();
        cx.execute("UPDATE cp_runs SET attempt = 99 WHERE id = $1", &[&"r"])
            .await
            .unwrap();
    });
    // Another session gets the row lock (it would wait for good if the
    // transaction stayed open on the pooled connection).
    let client = raw_client(&db);
    let locked = db.run(async {
        client
            .batch_execute(&format!(
                "SET lock_timeout = '3s'; SET search_path TO {}",
                conn::quote_ident(&db.schema)
            ))
            .await?;
        client
            .query_one("SELECT attempt FROM cp_runs WHERE id = 'r' FOR UPDATE", &[])
            .await
    });
    let attempt: i32 = locked.expect("the row lock was released").get(0);
    assert_eq!(attempt, 0, "the update was rolled back");
    // The connection went back to the pool with no transaction open: a
    // transaction on it commits as usual.
    db.run(async {
        let mut conn = s.pool.get().await.unwrap();
        let mut cx = conn.begin().await.unwrap();
        cx.execute("UPDATE cp_runs SET attempt = 7 WHERE id = $1", &[&"r"])
            .await
            .unwrap();
        cx.commit().await.unwrap();
        // A transaction that ran nothing commits nothing.
        conn.begin().await.unwrap().commit().await.unwrap();
    });
    assert_eq!(db.run(s.load_run("r")).unwrap().unwrap().attempt, 7);
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn renewing_many_waits_briefly_for_a_locked_row_and_answers_for_each() {
    let Some(db) = Db::open("renewing_many_waits_briefly_for_a_locked_row_and_answers_for_each")
    else {
        return;
    };
    let s = db.store();
    new_run(s, "r1");
    new_run(s, "r2");
    let mut short = req("a", "a1");
    short.ttl = Duration::from_millis(0);
    let claimed = db.run(s.claim(&short)).unwrap().claimed;
    let runs: Vec<(Arc<str>, Lease)> = claimed
        .iter()
        .map(|c| (Arc::from(c.run.id.as_str()), c.lease.clone()))
        .collect();
    assert_eq!(runs.len(), 2);
    let url = format!("{}{}schema={}", db.url, sep(&db.url), db.schema);
    let target = Target::parse(&url, None).unwrap();
    let locker = db.run(conn::connect(db.rt.handle(), &target)).unwrap();
    let lock_r1 = "BEGIN; SELECT 1 FROM cp_runs WHERE id = 'r1' FOR UPDATE";
    // A lock released within the patience (a quarter of the TTL): both renewed.
    db.run(locker.batch_execute(lock_r1)).unwrap();
    let results = db.run(async {
        let commit = async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            locker.batch_execute("COMMIT").await.unwrap();
        };
        let (results, ()) = tokio::join!(s.renew_many(&runs, Duration::from_secs(4)), commit);
        results
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // A lock held past it: the locked run is told so, the other renewed.
    db.run(locker.batch_execute(lock_r1)).unwrap();
    let began = std::time::Instant::now();
    let results = db.run(s.renew_many(&runs, Duration::from_millis(400)));
    db.run(locker.batch_execute("COMMIT")).unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    let at = |id: &str| runs.iter().position(|(r, _)| &**r == id).unwrap();
    assert!(
        matches!(&results[at("r1")], Err(Error::Store { message, .. }) if message.contains("locked")),
        "{results:?}"
    );
    assert!(results[at("r2")].is_ok(), "{results:?}");
}

/// A client on `db`'s tables (its connection runs on `db.rt`).
fn schema_client(db: &Db) -> tokio_postgres::Client {
    let url = format!("{}{}schema={}", db.url, sep(&db.url), db.schema);
    let target = Target::parse(&url, None).unwrap();
    db.run(conn::connect(db.rt.handle(), &target)).unwrap()
}

/// Everything stored for run `id` but its name (and creation order): its
/// row, its checkpoints (without their seals, which cover the run's name),
/// its history, as JSON texts, to compare two runs.
fn stored(db: &Db, client: &tokio_postgres::Client, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    for sql in [
        "SELECT (to_jsonb(r) - 'id' - 'ord')::text FROM cp_runs r WHERE id = $1",
        "SELECT (to_jsonb(c) - 'run' - 'checksum' - 'event_id')::text FROM cp_checkpoints c \
         WHERE run = $1 ORDER BY seq",
        "SELECT (to_jsonb(h) - 'id' - 'run')::text FROM cp_history h WHERE run = $1 ORDER BY id",
    ] {
        for row in db.run(client.query(sql, &[&id])).unwrap() {
            out.push(row.get(0));
        }
    }
    out
}

/// `cp` as a checkpoint of run `run` (all else the same, its time too).
fn of_run(cp: &CheckpointRecord, run: &str) -> Arc<CheckpointRecord> {
    let mut copy = cp.clone();
    copy.run = Arc::from(run);
    Arc::new(copy)
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_save_its_statement_refuses_changes_nothing_and_says_why() {
    let Some(db) = Db::open("a_save_its_statement_refuses_changes_nothing_and_says_why") else {
        return;
    };
    let s = db.store();
    let client = schema_client(&db);
    // Refused by the statement (nothing written), then by the store with
    // the error `check` accepts.
    let refused = |lease: &Lease, cp: Arc<CheckpointRecord>, check: &dyn Fn(&Error) -> bool| {
        let before = stored(&db, &client, &cp.run);
        let fast = db.run(async {
            let mut conn = s.pool.get().await.unwrap();
            super::fused::save::save_in_one(&mut conn, lease, &cp, Some(1), None).await
        });
        assert!(!fast.unwrap(), "saved #{} of {}", cp.seq, cp.run);
        assert_eq!(stored(&db, &client, &cp.run), before);
        let err = block_on(s.save_checkpoint(lease, cp.clone(), Some(1))).unwrap_err();
        assert!(check(&err), "#{} of {}: {err:?}", cp.seq, cp.run);
        assert_eq!(stored(&db, &client, &cp.run), before);
    };
    let lost = |e: &Error| matches!(e, Error::LeaseLost { .. });
    new_run(s, "r");
    let mut short = req("a", "a1");
    short.ttl = Duration::from_millis(0);
    let old = block_on(s.claim(&short)).unwrap().claimed.remove(0);
    block_on(s.save_checkpoint(&old.lease, cp("r", 1), None)).unwrap();
    // Unknown run; a seq out of order (ahead, again, 0).
    refused(&old.lease, cp("nope", 1), &|e| {
        matches!(e, Error::UnknownRun { .. })
    });
    for seq in [3, 1, 0] {
        refused(
            &old.lease,
            cp("r", seq),
            &|e| matches!(e, Error::Internal { message } if message.contains("out of order")),
        );
    }
    // Taken over (its lease had expired).
    let new = claim_one(s, "b", "b1");
    refused(&old.lease, cp("r", 2), &lost);
    // Another instance, another worker, the next epoch: not the lease.
    for lease in [
        Lease {
            instance: Arc::from("b2"),
            ..new.lease.clone()
        },
        Lease {
            worker: Arc::from("a"),
            ..new.lease.clone()
        },
        Lease {
            epoch: new.lease.epoch + 1,
            ..new.lease.clone()
        },
    ] {
        refused(&lease, cp("r", 2), &lost);
    }
    // A damaged row: its error, as the fenced save reads it.
    db.run(client.batch_execute("UPDATE cp_runs SET state = 1, signal = NULL"))
        .unwrap();
    refused(
        &new.lease,
        cp("r", 2),
        &|e| matches!(e, Error::Store { message, .. } if message.contains("waits for no signal")),
    );
    db.run(client.batch_execute("UPDATE cp_runs SET state = 0, wake_seq = -1"))
        .unwrap();
    refused(
        &new.lease,
        cp("r", 2),
        &|e| matches!(e, Error::Store { message, .. } if message.contains("wake seq")),
    );
    db.run(client.batch_execute("UPDATE cp_runs SET wake_seq = NULL"))
        .unwrap();
    block_on(s.save_checkpoint(&new.lease, cp("r", 2), Some(1))).unwrap();
    // A parked run under the lease (not a state a run gets into, but one the
    // fenced save accepts): the statement leaves it to the fenced save,
    // which saves it.
    let reason = conn::to_json(&Error::store("parked")).unwrap();
    db.run(client.execute("UPDATE cp_runs SET state = 6, error = $1", &[&reason]))
        .unwrap();
    let fast = db.run(async {
        let mut conn = s.pool.get().await.unwrap();
        super::fused::save::save_in_one(&mut conn, &new.lease, &cp("r", 3), None, None).await
    });
    assert!(!fast.unwrap());
    block_on(s.save_checkpoint(&new.lease, cp("r", 3), Some(1))).unwrap();
    let run = block_on(s.load_run("r")).unwrap().unwrap();
    assert_eq!((run.state, run.latest_seq), (RunState::Ready, 3));
    // Cancelled; finished.
    assert!(block_on(s.cancel("r")).unwrap());
    refused(&new.lease, cp("r", 4), &|e| {
        matches!(e, Error::Cancelled { .. })
    });
    new_run(s, "f");
    let f = claim_one(s, "a", "a1");
    block_on(s.finish(
        "f",
        &f.lease,
        Outcome::Completed {
            output: Arc::from(&b"1"[..]),
            error: None,
        },
    ))
    .unwrap();
    refused(&f.lease, cp("f", 1), &lost);
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_save_waiting_for_the_run_row_is_fenced_by_what_committed_meanwhile() {
    let Some(db) = Db::open("a_save_waiting_for_the_run_row_is_fenced_by_what_committed_meanwhile")
    else {
        return;
    };
    let s = db.store();
    let locker = schema_client(&db);
    new_run(s, "r");
    let c = claim_one(s, "a", "a1");
    // While another transaction holds the run's row, the save waits for
    // it, then judges the row that transaction committed.
    let save_during = |holder: &'static str, cp: Arc<CheckpointRecord>| {
        db.run(locker.batch_execute(holder)).unwrap();
        let began = std::time::Instant::now();
        let saved = db.run(async {
            let commit = async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                locker.batch_execute("COMMIT").await.unwrap();
            };
            let save = async {
                let mut conn = s.pool.get().await.unwrap();
                super::fused::save::save_in_one(&mut conn, &c.lease, &cp, None, None).await
            };
            tokio::join!(save, commit).0
        });
        assert!(began.elapsed() >= Duration::from_millis(200));
        saved.unwrap()
    };
    // A renewal: still the lease; saved.
    let renew = "BEGIN; UPDATE cp_runs SET lease_expires = lease_expires + 1 WHERE id = 'r'";
    assert!(save_during(renew, cp("r", 1)));
    // A takeover (as a claim writes it): fenced off, nothing written.
    let before = stored(&db, &locker, "r");
    let takeover = "BEGIN; UPDATE cp_runs SET epoch = epoch + 1, lease_worker = 'b', \
                    lease_instance = 'b1' WHERE id = 'r'";
    assert!(!save_during(takeover, cp("r", 2)));
    assert_eq!(stored(&db, &locker, "r")[1..], before[1..]);
    let err = block_on(s.save_checkpoint(&c.lease, cp("r", 2), None)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert_eq!(block_on(s.latest_checkpoint("r")).unwrap().unwrap().seq, 1);
}

/// The server CPU time (user + system) of backend `pid` so far, in
/// microseconds (from `/proc`: the server must run on this machine).
fn backend_cpu_us(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15, 12 and 13 after the `)`.
    (ticks(11) + ticks(12)) * 1e6 / 100.0
}

/// A checkpoint save as one statement ([`save::save_in_one`]), as the
/// fenced transaction ([`locked::save_locked`]) and a raw autocommit `INSERT`
/// of the same bytes, in alternating rounds on one connection: the median
/// latency of each and the server's CPU per call. `cargo test -p
/// checkpoint-runtime --lib --all-features -- --ignored bench_save --nocapture`
#[test]
#[ignore]
fn bench_save() {
    let Some(db) = Db::open("bench_save") else {
        return;
    };
    let s = db.store();
    new_run(s, "one");
    new_run(s, "locked");
    let mut both = req("a", "a1");
    both.limit = 2;
    let lease = block_on(s.claim(&both)).unwrap().claimed[0].lease.clone();
    let data: Vec<u8> = (0..1000).map(|i| i as u8).collect();
    let field = FieldRecord {
        name: Cow::Borrowed("state"),
        type_name: Cow::Borrowed("alloc::vec::Vec<u8>"),
        offset: 0,
        len: data.len(),
    };
    let make = |run: &str, seq: u64| {
        Arc::new(CheckpointRecord::new(
            Arc::from(run),
            seq,
            Cow::Borrowed("step"),
            Some(Cow::Borrowed("step")),
            vec![seq],
            vec![field.clone()],
            data.clone(),
            None,
            SystemTime::now(),
        ))
    };
    let (rounds, per_round) = (8, 250u64);
    let mut took: [Vec<Duration>; 3] = Default::default();
    let mut cpu = [0f64; 3];
    db.run(async {
        let mut conn = s.pool.get().await.unwrap();
        let pid: i32 = conn
            .plain()
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        conn.plain()
            .batch("CREATE TABLE raw_floor (id bigserial PRIMARY KEY, data bytea NOT NULL)")
            .await
            .unwrap();
        let mut seq = [0u64; 2];
        for _ in 0..rounds {
            for (i, run) in ["one", "locked"].into_iter().enumerate() {
                let before = backend_cpu_us(pid);
                for _ in 0..per_round {
                    seq[i] += 1;
                    let cp = make(run, seq[i]);
                    let t = std::time::Instant::now();
                    if i == 0 {
                        assert!(super::fused::save::save_in_one(
                            &mut conn,
                            &lease,
                            &cp,
                            Some(10),
                            None
                        )
                        .await
                        .unwrap());
                    } else {
                        locked::save_locked(&mut conn, &lease, &cp, Some(10))
                            .await
                            .unwrap();
                    }
                    took[i].push(t.elapsed());
                }
                cpu[i] += backend_cpu_us(pid) - before;
            }
            let before = backend_cpu_us(pid);
            for _ in 0..per_round {
                let t = std::time::Instant::now();
                conn.plain()
                    .execute("INSERT INTO raw_floor (data) VALUES ($1)", &[&data])
                    .await
                    .unwrap();
                took[2].push(t.elapsed());
            }
            cpu[2] += backend_cpu_us(pid) - before;
        }
    });
    let n = (rounds * per_round) as f64;
    for (i, what) in ["one statement", "fenced transaction", "raw INSERT"]
        .into_iter()
        .enumerate()
    {
        took[i].sort();
        eprintln!(
            "{what}: median {:?}, server CPU {:.0} us per call",
            took[i][took[i].len() / 2],
            cpu[i] / n
        );
    }
}

/// Saves `cps` (each under its lease) at the same time, from one task: the
/// first ones go alone, the rest queue and are sent as batches.
fn save_together(
    db: &Db,
    s: &PostgresStore,
    cps: &[(Lease, Arc<CheckpointRecord>)],
) -> Vec<Result<(), Error>> {
    db.run(futures::future::join_all(
        cps.iter()
            .map(|(lease, cp)| s.save_checkpoint(lease, cp.clone(), None)),
    ))
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_batch_refuses_the_saves_of_runs_taken_over_and_stores_the_rest() {
    refuses_taken_over_in_a_batch(
        "a_batch_refuses_the_saves_of_runs_taken_over_and_stores_the_rest",
        30,
    );
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_batch_planned_for_its_size_refuses_the_saves_of_runs_taken_over() {
    // More saves than `save_batch::REPLAN_FROM`: the batch is planned for
    // its own sizes, not run with the prepared statement's generic plan.
    refuses_taken_over_in_a_batch(
        "a_batch_planned_for_its_size_refuses_the_saves_of_runs_taken_over",
        90,
    );
}

/// `n` runs save seq 1 together; every third is then taken over (and its
/// new holder saves seq 2); the old holder's saves of seq 2, sent together,
/// are refused for those and stored for the others.
fn refuses_taken_over_in_a_batch(name: &str, n: usize) {
    let Some(db) = Db::open(name) else {
        return;
    };
    let (a, b) = (db.store(), db.other());
    let ids: Vec<String> = (0..n).map(|i| format!("g{i:02}")).collect();
    for id in &ids {
        new_run(a, id);
    }
    let mut short = req("a", "a1");
    short.ttl = Duration::from_millis(50);
    short.limit = ids.len();
    let old = block_on(a.claim(&short)).unwrap().claimed;
    assert_eq!(old.len(), ids.len());
    let first: Vec<_> = old
        .iter()
        .map(|c| (c.lease.clone(), cp(&c.run.id, 1)))
        .collect();
    assert!(save_together(&db, a, &first).iter().all(Result::is_ok));
    // Every third run is taken over by b, which saves seq 2 first.
    std::thread::sleep(Duration::from_millis(80));
    let taken: Vec<&String> = ids.iter().step_by(3).collect();
    let mut mine = Vec::new();
    for id in &taken {
        let mut only = req("b", "b1");
        only.only = Some((*id).clone());
        let new = block_on(b.claim(&only)).unwrap().claimed.remove(0);
        let cp = rich_cp(id, 2, None);
        block_on(b.save_checkpoint(&new.lease, cp.clone(), None)).unwrap();
        mine.push(cp);
    }
    // a saves seq 2 of all of them at once, not in the order of their ids
    // (in which a batch locks them): each still gets its own answer.
    let (batches, rows, _) = a.group.batches();
    let mut shuffled: Vec<&Claimed> = old.iter().collect();
    shuffled.sort_by_key(|c| c.run.id.chars().rev().collect::<String>());
    let stale: Vec<_> = shuffled
        .iter()
        .map(|c| (c.lease.clone(), cp(&c.run.id, 2)))
        .collect();
    let results = save_together(&db, a, &stale);
    let (more, more_rows, _) = a.group.batches();
    // A few went alone, the others in batches (a third of them fenced
    // off).
    assert!(more > batches, "no batch was sent");
    assert!(
        more_rows - rows >= (n as u64) / 2,
        "{} saved in batches",
        more_rows - rows
    );
    for ((lease, cp), result) in stale.iter().zip(&results) {
        let id = &*cp.run;
        if taken.iter().any(|t| **t == id) {
            assert!(
                matches!(result, Err(Error::LeaseLost { run, .. }) if run == id),
                "{id}: {result:?}"
            );
        } else {
            assert!(result.is_ok(), "{id}: {result:?}");
            assert_eq!(block_on(a.latest_checkpoint(id)).unwrap(), Some(cp.clone()));
            let run = block_on(a.load_run(id)).unwrap().unwrap();
            assert_eq!((run.latest_seq, run.epoch), (2, lease.epoch));
        }
    }
    // The new owner's checkpoints are intact.
    for cp in mine {
        assert_eq!(
            block_on(a.latest_checkpoint(&cp.run)).unwrap(),
            Some(cp.clone())
        );
        let run = block_on(a.load_run(&cp.run)).unwrap().unwrap();
        assert_eq!(run.lease.unwrap().worker, "b");
    }
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_save_failing_in_a_batch_fails_alone() {
    let Some(db) = Db::open("a_save_failing_in_a_batch_fails_alone") else {
        return;
    };
    let s = db.store();
    let ids: Vec<String> = (0..20).map(|i| format!("h{i:02}")).collect();
    for id in &ids {
        new_run(s, id);
    }
    let mut all = req("a", "a1");
    all.limit = ids.len();
    let claimed = block_on(s.claim(&all)).unwrap().claimed;
    assert_eq!(claimed.len(), ids.len());
    // The last ones: a label the server refuses (aborts the statement, and
    // with it the batch's transaction), a run deleted meanwhile.
    let (bad, gone) = (&ids[18], &ids[19]);
    db.sql(&format!("DELETE FROM cp_runs WHERE id = '{gone}'"));
    let (batches, _, _) = s.group.batches();
    let saves: Vec<_> = claimed
        .iter()
        .map(|c| {
            let mut cp = (*rich_cp(&c.run.id, 1, None)).clone();
            if &c.run.id == bad {
                cp.label = Some(Cow::Borrowed("bad\0label"));
            }
            (c.lease.clone(), Arc::new(cp))
        })
        .collect();
    let results = save_together(&db, s, &saves);
    for ((_, cp), result) in saves.iter().zip(&results) {
        let id = &*cp.run;
        if id == bad {
            assert!(matches!(result, Err(Error::Store { .. })), "{result:?}");
            assert_eq!(block_on(s.latest_checkpoint(id)).unwrap(), None);
        } else if id == gone {
            assert!(
                matches!(result, Err(Error::UnknownRun { .. })),
                "{result:?}"
            );
        } else {
            assert!(result.is_ok(), "{id}: {result:?}");
            assert_eq!(block_on(s.latest_checkpoint(id)).unwrap(), Some(cp.clone()));
        }
    }
    // Then a batch without them is written as one.
    let next: Vec<_> = claimed[..18]
        .iter()
        .map(|c| (c.lease.clone(), cp(&c.run.id, 2)))
        .collect();
    assert!(save_together(&db, s, &next).iter().all(Result::is_ok));
    assert!(s.group.batches().0 > batches, "no batch was sent");
    for (_, cp) in &next {
        assert_eq!(
            block_on(s.latest_checkpoint(&cp.run)).unwrap(),
            Some(cp.clone())
        );
    }
    // Each event once: started, saved 1 (but for the bad one), saved 2.
    for id in &ids[..18] {
        let history = block_on(s.history(id)).unwrap();
        assert_eq!(history.len(), 3, "{id}: {history:?}");
    }
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn saves_one_after_another_are_not_batched() {
    let Some(db) = Db::open("saves_one_after_another_are_not_batched") else {
        return;
    };
    let s = db.store();
    new_run(s, "r");
    let c = claim_one(s, "a", "a1");
    for seq in 1..=5 {
        block_on(s.save_checkpoint(&c.lease, cp("r", seq), Some(2))).unwrap();
    }
    assert_eq!(s.group.batches(), (0, 0, 0));
    // Two at a time go alone too (two writers).
    new_run(s, "q");
    let d = claim_one(s, "a", "a1");
    let two = [(c.lease.clone(), cp("r", 6)), (d.lease.clone(), cp("q", 1))];
    assert!(save_together(&db, s, &two).iter().all(Result::is_ok));
    assert_eq!(s.group.batches(), (0, 0, 0));
}

/// Rows of `table` naming run `id`.
fn rows_of(db: &Db, client: &tokio_postgres::Client, table: &str, id: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table} WHERE run = $1");
    db.run(client.query_one(&sql, &[&id])).unwrap().get(0)
}

#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn version_3_tables_lose_their_foreign_keys_and_keep_their_rows() {
    let Some(db) = Db::open("version_3_tables_lose_their_foreign_keys_and_keep_their_rows") else {
        return;
    };
    let s = db.store();
    let client = schema_client(&db);
    new_run(s, "r");
    new_run(s, "gone");
    let mut both = req("a", "a1");
    both.limit = 2;
    let claimed = block_on(s.claim(&both)).unwrap().claimed;
    for c in &claimed {
        block_on(s.save_checkpoint(&c.lease, rich_cp(&c.run.id, 1, None), None)).unwrap();
    }
    let history = block_on(s.history("r")).unwrap();
    // As version-3 tables: events as rows of cp_history, foreign keys, a
    // primary key, no trigger.
    db.sql(AS_VERSION_9);
    db.sql(
        "INSERT INTO cp_history (id, run, at, event) OVERRIDING SYSTEM VALUE \
           SELECT event_id, run, created_at, jsonb_build_object('CheckpointSaved', \
             jsonb_build_object('seq', seq, 'label', label)) FROM cp_checkpoints; \
         ALTER TABLE cp_checkpoints DROP COLUMN event_id; \
         DROP TRIGGER cp_runs_deleted ON cp_runs; DROP FUNCTION cp_runs_deleted(); \
         ALTER TABLE cp_history ADD PRIMARY KEY (id); \
         ALTER TABLE cp_checkpoints ADD CONSTRAINT cp_checkpoints_run_fkey FOREIGN KEY (run) \
           REFERENCES cp_runs (id) ON DELETE CASCADE; \
         ALTER TABLE cp_history ADD CONSTRAINT cp_history_run_fkey FOREIGN KEY (run) \
           REFERENCES cp_runs (id) ON DELETE CASCADE; \
         DROP TABLE cp_joins; ALTER TABLE cp_runs DROP COLUMN parent; \
         ALTER TABLE cp_runs DROP COLUMN join_pending; \
         ALTER TABLE cp_runs DROP COLUMN IF EXISTS cancel_request; \
         DROP INDEX cp_runs_queued, cp_runs_expiring, cp_runs_holder, cp_runs_due, cp_runs_held; \
         CREATE INDEX cp_runs_active ON cp_runs (ord) WHERE state < 3; \
         UPDATE cp_schema_version SET version = 3",
    );
    let other = db.other();
    let constraints: i64 = db
        .run(client.query_one(
            "SELECT count(*) FROM pg_constraint \
             WHERE conrelid IN ('cp_checkpoints'::regclass, 'cp_history'::regclass) \
               AND contype IN ('f', 'p') AND conname <> 'cp_checkpoints_pkey'",
            &[],
        ))
        .unwrap()
        .get(0);
    assert_eq!(constraints, 0);
    assert_eq!(block_on(other.history("r")).unwrap(), history);
    let c = &claimed[0];
    assert_eq!(c.run.id, "r");
    let two = rich_cp(&c.run.id, 2, None);
    block_on(other.save_checkpoint(&c.lease, two.clone(), Some(1))).unwrap();
    assert_eq!(
        block_on(other.latest_checkpoint(&c.run.id)).unwrap(),
        Some(two)
    );
    // The old row's event and the new one's, in order (retention kept 2
    // only, and moved 1's event, an old row's, nowhere: it is in cp_history).
    let events: Vec<Event> = block_on(other.history("r"))
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect();
    let mut want: Vec<Event> = history.into_iter().map(|e| e.event).collect();
    want.push(Event::CheckpointSaved {
        seq: 2,
        label: Some("task_done".into()),
    });
    assert_eq!(events, want);
    assert_eq!(block_on(other.list_checkpoints("r")).unwrap().len(), 1);
    // A run deleted by hand takes its rows with it, as ON DELETE CASCADE did.
    let gone = &claimed[1].run.id;
    assert!(rows_of(&db, &client, "cp_history", gone) > 0);
    db.sql(&format!("DELETE FROM cp_runs WHERE id = '{gone}'"));
    for table in ["cp_checkpoints", "cp_history"] {
        assert_eq!(rows_of(&db, &client, table, gone), 0, "{table}");
    }
    assert!(rows_of(&db, &client, "cp_checkpoints", &c.run.id) > 0);
}

mod delta;
mod fused;

/// The batch statement sends each row's chains as an array literal
/// (`CpColumns`): every number reads back exactly as it was.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn array_literals_read_back_exactly() {
    use super::tables::checkpoints::numbers_literal;
    let Some(db) = Db::open("array_literals_read_back_exactly") else {
        return;
    };
    let client = raw_client(&db);
    for case in [vec![], vec![0], vec![i64::MIN, -1, 0, 1, i64::MAX]] {
        let literal = numbers_literal(&case);
        let row = db
            .run(client.query_one("SELECT $1::text::bigint[]", &[&literal]))
            .unwrap();
        let back: Vec<i64> = row.get(0);
        assert_eq!(back, case, "{literal}");
    }
}

/// Field names, types and schema keys, whatever they hold, come back
/// exactly as saved, by a lone save and by a batch of saves (both write
/// them as the row's `meta`).
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn odd_field_names_and_types_read_back_exactly() {
    let Some(db) = Db::open("odd_field_names_and_types_read_back_exactly") else {
        return;
    };
    let texts = [
        "",
        "NULL",
        "a,b",
        "{x}",
        "\"quoted\"",
        "back\\slash",
        "  lead and trail  ",
        "tab\tnew\nline\r",
        "ünïcödé ✓ 𝄞",
        "alloc::vec::Vec<(u32, core::option::Option<&'static str>)>",
    ];
    let odd = |run: &str, seq: u64| {
        let fields = texts
            .iter()
            .enumerate()
            .map(|(i, t)| FieldRecord {
                name: Cow::Owned(t.to_string()),
                type_name: Cow::Owned(texts[texts.len() - 1 - i].to_string()),
                offset: i,
                len: 1,
            })
            .collect();
        let schemas: Vec<Option<Cow<'static, str>>> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| (i % 3 != 0).then(|| Cow::Owned(t.to_string())))
            .collect();
        Arc::new(
            CheckpointRecord::new(
                Arc::from(run),
                seq,
                Cow::Borrowed("site"),
                None,
                vec![u64::from(u32::MAX) + 1, 0, i64::MAX as u64],
                fields,
                (0..texts.len() as u8).collect(),
                None,
                SystemTime::now(),
            )
            .with_schemas(schemas),
        )
    };
    let s = db.store();
    let runs: Vec<String> = (0..40).map(|i| format!("odd-{i}")).collect();
    for id in &runs {
        new_run(s, id);
    }
    let got = block_on(s.claim(&ClaimRequest {
        limit: runs.len(),
        ..req("w", "w1")
    }))
    .unwrap();
    assert_eq!(got.claimed.len(), runs.len());
    // Saved at once, so that the group commit batches most of them.
    let saves: Vec<_> = got
        .claimed
        .iter()
        .map(|c| (c.lease.clone(), odd(&c.run.id, 1)))
        .collect();
    for r in save_together(&db, s, &saves) {
        r.unwrap();
    }
    let batched = s.group.batches().1;
    assert!(batched > 0, "no save went through a batch");
    for (_, cp) in &saves {
        assert_eq!(
            block_on(s.latest_checkpoint(&cp.run)).unwrap().as_ref(),
            Some(cp),
            "{}",
            cp.run
        );
    }
}

/// The end of a top-level run in one round trip (`finish.rs`) leaves a run
/// that another run joins to the fenced transaction, which wakes the
/// joiner: whether the join committed before the end began, or while the
/// end waited for the join's lock on the run's row (the end's statement
/// cannot see that join: the guard after it does).
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn an_end_in_one_round_trip_leaves_a_joined_run_to_the_fenced_end() {
    let Some(db) = Db::open("an_end_in_one_round_trip_leaves_a_joined_run_to_the_fenced_end")
    else {
        return;
    };
    let store = db.store();
    let url = format!("{}{}schema={}", db.url, sep(&db.url), db.schema);
    let raw = db.run(async {
        let target = Target::parse(&url, None).unwrap();
        conn::connect(&tokio::runtime::Handle::current(), &target)
            .await
            .unwrap()
    });
    let done = Outcome::Completed {
        output: Arc::from(&b"1"[..]),
        error: None,
    };
    let pending = |raw: &tokio_postgres::Client, waiter: &str| {
        db.run(async {
            let joins: i64 = raw
                .query_one("SELECT count(*) FROM cp_joins", &[])
                .await
                .unwrap()
                .get(0);
            let left: i32 = raw
                .query_one("SELECT join_pending FROM cp_runs WHERE id = $1", &[&waiter])
                .await
                .unwrap()
                .get(0);
            (joins, left)
        })
    };
    for (i, during) in [false, true].into_iter().enumerate() {
        let (top, waiter) = (format!("top{i}"), format!("waiter{i}"));
        new_run(store, &top);
        new_run(store, &waiter);
        let mut only = req("w", "w1");
        only.only = Some(top.clone());
        let c = block_on(store.claim(&only)).unwrap().claimed.remove(0);
        let join = format!(
            "INSERT INTO cp_joins (child, waiter) VALUES ('{top}', '{waiter}'); \
             UPDATE cp_runs SET join_pending = 1 WHERE id = '{waiter}'"
        );
        if during {
            // The join holds the run's row, as `children::lock_children`
            // does, while the end is under way; it commits meanwhile.
            db.run(raw.batch_execute(&format!(
                "BEGIN; SELECT 1 FROM cp_runs WHERE id = '{top}' FOR SHARE"
            )))
            .unwrap();
            let end = db.rt.spawn({
                let store = db.other();
                let (lease, done) = (c.lease.clone(), done.clone());
                let top = top.clone();
                async move { store.finish(&top, &lease, done).await }
            });
            std::thread::sleep(Duration::from_millis(300));
            assert!(!end.is_finished(), "the end waits for the join's lock");
            db.run(raw.batch_execute(&format!("{join}; COMMIT")))
                .unwrap();
            db.run(end).unwrap().unwrap();
        } else {
            db.run(raw.batch_execute(&join)).unwrap();
            block_on(store.finish(&top, &c.lease, done.clone())).unwrap();
        }
        assert_eq!(
            pending(&raw, &waiter),
            (0, 0),
            "join {}: the run's end counted it for its joiner",
            if during {
                "during the end"
            } else {
                "before the end"
            }
        );
        let run = block_on(store.load_run(&top)).unwrap().unwrap();
        assert!(matches!(run.state, RunState::Completed { .. }), "{run:?}");
        assert!(run.lease.is_none());
    }
}

/// Starts made at the same time share statements (`create_batch`), and
/// each answers as it would alone: on two stores at once, 300 starts of
/// 200 ids (some twice in the burst, some on both stores, some existing
/// before it) create each run once, with one `Started` event, and every
/// other start is told the run exists, with its record.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn starts_at_the_same_time_share_statements_and_answer_each() {
    let Some(db) = Db::open("starts_at_the_same_time_share_statements_and_answer_each") else {
        return;
    };
    let (a, b) = (db.store(), db.other());
    for i in 0..20 {
        new_run(a, &format!("r{i:03}"));
    }
    fn start(
        store: &PostgresStore,
        id: String,
    ) -> impl std::future::Future<Output = (String, Result<Created, Error>)> + '_ {
        let run = crate::store::NewRun {
            id: id.clone(),
            workflow: "wf".into(),
            input: Arc::from(id.as_bytes()),
            version: 1,
            trace: None,
            parent: None,
            max_running: None,
            options: Default::default(),
        };
        let f = store.create_run(run);
        async move { (id, f.await) }
    }
    // r000-r019 exist; r020-r199 are new; r150-r199 are started twice on
    // `a` and once more on `b`.
    let ids_a: Vec<String> = (0..200)
        .chain(150..200)
        .map(|i| format!("r{i:03}"))
        .collect();
    let ids_b: Vec<String> = (150..200).map(|i| format!("r{i:03}")).collect();
    let answers = db.run(async {
        let (x, y) = futures::join!(
            futures::future::join_all(ids_a.into_iter().map(|id| start(a, id))),
            futures::future::join_all(ids_b.into_iter().map(|id| start(&b, id))),
        );
        x.into_iter().chain(y).collect::<Vec<_>>()
    });
    assert!(
        a.creates.batched() > 0,
        "a burst of starts shares statements"
    );
    let mut new = std::collections::HashMap::<String, usize>::new();
    for (id, answer) in &answers {
        match answer {
            Ok(Created::New) => *new.entry(id.clone()).or_default() += 1,
            Ok(Created::Existing(rec)) => {
                assert_eq!(&rec.id, id);
                let input: &[u8] = if id.as_str() < "r020" {
                    b"null"
                } else {
                    id.as_bytes()
                };
                assert_eq!(&*rec.input, input, "{id}: the existing run's own record");
            }
            Err(e) => panic!("{id}: {e}"),
        }
    }
    for i in 0..200 {
        let id = format!("r{i:03}");
        let created = new.get(&id).copied().unwrap_or(0);
        assert_eq!(created, usize::from(i >= 20), "{id}: created once, if new");
        let run = block_on(a.load_run(&id)).unwrap().unwrap();
        assert_eq!(run.state, RunState::Ready, "{id}");
        let history = block_on(a.history(&id)).unwrap();
        let started = history
            .iter()
            .filter(|h| matches!(h.event, Event::Started { .. }))
            .count();
        assert_eq!(started, 1, "{id}: {history:?}");
    }
    let all = block_on(a.list_runs(&Default::default())).unwrap();
    assert_eq!(all.len(), 200);
}

/// Ends at the same time share transactions (`finish::FINISH_MANY`), and
/// each answers as it would alone: 121 runs end in two bursts, among them one
/// under a lease it lost (refused with `LeaseLost`, the run left to its new
/// holder), one that another run joins (its joiner counted, which the
/// batch leaves to the fenced end) and one child run (whose end the batch
/// leaves to the fenced end too). Every other run is completed with its
/// own output and one `Completed` event.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn ends_at_the_same_time_share_transactions_and_answer_each() {
    let Some(db) = Db::open("ends_at_the_same_time_share_transactions_and_answer_each") else {
        return;
    };
    let store = db.store();
    let ids: Vec<String> = (0..120).map(|i| format!("r{i:03}")).collect();
    for id in &ids {
        new_run(store, id);
    }
    let child = crate::store::NewRun {
        id: "r120".into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: Some("r000".into()),
        max_running: None,
        options: Default::default(),
    };
    block_on(store.create_run(child.clone())).unwrap();
    // r121, spawned with a bound of one running child, is held until r120
    // ends.
    let held = crate::store::NewRun {
        id: "r121".into(),
        max_running: Some(1),
        options: Default::default(),
        ..child
    };
    block_on(store.create_run(held)).unwrap();
    let mut all = req("w", "w1");
    all.limit = 200;
    let mut claimed = block_on(store.claim(&all)).unwrap().claimed;
    claimed.sort_by(|a, b| a.run.id.cmp(&b.run.id));
    assert_eq!(claimed.len(), 121);
    // r007's lease is lost: another worker took the run over.
    db.sql("UPDATE cp_runs SET epoch = epoch + 1, lease_worker = 'x' WHERE id = 'r007'");
    new_run(store, "waiter");
    db.sql(
        "INSERT INTO cp_joins (child, waiter) VALUES ('r011', 'waiter'); \
         UPDATE cp_runs SET join_pending = 1 WHERE id = 'waiter'",
    );
    // Two bursts: the one with the joined run (r011, with r012-r019)
    // after the other, so that neither leaves the other to the fenced end.
    fn end<'a>(
        store: &'a PostgresStore,
        c: &'a Claimed,
    ) -> impl std::future::Future<Output = (String, Result<(), Error>)> + 'a {
        let output = Arc::from(c.run.id.as_bytes());
        let f = store.finish(
            &c.run.id,
            &c.lease,
            Outcome::Completed {
                output,
                error: None,
            },
        );
        async move { (c.run.id.clone(), f.await) }
    }
    let second = |c: &&Claimed| ("r011".."r020").contains(&c.run.id.as_str());
    let mut answers = db.run(futures::future::join_all(
        claimed.iter().filter(|c| !second(c)).map(|c| end(store, c)),
    ));
    // r011 last: the first ends of a burst go on their own, the rest in
    // one batch.
    let mut later: Vec<&Claimed> = claimed.iter().filter(second).collect();
    later.rotate_left(1);
    answers.extend(db.run(futures::future::join_all(
        later.into_iter().map(|c| end(store, c)),
    )));
    assert!(store.finishes.batched() > 0, "ends shared transactions");
    for (id, answer) in answers {
        let run = block_on(store.load_run(&id)).unwrap().unwrap();
        let history = block_on(store.history(&id)).unwrap();
        let completed = history
            .iter()
            .filter(|h| matches!(h.event, Event::Completed))
            .count();
        if id == "r007" {
            assert!(matches!(answer, Err(Error::LeaseLost { .. })), "{answer:?}");
            assert_eq!(run.state, RunState::Ready, "left to its new holder");
            assert_eq!(completed, 0);
            continue;
        }
        answer.unwrap_or_else(|e| panic!("{id}: {e}"));
        match &run.state {
            RunState::Completed {
                output,
                error: None,
            } => assert_eq!(&output[..], id.as_bytes(), "{id}"),
            other => panic!("{id}: {other:?}"),
        }
        assert!(run.lease.is_none(), "{id}");
        assert_eq!(completed, 1, "{id}: {history:?}");
    }
    let waiter = block_on(store.load_run("waiter")).unwrap().unwrap();
    assert_eq!(waiter.state, RunState::Ready);
    let held = block_on(store.load_run("r121")).unwrap().unwrap();
    assert_eq!(
        held.state,
        RunState::Ready,
        "r120's end started its held sibling"
    );
    db.run(async {
        let url = format!("{}{}schema={}", db.url, sep(&db.url), db.schema);
        let target = Target::parse(&url, None).unwrap();
        let raw = conn::connect(&tokio::runtime::Handle::current(), &target)
            .await
            .unwrap();
        let row = raw
            .query_one(
                "SELECT (SELECT count(*) FROM cp_joins), \
                 (SELECT join_pending FROM cp_runs WHERE id = 'waiter')",
                &[],
            )
            .await
            .unwrap();
        let (joins, pending): (i64, i32) = (row.get(0), row.get(1));
        assert_eq!(
            (joins, pending),
            (0, 0),
            "r011's end counted it for its joiner"
        );
    });
}

/// A store's claims look for runs of unregistered workflows at most every
/// half second (`ops::UNREGISTERED_EVERY`; the query reads every unfinished
/// run), and a claim of one run always does: such a run is still reported,
/// by a later claim.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn runs_of_unregistered_workflows_are_looked_for_every_half_second() {
    let Some(db) = Db::open("runs_of_unregistered_workflows_are_looked_for_every_half_second")
    else {
        return;
    };
    let s = db.store();
    let mut other = req("a", "a1");
    other.workflows = vec!["other"];
    new_run(s, "r1");
    let first = Instant::now();
    let res = block_on(s.claim(&other)).unwrap();
    assert_eq!(res.unregistered, vec![("r1".to_owned(), "wf".to_owned())]);
    new_run(s, "r2");
    let res = block_on(s.claim(&other)).unwrap();
    // Looked for again only when half a second went by (a slow machine).
    if first.elapsed() < Duration::from_millis(400) {
        assert!(res.unregistered.is_empty(), "{:?}", res.unregistered);
    }
    // A claim of one run looks at once.
    let mut only = other.clone();
    only.only = Some("r2".to_owned());
    let res = block_on(s.claim(&only)).unwrap();
    assert_eq!(res.unregistered, vec![("r2".to_owned(), "wf".to_owned())]);
    // And a later claim reports both.
    let mut found = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while found.len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        found = block_on(s.claim(&other)).unwrap().unregistered;
    }
    found.sort();
    assert_eq!(
        found,
        vec![
            ("r1".to_owned(), "wf".to_owned()),
            ("r2".to_owned(), "wf".to_owned())
        ]
    );
}

/// A claim reads the runs that can be due, not every unfinished one: with
/// 30,000 runs waiting for a signal or a far timer (approvals waiting for
/// a person) and 10,000 executing on another worker, it takes each run
/// that is runnable, one way or another, and only those, and its
/// statement, like the next wake-up's and the look for unregistered
/// workflows', reads a small part of the table (the claim used to read
/// all of it).
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn claims_read_the_runs_that_can_be_due_not_every_waiting_one() {
    let Some(db) = Db::open("claims_read_the_runs_that_can_be_due_not_every_waiting_one") else {
        return;
    };
    let s = db.store();
    let soon = runs_of_every_kind(s);
    // 40,000 more runs: waiting for a signal that has not come, asleep for
    // an hour, executing on another worker under a live lease.
    for (like, n) in [("waiting", 20_000), ("asleep", 10_000), ("busy", 10_000)] {
        db.copy_run(like, n);
    }
    db.sql("ANALYZE cp_runs");
    let next = block_on(s.next_wakeup(SystemTime::UNIX_EPOCH))
        .unwrap()
        .earliest()
        .unwrap();
    // No later than the deadlines set: the short leases expire before them,
    // unless setting up took longer than a lease (on a loaded machine),
    // and then the deadlines themselves come first.
    assert!(next <= soon, "{next:?}");
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(claim_all(s), RUNNABLE);

    // What the statements read: a few index pages, not the table's.
    let pages = db.runs_pages();
    assert!(pages > 200, "{pages} pages");
    let now = crate::store::sql::ts(SystemTime::now());
    let claim = db.blocks_read(
        tables::runs::CLAIM,
        &format!("{now}, 'z', '1', '{{wf}}', NULL, 10, '{{}}', false, {now}, '{{}}'"),
    );
    let unregistered = db.blocks_read(
        tables::runs::UNREGISTERED,
        &format!("{now}, 'z', '1', '{{other}}', NULL, 10, {now}"),
    );
    let wakeup = db.blocks_read(tables::runs::NEXT_WAKEUP, &format!("{now}, {now}"));
    eprintln!(
        "{pages} pages; read: claim {claim}, unregistered {unregistered}, next wake-up {wakeup}"
    );
    for (what, read) in [
        ("claim", claim),
        ("unregistered", unregistered),
        ("next wake-up", wakeup),
    ] {
        assert!(
            read * 10 < pages,
            "the {what} read {read} blocks of a table of {pages} pages"
        );
    }
}

/// A batch of saves reads each run it saves, not every run per save: with
/// statistics taken while the runs waited for signals (none ready, none
/// leased), the planner once took the checks on the run's row alone to
/// select a single row and read the whole table once per save in a nested
/// loop (a batch of 487 saves beside 20,000 waiting runs: 280 ms).
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn a_batch_of_saves_reads_its_runs_whatever_the_statistics_say() {
    let Some(db) = Db::open("a_batch_of_saves_reads_its_runs_whatever_the_statistics_say") else {
        return;
    };
    let n = 500;
    // Statistics of a store where every run waits (none ready, none
    // leased).
    let busy = db.leased_after_analysis("signal", "1, 'go'", n);
    let lease = busy.lease.as_ref().unwrap();
    let list = |f: &dyn Fn(usize) -> String| {
        let items: Vec<String> = (0..n).map(f).collect();
        format!("ARRAY[{}]", items.join(", "))
    };
    let same = |v: &str, ty: &str| format!("{}::{ty}[]", list(&|_| v.to_owned()));
    let none = |ty: &str| same("NULL", ty);
    let now = crate::store::sql::ts(SystemTime::now());
    let args = [
        list(&|i| i.to_string()),
        list(&|i| format!("'busy-{}'", i + 1)),
        same("1", "bigint"),
        same("'s'", "text"),
        same("'s'", "text"),
        same("0", "integer"),
        same("'\\x00'", "bytea"),
        none("text"),
        same(&now.to_string(), "bigint"),
        none("bytea"),
        none("bytea"),
        same("'\\x0000'", "bytea"),
        none("text"),
        same("0", "smallint"),
        none("text"),
        none("bigint"),
        none("bytea"),
        none("text"),
        same("1", "integer"),
        same("1", "bigint"),
        none("bigint"),
        none("text"),
        none("bytea"),
        same(&now.to_string(), "bigint"),
        same(&busy.epoch.to_string(), "bigint"),
        same(&format!("'{}'", lease.worker), "text"),
        same(&format!("'{}'", lease.instance), "text"),
        same("0", "bigint"),
        "'{}'".into(),
        "'{}'".into(),
        "'{}'".into(),
        "'{}'".into(),
        "'{}'".into(),
        "'{}'".into(),
        "'{}'".into(),
        "'{}'".into(),
        "'{}'".into(),
    ];
    let (read, saved, produced) = db.blocks_read_planned(
        super::fused::save_batch::BATCH,
        &args.join(", "),
        "force_custom_plan",
    );
    eprintln!("the batch saved {saved}, read {read} blocks, its plan's nodes made {produced} rows");
    assert_eq!(saved, n as u64, "every save of the batch is written");
    // Each run's row, its checkpoint's: a few rows per save, or one pass
    // over the table; never a pass over the saves per run.
    let runs = 20_000 + n as u64;
    assert!(
        produced < 4 * runs,
        "a batch of {n} saves made {produced} rows in its plan, over {runs} runs"
    );
}

/// Renewing many leases reads each run renewed, not every run per lease:
/// with statistics taken when every run had finished (a quiet store before
/// a batch starts), the planner would take the check that the run is not
/// finished to select a single row and read the table once per lease.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn renewing_many_leases_reads_their_runs_whatever_the_statistics_say() {
    let Some(db) = Db::open("renewing_many_leases_reads_their_runs_whatever_the_statistics_say")
    else {
        return;
    };
    let n = 500;
    // Statistics of a store where every run has finished.
    let busy = db.leased_after_analysis("output", "3, '\\x00'", n);
    let lease = busy.lease.as_ref().unwrap();
    let same = |v: String, ty: &str| format!("ARRAY[{}]::{ty}[]", vec![v; n].join(", "));
    let ids: Vec<String> = (1..=n).map(|i| format!("'busy-{i}'")).collect();
    let later = crate::store::sql::ts(SystemTime::now() + Duration::from_secs(60));
    let args = format!(
        "ARRAY[{}]::text[], {}, {}, {}, {later}",
        ids.join(", "),
        same(busy.epoch.to_string(), "bigint"),
        same(format!("'{}'", lease.worker), "text"),
        same(format!("'{}'", lease.instance), "text"),
    );
    for mode in ["force_custom_plan", "force_generic_plan"] {
        let (_, renewed, produced) = db.blocks_read_planned(tables::runs::RENEW_MANY, &args, mode);
        eprintln!("{mode}: renewed {renewed}, its plan's nodes made {produced} rows");
        assert_eq!(renewed, n as u64, "{mode}: every lease is renewed");
        let runs = 20_001 + n as u64;
        assert!(
            produced < 4 * runs,
            "{mode}: renewing {n} leases made {produced} rows in its plan, over {runs} runs"
        );
    }
}

/// `open_existing` opens tables of this build's version as they are, and
/// refuses (changing nothing) tables of an older version and a schema
/// without them.
#[test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
fn open_existing_neither_creates_nor_upgrades() {
    let Some(db) = Db::open("open_existing_neither_creates_nor_upgrades") else {
        return;
    };
    let url = format!("{}{}schema={}", db.url, sep(&db.url), db.schema);
    db.run(PostgresStore::open_existing(&url)).unwrap();
    db.sql("UPDATE cp_schema_version SET version = 1");
    let err = db.run(PostgresStore::open_existing(&url)).err().unwrap();
    assert!(
        err.to_string()
            .contains("at version 1, older than this build's"),
        "{err}"
    );
    assert_eq!(db.sql_i64("SELECT version FROM cp_schema_version"), 1);
    db.sql(&format!(
        "UPDATE cp_schema_version SET version = {}",
        schema::SCHEMA_VERSION
    ));

    let absent = fresh_schema();
    let url = format!("{}{}schema={absent}", db.url, sep(&db.url));
    let err = db.run(PostgresStore::open_existing(&url)).err().unwrap();
    assert!(err.to_string().contains("not a checkpoint store"), "{err}");
    let made = db.sql_i64(&format!(
        "SELECT count(*) FROM pg_namespace WHERE nspname = '{absent}'"
    ));
    assert_eq!(made, 0);
}
