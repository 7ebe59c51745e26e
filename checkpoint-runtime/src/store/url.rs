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
/// // An unencoded `@` in the password, a percent-encoded key: hidden too.
/// assert_eq!(
///     redact_url("postgres://app:p@ss@db/prod"),
///     "postgres://app:***@db/prod"
/// );
/// assert_eq!(
///     redact_url("postgres://app@db/prod?passw%6Frd=s3cret"),
///     "postgres://app@db/prod?passw%6Frd=***"
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
        Some(scheme_end) => redact_query(&redact_userinfo(url, scheme_end + 3)),
        None => url.to_owned(),
    };
    redact_password_pairs(&shown)
}

/// Hides the password of the `user:password@` part that starts at `from`.
fn redact_userinfo(url: &str, from: usize) -> String {
    let rest = &url[from..];
    // tokio-postgres ends the user info at the first `@`, not at the first
    // `/` or `?`: a password may hold those unencoded. A password with an
    // unencoded `@` is cut there (and fails to log in), but what follows is
    // still the user's secret: hide up to the last `@` before the query.
    let Some(first_at) = rest.find('@') else {
        return url.to_owned();
    };
    let query = rest[first_at..]
        .find('?')
        .map_or(rest.len(), |q| first_at + q);
    let at = rest[..query].rfind('@').unwrap_or(first_at);
    match rest[..at].find(':') {
        Some(colon) => format!("{}{}:***{}", &url[..from], &rest[..colon], &rest[at..]),
        None => url.to_owned(),
    }
}

/// Hides the value of every query parameter whose key, percent-decoded as
/// tokio-postgres decodes it, names a password (`passw%6Frd=` included).
fn redact_query(url: &str) -> String {
    let Some(q) = url.find('?') else {
        return url.to_owned();
    };
    let pairs: Vec<String> = url[q + 1..]
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if names_a_password(key) => format!("{key}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{}?{}", &url[..q], pairs.join("&"))
}

fn names_a_password(key: &str) -> bool {
    let key = percent_encoding::percent_decode_str(key).decode_utf8_lossy();
    key.eq_ignore_ascii_case("password") || key.eq_ignore_ascii_case("sslpassword")
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

#[cfg(test)]
mod tests {
    use super::redact_url;

    /// Every form a password can take in a store URL is hidden, and what
    /// is not a secret stays readable.
    #[test]
    fn every_password_form_is_hidden() {
        for (url, shown) in [
            ("postgres://app:p@ss@db/prod", "postgres://app:***@db/prod"),
            (
                "postgres://app@corp:pw@db/prod",
                "postgres://app@corp:***@db/prod",
            ),
            (
                "postgres://app:p@ss@db/prod?application_name=a@b",
                "postgres://app:***@db/prod?application_name=a@b",
            ),
            (
                "postgres://app@db/prod?passw%6Frd=s3cret",
                "postgres://app@db/prod?passw%6Frd=***",
            ),
            (
                "postgres://app@db/prod?%70assword=s3cret&x=1",
                "postgres://app@db/prod?%70assword=***&x=1",
            ),
            (
                "postgres://app@db/prod?PASSWORD=s3cret",
                "postgres://app@db/prod?PASSWORD=***",
            ),
            (
                "postgres://app@db/prod?sslpassword=k&sslmode=require",
                "postgres://app@db/prod?sslpassword=***&sslmode=require",
            ),
            ("postgres://app@db/prod", "postgres://app@db/prod"),
            ("sqlite://runs.db", "sqlite://runs.db"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            let secretless = ["p@ss", "ss@", "pw@", "s3cret", "=k&"];
            for secret in secretless {
                assert!(!redact_url(url).contains(secret), "{url} shows {secret}");
            }
        }
    }
}
