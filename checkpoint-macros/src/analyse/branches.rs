//! `if` chains and `match`es: their arms, the bindings each arm carries, and
//! whether a condition is evaluated again on resume (re-derived) instead of
//! its bindings being saved.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Expr, Ident, Pat};

use super::syntax::{is_pure, strip_parens, yields_reference};
use crate::names::{free_in_expr, pat_bindings, NameSet, PatBinding};
use crate::sites::{self, SiteRange};

/// One arm of an `if` chain or a `match`.
pub(crate) struct Arm {
    /// What selects it: `pattern if guard` of a `match` arm, the condition
    /// of an `if` (empty for `else`).
    pub head: TokenStream,
    /// The bindings of its pattern that its body reads.
    pub carried: Vec<PatBinding>,
    /// The sites its body holds.
    pub sites: Option<SiteRange>,
    pub body: Expr,
}

/// The arms of a `match`.
pub(crate) fn match_arms(m: &syn::ExprMatch, ctx: Option<&Ident>) -> Vec<Arm> {
    m.arms
        .iter()
        .map(|a| {
            let pat = &a.pat;
            let guard = a.guard.as_ref().map(|(i, g)| quote!(#i #g));
            Arm {
                head: quote!(#pat #guard),
                carried: carried_bindings(&[&a.pat], &a.body, ctx),
                sites: sites::sites_in_expr(&a.body),
                body: (*a.body).clone(),
            }
        })
        .collect()
}

/// The arms of an `if` / `else if` / `else` chain (a synthetic empty `else`
/// when there is none).
pub(crate) fn if_arms(i: &syn::ExprIf) -> Vec<Arm> {
    let mut out = Vec::new();
    let mut cur = i;
    loop {
        let body = Expr::Block(syn::ExprBlock {
            attrs: vec![],
            label: None,
            block: cur.then_branch.clone(),
        });
        let lets = let_patterns(&cur.cond);
        let carried = carried_bindings(&lets, &body, None);
        let cond = &cur.cond;
        out.push(Arm {
            head: quote!(#cond),
            carried,
            sites: sites::sites_in_block(&cur.then_branch),
            body,
        });
        match &cur.else_branch {
            Some((_, e)) => match &**e {
                Expr::If(next) => cur = next,
                other => {
                    out.push(Arm {
                        head: TokenStream::new(),
                        carried: Vec::new(),
                        sites: sites::sites_in_expr(other),
                        body: other.clone(),
                    });
                    break;
                }
            },
            None => {
                out.push(Arm {
                    head: TokenStream::new(),
                    carried: Vec::new(),
                    sites: None,
                    body: syn::parse_quote!({}),
                });
                break;
            }
        }
    }
    out
}

pub(crate) fn if_conditions(i: &syn::ExprIf) -> Vec<&Expr> {
    let mut out = vec![&*i.cond];
    let mut cur = i;
    while let Some((_, e)) = &cur.else_branch {
        match &**e {
            Expr::If(next) => {
                out.push(&next.cond);
                cur = next;
            }
            _ => break,
        }
    }
    out
}

/// Patterns of `let` conditions in an `if` condition (`&&` chains included).
pub(crate) fn let_patterns(cond: &Expr) -> Vec<&Pat> {
    match strip_parens(cond) {
        Expr::Let(l) => vec![&l.pat],
        Expr::Binary(b) if matches!(b.op, syn::BinOp::And(_)) => {
            let mut out = let_patterns(&b.left);
            out.extend(let_patterns(&b.right));
            out
        }
        _ => Vec::new(),
    }
}

/// Bindings of `pats` that `body` reads.
pub(crate) fn carried_bindings(pats: &[&Pat], body: &Expr, ctx: Option<&Ident>) -> Vec<PatBinding> {
    let used = free_in_expr(body);
    pats.iter()
        .flat_map(|p| pat_bindings(p))
        .filter(|b| used.contains(&b.ident.to_string()) && ctx.is_none_or(|c| b.ident != *c))
        .collect()
}

/// A `match` is resumed by evaluating its scrutinee again (instead of
/// restoring the arm's bindings) when the scrutinee and guards are pure and
/// the arms bind references: the scrutinee is borrowed (`&x`, `x.as_ref()`, a
/// local holding a re-derived reference) or a pattern says `ref`. Bindings
/// that move out of an owned scrutinee are restored instead.
pub(crate) fn match_rederives(m: &syn::ExprMatch, refs: &NameSet) -> bool {
    is_pure(&m.expr)
        && m.arms
            .iter()
            .all(|a| a.guard.as_ref().is_none_or(|(_, g)| is_pure(g)))
        && (yields_reference(&m.expr, refs) || m.arms.iter().any(|a| binds_by_ref(&a.pat)))
}

/// The same for an `if let` chain: every condition pure, and every `let`
/// condition borrowing.
pub(crate) fn if_rederives(i: &syn::ExprIf, refs: &NameSet) -> bool {
    let conds = if_conditions(i);
    let mut lets = conds.iter().flat_map(|c| let_conditions(c)).peekable();
    lets.peek().is_some()
        && conds.iter().all(|c| is_pure(c))
        && lets.all(|l| yields_reference(&l.expr, refs) || binds_by_ref(&l.pat))
}

pub(crate) fn let_conditions(cond: &Expr) -> Vec<&syn::ExprLet> {
    match strip_parens(cond) {
        Expr::Let(l) => vec![l],
        Expr::Binary(b) if matches!(b.op, syn::BinOp::And(_)) => {
            let mut out = let_conditions(&b.left);
            out.extend(let_conditions(&b.right));
            out
        }
        _ => Vec::new(),
    }
}

pub(crate) fn binds_by_ref(pat: &Pat) -> bool {
    pat_bindings(pat).iter().any(|b| b.by_ref)
}
