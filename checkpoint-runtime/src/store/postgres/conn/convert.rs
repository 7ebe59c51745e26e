//! Values in and out of rows: a column read, text and JSON made safe for
//! PostgreSQL (no NUL characters), numbers and times.

use std::borrow::Cow;

use tokio_postgres::types::FromSql;
use tokio_postgres::Row;

use super::error::{corrupt, describe};
use crate::Error;

/// Reads column `i` of a row.
pub(in crate::store::postgres) fn get<'r, T: FromSql<'r>>(
    row: &'r Row,
    i: usize,
) -> Result<T, Error> {
    row.try_get(i)
        .map_err(|e| corrupt(format_args!("column {i}: {}", describe(&e))))
}

pub(in crate::store::postgres) use crate::store::sql::{from_ts, to_i64, ts, ts_after};

/// `s` without NUL characters: PostgreSQL refuses them in `text` (and
/// `\u0000` in `jsonb`), so each becomes U+FFFD (`�`). Applied to every text
/// that comes from a workflow (errors, panic messages, retry reasons,
/// signal names, ...) before it is bound, so that such a text cannot make a
/// write fail (and the run be executed again and again).
pub(in crate::store::postgres) fn scrub(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// `value` as JSON text for a `jsonb` (or JSON in `text`) column, with every
/// NUL character in its strings (and keys) replaced as by [`scrub`].
pub(in crate::store::postgres) fn to_json<T: serde::Serialize + ?Sized>(
    value: &T,
) -> Result<String, Error> {
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
pub(in crate::store::postgres) fn to_u64(v: i64, what: &str) -> Result<u64, Error> {
    crate::store::sql::to_u64(v, what).map_err(corrupt)
}
