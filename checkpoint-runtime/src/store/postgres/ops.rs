//! The operations of [`PostgresStore`]: each opens a transaction, applies a
//! rule of [`rules`] to the run's row and writes it back through the table
//! modules ([`tables`](super::tables)). The checkpoint save, the most
//! frequent write, is the exception: one statement that writes what the
//! rule would, batched by the group commit ([`save`](super::save),
//! [`group_commit`](super::group_commit)).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::conn::{corrupt, from_ts, get, scrub, to_i64, ts, ts_after, Cx};
use super::save::{save_joining, sqlstate_class};
use super::tables::checkpoints::{
    self, cp_cols, decode, decode_listed, load_seq, load_seqs_checked, segments, Found,
};
use super::tables::runs::{
    code, decode_run, fenced, insert_run, load, lock_run, must_exist, run_cols, write_run,
    write_runs, CLAIM, CLAIM_PARKED, LOAD_PLAIN, LOAD_PLAIN_MANY, NEXT_WAKEUP, RENEW, RENEW_MANY,
    RENEW_MANY_WAITING, UNREGISTERED,
};
use super::tables::{history, signals};
use super::{children, create_batch, finish, notify, PostgresStore};
use crate::history::{Event, HistoryEntry};
use crate::status::RunFilter;
use crate::store::rules::{self, check_lease};
use crate::store::sql::run_row::status_code;
use crate::store::{
    CheckpointRecord, ClaimRequest, ClaimResult, Claimed, Created, GcReport, Lease, NewRun,
    Outcome, Release, RunRecord, RunState, SignalRecord, Suspend,
};
use crate::Error;

/// How often a store's claims look for runs of unregistered workflows at
/// most (see `ClaimResult::unregistered`).
const UNREGISTERED_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

impl PostgresStore {
    pub(super) async fn do_create(&self, run: NewRun) -> Result<Created, Error> {
        if run.parent.is_none() {
            // A top-level run: one statement, the row and its first event,
            // shared with the starts made at the same time.
            let at = SystemTime::now();
            let (rec, started) = rules::create(run, at);
            let new = create_batch::NewTop { rec, started, at };
            let pool = &self.pool;
            let created = self
                .creates
                .run(new, |new| async move {
                    let mut conn = pool.get().await?;
                    create_batch::create_alone(&mut conn, &new).await
                })
                .await?;
            if matches!(created, Created::New) {
                self.bump();
            }
            return Ok(created);
        }
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let held = match (&run.parent, run.max_running) {
            (Some(parent), Some(_)) => {
                let running = children::lock_parent_and_count(&mut cx, parent).await?;
                rules::starts_held(run.max_running, running)
            }
            _ => false,
        };
        let now = SystemTime::now();
        let (mut rec, started) = rules::create(run, now);
        if held {
            rec.state = RunState::Held;
        }
        if !insert_run(&mut cx, &rec).await? {
            let existing = load(&mut cx, &rec.id)
                .await?
                .ok_or_else(|| Error::internal(format!("run `{}` vanished", rec.id)))?;
            return Ok(Created::Existing(Box::new(existing)));
        }
        history::insert(&mut cx, &rec.id, now, &started).await?;
        if let Some(parent) = &rec.parent {
            history::insert(&mut cx, parent, now, &rules::spawned(&rec)).await?;
        }
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(Created::New)
    }

