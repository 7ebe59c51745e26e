//! The `cp_history` table: the events of a run as JSON rows, in the order
//! of their ids. A checkpoint's `CheckpointSaved` event is no row here
//! while the checkpoint is kept: the checkpoint's row holds its id
//! (`event_id`), and retention moves it here when it deletes the
//! checkpoint (see the schema's version 5), so retention never removes
//! events.

use std::time::SystemTime;

use crate::history::Event;
use crate::store::postgres::conn::{to_json, ts, Cx};
use crate::Error;

/// Appends an event inside the caller's transaction.
pub(in crate::store::postgres) async fn insert(
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
