//! Loops: `while` and `while let` re-enter their body; `for` re-evaluates its
//! iterable and skips the items already taken.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::spanned::Spanned;
use syn::{Expr, Ident};

use super::branches::{carried_bindings, unpack_carried};
use super::syntax::{strip_parens, yields_reference};
use super::{binding_pat, frame_ident, rt, Lowerer, Saved, Scope, Source, Split};
use crate::names::{self, free_in_expr, pat_bindings, pat_names, NameSet, PatBinding};
use crate::sites::{self, SiteRange};

impl Lowerer<'_> {
    pub(super) fn lower_while(&mut self, w: &syn::ExprWhile, scope: &Scope) -> Split {
        let unit = quote!(());
        if let Some(r) = sites::sites_in_expr(&w.cond) {
            return self.misplaced(r, w.cond.span());
        }
        let label = &w.label;
        let Some(range) = sites::sites_in_block(&w.body) else {
            return self.misplaced(SiteRange { first: 0, last: 0 }, w.span());
        };
        let resuming = self.resuming_into(range);
        let body_code;
        let head_code;
        match strip_parens(&w.cond) {
            Expr::Let(l) => {
                let carried = carried_bindings(
                    &[&l.pat],
                    &Expr::Block(syn::ExprBlock {
                        attrs: vec![],
                        label: None,
                        block: w.body.clone(),
                    }),
                    self.ctx,
                );
                // As for `match` arms: the bindings are carried as
                // `Some(tuple)` and become the body's first locals, saved only
                // if still needed after its checkpoints.
                let carried_ident = Ident::new("__cp_carried", Span::mixed_site());
                let names: Vec<&Ident> = carried.iter().map(|b| &b.ident).collect();
                let pats: Vec<TokenStream> = carried.iter().map(binding_pat).collect();
                let (pat, e) = (&l.pat, &l.expr);
                head_code = quote! {
                    #[allow(unreachable_patterns)]
                    let #carried_ident = if !#resuming {
                        match #e { #pat => ::core::option::Option::Some((#(#names,)*)), _ => break }
                    } else {
                        ::core::option::Option::None
                    };
                };
                let mut body = w.body.clone();
                match syn::parse2::<syn::Stmt>(unpack_carried(&carried_ident, &pats)) {
                    Ok(stmt) => body.stmts.insert(0, stmt),
                    Err(e) => self.errors.add(e),
                }
                body_code = self.lower_block(&body, scope);
            }
            cond => {
                head_code = quote!(if !#resuming { if !(#cond) { break; } });
                body_code = self.lower_block(&w.body, scope);
            }
        }
        Split {
            items: TokenStream::new(),
            normal_head: unit.clone(),
            resume_head: unit,
            post: quote!(#label loop { #head_code #body_code }),
        }
    }

    /// Bindings that are re-derived on resume (loop items, re-evaluated
    /// `match` arms) but declared `mut` may have changed before the site: save
    /// them too, and on resume overwrite the re-derived value with the saved one.
    pub(super) fn restore_mutable_bindings(
        &mut self,
        bindings: &[PatBinding],
        used: &NameSet,
        range: SiteRange,
        scope: &mut Scope,
    ) -> TokenStream {
        let rt = rt();
        let mut code = TokenStream::new();
        for b in bindings
            .iter()
            .filter(|b| b.mutable && used.contains(&b.ident.to_string()))
        {
            let id = self.new_binding(&b.ident, false);
            scope.saved.push(Saved {
                binding: id,
                source: Source::Live,
                hidden_by: NameSet::new(),
            });
            let slot = Self::slot_ident(id);
            let ident = &b.ident;
            code.extend(quote!(#ident = #rt::Slot::take(&mut #slot);));
        }
        if code.is_empty() {
            return code;
        }
        let resuming = self.resuming_into(range);
        quote!(if #resuming { #code })
    }

    pub(super) fn lower_for(&mut self, f: &syn::ExprForLoop, scope: &Scope) -> Split {
        let unit = quote!(());
        if let Some(r) = sites::sites_in_expr(&f.expr) {
            return self.misplaced(r, f.expr.span());
        }
        let Some(range) = sites::sites_in_block(&f.body) else {
            return self.misplaced(SiteRange { first: 0, last: 0 }, f.span());
        };
        let frame = frame_ident();
        let iter = self.fresh("iter");
        let next = self.fresh("next");
        let pos = self.fresh("pos");
        let depth = scope.loop_positions.len();
        let resuming = self.resuming_into(range);

        // Locals only the iterable reads were moved into (or are borrowed by)
        // the iterator: save a snapshot taken before the loop starts.
        let iter_names = free_in_expr(&f.expr);
        let body_names = names::free_in_stmts(&f.body.stmts);
        let mut body_scope = scope.clone();
        let mut snapshots = TokenStream::new();
        for saved in &mut body_scope.saved {
            let name = self.bindings[saved.binding].ident.to_string();
            if matches!(saved.source, Source::Live)
                && iter_names.contains(&name)
                && !body_names.contains(&name)
            {
                let snap = self.fresh("snap");
                let ident = &self.bindings[saved.binding].ident;
                let save_trait = Self::save_trait_ident(saved.binding);
                snapshots.extend(quote! {
                    let #snap = match <_ as #save_trait>::__cp_snapshot(&#ident) {
                        ::core::result::Result::Ok(e) => e,
                        ::core::result::Result::Err(e) => match #frame.halt(e).await {},
                    };
                });
                saved.source = Source::Snapshot(snap);
            }
        }
        body_scope.bind_inner(&pat_names(&f.pat));
        if yields_reference(&f.expr, &scope.ref_locals) {
            body_scope.ref_locals.extend(pat_names(&f.pat));
        }
        body_scope.loop_positions.push(pos.clone());
        let overwrite = self.restore_mutable_bindings(
            &pat_bindings(&f.pat),
            &body_names,
            range,
            &mut body_scope,
        );
        let body = self.lower_block(&f.body, &body_scope);
        let (label, pat, expr) = (&f.label, &f.pat, &f.expr);
        let post = quote! {{
            #snapshots
            let mut #iter = ::core::iter::IntoIterator::into_iter(#expr);
            #[allow(unused_assignments)]
            let mut #next: u64 = 0;
            if #resuming {
                let skip = #frame.loop_position(#depth);
                if let ::core::result::Result::Err(e) = #frame.advance(&mut #iter, skip) {
                    match #frame.halt(e).await {}
                }
                #next = skip;
            }
            #label loop {
                let #pat = match ::core::iter::Iterator::next(&mut #iter) {
                    ::core::option::Option::Some(item) => item,
                    ::core::option::Option::None => break,
                };
                #[allow(unused_variables)]
                let #pos: u64 = #next;
                #next += 1;
                #overwrite
                #body
            }
        }};
        Split {
            items: TokenStream::new(),
            normal_head: unit.clone(),
            resume_head: unit,
            post,
        }
    }
}
