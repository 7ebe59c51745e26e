//! A transaction sent in one flight: `BEGIN`, its statements and `COMMIT`
//! go out together, their replies awaited together.

use std::future::Future as _;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::cx::{Params, Tx};
use super::error::db_err;
use super::pool::Pooled;
use crate::Error;

impl Pooled<'_> {
    /// Runs `statements` (each answering at most one row) as one
    /// transaction sent in one flight: `BEGIN`, the statements in order and
    /// `COMMIT` go out together and their replies are awaited together, so
    /// the transaction is open only while the server works through them
    /// (nothing of ours is awaited in between). Returns each statement's
    /// reply and the commit's. After a statement failed, the server refuses
    /// the rest and the `COMMIT` rolls back: the caller must then treat
    /// every statement as not written. Dropped before the replies, the
    /// transaction is rolled back as [`begin`](Self::begin)'s is.
    pub async fn pipelined(
        &mut self,
        statements: &[(&'static str, &Params<'_>)],
    ) -> Result<(Vec<Result<Option<Row>, Error>>, Result<(), Error>), Error> {
        self.pipelined_as(statements, false).await
    }

    /// [`pipelined`](Self::pipelined), each statement planned for its
    /// parameters' values, as [`Cx::query_planned`](super::cx::Cx::query_planned) plans it.
    pub async fn pipelined_planned(
        &mut self,
        statements: &[(&'static str, &Params<'_>)],
    ) -> Result<(Vec<Result<Option<Row>, Error>>, Result<(), Error>), Error> {
        self.pipelined_as(statements, true).await
    }

    async fn pipelined_as(
        &mut self,
        statements: &[(&'static str, &Params<'_>)],
        planned: bool,
    ) -> Result<(Vec<Result<Option<Row>, Error>>, Result<(), Error>), Error> {
        let mut prepared = Vec::with_capacity(statements.len());
        {
            let mut cx = self.plain();
            for (sql, params) in statements {
                let st = cx.prep(sql).await?;
                if st.params().len() != params.len() {
                    return Err(Error::internal(format!(
                        "postgres: {} parameters for a statement of {}",
                        params.len(),
                        st.params().len()
                    )));
                }
                prepared.push(st);
            }
        }
        let client = &self.conn().client;
        let mut tx = Tx {
            client,
            begun: true,
            done: false,
        };
        let begin = futures::future::maybe_done(client.batch_execute("BEGIN"));
        let mut each: Vec<_> = prepared
            .iter()
            .zip(statements)
            .map(|(st, (sql, params))| {
                let reply = async move {
                    if !planned {
                        return client.query_opt(st, params).await.map_err(db_err);
                    }
                    let typed: Vec<(&(dyn ToSql + Sync), tokio_postgres::types::Type)> = params
                        .iter()
                        .copied()
                        .zip(st.params().iter().cloned())
                        .collect();
                    let mut rows = client.query_typed(sql, &typed).await.map_err(db_err)?;
                    // As `query_opt` answers: at most one row.
                    if rows.len() > 1 {
                        return Err(Error::internal(
                            "postgres: a pipelined statement answered more than one row",
                        ));
                    }
                    Ok(rows.pop())
                };
                Box::pin(futures::future::maybe_done(reply))
            })
            .collect();
        let commit = futures::future::maybe_done(client.batch_execute("COMMIT"));
        let (mut begin, mut commit) = (std::pin::pin!(begin), std::pin::pin!(commit));
        // Polled in order, every time: a request is sent on its future's
        // first poll, so the server gets them in this order.
        futures::future::poll_fn(|task| {
            let mut ready = begin.as_mut().poll(task).is_ready();
            for f in each.iter_mut() {
                ready &= f.as_mut().poll(task).is_ready();
            }
            ready &= commit.as_mut().poll(task).is_ready();
            if ready {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        tx.done = true;
        let missing = || Error::internal("postgres: a pipelined reply went missing");
        let replies = each
            .iter_mut()
            .map(|f| f.as_mut().take_output().ok_or_else(missing)?)
            .collect();
        let begun = begin.as_mut().take_output().ok_or_else(missing)?;
        let committed = commit.as_mut().take_output().ok_or_else(missing)?;
        Ok((replies, begun.and(committed).map_err(db_err)))
    }
}
