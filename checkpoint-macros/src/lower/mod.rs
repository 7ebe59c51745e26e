//! Lowering: rewriting a workflow body so it can start at any checkpoint site.
//!
//! # The shape of the generated code
//!
//! Every block that contains a site is split at the last statement `T` that
//! contains one (recursively, so the statements before `T` are split at their
//! own last site, and so on):
//!
//! ```text
//! let (x, mut y, __head) = if !resuming_into(T) {
//!     <statements before T, lowered the same way>
//!     (x, y, <T's head: take the checkpoint / evaluate the `if` condition ...>)
//! } else {
//!     <restore x and y from the checkpoint, re-run #[transient] initialisers>
//!     (x, y, <T's head on resume: which branch the site is in ...>)
//! };
//! <the rest of T, driven by __head: branch bodies, loop bodies>
//! <statements after T, unchanged>
//! ```
//!
//! `x` and `y` are the locals declared before `T` that the code after the split
//! reads (the rest of `T` or the statements after it). On resume, the first
//! branch is skipped entirely, so nothing before the site runs again, and the
//! locals it would have produced come from the checkpoint instead. Because the
//! normal path and the resume path only meet after the split, rustc's
//! definite-initialisation and borrow checks hold for both without any
//! knowledge of types. Loops simply re-enter their body, which is lowered the
//! same way; `for` loops re-evaluate their iterable and skip the items already
//! taken. Each statement of the original body appears once in the output, so
//! the expansion grows linearly with the number of sites.
//!
//! What each split hands over, what each site saves and how each loop and
//! branch is re-entered are the analysis's plan ([`crate::analyse::plan`]);
//! this module writes the plan out and decides nothing.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::visit_mut::VisitMut;
use syn::{Expr, Ident, Stmt};

use crate::analyse::plan::{
    After, BlockPlan, BlockStmts, BodyPlan, Ctrl, Save, SiteCall, SiteStmt, SplitNode, Stmts, Wrap,
};
use crate::analyse::syntax::strip_parens;
use crate::hidden::{binding_pat, carried_ident, frame_ident, rt};
use crate::sites::{self, Site, SiteKind, SiteRange};

mod branches;
pub(crate) mod canonical;
mod loops;

#[cfg(test)]
mod tests;

/// What a site saves, written out (see `site_fields`).
struct SiteFields {
    /// The slice of loop positions and item fingerprints a checkpoint stores:
    /// `&[pos.., LOOP_ITEMS, fingerprint..]` (`&[]` outside loops).
    loops: TokenStream,
    /// Statements encoding the saved locals.
    fields: TokenStream,
}

/// The three parts of a statement that contains a site (see the module docs).
struct Split {
    /// Items (generic enums) the other parts refer to.
    items: TokenStream,
    normal_head: TokenStream,
    resume_head: TokenStream,
    post: TokenStream,
}

impl Split {
    /// The parts of a statement that only runs after the merge.
    fn post(post: TokenStream) -> Split {
        Split {
            items: TokenStream::new(),
            normal_head: quote!(()),
            resume_head: quote!(()),
            post,
        }
    }
}

/// `let x = <the value restored into slot>;`
fn restore_stmt(ident: &Ident, slot: &Ident) -> TokenStream {
    let rt = rt();
    quote!(let #ident = #rt::Slot::take(&mut #slot);)
}

/// Writes out a body's plan.
pub struct Lowerer<'a> {
    sites: &'a [Site],
    plan: &'a BodyPlan,
    /// The position and item-fingerprint variables of the `for` loops around
    /// the code being written, outermost first.
    loops: Vec<(Ident, Ident)>,
}

impl<'a> Lowerer<'a> {
    pub fn new(sites: &'a [Site], plan: &'a BodyPlan) -> Self {
        Lowerer {
            sites,
            plan,
            loops: Vec::new(),
        }
    }

