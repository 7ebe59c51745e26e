//! Connections: the store URL and its options, a small pool of clients, the
//! per-connection statement cache, error mapping and time conversions.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use std::future::Future as _;
use tokio::sync::{oneshot, Semaphore, SemaphorePermit};
use tokio_postgres::types::{FromSql, ToSql};

use tokio_postgres::{Client, Row, Statement};

use super::tls::{RootCert, SslMode, Tls};
use crate::Error;

/// Connections kept open per store unless the URL says otherwise
/// (`?pool_size=N`).
pub(super) const DEFAULT_POOL_SIZE: usize = 8;
/// The largest `?pool_size=` accepted (far above what a server allows by
/// default, and far below what the pool's semaphore can count).
pub(super) const MAX_POOL_SIZE: usize = 1024;
/// How long connecting may take when the URL sets no `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
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

/// A store URL split into what `tokio-postgres` understands and this
/// backend's own options.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// The connection configuration (its `ssl_mode` set from `sslmode`).
    pub config: tokio_postgres::Config,
    /// The TLS connector every connection uses (`sslmode`, `sslrootcert`).
    pub tls: Tls,
    /// The PostgreSQL schema holding the tables (`None`: the connection's
    /// `current_schema()`, normally `public`).
    pub schema: Option<String>,
    /// How many connections the pool opens at most.
    pub pool_size: usize,
    /// The URL with its password hidden, for messages.
    pub shown: String,
}

/// Hides the password of a `postgres://user:password@host/...` URL.
pub(super) fn redact(url: &str) -> String {
    crate::store::redact_url(url)
}

/// Checks a PostgreSQL schema name given as an option: ASCII letters,
/// digits and `_`, at most 63 bytes.
pub(super) fn check_schema_name(url: &str, name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::UnsupportedStore {
            url: redact(url),
            reason: format!(
                "invalid schema name `{name}`: use 1 to 63 ASCII letters, digits or `_`"
            ),
        })
    }
}

/// `"name"`, quoted as an SQL identifier.
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The query parameters (of a URL) or pairs (of a `key=value` string) that
/// this backend reads itself rather than tokio-postgres.
/// (`sslcert`, `sslkey` and `sslpassword`: only to be refused clearly.)
const OWN_PARAMS: &[&str] = &[
    "schema",
    "pool_size",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslpassword",
];

impl Target {
    /// Parses `postgres://...` / `postgresql://...` (or a `key=value`
    /// connection string), taking out this backend's own parameters
    /// ([`OWN_PARAMS`]): `schema`, `pool_size`, and libpq's `sslmode` and
    /// `sslrootcert` (see the `tls` module; tokio-postgres is told the part
    /// of `sslmode` it knows). A `sslrootcert` file is read here, so a bad
    /// one is refused before any connection.
    pub fn parse(url: &str, schema: Option<&str>) -> Result<Target, Error> {
        let shown = redact(url);
        let bad = |reason: String| Error::UnsupportedStore {
            url: shown.clone(),
            reason,
        };
        let (pg_url, own) = split_own_params(url);
        let own = OwnParams::read(own).map_err(&bad)?;
        let mut config: tokio_postgres::Config = pg_url
            .parse()
            .map_err(|e| bad(format!("not a valid PostgreSQL URL: {}", describe(&e))))?;
        // As libpq, `sslmode` does not apply to Unix-domain sockets (the
        // server offers no TLS there).
        let unix_only = !config.get_hosts().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| !matches!(h, tokio_postgres::config::Host::Tcp(_)));
        config.ssl_mode(if unix_only {
            tokio_postgres::config::SslMode::Disable
        } else {
            own.sslmode.for_tokio_postgres()
        });
        let tls = Tls::new(own.sslmode, own.root.as_ref()).map_err(&bad)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("checkpoint-runtime");
        }
        let pool_size = own.pool_size;
        let schema = match (schema, own.schema) {
            (Some(s), _) => Some(s.to_owned()),
            (None, s) => s,
        };
        if let Some(s) = &schema {
            check_schema_name(url, s)?;
        }
        Ok(Target {
            config,
            tls,
            schema,
            pool_size,
            shown,
        })
    }
}

/// This backend's own parameters, read.
struct OwnParams {
    schema: Option<String>,
    pool_size: usize,
    sslmode: SslMode,
    root: Option<RootCert>,
}

