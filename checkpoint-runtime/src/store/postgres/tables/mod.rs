//! Table-level SQL of the PostgreSQL backend: one module per table, each
//! reading and writing its rows inside the caller's transaction ([`Cx`](super::conn::Cx)).
//! They never import each other; the operations above them ([`ops`](super::ops))
//! combine them into the store's transactions.

pub(super) mod checkpoints;
pub(super) mod history;
pub(super) mod runs;
pub(super) mod signals;