    pub(super) async fn do_load(&self, id: &str) -> Result<Option<RunRecord>, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        load(&mut cx, id).await
    }

    pub(super) async fn do_list(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, Error> {
        // A completed run with an `Err` output counts as failed.
        const SQL: &str = concat!(
            "SELECT ",
            run_cols!(),
            ", r.input FROM cp_runs r \
             WHERE ($1::text IS NULL OR r.workflow = $1) \
               AND ($2::text IS NULL OR starts_with(r.id, $2)) \
               AND ($3::smallint IS NULL OR (CASE WHEN r.state = 3 AND r.error IS NOT NULL \
                                               THEN 4 ELSE r.state END) = $3) \
               AND ($5::text IS NULL OR r.parent = $5) \
             ORDER BY r.ord LIMIT $4::bigint"
        );
        let limit = filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        let status = filter.status.map(|kind| code(status_code(kind)));
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let rows = cx
            .query(
                SQL,
                &[
                    &filter.workflow,
                    &filter.id_prefix,
                    &status,
                    &limit,
                    &filter.parent,
                ],
            )
            .await?;
        rows.iter().map(decode_run).collect()
    }

    pub(super) async fn do_parked(&self) -> Result<Vec<RunRecord>, Error> {
        const SQL: &str = concat!(
            "SELECT ",
            run_cols!(),
            ", ''::bytea FROM cp_runs r WHERE r.state = 6 ORDER BY r.ord"
        );
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let rows = cx.query(SQL, &[]).await?;
        rows.iter().map(decode_run).collect()
    }

    /// Whether this claim looks for runs of unregistered workflows: when
    /// none of this store's claims did for [`UNREGISTERED_EVERY`]. A worker
    /// under load claims a hundred times a second, and the query, though
    /// it reads only runs that can be due, reads those of every workflow.
    fn unregistered_due(&self) -> bool {
        self.looked.due("", UNREGISTERED_EVERY)
    }

    /// Whether this claim by `worker`'s `instance` looks for the ready runs
    /// its older instances hold (`$8` of [`CLAIM`]; those whose lease
    /// expired it takes in any case): on the instance's first claim (a
    /// restarted worker takes them over at once), then when none of its
    /// claims did for [`UNREGISTERED_EVERY`]. The planner cannot tell from
    /// a generic plan how few rows a worker's name selects (with two
    /// workers, half of them), so that look may read every run executing
    /// under a lease.
    fn own_due(&self, worker: &str, instance: &str) -> bool {
        self.looked
            .due(&format!("{worker}\0{instance}"), UNREGISTERED_EVERY)
    }

    pub(super) async fn do_claim(&self, req: &ClaimRequest) -> Result<ClaimResult, Error> {
        let mut out = ClaimResult::default();
        if req.limit == 0 {
            return Ok(out);
        }
        let now = SystemTime::now();
        let now_i = ts(now);
        let expires = from_ts(ts_after(now, req.ttl));
        let limit = i64::try_from(req.limit).unwrap_or(i64::MAX);
        let workflows: Vec<&str> = req.workflows.to_vec();
        let worker: &str = &req.worker;
        let instance: &str = &req.instance;
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
            [&now_i, &worker, &instance, &workflows, &req.only, &limit];
        let own = req.only.is_some() || self.own_due(worker, instance);
        if req.only.is_some() || self.unregistered_due() {
            for row in cx.query(UNREGISTERED, &params).await? {
                out.unregistered.push((get(&row, 0)?, get(&row, 1)?));
            }
        }
        // Runs this claim looked at and did not take are excluded from the
        // next round, so that one the claim cannot take (its row does not
        // decode, or the signal it waits for went elsewhere) does not use
        // up the limit: the claim asks again for the rest.
        let mut seen: Vec<String> = Vec::new();
        let mut taken = Vec::new();
        let at = ClaimAt {
            req,
            expires,
            now,
            schema: &self.schema,
        };
        if let (true, Some(only)) = (req.revisit_parked, &req.only) {
            let rows = cx.query(CLAIM_PARKED, &[&workflows, only]).await?;
            claim_rows(&mut cx, &rows, &at, &mut seen, &mut taken).await?;
        }
        loop {
            let want = limit - i64::try_from(taken.len()).unwrap_or(limit);
            if want <= 0 {
                break;
            }
            let rows = cx
                .query(
                    CLAIM,
                    &[
                        &now_i, &worker, &instance, &workflows, &req.only, &want, &seen, &own,
                    ],
                )
                .await?;
            let exhausted = i64::try_from(rows.len()).unwrap_or(i64::MAX) < want;
            claim_rows(&mut cx, &rows, &at, &mut seen, &mut taken).await?;
            if exhausted {
                break;
            }
        }
        let recs: Vec<&RunRecord> = taken.iter().map(|t| &t.claimed.run).collect();
        write_runs(&mut cx, &recs).await?;
        for t in &taken {
            if let Some(event) = &t.taken_over {
                history::insert(&mut cx, &t.claimed.run.id, now, event).await?;
            }
        }
        cx.commit().await?;
        // What each run's next save may append to (see `segments`).
        for Taken {
            claimed, appended, ..
        } in taken
        {
            if let Some(cp) = &claimed.checkpoint {
                self.heads.claimed(&claimed.lease, cp.clone(), appended);
            }
            out.claimed.push(claimed);
        }
        Ok(out)
    }

    /// On the side connection (never waiting for a pool slot) and without
    /// waiting for the run's row lock: a row locked by a checkpoint of
    /// this very run in flight is tried again shortly, for up to a quarter
    /// of the TTL; the executor renews again at its next tick.
    pub(super) async fn do_renew(
        &self,
        id: &str,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<(), Error> {
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
            if !renewed.is_empty() {
                return Ok(());
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
    pub(super) async fn do_renew_many(
        &self,
        runs: &[(Arc<str>, Lease)],
        ttl: Duration,
    ) -> Vec<Result<(), Error>> {
        let began = std::time::Instant::now();
        let patience = (ttl / 4).max(Duration::from_millis(50));
        let mut pause = Duration::from_millis(2);
        let mut results: Vec<Option<Result<(), Error>>> = runs
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
        results: &mut [Option<Result<(), Error>>],
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
        let renewed: std::collections::HashSet<String> = renewed
            .iter()
            .map(|row| get::<String>(row, 0))
            .collect::<Result<_, _>>()?;
        let missing: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| !renewed.contains(*id))
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
            if renewed.contains(&**id) {
                results[i] = Some(Ok(()));
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

    pub(super) async fn do_release(
        &self,
        id: &str,
        lease: &Lease,
        how: Release,
    ) -> Result<(), Error> {
        self.heads.forget(id);
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = match fenced(&mut cx, id, lease).await {
            Ok(rec) => rec,
            Err(Error::Cancelled { .. }) => {
                cx.execute(
                    "UPDATE cp_runs SET lease_worker = NULL, lease_instance = NULL, \
                     lease_expires = NULL WHERE id = $1",
                    &[&id],
                )
                .await?;
                return cx.commit().await;
            }
            Err(e) => return Err(e),
        };
        let now = SystemTime::now();
        let event = rules::release(&mut rec, how, now);
        {
            // Independent writes, sent together (one round trip).
            let (mut a, mut b) = (cx.fork()?, cx.fork()?);
            let event = async {
                match &event {
                    Some(event) => history::insert(&mut a, id, now, event).await,
                    None => Ok(()),
                }
            };
            futures::try_join!(event, write_run(&mut b, &rec))?;
        }
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(())
    }

    pub(super) async fn do_finish(
        &self,
        id: &str,
        lease: &Lease,
        outcome: Outcome,
    ) -> Result<(), Error> {
        self.heads.forget(id);
        let end = finish::Ending {
            id: id.to_owned(),
            lease: lease.clone(),
            outcome,
            at: SystemTime::now(),
        };
        let pool = &self.pool;
        self.finishes
            .run(end, |end| async move {
                let mut conn = pool.get().await?;
                finish::finish_alone(&mut conn, &end).await
            })
            .await?;
        self.bump();
        Ok(())
    }

    /// Cancels run `id` and its unfinished descendants, which are locked
    /// (and cancelled) first: see [`children`] for the lock order.
    pub(super) async fn do_cancel(&self, id: &str) -> Result<bool, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let now = SystemTime::now();
        children::cancel_descendants(&mut cx, id, now).await?;
        let mut rec = lock_run(&mut cx, id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        let was_held = rec.state == RunState::Held;
        let Some(event) = rules::cancel(&mut rec, now) else {
            // Finished already: its descendants' cancellations stand.
            notify::notify(&mut cx, &self.schema).await?;
            cx.commit().await?;
            self.bump();
            return Ok(false);
        };
        write_run(&mut cx, &rec).await?;
        history::insert(&mut cx, id, now, &event).await?;
        children::child_ended(&mut cx, id, !was_held).await?;
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(true)
    }

    pub(super) async fn do_retry(&self, id: &str) -> Result<(), Error> {
        self.apply_rule(id, |rec, now| rules::retry(rec, now).map(Some))
            .await
            .map(drop)
    }

    /// Applies `rule` to run `id`'s locked row: when it returns an event,
    /// writes the row and the event and notifies; returns whether it did.
    async fn apply_rule(
        &self,
        id: &str,
        rule: impl FnOnce(&mut RunRecord, SystemTime) -> Result<Option<Event>, Error>,
    ) -> Result<bool, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = lock_run(&mut cx, id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let Some(event) = rule(&mut rec, now)? else {
            return Ok(false);
        };
        write_run(&mut cx, &rec).await?;
        history::insert(&mut cx, id, now, &event).await?;
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(true)
    }

    /// When a claim may next find a run: the earliest lease expiry of an
    /// unfinished run under a lease, or deadline of a waiting or sleeping
    /// run under none.
    pub(super) async fn do_next_wakeup(&self) -> Result<Option<SystemTime>, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let row = cx.query_one(NEXT_WAKEUP, &[]).await?;
        Ok(get::<Option<i64>>(&row, 0)?.map(from_ts))
    }
}

impl PostgresStore {
    pub(super) async fn do_put_signal(
        &self,
        id: &str,
        name: &str,
        payload: &[u8],
    ) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        // Locked against a finish that would otherwise end the run between
        // this check and the insert.
        let rec = lock_run(&mut cx, id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let (signal, received) = rules::accept_signal(&rec, name, payload.to_vec(), now)?;
        cx.execute(
            "INSERT INTO cp_signals (run, name, payload, received_at) VALUES ($1, $2, $3, $4)",
            &[
                &id,
                &scrub(&signal.name),
                &&signal.payload[..],
                &ts(signal.received_at),
            ],
        )
        .await?;
        history::insert(&mut cx, id, now, &received).await?;
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(())
    }

    pub(super) async fn do_pending_signals(&self, id: &str) -> Result<Vec<SignalRecord>, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let rows = cx
            .query(
                "SELECT s.name, s.payload, s.received_at, s.id IS NOT NULL FROM cp_runs r \
                 LEFT JOIN cp_signals s ON s.run = r.id WHERE r.id = $1 ORDER BY s.id",
                &[&id],
            )
            .await?;
        if rows.is_empty() {
            return Err(Error::unknown_run(id));
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            if get::<bool>(&row, 3)? {
                out.push(SignalRecord {
                    name: get(&row, 0)?,
                    payload: get::<Vec<u8>>(&row, 1)?.into(),
                    received_at: from_ts(get(&row, 2)?),
                });
            }
        }
        Ok(out)
    }

    pub(super) async fn do_take_signal(
        &self,
        id: &str,
        lease: &Lease,
        name: &str,
    ) -> Result<Option<SignalRecord>, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = fenced(&mut cx, id, lease).await?;
        let Some(sig) = signals::consume(&mut cx, id, name).await? else {
            return Ok(None);
        };
        rules::consume_signal(&mut rec, &sig, SystemTime::now());
        write_run(&mut cx, &rec).await?;
        cx.commit().await?;
        Ok(Some(sig))
    }

    pub(super) async fn do_time_out(&self, id: &str, lease: &Lease) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = fenced(&mut cx, id, lease).await?;
        rules::time_out(&mut rec, SystemTime::now());
        write_run(&mut cx, &rec).await?;
        cx.commit().await
    }

    pub(super) async fn do_reject(
        &self,
        id: &str,
        lease: &Lease,
        reason: String,
    ) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = fenced(&mut cx, id, lease).await?;
        let now = SystemTime::now();
        let latest = load_seq(&mut cx, id, &rec.workflow, rec.latest_seq).await?;
        if let Some(event) = rules::reject_signal(&mut rec, reason, latest.as_deref(), now)? {
            history::insert(&mut cx, id, now, &event).await?;
        }
        write_run(&mut cx, &rec).await?;
        cx.commit().await
    }
}

