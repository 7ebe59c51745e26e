//! Analysis: what the body's syntax says about each checkpoint site, before
//! any code is generated, as pure functions with their own tests on bodies.
//!
//! - [`plan`]: the one entry point, [`plan::plan_body`]: per site, what is
//!   saved, re-created, re-derived and refused, and why, and the shape of
//!   the splits, loops and branches around it; built from the modules below;
//! - [`rewrite`] and [`scrutinee`]: rewrites the plan is made on (a
//!   suspension call as a scrutinee becomes a `let`; carried bindings are
//!   unpacked first in their branch);
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
//! Lowering (`crate::lower`) consumes the plan and calls nothing here;
//! nothing here emits the state machine. Dependencies point one way:
//! `errors`, `hidden`, `names`, `sites` <- `analyse` <- `lower` <- `expand`.

pub mod branches;
pub mod deferred;
pub mod iterables;
pub mod liveness;
pub mod order;
pub mod plan;
pub mod rewrite;
pub mod scrutinee;
pub mod split;
pub mod syntax;
pub mod transients;
