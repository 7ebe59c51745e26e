//! Child runs in the PostgreSQL store (see [`crate::child`]): the queries
//! that load (and lock) what the end of a run, a join and a bounded spawn
//! look at: the children a join names, the parent's running children, a
//! held sibling, a run's children and descendants, a joining run's join.
//! Only queries: what changes is decided by the rules and written by
//! [`apply`](super::apply). Each runs inside the caller's transaction, so
//! a child's end and its parent's wake-up commit together.
//!
//! Row locks are taken children first, parents after, everywhere: a join
//! locks the children it names (`FOR SHARE`, in descending id order)
//! before its own row, a child's end locks its own row before its
//! waiters', and a cancellation locks the descendants (descending id
//! order, so a grandchild before its parent) before the run. So none of
//! these waits for another in a circle, and a join never misses the end
//! of a child that commits while it is being saved: the child's end waits
//! for the join's lock, and then sees its `cp_joins` row.

use super::conn::{get, Cx};
use super::tables::runs::{decode_run, run_cols, LOAD_PLAIN_MANY};
use crate::store::sql::run_row::{state_sql, CANCELLED, COMPLETED, FAILED};
use crate::store::{RunRecord, Suspend};
use crate::Error;

/// Locks the rows of `children` for a join (see the module docs); returns
/// which of them have not ended (those that do not exist have).
pub(super) async fn lock_children(
    cx: &mut Cx<'_>,
    children: &[String],
) -> Result<Vec<String>, Error> {
    let rows = cx
        .query(
            "SELECT id, state FROM cp_runs WHERE id = ANY($1) ORDER BY id DESC FOR SHARE",
            &[&children],
        )
        .await?;
    let mut live = Vec::with_capacity(rows.len());
    for row in &rows {
        let state = i64::from(get::<i16>(row, 1)?);
        if ![COMPLETED, FAILED, CANCELLED].contains(&state) {
            live.push(get::<String>(row, 0)?);
        }
    }
    Ok(live)
}

/// Locks the row of run `parent` (a spawn with a bound, see
/// `NewRun::max_running`) and counts its running children (not ended, not
/// held: `rules::is_running`). The lock orders the spawn against a child's
/// end, which takes it too before it looks for a held child to start
/// ([`held_sibling`]): neither misses the other.
pub(super) async fn lock_parent_and_count(cx: &mut Cx<'_>, parent: &str) -> Result<usize, Error> {
    const COUNT: &str = concat!(
        "SELECT count(*) FROM cp_runs WHERE parent = $1 AND state IN (",
        state_sql!(READY),
        ", ",
        state_sql!(WAITING),
        ", ",
        state_sql!(SLEEPING),
        ", ",
        state_sql!(PARKED),
        ")"
    );
    cx.query_opt("SELECT 1 FROM cp_runs WHERE id = $1 FOR UPDATE", &[&parent])
        .await?;
    let row = cx.query_one(COUNT, &[&parent]).await?;
    Ok(usize::try_from(get::<i64>(&row, 0)?).unwrap_or(usize::MAX))
}

/// Locks the row of run `parent` (see [`lock_parent_and_count`]) and loads
/// its oldest held child (`rules::is_held`), locked: the one
/// `rules::promote` starts when a running child of it ended.
pub(super) async fn held_sibling(
    cx: &mut Cx<'_>,
    parent: &str,
) -> Result<Option<RunRecord>, Error> {
    const SQL: &str = concat!(
        "SELECT ",
        run_cols!(),
        ", ''::bytea FROM cp_runs r WHERE r.parent = $1 AND r.state = ",
        state_sql!(HELD),
        " ORDER BY r.ord LIMIT 1 FOR NO KEY UPDATE"
    );
    cx.query_opt("SELECT 1 FROM cp_runs WHERE id = $1 FOR UPDATE", &[&parent])
        .await?;
    cx.query_opt(SQL, &[&parent])
        .await?
        .map(|row| decode_run(&row))
        .transpose()
}

/// Locks the rows of every descendant of run `id` (its children, theirs,
/// ...), in descending id order (see the module docs): a cancel takes
/// them before the run's own row.
pub(super) async fn lock_descendants(cx: &mut Cx<'_>, id: &str) -> Result<(), Error> {
    let mut all: Vec<String> = Vec::new();
    let mut parents = vec![id.to_owned()];
    while !parents.is_empty() {
        let rows = cx
            .query("SELECT id FROM cp_runs WHERE parent = ANY($1)", &[&parents])
            .await?;
        parents = rows
            .iter()
            .map(|r| get::<String>(r, 0))
            .collect::<Result<_, _>>()?;
        all.extend(parents.iter().cloned());
    }
    if !all.is_empty() {
        cx.query(
            "SELECT id FROM cp_runs WHERE id = ANY($1) ORDER BY id DESC FOR NO KEY UPDATE",
            &[&all],
        )
        .await?;
    }
    Ok(())
}

/// The children of run `parent`, in creation order (not locked: a
/// cancel locked them first, see [`lock_descendants`]).
pub(super) async fn children_of(cx: &mut Cx<'_>, parent: &str) -> Result<Vec<String>, Error> {
    let rows = cx
        .query(
            "SELECT id FROM cp_runs WHERE parent = $1 ORDER BY ord",
            &[&parent],
        )
        .await?;
    rows.iter().map(|r| get::<String>(r, 0)).collect()
}

/// The records of `ids` that exist (without their inputs), in one query.
pub(super) async fn load_many(cx: &mut Cx<'_>, ids: &[String]) -> Result<Vec<RunRecord>, Error> {
    let rows = cx.query(LOAD_PLAIN_MANY, &[&ids]).await?;
    rows.iter().map(decode_run).collect()
}

/// The join run `waiter` is suspended on (its children and signal name),
/// from its latest checkpoint; `None` when it is not joining, or its
/// checkpoint cannot be read (a claim that meets it sets it aside; its
/// children go on).
pub(super) async fn join_of(
    cx: &mut Cx<'_>,
    waiter: &str,
) -> Result<Option<(Vec<String>, String)>, Error> {
    let row = cx
        .query_opt(
            "SELECT c.suspend::text FROM cp_runs r JOIN cp_checkpoints c \
             ON c.run = r.id AND c.seq = r.latest_seq WHERE r.id = $1",
            &[&waiter],
        )
        .await?;
    let suspend: Option<String> = match &row {
        Some(row) => get(row, 0)?,
        None => None,
    };
    Ok(match suspend.map(|s| serde_json::from_str::<Suspend>(&s)) {
        Some(Ok(Suspend::Joining {
            children, token, ..
        })) => Some((children, token)),
        _ => None,
    })
}
