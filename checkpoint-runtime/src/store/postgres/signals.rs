//! Signals: stored per run in arrival order, each consumed exactly once
//! (under the run's row lock) into the run's wake value.

use std::time::SystemTime;

use super::conn::{from_ts, get, scrub, ts, Cx};
use super::runs::{fenced, must_exist, write_run};
use super::{history, notify, PostgresStore};
use crate::history::Event;
use crate::store::rules;
use crate::store::{Lease, SignalRecord};
use crate::Error;

/// Deletes and returns the oldest stored signal `name` of run `id`. The
/// caller holds the run's row lock.
pub(super) async fn consume(
    cx: &mut Cx<'_>,
    id: &str,
    name: &str,
) -> Result<Option<SignalRecord>, Error> {
    let row = cx
        .query_opt(
            "DELETE FROM cp_signals WHERE id = \
             (SELECT id FROM cp_signals WHERE run = $1 AND name = $2 ORDER BY id LIMIT 1) \
             RETURNING name, payload, received_at",
            &[&id, &scrub(name)],
        )
        .await?;
    row.map(|row| {
        Ok(SignalRecord {
            name: get(&row, 0)?,
            payload: get::<Vec<u8>>(&row, 1)?.into(),
            received_at: from_ts(get(&row, 2)?),
        })
    })
    .transpose()
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
        must_exist(&mut cx, id).await?;
        let now = SystemTime::now();
        cx.execute(
            "INSERT INTO cp_signals (run, name, payload, received_at) VALUES ($1, $2, $3, $4)",
            &[&id, &scrub(name), &payload, &ts(now)],
        )
        .await?;
        let received = Event::SignalReceived {
            name: name.to_owned(),
        };
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
        let Some(sig) = consume(&mut cx, id, name).await? else {
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
        let latest = super::checkpoints::load_seq(&mut cx, id, rec.latest_seq).await?;
        if let Some(event) = rules::reject_signal(&mut rec, reason, latest.as_deref(), now) {
            history::insert(&mut cx, id, now, &event).await?;
        }
        write_run(&mut cx, &rec).await?;
        cx.commit().await
    }
}
