//! Store URLs, parsed in one place: [`StoreUrl`] names the backend a URL
//! picks, [`redact_url`] hides its password for messages.

use std::path::PathBuf;

use crate::Error;

/// The spellings of the in-memory store.
const MEMORY: &[&str] = &[":memory:", "memory:", "memory://", "mem:"];

/// A store URL, parsed: which backend it names and where.
///
/// ```
/// use checkpoint_runtime::store::StoreUrl;
///
/// assert_eq!(StoreUrl::parse(":memory:").unwrap(), StoreUrl::Memory);
/// assert_eq!(
///     StoreUrl::parse("sqlite://runs.db").unwrap(),
///     StoreUrl::Sqlite("runs.db".into())
/// );
/// assert_eq!(
///     StoreUrl::parse("postgres://app@db/prod").unwrap(),
///     StoreUrl::Postgres("postgres://app@db/prod".into())
/// );
/// assert!(StoreUrl::parse("sqlite://").is_err());
/// // Another scheme is refused, not opened as a file of that name.
/// let err = StoreUrl::parse("mysql://app@db/prod").unwrap_err();
/// assert!(err.to_string().contains("unknown store scheme `mysql://`"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// `":memory:"`, `"memory:"`, `"memory://"` or `"mem:"`: a fresh
    /// in-memory store.
    Memory,
    /// Anything else: an SQLite file path, optionally written
    /// `sqlite://path` or `sqlite:path`.
    Sqlite(PathBuf),
    /// `postgres://...` or `postgresql://...`, kept whole (the backend reads
    /// its own options from it).
    Postgres(String),
}

impl StoreUrl {
    /// Parses a store URL; [`Error::UnsupportedStore`] for an empty SQLite
    /// path or a URL of another scheme.
    pub fn parse(url: &str) -> Result<StoreUrl, Error> {
        if MEMORY.contains(&url.trim()) {
            return Ok(StoreUrl::Memory);
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres(url.to_owned()));
        }
        // A URL of another scheme (`mysql://..`, a typo such as
        // `postgress://..`) is refused, rather than opened as an SQLite file
        // of that odd name.
        if let Some((scheme, _)) = url.split_once("://") {
            let url_like = !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
            if url_like && scheme != "sqlite" && scheme != "memory" {
                return Err(Error::UnsupportedStore {
                    url: redact_url(url),
                    reason: format!(
                        "unknown store scheme `{scheme}://`: expected an SQLite file path (or `sqlite://path`), `postgres://..` or `:memory:`"
                    ),
                });
            }
        }
        // Anything else is an SQLite file: `path.db` or `sqlite://path.db`.
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or(url);
        if path.is_empty() {
            return Err(Error::UnsupportedStore {
                url: url.to_owned(),
                reason: "empty SQLite file path".to_owned(),
            });
        }
        Ok(StoreUrl::Sqlite(PathBuf::from(path)))
    }
}

/// A store URL fit for messages and logs: every password in it is replaced
/// by `***`: the one of `scheme://user:password@host/...` (up to the first
/// `@`, as tokio-postgres reads it, so a password holding `/` or `?` is
/// hidden whole), a `password=...` (or `sslpassword=...`) query parameter,
/// and such a pair of a `key=value` connection string. Anything else is
/// returned as it is.
///
/// ```
/// use checkpoint_runtime::store::redact_url;
///
/// assert_eq!(
///     redact_url("postgres://app:s3cret@db.internal/prod"),
///     "postgres://app:***@db.internal/prod"
/// );
/// assert_eq!(
///     redact_url("postgres://app@db/prod?sslmode=disable&password=s3cret"),
///     "postgres://app@db/prod?sslmode=disable&password=***"
/// );
/// assert_eq!(
///     redact_url("host=db user=app password='s3 cret' dbname=prod"),
///     "host=db user=app password=*** dbname=prod"
/// );
/// assert_eq!(
///     redact_url("postgres://app:pa/ss?w@db/prod"),
///     "postgres://app:***@db/prod"
/// );
/// // TLS parameters are kept; the password of a client key is hidden too.
/// assert_eq!(
///     redact_url("postgres://app:s3cret@db/prod?sslmode=verify-full&sslrootcert=/etc/ca.pem"),
///     "postgres://app:***@db/prod?sslmode=verify-full&sslrootcert=/etc/ca.pem"
/// );
/// assert_eq!(
///     redact_url("host=db sslkey=/k.pem sslpassword=s3cret"),
///     "host=db sslkey=/k.pem sslpassword=***"
/// );
/// assert_eq!(redact_url("runs.db"), "runs.db");
/// ```
pub fn redact_url(url: &str) -> String {
    let shown = match url.find("://") {
        Some(scheme_end) => redact_userinfo(url, scheme_end + 3),
        None => url.to_owned(),
    };
    redact_password_pairs(&shown)
}

/// Hides the password of the `user:password@` part that starts at `from`.
fn redact_userinfo(url: &str, from: usize) -> String {
    let rest = &url[from..];
    // The user info ends at the first `@` (tokio-postgres reads it so), not
    // at the first `/` or `?`: a password may hold those unencoded.
    let Some(at) = rest.find('@') else {
        return url.to_owned();
    };
    match rest[..at].find(':') {
        Some(colon) => format!("{}{}:***{}", &url[..from], &rest[..colon], &rest[at..]),
        None => url.to_owned(),
    }
}

/// Hides the value of every `password=` pair, in a query string (up to `&`)
/// or a `key=value` string (up to a space, or a quoted value).
fn redact_password_pairs(text: &str) -> String {
    const KEY: &str = "password=";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(KEY) {
        // `password=` or libpq's `sslpassword=` (of a client key).
        let key_start = if rest[..i].ends_with("ssl") { i - 3 } else { i };
        let starts_pair =
            key_start == 0 || matches!(rest.as_bytes()[key_start - 1], b'?' | b'&' | b' ');
        out.push_str(&rest[..i + KEY.len()]);
        rest = &rest[i + KEY.len()..];
        if !starts_pair {
            continue;
        }
        let end = match rest.strip_prefix('\'') {
            Some(quoted) => quoted.find('\'').map_or(rest.len(), |q| q + 2),
            None => rest.find(['&', ' ']).unwrap_or(rest.len()),
        };
        out.push_str("***");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}
