//! The generator's model of the scope it is generating into: the visible
//! locals and their types, the enclosing loops, the collections borrowed
//! by an enclosing loop, and the checkpoint budget multiplier.
//!
//! The generator consults it before every choice so that it only builds
//! programs that type-check and pass the borrow checker (no read of a
//! mutably borrowed collection, no `break` out of a hash loop, ...);
//! kept apart from the choices themselves (`generator.rs`, `compound.rs`).

use std::collections::BTreeSet;

use super::ast::Coll;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ty {
    Int,
    Str,
    Job,
    Opt,
}

#[derive(Clone, Debug)]
pub(super) struct Var {
    pub(super) name: String,
    pub(super) ty: Ty,
    /// How to read it as a `u64` (Int only).
    pub(super) read: String,
    /// A plain `let mut` that may be assigned.
    pub(super) mutable: bool,
    /// Block it was declared in (moves/shadowing only there).
    pub(super) block: u32,
    /// Reading it needs this collection not to be mutably borrowed.
    pub(super) needs: Option<Coll>,
    /// Declared inside the current hash loop body (may change there).
    pub(super) local_to_hash: bool,
}

#[derive(Clone, Debug)]
pub(super) struct LoopInfo {
    pub(super) label: Option<String>,
    /// A `loop` whose `break` carries a value.
    pub(super) value: bool,
    /// `continue` would skip the state machine's assignment.
    pub(super) no_continue: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Borrow {
    Shared,
    Mut,
    GrowOnly,
}

#[derive(Clone, Debug)]
pub(super) struct Env {
    pub(super) vars: Vec<Var>,
    pub(super) loops: Vec<LoopInfo>,
    pub(super) borrows: Vec<(Coll, Borrow)>,
    /// Inside a hash loop: the effect path (loop keys and inner indices).
    pub(super) hash: Option<Vec<String>>,
    pub(super) mult: i64,
    pub(super) depth: u32,
    pub(super) block: u32,
    pub(super) no_cp: bool,
    /// Inside a state machine arm.
    pub(super) in_machine: bool,
    /// Index in `loops` of the outermost enclosing hash loop: leaving it
    /// early (`break`, or `continue` of an outer loop) would depend on the
    /// iteration order.
    pub(super) hash_loop: Option<usize>,
}

impl Env {
    pub(super) fn borrow(&self, c: Coll) -> Option<Borrow> {
        self.borrows
            .iter()
            .rev()
            .find(|(x, _)| *x == c)
            .map(|(_, b)| *b)
    }
    pub(super) fn can_read(&self, c: Coll) -> bool {
        self.borrow(c) != Some(Borrow::Mut)
    }
    pub(super) fn can_grow(&self, c: Coll) -> bool {
        matches!(self.borrow(c), None | Some(Borrow::GrowOnly))
    }
    pub(super) fn can_shrink(&self, c: Coll) -> bool {
        self.borrow(c).is_none()
    }
    pub(super) fn can_iter_mut(&self, c: Coll) -> bool {
        self.borrows.iter().all(|(x, _)| *x != c)
    }
    /// Visible variables (the last of each name).
    pub(super) fn visible(&self) -> Vec<&Var> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for v in self.vars.iter().rev() {
            if seen.insert(v.name.clone()) {
                out.push(v);
            }
        }
        out
    }
    pub(super) fn ints(&self) -> Vec<&Var> {
        self.visible()
            .into_iter()
            .filter(|v| v.ty == Ty::Int && v.needs.is_none_or(|c| self.can_read(c)))
            .collect()
    }
}
