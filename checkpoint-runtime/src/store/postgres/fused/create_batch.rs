//! The starts of top-level runs (`Store::create_run` without a parent),
//! fused: the rule is `rules::create` (a run without a parent: its row and
//! its `Started` event, what `apply` writes for a `Row::Insert`; a child's
//! start goes through `apply`, which records its parent's `ChildSpawned`).
//! A lone start is one statement ([`create_alone`]); the starts
//! that wait at the same time are written as one statement
//! ([`insert_runs_started`]) by a [`Batcher`]: a program that starts a
//! thousand runs at once (as the README shows) commits them in a few
//! statements, where a statement each queued them behind each other's
//! commits on the pool's connections.
//!
//! `tests/fused.rs` compares both with the generic create.
//!
//! Each start answers as it would on its own ([`create_alone`]): one the
//! statement skipped (its id exists, or came twice in the batch) is done on
//! its own after the batch, and tells which run exists; should the
//! statement fail on a value, each is done on its own, so one bad start
//! fails alone. Should the connection fail with the statement in flight,
//! whether it committed is unknown, and each start answers with that error.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use futures::future::BoxFuture;

use super::batcher::{held_once, together_then_alone, Batcher};
use crate::history::Event;
use crate::store::postgres::conn::{sqlstate_class, to_json, ts, Pool, Pooled};
use crate::store::postgres::tables::runs::{insert_run_started, insert_runs_started, load};
use crate::store::rules::Change;
use crate::store::{Created, RunRecord};
use crate::Error;

/// Starts in one statement at most.
const MAX_BATCH: usize = 1000;

/// A start: the new run's record and its change (`rules::create`'s, of a
/// run without a parent: its row and its `Started` event), and when it
/// was made.
pub(in crate::store::postgres) struct NewTop {
    pub(in crate::store::postgres) rec: RunRecord,
    pub(in crate::store::postgres) change: Change,
    pub(in crate::store::postgres) at: SystemTime,
}

impl NewTop {
    /// The one event the start records: `None` for a change that the
    /// statements cannot write (a child's: it records its parent's
    /// `ChildSpawned` too, and goes through `apply`).
    fn started(&self) -> Option<&Event> {
        match &self.change {
            Change {
                row: true,
                event: Some(started),
                elsewhere: None,
                signal: None,
                ended: None,
                ..
            } => Some(started),
            _ => None,
        }
    }
}

/// The batcher of a store's starts.
pub(in crate::store::postgres) fn batcher(pool: Arc<Pool>) -> Batcher<NewTop, Created> {
    let writer = pool.clone();
    Batcher::new(
        pool,
        MAX_BATCH,
        Box::new(move |batch| write(writer.clone(), batch)),
    )
}

/// A start on its own: the row and its first event in one statement, or
/// the run that exists under its id. Notifies when it wrote.
pub(in crate::store::postgres) async fn create_alone(
    conn: &mut Pooled<'_>,
    new: &NewTop,
) -> Result<Created, Error> {
    let mut cx = conn.plain();
    let Some(started) = new.started() else {
        return Err(Error::internal(format!(
            "run `{}`: not a top-level start",
            new.rec.id
        )));
    };
    if insert_run_started(&mut cx, &new.rec, new.at, started).await? {
        cx.notify_after_commit("");
        return Ok(Created::New);
    }
    let existing = load(&mut cx, &new.rec.id)
        .await?
        .ok_or_else(|| Error::internal(format!("run `{}` vanished", new.rec.id)))?;
    Ok(Created::Existing(Box::new(existing)))
}

/// Writes a batch of starts (see the module docs).
fn write(pool: Arc<Pool>, batch: Vec<NewTop>) -> BoxFuture<'static, Vec<Result<Created, Error>>> {
    Box::pin(async move {
        fn key(n: &NewTop) -> &str {
            &n.rec.id
        }
        together_then_alone(
            &pool,
            &batch,
            key,
            || Created::New,
            insert_batch,
            create_alone,
        )
        .await
    })
}

/// Inserts the starts of `batch` whose ids it holds once, in one statement,
/// in id order (starts made at the same time have no order of their own;
/// this way two workers' batches lock their new rows in the same order);
/// the ids inserted. A value the server refused wrote nothing (none
/// inserted); a failed connection is an error.
pub(in crate::store::postgres) async fn insert_batch(
    conn: &mut Pooled<'_>,
    batch: &[NewTop],
) -> Result<HashSet<String>, Error> {
    if batch.len() < 2 {
        return Ok(HashSet::new());
    }
    let mut once = held_once(batch, |n| &n.rec.id);
    once.sort_by(|a, b| a.rec.id.cmp(&b.rec.id));
    let mut rows = Vec::with_capacity(once.len());
    for new in &once {
        let Some(Ok(event)) = new.started().map(to_json) else {
            continue;
        };
        rows.push((&new.rec, ts(new.at), event));
    }
    let runs: Vec<(&RunRecord, i64, &str)> = rows
        .iter()
        .map(|(r, at, e)| (*r, *at, e.as_str()))
        .collect();
    match insert_runs_started(&mut conn.plain(), &runs).await {
        Ok(ids) => Ok(ids.into_iter().collect()),
        Err(e) if sqlstate_class(&e).is_some() => Ok(HashSet::new()),
        Err(e) => Err(e),
    }
}
