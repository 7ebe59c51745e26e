//! What both SQL backends share: the run row ([`run_row`]) and the value
//! and time conversions between records and columns. Each backend binds and
//! reads columns its own way; what a column holds is decided here, once.

pub(crate) mod run_row;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::Error;

/// `t` as nanoseconds since the Unix epoch, as the durable stores keep
/// times (saturating; negative before the epoch).
pub(crate) fn ts(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos())
            .map(|n| -n)
            .unwrap_or(i64::MIN),
    }
}

/// The inverse of [`ts`].
pub(crate) fn from_ts(n: i64) -> SystemTime {
    let d = Duration::from_nanos(n.unsigned_abs());
    let t = if n >= 0 {
        UNIX_EPOCH.checked_add(d)
    } else {
        UNIX_EPOCH.checked_sub(d)
    };
    t.unwrap_or(UNIX_EPOCH)
}

/// `now + d` in [`ts`] units, saturating.
pub(crate) fn ts_after(now: SystemTime, d: Duration) -> i64 {
    ts(now).saturating_add(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// A stored value that does not make sense (each backend reports it as a
/// corrupt database, in its own words).
#[derive(Debug)]
pub(crate) struct Corrupt(pub String);

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `v` as a signed column value.
pub(crate) fn to_i64(v: u64, what: &str) -> Result<i64, Error> {
    i64::try_from(v).map_err(|_| Error::internal(format!("{what} {v} is too large")))
}

/// A signed column value read back as `u64`.
pub(crate) fn to_u64(v: i64, what: &str) -> Result<u64, Corrupt> {
    u64::try_from(v).map_err(|_| Corrupt(format!("negative {what} {v}")))
}

/// `v` as JSON text.
pub(crate) fn to_json<T: Serialize + ?Sized>(v: &T) -> Result<String, Error> {
    serde_json::to_string(v)
        .map_err(|e| Error::internal(format!("cannot encode for the store: {e}")))
}