impl OwnParams {
    /// Reads the pairs [`split_own_params`] took out; the error names the
    /// parameter and its value.
    fn read(pairs: Vec<(&'static str, String)>) -> Result<OwnParams, String> {
        let mut schema = None;
        let mut pool_size = DEFAULT_POOL_SIZE;
        let mut sslmode = None;
        let mut root = None;
        for (key, v) in pairs {
            match key {
                "schema" => schema = Some(v),
                "pool_size" => {
                    pool_size = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_POOL_SIZE).contains(n))
                        .ok_or_else(|| {
                            format!(
                                "invalid pool_size `{v}`: expected a number from 1 to \
                                 {MAX_POOL_SIZE}"
                            )
                        })?;
                }
                "sslmode" => {
                    sslmode = Some(SslMode::parse(&v).ok_or_else(|| {
                        format!(
                            "invalid sslmode `{v}`: expected disable, prefer, require, \
                             verify-ca or verify-full"
                        )
                    })?);
                }
                "sslrootcert" => {
                    root = Some(match v.as_str() {
                        "" => return Err("invalid sslrootcert ``: empty path".to_owned()),
                        "system" => RootCert::System,
                        _ => RootCert::File(v),
                    })
                }
                _ => {
                    return Err(format!(
                        "`{key}` is not supported: client certificates are not (yet); \
                         authenticate with a password or trust instead"
                    ))
                }
            }
        }
        // As libpq: `sslrootcert=system` means `verify-full` and allows no
        // weaker mode (the system's roots vouch for names, not for a CA of
        // one's own).
        let sslmode = match (sslmode, &root) {
            (None, Some(RootCert::System)) => SslMode::VerifyFull,
            (Some(m), Some(RootCert::System)) if m != SslMode::VerifyFull => {
                return Err(format!(
                    "sslmode `{}` may not be used with sslrootcert=system: use verify-full",
                    m.as_str()
                ))
            }
            (m, _) => m.unwrap_or(SslMode::Prefer),
        };
        Ok(OwnParams {
            schema,
            pool_size,
            sslmode,
            root,
        })
    }
}

/// `url` without the parameters in [`OWN_PARAMS`], and those parameters
/// with their values (percent-decoded in a URL, unquoted in a `key=value`
/// string), in the order given. A string this cannot split is returned
/// whole, for tokio-postgres to explain what is wrong with it.
fn split_own_params(url: &str) -> (String, Vec<(&'static str, String)>) {
    let own = |key: &str| OWN_PARAMS.iter().copied().find(|k| *k == key);
    let mut taken = Vec::new();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((base, query)) = url.split_once('?') else {
            return (url.to_owned(), taken);
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=').and_then(|(k, v)| Some((own(k)?, v))) {
                Some((key, v)) => taken.push((key, percent_decode(v))),
                None => kept.push(pair),
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return (rest, taken);
    }
    let Some(pairs) = key_value_pairs(url) else {
        return (url.to_owned(), Vec::new());
    };
    let mut rest = String::new();
    let mut from = 0;
    for (range, key, value) in pairs {
        if let Some(key) = own(key) {
            rest.push_str(&url[from..range.start]);
            from = range.end;
            taken.push((key, value));
        }
    }
    rest.push_str(&url[from..]);
    (rest, taken)
}

/// The pairs of a libpq `key=value` connection string: where each is, its
/// key, and its value (a `'quoted value'` unquoted, `\` escapes undone);
/// `None` if it is not one.
fn key_value_pairs(s: &str) -> Option<Vec<(std::ops::Range<usize>, &str, String)>> {
    let mut pairs = Vec::new();
    let mut chars = s.char_indices().peekable();
    let skip_ws = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_ws(&mut chars);
        let Some(&(start, _)) = chars.peek() else {
            return Some(pairs);
        };
        while chars
            .next_if(|(_, c)| *c != '=' && !c.is_whitespace())
            .is_some()
        {}
        let key_end = chars.peek().map_or(s.len(), |(i, _)| *i);
        skip_ws(&mut chars);
        chars.next_if(|(_, c)| *c == '=')?;
        skip_ws(&mut chars);
        let mut value = String::new();
        let quoted = chars.next_if(|(_, c)| *c == '\'').is_some();
        loop {
            match chars.peek().map(|(_, c)| *c) {
                None if quoted => return None,
                None => break,
                Some('\'') if quoted => {
                    chars.next();
                    break;
                }
                Some(c) if c.is_whitespace() && !quoted => break,
                Some('\\') => {
                    chars.next();
                    value.push(chars.next()?.1);
                }
                Some(c) => {
                    chars.next();
                    value.push(c);
                }
            }
        }
        let end = chars.peek().map_or(s.len(), |(i, _)| *i);
        pairs.push((start..end, &s[start..key_end], value));
    }
}

/// `%XX` escapes of a URL query value decoded (a malformed one is kept as
/// it is; bytes that are not UTF-8 become U+FFFD).
fn percent_decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------
// Errors

/// A `tokio-postgres` error in words, with the server's message when there
/// is one.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{db}");
    }
    match std::error::Error::source(e) {
        Some(src) => format!("{e}: {src}"),
        None => e.to_string(),
    }
}

/// A failed connection attempt as [`Error::Store`], naming the URL (its
/// password hidden) and, for a refused certificate, what was checked.
pub(super) fn connect_error(shown: &str, tls: &Tls, e: tokio_postgres::Error) -> Error {
    let message = format!(
        "postgres: cannot connect to `{shown}`: {}{}",
        describe(&e),
        tls.explain(&e)
    );
    Error::store_caused_by(message, e)
}

