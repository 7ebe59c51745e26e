//! The plan of a workflow body: for each site, what it saves, what is
//! re-created or re-derived on resume instead, what is refused, and why;
//! and the shape of the code around it (where each statement list is split,
//! how each loop and branch is re-entered). [`plan_body`] is the one call
//! that answers "what does site N save, and why" on a parsed body; lowering
//! (`crate::lower`) writes the plan out and decides nothing.
//!
//! A site's fields depend on everything around it (the splits it is in,
//! the loops that hold it, the branches that carry bindings to it), so the
//! plan is made by one walk over the body (`walk`, `control`) in the
//! order the code is generated, which is also the order its slots, save
//! traits and errors come out in. The plan's types are in `types`.

use syn::{Ident, Stmt};

use crate::sites::Site;

mod control;
mod types;
mod walk;

pub use types::*;

#[cfg(test)]
mod tests;

/// Plans `stmts`, the whole body (the input's `let` first), whose sites are
/// `sites`. A plan with refusals is still whole, so that it can be asked
/// why; [`BodyPlan::checked`] turns them into the compile error.
pub fn plan_body(stmts: &[Stmt], sites: &[Site], ctx: Option<&Ident>) -> BodyPlan {
    walk::Planner::new(sites, ctx).plan(stmts)
}
