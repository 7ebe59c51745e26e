//! Reads: each runs in one read transaction on a reader connection, on a
//! reader thread.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{mpsc, Arc, Mutex};
use std::time::SystemTime;

use rusqlite::{params, Connection, OptionalExtension};

use super::checkpoints::chain::{load_latest, load_seq, read_head, WALK};
use super::checkpoints::refs::{Shape, Sources};
use super::checkpoints::rows::{decode_listed, CpRow, CP_COLS};
use super::error::{corrupt, to_u64, R};
use super::runs::{run_ord, RawRun, RUN_SELECT};
use crate::history::HistoryEntry;
use crate::status::{RunFilter, StatusKind};
use crate::store::rules;
use crate::store::sql::run_row::{
    counted_kind, state_sql, status_code, tags_col, COMPLETED, FAILED, PARKED,
};
use crate::store::sql::{from_ts, to_i64, ts};
use crate::store::{CheckpointRecord, RunRecord, SignalRecord, Wakeup};

pub(super) type ReadJob = Box<dyn FnOnce(&mut Connection) + Send>;

pub(super) fn reader_loop(mut conn: Connection, rx: Arc<Mutex<mpsc::Receiver<ReadJob>>>) {
    loop {
        let job = {
            let guard = rx.lock().unwrap_or_else(|e| e.into_inner());
            match guard.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        job(&mut conn);
    }
}

/// A run `r` carries every tag of `?7`, a filter's tags as the `tags`
/// column holds them (see `tags_col`; NULL: no tag asked for): no pair of
/// the filter's is missing from the run's.
const TAGGED: &str = "NOT EXISTS (SELECT 1 FROM json_each(?7) f WHERE NOT EXISTS \
     (SELECT 1 FROM json_each(r.tags) t WHERE t.key = f.key AND t.value = f.value))";

pub(super) fn read_list_runs(conn: &Connection, filter: &RunFilter) -> R<Vec<RunRecord>> {
    // A completed run with an `Err` output counts as failed.
    let sql = format!(
        "{RUN_SELECT} \
         WHERE (?1 IS NULL OR r.workflow = ?1) \
           AND (?2 IS NULL OR substr(r.id, 1, length(?2)) = ?2) \
           AND (?3 IS NULL OR (CASE WHEN r.state = {COMPLETED} AND r.error IS NOT NULL \
                                    THEN {FAILED} ELSE r.state END) = ?3) \
           AND (?5 IS NULL OR r.parent = ?5) \
           AND {TAGGED} \
         ORDER BY r.ord {} LIMIT ?4 OFFSET ?6",
        if filter.newest_first { "DESC" } else { "ASC" }
    );
    let offset = i64::try_from(filter.offset).unwrap_or(i64::MAX);
    let limit = filter
        .limit
        .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
    let raws: Vec<RawRun> = conn
        .prepare_cached(&sql)?
        .query_map(
            params![
                filter.workflow,
                filter.id_prefix,
                filter.status.map(status_code),
                limit,
                filter.parent,
                offset,
                tags_col(&filter.tags)?,
            ],
            RawRun::from_full_row,
        )?
        .collect::<rusqlite::Result<_>>()?;
    raws.into_iter()
        .map(|r| r.into_record().map(|(_, rec)| rec))
        .collect()
}

/// [`Store::count_runs`](crate::store::Store::count_runs): one row per
/// group of runs that share a status, counted by the database.
pub(super) fn read_count_runs(
    conn: &Connection,
    filter: &RunFilter,
    now: SystemTime,
) -> R<BTreeMap<StatusKind, u64>> {
    let sql = "SELECT r.state, r.error IS NOT NULL, COALESCE(r.lease_expires > ?4, 0), \
                      COALESCE(substr(r.signal, 1, 5) = 'join#', 0), count(*) \
               FROM runs r \
               WHERE (?1 IS NULL OR r.workflow = ?1) \
                 AND (?2 IS NULL OR substr(r.id, 1, length(?2)) = ?2) \
                 AND (?3 IS NULL OR r.parent = ?3) \
                 AND {TAGGED} \
               GROUP BY 1, 2, 3, 4";
    let sql = sql.replace("{TAGGED}", &TAGGED.replace("?7", "?5"));
    let mut counts = BTreeMap::new();
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params![
        filter.workflow,
        filter.id_prefix,
        filter.parent,
        ts(now),
        tags_col(&filter.tags)?,
    ])?;
    while let Some(row) = rows.next()? {
        let state: i64 = row.get(0)?;
        let kind = counted_kind(state, row.get(1)?, row.get(2)?, row.get(3)?)
            .ok_or_else(|| corrupt(format!("a run has the unknown state code {state}")))?;
        *counts.entry(kind).or_insert(0) += to_u64(row.get(4)?, "a count of runs")?;
    }
    Ok(counts)
}

