//! Every iterator the body takes from a local goes through the runtime's
//! order probe, so that a `HashMap`/`HashSet` iterates in one canonical order
//! on the uninterrupted path and after any resume (a rebuilt hash collection
//! has another seed, and would iterate in another order).
//!
//! `x.iter()`, `x.keys()`, `x.values()`, `x.drain()`, ... (no arguments, `x`
//! a local or a field of one) become
//! `{ let probe = order_probe(&x); (&&probe).in_canonical_order(x.iter()) }`,
//! and the iterable of a `for` loop without a site that is such a place
//! (`for k in &map`) is wrapped the same way. The probe picks by the
//! collection's type: hash-ordered collections of serializable items are
//! sorted by their items' postcard bytes, everything else is left as it is
//! (see the runtime's `iteration` module). `for` loops with a site inside are
//! lowered by `loops` (their iterable is re-evaluated on resume, with its own
//! probe), and macro arguments are token streams left alone: what they
//! iterate counts as observed (`analyse::order`).
//!
//! This runs once over the whole body, after sites are numbered and before
//! lowering, so both paths of the generated code iterate alike.

use proc_macro2::Span;
use quote::quote;
use syn::visit_mut::{self, VisitMut};
use syn::{Expr, Ident};

use crate::analyse::order::{ITERATING, PROBE};
use crate::analyse::syntax::strip_parens;
use crate::sites;

/// Rewrites the body's iterators (see the module docs).
pub(crate) fn canonical_iteration(block: &mut syn::Block, ctx: Option<&Ident>) {
    Rewriter { ctx }.visit_block_mut(block);
}

struct Rewriter<'a> {
    ctx: Option<&'a Ident>,
}

impl Rewriter<'_> {
    /// A local (not `ctx`), or a field, index or dereference of one.
    fn is_local_place(&self, expr: &Expr) -> bool {
        match strip_parens(expr) {
            Expr::Path(p) => {
                p.qself.is_none()
                    && p.path
                        .get_ident()
                        .is_some_and(|i| self.ctx != Some(i) && i != "self")
            }
            Expr::Field(f) => self.is_local_place(&f.base),
            Expr::Index(i) => self.is_local_place(&i.expr),
            Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => self.is_local_place(&u.expr),
            _ => false,
        }
    }
}

/// `{ probe(&place); (&&probe).in_canonical_order(iter) }`
fn wrap(place: &Expr, iter: &Expr) -> Expr {
    let rt = quote!(::checkpoint_runtime::__private);
    let probe = Ident::new(PROBE, Span::mixed_site());
    syn::parse_quote! {{
        #[allow(unused_imports)]
        use #rt::{CanonicalIfHashed as _, KeepsOrder as _};
        let #probe = #rt::order_probe(&#place);
        (&&#probe).in_canonical_order(#iter)
    }}
}

impl VisitMut for Rewriter<'_> {
    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        match expr {
            Expr::MethodCall(m)
                if m.args.is_empty()
                    && ITERATING.contains(&m.method.to_string().as_str())
                    && self.is_local_place(&m.receiver) =>
            {
                // Index expressions inside the place may hold iterators too.
                visit_mut::visit_expr_mut(self, &mut m.receiver);
                let place = (*m.receiver).clone();
                let call = expr.clone();
                *expr = wrap(&place, &call);
            }
            Expr::ForLoop(f) => {
                if sites::sites_in_block(&f.body).is_some() {
                    // Lowered by `loops`, iterable and all.
                    self.visit_block_mut(&mut f.body);
                    return;
                }
                let place = match strip_parens(&f.expr) {
                    Expr::Reference(r) if self.is_local_place(&r.expr) => Some((*r.expr).clone()),
                    e if self.is_local_place(e) => Some(e.clone()),
                    _ => None,
                };
                match place {
                    Some(place) => {
                        let iterable = (*f.expr).clone();
                        *f.expr = wrap(&place, &iterable);
                    }
                    None => self.visit_expr_mut(&mut f.expr),
                }
                self.visit_block_mut(&mut f.body);
            }
            _ => visit_mut::visit_expr_mut(self, expr),
        }
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;

    fn rewritten(body: proc_macro2::TokenStream) -> String {
        let mut block: syn::Block = syn::parse2(quote!({ #body })).expect("parses");
        let ctx = Ident::new("ctx", Span::call_site());
        sites::number_sites(&mut block, Some(&ctx)).expect("sites");
        canonical_iteration(&mut block, Some(&ctx));
        block.to_token_stream().to_string()
    }

    #[test]
    fn iterators_of_locals_go_through_the_probe() {
        let out = rewritten(quote! {
            let first = set.iter().next();
            let ks: Vec<_> = state.map.keys().cloned().collect();
            for k in &map { log(k); }
            let n = v.len();
            ctx.resource::<R>().iter();
        });
        assert_eq!(out.matches("in_canonical_order").count(), 3, "{out}");
        assert!(out.contains("order_probe (& set)"), "{out}");
        assert!(out.contains("order_probe (& state . map)"), "{out}");
        assert!(out.contains("order_probe (& map)"), "{out}");
        assert!(!out.contains("order_probe (& ctx"), "{out}");
    }

    #[test]
    fn loops_with_a_site_are_left_to_lowering() {
        let out = rewritten(quote! {
            for (k, v) in map.iter() { checkpoint!(); }
        });
        assert!(!out.contains("in_canonical_order"), "{out}");
    }
}
