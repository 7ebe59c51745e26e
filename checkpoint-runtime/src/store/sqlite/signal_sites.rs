//! The `signal_sites` table: what each workflow's wait sites take
//! ([`Store::put_signal_sites`](crate::store::Store::put_signal_sites)).
//! A missing name or schema is stored as `''` (part of the primary key).

use rusqlite::{params, Connection};

use super::error::R;
use super::writer::txn::TxnCtx;
use crate::store::SignalSite;

pub(super) fn insert(cx: &mut TxnCtx<'_>, workflow: &str, sites: &[SignalSite]) -> R<()> {
    if sites.len() > 1 {
        cx.begin()?;
    }
    for site in sites {
        cx.conn
            .prepare_cached(
                "INSERT OR IGNORE INTO signal_sites (workflow, signal, payload_schema) \
                 VALUES (?1, ?2, ?3)",
            )?
            .execute(params![
                workflow,
                site.signal.as_deref().unwrap_or(""),
                site.payload_schema.as_deref().unwrap_or("")
            ])?;
    }
    Ok(())
}

pub(super) fn read(conn: &Connection, workflow: &str) -> R<Vec<SignalSite>> {
    let mut stmt = conn.prepare_cached(
        "SELECT signal, payload_schema FROM signal_sites WHERE workflow = ?1 \
         ORDER BY signal, payload_schema",
    )?;
    let rows = stmt.query_map([workflow], |r| {
        let signal: String = r.get(0)?;
        let schema: String = r.get(1)?;
        Ok(SignalSite {
            signal: (!signal.is_empty()).then_some(signal),
            payload_schema: (!schema.is_empty()).then_some(schema),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}
