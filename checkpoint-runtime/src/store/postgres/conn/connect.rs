//! Opening one connection: TLS as the target says, its I/O in a task on
//! the store's runtime, and the session set up (search path, idle timeout).

use tokio::sync::oneshot;
use tokio_postgres::Client;

use super::error::{connect_error, db_err};
use super::target::{quote_ident, Target};
use crate::Error;

/// `idle_in_transaction_session_timeout` of every connection (unless the
/// URL's `options` set it): the server ends a session that sits idle inside
/// a transaction this long, which releases its row locks. Without it a
/// worker paused mid-transaction (SIGSTOP, a network partition, a VM
/// freeze) keeps the run's row locked for as long as the TCP connection
/// lives -- possibly hours -- and, as claims skip locked rows, no other
/// worker can take the run over even after its lease expired. It must stay
/// below typical lease TTLs (the runtime's default is 30 s) so that the lock
/// is gone by the time the lease runs out; the backend's transactions are
/// short (one store method each), so a healthy worker never comes near it.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "10s";

/// Opens one connection: its I/O runs in a task on `handle`; the search
/// path is set to `schema` when one is configured, and
/// `idle_in_transaction_session_timeout` to [`IDLE_IN_TRANSACTION_TIMEOUT`]
/// unless the URL's `options` set it.
pub(in crate::store::postgres) async fn connect(
    handle: &tokio::runtime::Handle,
    target: &Target,
) -> Result<Client, Error> {
    connect_with(handle, target, None).await
}

/// Like [`connect`], and also returns a receiver that completes (with a
/// value or an error) as soon as the connection has ended: the server went
/// away, the session was terminated, or the client was dropped.
pub(in crate::store::postgres) async fn connect_watched(
    handle: &tokio::runtime::Handle,
    target: &Target,
) -> Result<(Client, oneshot::Receiver<()>), Error> {
    let (ended, ended_rx) = oneshot::channel();
    let client = connect_with(handle, target, Some(ended)).await?;
    Ok((client, ended_rx))
}

async fn connect_with(
    handle: &tokio::runtime::Handle,
    target: &Target,
    ended: Option<oneshot::Sender<()>>,
) -> Result<Client, Error> {
    let config = target.config.clone();
    let tls = target.tls.clone();
    let schema = target.schema.clone();
    let shown = target.shown.clone();
    let own_idle_timeout = target
        .config
        .get_options()
        .is_some_and(|o| o.contains("idle_in_transaction_session_timeout"));
    let task = handle.spawn(async move {
        let (client, connection) = tls
            .connect(&config)
            .await
            .map_err(|e| connect_error(&shown, &tls, e))?;
        tokio::spawn(async move {
            // Ends when the client is dropped or the server goes away; the
            // client then reports `is_closed` and is not reused.
            let _ = connection.await;
            if let Some(ended) = ended {
                let _ = ended.send(());
            }
        });
        let mut setup = String::new();
        if !own_idle_timeout {
            setup.push_str(&format!(
                "SET idle_in_transaction_session_timeout = '{IDLE_IN_TRANSACTION_TIMEOUT}';"
            ));
        }
        if let Some(schema) = schema {
            setup.push_str(&format!("SET search_path TO {};", quote_ident(&schema)));
        }
        if !setup.is_empty() {
            client.batch_execute(&setup).await.map_err(db_err)?;
        }
        Ok::<_, Error>(client)
    });
    task.await
        .map_err(|e| Error::internal(format!("postgres connection task: {e}")))?
}
