//! Lease renewals (`Store::renew`, `Store::renew_many`), fused: one
//! statement each round ([`RENEW`], [`RENEW_MANY`]) that implements
//! `rules::renew` (the lease's expiry moves on) fenced by
//! `rules::check_lease` in its `WHERE` (epoch, worker and instance, a run
//! not ended) and returns the run's cancel request, from which
//! `rules::renewed` makes the report ([`report`]), on the renewal
//! connection of its own (`conn::Side`),
//! skipping a locked row instead of waiting for it. A renewal the
//! statement refuses writes nothing; the run's row, read then, tells why
//! with `check_lease`'s error, or that the row was locked (tried again).
//! `tests/fused.rs` compares it with the rule applied by `apply`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio_postgres::Row;

use crate::store::postgres::conn::{corrupt, get, sqlstate_class, to_i64, ts_after};
use crate::store::postgres::tables::runs::{
    decode_run, LOAD_PLAIN, LOAD_PLAIN_MANY, RENEW, RENEW_MANY, RENEW_MANY_WAITING,
};
use crate::store::postgres::PostgresStore;
use crate::store::rules::{self, check_lease};
use crate::store::sql::run_row::cancel_request;
use crate::store::{Lease, Renewed};
use crate::Error;

impl PostgresStore {
    /// On the side connection (never waiting for a pool slot) and without
    /// waiting for the run's row lock: a row locked by a checkpoint of
    /// this very run in flight is tried again shortly, for up to a quarter
    /// of the TTL; the executor renews again at its next tick.
    pub(in crate::store::postgres) async fn do_renew(
        &self,
        id: &str,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<Renewed, Error> {
        let began = std::time::Instant::now();
        let patience = (ttl / 4).max(Duration::from_millis(50));
        let mut pause = Duration::from_millis(5);
        let epoch = to_i64(lease.epoch, "epoch")?;
        let (worker, instance): (&str, &str) = (&lease.worker, &lease.instance);
        loop {
            let expires = ts_after(SystemTime::now(), ttl);
            let renewed = self
                .side
                .query(RENEW, &[&id, &epoch, &worker, &instance, &expires])
                .await?;
            if let Some(row) = renewed.first() {
                return report(id, row);
            }
            let row = self.side.query(LOAD_PLAIN, &[&id]).await?;
            let rec = match row.first() {
                Some(row) => decode_run(row)?,
                None => return Err(Error::unknown_run(id)),
            };
            check_lease(id, &rec, lease)?;
            // Still ours: the row is locked by another transaction.
            if began.elapsed() >= patience {
                return Err(Error::store(format!(
                    "postgres: lease of run `{id}` not renewed: its row stayed locked for {:?}",
                    began.elapsed()
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// [`do_renew`](Self::do_renew) for many runs in one statement; the
    /// runs whose rows were locked are tried again shortly (one statement
    /// for all of them each time) for up to a quarter of the TTL, then once
    /// more waiting for their locks, each wait at most as long again. (A
    /// lease of 3 s lapsed under a 1,000-run load on two worker processes
    /// when these runs were only ever skipped: their rows were locked by
    /// one batch of saves after another.)
    pub(in crate::store::postgres) async fn do_renew_many(
        &self,
        runs: &[(Arc<str>, Lease)],
        ttl: Duration,
    ) -> Vec<Result<Renewed, Error>> {
        let began = std::time::Instant::now();
        let patience = (ttl / 4).max(Duration::from_millis(50));
        let mut pause = Duration::from_millis(2);
        let mut results: Vec<Option<Result<Renewed, Error>>> = runs
            .iter()
            .map(|(id, lease)| self.holds.check_renew(id, lease).err().map(Err))
            .collect();
        loop {
            let pending: Vec<usize> = (0..runs.len()).filter(|&i| results[i].is_none()).collect();
            if pending.is_empty() {
                break;
            }
            // Past its patience, one last round waits for the locks.
            let wait = (began.elapsed() >= patience).then_some(patience);
            let last = wait.is_some();
            if let Err(e) = self
                .renew_pending(runs, &pending, ttl, wait, &mut results)
                .await
            {
                for &i in &pending {
                    results[i].get_or_insert_with(|| Err(e.clone()));
                }
                break;
            }
            if last || results.iter().all(Option::is_some) {
                break;
            }
            if began.elapsed() < patience {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
        results
            .into_iter()
            .zip(runs)
            .map(|(r, (id, _))| {
                r.unwrap_or_else(|| {
                    Err(Error::store(format!(
                        "postgres: lease of run `{id}` not renewed: its row stayed locked for {:?}",
                        began.elapsed()
                    )))
                })
            })
            .collect()
    }

    /// One round of [`do_renew_many`](Self::do_renew_many): renews the
    /// `pending` entries of `runs` whose rows are not locked (or, with
    /// `wait`, once their locks are free, waiting at most that long for
    /// each: [`RENEW_MANY_WAITING`]), and decides those fenced off; the
    /// rest stay `None`.
    async fn renew_pending(
        &self,
        runs: &[(Arc<str>, Lease)],
        pending: &[usize],
        ttl: Duration,
        wait: Option<Duration>,
        results: &mut [Option<Result<Renewed, Error>>],
    ) -> Result<(), Error> {
        let mut ids: Vec<&str> = Vec::with_capacity(pending.len());
        let mut epochs: Vec<i64> = Vec::with_capacity(pending.len());
        let mut workers: Vec<&str> = Vec::with_capacity(pending.len());
        let mut instances: Vec<&str> = Vec::with_capacity(pending.len());
        for &i in pending {
            let (id, lease) = &runs[i];
            match to_i64(lease.epoch, "epoch") {
                Ok(epoch) => {
                    ids.push(id);
                    epochs.push(epoch);
                    workers.push(&lease.worker);
                    instances.push(&lease.instance);
                }
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let expires = ts_after(SystemTime::now(), ttl);
        let renewed = match wait {
            None => {
                self.side
                    .query(RENEW_MANY, &[&ids, &epochs, &workers, &instances, &expires])
                    .await?
            }
            Some(wait) => {
                let timeout = format!("{}ms", wait.as_millis().max(1));
                match self
                    .side
                    .query(
                        RENEW_MANY_WAITING,
                        &[&ids, &epochs, &workers, &instances, &expires, &timeout],
                    )
                    .await
                {
                    Ok(rows) => rows,
                    // A lock held past `wait` (55P03, `lock_not_available`):
                    // nothing was renewed, the runs stay pending (their rows
                    // stayed locked).
                    Err(e) if sqlstate_class(&e) == Some("55") => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        };
        let mut reports = std::collections::HashMap::with_capacity(renewed.len());
        for row in &renewed {
            // A cancel request that does not read answers for its own run only.
            let id: String = get(row, 0)?;
            let renewed = report(&id, row);
            reports.insert(id, renewed);
        }
        let missing: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| !reports.contains_key(*id))
            .collect();
        let rows = if missing.is_empty() {
            Vec::new()
        } else {
            self.side.query(LOAD_PLAIN_MANY, &[&missing]).await?
        };
        let mut found = std::collections::HashMap::new();
        for row in &rows {
            // A damaged row answers for its own run only.
            found.insert(get::<String>(row, 0)?, decode_run(row));
        }
        for &i in pending {
            let (id, lease) = &runs[i];
            if results[i].is_some() {
                continue;
            }
            if let Some(renewed) = reports.remove(&**id) {
                results[i] = Some(renewed);
                continue;
            }
            match found.get(&**id) {
                None => results[i] = Some(Err(Error::unknown_run(id))),
                Some(Err(e)) => results[i] = Some(Err(e.clone())),
                Some(Ok(rec)) => {
                    // Still ours: the row is locked by another transaction
                    // (left `None`, tried again).
                    if let Err(e) = check_lease(id, rec, lease) {
                        results[i] = Some(Err(e));
                    }
                }
            }
        }
        Ok(())
    }
}

/// What the renewal of run `id` reports, from the row a renewal statement
/// returned (its id, then its cancel request): [`rules::renewed`] of the
/// run as far as the statement read it (a [`rules::blank_run`] carrying
/// that request).
pub(in crate::store::postgres) fn report(id: &str, row: &Row) -> Result<Renewed, Error> {
    let mut rec = rules::blank_run(id, SystemTime::now());
    rec.cancel = cancel_request(id, get(row, 1)?).map_err(corrupt)?;
    Ok(rules::renewed(&rec))
}
