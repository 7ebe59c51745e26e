//! Loops: `while` and `while let` re-enter their body; `for` re-evaluates its
//! iterable and skips the items already taken.

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::spanned::Spanned;
use syn::{Expr, Ident};

use super::branches::unpack_carried;
use super::{binding_pat, frame_ident, rt, Lowerer, Saved, Scope, Source, Split};
use crate::analyse::branches::carried_bindings;
use crate::analyse::iterables;
use crate::analyse::liveness::ContFrame;
use crate::analyse::syntax::{strip_parens, yields_reference};
use crate::names::{self, free_in_expr, pat_bindings, pat_names, NameSet, PatBinding};
use crate::sites::{self, SiteRange};
use std::rc::Rc;

impl Lowerer<'_> {
    pub(super) fn lower_while(&mut self, w: &syn::ExprWhile, scope: &Scope) -> Split {
        let unit = quote!(());
        if crate::analyse::split::site_with_postfix(super::scrutinee_of_if(&w.cond)).is_some() {
            let desugared = super::scrutinee::desugar_while(w);
            let range = sites::sites_in_expr(&desugared).unwrap_or(SiteRange { first: 1, last: 1 });
            return self.lower_ctrl(&desugared, range, scope);
        }
        if let Some(r) = sites::sites_in_expr(&w.cond) {
            return self.misplaced(r, w.cond.span());
        }
        let label = &w.label;
        let Some(range) = sites::sites_in_block(&w.body) else {
            return self.misplaced(SiteRange { first: 1, last: 1 }, w.span());
        };
        let resuming = self.resuming_into(range);
        let scope = &scope.then(ContFrame::Loop {
            body: Rc::new(w.body.clone()),
            cond: Some(Rc::new((*w.cond).clone())),
            endless: false,
            label: w.label.as_ref().map(|l| l.name.ident.to_string()),
        });
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
            let id = self.new_binding(&b.ident, false, true);
            scope.saved.push(Saved {
                binding: id,
                source: Source::Live,
                hidden_by: NameSet::new(),
            });
            let slot = self.slot_ident(id);
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
        if let Some(r) = sites::sites_in_expr(&f.expr) {
            return self.misplaced(r, f.expr.span());
        }
        let Some(range) = sites::sites_in_block(&f.body) else {
            return self.misplaced(SiteRange { first: 1, last: 1 }, f.span());
        };
        let parts = ForParts {
            iter: self.fresh("iter"),
            next: self.fresh("next"),
            pos: self.fresh("pos"),
            item_fp: self.fresh("item_fp"),
            depth: scope.loop_positions.len(),
            resuming: self.resuming_into(range),
            described: loop_described(f),
            fingerprinted: !iterables::is_range(&f.expr),
        };

        let iter_names = free_in_expr(&f.expr);
        let body_names = names::free_in_stmts(&f.body.stmts);
        let mut body_scope = scope.clone();
        let snapshots = self.iterable_snapshots(&iter_names, &body_names, &mut body_scope);
        let entries = self.entry_copies(f, &iter_names, &body_names, scope, &mut body_scope);
        body_scope.bind_inner(&pat_names(&f.pat));
        if yields_reference(&f.expr, &scope.ref_locals) {
            body_scope.ref_locals.extend(pat_names(&f.pat));
        }
        body_scope.loop_positions.push(parts.pos.clone());
        body_scope.loop_items.push(parts.item_fp.clone());
        body_scope.cont.push(ContFrame::Loop {
            body: Rc::new(f.body.clone()),
            cond: None,
            endless: false,
            label: f.label.as_ref().map(|l| l.name.ident.to_string()),
        });
        let make_iter = self.for_iterator(f, &entries, &parts);
        let post = if iterables::writes_through(&f.expr) {
            self.for_writing_back(f, &parts, snapshots, make_iter, &mut body_scope)
        } else {
            self.for_plain(
                f,
                &parts,
                range,
                (snapshots, make_iter),
                &body_names,
                &mut body_scope,
            )
        };
        Split {
            items: TokenStream::new(),
            normal_head: quote!(()),
            resume_head: quote!(()),
            post,
        }
    }

    /// The loop of a `for` whose items are not written through: on resume
    /// the rebuilt iterator skips the items already taken, and `mut`
    /// bindings get their saved values back.
    fn for_plain(
        &mut self,
        f: &syn::ExprForLoop,
        parts: &ForParts,
        range: SiteRange,
        (snapshots, make_iter): (TokenStream, TokenStream),
        body_names: &NameSet,
        body_scope: &mut Scope,
    ) -> TokenStream {
        let overwrite =
            self.restore_mutable_bindings(&pat_bindings(&f.pat), body_names, range, body_scope);
        let body = self.lower_block(&f.body, body_scope);
        let (frame, item) = (frame_ident(), Ident::new("__cp_item", Span::mixed_site()));
        let check = parts.check_item(quote!(&#item));
        let ForParts {
            iter,
            next,
            pos,
            depth,
            resuming,
            ..
        } = &parts;
        let (label, pat) = (&f.label, &f.pat);
        quote! {{
            #snapshots
            #make_iter
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
                let #item = match ::core::iter::Iterator::next(&mut #iter) {
                    ::core::option::Option::Some(item) => item,
                    ::core::option::Option::None => break,
                };
                #check
                let #pat = #item;
                #[allow(unused_variables)]
                let #pos: u64 = #next;
                #next += 1;
                #overwrite
                #body
            }
        }}
    }

    /// `let mut iter = ..;`: the iterable, its base iterator in a stable
    /// order; evaluated on resume from the inputs it had at loop entry.
    fn for_iterator(
        &self,
        f: &syn::ExprForLoop,
        entries: &[EntryCopy],
        parts: &ForParts,
    ) -> TokenStream {
        let (rt, iter, resuming) = (rt(), &parts.iter, &parts.resuming);
        let expr = iterables::in_stable_order(&f.expr).unwrap_or_else(|| (*f.expr).clone());
        if entries.is_empty() {
            return quote!(let mut #iter = ::core::iter::IntoIterator::into_iter(#expr););
        }
        let snaps: Vec<&Ident> = entries.iter().map(|e| &e.snap).collect();
        let normal: Vec<TokenStream> = entries
            .iter()
            .map(|e| {
                let (local, slot) = (&e.local, self.slot_ident(e.binding));
                let snapshot = self.snapshot_stmt(e.binding, &e.snap, local);
                quote! {
                    #snapshot
                    #rt::Slot::bind(&#slot, &#local);
                }
            })
            .collect();
        let resumed: Vec<TokenStream> = entries
            .iter()
            .map(|e| {
                let (local, slot) = (&e.local, self.slot_ident(e.binding));
                let snapshot = self.snapshot_stmt(e.binding, &e.snap, local);
                quote! {
                    let #local = #rt::Slot::take(&mut #slot);
                    #snapshot
                }
            })
            .collect();
        quote! {
            let (#(#snaps,)* mut #iter) = if !#resuming {
                #(#normal)*
                (#(#snaps,)* ::core::iter::IntoIterator::into_iter(#expr))
            } else {
                #(#resumed)*
                (#(#snaps,)* ::core::iter::IntoIterator::into_iter(#expr))
            };
        }
    }

    /// The loop of a `for` that writes through its items: each item is kept
    /// (reborrowed for the body) so that its final value can be logged when
    /// the next one is taken; on resume the log and the bindings saved
    /// through (`*x`) are written back into the rebuilt items. (Long because
    /// it is the loop's one template.)
    fn for_writing_back(
        &mut self,
        f: &syn::ExprForLoop,
        parts: &ForParts,
        snapshots: TokenStream,
        make_iter: TokenStream,
        body_scope: &mut Scope,
    ) -> TokenStream {
        let (frame, rt) = (frame_ident(), rt());
        let WrittenLog {
            log,
            log_slot,
            cur,
            bindings,
        } = self.written_items(f, body_scope);
        let body = self.lower_block(&f.body, body_scope);
        let check = parts.check_item(quote!(match &#cur {
            ::core::option::Option::Some(item) => item,
            ::core::option::Option::None => break,
        }));
        let rebinds = bindings.iter().map(|(b, slot)| {
            quote! {
                #[allow(unused_mut)]
                let mut #b = #b;
                #rt::bind_through(&#slot, &#b);
            }
        });
        let restores = bindings
            .iter()
            .map(|(b, slot)| quote!(#rt::restore_through(&mut #b, &mut #slot);));
        let ForParts {
            iter,
            next,
            pos,
            depth,
            resuming,
            ..
        } = parts;
        let (label, pat) = (&f.label, &f.pat);
        quote! {{
            #snapshots
            let mut #log = if #resuming {
                #rt::Slot::take(&mut #log_slot)
            } else {
                #rt::WrittenItems::new()
            };
            #make_iter
            #[allow(unused_assignments)]
            let mut #next: u64 = 0;
            if #resuming {
                let skip = #frame.loop_position(#depth);
                if let ::core::result::Result::Err(e) =
                    #rt::advance_writing_back(&#frame, &mut #iter, skip, &#log)
                {
                    match #frame.halt(e).await {}
                }
                #next = skip;
            }
            let mut #cur = ::core::option::Option::None;
            #label loop {
                if let ::core::option::Option::Some(prev) = &#cur {
                    if let ::core::result::Result::Err(e) = #log.push(prev, &#frame) {
                        match #frame.halt(e).await {}
                    }
                }
                #cur = ::core::option::Option::Some(match ::core::iter::Iterator::next(&mut #iter) {
                    ::core::option::Option::Some(item) => item,
                    ::core::option::Option::None => break,
                });
                #check
                let #pat = match &mut #cur {
                    ::core::option::Option::Some(item) => #rt::Reborrow::reborrow(item),
                    ::core::option::Option::None => break,
                };
                #(#rebinds)*
                if #resuming {
                    #(#restores)*
                }
                #[allow(unused_variables)]
                let #pos: u64 = #next;
                #next += 1;
                #body
            }
        }}
    }

    /// Locals only the iterable reads were moved into (or are borrowed by)
    /// the iterator: they are saved as snapshots taken before the loop starts
    /// (issue 32, item 9: also those held by a placeholder).
    fn iterable_snapshots(
        &mut self,
        iter_names: &NameSet,
        body_names: &NameSet,
        body_scope: &mut Scope,
    ) -> TokenStream {
        let mut snapshots = TokenStream::new();
        for i in 0..body_scope.saved.len() {
            let binding = body_scope.saved[i].binding;
            let name = self.bindings[binding].ident.to_string();
            // A placeholder too (a local assigned again elsewhere, `v = ..`
            // in a `match` arm before the loop): inside the loop it is
            // borrowed by the iterator, whether or not it is live after.
            if matches!(
                body_scope.saved[i].source,
                Source::Live | Source::Placeholder(_)
            ) && iter_names.contains(&name)
                && !body_names.contains(&name)
            {
                let snap = self.fresh("snap");
                let ident = self.bindings[binding].ident.clone();
                snapshots.extend(self.snapshot_stmt(binding, &snap, &ident));
                body_scope.saved[i].source = Source::Snapshot(snap);
            }
        }
        snapshots
    }

    /// `mut` locals that both the iterable and the body read: the body may
    /// change them (`for _ in 0..q.len() { q.pop_front(); .. }`), so the
    /// iterable is evaluated on resume from copies saved at loop entry. An
    /// iterable that borrows them (`&q`, `q.iter()`) keeps them from changing
    /// and needs no copy.
    fn entry_copies(
        &mut self,
        f: &syn::ExprForLoop,
        iter_names: &NameSet,
        body_names: &NameSet,
        scope: &Scope,
        body_scope: &mut Scope,
    ) -> Vec<EntryCopy> {
        if yields_reference(&f.expr, &scope.ref_locals) || iterables::writes_through(&f.expr) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for saved in &scope.saved {
            let b = &self.bindings[saved.binding];
            let name = b.ident.to_string();
            if !(matches!(saved.source, Source::Live | Source::Placeholder(_))
                && b.mutable
                && iter_names.contains(&name)
                && body_names.contains(&name))
            {
                continue;
            }
            let local = b.ident.clone();
            let id = self.new_binding(&local, false, false);
            self.bindings[id].field_name = Some(format!("{name}@entry"));
            let snap = self.fresh("entry");
            body_scope.saved.push(Saved {
                binding: id,
                source: Source::Snapshot(snap.clone()),
                hidden_by: NameSet::new(),
            });
            out.push(EntryCopy {
                local,
                snap,
                binding: id,
            });
        }
        out
    }

    /// The log of finished items and the bindings saved through, for a loop
    /// that writes through its items.
    fn written_items(&mut self, f: &syn::ExprForLoop, body_scope: &mut Scope) -> WrittenLog {
        let log = self.fresh("written");
        let pat = &f.pat;
        let pat_text = quote!(#pat).to_string().replace(" ,", ",");
        let log_id = self.new_binding(&log, false, true);
        self.bindings[log_id].field_name = Some(format!("{pat_text}@written"));
        body_scope.saved.push(Saved {
            binding: log_id,
            source: Source::Live,
            hidden_by: NameSet::new(),
        });
        let mut bindings = Vec::new();
        for b in pat_bindings(&f.pat) {
            let id = self.new_binding(&b.ident, false, false);
            self.bindings[id].field_name = Some(format!("*{}", b.ident));
            body_scope.saved.push(Saved {
                binding: id,
                source: Source::Through,
                hidden_by: NameSet::new(),
            });
            bindings.push((b.ident.clone(), self.slot_ident(id)));
        }
        WrittenLog {
            log,
            log_slot: self.slot_ident(log_id),
            cur: self.fresh("item"),
            bindings,
        }
    }
}

