//! The pool: at most `pool_size` connections, opened on demand, kept while
//! healthy, each with its statement cache; a connection taken from it runs
//! statements through a [`Cx`].

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::{Client, Statement};

use super::connect::connect;
use super::cx::{Cx, Db, Notify, Tx};
use super::target::Target;
use crate::Error;

/// One open connection and the statements prepared on it.
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) stmts: Mutex<HashMap<&'static str, Statement>>,
}

/// At most `size` connections, opened on demand and kept while healthy.
pub(in crate::store::postgres) struct Pool {
    target: Target,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
    /// Connection tasks run on this runtime (the one `open` was called on),
    /// so the store can be used from any thread or executor.
    handle: tokio::runtime::Handle,
    /// Asks for the store's notification (see the `notify` module), for
    /// transactions that asked for one once they committed; set once the
    /// tables' schema is known.
    notifier: std::sync::OnceLock<Notify>,
}

impl Pool {
    pub fn new(target: Target, handle: tokio::runtime::Handle, first: Client) -> Pool {
        Pool {
            permits: Semaphore::new(target.pool_size),
            idle: Mutex::new(vec![Conn {
                client: first,
                stmts: Mutex::new(HashMap::new()),
            }]),
            target,
            handle,
            notifier: std::sync::OnceLock::new(),
        }
    }

    /// Installs the notifier (once).
    pub fn set_notifier(&self, notifier: Notify) {
        let _ = self.notifier.set(notifier);
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Has the store's notification sent, for writes that committed
    /// outside a [`Cx`] (see the `notify` module).
    pub fn notify_committed(&self) {
        if let Some(n) = self.notifier.get() {
            n();
        }
    }

    /// The runtime the connections' tasks run on.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// A connection of the pool (waits while all are in use).
    pub async fn get(&self) -> Result<Pooled<'_>, Error> {
        let permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Error::internal("postgres pool closed"))?;
        let reuse = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.retain(|c| !c.client.is_closed());
            idle.pop()
        };
        let conn = match reuse {
            Some(c) => c,
            None => Conn {
                client: connect(&self.handle, &self.target).await?,
                stmts: Mutex::new(HashMap::new()),
            },
        };
        Ok(Pooled {
            pool: self,
            conn: Some(conn),
            _permit: permit,
        })
    }
}

/// A connection taken from the pool; it goes back when dropped (unless it
/// is closed).
pub(in crate::store::postgres) struct Pooled<'p> {
    pool: &'p Pool,
    conn: Option<Conn>,
    _permit: SemaphorePermit<'p>,
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if !conn.client.is_closed() {
                self.pool
                    .idle
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(conn);
            }
        }
    }
}

impl Pooled<'_> {
    pub(super) fn conn(&mut self) -> &mut Conn {
        self.conn
            .as_mut()
            .expect("a pooled connection is present until dropped")
    }

    /// Starts a transaction. Nothing is sent yet: `BEGIN` goes out with
    /// the transaction's first statement, in the same flight (pipelined),
    /// which saves every transaction a round trip.
    pub async fn begin(&mut self) -> Result<Cx<'_>, Error> {
        let notifier = self.pool.notifier.get();
        let Conn { client, stmts } = self.conn();
        Ok(Cx {
            db: Db::Tx(Tx {
                client,
                begun: false,
                done: false,
            }),
            stmts,
            notifier,
            notify: false,
        })
    }

    /// Runs statements without a transaction (each on its own).
    pub fn plain(&mut self) -> Cx<'_> {
        let notifier = self.pool.notifier.get();
        let Conn { client, stmts } = self.conn();
        Cx {
            db: Db::Plain(client),
            stmts,
            notifier,
            notify: false,
        }
    }
}
