//! Worker-id holds ([`Store::hold_worker`](crate::store::Store::hold_worker)):
//! a session advisory lock per worker id (and schema), on a connection of
//! its own. The server drops the lock with the session, so the hold must be
//! kept up by a task, not just by keeping the client:
//!
//! 1. While the connection lives, the lock is held ([`Phase::Held`]).
//! 2. When the connection ends (a server restart, a terminated session, a
//!    dead network noticed by TCP keepalives), the task reconnects, with a
//!    growing pause, and takes the lock again ([`Phase::Retaking`]). Claims
//!    under the worker id wait for the outcome meanwhile (a little, then
//!    fail with [`Error::Store`], which the worker retries).
//! 3. If the lock is held by this hold's own previous session (the server
//!    has not noticed yet that it is gone), that session is ended and the
//!    lock taken again.
//! 4. If another session holds it, another live instance with the same
//!    worker id took it while this one was disconnected ([`Phase::Taken`],
//!    for good). From then on this store leases the runtime's runs under
//!    `<id>~<instance>` (what a second live instance does from the start),
//!    and refuses to renew its leases under the bare id
//!    ([`Error::LeaseLost`]), so that its executions of those runs stop:
//!    the other instance takes them over at once, as the newer instance of
//!    the id. A line on stderr says so.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio_postgres::Client;

use super::conn::{self, db_err, get, Target};
use crate::store::{ClaimRequest, Lease, WorkerHold};
use crate::Error;

/// Where a hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// The lock is held.
    Held,
    /// Its connection ended; the task is taking the lock again.
    Retaking,
    /// Another live instance took it meanwhile (final).
    Taken,
}

/// How long a claim under a worker id whose hold is being taken again waits
/// for the outcome before it fails (and is retried by the worker).
const CLAIM_PATIENCE: Duration = Duration::from_secs(2);
/// The pauses between attempts to take a lock again.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);
/// TCP keepalives of a hold's connection, unless the URL sets its own: a
/// connection to a server that went silent (a partition, a frozen VM) is
/// given up after about 5 s + 5 x 1 s, and the lock taken again.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_RETRIES: u32 = 5;

/// One hold's state, shared by its task, its [`WorkerHold`] and the store.
struct Shared {
    worker: String,
    phase: watch::Sender<Phase>,
}

/// What a [`WorkerHold`] keeps: the state, and the task's stop signal (the
/// task ends, and its connection with it, when this is dropped).
struct Guard {
    _shared: Arc<Shared>,
    _stop: oneshot::Sender<()>,
}

/// A server session: its process id and start time (text), so that a
/// reused process id is not taken for this hold's own old session.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Session {
    pid: i32,
    started: Option<String>,
}

/// The holds a store granted, by worker id.
#[derive(Default)]
pub(super) struct Holds {
    map: Mutex<HashMap<String, Weak<Shared>>>,
}

/// What one attempt at the lock found.
enum Attempt {
    /// Taken, on this connection.
    Held(Client, oneshot::Receiver<()>, Session),
    /// Held by another session (when it could be seen).
    Busy(Option<Session>),
}

impl Holds {
    /// Takes the lock of `worker` (see the module docs); `None` when another
    /// live session holds it.
    pub async fn grant(
        &self,
        handle: &tokio::runtime::Handle,
        target: &Target,
        schema: &str,
        worker: &str,
    ) -> Result<Option<WorkerHold>, Error> {
        let target = with_keepalives(target);
        let key = format!("checkpoint-runtime worker {schema} {worker}");
        let (client, ended, session) = match attempt(handle, &target, &key).await? {
            Attempt::Held(client, ended, session) => (client, ended, session),
            Attempt::Busy(_) => return Ok(None),
        };
        let shared = Arc::new(Shared {
            worker: worker.to_owned(),
            phase: watch::channel(Phase::Held).0,
        });
        let (stop, stop_rx) = oneshot::channel();
        let held = Held {
            _client: client,
            ended,
            session,
        };
        handle.spawn(keep(
            shared.clone(),
            handle.clone(),
            target,
            key,
            held,
            stop_rx,
        ));
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, w| w.strong_count() > 0);
        map.insert(worker.to_owned(), Arc::downgrade(&shared));
        Ok(Some(WorkerHold::new(Guard {
            _shared: shared,
            _stop: stop,
        })))
    }

    /// The phase of this store's hold of `worker`, if it has one.
    fn phase(&self, worker: &str) -> Option<watch::Receiver<Phase>> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(worker)
            .and_then(Weak::upgrade)
            .map(|s| s.phase.subscribe())
    }

    /// The request a claim goes out with: `req` itself, unless it claims
    /// under a worker id whose hold this store lost to another instance
    /// (then under `<id>~<instance>`); waits a little while the hold is
    /// being taken again.
    /// The wait runs on `handle` (the store's futures may be polled
    /// outside a tokio runtime).
    pub async fn claim_request<'r>(
        &self,
        handle: &tokio::runtime::Handle,
        req: &'r ClaimRequest,
    ) -> Result<Cow<'r, ClaimRequest>, Error> {
        let Some(mut phase) = self.phase(&req.worker) else {
            return Ok(Cow::Borrowed(req));
        };
        let mut now = *phase.borrow_and_update();
        if now == Phase::Retaking {
            let settled = handle
                .spawn(async move {
                    let wait = phase.wait_for(|p| *p != Phase::Retaking);
                    match tokio::time::timeout(CLAIM_PATIENCE, wait).await {
                        Ok(Ok(p)) => Some(*p),
                        // The hold was dropped meanwhile: nothing to decide.
                        Ok(Err(_)) => Some(Phase::Held),
                        Err(_) => None,
                    }
                })
                .await
                .map_err(|e| Error::internal(format!("postgres hold task: {e}")))?;
            now = settled.ok_or_else(|| {
                Error::store(format!(
                    "postgres: worker id `{}`: its hold ended with its connection and is not \
                     taken again yet (no claims under it meanwhile)",
                    req.worker
                ))
            })?;
        }
        Ok(match now {
            Phase::Held | Phase::Retaking => Cow::Borrowed(req),
            Phase::Taken => {
                let mut own = req.clone();
                own.worker = Arc::from(format!("{}~{}", req.worker, req.instance));
                Cow::Owned(own)
            }
        })
    }

    /// Refuses to renew a lease under a worker id whose hold this store
    /// lost to another instance (see the module docs).
    pub fn check_renew(&self, run: &str, lease: &Lease) -> Result<(), Error> {
        match self.phase(&lease.worker) {
            Some(phase) if *phase.borrow() == Phase::Taken => Err(Error::LeaseLost {
                run: run.to_owned(),
                worker: lease.worker.to_string(),
            }),
            _ => Ok(()),
        }
    }
}

