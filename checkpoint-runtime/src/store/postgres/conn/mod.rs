//! Connections: the store URL and its options, a small pool of clients, the
//! per-connection statement cache, error mapping and time conversions.
//!
//! One concern per file:
//!
//! - [`target`]: the URL and this backend's own options ([`Target`]);
//! - [`connect`](mod@connect): opening one connection ([`connect()`]);
//! - [`pool`]: the pool and a connection taken from it ([`Pool`], [`Pooled`]);
//! - [`cx`]: statements on one connection, in a transaction or not ([`Cx`]);
//! - [`pipeline`]: a transaction sent in one flight ([`Pooled::pipelined`]);
//! - [`side`]: the connection of its own for lease renewals ([`Side`]);
//! - [`error`]: `tokio-postgres` errors as the runtime's;
//! - [`convert`]: values in and out of rows.
//!
//! The rest of the backend names everything through this module
//! (`super::conn::...`).

mod connect;
mod convert;
mod cx;
mod error;
mod pipeline;
mod pool;
mod side;
mod target;

pub(super) use self::connect::{connect, connect_watched};
pub(super) use self::convert::{from_ts, get, scrub, to_i64, to_json, to_u64, ts, ts_after};
pub(super) use self::cx::Cx;
pub(super) use self::error::{connect_error, corrupt, db_err, sqlstate_class};
pub(super) use self::pool::{Pool, Pooled};
pub(super) use self::side::Side;
pub(super) use self::target::{check_schema_name, quote_ident, Target};
// `Target::parse` hides the password itself; only the tests call this.
#[cfg(test)]
pub(super) use self::target::redact;