/// What the parts of a lowered `for` loop share.
struct ForParts {
    iter: Ident,
    /// Items taken so far.
    next: Ident,
    /// The current item's position, saved by the sites in the body.
    pos: Ident,
    /// The current item's fingerprint, saved with it.
    item_fp: Ident,
    /// How many `for` loops enclose this one.
    depth: usize,
    /// Whether the run is resuming into this loop's body.
    resuming: TokenStream,
    /// The loop as errors name it.
    described: String,
    /// Whether items get a fingerprint (not a range's).
    fingerprinted: bool,
}

impl ForParts {
    /// `let fp = <fingerprint of item>;` and, on resume, the check that the
    /// loop stands at the item it left.
    fn check_item(&self, item: TokenStream) -> TokenStream {
        let item_fp = &self.item_fp;
        if !self.fingerprinted {
            return quote!(let #item_fp: u64 = 0;);
        }
        let (frame, rt) = (frame_ident(), rt());
        let (depth, resuming, described) = (self.depth, &self.resuming, &self.described);
        quote! {
            let #item_fp: u64 = {
                #[allow(unused_imports)]
                use #rt::{Fingerprinted as _, NotFingerprinted as _};
                (&&#rt::ItemProbe(#item)).fingerprint()
            };
            if #resuming {
                if let ::core::result::Result::Err(e) = #frame.check_item(#depth, #item_fp, #described) {
                    match #frame.halt(e).await {}
                }
            }
        }
    }
}

/// How errors name a loop: its first line, shortened.
fn loop_described(f: &syn::ExprForLoop) -> String {
    let pat = &f.pat;
    let mut d = format!("for {} in {}", quote!(#pat), f.expr.to_token_stream());
    if d.len() > 80 {
        d.truncate(d.char_indices().nth(77).map_or(d.len(), |(i, _)| i));
        d.push_str("...");
    }
    d
}

/// A copy of an iterable's input saved at loop entry (see `entry_copies`).
struct EntryCopy {
    local: Ident,
    snap: Ident,
    /// The copy's binding (its slot and save trait).
    binding: usize,
}

/// What a loop that writes through its items keeps (see `written_items`).
struct WrittenLog {
    log: Ident,
    log_slot: Ident,
    cur: Ident,
    /// Each binding of the loop's pattern and the slot of its saved value.
    bindings: Vec<(Ident, Ident)>,
}
