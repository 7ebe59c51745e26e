//! The side connection: one connection outside the pool, for lease
//! renewals.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio_postgres::{Client, Row, Statement};

use super::connect::connect;
use super::cx::Params;
use super::error::db_err;
use super::target::Target;
use crate::Error;

/// One connection of its own, outside the pool, for single statements that
/// must not queue behind the pool's transactions: lease renewals. A
/// renewal that waited for a pool slot could wait behind every checkpoint
/// in flight and let the lease lapse under load; here it never waits for
/// the pool. Statements from many tasks are pipelined on the one
/// connection (a `tokio-postgres` client takes concurrent queries), each
/// is its own transaction (autocommit), and none waits for a row lock (the
/// SQL sent here skips locked rows), so one statement never holds up the
/// others. Reconnects on demand after the connection failed.
pub(in crate::store::postgres) struct Side {
    target: Target,
    handle: tokio::runtime::Handle,
    conn: tokio::sync::Mutex<Option<std::sync::Arc<SideConn>>>,
}

/// The side connection and the statements prepared on it.
struct SideConn {
    client: Client,
    stmts: Mutex<HashMap<&'static str, Statement>>,
}

impl Side {
    pub fn new(target: Target, handle: tokio::runtime::Handle) -> Side {
        Side {
            target,
            handle,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    async fn conn(&self) -> Result<std::sync::Arc<SideConn>, Error> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| !c.client.is_closed()) {
            return Ok(c.clone());
        }
        *slot = None;
        let c = std::sync::Arc::new(SideConn {
            client: connect(&self.handle, &self.target).await?,
            stmts: Mutex::new(HashMap::new()),
        });
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Runs one statement (its own transaction).
    pub async fn query(&self, sql: &'static str, params: &Params<'_>) -> Result<Vec<Row>, Error> {
        let conn = self.conn().await?;
        let cached = conn
            .stmts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(sql)
            .cloned();
        let st = match cached {
            Some(st) => st,
            None => {
                let st = conn.client.prepare(sql).await.map_err(db_err)?;
                conn.stmts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(sql, st.clone());
                st
            }
        };
        conn.client.query(&st, params).await.map_err(db_err)
    }
}
