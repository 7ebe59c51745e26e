//! Statements on one connection ([`Cx`]): prepared once per connection,
//! run inside a transaction whose `BEGIN` is pipelined with its first
//! statement, or on their own; a transaction dropped open is rolled back.

use std::collections::HashMap;
use std::future::Future as _;
use std::sync::Mutex;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row, Statement};

use super::error::db_err;
use crate::Error;

pub(super) enum Db<'c> {
    Tx(Tx<'c>),
    Plain(&'c Client),
}

/// A transaction on `client`, begun with its first statement (see
/// [`Pooled::begin`](super::pool::Pooled::begin)). Dropped while open, it is rolled back: the
/// `ROLLBACK` is sent at once (its reply is not awaited), as
/// `tokio_postgres::Transaction` does, so that the connection goes back to
/// the pool with no transaction open and no row lock held.
pub(super) struct Tx<'c> {
    pub(super) client: &'c Client,
    /// `BEGIN` was sent.
    pub(super) begun: bool,
    /// Committed (or the commit was sent).
    pub(super) done: bool,
}

impl Tx<'_> {
    /// Runs `statement` (a future on `self.client`), with `BEGIN` pipelined
    /// before it if this is the transaction's first.
    async fn run<T>(
        &mut self,
        statement: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, tokio_postgres::Error> {
        if self.begun {
            return statement.await;
        }
        self.begun = true;
        // `join` polls `BEGIN` first, and a request is sent when its future
        // is first polled: the server gets them in this order.
        let (begun, out) = futures::join!(self.client.batch_execute("BEGIN"), statement);
        begun?;
        out
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.begun || self.done {
            return;
        }
        // A request is sent on its future's first poll: poll it once, and
        // leave the reply to the connection.
        let mut rollback = std::pin::pin!(self.client.batch_execute("ROLLBACK"));
        let mut cx = std::task::Context::from_waker(futures::task::noop_waker_ref());
        let _ = rollback.as_mut().poll(&mut cx);
    }
}

/// Statements on one connection, inside a transaction or not. Statements
/// are prepared once per connection. A transaction that is dropped without
/// [`commit`](Cx::commit) is rolled back.
pub(in crate::store::postgres) struct Cx<'c> {
    pub(super) db: Db<'c>,
    pub(super) stmts: &'c Mutex<HashMap<&'static str, Statement>>,
    pub(super) notifier: Option<&'c Notify>,
    /// A notification is to be sent once the transaction committed.
    pub(super) notify: bool,
}

/// Asks for a notification to be sent (the store's `notify::Notifier`).
pub(super) type Notify = Box<dyn Fn() + Send + Sync>;

/// Query parameters.
pub(super) type Params<'p> = [&'p (dyn ToSql + Sync)];

