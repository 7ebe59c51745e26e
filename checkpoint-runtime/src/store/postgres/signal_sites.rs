//! `cp_signal_sites`: what each workflow's wait sites take
//! ([`Store::put_signal_sites`](crate::store::Store::put_signal_sites)).
//! A missing name or schema is stored as `''` (part of the primary key).

use super::conn::{get, Pool};
use crate::store::SignalSite;
use crate::Error;

pub(super) async fn insert(
    pool: &Pool,
    workflow: &str,
    sites: Vec<SignalSite>,
) -> Result<(), Error> {
    let (signals, schemas): (Vec<String>, Vec<String>) = sites
        .into_iter()
        .map(|s| {
            (
                s.signal.unwrap_or_default(),
                s.payload_schema.unwrap_or_default(),
            )
        })
        .unzip();
    let mut conn = pool.get().await?;
    let mut cx = conn.plain();
    cx.execute(
        "INSERT INTO cp_signal_sites (workflow, signal, payload_schema) \
         SELECT $1, * FROM unnest($2::text[], $3::text[]) \
         ON CONFLICT DO NOTHING",
        &[&workflow, &signals, &schemas],
    )
    .await?;
    Ok(())
}

pub(super) async fn read(pool: &Pool, workflow: &str) -> Result<Vec<SignalSite>, Error> {
    let mut conn = pool.get().await?;
    let mut cx = conn.plain();
    let rows = cx
        .query(
            "SELECT signal, payload_schema FROM cp_signal_sites WHERE workflow = $1 \
             ORDER BY signal COLLATE \"C\", payload_schema COLLATE \"C\"",
            &[&workflow],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let signal: String = get(row, 0)?;
            let schema: String = get(row, 1)?;
            Ok(SignalSite {
                signal: (!signal.is_empty()).then_some(signal),
                payload_schema: (!schema.is_empty()).then_some(schema),
            })
        })
        .collect()
}
