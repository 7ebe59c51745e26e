//! Behaviour every [`Store`] backend must show (see the trait's guarantees
//! and the rules in [`rules`](super::rules)), as one test function per
//! guarantee or rule, each on a fresh store: the validation suite of a
//! backend, as duroxide publishes its provider validation. Every backend
//! of this crate runs all of them ([`STORE_TESTS`] and [`FIXTURE_TESTS`]);
//! a custom backend runs them with the `backend-kit` feature:
//!
//! ```
//! use checkpoint_runtime::store::{conformance, MemoryStore};
//!
//! // Each test gets a fresh store; a panic names what the backend got wrong.
//! for (name, test) in conformance::STORE_TESTS {
//!     println!("conformance: {name}");
//!     test(&MemoryStore::new());
//! }
//! ```
//!
//! The tests block on the store's futures with a small executor of their
//! own: a backend that needs a tokio runtime enters one first (as the
//! PostgreSQL store's tests do). The [`FIXTURE_TESTS`] also damage the
//! store behind its back, through a [`Fixture`] the backend implements.
//!
//! Inside this crate, `conformance_tests!` makes a `#[test]` of every one
//! of them per backend, the way tokio's `rt_test!` runs one body on every
//! runtime flavour (`conformance_tests!(|_test: &str| Some(MemoryStore::new()))`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::executor::block_on;

use super::{
    CheckpointRecord, ClaimRequest, Claimed, Created, Lease, NewRun, Outcome, Release, RunRecord,
    RunState, Store, Suspend, Wake, WakeValue,
};
use crate::history::Event;
use crate::status::{RunFilter, Status, StatusKind};
use crate::Error;

mod cancel;
mod children;
mod ends;
mod leases;
mod queues;
mod schedules;
mod signals;
mod start_options;
mod streams;

pub use cancel::*;
pub use children::*;
pub use ends::*;
pub use leases::*;
pub use queues::*;
pub use schedules::*;
pub use signals::*;
pub use start_options::*;
pub use streams::*;

/// What a conformance test runs on: a store, and whatever it needs kept
/// alive (a temporary directory, a database schema, a tokio runtime).
///
/// ```
/// use checkpoint_runtime::store::{conformance::Fixture, Store};
///
/// struct Mine(checkpoint_runtime::store::MemoryStore);
///
/// impl Fixture for Mine {
///     fn store(&self) -> &dyn Store {
///         &self.0
///     }
///     fn lose_checkpoint(&self, _run: &str, _seq: u64) {
///         unimplemented!("delete the row behind the store's back")
///     }
/// }
/// # let _ = Mine(Default::default());
/// ```
pub trait Fixture {
    /// The store under test.
    fn store(&self) -> &dyn Store;

    /// Deletes checkpoint `seq` of run `run` behind the store's back, as a
    /// damaged store or a careless operator would.
    fn lose_checkpoint(&self, run: &str, seq: u64);
}

