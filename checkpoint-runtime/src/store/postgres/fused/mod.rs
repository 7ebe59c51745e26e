//! PostgreSQL's speed paths: writes that do in one statement (one round
//! trip, one WAL flush) what a rule decides and
//! [`apply`](super::apply) writes, for the writes a workflow makes most:
//! a checkpoint save ([`save`]), the saves of many runs at once
//! ([`save_batch`], through the group commit, [`group_commit`]), the
//! starts of top-level runs ([`create_batch`]), the ends of runs
//! ([`finish`]) and lease renewals ([`renew`]). The batched ones share
//! [`batcher`]. Each module's docs name the rule it implements; each
//! computes the rule's columns by applying the rule itself (to a
//! `rules::blank_run`), so only the fence is written twice (in SQL), and
//! each writes nothing when it refuses: the generic path ([`ops`](super::ops), [`locked`](super::locked))
//! then decides and tells why. `tests/fused.rs` runs both on fresh runs
//! and compares the rows, records, histories and refusals.
//!
//! State codes are rendered into the SQL from the one table
//! (`state_sql!`), never written as numbers.

/// The states a run under a lease is in, each as `RunRow::into_record`
/// decodes it (a waiting run names its signal, a sleeping one its time),
/// as an SQL condition on the columns of `cp_runs` (prefixed by `$p`,
/// e.g. `"cp_runs."`): a fused write that keeps every other column only
/// writes a row the generic path would load and write back unchanged.
/// A run asked to cancel (`cancel_request`) is left to the generic path
/// too: its rules read the request (a save cuts a sleep short, an end
/// becomes a cancel), which a rule applied to a blank record cannot.
macro_rules! decodable {
    ($p:literal) => {
        concat!(
            "(",
            $p,
            "state = ",
            $crate::store::sql::run_row::state_sql!(READY),
            " OR (",
            $p,
            "state = ",
            $crate::store::sql::run_row::state_sql!(WAITING),
            " AND ",
            $p,
            "signal IS NOT NULL) OR (",
            $p,
            "state = ",
            $crate::store::sql::run_row::state_sql!(SLEEPING),
            " AND ",
            $p,
            "due IS NOT NULL)) AND ",
            $p,
            "cancel_request IS NULL"
        )
    };
}

pub(super) mod batcher;
pub(super) mod create_batch;
pub(super) mod finish;
pub(super) mod group_commit;
pub(super) mod renew;
pub(super) mod save;
pub(super) mod save_batch;
