//! The `cp_runs` table: a run's row (its state, lease, epoch and wake
//! value), read and written whole, locked for fenced writes, and the claim
//! queries.

use std::borrow::Cow;
use std::time::SystemTime;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::history::Event;
use crate::store::postgres::conn::{corrupt, get, scrub, to_json, ts, Cx};
use crate::store::rules::check_lease;
use crate::store::sql::run_row::{state_sql, ErrorCol, RunCols, RunRow};
use crate::store::{Lease, RunRecord};
use crate::Error;

/// The columns [`decode_run`] reads, in order (the input last).
macro_rules! run_cols {
    () => {
        "r.id, r.workflow, r.state, r.signal, r.due, r.output, r.error, r.lease_worker, \
         r.lease_instance, r.lease_expires, r.epoch, r.attempt, r.latest_seq, r.wake_seq, \
         r.wake_signal, r.wake_payload, r.created_at, r.updated_at, r.version, r.parent, \
         r.cancel_request, r.tags::text AS tags, r.queue, r.priority"
    };
}
pub(in crate::store::postgres) use run_cols;

/// How many columns [`run_cols`] has; the input (or an empty `bytea` in its
/// place) follows them.
pub(in crate::store::postgres) const RUN_COLS: usize = 24;

/// A run row (the [`run_cols`] columns and the input) as a record.
pub(in crate::store::postgres) fn decode_run(row: &Row) -> Result<RunRecord, Error> {
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
        version: i64::from(get::<i32>(row, 18)?),
        input: get(row, RUN_COLS)?,
        parent: get(row, 19)?,
        cancel: get(row, 20)?,
        tags: get(row, 21)?,
        queue: get(row, 22)?,
        priority: i64::from(get::<i32>(row, 23)?),
    }
    .into_record()
    .map_err(corrupt)
}

/// The columns of `rec` as this backend binds them: texts scrubbed (see
/// [`scrub`]), the state as a `smallint`, the attempt as an `integer`.
pub(in crate::store::postgres) struct Bound<'a> {
    cols: RunCols<'a>,
    state: i16,
    signal: Option<Cow<'a, str>>,
    error: Option<String>,
    attempt: i32,
    wake_signal: Option<Cow<'a, str>>,
}

impl<'a> Bound<'a> {
    pub(in crate::store::postgres) fn of(rec: &'a RunRecord) -> Result<Bound<'a>, Error> {
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

    /// The values [`write_run`] gives the columns that
    /// `rules::save_checkpoint` sets, in this order: `state`, `signal`,
    /// `due`, `output`, `error` (the state's columns, all of them), `attempt`,
    /// `latest_seq`, `wake_seq`, `wake_signal`, `wake_payload` (the wake
    /// value, all of it), `updated_at`. The others (the lease, the epoch)
    /// a save leaves as they are.
    pub(in crate::store::postgres) fn saved(&self) -> [&(dyn ToSql + Sync); 11] {
        [
            &self.state,
            &self.signal,
            &self.cols.due,
            &self.cols.output,
            &self.error,
            &self.attempt,
            &self.cols.latest_seq,
            &self.cols.wake_seq,
            &self.wake_signal,
            &self.cols.wake_payload,
            &self.cols.updated_at,
        ]
    }
}

impl Bound<'_> {
    /// The values [`write_run`] gives the columns of the run's state, in
    /// this order: `state`, `signal`, `due`, `output`, `error` (what a
    /// run's end sets, with its `updated_at` and the lease cleared).
    pub(in crate::store::postgres) fn finished(&self) -> [&(dyn ToSql + Sync); 5] {
        [
            &self.state,
            &self.signal,
            &self.cols.due,
            &self.cols.output,
            &self.error,
        ]
    }
}

/// The columns of several runs' states ([`Bound::finished`]'s, in its
/// order: what an end sets), as the columns one statement unnests (see
/// `finish`, and [`SavedColumns`]).
#[derive(Default)]
pub(in crate::store::postgres) struct StateColumns<'a> {
    pub(in crate::store::postgres) state: Vec<i16>,
    pub(in crate::store::postgres) signal: Vec<Option<&'a str>>,
    pub(in crate::store::postgres) due: Vec<Option<i64>>,
    pub(in crate::store::postgres) output: Vec<Option<&'a [u8]>>,
    pub(in crate::store::postgres) error: Vec<Option<&'a str>>,
}

