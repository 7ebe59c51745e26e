//! The reads of [`PostgresStore`]: a run, a listing, checkpoints,
//! signals, the history, the next wake-up, and the space report of `gc`.
//! Each is one statement outside any transaction; none changes a run
//! (writes go through a rule, see [`ops`](super::ops)).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use super::conn::{corrupt, from_ts, get, ts};
use super::tables::checkpoints::{cp_cols, decode, decode_listed};
use super::tables::runs::{code, decode_run, load, must_exist, run_cols, NEXT_WAKEUP};
use super::PostgresStore;
use crate::history::HistoryEntry;
use crate::status::{RunFilter, StatusKind};
use crate::store::rules;
use crate::store::sql::run_row::{counted_kind, state_sql, status_code, tags_col};
use crate::store::{CheckpointRecord, GcReport, RunRecord, SignalRecord, Wakeup};
use crate::Error;

impl PostgresStore {
    pub(super) async fn do_load(&self, id: &str) -> Result<Option<RunRecord>, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        load(&mut cx, id).await
    }

    pub(super) async fn do_list(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, Error> {
        // A completed run with an `Err` output counts as failed. Two
        // statements, not an ORDER BY expression: each walks the `ord`
        // index in its direction and stops at the page.
        macro_rules! list_sql {
            ($order:literal) => {
                concat!(
                    "SELECT ",
                    run_cols!(),
                    ", r.input FROM cp_runs r \
                     WHERE ($1::text IS NULL OR r.workflow = $1) \
                       AND ($2::text IS NULL OR starts_with(r.id, $2)) \
                       AND ($3::smallint IS NULL OR (CASE WHEN r.state = ",
                    state_sql!(COMPLETED),
                    " AND r.error IS NOT NULL THEN ",
                    state_sql!(FAILED),
                    " ELSE r.state END) = $3) \
                       AND ($5::text IS NULL OR r.parent = $5) \
                       AND ($7::text IS NULL OR r.tags @> $7::text::jsonb) \
                     ORDER BY r.ord ",
                    $order,
                    " LIMIT $4::bigint OFFSET $6::bigint"
                )
            };
        }
        const OLDEST_FIRST: &str = list_sql!("ASC");
        const NEWEST_FIRST: &str = list_sql!("DESC");
        let sql = if filter.newest_first {
            NEWEST_FIRST
        } else {
            OLDEST_FIRST
        };
        let limit = filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        let offset = i64::try_from(filter.offset).unwrap_or(i64::MAX);
        let status = filter.status.map(|kind| code(status_code(kind)));
        let tags = tags_col(&filter.tags)?;
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let rows = cx
            .query(
                sql,
                &[
                    &filter.workflow,
                    &filter.id_prefix,
                    &status,
                    &limit,
                    &filter.parent,
                    &offset,
                    &tags,
                ],
            )
            .await?;
        rows.iter().map(decode_run).collect()
    }

    /// [`Store::count_runs`](crate::store::Store::count_runs): one row per
    /// group of runs that share a status, counted by the server.
    pub(super) async fn do_count(
        &self,
        filter: &RunFilter,
    ) -> Result<BTreeMap<StatusKind, u64>, Error> {
        const SQL: &str = "SELECT r.state, r.error IS NOT NULL, \
                  COALESCE(r.lease_expires > $4, false), \
                  COALESCE(starts_with(r.signal, 'join#'), false), count(*) \
             FROM cp_runs r \
             WHERE ($1::text IS NULL OR r.workflow = $1) \
               AND ($2::text IS NULL OR starts_with(r.id, $2)) \
               AND ($3::text IS NULL OR r.parent = $3) \
               AND ($5::text IS NULL OR r.tags @> $5::text::jsonb) \
             GROUP BY 1, 2, 3, 4";
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let now = ts(SystemTime::now());
        let tags = tags_col(&filter.tags)?;
        let rows = cx
            .query(
                SQL,
                &[
                    &filter.workflow,
                    &filter.id_prefix,
                    &filter.parent,
                    &now,
                    &tags,
                ],
            )
            .await?;
        let mut counts = BTreeMap::new();
        for row in &rows {
            let state = i64::from(get::<i16>(row, 0)?);
            let kind = counted_kind(state, get(row, 1)?, get(row, 2)?, get(row, 3)?)
                .ok_or_else(|| corrupt(format!("a run has the unknown state code {state}")))?;
            let n: i64 = get(row, 4)?;
            *counts.entry(kind).or_insert(0) += u64::try_from(n).unwrap_or(0);
        }
        Ok(counts)
    }

    pub(super) async fn do_parked(&self) -> Result<Vec<RunRecord>, Error> {
        const SQL: &str = concat!(
            "SELECT ",
            run_cols!(),
            ", ''::bytea FROM cp_runs r WHERE r.state = ",
            state_sql!(PARKED),
            " ORDER BY r.ord"
        );
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let rows = cx.query(SQL, &[]).await?;
        rows.iter().map(decode_run).collect()
    }

    /// When a claim may next find a run: the earliest lease expiry of an
    /// unfinished run under a lease, and the earliest deadline later than
    /// `after` (the runtime's clock) of a waiting or sleeping run under none.
    pub(super) async fn do_next_wakeup(&self, after: SystemTime) -> Result<Wakeup, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let now = ts(SystemTime::now());
        let row = cx.query_one(NEXT_WAKEUP, &[&ts(after), &now]).await?;
        let lease = get::<Option<i64>>(&row, 0)?;
        let window = get::<Option<i64>>(&row, 2)?;
        let lease = match (lease, window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(Wakeup {
            lease: lease.map(from_ts),
            timer: get::<Option<i64>>(&row, 1)?.map(from_ts),
        })
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
                (None, Some(seq)) => rules::checkpoint_saved(
                    super::conn::to_u64(seq, "seq")?,
                    get::<Option<String>>(&row, 3)?.as_deref(),
                ),
                (None, None) => continue,
            };
            out.push(HistoryEntry {
                at: from_ts(at),
                event,
            });
        }
        Ok(out)
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
        found_checkpoint(id, &row)
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
        found_checkpoint(id, &row)
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

    /// Retention deletes rows as it goes; what is left is PostgreSQL's own
    /// space: a plain `VACUUM` of the tables makes dead rows' space reusable
    /// (it takes no lock that blocks workers).
    pub(super) async fn do_gc(&self) -> Result<GcReport, Error> {
        const SIZE: &str = "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relkind = 'r' \
             AND c.relname IN ('cp_runs', 'cp_checkpoints', 'cp_signals', 'cp_history', \
                               'cp_schemas', 'cp_schema_version', 'cp_segments', 'cp_joins', \
                               'cp_signal_sites', 'cp_schedules')";
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

/// The checkpoint a row of `SELECT c.seq IS NOT NULL, r.workflow, cp_cols!()`
/// holds: none when the run has no such checkpoint.
fn found_checkpoint(
    id: &str,
    row: &tokio_postgres::Row,
) -> Result<Option<Arc<CheckpointRecord>>, Error> {
    if !get::<bool>(row, 0)? {
        return Ok(None);
    }
    let workflow: String = get(row, 1)?;
    Ok(Some(Arc::new(decode(
        &Arc::from(id),
        Some(&workflow),
        row,
        2,
    )?)))
}