impl PostgresStore {
    pub(super) async fn do_append_event(&self, id: &str, event: &Event) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        must_exist(&mut cx, id).await?;
        history::insert(&mut cx, id, SystemTime::now(), event).await?;
        cx.commit().await
    }

    pub(super) async fn do_history(&self, id: &str) -> Result<Vec<HistoryEntry>, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        // The events of `cp_history` and those the checkpoints' rows hold
        // (see the schema's version 5), in the order of their ids.
        let rows = cx
            .query(
                "SELECT e.at, e.event, e.seq, e.label FROM cp_runs r LEFT JOIN LATERAL ( \
                   SELECT h.id, h.at, h.event::text AS event, NULL::bigint AS seq, \
                          NULL::text AS label \
                   FROM cp_history h WHERE h.run = r.id \
                   UNION ALL \
                   SELECT c.event_id, c.created_at, NULL, c.seq, c.label \
                   FROM cp_checkpoints c WHERE c.run = r.id AND c.event_id IS NOT NULL \
                 ) e ON true WHERE r.id = $1 ORDER BY e.id",
                &[&id],
            )
            .await?;
        if rows.is_empty() {
            return Err(Error::unknown_run(id));
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let Some(at) = get::<Option<i64>>(&row, 0)? else {
                continue;
            };
            let event = match (
                get::<Option<String>>(&row, 1)?,
                get::<Option<i64>>(&row, 2)?,
            ) {
                (Some(event), _) => serde_json::from_str(&event)
                    .map_err(|e| corrupt(format_args!("run `{id}`: history event: {e}")))?,
                (None, Some(seq)) => Event::CheckpointSaved {
                    seq: super::conn::to_u64(seq, "seq")?,
                    label: get(&row, 3)?,
                },
                (None, None) => continue,
            };
            out.push(HistoryEntry {
                at: from_ts(at),
                event,
            });
        }
        Ok(out)
    }
}