impl<'a> StateColumns<'a> {
    /// Adds the state of `run`.
    pub(in crate::store::postgres) fn push(&mut self, run: &'a Bound<'a>) {
        self.state.push(run.state);
        self.signal.push(run.signal.as_deref());
        self.due.push(run.cols.due);
        self.output.push(run.cols.output);
        self.error.push(run.error.as_deref());
    }

    /// The columns, in [`Bound::finished`]'s order.
    pub(in crate::store::postgres) fn params(&self) -> [&(dyn ToSql + Sync); 5] {
        [
            &self.state,
            &self.signal,
            &self.due,
            &self.output,
            &self.error,
        ]
    }
}

/// The run columns several saves set ([`Bound::saved`]'s, in its order),
/// as the columns one statement unnests (see `save_batch`).
#[derive(Default)]
pub(in crate::store::postgres) struct SavedColumns<'a> {
    pub(in crate::store::postgres) state: StateColumns<'a>,
    pub(in crate::store::postgres) attempt: Vec<i32>,
    pub(in crate::store::postgres) latest_seq: Vec<i64>,
    pub(in crate::store::postgres) wake_seq: Vec<Option<i64>>,
    pub(in crate::store::postgres) wake_signal: Vec<Option<&'a str>>,
    pub(in crate::store::postgres) wake_payload: Vec<Option<&'a [u8]>>,
    pub(in crate::store::postgres) updated_at: Vec<i64>,
}

impl<'a> SavedColumns<'a> {
    /// Adds the columns `run` sets.
    pub(in crate::store::postgres) fn push(&mut self, run: &'a Bound<'a>) {
        self.state.push(run);
        self.attempt.push(run.attempt);
        self.latest_seq.push(run.cols.latest_seq);
        self.wake_seq.push(run.cols.wake_seq);
        self.wake_signal.push(run.wake_signal.as_deref());
        self.wake_payload.push(run.cols.wake_payload);
        self.updated_at.push(run.cols.updated_at);
    }

    /// The columns, in [`Bound::saved`]'s order.
    pub(in crate::store::postgres) fn params(&self) -> [&(dyn ToSql + Sync); 11] {
        let [state, signal, due, output, error] = self.state.params();
        [
            state,
            signal,
            due,
            output,
            error,
            &self.attempt,
            &self.latest_seq,
            &self.wake_seq,
            &self.wake_signal,
            &self.wake_payload,
            &self.updated_at,
        ]
    }
}

/// A state code as the `smallint` column holds it (codes are 0 to 7).
pub(in crate::store::postgres) fn code(state: i64) -> i16 {
    i16::try_from(state).unwrap_or(i16::MAX)
}

