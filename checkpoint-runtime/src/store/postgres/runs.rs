//! Runs: their rows, creation, listing, claims (leases and fencing epochs),
//! renewal, release, finish and cancel.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use tokio_postgres::Row;

use super::conn::{corrupt, from_ts, get, scrub, to_json, ts, ts_after, Cx};
use super::{history, notify, PostgresStore};
use crate::status::RunFilter;
use crate::store::rules::{self, check_lease};
use crate::store::sql::run_row::{status_code, ErrorCol, RunCols, RunRow};
use crate::store::{
    ClaimRequest, ClaimResult, Claimed, Created, Lease, NewRun, Outcome, Release, RunRecord,
    RunState,
};
use crate::Error;

/// The columns [`decode_run`] reads, in order (the input last).
macro_rules! run_cols {
    () => {
        "r.id, r.workflow, r.state, r.signal, r.due, r.output, r.error, r.lease_worker, \
         r.lease_instance, r.lease_expires, r.epoch, r.attempt, r.latest_seq, r.wake_seq, \
         r.wake_signal, r.wake_payload, r.created_at, r.updated_at"
    };
}

/// How many columns [`run_cols`] has; the input (or an empty `bytea` in its
/// place) follows them.
pub(super) const RUN_COLS: usize = 18;

/// A run row (the [`run_cols`] columns and the input) as a record.
pub(super) fn decode_run(row: &Row) -> Result<RunRecord, Error> {
    RunRow {
        id: get(row, 0)?,
        workflow: get(row, 1)?,
        state: i64::from(get::<i16>(row, 2)?),
        signal: get(row, 3)?,
        due: get(row, 4)?,
        output: get(row, 5)?,
        error: get(row, 6)?,
        lease_worker: get(row, 7)?,
        lease_instance: get(row, 8)?,
        lease_expires: get(row, 9)?,
        epoch: get(row, 10)?,
        attempt: i64::from(get::<i32>(row, 11)?),
        latest_seq: get(row, 12)?,
        wake_seq: get(row, 13)?,
        wake_signal: get(row, 14)?,
        wake_payload: get(row, 15)?,
        created_at: get(row, 16)?,
        updated_at: get(row, 17)?,
        input: get(row, RUN_COLS)?,
    }
    .into_record()
    .map_err(corrupt)
}

/// The columns of `rec` as this backend binds them: texts scrubbed (see
/// [`scrub`]), the state as a `smallint`, the attempt as an `integer`.
struct Bound<'a> {
    cols: RunCols<'a>,
    state: i16,
    signal: Option<Cow<'a, str>>,
    error: Option<String>,
    attempt: i32,
    wake_signal: Option<Cow<'a, str>>,
}