/// A database error as the runtime's [`Error::Store`].
pub(super) fn db_err(e: tokio_postgres::Error) -> Error {
    Error::store_caused_by(format!("postgres: {}", describe(&e)), e)
}

/// A stored value this build cannot read.
pub(super) fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::store(format!("postgres: unreadable stored data: {what}"))
}

/// Reads column `i` of a row.
pub(super) fn get<'r, T: FromSql<'r>>(row: &'r Row, i: usize) -> Result<T, Error> {
    row.try_get(i)
        .map_err(|e| corrupt(format_args!("column {i}: {}", describe(&e))))
}

// ---------------------------------------------------------------------------
// Conversions

pub(super) use crate::store::sql::{from_ts, to_i64, ts, ts_after};

/// `s` without NUL characters: PostgreSQL refuses them in `text` (and
/// `\u0000` in `jsonb`), so each becomes U+FFFD (`�`). Applied to every text
/// that comes from a workflow (errors, panic messages, retry reasons,
/// signal names, ...) before it is bound, so that such a text cannot make a
/// write fail (and the run be executed again and again).
pub(super) fn scrub(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// `value` as JSON text for a `jsonb` (or JSON in `text`) column, with every
/// NUL character in its strings (and keys) replaced as by [`scrub`].
pub(super) fn to_json<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, Error> {
    let encode_err =
        |e: serde_json::Error| Error::internal(format!("cannot encode for the store: {e}"));
    let json = crate::store::sql::to_json(value)?;
    // Serialized, a NUL is `\u0000`: the common case needs no second pass
    // (an escaped backslash followed by `u0000` only costs one).
    if !json.contains("\\u0000") {
        return Ok(json);
    }
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::String(s) => {
                if let Cow::Owned(t) = scrub(s) {
                    *s = t;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            serde_json::Value::Object(map) => {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    walk(&mut v);
                    map.insert(scrub(&k).into_owned(), v);
                }
            }
            _ => {}
        }
    }
    let mut v: serde_json::Value = serde_json::from_str(&json).map_err(encode_err)?;
    walk(&mut v);
    serde_json::to_string(&v).map_err(encode_err)
}

/// A stored value read back as `u64`; a negative one is unreadable data.
pub(super) fn to_u64(v: i64, what: &str) -> Result<u64, Error> {
    crate::store::sql::to_u64(v, what).map_err(corrupt)
}

// ---------------------------------------------------------------------------
// The pool

/// One open connection and the statements prepared on it.
pub(super) struct Conn {
    client: Client,
    stmts: Mutex<HashMap<&'static str, Statement>>,
}

/// At most `size` connections, opened on demand and kept while healthy.
pub(super) struct Pool {
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

/// Opens one connection: its I/O runs in a task on `handle`; the search
/// path is set to `schema` when one is configured, and
/// `idle_in_transaction_session_timeout` to [`IDLE_IN_TRANSACTION_TIMEOUT`]
/// unless the URL's `options` set it.
pub(super) async fn connect(
    handle: &tokio::runtime::Handle,
    target: &Target,
) -> Result<Client, Error> {
    connect_with(handle, target, None).await
}

/// Like [`connect`], and also returns a receiver that completes (with a
/// value or an error) as soon as the connection has ended: the server went
/// away, the session was terminated, or the client was dropped.
pub(super) async fn connect_watched(
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
pub(super) struct Pooled<'p> {
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
    fn conn(&mut self) -> &mut Conn {
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
    /// parameters' values, as [`Cx::query_planned`] plans it.
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

enum Db<'c> {
    Tx(Tx<'c>),
    Plain(&'c Client),
}

/// A transaction on `client`, begun with its first statement (see
/// [`Pooled::begin`]). Dropped while open, it is rolled back: the
/// `ROLLBACK` is sent at once (its reply is not awaited), as
/// `tokio_postgres::Transaction` does, so that the connection goes back to
/// the pool with no transaction open and no row lock held.
struct Tx<'c> {
    client: &'c Client,
    /// `BEGIN` was sent.
    begun: bool,
    /// Committed (or the commit was sent).
    done: bool,
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
pub(super) struct Cx<'c> {
    db: Db<'c>,
    stmts: &'c Mutex<HashMap<&'static str, Statement>>,
    notifier: Option<&'c Notify>,
    /// A notification is to be sent once the transaction committed.
    notify: bool,
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

    async fn prep(&mut self, sql: &'static str) -> Result<Statement, Error> {
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

// ---------------------------------------------------------------------------
// The side connection

/// One connection of its own, outside the pool, for single statements that
/// must not queue behind the pool's transactions: lease renewals. A
/// renewal that waited for a pool slot could wait behind every checkpoint
/// in flight and let the lease lapse under load; here it never waits for
/// the pool. Statements from many tasks are pipelined on the one
/// connection (a `tokio-postgres` client takes concurrent queries), each
/// is its own transaction (autocommit), and none waits for a row lock (the
/// SQL sent here skips locked rows), so one statement never holds up the
/// others. Reconnects on demand after the connection failed.
pub(super) struct Side {
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
