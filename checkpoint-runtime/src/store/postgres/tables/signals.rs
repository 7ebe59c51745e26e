//! The `cp_signals` table: signals stored per run in arrival order, each
//! consumed exactly once (under the run's row lock).

use crate::store::postgres::conn::{from_ts, get, scrub, Cx};
use crate::store::SignalRecord;
use crate::Error;

/// Deletes and returns the oldest stored signal `name` of run `id`. The
/// caller holds the run's row lock.
pub(in crate::store::postgres) async fn consume(
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