impl PostgresStore {
    /// One statement in autocommit (`save::statement`): one round trip and one WAL
    /// flush; saves of several runs waiting at the same time share one
    /// transaction of such statements (see `group_commit`). A save it refuses (no row back) is done again as one
    /// transaction around the locked row (`save::save_locked`), which tells why
    /// with the errors of every fenced write (lost lease, cancelled, unknown
    /// run, wrong seq, damaged row), or saves a row that the statement
    /// leaves to it. So are values the statement cannot bind (too large for
    /// a `bigint`, a NUL in the lease's worker id) and a statement the
    /// server refuses for its data (SQLSTATE class 22, e.g. a NUL in a
    /// text): the error is then the one the fenced save gives, after its
    /// checks, as before.
    pub(super) async fn do_save(
        &self,
        lease: &Lease,
        cp: Arc<CheckpointRecord>,
        keep: Option<usize>,
    ) -> Result<(), Error> {
        if let Some(Suspend::Joining {
            children, token, ..
        }) = &cp.suspend
        {
            // Not batched: the join locks its children first (see `children`).
            self.heads.forget(&cp.run);
            let mut conn = self.pool.get().await?;
            return save_joining(&mut conn, lease, &cp, keep, children, token).await;
        }
        // Fields that extend their previous version are stored as what
        // they appended (see `segments`).
        let plan = self
            .heads
            .before(lease, &cp)
            .and_then(|head| segments::plan(&cp, &head))
            .map(Arc::new);
        let saved = self.group.save(lease, cp.clone(), keep, plan.clone()).await;
        let stored = match &saved {
            Ok(true) => Ok(plan.as_deref()),
            Ok(false) => Ok(None),
            Err(_) => Err(()),
        };
        if let Ok(plan) = stored {
            let bytes = plan.map_or(cp.data.len(), segments::RowPlan::bytes);
            self.written.fetch_add(bytes as u64, Ordering::Relaxed);
        }
        self.heads.saved(lease, &cp, stored);
        saved.map(|_| ())
    }

