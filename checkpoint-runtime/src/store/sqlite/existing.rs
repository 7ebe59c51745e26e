//! Opening a store that must already exist, for tools that read or operate
//! runs (the `checkpoint` command line, its server): they never create a
//! store nor change its schema. A mistyped path would otherwise show an
//! empty store that a worker never sees, and an older command line would
//! upgrade a store under the workers using it.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::migrations::SCHEMA_VERSION;
use crate::Error;

/// Checks, reading only, that the file at `path` is a store of this build's
/// schema version: an [`Error::Store`] saying what it is otherwise (missing, not a database, another program's database, or a
/// store of an older or newer version).
/// `busy`: how long to wait for a writer's lock.
pub(super) fn check_existing(path: &Path, busy: Duration) -> Result<(), Error> {
    let refuse = |reason: String| Error::store(format!("sqlite: {reason}"));
    if !path.exists() {
        return Err(refuse(format!(
            "not a checkpoint store: the SQLite file `{}` does not exist (a store is \
             created by a worker opening it, never by a command that reads it)",
            path.display()
        )));
    }
    // Read-only: this check writes nothing, not even the journal mode.
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let (version, tables) = Connection::open_with_flags(path, flags)
        .and_then(|conn| {
            conn.busy_timeout(busy)?;
            let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
            let tables: i64 = conn.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'runs'",
                [],
                |r| r.get(0),
            )?;
            Ok((version, tables))
        })
        .map_err(|e| {
            refuse(format!(
                "not a checkpoint store: `{}` cannot be read as an SQLite database ({e})",
                path.display()
            ))
        })?;
    if version == 0 || tables == 0 {
        return Err(refuse(format!(
            "not a checkpoint store: `{}` holds none of its tables (an empty file, or \
             another program's database); a store is created by a worker opening it, \
             never by a command that reads it",
            path.display()
        )));
    }
    if version < SCHEMA_VERSION {
        return Err(refuse(format!(
            "the store `{}` has schema version {version}, older than this build's \
             {SCHEMA_VERSION}: commands that read or operate runs do not upgrade a \
             store; a worker of this build upgrades it when it opens it (or use the \
             command line of the version the workers run)",
            path.display()
        )));
    }
    if version > SCHEMA_VERSION {
        return Err(refuse(format!(
            "the store `{}` has schema version {version}, newer than this build's \
             {SCHEMA_VERSION}; upgrade checkpoint-runtime",
            path.display()
        )));
    }
    Ok(())
}
