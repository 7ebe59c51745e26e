//! Rewrites of the body that the analysis plans on, before anything is
//! lowered: the statements a branch's carried bindings are unpacked by, and
//! the re-match after the sites of an arm of a re-derived `match &mut ..`.
//! They add statements that the splits then see like the user's own (an
//! unpacked binding is handed over like any `let`), so they happen here, and
//! lowering writes out what the plan holds.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Block, Expr, Ident};

use crate::hidden::{frame_ident, rt};
use crate::names::{free_in_stmts, NameSet};

/// `match &mut x { Pat { a, b } => { *a += 1; checkpoint!(); b.push(..) } }`:
/// the checkpoint saves `x` while `a` and `b` borrow it mutably and are used
/// after it, which rustc refuses (E0502). An arm of a re-derived `match` on
/// a `&mut` borrow, without a guard, gets its statements after each
/// top-level site that still read its bindings wrapped in the same `match`
/// again, so that the old borrows end before the site and the rest of the
/// arm uses fresh ones, on the uninterrupted path and after a resume alike
/// (nothing between the site and the re-match can change what the pattern
/// matches while the old bindings are live, so it matches again; if it does
/// not, the run halts as diverged rather than go on).
pub(crate) fn rebind_after_sites(m: &syn::ExprMatch) -> syn::ExprMatch {
    let mut m = m.clone();
    if !matches!(crate::analyse::syntax::strip_parens(&m.expr), Expr::Reference(r) if r.mutability.is_some())
    {
        return m;
    }
    let scrutinee = (*m.expr).clone();
    for arm in &mut m.arms {
        if arm.guard.is_some() {
            continue;
        }
        let bound: NameSet = crate::names::pat_names(&arm.pat);
        if bound.is_empty() {
            continue;
        }
        let mut block: Block = match &*arm.body {
            Expr::Block(b) if b.label.is_none() => b.block.clone(),
            _ => continue,
        };
        if rebind_block(&mut block, &arm.pat, &scrutinee, &bound) {
            *arm.body = Expr::Block(syn::ExprBlock {
                attrs: Vec::new(),
                label: None,
                block,
            });
        }
    }
    m
}

/// Wraps what follows the first top-level site of `block` that reads
/// `bound` in `match scrutinee { pat => { .. } }`, recursively; whether
/// anything changed.
fn rebind_block(block: &mut Block, pat: &syn::Pat, scrutinee: &Expr, bound: &NameSet) -> bool {
    let Some(k) = block.stmts.iter().enumerate().position(|(k, s)| {
        crate::sites::sites_in_stmt(s).is_some()
            && free_in_stmts(&block.stmts[k + 1..])
                .iter()
                .any(|n| bound.contains(n))
    }) else {
        return false;
    };
    let rest = block.stmts.split_off(k + 1);
    let mut inner = Block {
        brace_token: Default::default(),
        stmts: rest,
    };
    rebind_block(&mut inner, pat, scrutinee, bound);
    let (frame, rt) = (frame_ident(), rt());
    let rematch: Expr = syn::parse_quote! {
        match #scrutinee {
            #pat => #inner,
            #[allow(unreachable_patterns)]
            _ => match #frame.halt(#rt::diverged(
                &#frame,
                "the `match` around the site no longer matched its arm's pattern after the checkpoint",
            )).await {},
        }
    };
    block.stmts.push(syn::Stmt::Expr(rematch, None));
    true
}

/// `let (a, mut b) = <carried bindings>;`: the first statement of a branch
/// body whose bindings are carried as `Some(tuple)` on the normal path (the
/// resume path skips it, along with the rest of the body before the site).
pub(crate) fn unpack_carried(carried: &Ident, pats: &[TokenStream]) -> TokenStream {
    let frame = frame_ident();
    let rt = rt();
    quote! {
        let (#(#pats,)*) = match #carried {
            ::core::option::Option::Some(carried) => carried,
            ::core::option::Option::None => match #frame.halt(#rt::diverged(
                &#frame,
                "a branch's bindings are missing on the normal path",
            )).await {},
        };
    }
}