    pub(super) async fn do_latest(&self, id: &str) -> Result<Option<Arc<CheckpointRecord>>, Error> {
        const SQL: &str = concat!(
            "SELECT c.seq IS NOT NULL, r.workflow, ",
            cp_cols!(),
            " FROM cp_runs r LEFT JOIN cp_checkpoints c ON c.run = r.id AND c.seq = r.latest_seq \
             WHERE r.id = $1"
        );
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let row = cx
            .query_opt(SQL, &[&id])
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        if !get::<bool>(&row, 0)? {
            return Ok(None);
        }
        let workflow: String = get(&row, 1)?;
        Ok(Some(Arc::new(decode(
            &Arc::from(id),
            Some(&workflow),
            &row,
            2,
        )?)))
    }

    pub(super) async fn do_checkpoint(
        &self,
        id: &str,
        seq: u64,
    ) -> Result<Option<Arc<CheckpointRecord>>, Error> {
        const SQL: &str = concat!(
            "SELECT c.seq IS NOT NULL, r.workflow, ",
            cp_cols!(),
            " FROM cp_runs r LEFT JOIN cp_checkpoints c ON c.run = r.id AND c.seq = $2 \
             WHERE r.id = $1"
        );
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        // Sequence numbers are stored as `bigint`: a larger one names no
        // checkpoint (of a run that must exist, as in the other backends).
        let Ok(seq) = i64::try_from(seq) else {
            must_exist(&mut cx, id).await?;
            return Ok(None);
        };
        let row = cx
            .query_opt(SQL, &[&id, &seq])
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        if !get::<bool>(&row, 0)? {
            return Ok(None);
        }
        let workflow: String = get(&row, 1)?;
        Ok(Some(Arc::new(decode(
            &Arc::from(id),
            Some(&workflow),
            &row,
            2,
        )?)))
    }

