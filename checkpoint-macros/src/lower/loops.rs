//! Loops: `while` and `while let` re-enter their body; `for` re-evaluates its
//! iterable and skips the items already taken (what each keeps is the plan's:
//! `analyse::plan::ForPlan`).

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Ident;

use super::{carried_ident, frame_ident, rt, Lowerer, Split};
use crate::analyse::plan::{ForItems, ForPlan, Overwrite, WhileCond, WhilePlan};

impl Lowerer<'_> {
    pub(super) fn lower_while(&mut self, w: &WhilePlan) -> Split {
        let label = &w.label;
        let resuming = self.resuming_into(w.range);
        let head_code = match &w.cond {
            WhileCond::Let { pat, expr, carried } => {
                // As for `match` arms: the bindings are carried as
                // `Some(tuple)` and become the body's first locals (the
                // plan's body unpacks them).
                let carried_ident = carried_ident();
                let names: Vec<&Ident> = carried.iter().map(|b| &b.ident).collect();
                quote! {
                    #[allow(unreachable_patterns)]
                    let #carried_ident = if !#resuming {
                        match #expr { #pat => ::core::option::Option::Some((#(#names,)*)), _ => break }
                    } else {
                        ::core::option::Option::None
                    };
                }
            }
            WhileCond::Plain(cond) => quote!(if !#resuming { if !(#cond) { break; } }),
        };
        let body_code = self.lower_block(&w.body);
        Split::post(quote!(#label loop { #head_code #body_code }))
    }

    /// On resume into `range`, the re-derived `mut` bindings get their saved
    /// values back.
    pub(super) fn overwrite(&self, o: &Overwrite) -> TokenStream {
        let rt = rt();
        let mut code = TokenStream::new();
        for (ident, id) in &o.bindings {
            let slot = self.slot_ident(*id);
            code.extend(quote!(#ident = #rt::Slot::take(&mut #slot);));
        }
        if code.is_empty() {
            return code;
        }
        let resuming = self.resuming_into(o.range);
        quote!(if #resuming { #code })
    }

    pub(super) fn lower_for(&mut self, f: &ForPlan) -> Split {
        let snapshots: TokenStream = f
            .snapshots
            .iter()
            .map(|(binding, snap)| {
                let ident = &self.plan.bindings[*binding].ident;
                self.snapshot_stmt(*binding, snap, ident)
            })
            .collect();
        let parts = ForParts {
            resuming: self.resuming_into(f.range),
            plan: f,
        };
        let make_iter = self.for_iterator(&parts);
        let make_iter = {
            let decode = self.decode_at_entry(&f.decoded_at_entry, &parts.resuming);
            quote!(#decode #make_iter)
        };
        self.loops.push((f.pos.clone(), f.item_fp.clone()));
        let post = match &f.items {
            ForItems::WritingBack {
                log,
                log_binding,
                cur,
                bindings,
            } => {
                let written = WrittenLog {
                    log,
                    log_slot: self.slot_ident(*log_binding),
                    cur,
                    bindings: bindings
                        .iter()
                        .map(|(b, id)| (b.clone(), self.slot_ident(*id)))
                        .collect(),
                };
                self.for_writing_back(&parts, snapshots, make_iter, written)
            }
            ForItems::Plain { overwrite } => {
                let overwrite = self.overwrite(overwrite);
                self.for_plain(&parts, (snapshots, make_iter), overwrite)
            }
        };
        self.loops.pop();
        Split::post(post)
    }

    /// The loop of a `for` whose items are not written through: on resume
    /// the rebuilt iterator skips the items already taken, and `mut`
    /// bindings get their saved values back.
    fn for_plain(
        &mut self,
        parts: &ForParts,
        (snapshots, make_iter): (TokenStream, TokenStream),
        overwrite: TokenStream,
    ) -> TokenStream {
        let f = parts.plan;
        let body = self.lower_block(&f.body);
        let (frame, item) = (frame_ident(), Ident::new("__cp_item", Span::mixed_site()));
        let check = parts.check_item(quote!(&#item));
        let ForPlan {
            iter,
            next,
            pos,
            depth,
            ..
        } = f;
        let resuming = &parts.resuming;
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

    /// On the uninterrupted path, before the iterator is made: the saved
    /// locals it may borrow across the sites inside are replaced by their
    /// decoded value (from the snapshot a site saves, if any), as a run
    /// resumed into the loop has them (see `After::DecodedAtEntry`).
    pub(super) fn decode_at_entry(
        &self,
        locals: &[(usize, Option<Ident>)],
        resuming: &TokenStream,
    ) -> TokenStream {
        let frame = frame_ident();
        let mut code = TokenStream::new();
        for (id, snap) in locals {
            let binding = &self.plan.bindings[*id];
            let (ident, ops) = (&binding.ident, &binding.ops);
            let value = match snap {
                Some(snap) => quote!(#ops.reloaded_snapshot(#ident, &#snap)),
                None => quote!(#ops.round_trip(#ident)),
            };
            code.extend(quote! {
                #ident = match #value {
                    ::core::result::Result::Ok(v) => v,
                    ::core::result::Result::Err(e) => match #frame.halt(e).await {},
                };
            });
        }
        if code.is_empty() {
            return code;
        }
        quote! {
            #[allow(unused_assignments)]
            if !#resuming { #code }
        }
    }

    /// `let mut iter = ..;`: the iterable, its base iterator in a stable
    /// order; evaluated on resume from the inputs it had at loop entry.
    fn for_iterator(&self, parts: &ForParts) -> TokenStream {
        let (rt, iter, resuming) = (rt(), &parts.plan.iter, &parts.resuming);
        let (expr, entries) = (&parts.plan.iterable, &parts.plan.entries);
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
        parts: &ForParts,
        snapshots: TokenStream,
        make_iter: TokenStream,
        written: WrittenLog,
    ) -> TokenStream {
        let (frame, rt, f) = (frame_ident(), rt(), parts.plan);
        let WrittenLog {
            log,
            log_slot,
            cur,
            bindings,
        } = written;
        let body = self.lower_block(&f.body);
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
        let ForPlan {
            iter,
            next,
            pos,
            depth,
            ..
        } = f;
        let resuming = &parts.resuming;
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
                if let ::core::option::Option::Some(prev) = &mut #cur {
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
}

/// What the parts of a lowered `for` loop share.
struct ForParts<'a> {
    plan: &'a ForPlan,
    /// Whether the run is resuming into this loop's body.
    resuming: TokenStream,
}

impl ForParts<'_> {
    /// `let fp = <fingerprint of item>;` and, on resume, the check that the
    /// loop stands at the item it left.
    fn check_item(&self, item: TokenStream) -> TokenStream {
        let item_fp = &self.plan.item_fp;
        if !self.plan.fingerprinted {
            return quote!(let #item_fp: u64 = 0;);
        }
        let (frame, rt) = (frame_ident(), rt());
        let (depth, resuming, described) = (self.plan.depth, &self.resuming, &self.plan.described);
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

/// What a loop that writes through its items keeps.
struct WrittenLog<'a> {
    log: &'a Ident,
    log_slot: Ident,
    cur: &'a Ident,
    /// Each binding of the loop's pattern and the slot of its saved value.
    bindings: Vec<(Ident, Ident)>,
}
