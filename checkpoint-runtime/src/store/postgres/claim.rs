//! The claim (`Store::claim`): the claim query ([`CLAIM`], the one rule
//! written a second time, in SQL: it selects and locks the rows
//! `rules::lease_free` and `rules::runnable` accept), then, for each run
//! it locked, `rules::claim` (or `rules::set_aside` for a run that cannot
//! be loaded), and the changes applied together ([`apply_all`]: the runs'
//! rows in one statement). Its own module for its size: the rounds of the
//! query, the runs it looked at and did not take, the damaged ones.

use std::time::SystemTime;

use super::apply::{apply, apply_all, Row};
use super::conn::{from_ts, get, ts, ts_after, Cx};
use super::tables::checkpoints::{self, load_seqs_checked, segments, Found};
use super::tables::runs::{decode_run, CLAIM, CLAIM_PARKED, UNREGISTERED};
use super::tables::signals;
use super::{notify, queues, PostgresStore};
use crate::store::rules::{self, Change};
use crate::store::{ClaimRequest, ClaimResult, Claimed, RunRecord, RunState};
use crate::Error;

/// How often a store's claims look for runs of unregistered workflows at
/// most (see `ClaimResult::unregistered`).
pub(super) const UNREGISTERED_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

impl PostgresStore {
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
        // Leases on the system's time, timers on the runtime's clock.
        let now = SystemTime::now();
        let now_i = ts(now);
        let clock_i = ts(req.clock_now);
        let expires = from_ts(ts_after(now, req.ttl));
        let limit = i64::try_from(req.limit).unwrap_or(i64::MAX);
        let workflows: Vec<&str> = req.workflows.to_vec();
        let worker: &str = &req.worker;
        let instance: &str = &req.instance;
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
            &now_i, &worker, &instance, &workflows, &req.only, &limit, &clock_i,
        ];
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
        // The queues this claim limits: their runs are left to `queues`.
        let limited: Vec<&str> = req
            .queues
            .keys()
            .map(String::as_str)
            .filter(|q| rules::queue_limits(req, Some(q)).is_some())
            .collect();
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
                        &clock_i, &limited,
                    ],
                )
                .await?;
            let exhausted = i64::try_from(rows.len()).unwrap_or(i64::MAX) < want;
            claim_rows(&mut cx, &rows, &at, &mut seen, &mut taken).await?;
            if exhausted {
                break;
            }
        }
        for queue in limited {
            let room = req.limit.saturating_sub(taken.len());
            if room == 0 {
                break;
            }
            let admitted = queues::admit(&mut cx, &self.schema, req, queue, room).await?;
            claim_rows(&mut cx, &admitted, &at, &mut seen, &mut taken).await?;
        }
        let changes: Vec<(&RunRecord, Change)> = taken
            .iter_mut()
            .map(|t| (&t.claimed.run, std::mem::take(&mut t.change)))
            .collect();
        apply_all(&mut cx, changes, now).await?;
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
}

/// What a claim works with, for every row it looks at.
struct ClaimAt<'a> {
    req: &'a ClaimRequest,
    expires: SystemTime,
    now: SystemTime,
    schema: &'a str,
}

/// A run a claim took, before its change is applied ([`apply_all`], once
/// for all of them).
struct Taken {
    claimed: Claimed,
    /// The descriptors of the latest checkpoint's appended fields.
    appended: Vec<segments::Appended>,
    /// What `rules::claim` changed.
    change: Change,
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
            let parent: Option<String> = get(row, 19).ok().flatten();
            mark_damaged(cx, &id, get(row, 1).ok(), Err(parent), e, now).await?;
            notify::notify(cx, schema).await?;
            return Ok(None);
        }
    };
    // The query decided under the lock; checked again here, as the other
    // backends define it (a waiting run's signal is looked at below).
    if !rules::lease_free(rec.lease.as_ref(), &req.worker, &req.instance, now)
        || !rules::claimable(&rec.state, true, req)
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
            mark_damaged(cx, &id, Some(workflow), Ok(rec), e, now).await?;
            notify::notify(cx, schema).await?;
            return Ok(None);
        }
    };
    let signal = match &rec.state {
        RunState::Waiting { signal, .. } => signals::consume(cx, &rec.id, signal).await?,
        _ => None,
    };
    // The signal may have gone to someone else meanwhile.
    if !rules::claimable(&rec.state, signal.is_some(), req) {
        return Ok(None);
    }
    let (lease, change) = rules::claim(&mut rec, req, signal, expires, now);
    Ok(Some(Taken {
        claimed: Claimed {
            run: rec,
            lease,
            checkpoint,
        },
        appended,
        change,
    }))
}

/// Marks run `id` (its row locked by the claim), which cannot be loaded or
/// decoded (`error`), failed, naming what can still be read of it: its
/// workflow, and the site and fields of its latest checkpoint. `rec`: its
/// record, when the row itself decoded, or else its parent as far as it
/// can be read.
async fn mark_damaged(
    cx: &mut Cx<'_>,
    id: &str,
    workflow: Option<String>,
    rec: Result<RunRecord, Option<String>>,
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
    match rec {
        Ok(mut rec) => {
            let change = rules::set_aside(&mut rec, error, now);
            apply(cx, Row::Update(&rec), change, now).await?;
        }
        Err(parent) => {
            // Only what the rule sets of a blank record is written (see
            // `Row::SetAside`); its parent, read from the row, gets a held
            // sibling started.
            let mut rec = rules::blank_run(id, now);
            rec.parent = parent;
            let change = rules::set_aside(&mut rec, error, now);
            apply(cx, Row::SetAside(&rec), change, now).await?;
        }
    }
    Ok(())
}