    /// A damaged version is listed as such (see [`decode_listed`]); the
    /// others as they are.
    pub(super) async fn do_list_checkpoints(
        &self,
        id: &str,
    ) -> Result<Vec<Arc<CheckpointRecord>>, Error> {
        const SQL: &str = concat!(
            "SELECT c.seq IS NOT NULL, r.workflow, ",
            cp_cols!(),
            " FROM cp_runs r LEFT JOIN cp_checkpoints c ON c.run = r.id \
             WHERE r.id = $1 ORDER BY c.seq"
        );
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let rows = cx.query(SQL, &[&id]).await?;
        if rows.is_empty() {
            return Err(Error::unknown_run(id));
        }
        let run: Arc<str> = Arc::from(id);
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            if get::<bool>(&row, 0)? {
                let workflow: String = get(&row, 1)?;
                out.push(Arc::new(decode_listed(&run, Some(&workflow), &row, 2)?));
            }
        }
        Ok(out)
    }

    pub(super) async fn do_fork(&self, from: &str, seq: u64, new_id: &str) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        if cx
            .query_opt("SELECT 1 FROM cp_runs WHERE id = $1", &[&new_id])
            .await?
            .is_some()
        {
            return Err(Error::AlreadyExists {
                run: new_id.to_owned(),
            });
        }
        let src = load(&mut cx, from)
            .await?
            .ok_or_else(|| Error::unknown_run(from))?;
        let unknown = || Error::UnknownCheckpoint {
            run: from.to_owned(),
            seq,
        };
        let cp = load_seq(&mut cx, from, &src.workflow, seq)
            .await?
            .ok_or_else(unknown)?;
        let now = SystemTime::now();
        let (rec, copy, forked) = rules::fork(from, &cp, new_id, src.workflow, src.input, now);
        history::insert(&mut cx, from, now, &forked).await?;
        if !insert_run(&mut cx, &rec).await? {
            return Err(Error::AlreadyExists {
                run: new_id.to_owned(),
            });
        }
        checkpoints::insert(&mut cx, &copy).await?;
        history::insert(&mut cx, new_id, now, &forked).await?;
        // The fork joins the same children (they are not run again).
        if let Some(Suspend::Joining {
            children, token, ..
        }) = &copy.suspend
        {
            let live = children::lock_children(&mut cx, children).await?;
            children::join(&mut cx, new_id, children, token, &live).await?;
        }
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(())
    }

    /// Retention deletes rows as it goes; what is left is PostgreSQL's own
    /// space: a plain `VACUUM` of the tables makes dead rows' space reusable
    /// (it takes no lock that blocks workers).
    pub(super) async fn do_gc(&self) -> Result<GcReport, Error> {
        const SIZE: &str = "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relkind = 'r' \
             AND c.relname IN ('cp_runs', 'cp_checkpoints', 'cp_signals', 'cp_history', \
                               'cp_schemas', 'cp_schema_version', 'cp_segments', 'cp_joins')";
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let before: i64 = get(&cx.query_one(SIZE, &[]).await?, 0)?;
        cx.batch("VACUUM cp_checkpoints, cp_segments, cp_history, cp_signals, cp_runs")
            .await?;
        let after: i64 = get(&cx.query_one(SIZE, &[]).await?, 0)?;
        Ok(GcReport {
            bytes_before: u64::try_from(before).unwrap_or(0),
            bytes_after: u64::try_from(after).unwrap_or(0),
            ..GcReport::default()
        })
    }
}