pub(super) fn read_parked(conn: &Connection) -> R<Vec<RunRecord>> {
    let sql = format!("{RUN_SELECT} WHERE r.state = {PARKED} ORDER BY r.ord");
    let raws: Vec<RawRun> = conn
        .prepare_cached(&sql)?
        .query_map([], RawRun::from_full_row)?
        .collect::<rusqlite::Result<_>>()?;
    raws.into_iter()
        .map(|r| r.into_record().map(|(_, rec)| rec))
        .collect()
}

pub(super) fn read_signals(conn: &Connection, id: &str) -> R<Vec<SignalRecord>> {
    let ord = run_ord(conn, id)?;
    let rows: Vec<(String, Vec<u8>, i64)> = conn
        .prepare_cached(
            "SELECT name, payload, received_at FROM signals WHERE run = ?1 ORDER BY id",
        )?
        .query_map([ord], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows
        .into_iter()
        .map(|(name, payload, at)| SignalRecord {
            name,
            payload: payload.into(),
            received_at: from_ts(at),
        })
        .collect())
}

pub(super) fn read_latest(conn: &Connection, id: &str) -> R<Option<Arc<CheckpointRecord>>> {
    let ord = run_ord(conn, id)?;
    Ok(load_latest(conn, ord, &Arc::from(id))?.map(|l| l.cp))
}

pub(super) fn read_checkpoint(
    conn: &Connection,
    id: &str,
    seq: u64,
) -> R<Option<Arc<CheckpointRecord>>> {
    let ord = run_ord(conn, id)?;
    let kept = match read_head(conn, ord)? {
        Some((_, latest, floor)) => (floor..=latest).contains(&seq),
        None => false,
    };
    if !kept {
        return Ok(None);
    }
    Ok(load_seq(conn, ord, &Arc::from(id), seq)?.map(|l| l.cp))
}

pub(super) fn read_checkpoints(conn: &Connection, id: &str) -> R<Vec<Arc<CheckpointRecord>>> {
    let ord = run_ord(conn, id)?;
    let Some((latest, _, floor)) = read_head(conn, ord)? else {
        return Ok(Vec::new());
    };
    let run: Arc<str> = Arc::from(id);
    let rows: Vec<CpRow> = conn
        .prepare_cached(&format!(
            "{WALK} SELECT {CP_COLS} FROM walk w JOIN checkpoints c ON c.id = w.id \
             LEFT JOIN shapes s ON s.id = c.shape WHERE c.seq >= ?2 ORDER BY c.seq"
        ))?
        .query_map(params![latest, to_i64(floor, "seq")?], CpRow::from_row)?
        .collect::<rusqlite::Result<_>>()?;
    // A damaged version is listed as such; the others as they are.
    let mut sources = Sources::default();
    rows.into_iter()
        .map(|row| decode_listed(conn, ord, &run, row, &mut sources))
        .collect()
}

/// `(at, event JSON)` of a `history` row, or `(at, seq, shape)` of a
/// checkpoint row.
pub(super) type HistoryRow = (i64, Option<String>, Option<i64>, Option<i64>);

