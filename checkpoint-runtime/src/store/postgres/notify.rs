//! Wake-ups across workers: writes that may make a run runnable (or finish
//! one) send `NOTIFY` on [`CHANNEL`] once they committed, with the
//! PostgreSQL schema's name as payload (channels are per database, so stores
//! in other schemas of the same database ignore it). Each store holds one
//! extra connection that `LISTEN`s and bumps the counter of
//! [`Store::subscribe`](crate::store::Store::subscribe). The writing store
//! bumps its own counter at once as well.
//!
//! The `NOTIFY` is not part of the write's transaction: a transaction that
//! notifies takes a lock that is global to the database from the start of
//! its commit to its end, WAL flush included, so all notifying commits of
//! every worker would be serialized, one flush after the other (under load,
//! most server sessions wait for `Lock:object` and `LWLock:WALWrite`, and
//! the creations and completions of 1,000 runs queue behind each other). A
//! [`Notifier`] sends it instead, right after the commit, in a statement of
//! its own on a connection of its own: a transaction with nothing to write
//! commits without a WAL flush, so the lock is held only briefly; requests
//! that arrive while one is being sent are sent as one. Should a process
//! die between a commit and its notification, the other workers find the
//! change at their next poll (they poll every few seconds anyway).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_postgres::AsyncMessage;

use super::conn::{Cx, Target};
use crate::Error;

/// The notification channel.
pub(super) const CHANNEL: &str = "checkpoint_runtime";

/// What follows the schema's name in the payload of a notification that
/// a run's stream items were stored (see `streams`): it bumps the
/// counter of [`Store::subscribe_streams`](crate::store::Store::subscribe_streams)
/// only, so that workers do not look for runnable runs on every item.
pub(super) const STREAM_SUFFIX: &str = "/stream";

/// Has the notification sent once the transaction of `cx` committed (see
/// the module docs). `schema`: this store's (the notifier's payload).
pub(super) async fn notify(cx: &mut Cx<'_>, schema: &str) -> Result<(), Error> {
    cx.notify_after_commit(schema);
    Ok(())
}

/// Sends this store's notifications (see the module docs): [`request`]
/// asks for one; a task sends them, merging the requests that arrive while
/// one is under way. The task stops when the notifier is dropped.
///
/// [`request`]: Notifier::request
pub(super) struct Notifier {
    wanted: Arc<tokio::sync::Notify>,
    _stop: oneshot::Sender<()>,
}

impl Notifier {
    pub fn start(handle: &tokio::runtime::Handle, target: Target, schema: String) -> Notifier {
        let wanted = Arc::new(tokio::sync::Notify::new());
        let (stop, stop_rx) = oneshot::channel();
        handle.spawn(send_loop(
            handle.clone(),
            target,
            schema,
            wanted.clone(),
            stop_rx,
        ));
        Notifier {
            wanted,
            _stop: stop,
        }
    }

    /// Asks for a notification to be sent.
    pub fn request(&self) {
        // Stores a permit when the task is busy: one more send, however
        // many requests came meanwhile.
        self.wanted.notify_one();
    }
}

async fn send_loop(
    handle: tokio::runtime::Handle,
    target: Target,
    schema: String,
    wanted: Arc<tokio::sync::Notify>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut client: Option<tokio_postgres::Client> = None;
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = wanted.notified() => {}
        }
        // A few tries: a notification matters only as long as it is fresh
        // (the workers' polls take over after that).
        for attempt in 0..3u32 {
            if client.as_ref().is_none_or(|c| c.is_closed()) {
                client = super::conn::connect(&handle, &target).await.ok();
            }
            let sent = match &client {
                Some(c) => c
                    .execute("SELECT pg_notify('checkpoint_runtime', $1)", &[&schema])
                    .await
                    .is_ok(),
                None => false,
            };
            if sent {
                break;
            }
            client = None;
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(Duration::from_millis(50 << attempt)) => {}
            }
        }
    }
}

pub(super) fn bump(changes: &watch::Sender<u64>) {
    changes.send_modify(|n| *n = n.wrapping_add(1));
}

/// Starts the listener task on `handle`; returns once it listens (or with
/// the connection error). The task stops when `stop` is dropped; it
/// reconnects (and bumps, as notifications may have been missed) when its
/// connection fails.
pub(super) async fn start(
    handle: &tokio::runtime::Handle,
    target: Target,
    schema: String,
    changes: Arc<watch::Sender<u64>>,
    streams: Arc<watch::Sender<u64>>,
    stop: oneshot::Receiver<()>,
    pid: Arc<AtomicI32>,
) -> Result<(), Error> {
    let (ready_tx, ready_rx) = oneshot::channel();
    let counters = (changes, streams);
    handle.spawn(listen_loop(target, schema, counters, stop, ready_tx, pid));
    match ready_rx.await {
        Ok(r) => r,
        Err(_) => Err(Error::internal("postgres listener stopped")),
    }
}

async fn listen_loop(
    target: Target,
    schema: String,
    (changes, streams): (Arc<watch::Sender<u64>>, Arc<watch::Sender<u64>>),
    mut stop: oneshot::Receiver<()>,
    ready: oneshot::Sender<Result<(), Error>>,
    pid: Arc<AtomicI32>,
) {
    let mut ready = Some(ready);
    let mut pause = Duration::from_millis(100);
    let stream_payload = format!("{schema}{STREAM_SUFFIX}");
    loop {
        match listen_once(&target).await {
            Ok((client, backend, mut rx)) => {
                pid.store(backend, Ordering::Relaxed);
                pause = Duration::from_millis(100);
                match ready.take() {
                    Some(r) => {
                        let _ = r.send(Ok(()));
                    }
                    // Reconnected: anything may have happened meanwhile.
                    None => {
                        bump(&changes);
                        bump(&streams);
                    }
                }
                loop {
                    tokio::select! {
                        _ = &mut stop => return,
                        msg = rx.recv() => match msg {
                            Some(n) => {
                                if n == schema {
                                    bump(&changes);
                                } else if n == stream_payload {
                                    bump(&streams);
                                }
                            }
                            None => break,
                        },
                    }
                }
                drop(client);
            }
            Err(e) => {
                if let Some(r) = ready.take() {
                    let _ = r.send(Err(e));
                    return;
                }
            }
        }
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// Connects and listens; notifications' payloads arrive on the receiver,
/// which closes when the connection does. Also returns the server process
/// id of the connection.
async fn listen_once(
    target: &Target,
) -> Result<(tokio_postgres::Client, i32, mpsc::UnboundedReceiver<String>), Error> {
    let (client, mut connection) = target
        .tls
        .connect(&target.config)
        .await
        .map_err(|e| super::conn::connect_error(&target.shown, &target.tls, e))?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(msg)) = messages.next().await {
            if let AsyncMessage::Notification(n) = msg {
                if tx.send(n.payload().to_owned()).is_err() {
                    break;
                }
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {CHANNEL}"))
        .await
        .map_err(super::conn::db_err)?;
    let backend: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .map_err(super::conn::db_err)?
        .try_get(0)
        .map_err(super::conn::db_err)?;
    Ok((client, backend, rx))
}