/// Makes a `#[test]` of every conformance test for one backend: `$open` is
/// called with the test's name and returns `Option<impl Fixture>`. With
/// `postgres:` first, the tests are `#[ignore]`d unless
/// `CHECKPOINT_TEST_POSTGRES_URL` was set when they were built (see the
/// crate's `build.rs`). Its test `the_public_lists_name_every_test` checks
/// that [`STORE_TESTS`] and [`FIXTURE_TESTS`] list the same tests.
#[cfg(test)]
macro_rules! conformance_tests {
    (postgres: $open:expr) => {
        $crate::store::conformance::conformance_tests!(@each
            [cfg_attr(not(checkpoint_test_postgres), ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set")]
            $open);
    };
    ($open:expr) => {
        $crate::store::conformance::conformance_tests!(@each [cfg(all())] $open);
    };
    (@each [$attr:meta] $open:expr) => {
        mod conformance {
        #[allow(unused_imports)]
        use super::*;
        $crate::store::conformance::conformance_tests!(@lists [$attr] $open;
            [
                fencing_rejects_stale_lease,
                expired_lease_is_taken_over,
                retention_keeps_latest,
                unregistered_runs_are_reported_not_claimed,
                cancel_blocks_fenced_writes,
                claim_takes_a_lease,
                a_run_keeps_the_version_that_started_it,
                renew_extends_the_lease,
                renew_many_renews_each_and_fences_each,
                release_retry_and_abandon,
                suspend_waits_for_a_signal,
                a_parked_run_keeps_its_wake_and_is_taken_only_by_name,
                sleeping_run_is_claimed_when_due,
                timers_are_due_on_the_claims_clock,
                take_signal_consumes_the_oldest,
                reject_signal_returns_to_waiting,
                time_out_wakes_with_timed_out,
                claim_after_deadline_times_out,
                finish_completes_the_run,
                fail_records_the_error,
                retry_makes_a_failed_run_runnable_from_its_latest_checkpoint,
                fork_copies_a_checkpoint,
                each_runnable_run_is_claimed_and_no_other,
                a_signal_to_an_ended_run_is_refused_and_not_stored,
                ends_change_what_they_change_in_memory,
                signal_sites_accumulate_per_workflow,
                runs_are_listed_in_pages_either_way,
                runs_are_counted_by_status,
                a_cancel_request_wakes_a_sleeping_run_and_ends_it_cancelled,
                a_cancel_request_times_out_a_wait_and_ends_with_its_grace,
                a_cancel_request_to_a_finished_run_is_refused,
                a_hard_cancel_after_a_request_cascades_or_abandons,
                a_renewal_reports_a_cancel_request,
                a_cancel_request_ends_a_parked_run,
                schedules_are_kept_and_redefined_without_losing_their_place,
                a_schedule_tick_is_handled_once,
                stream_items_are_appended_and_read_in_pages,
                a_resume_discards_the_items_emitted_after_its_checkpoint,
                a_stale_lease_cannot_write_the_stream,
                progress_is_the_latest_value_and_outlives_the_run,
                start_options_are_stored_with_the_run,
                runs_are_filtered_by_tags,
                a_run_is_not_claimed_before_its_start_time,
                a_queue_admits_up_to_its_bound_by_priority,
                claims_at_once_never_exceed_a_queue_bound,
                an_expired_lease_frees_its_queue_slot,
                a_queue_rate_admits_count_per_window,
            ]
            [
                reject_signal_without_its_checkpoint_changes_nothing,
                claim_sets_aside_a_run_whose_checkpoint_is_missing,
            ]
        );
        }
    };
    (@lists [$attr:meta] $open:expr;
        [$($store:ident),* $(,)?] [$($fixture:ident),* $(,)?]) => {
        $crate::store::conformance::conformance_tests!(@tests [$attr] $open; $($store),*);
        $crate::store::conformance::conformance_tests!(@fixture_tests [$attr] $open; $($fixture),*);
        $crate::store::conformance::conformance_tests!(@names [$($store),*] [$($fixture),*]);
    };
    (@names [$($store:ident),*] [$($fixture:ident),*]) => {
        #[test]
        fn the_public_lists_name_every_test() {
            let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
            let store: Vec<String> = $crate::store::conformance::STORE_TESTS
                .iter()
                .map(|(n, _)| n.to_string())
                .collect();
            let fixture: Vec<String> = $crate::store::conformance::FIXTURE_TESTS
                .iter()
                .map(|(n, _)| n.to_string())
                .collect();
            assert_eq!(store, names(&[$(stringify!($store)),*]));
            assert_eq!(fixture, names(&[$(stringify!($fixture)),*]));
        }
    };
    (@fixture_tests [$attr:meta] $open:expr; $($name:ident),* $(,)?) => {$(
        #[test]
        #[$attr]
        fn $name() {
            let open = $open;
            let Some(fixture) = open(stringify!($name)) else {
                return;
            };
            $crate::store::conformance::$name(&fixture);
        }
    )*};
    (@tests [$attr:meta] $open:expr; $($name:ident),* $(,)?) => {$(
        #[test]
        #[$attr]
        fn $name() {
            let open = $open;
            let Some(fixture) = open(stringify!($name)) else {
                return;
            };
            $crate::store::conformance::$name(
                $crate::store::conformance::Fixture::store(&fixture),
            );
        }
    )*};
}
#[cfg(test)]
pub(crate) use conformance_tests;

/// A conformance test that needs only the store.
pub type StoreTest = fn(&dyn Store);

/// A conformance test that also damages the store behind its back (see
/// [`Fixture::lose_checkpoint`]).
pub type FixtureTest = fn(&dyn Fixture);

/// Every conformance test on a store, by name.
pub const STORE_TESTS: &[(&str, StoreTest)] = &[
    ("fencing_rejects_stale_lease", fencing_rejects_stale_lease),
    ("expired_lease_is_taken_over", expired_lease_is_taken_over),
    ("retention_keeps_latest", retention_keeps_latest),
    (
        "unregistered_runs_are_reported_not_claimed",
        unregistered_runs_are_reported_not_claimed,
    ),
    ("cancel_blocks_fenced_writes", cancel_blocks_fenced_writes),
    ("claim_takes_a_lease", claim_takes_a_lease),
    (
        "a_run_keeps_the_version_that_started_it",
        a_run_keeps_the_version_that_started_it,
    ),
    ("renew_extends_the_lease", renew_extends_the_lease),
    (
        "renew_many_renews_each_and_fences_each",
        renew_many_renews_each_and_fences_each,
    ),
    ("release_retry_and_abandon", release_retry_and_abandon),
    ("suspend_waits_for_a_signal", suspend_waits_for_a_signal),
    (
        "a_parked_run_keeps_its_wake_and_is_taken_only_by_name",
        a_parked_run_keeps_its_wake_and_is_taken_only_by_name,
    ),
    (
        "sleeping_run_is_claimed_when_due",
        sleeping_run_is_claimed_when_due,
    ),
    (
        "timers_are_due_on_the_claims_clock",
        timers_are_due_on_the_claims_clock,
    ),
    (
        "take_signal_consumes_the_oldest",
        take_signal_consumes_the_oldest,
    ),
    (
        "reject_signal_returns_to_waiting",
        reject_signal_returns_to_waiting,
    ),
    (
        "time_out_wakes_with_timed_out",
        time_out_wakes_with_timed_out,
    ),
    (
        "claim_after_deadline_times_out",
        claim_after_deadline_times_out,
    ),
    ("finish_completes_the_run", finish_completes_the_run),
    ("fail_records_the_error", fail_records_the_error),
    (
        "retry_makes_a_failed_run_runnable_from_its_latest_checkpoint",
        retry_makes_a_failed_run_runnable_from_its_latest_checkpoint,
    ),
    ("fork_copies_a_checkpoint", fork_copies_a_checkpoint),
    (
        "each_runnable_run_is_claimed_and_no_other",
        each_runnable_run_is_claimed_and_no_other,
    ),
    (
        "a_signal_to_an_ended_run_is_refused_and_not_stored",
        a_signal_to_an_ended_run_is_refused_and_not_stored,
    ),
    (
        "ends_change_what_they_change_in_memory",
        ends_change_what_they_change_in_memory,
    ),
    (
        "signal_sites_accumulate_per_workflow",
        signal_sites_accumulate_per_workflow,
    ),
    (
        "runs_are_listed_in_pages_either_way",
        runs_are_listed_in_pages_either_way,
    ),
    ("runs_are_counted_by_status", runs_are_counted_by_status),
    (
        "a_cancel_request_wakes_a_sleeping_run_and_ends_it_cancelled",
        a_cancel_request_wakes_a_sleeping_run_and_ends_it_cancelled,
    ),
    (
        "a_cancel_request_times_out_a_wait_and_ends_with_its_grace",
        a_cancel_request_times_out_a_wait_and_ends_with_its_grace,
    ),
    (
        "a_cancel_request_to_a_finished_run_is_refused",
        a_cancel_request_to_a_finished_run_is_refused,
    ),
    (
        "a_hard_cancel_after_a_request_cascades_or_abandons",
        a_hard_cancel_after_a_request_cascades_or_abandons,
    ),
    (
        "a_renewal_reports_a_cancel_request",
        a_renewal_reports_a_cancel_request,
    ),
    (
        "a_cancel_request_ends_a_parked_run",
        a_cancel_request_ends_a_parked_run,
    ),
    (
        "schedules_are_kept_and_redefined_without_losing_their_place",
        schedules_are_kept_and_redefined_without_losing_their_place,
    ),
    (
        "a_schedule_tick_is_handled_once",
        a_schedule_tick_is_handled_once,
    ),
    (
        "stream_items_are_appended_and_read_in_pages",
        stream_items_are_appended_and_read_in_pages,
    ),
    (
        "a_resume_discards_the_items_emitted_after_its_checkpoint",
        a_resume_discards_the_items_emitted_after_its_checkpoint,
    ),
    (
        "a_stale_lease_cannot_write_the_stream",
        a_stale_lease_cannot_write_the_stream,
    ),
    (
        "progress_is_the_latest_value_and_outlives_the_run",
        progress_is_the_latest_value_and_outlives_the_run,
    ),
    (
        "start_options_are_stored_with_the_run",
        start_options_are_stored_with_the_run,
    ),
    ("runs_are_filtered_by_tags", runs_are_filtered_by_tags),
    (
        "a_run_is_not_claimed_before_its_start_time",
        a_run_is_not_claimed_before_its_start_time,
    ),
    (
        "a_queue_admits_up_to_its_bound_by_priority",
        a_queue_admits_up_to_its_bound_by_priority,
    ),
    (
        "claims_at_once_never_exceed_a_queue_bound",
        claims_at_once_never_exceed_a_queue_bound,
    ),
    (
        "an_expired_lease_frees_its_queue_slot",
        an_expired_lease_frees_its_queue_slot,
    ),
    (
        "a_queue_rate_admits_count_per_window",
        a_queue_rate_admits_count_per_window,
    ),
];

/// Every conformance test on a [`Fixture`], by name.
pub const FIXTURE_TESTS: &[(&str, FixtureTest)] = &[
    (
        "reject_signal_without_its_checkpoint_changes_nothing",
        reject_signal_without_its_checkpoint_changes_nothing,
    ),
    (
        "claim_sets_aside_a_run_whose_checkpoint_is_missing",
        claim_sets_aside_a_run_whose_checkpoint_is_missing,
    ),
];

pub(crate) fn req(worker: &str, instance: &str) -> ClaimRequest {
    ClaimRequest {
        worker: Arc::from(worker),
        instance: Arc::from(instance),
        workflows: vec!["wf"],
        ttl: Duration::from_secs(30),
        limit: 10,
        only: None,
        revisit_parked: false,
        clock_now: SystemTime::now(),
        queues: Default::default(),
    }
}

/// Claims the one claimable run (fails the test if there is not exactly one).
pub(crate) fn claim_one(store: &dyn Store, worker: &str, instance: &str) -> Claimed {
    let mut c = block_on(store.claim(&req(worker, instance)))
        .unwrap()
        .claimed;
    assert_eq!(c.len(), 1, "expected one claimable run");
    c.remove(0)
}

/// The lease of run `id` among those a claim took.
pub(crate) fn lease_of(claimed: &[Claimed], id: &str) -> Lease {
    claimed
        .iter()
        .find(|c| c.run.id == id)
        .expect("claimed")
        .lease
        .clone()
}

/// The error a run is parked with when its code cannot read its checkpoint.
pub(crate) fn incompatible_total() -> Error {
    Error::Incompatible {
        workflow: "wf".into(),
        run: "r".into(),
        site: "s".into(),
        field: "total".into(),
        detail: "stored as `u32`, the code has `u64`".into(),
    }
}

pub(crate) fn new_run(store: &dyn Store, id: &str) {
    let r = block_on(store.create_run(NewRun {
        id: id.into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    }))
    .unwrap();
    assert!(matches!(r, Created::New));
}

pub(crate) fn cp(run: &str, seq: u64) -> Arc<CheckpointRecord> {
    Arc::new(CheckpointRecord::new(
        Arc::from(run),
        seq,
        Cow::Borrowed("site"),
        None,
        vec![],
        vec![],
        vec![],
        None,
        SystemTime::now(),
    ))
}

fn load(store: &dyn Store, id: &str) -> RunRecord {
    block_on(store.load_run(id))
        .unwrap()
        .expect("the run exists")
}

fn events(store: &dyn Store, id: &str) -> Vec<Event> {
    block_on(store.history(id))
        .unwrap()
        .into_iter()
        .map(|h| h.event)
        .collect()
}

/// A checkpoint of a suspension site.
fn suspended_cp(run: &str, seq: u64, suspend: Suspend) -> Arc<CheckpointRecord> {
    let mut cp = (*cp(run, seq)).clone();
    cp.suspend = Some(suspend);
    Arc::new(cp)
}

fn waiting(signal: &str, deadline: Option<SystemTime>) -> Suspend {
    Suspend::Waiting {
        signal: signal.to_owned(),
        deadline,
        payload_schema: None,
        sites_before: None,
    }
}

/// A run `r` claimed by `a`/`a1` whose checkpoint #1 waits for `go`.
fn waiting_run(store: &dyn Store, deadline: Option<SystemTime>) -> Lease {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    block_on(store.save_checkpoint(
        &c.lease,
        suspended_cp("r", 1, waiting("go", deadline)),
        None,
    ))
    .unwrap();
    c.lease
}
