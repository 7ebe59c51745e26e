//! Deferred locals: `let outcome;` assigned later (in branches, after a
//! checkpoint).
//!
//! Such a local may be uninitialised at a checkpoint, so it cannot travel
//! through the tuple a split hands its locals over in. Instead its
//! declaration moves to the top of its block. Until the statements before a
//! split definitely assign it, no site saves it; from that split on it is
//! saved at every site, and the split's resume path assigns it from the
//! checkpoint. rustc's definite-initialisation check of the generated code
//! then proves each path reads it only once assigned.

use proc_macro2::TokenStream;
use quote::quote;
use syn::visit::Visit;
use syn::{Expr, Ident, Pat, Stmt, Type};

use crate::names::{free_in_stmts, pat_names};

/// A hoisted declaration.
pub(crate) struct DeferredLocal {
    pub ident: Ident,
    /// Assigned a borrowed value (`x = "senior"`, `x = &v`) later in the
    /// block: a reference, which cannot be saved.
    pub borrowed: bool,
    mutable: bool,
    ty: Option<Type>,
    attrs: Vec<syn::Attribute>,
}

impl DeferredLocal {
    /// `let mut x: T;` at the top of the block. Always `mut`: a resumed site
    /// assigns it, possibly inside a loop (rustc cannot tell that resuming
    /// happens once).
    pub fn declaration(&self) -> TokenStream {
        let ident = &self.ident;
        let attrs = self.attrs.iter().filter(|a| !crate::migrate::is_migrate(a));
        let ty = self.ty.as_ref().map(|t| quote!(: #t));
        let lint = (!self.mutable).then(|| quote!(#[allow(unused_mut)]));
        quote!(#(#attrs)* #lint let mut #ident #ty;)
    }
}

impl DeferredLocal {
    /// Its `#[migrate(..)]`.
    pub fn migration(&self) -> Option<crate::migrate::Migration> {
        let mut m = crate::migrate::of_local(&self.attrs, &Pat::Verbatim(TokenStream::new()))?;
        m.ty = self.ty.clone();
        Some(m)
    }
}

/// A block's statements with the deferred declarations taken out.
pub(crate) struct Hoisted {
    pub locals: Vec<DeferredLocal>,
    pub stmts: Vec<Stmt>,
}

/// Finds the `let`s of `stmts` that are deferred: a plain name (`x`, `mut
/// x`, `x: T`) without initialiser, the name neither declared nor used
/// earlier in the block (so moving the declaration up changes nothing).
pub(crate) fn hoist(stmts: &[Stmt]) -> Hoisted {
    let mut locals = Vec::new();
    let mut out = Vec::with_capacity(stmts.len());
    for (i, stmt) in stmts.iter().enumerate() {
        let Some(mut d) = deferrable(stmt, &stmts[..i]) else {
            out.push(stmt.clone());
            continue;
        };
        let owned_type =
            d.ty.as_ref()
                .is_some_and(|t| !matches!(t, Type::Reference(_)));
        d.borrowed = !owned_type && assigned_a_borrow(&d.ident.to_string(), &stmts[i + 1..]);
        locals.push(d);
    }
    Hoisted { locals, stmts: out }
}

fn deferrable(stmt: &Stmt, before: &[Stmt]) -> Option<DeferredLocal> {
    let Stmt::Local(local) = stmt else {
        return None;
    };
    if local.attrs.iter().any(|a| a.path().is_ident("transient")) {
        return None;
    }
    let (pi, ty) = match &local.pat {
        Pat::Ident(pi) => (pi, None),
        Pat::Type(pt) => match &*pt.pat {
            Pat::Ident(pi) => (pi, Some((*pt.ty).clone())),
            _ => return None,
        },
        _ => return None,
    };
    if pi.by_ref.is_some() || pi.subpat.is_some() {
        return None;
    }
    let name = pi.ident.to_string();
    if local.init.is_some() {
        return None;
    }
    let declares = |s: &Stmt| match s {
        Stmt::Local(l) => pat_names(&l.pat).contains(&name),
        _ => false,
    };
    // Declared earlier in the block: moving this declaration above that one
    // would change which of the two later code means. (One declared later
    // shadows the hoisted one from there on, as it shadowed the original.)
    if before.iter().any(declares) {
        return None;
    }
    if free_in_stmts(before).contains(&name) {
        return None;
    }
    Some(DeferredLocal {
        ident: pi.ident.clone(),
        borrowed: false,
        mutable: pi.mutability.is_some(),
        ty,
        attrs: local.attrs.clone(),
    })
}

/// `#[transient]` closures that read nothing declared before them in the
/// block: moved to the block's top, where one definition serves the normal
/// and the resume path (two definitions would be two closure types).
/// Returns them and the remaining statements.
pub(crate) fn hoist_transient_closures(stmts: &[Stmt]) -> (Vec<Stmt>, Vec<Stmt>) {
    let mut closures = Vec::new();
    let mut rest = Vec::with_capacity(stmts.len());
    for (i, stmt) in stmts.iter().enumerate() {
        let hoistable = match stmt {
            Stmt::Local(l) => {
                let is_closure = l.init.as_ref().is_some_and(|init| {
                    init.diverge.is_none()
                        && matches!(super::syntax::strip_parens(&init.expr), Expr::Closure(_))
                });
                let transient = l.attrs.iter().any(|a| a.path().is_ident("transient"));
                let reads = l
                    .init
                    .as_ref()
                    .map(|init| crate::names::free_in_expr(&init.expr))
                    .unwrap_or_default();
                let names = pat_names(&l.pat);
                let declared_before: crate::names::NameSet = stmts[..i]
                    .iter()
                    .filter_map(|s| match s {
                        Stmt::Local(l) => Some(pat_names(&l.pat)),
                        _ => None,
                    })
                    .flatten()
                    .collect();
                let declared_again = stmts.iter().enumerate().any(|(k, s)| {
                    k != i
                        && matches!(s, Stmt::Local(o) if pat_names(&o.pat).iter().any(|n| names.contains(n)))
                });
                transient
                    && is_closure
                    && !declared_again
                    && !free_in_stmts(&stmts[..i]).iter().any(|n| names.contains(n))
                    // What it captures is neither declared nor touched
                    // before it in the block: built earlier, it captures the
                    // same values.
                    && !reads.iter().any(|n| declared_before.contains(n))
                    && !reads.iter().any(|n| free_in_stmts(&stmts[..i]).contains(n))
            }
            _ => false,
        };
        if hoistable {
            closures.push(stmt.clone());
        } else {
            rest.push(stmt.clone());
        }
    }
    (closures, rest)
}

/// Whether every path through `stmts` assigns `name` (`name = ..`) or
/// leaves (`return`, `break`, `continue`, `panic!`). Conservative: `false`
/// when unsure (loops, assignments inside larger expressions).
pub(crate) fn definitely_assigns(name: &str, stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Expr(e, _) => expr_assigns(name, e),
        Stmt::Macro(m) => diverging_macro(&m.mac),
        Stmt::Local(l) => l.init.as_ref().is_some_and(|i| expr_assigns(name, &i.expr)),
        Stmt::Item(_) => false,
    })
}

fn expr_assigns(name: &str, expr: &Expr) -> bool {
    match super::syntax::strip_parens(expr) {
        Expr::Assign(a) => matches!(&*a.left, Expr::Path(p) if p.path.is_ident(name)),
        Expr::Block(b) => definitely_assigns(name, &b.block.stmts),
        Expr::If(i) => {
            definitely_assigns(name, &i.then_branch.stmts)
                && i.else_branch
                    .as_ref()
                    .is_some_and(|(_, e)| expr_assigns(name, e))
        }
        Expr::Match(m) => !m.arms.is_empty() && m.arms.iter().all(|a| expr_assigns(name, &a.body)),
        Expr::Return(_) | Expr::Break(_) | Expr::Continue(_) => true,
        Expr::Macro(m) => diverging_macro(&m.mac),
        _ => false,
    }
}

fn diverging_macro(mac: &syn::Macro) -> bool {
    mac.path.segments.last().is_some_and(|s| {
        ["panic", "unreachable", "todo", "unimplemented"].contains(&s.ident.to_string().as_str())
    })
}

/// Whether `stmts` assign `name` as a whole (`name = ..`) anywhere outside
/// closures.
pub(crate) fn assigned_in(name: &str, stmts: &[Stmt]) -> bool {
    find_assignment(name, stmts, |_| true)
}

/// Whether `stmts` assign `name` a borrowed value (a string literal, `&v`,
/// `.as_str()`: see `syntax::yields_borrowed_value`).
pub(crate) fn assigned_a_borrow(name: &str, stmts: &[Stmt]) -> bool {
    find_assignment(name, stmts, super::syntax::yields_borrowed_value)
}

/// Whether `stmts` assign `name` a value for which `which` holds, anywhere
/// outside closures.
fn find_assignment(name: &str, stmts: &[Stmt], which: fn(&Expr) -> bool) -> bool {
    struct Finder<'a> {
        name: &'a str,
        which: fn(&Expr) -> bool,
        found: bool,
    }
    impl<'ast> Visit<'ast> for Finder<'_> {
        fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
            if let Expr::Path(p) = &*a.left {
                self.found |= p.path.is_ident(self.name) && (self.which)(&a.right);
            }
            syn::visit::visit_expr_assign(self, a);
        }
        fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {}
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    let mut f = Finder {
        name,
        which,
        found: false,
    };
    for s in stmts {
        f.visit_stmt(s);
    }
    f.found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hoisted(src: TokenStream) -> Vec<String> {
        let b: syn::Block = syn::parse2(quote!({ #src })).unwrap();
        hoist(&b.stmts)
            .locals
            .iter()
            .map(|d| d.ident.to_string())
            .collect()
    }

    #[test]
    fn uninitialised_locals_are_deferred() {
        let got = hoisted(quote! {
            let outcome;
            let fee: u32;
            let mut state = S::A;
            let mut turns = 0;
            let tag = "x";
            loop { turns += 1; state = next(state); }
        });
        assert_eq!(got, vec!["outcome", "fee"]);
    }

    #[test]
    fn definite_assignment_needs_every_branch() {
        let b: syn::Block = syn::parse2(quote!({
            let y = 1;
            if c {
                d = 1;
            } else if e {
                d = 2;
            } else {
                return;
            }
        }))
        .unwrap();
        assert!(definitely_assigns("d", &b.stmts));
        let b: syn::Block = syn::parse2(quote!({
            if c {
                d = 1;
            }
        }))
        .unwrap();
        assert!(!definitely_assigns("d", &b.stmts));
        let b: syn::Block = syn::parse2(quote!({
            match k {
                A => d = 1,
                B => panic!("no"),
            }
        }))
        .unwrap();
        assert!(definitely_assigns("d", &b.stmts));
        let b: syn::Block = syn::parse2(quote!({
            loop {
                d = 1;
                break;
            }
        }))
        .unwrap();
        assert!(
            !definitely_assigns("d", &b.stmts),
            "loops are not looked into"
        );
    }

    #[test]
    fn a_transient_closure_is_hoisted_only_if_what_it_captures_is_untouched_before_it() {
        let b: syn::Block = syn::parse2(quote!({
            x += 1;
            #[transient]
            let late = move || x * 2;
            #[transient]
            let pure = |a: u32| a * 3;
            checkpoint!();
        }))
        .unwrap();
        let (hoisted, _) = hoist_transient_closures(&b.stmts);
        let names: Vec<String> = hoisted
            .iter()
            .map(|s| match s {
                Stmt::Local(l) => quote!(#l).to_string(),
                _ => String::new(),
            })
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].contains("pure"), "{names:?}");
    }

    #[test]
    fn shadowing_and_patterns_are_left_alone() {
        let got = hoisted(quote! {
            let mut x = 1;
            let mut x = x + 1;
            let (mut a, b) = pair();
            let Some(mut c) = opt() else { return };
            let mut y = 0;
            use_it(y);
            a = 2; c = 3; x = 4;
        });
        assert!(got.is_empty(), "{got:?}");
    }
}