impl Cx<'_> {
    /// Another handle on this transaction, to run statements at the same
    /// time as this one's (pipelined: sent together, their replies awaited
    /// together), e.g. the independent writes of one operation in
    /// `futures::try_join!`. Only once the transaction has begun (a
    /// statement ran); the fork neither commits nor rolls back, and the
    /// server runs the statements in the order they were sent.
    pub fn fork(&self) -> Result<Cx<'_>, Error> {
        match &self.db {
            Db::Tx(t) if t.begun && !t.done => Ok(Cx {
                db: Db::Tx(Tx {
                    client: t.client,
                    begun: true,
                    done: true,
                }),
                stmts: self.stmts,
                notifier: None,
                notify: false,
            }),
            _ => Err(Error::internal(
                "postgres: a transaction is forked only once it has begun",
            )),
        }
    }

    pub(super) async fn prep(&mut self, sql: &'static str) -> Result<Statement, Error> {
        let cached = self
            .stmts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(sql)
            .cloned();
        if let Some(s) = cached {
            return Ok(s);
        }
        let s = match &self.db {
            Db::Tx(t) => t.client.prepare(sql).await,
            Db::Plain(c) => c.prepare(sql).await,
        }
        .map_err(db_err)?;
        self.stmts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(sql, s.clone());
        Ok(s)
    }

    pub async fn query(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, Error> {
        let st = self.prep(sql).await?;
        match &mut self.db {
            Db::Tx(t) => {
                let c = t.client;
                t.run(c.query(&st, params)).await
            }
            Db::Plain(c) => c.query(&st, params).await,
        }
        .map_err(db_err)
    }

    /// [`query`](Cx::query), but planned for these parameters' values
    /// every time: sent as an unnamed statement (parse, bind and execute in
    /// one round trip), typed as the prepared statement's parameters are.
    /// For a statement whose best plan depends on the sizes of the arrays
    /// it unnests: a prepared statement's generic plan takes each for
    /// about 10 elements, and after five executions it is kept if it looks
    /// no dearer than the plans made for the real sizes, which it always
    /// does (see `save_batch`).
    pub async fn query_planned(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Vec<Row>, Error> {
        let st = self.prep(sql).await?;
        let typed: Vec<(&(dyn ToSql + Sync), tokio_postgres::types::Type)> = params
            .iter()
            .copied()
            .zip(st.params().iter().cloned())
            .collect();
        if typed.len() != params.len() {
            return Err(Error::internal(format!(
                "postgres: {} parameters for a statement of {}",
                params.len(),
                st.params().len()
            )));
        }
        match &mut self.db {
            Db::Tx(t) => {
                let c = t.client;
                t.run(c.query_typed(sql, &typed)).await
            }
            Db::Plain(c) => c.query_typed(sql, &typed).await,
        }
        .map_err(db_err)
    }

    pub async fn query_opt(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Option<Row>, Error> {
        let st = self.prep(sql).await?;
        match &mut self.db {
            Db::Tx(t) => {
                let c = t.client;
                t.run(c.query_opt(&st, params)).await
            }
            Db::Plain(c) => c.query_opt(&st, params).await,
        }
        .map_err(db_err)
    }

    pub async fn query_one(
        &mut self,
        sql: &'static str,
        params: &Params<'_>,
    ) -> Result<Row, Error> {
        let st = self.prep(sql).await?;
        match &mut self.db {
            Db::Tx(t) => {
                let c = t.client;
                t.run(c.query_one(&st, params)).await
            }
            Db::Plain(c) => c.query_one(&st, params).await,
        }
        .map_err(db_err)
    }

    pub async fn execute(&mut self, sql: &'static str, params: &Params<'_>) -> Result<u64, Error> {
        let st = self.prep(sql).await?;
        match &mut self.db {
            Db::Tx(t) => {
                let c = t.client;
                t.run(c.execute(&st, params)).await
            }
            Db::Plain(c) => c.execute(&st, params).await,
        }
        .map_err(db_err)
    }

    /// Runs SQL text (several statements, no parameters, not prepared).
    pub async fn batch(&mut self, sql: &str) -> Result<(), Error> {
        match &mut self.db {
            Db::Tx(t) => {
                let c = t.client;
                t.run(c.batch_execute(sql)).await
            }
            Db::Plain(c) => c.batch_execute(sql).await,
        }
        .map_err(db_err)
    }

    /// Has the store's notification sent once this transaction committed
    /// (at once outside a transaction); see the `notify` module.
    pub fn notify_after_commit(&mut self, _schema: &str) {
        match &self.db {
            Db::Tx(_) => self.notify = true,
            Db::Plain(_) => {
                if let Some(n) = self.notifier {
                    n();
                }
            }
        }
    }

    /// Commits the transaction (nothing to do outside one, or in one that
    /// ran no statement), then sends the notification it asked for.
    pub async fn commit(mut self) -> Result<(), Error> {
        match &mut self.db {
            Db::Tx(t) if t.begun => {
                t.done = true;
                t.client.batch_execute("COMMIT").await.map_err(db_err)?;
            }
            _ => {}
        }
        if self.notify {
            if let Some(n) = self.notifier {
                n();
            }
        }
        Ok(())
    }
}