    fn slot_ident(&self, binding: usize) -> Ident {
        self.plan.bindings[binding].slot.clone()
    }

    /// `let snap = <the encoding of `of` now>;`, halting the run if it fails.
    fn snapshot_stmt(&self, binding: usize, snap: &Ident, of: &Ident) -> TokenStream {
        let frame = frame_ident();
        let ops = &self.plan.bindings[binding].ops;
        quote! {
            let #snap = match #ops.snapshot(&#of) {
                ::core::result::Result::Ok(e) => e,
                ::core::result::Result::Err(e) => match #frame.halt(e).await {},
            };
        }
    }

    pub fn wait_slot_ident(site: u32) -> Ident {
        Ident::new(&format!("__cp_wait_{site}"), Span::mixed_site())
    }

    fn site(&self, number: u32) -> &Site {
        sites::numbered(self.sites, number)
    }

    /// `matches!(frame.target(), Some(first..=last))`
    fn resuming_into(&self, range: SiteRange) -> TokenStream {
        let frame = frame_ident();
        let (first, last) = (range.first, range.last);
        quote!(::core::matches!(#frame.target(), ::core::option::Option::Some(#first..=#last)))
    }

    /// The whole body (a block's statements).
    pub fn lower_body(&mut self) -> TokenStream {
        let plan = self.plan;
        self.lower_block_stmts(&plan.body)
    }

    fn lower_block(&mut self, block: &BlockPlan) -> TokenStream {
        let inner = self.lower_block_stmts(&block.stmts);
        quote_spanned!(block.span=> { #inner })
    }

    /// A block's statements: the hoisted declarations, then the rest.
    fn lower_block_stmts(&mut self, stmts: &BlockStmts) -> TokenStream {
        match stmts {
            BlockStmts::Plain(stmts) => stmts.iter().map(clean_stmt).collect(),
            BlockStmts::Split {
                deferred,
                closures,
                body,
            } => {
                let decls: TokenStream = deferred.iter().map(|(d, _)| d.declaration()).collect();
                let closures: TokenStream = closures.iter().map(clean_stmt).collect();
                let body = self.lower_stmts(body);
                quote!(#decls #closures #body)
            }
        }
    }

    fn lower_stmts(&mut self, stmts: &Stmts) -> TokenStream {
        match stmts {
            Stmts::Plain(stmts) => stmts.iter().map(clean_stmt).collect(),
            Stmts::Split(node) => self.lower_split(node),
        }
    }

    /// A split statement list (the template in the module docs).
    fn lower_split(&mut self, node: &SplitNode) -> TokenStream {
        let rt = rt();
        let placeholders: Vec<(&Ident, usize, &Ident)> = node
            .exports
            .iter()
            .filter_map(|e| Some((&e.binding.ident, e.id, e.placeholder.as_ref()?)))
            .collect();
        let snapshots: TokenStream = placeholders
            .iter()
            .map(|(ident, id, snap)| self.snapshot_stmt(*id, snap, ident))
            .collect();
        let snaps: Vec<&Ident> = placeholders.iter().map(|(_, _, s)| *s).collect();
        let assigned_deferred: TokenStream = node
            .assigned_deferred
            .iter()
            .map(|&id| {
                let b = &self.plan.bindings[id];
                let (ident, slot) = (&b.ident, &b.slot);
                quote!(#ident = #rt::Slot::take(&mut #slot);)
            })
            .collect();
        let prefix_code = self.lower_stmts(&node.prefix);
        let Split {
            items,
            normal_head,
            resume_head,
            post,
        } = self.lower_site_stmt(&node.head);
        let reload = match &node.head {
            SiteStmt::Site { site, .. } => self.reload_after_site(*site, node),
            _ => TokenStream::new(),
        };

        // On resume, saved locals come from their slots and re-created ones
        // run their initialiser again, in declaration order.
        let restore: TokenStream = node
            .exports
            .iter()
            .map(|e| match &e.recreate {
                Some((pat, init)) => quote!(let #pat = #init;),
                None => restore_stmt(&e.binding.ident, &self.slot_ident(e.id)),
            })
            .collect();
        // `mut`: a site further in may replace them with their decoded
        // value (see `reload_after_site`).
        let pats = node.exports.iter().map(|e| {
            let ident = &e.binding.ident;
            quote!(mut #ident)
        });
        let names: Vec<&Ident> = node.exports.iter().map(|e| &e.binding.ident).collect();
        // Fix each slot's type from the local on the normal path, which rustc
        // checks first, so restored values have known types on the resume path.
        let binds = node
            .exports
            .iter()
            .filter(|e| e.recreate.is_none())
            .map(|e| {
                let (slot, ident) = (self.slot_ident(e.id), &e.binding.ident);
                quote!(#rt::Slot::bind(&#slot, &#ident);)
            });
        let head = Ident::new("__cp_head", Span::mixed_site());
        let resuming = self.resuming_into(node.range);
        let hoisted: TokenStream = node.items.iter().map(clean_stmt).collect();
        // `mut`: a site further in may build them again (see
        // `rebuild_after_site`).
        let after_merge: TokenStream = node
            .after_merge
            .iter()
            .map(|stmt| clean_stmt(&rebuildable(stmt)))
            .collect();
        let suffix_code: TokenStream = node.suffix.iter().map(clean_stmt).collect();
        quote! {
            #hoisted
            #items
            #[allow(unused_mut, unused_variables, unused_parens, clippy::let_unit_value)]
            let (#(#pats,)* #(#snaps,)* #head) = if !#resuming {
                #prefix_code
                #snapshots
                let #head = #normal_head;
                #reload
                #(#binds)*
                (#(#names,)* #(#snaps,)* #head)
            } else {
                #assigned_deferred
                #restore
                #snapshots
                let #head = #resume_head;
                (#(#names,)* #(#snaps,)* #head)
            };
            #after_merge
            #post
            #suffix_code
        }
    }

    /// The statement a split is made at.
    fn lower_site_stmt(&mut self, stmt: &SiteStmt) -> Split {
        let (mut split, value, wrap) = match stmt {
            SiteStmt::Site {
                site,
                call,
                rest,
                wrap,
            } => {
                let split = match call {
                    SiteCall::Checkpoint => self.checkpoint_split(*site),
                    SiteCall::Suspend(call) => self.suspend_split(*site, call),
                };
                let value = match rest {
                    Some(rest) => rest.clone(),
                    None => Ident::new("__cp_head", Span::mixed_site()).into_token_stream(),
                };
                // A bare site statement with `;` has nothing after the merge.
                if let Wrap::Expr { semi: true } = wrap {
                    return split;
                }
                (split, value, wrap)
            }
            SiteStmt::Ctrl { ctrl, wrap } => {
                let mut split = self.lower_ctrl(ctrl);
                let post = std::mem::take(&mut split.post);
                if let Wrap::Expr { semi } = wrap {
                    split.post = if *semi { quote!(#post;) } else { post };
                    return split;
                }
                (split, post, wrap)
            }
            SiteStmt::Misplaced => return Split::post(TokenStream::new()),
        };
        split.post = match wrap {
            Wrap::Expr { .. } => value,
            Wrap::Assign { left, semi } => quote!(#left = #value #semi),
            Wrap::Let {
                attrs,
                pat,
                diverge,
            } => quote!(#(#attrs)* let #pat = #value #diverge;),
        };
        split
    }

    /// `checkpoint!()`: save on the normal path, arrive on the resume path.
    fn checkpoint_split(&mut self, number: u32) -> Split {
        let frame = frame_ident();
        let enc = Ident::new("__cp_enc", Span::mixed_site());
        let span = self.site(number).span;
        let SiteFields { loops, fields } = self.site_fields(number);
        Split {
            items: TokenStream::new(),
            normal_head: quote_spanned! {span=>
                #frame.save(#number, #loops, |#enc| { #fields ::core::result::Result::Ok(()) }).await
            },
            resume_head: quote!(#frame.arrive()),
            post: TokenStream::new(),
        }
    }

    /// A suspension call `ctx.wait_for(..).await` as a whole statement or
    /// initialiser: its value comes from the call or, on resume, from the
    /// delivered signal.
    fn suspend_split(&mut self, number: u32, call: &syn::ExprMethodCall) -> Split {
        let site = self.site(number).clone();
        let frame = frame_ident();
        let enc = Ident::new("__cp_enc", Span::mixed_site());
        let SiteFields { loops, fields } = self.site_fields(number);
        let method = &call.method;
        let turbofish = call.turbofish.as_ref().map(|t| {
            let args = &t.args;
            quote!(::<#args, _>)
        });
        let args: Vec<TokenStream> = match site.kind {
            // The call is made on both paths, and what it reads is handed
            // over after it: the policy and the operation are borrowed.
            SiteKind::Retry => call
                .args
                .iter()
                .enumerate()
                .map(|(i, a)| match i {
                    0 => a.to_token_stream(),
                    _ => quote_spanned!(syn::spanned::Spanned::span(a)=> &(#a)),
                })
                .collect(),
            _ => call.args.iter().map(|a| a.to_token_stream()).collect(),
        };
        let args = args.iter();
        let span = site.span;
        let normal_head = quote_spanned! {span=>
            #frame.#method #turbofish(#number, #loops, |#enc| { #fields ::core::result::Result::Ok(()) }, #(#args),*).await
        };
        let rt = rt();
        let resume_head = match site.kind {
            SiteKind::Sleep => quote!(#frame.arrive()),
            // Resumed, a retry goes on from its stored attempts: the call
            // again, with its arguments (saved at the site: see
            // `split::postfix_free`); the frame knows it arrives there.
            SiteKind::Retry => normal_head.clone(),
            _ => {
                let slot = Self::wait_slot_ident(number);
                quote!({ #frame.arrive(); #rt::Slot::take(&mut #slot) })
            }
        };
        Split {
            items: TokenStream::new(),
            normal_head,
            resume_head,
            post: TokenStream::new(),
        }
    }

    /// On the uninterrupted path, once site `index` (the head of `node`)
    /// stored its checkpoint: the saved locals are replaced by their values
    /// decoded from its bytes, with the loads a resumed run makes, so that
    /// both paths go on from the same state (docs/exactness.md). The
    /// locals `node` hands over are decoded into new bindings of the same
    /// name, which the split then hands over; the others (declared further
    /// out, `mut` there) are assigned; a loop's item saved through is
    /// written back as on resume. A local borrowed around the site (see
    /// [`After`]) is left alone.
    fn reload_after_site(&self, index: u32, node: &SplitNode) -> TokenStream {
        let (frame, rt) = (frame_ident(), rt());
        let span = self.site(index).span;
        let exported = |id: usize| {
            node.exports
                .iter()
                .find(|e| e.id == id && e.recreate.is_none())
        };
        let halting = |value: TokenStream| {
            quote! {
                match #value {
                    ::core::result::Result::Ok(v) => v,
                    ::core::result::Result::Err(e) => match #frame.halt(e).await {},
                }
            }
        };
        let (mut rebound, mut assigned) = (TokenStream::new(), TokenStream::new());
        for (i, field) in self.plan.sites[index as usize - 1]
            .fields
            .iter()
            .enumerate()
        {
            if field.after != After::Decoded {
                continue;
            }
            let binding = &self.plan.bindings[field.binding];
            let (ops, slot) = (&binding.ops, &binding.slot);
            let name = binding.ident.to_string();
            let ident = Ident::new(&name, span.resolved_at(binding.ident.span()));
            match (&field.save, exported(field.binding)) {
                (Save::Live { .. }, Some(e)) => {
                    let ident = &e.binding.ident;
                    let value = halting(quote!(#ops.reloaded(#ident, &#frame, #i)));
                    rebound.extend(quote!(let #ident = #value;));
                }
                // An outer local of the name the split hands over is hidden
                // here (and not saved apart from it).
                (Save::Live { .. }, None)
                    if node.exports.iter().any(|e| e.binding.ident == name) => {}
                (Save::Live { .. }, None) => {
                    let value = halting(quote!(#ops.reloaded(#ident, &#frame, #i)));
                    assigned.extend(quote!(#ident = #value;));
                }
                (Save::Through, _) => {
                    let loaded = halting(quote!(#ops.load(&mut #slot, &#frame, #i)));
                    assigned.extend(quote! {
                        if #ops.needs_reload() {
                            #loaded;
                            #rt::restore_through(&mut #ident, &mut #slot);
                        }
                    });
                }
                _ => {}
            }
        }
        let rebuilt = self.rebuild_after_site(index);
        let site = sites::numbered(&self.plan.sites, index);
        // The transients built again below may borrow locals decoded here
        // (`scorer(&keywords)`) or another of them (`Api::new(&client)`):
        // they go first, the last built first.
        let dropped: TokenStream = site
            .rebuilt
            .iter()
            .rev()
            .flat_map(|r| crate::names::pat_bindings(&r.pat))
            .map(|b| {
                let ident = &b.ident;
                quote!(::core::mem::drop(#ident);)
            })
            .collect();
        let dropped = quote! {
            #[allow(dropping_copy_types, dropping_references, clippy::drop_non_drop)]
            {
                #dropped
            }
        };
        if rebound.is_empty() && assigned.is_empty() {
            if site.rebuilt_reads_rebuilt {
                return quote!(#dropped #rebuilt);
            }
            return rebuilt;
        }
        quote! {
            #dropped
            #frame.begin_reload();
            #rebound
            #[allow(unused_assignments)]
            {
                #assigned
            }
            #frame.end_reload();
            #rebuilt
        }
    }

    /// On the uninterrupted path, once site `index` stored its checkpoint
    /// and the saved locals are decoded: the `#[transient]` locals the code
    /// after it reads are built again, as a resumed run builds them, so
    /// that a transient keeps no state across a checkpoint on any path
    /// (docs/exactness.md). One the split hands over is bound anew; an
    /// outer one (bound `mut` by its split) is assigned.
    fn rebuild_after_site(&self, index: u32) -> TokenStream {
        let mut out = TokenStream::new();
        for r in &sites::numbered(&self.plan.sites, index).rebuilt {
            let (pat, init) = (&r.pat, clean_expr(&r.init));
            match (r.rebind, crate::analyse::syntax::assignee(pat)) {
                (true, _) => out.extend(quote!(let #pat = #init;)),
                (false, Some(left)) => out.extend(quote! {
                    #[allow(unused_assignments)]
                    {
                        #left = #init;
                    }
                }),
                // Refused by the analysis.
                (false, None) => {}
            }
        }
        out
    }

    /// The loop positions and the field-encoding statements of a site, as
    /// its plan says.
    fn site_fields(&mut self, number: u32) -> SiteFields {
        let span = self.site(number).span;
        let enc = Ident::new("__cp_enc", Span::mixed_site());
        let rt = rt();
        let mut code = TokenStream::new();
        for field in &sites::numbered(&self.plan.sites, number).fields {
            let binding = &self.plan.bindings[field.binding];
            let name = binding.ident.to_string();
            let ident = Ident::new(&name, span.resolved_at(binding.ident.span()));
            let ops = &binding.ops;
            code.extend(match &field.save {
                Save::Snapshot(snap) => quote!(#enc.encoded(&#snap)?;),
                Save::Through => quote_spanned! {span=>
                    #rt::save_through(#enc, &#ident)?;
                },
                Save::Live {
                    order_observed: Some(observed),
                } => {
                    quote_spanned!(span=> #ops.encode_order_observed(&#ident, #enc, #observed)?;)
                }
                Save::Live {
                    order_observed: None,
                } => quote_spanned!(span=> #ops.encode(&#ident, #enc)?;),
            });
        }
        let positions = self.loops.iter().map(|(pos, _)| pos);
        let items = self.loops.iter().map(|(_, item)| item);
        let loops = if self.loops.is_empty() {
            quote!(&[])
        } else {
            quote!(&[#(#positions,)* #rt::LOOP_ITEMS, #(#items),*])
        };
        SiteFields {
            loops,
            fields: code,
        }
    }

    /// Control flow that contains sites.
    fn lower_ctrl(&mut self, ctrl: &Ctrl) -> Split {
        match ctrl {
            Ctrl::Block { label, block } => {
                let block = self.lower_block(block);
                Split::post(quote!(#label #block))
            }
            Ctrl::Loop { label, body } => {
                let body = self.lower_block(body);
                Split::post(quote!(#label loop #body))
            }
            Ctrl::While(w) => self.lower_while(w),
            Ctrl::For(f) => self.lower_for(f),
            Ctrl::Arms(a) => self.lower_arms(a),
            Ctrl::Misplaced => Split::post(TokenStream::new()),
        }
    }
}

/// A user statement emitted unchanged, minus `#[transient]` markers; a
/// `#[transient]` local is followed by the probe that refuses an iterator
/// (see the runtime's `exactness`).
fn clean_stmt(stmt: &Stmt) -> TokenStream {
    let probe = transient_probe(stmt);
    let mut stmt = stmt.clone();
    sites::StripMarkers.visit_stmt_mut(&mut stmt);
    let mut out = stmt.into_token_stream();
    out.extend(probe);
    out
}

/// `(&&probe(&x)).refuse_iterator();` after `#[transient] let x = ..;` (a
/// closure is never an iterator: left alone, so its type stays open).
fn transient_probe(stmt: &Stmt) -> Option<TokenStream> {
    let Stmt::Local(local) = stmt else {
        return None;
    };
    if !local.attrs.iter().any(|a| a.path().is_ident("transient")) {
        return None;
    }
    let init = local.init.as_ref()?;
    if matches!(strip_parens(&init.expr), Expr::Closure(_)) {
        return None;
    }
    let pat = match &local.pat {
        syn::Pat::Type(t) => &*t.pat,
        p => p,
    };
    let syn::Pat::Ident(p) = pat else {
        return None;
    };
    // Every token on the local's span, so that the error points at it.
    let ident = &p.ident;
    Some(quote_spanned! {ident.span()=>
        {
            #[allow(unused_imports)]
            use ::checkpoint_runtime::__private::{IteratorTransient as _, NotAnIterator as _};
            (&&::checkpoint_runtime::__private::transient_probe(&#ident)).refuse_iterator();
        }
    })
}

/// A transient `let` whose names are bound `mut` (allowed to stay unused).
fn rebuildable(stmt: &Stmt) -> Stmt {
    struct MakeMut;
    impl VisitMut for MakeMut {
        fn visit_pat_ident_mut(&mut self, p: &mut syn::PatIdent) {
            if p.by_ref.is_none() {
                p.mutability = Some(Default::default());
            }
            syn::visit_mut::visit_pat_ident_mut(self, p);
        }
    }
    let mut stmt = stmt.clone();
    if let Stmt::Local(local) = &mut stmt {
        MakeMut.visit_pat_mut(&mut local.pat);
        local.attrs.push(syn::parse_quote!(#[allow(unused_mut)]));
    }
    stmt
}

fn clean_expr(expr: &Expr) -> TokenStream {
    let mut expr = expr.clone();
    sites::StripMarkers.visit_expr_mut(&mut expr);
    expr.into_token_stream()
}