/// What a claim works with, for every row it looks at.
struct ClaimAt<'a> {
    req: &'a ClaimRequest,
    expires: SystemTime,
    now: SystemTime,
    schema: &'a str,
}

/// A run a claim took, before its row is written back ([`write_runs`],
/// once for all of them).
struct Taken {
    claimed: Claimed,
    /// The descriptors of the latest checkpoint's appended fields.
    appended: Vec<segments::Appended>,
    /// `TakenOver`, when another instance held the lease.
    taken_over: Option<Event>,
}

/// Claims what it can of `rows` (locked by the claim query), adding each
/// run to `seen` and the runs taken to `taken`. Their latest checkpoints
/// are loaded in one query for all of them.
async fn claim_rows(
    cx: &mut Cx<'_>,
    rows: &[tokio_postgres::Row],
    at: &ClaimAt<'_>,
    seen: &mut Vec<String>,
    taken: &mut Vec<Taken>,
) -> Result<(), Error> {
    let recs: Vec<Result<RunRecord, Error>> = rows.iter().map(decode_run).collect();
    let wanted: Vec<(&str, &str, u64)> = recs
        .iter()
        .flatten()
        .map(|r| (&*r.id, &*r.workflow, r.latest_seq))
        .collect();
    let mut latest = load_seqs_checked(cx, &wanted).await?;
    for (row, rec) in rows.iter().zip(recs) {
        let id: String = get(row, 0)?;
        let found = latest.remove(&id).unwrap_or(Ok(None));
        seen.push(id);
        if let Some(t) = claim_row(cx, row, rec, found, at).await? {
            taken.push(t);
        }
    }
    Ok(())
}

