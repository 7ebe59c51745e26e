//! Errors of the SQLite backend: SQLite's own (kept, so that busy/locked
//! can be retried), a corrupt database, and encoding for the store.

use std::io::ErrorKind as Io;
use std::path::Path;
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
            Fail::Err(e) => match &**e {
                Error::Store { message, .. } => message.starts_with(CORRUPT),
                // What the checkpoint decoder reports for a damaged row.
                Error::Decode { .. } => true,
                _ => false,
            },
        }
    }

    /// What is corrupt, for a [`corrupt`] error (its message without the
    /// prefix), to be named in a more precise error.
    pub(super) fn corrupt_detail(&self) -> Option<&str> {
        match self {
            Fail::Err(e) => match &**e {
                Error::Store { message, .. } => message.strip_prefix(CORRUPT),
                _ => None,
            },
            Fail::Sql(_) => None,
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

/// The error for opening the store at `path` failing with `fail`. When
/// SQLite could not open or write the file, the file system is asked why,
/// so that the message says what to do: the file or its directory is
/// read-only (SQLite writes even to read: its write-ahead log and the
/// shared-memory index beside the file), or the directory is missing.
/// Other failures are `fail`'s error, naming the path.
pub(super) fn opening_error(path: &Path, fail: Fail) -> Error {
    let shown = path.display();
    if let Fail::Sql(e) = &fail {
        let cannot_write = matches!(
            e.sqlite_error_code(),
            Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied)
        );
        if cannot_write {
            if let Some(why) = why_unwritable(path) {
                let message = format!("sqlite: the store `{shown}` {why} (SQLite: {e})");
                let Fail::Sql(e) = fail else {
                    return Error::store(message);
                };
                return Error::store_caused_by(message, e);
            }
        }
    }
    if matches!(&fail, Fail::Err(e) if matches!(&**e, Error::Store { message, .. } if message == OPENED_READ_ONLY))
    {
        let why = why_unwritable(path).unwrap_or_else(|| {
            "is read-only: SQLite could only open it for reading; make the file and its \
             directory writable for this user"
                .to_owned()
        });
        return Error::store(format!("sqlite: the store `{shown}` {why}"));
    }
    match fail.into_error() {
        Error::Store { message, source } => Error::Store {
            message: format!("{message} (opening `{shown}`)"),
            source,
        },
        other => other,
    }
}

/// What [`read_write`] fails with.
const OPENED_READ_ONLY: &str = "sqlite: opened read-only";

/// Fails when SQLite opened `conn` read-only (it does so, silently, for a
/// file it cannot write, such as an immutable one), so that the store is
/// refused at once, not at its first write: see [`opening_error`].
pub(super) fn read_write(conn: &rusqlite::Connection) -> R<()> {
    if conn.is_readonly(rusqlite::MAIN_DB)? {
        return Err(Fail::from(Error::store(OPENED_READ_ONLY)));
    }
    Ok(())
}

/// Why this process cannot write the store at `path`, if the file system
/// says so; `None` when it could.
fn why_unwritable(path: &Path) -> Option<String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name()?.to_string_lossy();
    let refused =
        |e: &std::io::Error| matches!(e.kind(), Io::PermissionDenied | Io::ReadOnlyFilesystem);
    if !dir.is_dir() {
        return Some(format!(
            "cannot be created: its directory `{}` does not exist (create it, or give \
             another path)",
            dir.display()
        ));
    }
    if path.exists() {
        if let Err(e) = std::fs::OpenOptions::new().write(true).open(path) {
            if refused(&e) {
                return Some(format!(
                    "is read-only: this process cannot write the file ({e}). The SQLite \
                     store writes even to read runs (its write-ahead log); make the file \
                     writable for this user (for example `chmod u+w {}`), or open a \
                     writable copy of it",
                    path.display()
                ));
            }
        }
    }
    // SQLite creates `<name>-wal` and `<name>-shm` next to the file.
    let probe = dir.join(format!(".{name}.checkpoint-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            None
        }
        Err(e) if refused(&e) => Some(format!(
            "is read-only: this process cannot create files in its directory `{}` ({e}), \
             where SQLite keeps the store's write-ahead log (`{name}-wal`, `{name}-shm`); \
             make the directory writable for this user, or move the file to one that is",
            dir.display()
        )),
        Err(_) => None,
    }
}
