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

/// How a resumed run re-enters an `if` chain or a `match` around its site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reentry {
    /// The head is evaluated before the split on the normal path; on resume
    /// the arm holding the site is entered with its bindings restored from
    /// the checkpoint.
    Restore,
    /// The head is pure and borrows: it is evaluated after the merge on both
    /// paths, which re-derives the arm's reference bindings on resume.
    Rederive,
    /// The head borrows a local that an arm with a site moves (`match &reply
    /// { .. => { messages.push(reply); checkpoint!(); .. } }`): on resume the
    /// local is gone, so the head cannot be evaluated again, and evaluated
    /// before the split its borrow would cross the merge. It is evaluated
    /// after the merge on the normal path only; on resume the arm holding
    /// the site is entered directly, its bindings unbound (what it reads
    /// after the site is saved there, and a reference is refused).
    BySite,
}

/// How a `match` is re-entered. Re-derived when the scrutinee and guards are
/// pure and the arms bind references: the scrutinee is borrowed (`&x`,
/// `x.as_ref()`, a local holding a re-derived reference) or a pattern says
/// `ref`; entered by site instead when an arm with a site moves a local the
/// scrutinee reads. Bindings that move out of an owned scrutinee are
/// restored.
pub(crate) fn match_reentry(m: &syn::ExprMatch, refs: &NameSet) -> Reentry {
    let borrows = is_pure(&m.expr)
        && m.arms
            .iter()
            .all(|a| a.guard.as_ref().is_none_or(|(_, g)| is_pure(g)))
        && (yields_reference(&m.expr, refs) || m.arms.iter().any(|a| binds_by_ref(&a.pat)));
    if !borrows {
        return Reentry::Restore;
    }
    let read = free_in_expr(&m.expr);
    let moves_scrutinee = m.arms.iter().any(|a| {
        sites::sites_in_expr(&a.body).is_some()
            && read.iter().any(|n| super::syntax::moves_local(n, &a.body))
    });
    if moves_scrutinee {
        Reentry::BySite
    } else {
        Reentry::Rederive
    }
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