/// Claims one run (`rec`, decoded from `row`; `found`, its latest
/// checkpoint) if the rules let this claim take it, without writing its
/// row back; marks it failed if it cannot be loaded.
async fn claim_row(
    cx: &mut Cx<'_>,
    row: &tokio_postgres::Row,
    rec: Result<RunRecord, Error>,
    found: Found,
    at: &ClaimAt<'_>,
) -> Result<Option<Taken>, Error> {
    let ClaimAt {
        req,
        expires,
        now,
        schema,
    } = *at;
    // A run whose row or latest checkpoint this build cannot decode must
    // not make every worker's claim fail: it is marked failed (see
    // `rules::damaged`) and skipped.
    let mut rec = match rec {
        Ok(rec) => rec,
        Err(e) => {
            let id: String = get(row, 0)?;
            mark_damaged(cx, &id, get(row, 1).ok(), None, e, now).await?;
            notify::notify(cx, schema).await?;
            return Ok(None);
        }
    };
    // The query decided under the lock; checked again here, as the other
    // backends define it (a waiting run's signal is looked at below).
    if !rules::lease_free(rec.lease.as_ref(), &req.worker, &req.instance, now)
        || !rules::claimable(&rec.state, true, now, req)
    {
        return Ok(None);
    }
    // Never started over without the checkpoint it had (see the rule).
    let checkpoint = found.and_then(|cp| {
        rules::latest_checkpoint(&rec, cp.as_ref().map(|(cp, _)| &**cp))?;
        Ok(cp)
    });
    let (checkpoint, appended) = match checkpoint {
        Ok(Some((cp, appended))) => (Some(cp), appended),
        Ok(None) => (None, Vec::new()),
        Err(e) => {
            let (id, workflow) = (rec.id.clone(), rec.workflow.clone());
            mark_damaged(cx, &id, Some(workflow), Some(rec), e, now).await?;
            notify::notify(cx, schema).await?;
            return Ok(None);
        }
    };
    let signal = match &rec.state {
        RunState::Waiting { signal, .. } => signals::consume(cx, &rec.id, signal).await?,
        _ => None,
    };
    // The signal may have gone to someone else meanwhile.
    if !rules::claimable(&rec.state, signal.is_some(), now, req) {
        return Ok(None);
    }
    let wake = rules::claim_wake(&rec.state, signal);
    let taken_over = rules::takeover(rec.lease.as_ref(), req);
    let lease = rules::claim(&mut rec, req, wake, expires, now);
    Ok(Some(Taken {
        claimed: Claimed {
            run: rec,
            lease,
            checkpoint,
        },
        appended,
        taken_over,
    }))
}

/// Marks run `id` (its row locked by the claim), which cannot be loaded or
/// decoded (`error`), failed, naming what can still be read of it: its
/// workflow, and the site and fields of its latest checkpoint. `rec`: its
/// record, when the row itself decoded.
async fn mark_damaged(
    cx: &mut Cx<'_>,
    id: &str,
    workflow: Option<String>,
    rec: Option<RunRecord>,
    error: Error,
    now: SystemTime,
) -> Result<(), Error> {
    let shape = cx
        .query_opt(
            "SELECT c.site_key, c.meta, c.v9_field_names FROM cp_runs r \
             JOIN cp_checkpoints c ON c.run = r.id AND c.seq = r.latest_seq WHERE r.id = $1",
            &[&id],
        )
        .await?;
    let site: Option<String> = shape.as_ref().and_then(|r| r.try_get(0).ok());
    let fields: Vec<String> = match shape.as_ref() {
        None => Vec::new(),
        Some(row) => match row.try_get::<_, Option<Vec<u8>>>(1) {
            Ok(Some(meta)) => checkpoints::meta::field_names(&meta),
            _ => row
                .try_get::<_, Option<Vec<String>>>(2)
                .ok()
                .flatten()
                .unwrap_or_default(),
        },
    };
    let error = rules::damaged(id, workflow.as_deref(), site.as_deref(), &fields, &error);
    let event = match rec {
        Some(mut rec) => {
            let event = rules::finish(&mut rec, Outcome::Failed { error }, now);
            write_run(cx, &rec).await?;
            event
        }
        None => {
            let event = Event::Failed {
                error: error.to_string(),
            };
            let failed = code(crate::store::sql::run_row::FAILED);
            cx.execute(
                "UPDATE cp_runs SET state = $2, error = $3, lease_worker = NULL, \
                 lease_instance = NULL, lease_expires = NULL, updated_at = $4 WHERE id = $1",
                &[&id, &failed, &super::conn::to_json(&error)?, &ts(now)],
            )
            .await?;
            event
        }
    };
    history::insert(cx, id, now, &event).await?;
    children::child_ended(cx, id, true).await?;
    Ok(())
}
