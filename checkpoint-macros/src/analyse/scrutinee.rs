//! Suspension calls as scrutinees (`match ctx.wait_for_timeout(..).await {..}`,
//! `if let Some(x) = ctx.wait_for_timeout(..).await {..}`, `while let ..`):
//! rewritten so the call is the initialiser of a `let` of its own, a shape
//! the lowering resumes at, before the `match` / `if` that reads it.

use proc_macro2::Span;
use syn::{Block, Expr, Ident, Pat, Stmt};

use crate::analyse::syntax::strip_parens;

fn scrutinee_ident() -> Ident {
    Ident::new("__cp_scrutinee", Span::mixed_site())
}

/// The expression an `if` condition tests: `e` of `if let P = e` or of `if e`.
pub(crate) fn scrutinee_of_if(cond: &Expr) -> &Expr {
    match strip_parens(cond) {
        Expr::Let(l) => &l.expr,
        other => other,
    }
}

/// `let __cp_scrutinee = <expr>;`
fn let_scrutinee(expr: &Expr) -> Stmt {
    let ident = scrutinee_ident();
    Stmt::Local(syn::Local {
        attrs: Vec::new(),
        let_token: Default::default(),
        pat: Pat::Ident(syn::PatIdent {
            attrs: Vec::new(),
            by_ref: None,
            mutability: None,
            ident,
            subpat: None,
        }),
        init: Some(syn::LocalInit {
            eq_token: Default::default(),
            expr: Box::new(expr.clone()),
            diverge: None,
        }),
        semi_token: Default::default(),
    })
}

fn scrutinee_path() -> Expr {
    let ident = scrutinee_ident();
    syn::parse_quote!(#ident)
}

fn block(stmts: Vec<Stmt>) -> Block {
    Block {
        brace_token: Default::default(),
        stmts,
    }
}

fn block_expr(stmts: Vec<Stmt>) -> Expr {
    Expr::Block(syn::ExprBlock {
        attrs: Vec::new(),
        label: None,
        block: block(stmts),
    })
}

/// `match <site> { .. }` → `{ let s = <site>; match s { .. } }`
pub(crate) fn desugar_match(m: &syn::ExprMatch) -> Expr {
    let mut m = m.clone();
    let first = let_scrutinee(&m.expr);
    m.expr = Box::new(scrutinee_path());
    block_expr(vec![first, Stmt::Expr(Expr::Match(m), None)])
}

/// `if let P = <site> { .. } else { .. }` → `{ let s = <site>; if let P = s { .. } else { .. } }`,
/// and the same for `if <site> { .. }`.
pub(crate) fn desugar_if(i: &syn::ExprIf) -> Expr {
    let mut i = i.clone();
    let first;
    match &mut *i.cond {
        Expr::Let(l) => {
            first = let_scrutinee(&l.expr);
            *l.expr = scrutinee_path();
        }
        cond => {
            first = let_scrutinee(cond);
            *cond = scrutinee_path();
        }
    }
    block_expr(vec![first, Stmt::Expr(Expr::If(i), None)])
}

/// `'l: while let P = <site> { B }` → `'l: loop { let s = <site>; match s { P => B, _ => break } }`,
/// and `while <site> { B }` → `'l: loop { let s = <site>; if !s { break } B }`.
pub(crate) fn desugar_while(w: &syn::ExprWhile) -> Expr {
    let s = scrutinee_path();
    let body = &w.body;
    let mut stmts = Vec::new();
    match strip_parens(&w.cond) {
        Expr::Let(l) => {
            stmts.push(let_scrutinee(&l.expr));
            let pat = &l.pat;
            let m: Expr = syn::parse_quote! {
                #[allow(unreachable_patterns)]
                match #s { #pat => #body, _ => break }
            };
            stmts.push(Stmt::Expr(m, None));
        }
        cond => {
            stmts.push(let_scrutinee(cond));
            stmts.push(syn::parse_quote!(if !#s { break; }));
            stmts.extend(body.stmts.iter().cloned());
        }
    }
    Expr::Loop(syn::ExprLoop {
        attrs: Vec::new(),
        label: w.label.clone(),
        loop_token: Default::default(),
        body: block(stmts),
    })
}