/// The target with keepalives on the hold's connection (see
/// [`KEEPALIVE_IDLE`]), unless the URL set them.
fn with_keepalives(target: &Target) -> Target {
    let mut target = target.clone();
    let c = &mut target.config;
    if c.get_keepalives() {
        if c.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            c.keepalives_idle(KEEPALIVE_IDLE);
        }
        if c.get_keepalives_interval().is_none() {
            c.keepalives_interval(KEEPALIVE_INTERVAL);
        }
        if c.get_keepalives_retries().is_none() {
            c.keepalives_retries(KEEPALIVE_RETRIES);
        }
    }
    target
}

/// Connects and tries the lock once.
async fn attempt(
    handle: &tokio::runtime::Handle,
    target: &Target,
    key: &str,
) -> Result<Attempt, Error> {
    let (client, ended) = conn::connect_watched(handle, target).await?;
    let row = client
        .query_one(
            "SELECT pg_try_advisory_lock(hashtextextended($1, 0)), pg_backend_pid(), \
             (SELECT backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid())",
            &[&key],
        )
        .await
        .map_err(db_err)?;
    if get::<bool>(&row, 0)? {
        let session = Session {
            pid: get(&row, 1)?,
            started: get(&row, 2)?,
        };
        return Ok(Attempt::Held(client, ended, session));
    }
    // A bigint advisory key shows in pg_locks as its high half (`classid`)
    // and its low half (`objid`), with `objsubid` 1.
    let holder = client
        .query_opt(
            "SELECT l.pid, a.backend_start::text FROM pg_locks l \
             LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND l.classid = ((hashtextextended($1, 0) >> 32) & 4294967295)::oid \
             AND l.objid = (hashtextextended($1, 0) & 4294967295)::oid",
            &[&key],
        )
        .await
        .map_err(db_err)?;
    let holder = match holder {
        Some(row) => Some(Session {
            pid: get(&row, 0)?,
            started: get(&row, 1)?,
        }),
        None => None,
    };
    // This connection only looked: it ends here.
    drop(client);
    Ok(Attempt::Busy(holder))
}

/// The connection holding the lock (kept, not used: the session is the lock).
struct Held {
    _client: Client,
    ended: oneshot::Receiver<()>,
    session: Session,
}

/// Keeps the hold up until `stop` (see the module docs).
async fn keep(
    shared: Arc<Shared>,
    handle: tokio::runtime::Handle,
    target: Target,
    key: String,
    mut held: Held,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = &mut held.ended => {}
        }
        let old = held.session.clone();
        drop(held);
        shared.phase.send_replace(Phase::Retaking);
        let mut pause = FIRST_PAUSE;
        held = loop {
            let outcome = tokio::select! {
                _ = &mut stop => return,
                r = retake(&handle, &target, &key, &old) => r,
            };
            match outcome {
                Ok(Some(again)) => break again,
                Ok(None) => {
                    shared.phase.send_replace(Phase::Taken);
                    eprintln!(
                        "checkpoint-runtime: postgres: worker id `{}` was taken by another live \
                         instance while the connection holding it was down; this instance \
                         leases its runs under `{}~<instance>` from now on and gives up its \
                         leases under `{}`",
                        shared.worker, shared.worker, shared.worker
                    );
                    return;
                }
                Err(_) => {
                    tokio::select! {
                        _ = &mut stop => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
            }
        };
        shared.phase.send_replace(Phase::Held);
    }
}

/// One attempt at taking the lock again: `Some` when held again, `None`
/// when another session holds it, an error to try again (the server is
/// unreachable, or the holder was this hold's own old session, now ended).
async fn retake(
    handle: &tokio::runtime::Handle,
    target: &Target,
    key: &str,
    old: &Session,
) -> Result<Option<Held>, Error> {
    match attempt(handle, target, key).await? {
        Attempt::Held(client, ended, session) => Ok(Some(Held {
            _client: client,
            ended,
            session,
        })),
        Attempt::Busy(Some(holder)) if holder == *old => {
            // The server still keeps the session this hold lost (it has not
            // noticed that the client is gone): end it, then try again.
            let client = conn::connect(handle, target).await?;
            client
                .query_one("SELECT pg_terminate_backend($1)", &[&holder.pid])
                .await
                .map_err(db_err)?;
            Err(Error::store(
                "postgres: ended the worker hold's previous session",
            ))
        }
        Attempt::Busy(Some(_)) => Ok(None),
        // Released between the two statements: try again.
        Attempt::Busy(None) => Err(Error::store("postgres: worker lock released meanwhile")),
    }
}