/// Loads run `id` with its row locked until the transaction ends (without
/// its input). `None`: no such run.
pub(in crate::store::postgres) async fn lock_run(
    cx: &mut Cx<'_>,
    id: &str,
) -> Result<Option<RunRecord>, Error> {
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
pub(in crate::store::postgres) async fn fenced(
    cx: &mut Cx<'_>,
    id: &str,
    lease: &Lease,
) -> Result<RunRecord, Error> {
    let rec = lock_run(cx, id)
        .await?
        .ok_or_else(|| Error::unknown_run(id))?;
    check_lease(id, &rec, lease)?;
    Ok(rec)
}

/// Writes every mutable column of `rec` back to its row.
pub(in crate::store::postgres) async fn write_run(
    cx: &mut Cx<'_>,
    rec: &RunRecord,
) -> Result<(), Error> {
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

/// [`write_run`] for many records in one statement (a claim's runs: one
/// round trip for all of them, where a statement each kept the claim's
/// transaction, and its row locks, open for a round trip per run).
pub(in crate::store::postgres) async fn write_runs(
    cx: &mut Cx<'_>,
    recs: &[&RunRecord],
) -> Result<(), Error> {
    const SQL: &str = "UPDATE cp_runs SET state = u.state, signal = u.signal, due = u.due, \
         output = u.output, error = u.error, lease_worker = u.lease_worker, \
         lease_instance = u.lease_instance, lease_expires = u.lease_expires, epoch = u.epoch, \
         attempt = u.attempt, latest_seq = u.latest_seq, wake_seq = u.wake_seq, \
         wake_signal = u.wake_signal, wake_payload = u.wake_payload, updated_at = u.updated_at \
         FROM unnest($1::text[], $2::smallint[], $3::text[], $4::bigint[], $5::bytea[], \
           $6::text[], $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::integer[], \
           $12::bigint[], $13::bigint[], $14::text[], $15::bytea[], $16::bigint[]) \
         AS u (id, state, signal, due, output, error, lease_worker, lease_instance, \
           lease_expires, epoch, attempt, latest_seq, wake_seq, wake_signal, wake_payload, \
           updated_at) \
         WHERE cp_runs.id = u.id";
    match recs {
        [] => return Ok(()),
        [rec] => return write_run(cx, rec).await,
        _ => {}
    }
    let bound: Vec<Bound<'_>> = recs
        .iter()
        .map(|r| Bound::of(r))
        .collect::<Result<_, _>>()?;
    let ids: Vec<&str> = recs.iter().map(|r| &*r.id).collect();
    let mut saved = SavedColumns::default();
    let (mut worker, mut instance, mut expires, mut epoch) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for b in &bound {
        saved.push(b);
        worker.push(b.cols.lease_worker);
        instance.push(b.cols.lease_instance);
        expires.push(b.cols.lease_expires);
        epoch.push(b.cols.epoch);
    }
    let [state, signal, due, output, error, attempt, latest_seq, wake_seq, wake_signal, wake_payload, updated_at] =
        saved.params();
    let n = cx
        .execute(
            SQL,
            &[
                &ids,
                state,
                signal,
                due,
                output,
                error,
                &worker,
                &instance,
                &expires,
                &epoch,
                attempt,
                latest_seq,
                wake_seq,
                wake_signal,
                wake_payload,
                updated_at,
            ],
        )
        .await?;
    if n != recs.len() as u64 {
        return Err(Error::internal(format!(
            "{} of {} runs vanished under their transaction",
            recs.len() as u64 - n.min(recs.len() as u64),
            recs.len()
        )));
    }
    Ok(())
}

/// The insertion of a new run's row unless its id exists, from `$1`–`$18`
/// (see [`insert_run`]).
macro_rules! insert_run_sql {
    () => {
        "INSERT INTO cp_runs (id, workflow, input, state, signal, due, output, error, \
         epoch, attempt, latest_seq, created_at, updated_at, version, parent, \
         tags, queue, priority) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
         $16::text::jsonb, $17, $18) \
         ON CONFLICT (id) DO NOTHING"
    };
}

/// Inserts a new run unless its id exists; returns whether it did.
pub(in crate::store::postgres) async fn insert_run(
    cx: &mut Cx<'_>,
    rec: &RunRecord,
) -> Result<bool, Error> {
    insert_run_then(cx, rec, insert_run_sql!(), &[]).await
}

/// Inserts a new run unless its id exists and, only if it did, its first
/// event (`RunStarted`), as one statement: a start in autocommit is one
/// round trip and one commit, where the transaction of [`insert_run`] and
/// `history::insert` took three. Returns whether the run was new.
pub(in crate::store::postgres) async fn insert_run_started(
    cx: &mut Cx<'_>,
    rec: &RunRecord,
    at: SystemTime,
    started: &Event,
) -> Result<bool, Error> {
    const SQL: &str = concat!(
        "WITH r AS (",
        insert_run_sql!(),
        " RETURNING id) INSERT INTO cp_history (run, at, event) \
         SELECT id, $19, $20::text::jsonb FROM r"
    );
    let json = to_json(started)?;
    insert_run_then(cx, rec, SQL, &[&ts(at), &json]).await
}

/// Inserts new top-level runs whose ids exist neither in the table nor
/// twice in `runs`, each with its first event (`RunStarted`, as JSON, at
/// the given time), as one statement: several starts in one round trip
/// and one commit. The rows are inserted in the order of `runs` (their
/// creation order, `ord`), and an id that exists is skipped, as
/// [`insert_run_started`] skips it. Returns the ids it inserted.
pub(in crate::store::postgres) async fn insert_runs_started(
    cx: &mut Cx<'_>,
    runs: &[(&RunRecord, i64, &str)],
) -> Result<Vec<String>, Error> {
    const SQL: &str = "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], \
           $4::smallint[], $5::text[], $6::bigint[], $7::bytea[], $8::text[], $9::bigint[], \
           $10::integer[], $11::bigint[], $12::bigint[], $13::bigint[], $14::integer[], \
           $15::bigint[], $16::text[], $17::text[], $18::text[], $19::integer[]) \
           WITH ORDINALITY AS v (id, workflow, input, state, \
           signal, due, output, error, epoch, attempt, latest_seq, created_at, updated_at, \
           version, at, event, tags, queue, priority, i)), \
         r AS (INSERT INTO cp_runs (id, workflow, input, state, signal, due, output, error, \
           epoch, attempt, latest_seq, created_at, updated_at, version, tags, queue, priority) \
           SELECT id, workflow, input, state, signal, due, output, error, epoch, attempt, \
             latest_seq, created_at, updated_at, version, tags::jsonb, queue, priority \
           FROM v ORDER BY i \
           ON CONFLICT (id) DO NOTHING RETURNING id), \
         h AS (INSERT INTO cp_history (run, at, event) \
           SELECT v.id, v.at, v.event::jsonb FROM v JOIN r ON r.id = v.id ORDER BY v.i) \
         SELECT id FROM r";
    let bound = runs
        .iter()
        .map(|(rec, _, _)| Bound::of(rec))
        .collect::<Result<Vec<_>, _>>()?;
    // One array per column, in `SQL`'s order.
    let bound: Vec<(&RunRecord, &Bound, i64, &str)> = runs
        .iter()
        .zip(&bound)
        .map(|((rec, at, event), b)| (*rec, b, *at, *event))
        .collect();
    fn col<'a, T>(
        runs: &[(&'a RunRecord, &'a Bound<'a>, i64, &'a str)],
        f: impl Fn(&(&'a RunRecord, &'a Bound<'a>, i64, &'a str)) -> T,
    ) -> Vec<T> {
        runs.iter().map(f).collect()
    }
    let id = col(&bound, |r| &*r.0.id);
    let workflow = col(&bound, |r| &*r.0.workflow);
    let input = col(&bound, |r| &r.0.input[..]);
    let state = col(&bound, |r| r.1.state);
    let signal = col(&bound, |r| r.1.signal.as_deref());
    let due = col(&bound, |r| r.1.cols.due);
    let output = col(&bound, |r| r.1.cols.output);
    let error = col(&bound, |r| r.1.error.as_deref());
    let epoch = col(&bound, |r| r.1.cols.epoch);
    let attempt = col(&bound, |r| r.1.attempt);
    let latest_seq = col(&bound, |r| r.1.cols.latest_seq);
    let created_at = col(&bound, |r| r.1.cols.created_at);
    let updated_at = col(&bound, |r| r.1.cols.updated_at);
    let version = col(&bound, |r| i32::try_from(r.0.version).unwrap_or(i32::MAX));
    let at = col(&bound, |r| r.2);
    let event = col(&bound, |r| r.3);
    let tags = runs
        .iter()
        .map(|(rec, _, _)| tags_json(rec))
        .collect::<Result<Vec<_>, _>>()?;
    let queue = col(&bound, |r| r.0.queue.as_deref().map(scrub));
    let priority = col(&bound, |r| r.0.priority);
    let rows = cx
        .query(
            SQL,
            &[
                &id,
                &workflow,
                &input,
                &state,
                &signal,
                &due,
                &output,
                &error,
                &epoch,
                &attempt,
                &latest_seq,
                &created_at,
                &updated_at,
                &version,
                &at,
                &event,
                &tags,
                &queue,
                &priority,
            ],
        )
        .await?;
    rows.iter().map(|r| get::<String>(r, 0)).collect()
}

