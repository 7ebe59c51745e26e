//! The store URL and its options: what `tokio-postgres` reads, and this
//! backend's own parameters (`schema`, `pool_size`, `sslmode`,
//! `sslrootcert`), taken out of a URL's query or a `key=value` string.

use std::time::Duration;

use super::error::describe;
use crate::store::postgres::tls::{RootCert, SslMode, Tls};
use crate::Error;

/// Connections kept open per store unless the URL says otherwise
/// (`?pool_size=N`).
const DEFAULT_POOL_SIZE: usize = 8;
/// The largest `?pool_size=` accepted (far above what a server allows by
/// default, and far below what the pool's semaphore can count).
const MAX_POOL_SIZE: usize = 1024;
/// How long connecting may take when the URL sets no `connect_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A store URL split into what `tokio-postgres` understands and this
/// backend's own options.
#[derive(Debug, Clone)]
pub(in crate::store::postgres) struct Target {
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
pub(in crate::store::postgres) fn redact(url: &str) -> String {
    crate::store::redact_url(url)
}

/// Checks a PostgreSQL schema name given as an option: ASCII letters,
/// digits and `_`, at most 63 bytes.
pub(in crate::store::postgres) fn check_schema_name(url: &str, name: &str) -> Result<(), Error> {
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
pub(in crate::store::postgres) fn quote_ident(name: &str) -> String {
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