pub(super) fn read_history(conn: &Connection, id: &str) -> R<Vec<HistoryEntry>> {
    let ord = run_ord(conn, id)?;
    // `CheckpointSaved` events are the checkpoint rows (kept, hidden or stubs).
    let latest: Option<i64> = conn
        .prepare_cached("SELECT latest FROM heads WHERE run = ?1")?
        .query_row([ord], |r| r.get(0))
        .optional()?
        .flatten();
    let rows: Vec<HistoryRow> = conn
        .prepare_cached(&format!(
            "{WALK} SELECT id, at, event, NULL, NULL FROM history WHERE run = ?3 \
             UNION ALL \
             SELECT c.id, c.created_at, NULL, c.seq, c.shape \
             FROM walk w JOIN checkpoints c ON c.id = w.id WHERE c.quiet IS NULL \
             ORDER BY 1"
        ))?
        .query_map(params![latest, 0, ord], |r| {
            Ok((r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut labels: HashMap<i64, Option<String>> = HashMap::new();
    let mut out = Vec::with_capacity(rows.len());
    for (at, event, seq, shape) in rows {
        let event = match (event, seq, shape) {
            (Some(event), _, _) => serde_json::from_str(&event)
                .map_err(|e| corrupt(format_args!("run `{id}`: undecodable history event: {e}")))?,
            (None, Some(seq), Some(shape)) => {
                // A missing or undecodable shape (a damaged store) costs
                // the label, not the history: the run's checkpoints say
                // what is wrong with that version.
                let label = match labels.get(&shape) {
                    Some(label) => label.clone(),
                    None => {
                        let body: Option<Vec<u8>> = conn
                            .prepare_cached("SELECT body FROM shapes WHERE id = ?1")?
                            .query_row([shape], |r| r.get(0))
                            .optional()?;
                        let label = body.and_then(|body| {
                            let s: Shape<'_> = postcard::from_bytes(&body).ok()?;
                            s.label.map(Cow::into_owned)
                        });
                        labels.insert(shape, label.clone());
                        label
                    }
                };
                rules::checkpoint_saved(to_u64(seq, "seq")?, label.as_deref())
            }
            _ => return Err(corrupt(format_args!("run `{id}`: bad history row"))),
        };
        out.push(HistoryEntry {
            at: from_ts(at),
            event,
        });
    }
    Ok(out)
}

/// When a claim may next find a run (see `Store::next_wakeup`): the
/// earliest lease expiry of an unfinished run under a lease (system time),
/// and the earliest deadline later than `?1` (the runtime's clock) of a
/// waiting or sleeping run under none. From the indexes the claim's
/// branches read (see `claim::RUNNABLE`), never from every unfinished run:
/// leases of ready runs and of held waiting ones, and the first deadline
/// of a run that is not held; and when the next admission of a queue's
/// rate window stops counting (`?2`, the system's time; see `queues`).
/// NULL: none.
pub(super) const NEXT_WAKEUP: &str = concat!(
    "SELECT (SELECT min(t) FROM ( \
       SELECT min(lease_expires) AS t FROM runs INDEXED BY runs_ready \
         WHERE state = ",
    state_sql!(READY),
    " AND lease_worker IS NOT NULL \
       UNION ALL SELECT min(lease_expires) FROM runs INDEXED BY runs_held \
         WHERE state IN (",
    state_sql!(WAITING),
    ", ",
    state_sql!(SLEEPING),
    ") AND lease_worker IS NOT NULL \
       UNION ALL SELECT min(until) FROM queue_admissions WHERE until > ?2)), \
       (SELECT due FROM runs INDEXED BY runs_due \
         WHERE state IN (",
    state_sql!(WAITING),
    ", ",
    state_sql!(SLEEPING),
    ") AND due > ?1 AND lease_worker IS NULL \
         ORDER BY due LIMIT 1)"
);

pub(super) fn read_next_wakeup(conn: &Connection, after: SystemTime) -> R<Wakeup> {
    let (lease, timer): (Option<i64>, Option<i64>) = conn
        .prepare_cached(NEXT_WAKEUP)?
        .query_row([ts(after), ts(SystemTime::now())], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    Ok(Wakeup {
        lease: lease.map(from_ts),
        timer: timer.map(from_ts),
    })
}