impl<'a> Bound<'a> {
    fn of(rec: &'a RunRecord) -> Result<Bound<'a>, Error> {
        let cols = RunCols::of(rec)?;
        let error = match &cols.error {
            None => None,
            Some(ErrorCol::Text(text)) => Some(scrub(text).into_owned()),
            Some(ErrorCol::Json(error)) => Some(to_json(error)?),
        };
        Ok(Bound {
            state: code(cols.state),
            signal: cols.signal.map(scrub),
            error,
            attempt: i32::try_from(cols.attempt).unwrap_or(i32::MAX),
            wake_signal: cols.wake_signal.map(scrub),
            cols,
        })
    }
}

/// A state code as the `smallint` column holds it (codes are 0 to 5).
fn code(state: i64) -> i16 {
    i16::try_from(state).unwrap_or(i16::MAX)
}

/// Loads run `id` with its row locked until the transaction ends (without
/// its input). `None`: no such run.
pub(super) async fn lock_run(cx: &mut Cx<'_>, id: &str) -> Result<Option<RunRecord>, Error> {
    const SQL: &str = concat!(
        "SELECT ",
        run_cols!(),
        ", ''::bytea FROM cp_runs r WHERE r.id = $1 FOR NO KEY UPDATE"
    );
    cx.query_opt(SQL, &[&id])
        .await?
        .map(|row| decode_run(&row))
        .transpose()
}

/// Loads run `id`, locked, and checks that `lease` still holds it (see
/// [`check_lease`]).
pub(super) async fn fenced(cx: &mut Cx<'_>, id: &str, lease: &Lease) -> Result<RunRecord, Error> {
    let rec = lock_run(cx, id)
        .await?
        .ok_or_else(|| Error::unknown_run(id))?;
    check_lease(id, &rec, lease)?;
    Ok(rec)
}

/// Writes every mutable column of `rec` back to its row.
pub(super) async fn write_run(cx: &mut Cx<'_>, rec: &RunRecord) -> Result<(), Error> {
    let b = Bound::of(rec)?;
    let n = cx
        .execute(
            "UPDATE cp_runs SET state = $2, signal = $3, due = $4, output = $5, error = $6, \
             lease_worker = $7, lease_instance = $8, lease_expires = $9, epoch = $10, \
             attempt = $11, latest_seq = $12, wake_seq = $13, wake_signal = $14, \
             wake_payload = $15, updated_at = $16 WHERE id = $1",
            &[
                &rec.id,
                &b.state,
                &b.signal,
                &b.cols.due,
                &b.cols.output,
                &b.error,
                &b.cols.lease_worker,
                &b.cols.lease_instance,
                &b.cols.lease_expires,
                &b.cols.epoch,
                &b.attempt,
                &b.cols.latest_seq,
                &b.cols.wake_seq,
                &b.wake_signal,
                &b.cols.wake_payload,
                &b.cols.updated_at,
            ],
        )
        .await?;
    if n != 1 {
        return Err(Error::internal(format!(
            "run `{}` vanished under its transaction",
            rec.id
        )));
    }
    Ok(())
}

/// Inserts a new run unless its id exists; returns whether it did.
pub(super) async fn insert_run(cx: &mut Cx<'_>, rec: &RunRecord) -> Result<bool, Error> {
    let b = Bound::of(rec)?;
    let n = cx
        .execute(
            "INSERT INTO cp_runs (id, workflow, input, state, signal, due, output, error, \
             epoch, attempt, latest_seq, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (id) DO NOTHING",
            &[
                &rec.id,
                &rec.workflow,
                &&rec.input[..],
                &b.state,
                &b.signal,
                &b.cols.due,
                &b.cols.output,
                &b.error,
                &b.cols.epoch,
                &b.attempt,
                &b.cols.latest_seq,
                &b.cols.created_at,
                &b.cols.updated_at,
            ],
        )
        .await?;
    Ok(n == 1)
}

/// Loads a run with its input.
pub(super) async fn load(cx: &mut Cx<'_>, id: &str) -> Result<Option<RunRecord>, Error> {
    const SQL: &str = concat!(
        "SELECT ",
        run_cols!(),
        ", r.input FROM cp_runs r WHERE r.id = $1"
    );
    cx.query_opt(SQL, &[&id])
        .await?
        .map(|row| decode_run(&row))
        .transpose()
}

/// Whether run `id` exists; [`Error::UnknownRun`] if not.
pub(super) async fn must_exist(cx: &mut Cx<'_>, id: &str) -> Result<(), Error> {
    match cx
        .query_opt("SELECT 1 FROM cp_runs WHERE id = $1", &[&id])
        .await?
    {
        Some(_) => Ok(()),
        None => Err(Error::unknown_run(id)),
    }
}

/// The runs a claim may take, in creation order: `$1` now, `$2` worker, `$3`
/// instance, `$4` the workflows the caller runs, `$5` only this run (or
/// NULL), `$6` at most this many, `$7` not these runs (already looked at by
/// this claim). Locks them, skipping rows other claims (or fenced writes)
/// hold.
const CLAIM: &str = concat!(
    "SELECT ",
    run_cols!(),
    ", r.input FROM cp_runs r \
     WHERE r.state < 3 AND r.workflow = ANY($4) AND ($5::text IS NULL OR r.id = $5) \
     AND (r.lease_worker IS NULL OR r.lease_expires <= $1 \
          OR (r.lease_worker = $2 AND r.lease_instance < $3)) \
     AND (r.state = 0 OR (r.state = 2 AND r.due <= $1) \
          OR (r.state = 1 AND (r.due <= $1 OR EXISTS \
              (SELECT 1 FROM cp_signals s WHERE s.run = r.id AND s.name = r.signal)))) \
     AND NOT (r.id = ANY($7::text[])) \
     ORDER BY r.ord LIMIT $6 \
     FOR NO KEY UPDATE OF r SKIP LOCKED"
);

/// Runnable runs of workflows the caller does not run (same parameters as
/// [`CLAIM`]; not locked).
const UNREGISTERED: &str = "SELECT r.id, r.workflow FROM cp_runs r \
     WHERE r.state < 3 AND NOT (r.workflow = ANY($4)) AND ($5::text IS NULL OR r.id = $5) \
     AND (r.lease_worker IS NULL OR r.lease_expires <= $1 \
          OR (r.lease_worker = $2 AND r.lease_instance < $3)) \
     AND (r.state = 0 OR (r.state = 2 AND r.due <= $1) \
          OR (r.state = 1 AND (r.due <= $1 OR EXISTS \
              (SELECT 1 FROM cp_signals s WHERE s.run = r.id AND s.name = r.signal)))) \
     ORDER BY r.ord LIMIT $6";

impl PostgresStore {
    pub(super) async fn do_create(&self, run: NewRun) -> Result<Created, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let now = SystemTime::now();
        let (rec, started) = rules::create(run, now);
        if !insert_run(&mut cx, &rec).await? {
            let existing = load(&mut cx, &rec.id)
                .await?
                .ok_or_else(|| Error::internal(format!("run `{}` vanished", rec.id)))?;
            return Ok(Created::Existing(Box::new(existing)));
        }
        history::insert(&mut cx, &rec.id, now, &started).await?;
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
             ORDER BY r.ord LIMIT $4::bigint"
        );
        let limit = filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        let status = filter.status.map(|kind| code(status_code(kind)));
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let rows = cx
            .query(SQL, &[&filter.workflow, &filter.id_prefix, &status, &limit])
            .await?;
        rows.iter().map(decode_run).collect()
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
        for row in cx.query(UNREGISTERED, &params).await? {
            out.unregistered.push((get(&row, 0)?, get(&row, 1)?));
        }
        // Runs this claim looked at and did not take are excluded from the
        // next round, so that one the claim cannot take (its row does not
        // decode, or the signal it waits for went elsewhere) does not use
        // up the limit: the claim asks again for the rest.
        let mut seen: Vec<String> = Vec::new();
        loop {
            let want = limit - i64::try_from(out.claimed.len()).unwrap_or(limit);
            if want <= 0 {
                break;
            }
            let rows = cx
                .query(
                    CLAIM,
                    &[
                        &now_i, &worker, &instance, &workflows, &req.only, &want, &seen,
                    ],
                )
                .await?;
            let exhausted = i64::try_from(rows.len()).unwrap_or(i64::MAX) < want;
            for row in rows {
                let id: String = get(&row, 0)?;
                seen.push(id);
                // A run whose row or latest checkpoint this build cannot
                // decode is left untouched (not claimed, not changed): it
                // must not make every worker's claim fail. Loading it reports
                // the error.
                let Ok(mut rec) = decode_run(&row) else {
                    continue;
                };
                // The query decided under the lock; checked again here, as
                // the other backends define it.
                // (A waiting run's signal is looked at below.)
                if !rules::lease_free(rec.lease.as_ref(), worker, instance, now)
                    || !rules::runnable(&rec.state, true, now)
                {
                    continue;
                }
                let Ok(checkpoint) =
                    super::checkpoints::load_seq_checked(&mut cx, &rec.id, rec.latest_seq).await?
                else {
                    continue;
                };
                let signal = match &rec.state {
                    RunState::Waiting { signal, .. } => {
                        super::signals::consume(&mut cx, &rec.id, signal).await?
                    }
                    _ => None,
                };
                // The signal may have gone to someone else meanwhile.
                if !rules::runnable(&rec.state, signal.is_some(), now) {
                    continue;
                }
                let wake = rules::claim_wake(&rec.state, signal);
                let lease = rules::claim(&mut rec, req, wake, expires, now);
                write_run(&mut cx, &rec).await?;
                out.claimed.push(Claimed {
                    run: rec,
                    lease,
                    checkpoint,
                });
            }
            if exhausted {
                break;
            }
        }
        cx.commit().await?;
        Ok(out)
    }

    pub(super) async fn do_renew(
        &self,
        id: &str,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = fenced(&mut cx, id, lease).await?;
        rules::renew(&mut rec, from_ts(ts_after(SystemTime::now(), ttl)));
        write_run(&mut cx, &rec).await?;
        cx.commit().await
    }

    pub(super) async fn do_release(
        &self,
        id: &str,
        lease: &Lease,
        how: Release,
    ) -> Result<(), Error> {
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
        if let Some(event) = rules::release(&mut rec, how, now) {
            history::insert(&mut cx, id, now, &event).await?;
        }
        write_run(&mut cx, &rec).await?;
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
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = fenced(&mut cx, id, lease).await?;
        let now = SystemTime::now();
        let event = rules::finish(&mut rec, outcome, now);
        write_run(&mut cx, &rec).await?;
        history::insert(&mut cx, id, now, &event).await?;
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(())
    }

    pub(super) async fn do_cancel(&self, id: &str) -> Result<bool, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = lock_run(&mut cx, id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let Some(event) = rules::cancel(&mut rec, now) else {
            return Ok(false);
        };
        write_run(&mut cx, &rec).await?;
        history::insert(&mut cx, id, now, &event).await?;
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(true)
    }

    pub(super) async fn do_next_wakeup(&self) -> Result<Option<SystemTime>, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let row = cx
            .query_one(
                "SELECT min(CASE WHEN lease_worker IS NOT NULL THEN lease_expires \
                                 WHEN state IN (1, 2) THEN due END) \
                 FROM cp_runs WHERE state < 3",
                &[],
            )
            .await?;
        Ok(get::<Option<i64>>(&row, 0)?.map(from_ts))
    }
}
