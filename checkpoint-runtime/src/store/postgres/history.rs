//! The history: every event of a run (`CheckpointSaved` included), as JSON
//! rows in insertion order. Retention never removes events.

use std::time::SystemTime;

use super::conn::{corrupt, from_ts, get, to_json, ts, Cx};
use super::runs::must_exist;
use super::PostgresStore;
use crate::history::{Event, HistoryEntry};
use crate::Error;

/// Appends an event inside the caller's transaction.
pub(super) async fn insert(
    cx: &mut Cx<'_>,
    id: &str,
    at: SystemTime,
    event: &Event,
) -> Result<(), Error> {
    let json = to_json(event)?;
    cx.execute(
        "INSERT INTO cp_history (run, at, event) VALUES ($1, $2, $3::text::jsonb)",
        &[&id, &ts(at), &json],
    )
    .await?;
    Ok(())
}

impl PostgresStore {
    pub(super) async fn do_append_event(&self, id: &str, event: &Event) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        must_exist(&mut cx, id).await?;
        insert(&mut cx, id, SystemTime::now(), event).await?;
        cx.commit().await
    }

    pub(super) async fn do_history(&self, id: &str) -> Result<Vec<HistoryEntry>, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.plain();
        let rows = cx
            .query(
                "SELECT h.at, h.event::text FROM cp_runs r \
                 LEFT JOIN cp_history h ON h.run = r.id WHERE r.id = $1 ORDER BY h.id",
                &[&id],
            )
            .await?;
        if rows.is_empty() {
            return Err(Error::unknown_run(id));
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let (Some(at), Some(event)) = (
                get::<Option<i64>>(&row, 0)?,
                get::<Option<String>>(&row, 1)?,
            ) else {
                continue;
            };
            let event: Event = serde_json::from_str(&event)
                .map_err(|e| corrupt(format_args!("run `{id}`: history event: {e}")))?;
            out.push(HistoryEntry {
                at: from_ts(at),
                event,
            });
        }
        Ok(out)
    }
}
