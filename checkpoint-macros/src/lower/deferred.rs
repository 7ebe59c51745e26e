//! Deferred locals: `let outcome;` assigned later (in branches, after a
//! checkpoint).
//!
//! Such a local may be uninitialised at a checkpoint, so it cannot travel
//! through the tuple a split hands its locals over in. Instead its
//! declaration moves to the top of its block, every site saves it only where
//! it is live (`liveness`), and a resumed site assigns it from the
//! checkpoint. rustc's definite-initialisation check of the generated code
//! then proves each path reads it only once assigned.

use proc_macro2::TokenStream;
use quote::quote;
use syn::visit::Visit;
use syn::{Expr, Ident, Pat, Stmt, Type};

use crate::names::{free_in_stmts, pat_names};

/// A hoisted declaration.
pub(super) struct DeferredLocal {
    pub ident: Ident,
    mutable: bool,
    ty: Option<Type>,
    attrs: Vec<syn::Attribute>,
}

impl DeferredLocal {
    /// `let mut x: T;` at the top of the block. Always `mut`: a resumed site
    /// assigns it, possibly inside a loop (rustc cannot tell that resuming
    /// happens once).
    pub fn declaration(&self) -> TokenStream {
        let (ident, attrs) = (&self.ident, &self.attrs);
        let ty = self.ty.as_ref().map(|t| quote!(: #t));
        let lint = (!self.mutable).then(|| quote!(#[allow(unused_mut)]));
        quote!(#(#attrs)* #lint let mut #ident #ty;)
    }
}

/// A block's statements with the deferred declarations taken out.
pub(super) struct Hoisted {
    pub locals: Vec<DeferredLocal>,
    pub stmts: Vec<Stmt>,
}

/// Finds the `let`s of `stmts` that are deferred: a plain name (`x`, `mut
/// x`, `x: T`) without initialiser, the name neither declared again nor used
/// earlier in the block (so moving the declaration up changes nothing).
pub(super) fn hoist(stmts: &[Stmt]) -> Hoisted {
    let mut locals = Vec::new();
    let mut out = Vec::with_capacity(stmts.len());
    for (i, stmt) in stmts.iter().enumerate() {
        let Some(d) = deferrable(stmt, &stmts[..i], &stmts[i + 1..]) else {
            out.push(stmt.clone());
            continue;
        };
        locals.push(d);
    }
    Hoisted { locals, stmts: out }
}

fn deferrable(stmt: &Stmt, before: &[Stmt], after: &[Stmt]) -> Option<DeferredLocal> {
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
    // Declared again in the block: which one a later `x = ..` assigns is
    // more than this needs to know.
    if before.iter().any(declares) || after.iter().any(declares) {
        return None;
    }
    if free_in_stmts(before).contains(&name) {
        return None;
    }
    Some(DeferredLocal {
        ident: pi.ident.clone(),
        mutable: pi.mutability.is_some(),
        ty,
        attrs: local.attrs.clone(),
    })
}

/// Whether `stmts` assign `name` as a whole (`name = ..`) anywhere outside
/// closures.
pub(super) fn assigned_in(name: &str, stmts: &[Stmt]) -> bool {
    struct Finder<'a> {
        name: &'a str,
        found: bool,
    }
    impl<'ast> Visit<'ast> for Finder<'_> {
        fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
            if let Expr::Path(p) = &*a.left {
                self.found |= p.path.is_ident(self.name);
            }
            syn::visit::visit_expr_assign(self, a);
        }
        fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {}
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    let mut f = Finder { name, found: false };
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
