//! Errors of the SQLite backend: SQLite's own (kept, so that busy/locked
//! can be retried), a corrupt database, and encoding for the store.

use std::time::{Duration, Instant};

use rusqlite::ErrorCode;
use serde::Serialize;

use crate::Error;

/// How long a transaction is retried (with backoff) while the database stays
/// busy or locked, before the error is returned.
pub(super) const BUSY_RETRY_FOR: Duration = Duration::from_secs(60);

/// An internal failure: a SQLite error (kept, so that busy/locked can be
/// retried) or a runtime error.
#[derive(Debug)]
pub(super) enum Fail {
    Sql(rusqlite::Error),
    Err(Box<Error>),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Sql(e)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Err(Box::new(e))
    }
}

impl Fail {
    pub(super) fn is_busy(&self) -> bool {
        matches!(self, Fail::Sql(e) if is_busy(e))
    }

    /// Whether this is damaged stored data (a row or checkpoint that does
    /// not decode), as opposed to a failure of the database itself.
    pub(super) fn is_damage(&self) -> bool {
        match self {
            Fail::Sql(e) => matches!(
                e,
                rusqlite::Error::FromSqlConversionFailure(..)
                    | rusqlite::Error::InvalidColumnType(..)
                    | rusqlite::Error::IntegralValueOutOfRange(..)
                    | rusqlite::Error::Utf8Error(..)
            ),
            Fail::Err(e) => {
                matches!(&**e, Error::Store { message, .. } if message.starts_with(CORRUPT))
            }
        }
    }

    pub(super) fn into_error(self) -> Error {
        match self {
            Fail::Sql(e) => sql_error(e),
            Fail::Err(e) => *e,
        }
    }
}

pub(super) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// A SQLite error as the runtime's [`Error::Store`], kept as its source (so
/// that a busy or locked database can be told from a corrupt one).
pub(super) fn sql_error(e: rusqlite::Error) -> Error {
    Error::store_caused_by(format!("sqlite: {e}"), e)
}

/// How the message of a [`corrupt`] error starts.
const CORRUPT: &str = "sqlite: corrupt database: ";

pub(super) fn corrupt(what: impl std::fmt::Display) -> Fail {
    Fail::from(Error::store(format!("{CORRUPT}{what}")))
}

pub(super) type R<T> = Result<T, Fail>;

/// Runs `f` until it succeeds or fails with something other than busy/locked,
/// backing off between tries, for at most [`BUSY_RETRY_FOR`].
pub(super) fn retry_busy<T>(mut f: impl FnMut() -> R<T>) -> R<T> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        match f() {
            Err(e) if e.is_busy() && start.elapsed() < BUSY_RETRY_FOR => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            other => return other,
        }
    }
}

/// A stored value read back as `u64`; a negative one is a corrupt database.
pub(super) fn to_u64(v: i64, what: &str) -> R<u64> {
    crate::store::sql::to_u64(v, what).map_err(corrupt)
}

pub(super) fn to_postcard<T: Serialize + ?Sized>(v: &T) -> R<Vec<u8>> {
    // Most values written here are small: one allocation, not a few growths.
    let mut buf = Vec::with_capacity(64);
    append_postcard(v, &mut buf)?;
    Ok(buf)
}

/// Appends `v` (postcard) to `buf`.
pub(super) fn append_postcard<T: Serialize + ?Sized>(v: &T, buf: &mut Vec<u8>) -> R<()> {
    crate::codec::append(v, buf)
        .map_err(|e| Fail::from(Error::internal(format!("cannot encode for the store: {e}"))))
}