/// The `tags` column of `rec` (see `run_row::tags_col`) as JSON text for
/// `jsonb`, its NUL characters scrubbed.
fn tags_json(rec: &RunRecord) -> Result<Option<String>, Error> {
    if rec.tags.is_empty() {
        return Ok(None);
    }
    to_json(&rec.tags).map(Some)
}

/// Runs `sql`, [`insert_run_sql`] and what follows it, with the run's
/// columns as `$1`–`$18` and `more` after them; whether it wrote a row.
async fn insert_run_then(
    cx: &mut Cx<'_>,
    rec: &RunRecord,
    sql: &'static str,
    more: &[&(dyn ToSql + Sync)],
) -> Result<bool, Error> {
    let b = Bound::of(rec)?;
    let version = i32::try_from(rec.version).unwrap_or(i32::MAX);
    let parent = rec.parent.as_deref().map(scrub);
    let tags = tags_json(rec)?;
    let queue = rec.queue.as_deref().map(scrub);
    let input = &rec.input[..];
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &rec.id,
        &rec.workflow,
        &input,
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
        &version,
        &parent,
        &tags,
        &queue,
        &rec.priority,
    ];
    params.extend_from_slice(more);
    Ok(cx.execute(sql, &params).await? == 1)
}

/// Loads a run with its input.
pub(in crate::store::postgres) async fn load(
    cx: &mut Cx<'_>,
    id: &str,
) -> Result<Option<RunRecord>, Error> {
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
pub(in crate::store::postgres) async fn must_exist(cx: &mut Cx<'_>, id: &str) -> Result<(), Error> {
    match cx
        .query_opt("SELECT 1 FROM cp_runs WHERE id = $1", &[&id])
        .await?
    {
        Some(_) => Ok(()),
        None => Err(Error::unknown_run(id)),
    }
}

/// The runnable runs of the workflows that `$4` selects (`r.workflow` in
/// it, or not), as branches, one per way a run becomes runnable, each read
/// from an index of its own (see the schema's version 9) so that a claim
/// reads neither the runs that wait and are not due nor those that other
/// workers execute under live leases:
/// - `queued`: ready runs under no lease (`cp_runs_queued`, in creation
///   order);
/// - `expired`: ready runs whose lease expired (`cp_runs_expiring`, the
///   longest expired first), but those `own` takes;
/// - `own`: ready runs under a lease of this worker's older instance
///   (`$2`, `$3`: `cp_runs_holder`), live or not, which a restarted worker
///   takes over at once; only when `$own` holds (a generic plan cannot
///   tell how few runs a worker's name selects, and may read them all);
/// - `due`: waiting or sleeping runs whose deadline has passed by `$clock`
///   (the runtime's clock, see `ClaimRequest::clock_now`; leases are
///   compared with `$1`, the system's time) (`cp_runs_due`, the most
///   overdue first);
/// - `signalled`: waiting runs whose signal has arrived (from the runs
///   `cp_signals` names), not due.
///
/// No run is in two branches. Each ends with `$tail` (its order, limit and
/// lock) after `$ord` or `$due` (the order it is read in). Together they
/// are exactly the runs `rules::runnable` accepts whose lease a claim may
/// take (none, expired, or this worker's older instance's).
macro_rules! runnable_branches {
    ($workflow:literal, $own:literal, $clock:literal, $select:expr, $tail:literal) => {
        concat!(
            "queued AS (SELECT ", $select, " FROM cp_runs r \
               WHERE r.state = ", state_sql!(READY), " AND r.lease_worker IS NULL AND ", $workflow,
            " ORDER BY r.ord", $tail, "), \
             expired AS (SELECT ", $select, " FROM cp_runs r \
               WHERE r.state = ", state_sql!(READY), " AND r.lease_worker IS NOT NULL AND r.lease_expires <= $1 \
               AND NOT (", $own, " AND r.lease_worker = $2 AND r.lease_instance < $3) AND ",
            $workflow, " ORDER BY r.lease_expires", $tail, "), \
             own AS (SELECT ", $select, " FROM cp_runs r \
               WHERE ", $own, " AND r.state = ", state_sql!(READY), " AND r.lease_worker = $2 \
               AND r.lease_instance < $3 AND ", $workflow,
            " ORDER BY r.ord", $tail, "), \
             due AS (SELECT ", $select, " FROM cp_runs r \
               WHERE r.state IN (", state_sql!(WAITING), ", ", state_sql!(SLEEPING), ") AND r.due <= ", $clock, " AND ",
            runnable_lease!($workflow), " ORDER BY r.due", $tail, "), \
             signalled AS (SELECT ", $select, " FROM cp_runs r \
               WHERE r.state = ", state_sql!(WAITING), " AND (r.due IS NULL OR r.due > ", $clock, ") \
               AND r.id = ANY (ARRAY(SELECT DISTINCT s.run FROM cp_signals s)) \
               AND EXISTS (SELECT 1 FROM cp_signals s WHERE s.run = r.id AND s.name = r.signal) \
               AND ",
            runnable_lease!($workflow), " ORDER BY r.ord", $tail, ")"
        )
    };
}

/// What the `due` and `signalled` branches of [`runnable_branches`] ask of
/// a run besides its state: its workflow (`$workflow`, a condition on `$4`
/// and `$5`, only this run or NULL) and a lease a claim may take (`$1`
/// now, `$2` worker, `$3` instance).
macro_rules! runnable_lease {
    ($workflow:literal) => {
        concat!(
            $workflow,
            " AND (r.lease_worker IS NULL OR r.lease_expires <= $1 \
                  OR (r.lease_worker = $2 AND r.lease_instance < $3))"
        )
    };
}

/// The branches of [`runnable_branches`], together (after its `WITH`).
macro_rules! all_branches {
    () => {
        "(SELECT * FROM queued UNION ALL SELECT * FROM expired UNION ALL SELECT * FROM own \
          UNION ALL SELECT * FROM due UNION ALL SELECT * FROM signalled) r"
    };
}

/// The runs a claim may take, in creation order: `$1` now (for leases), `$2` worker, `$3`
/// instance, `$4` the workflows the caller runs, `$5` only this run (or
/// NULL), `$6` at most this many, `$7` not these runs (already looked at by
/// this claim), `$8` whether to look for the runs of this worker's older
/// instances (see [`runnable_branches`]), `$9` the runtime's clock (for
/// timers), `$10` the queues the claim limits (their runs are claimed by
/// `queues::admit`, in their own order). Locks them, skipping rows other claims (or fenced writes)
/// hold. Each branch (see [`runnable_branches`]) locks up to `$6` runs;
/// those past the first `$6` stay locked by the claim's transaction and
/// come back in its next round (it asks again while a round is full): a
/// round with fewer than `$6` rows means every branch ran out.
pub(in crate::store::postgres) const CLAIM: &str = concat!(
    "WITH ",
    runnable_branches!(
        "r.workflow = ANY($4) AND ($5::text IS NULL OR r.id = $5) \
         AND NOT (r.id = ANY($7::text[])) \
         AND (r.queue IS NULL OR NOT (r.queue = ANY($10::text[])))",
        "$8::boolean",
        "$9",
        concat!("r.ord, r.input, ", run_cols!()),
        " LIMIT $6 FOR NO KEY UPDATE OF r SKIP LOCKED"
    ),
    " SELECT ",
    run_cols!(),
    ", r.input FROM ",
    all_branches!(),
    " ORDER BY r.ord LIMIT $6"
);

/// Parked run `$2` (of one of the workflows `$1`), for a claim that
/// revisits it (see `ClaimRequest::revisit_parked`). A statement of its own,
/// so that each branch of [`CLAIM`] stays on its index.
pub(in crate::store::postgres) const CLAIM_PARKED: &str = concat!(
    "SELECT ",
    run_cols!(),
    ", r.input FROM cp_runs r \
     WHERE r.id = $2 AND r.state = ",
    state_sql!(PARKED),
    " AND r.workflow = ANY($1) AND r.lease_worker IS NULL \
     FOR NO KEY UPDATE OF r SKIP LOCKED"
);

/// Runnable runs of workflows the caller does not run (same parameters as
/// [`CLAIM`] but `$7` and `$8`, and the clock is `$7`; not locked). A run that this worker's older
/// instance holds is left out until its lease expires.
pub(in crate::store::postgres) const UNREGISTERED: &str = concat!(
    "WITH ",
    runnable_branches!(
        "NOT (r.workflow = ANY($4)) AND ($5::text IS NULL OR r.id = $5)",
        "false",
        "$7",
        "r.ord, r.id, r.workflow",
        " LIMIT $6"
    ),
    " SELECT r.id, r.workflow FROM ",
    all_branches!(),
    " ORDER BY r.ord LIMIT $6"
);

/// When a claim may next find a run (see `do_next_wakeup`), from the
/// indexes [`CLAIM`]'s branches read, never from every unfinished run: the
/// earliest expiry of the leases of ready runs (`cp_runs_expiring`) and of
/// waiting or sleeping ones (`cp_runs_held`), and the earliest deadline
/// later than `$1` (the runtime's clock) of those under no lease
/// (`cp_runs_due`, the first that is not held: a held run's deadline
/// counts once its lease is gone); and when the next admission of a
/// queue's rate window stops counting (`$2`, the system's time). NULL: none.
pub(in crate::store::postgres) const NEXT_WAKEUP: &str = concat!(
    "SELECT least( \
       (SELECT min(lease_expires) FROM cp_runs WHERE state = ",
    state_sql!(READY),
    " AND lease_worker IS NOT NULL), \
       (SELECT min(lease_expires) FROM cp_runs \
        WHERE state IN (",
    state_sql!(WAITING),
    ", ",
    state_sql!(SLEEPING),
    ") AND lease_worker IS NOT NULL)), \
       (SELECT due FROM cp_runs WHERE state IN (",
    state_sql!(WAITING),
    ", ",
    state_sql!(SLEEPING),
    ") AND due > $1 \
          AND lease_worker IS NULL ORDER BY due LIMIT 1), \
       (SELECT min(until) FROM cp_queue_admissions WHERE until > $2)"
);

/// Extends a lease without waiting for any lock: `$1` run, `$2` epoch, `$3`
/// worker, `$4` instance, `$5` the new expiry. Returns the run's id and its
/// cancel request (what `rules::renewed` reports) when it renewed; no row when the lease is not held (lost, cancelled, finished) or
/// the row is locked by another transaction (see [`LOAD_PLAIN`] to tell
/// them apart). One statement, so no transaction stays open around it.
pub(in crate::store::postgres) const RENEW: &str = concat!(
    "UPDATE cp_runs SET lease_expires = $5 \
     WHERE id = (SELECT id FROM cp_runs WHERE id = $1 AND epoch = $2 AND lease_worker = $3 \
                 AND lease_instance = $4 AND state < ",
    state_sql!(COMPLETED),
    " FOR NO KEY UPDATE SKIP LOCKED) \
     RETURNING id, cancel_request"
);

/// [`RENEW`] for many runs at once: `$1`–`$4` the runs' ids, epochs,
/// workers and instances (arrays, in step), `$5` the new expiry. Returns the
/// ids renewed, each with its cancel request (as [`RENEW`]); a run missing
/// from them is fenced off or its row is locked.
///
/// The run's state is checked at the join (`w.id IS NULL OR ..`, never
/// NULL), not as a filter of the table's scan: with statistics taken when
/// no run was unfinished (a quiet store of finished runs, before a batch
/// starts), the planner would take that filter to select one row, and
/// read every run once per renewed lease (as a batch of saves did, see
/// `save_batch`).
pub(in crate::store::postgres) const RENEW_MANY: &str = concat!(
    "UPDATE cp_runs SET lease_expires = $5 \
     WHERE id IN (SELECT r.id FROM cp_runs r \
                  JOIN unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) \
                       AS w(id, epoch, worker, instance) \
                    ON r.id = w.id AND r.epoch = w.epoch AND r.lease_worker = w.worker \
                   AND r.lease_instance = w.instance \
                  WHERE (w.id IS NULL OR r.state < ",
    state_sql!(COMPLETED),
    ") FOR NO KEY UPDATE OF r SKIP LOCKED) \
     RETURNING id, cancel_request"
);

/// [`RENEW_MANY`] waiting for the rows' locks, for runs it found locked
/// every time for a while: a run that checkpoints without pause is in
/// nearly every batch of saves, each locking its row, and may never be
/// found unlocked. The rows are locked in the order of their ids, as a
/// batch locks them, so the two never wait for each other in a cycle; `$6`
/// bounds each wait (`lock_timeout`, for this statement only: it is its
/// own transaction on the side connection, and the filter that sets it
/// runs before any row is locked). The state is checked as in [`RENEW_MANY`].
pub(in crate::store::postgres) const RENEW_MANY_WAITING: &str = concat!(
    "UPDATE cp_runs SET lease_expires = $5 \
     WHERE id IN (SELECT r.id FROM cp_runs r \
                  JOIN unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) \
                       AS w(id, epoch, worker, instance) \
                    ON r.id = w.id AND r.epoch = w.epoch AND r.lease_worker = w.worker \
                   AND r.lease_instance = w.instance \
                  WHERE (w.id IS NULL OR r.state < ",
    state_sql!(COMPLETED),
    ") \
                    AND (SELECT set_config('lock_timeout', $6::text, true)) IS NOT NULL \
                  ORDER BY r.id FOR NO KEY UPDATE OF r) \
     RETURNING id, cancel_request"
);

/// Runs' rows without their input and without a lock (`$1` the ids, an array).
pub(in crate::store::postgres) const LOAD_PLAIN_MANY: &str = concat!(
    "SELECT ",
    run_cols!(),
    ", ''::bytea FROM cp_runs r WHERE r.id = ANY($1)"
);

/// A run's row without its input and without a lock (`$1` the run).
pub(in crate::store::postgres) const LOAD_PLAIN: &str = concat!(
    "SELECT ",
    run_cols!(),
    ", ''::bytea FROM cp_runs r WHERE r.id = $1"
);
