//! Analysis: what the body's syntax says about each checkpoint site, before
//! any code is generated, as pure functions with their own tests on bodies.
//!
//! - [`split`]: where a statement list is split around its last site, which
//!   locals the code before the split hands over and how (saved, re-created,
//!   held by a placeholder), which run after the merge, which are refused;
//! - [`branches`]: the arms of `if` / `match` and whether their conditions
//!   are evaluated again on resume;
//! - [`liveness`]: whether a local is read again after a site before it is
//!   assigned (a site's continuation);
//! - [`order`]: whether the code after a site may observe a local's
//!   iteration order (refused at save for hash-ordered types);
//! - [`deferred`]: `let x;` locals, declared at the top of their block and
//!   saved once definitely assigned;
//! - [`iterables`]: what a `for` loop's iterable is (hash-ordered, written
//!   through);
//! - [`transients`]: what a `#[transient]` initialiser may read;
//! - [`syntax`]: what single expressions are (constant, pure, borrowing).
//!
//! Lowering (`crate::lower`) consumes these; nothing here emits the state
//! machine. Dependencies point one way: `names`, `sites` <- `analyse` <-
//! `lower` <- `expand`.

pub mod branches;
pub mod deferred;
pub mod iterables;
pub mod liveness;
pub mod order;
pub mod split;
pub mod syntax;
pub mod transients;
