//! Errors: a `tokio-postgres` error, a failed connection attempt and a
//! stored value this build cannot read, as the runtime's [`Error`].

use crate::store::postgres::tls::Tls;
use crate::Error;

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
pub(in crate::store::postgres) fn connect_error(
    shown: &str,
    tls: &Tls,
    e: tokio_postgres::Error,
) -> Error {
    let message = format!(
        "postgres: cannot connect to `{shown}`: {}{}",
        describe(&e),
        tls.explain(&e)
    );
    Error::store_caused_by(message, e)
}

/// A database error as the runtime's [`Error::Store`].
pub(in crate::store::postgres) fn db_err(e: tokio_postgres::Error) -> Error {
    Error::store_caused_by(format!("postgres: {}", describe(&e)), e)
}

/// A stored value this build cannot read.
pub(in crate::store::postgres) fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::store(format!("postgres: unreadable stored data: {what}"))
}

/// The class (the first two characters of the SQLSTATE) of the server's
/// error behind `e`, if the server refused a statement.
pub(in crate::store::postgres) fn sqlstate_class(e: &Error) -> Option<&str> {
    let source = std::error::Error::source(e)?;
    let code = source.downcast_ref::<tokio_postgres::Error>()?.code()?;
    code.code().get(..2)
}
