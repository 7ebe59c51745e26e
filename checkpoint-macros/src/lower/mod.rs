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

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Block, Expr, Ident, Stmt};

use crate::errors::Errors;
use crate::names::{pat_names, NameSet, PatBinding};
use crate::sites::{self, Site, SiteKind, SiteRange};

mod branches;
pub(crate) mod canonical;
mod loops;
mod scrutinee;

use crate::analyse::branches::{if_arms, if_conditions, if_rederives, Reentry};
use crate::analyse::liveness::{self, ContFrame};
use crate::analyse::split::{self, direct_site, site_with_postfix, Visible};
use crate::analyse::{deferred, order, syntax};
use scrutinee::scrutinee_of_if;
use syntax::strip_parens;

/// A local that some checkpoint saves, or that is re-created on resume.
pub struct Binding {
    pub ident: Ident,
    pub transient: bool,
    /// Declared `mut`: the code may change it.
    pub mutable: bool,
    /// The field's name in checkpoints when it is not the local's name (a
    /// loop's entry snapshot `q@entry`, its written items, `*x`).
    pub field_name: Option<String>,
    /// The sites that save it, in order.
    pub saved_at: Vec<u32>,
    /// The slot its value is restored into: `__cp_slot_<name>`.
    pub slot: Ident,
    /// Its saving operations, taken once through `save_trait` where the body
    /// starts (`__cp_ops_<name>`), so that a type that cannot be saved is one
    /// error, however many sites save the local.
    pub ops: Ident,
    /// The marker trait carrying the message for a type that cannot be
    /// saved: `__cp_save_<name>`, shared by the locals of one name.
    pub save_trait: Ident,
    /// How it is taken from checkpoints of older code (`#[migrate(..)]`).
    pub migration: Option<crate::migrate::Migration>,
    /// A `let x;` assigned a borrowed value later: refused (once) where a
    /// site would save it.
    pub borrowed: bool,
}

impl Binding {
    /// The field's name in checkpoints.
    pub fn field_name(&self) -> String {
        self.field_name
            .clone()
            .unwrap_or_else(|| self.ident.to_string())
    }
}

/// How a saved local is written into a checkpoint.
#[derive(Clone)]
enum Source {
    /// Encode the local itself.
    Live,
    /// Encode a snapshot taken when the enclosing `for` loop started: the local
    /// was moved into (or is borrowed by) the loop's iterator.
    Snapshot(Ident),
    /// Encode what a binding of a loop that writes through its items points
    /// to (`*x` of `for x in v.iter_mut()`); see `iteration::ItemPart`.
    Through,
    /// A local declared without a value (`let x;`, hoisted to the top of its
    /// block) that may still be unassigned here: never saved. From the split
    /// whose prefix assigns it on, it is `Live` (see `deferred`).
    Deferred,
    /// A local assigned again after the split (`state = match state { .. }`):
    /// where it is live, itself; where it is dead (moved, about to be
    /// assigned), a snapshot taken at the split, so that the resume path has
    /// a value of its type that nothing reads before the assignment.
    Placeholder(Ident),
}

#[derive(Clone)]
struct Saved {
    binding: usize,
    source: Source,
    /// Names bound in scopes nested inside the one that declared this local;
    /// if one equals this local's name, the local cannot be named at the site.
    hidden_by: NameSet,
}

/// What is in scope while lowering a piece of code.
#[derive(Clone, Default)]
struct Scope {
    saved: Vec<Saved>,
    /// Position variables of the enclosing `for` loops, outermost first.
    loop_positions: Vec<Ident>,
    /// The fingerprint variables of those loops' current items.
    loop_items: Vec<Ident>,
    /// Locals known to hold references that are re-derived on resume (items
    /// of `for` loops over borrowed collections, bindings of re-evaluated
    /// `match`es): a `match` on them is evaluated again rather than restored.
    ref_locals: NameSet,
    /// What runs after the code being lowered (see `liveness`).
    cont: Vec<ContFrame>,
}

impl Scope {
    fn then(&self, frame: ContFrame) -> Scope {
        let mut s = self.clone();
        s.cont.push(frame);
        s
    }

    fn bind_inner(&mut self, names: &NameSet) {
        for s in &mut self.saved {
            s.hidden_by.extend(names.iter().cloned());
        }
    }
}

/// Per-site results of lowering, used to build the site table and the code
/// that loads a checkpoint before the body starts.
#[derive(Clone, Default)]
pub struct SiteLayout {
    /// Bindings saved at this site, in field order.
    pub fields: Vec<usize>,
    pub loops: u32,
}

pub struct Lowerer<'a> {
    sites: &'a [Site],
    ctx: Option<&'a Ident>,
    pub bindings: Vec<Binding>,
    pub layouts: Vec<SiteLayout>,
    counter: usize,
    errors: Errors,
}

/// What a site saves (see `site_fields`).
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

/// `mut x` or `x`, as the binding was declared.
fn binding_pat(b: &PatBinding) -> TokenStream {
    let ident = &b.ident;
    if b.mutable {
        quote!(mut #ident)
    } else {
        quote!(#ident)
    }
}

/// `let x = <the value restored into slot>;`
fn restore_stmt(ident: &Ident, slot: &Ident) -> TokenStream {
    let rt = rt();
    quote!(let #ident = #rt::Slot::take(&mut #slot);)
}

pub fn frame_ident() -> Ident {
    Ident::new("__cp_frame", Span::mixed_site())
}

fn rt() -> TokenStream {
    quote!(::checkpoint_runtime::__private)
}

impl<'a> Lowerer<'a> {
    pub fn new(sites: &'a [Site], ctx: Option<&'a Ident>) -> Self {
        Lowerer {
            sites,
            ctx,
            bindings: Vec::new(),
            layouts: vec![SiteLayout::default(); sites.len()],
            counter: 0,
            errors: Errors::default(),
        }
    }

    pub fn finish(self) -> syn::Result<(Vec<Binding>, Vec<SiteLayout>)> {
        self.errors.finish()?;
        Ok((self.bindings, self.layouts))
    }

    fn fresh(&mut self, what: &str) -> Ident {
        self.counter += 1;
        Ident::new(&format!("__cp_{what}_{}", self.counter), Span::mixed_site())
    }

    fn slot_ident(&self, binding: usize) -> Ident {
        self.bindings[binding].slot.clone()
    }

    /// `let snap = <the encoding of `of` now>;`, halting the run if it fails.
    fn snapshot_stmt(&self, binding: usize, snap: &Ident, of: &Ident) -> TokenStream {
        let frame = frame_ident();
        let ops = self.save_ops(binding);
        quote! {
            let #snap = match #ops.snapshot(&#of) {
                ::core::result::Result::Ok(e) => e,
                ::core::result::Result::Err(e) => match #frame.halt(e).await {},
            };
        }
    }

    /// The saving operations of a local (see `Binding::ops`).
    fn save_ops(&self, binding: usize) -> TokenStream {
        self.bindings[binding].ops.to_token_stream()
    }

    pub fn wait_slot_ident(site: u32) -> Ident {
        Ident::new(&format!("__cp_wait_{site}"), Span::mixed_site())
    }

    /// Registers a local that sites may save; returns its id (and slot).
    fn new_binding(&mut self, ident: &Ident, transient: bool, mutable: bool) -> usize {
        // Generated names say which local they belong to; a second local of
        // the same name gets a suffix.
        let text = ident.to_string();
        let base = text.trim_start_matches("__cp_").trim_start_matches("r#");
        let same = self.bindings.iter().filter(|b| b.ident == text).count();
        let name = match same {
            0 => base.to_owned(),
            n => format!("{base}_{}", n + 1),
        };
        self.bindings.push(Binding {
            ident: ident.clone(),
            transient,
            mutable,
            field_name: None,
            saved_at: Vec::new(),
            slot: Ident::new(&format!("__cp_slot_{name}"), Span::mixed_site()),
            ops: Ident::new(&format!("__cp_ops_{name}"), Span::mixed_site()),
            // One marker trait per name: it is generic over the type.
            save_trait: Ident::new(&format!("__cp_save_{base}"), Span::mixed_site()),
            migration: None,
            borrowed: false,
        });
        self.bindings.len() - 1
    }

    fn site(&self, index: u32) -> &Site {
        // Site numbers start at 1.
        &self.sites[(index as usize).saturating_sub(1)]
    }

    /// `matches!(frame.target(), Some(first..=last))`
    fn resuming_into(&self, range: SiteRange) -> TokenStream {
        let frame = frame_ident();
        let (first, last) = (range.first, range.last);
        quote!(::core::matches!(#frame.target(), ::core::option::Option::Some(#first..=#last)))
    }

    /// Lowers the whole body (a block's statements) into statements.
    pub fn lower_body(&mut self, stmts: &[Stmt]) -> TokenStream {
        self.lower_block_stmts(stmts, &Scope::default())
    }

    fn lower_block(&mut self, block: &Block, scope: &Scope) -> TokenStream {
        let inner = self.lower_block_stmts(&block.stmts, scope);
        quote_spanned!(block.brace_token.span.join()=> { #inner })
    }

    /// A block's statements: the declarations that can be deferred (see
    /// `deferred`) are hoisted to its top, then the rest is lowered.
    fn lower_block_stmts(&mut self, stmts: &[Stmt], scope: &Scope) -> TokenStream {
        if !stmts.iter().any(|s| sites::sites_in_stmt(s).is_some()) {
            return stmts.iter().map(clean_stmt).collect();
        }
        let hoisted = deferred::hoist(stmts);
        let (closures, rest) = deferred::hoist_transient_closures(&hoisted.stmts);
        let hoisted = deferred::Hoisted {
            locals: hoisted.locals,
            stmts: rest,
        };
        let mut scope = scope.clone();
        let names: NameSet = hoisted.locals.iter().map(|d| d.ident.to_string()).collect();
        scope.bind_inner(&names);
        scope.ref_locals.retain(|n| !names.contains(n));
        let mut decls = TokenStream::new();
        for d in &hoisted.locals {
            let id = self.new_binding(&d.ident, false, true);
            self.bindings[id].migration = d.migration();
            self.bindings[id].borrowed = d.borrowed;
            scope.saved.push(Saved {
                binding: id,
                source: Source::Deferred,
                hidden_by: NameSet::new(),
            });
            decls.extend(d.declaration());
        }
        let closures: TokenStream = closures.iter().map(clean_stmt).collect();
        let body = self.lower_stmts(&hoisted.stmts, &scope, &NameSet::new());
        quote!(#decls #closures #body)
    }

    /// Lowers a statement list; `after` are the names read after these
    /// statements by code that can still see their locals. (The decisions
    /// are `analyse::split`'s; the length is the split's one template.)
    fn lower_stmts(&mut self, stmts: &[Stmt], scope: &Scope, after: &NameSet) -> TokenStream {
        let Some(plan) = split::plan_split(stmts, after, &scope.ref_locals, self.ctx, self.sites)
        else {
            return stmts.iter().map(clean_stmt).collect();
        };
        for e in plan.errors.iter().cloned() {
            self.errors.add(e);
        }
        let (t, suffix) = (&stmts[plan.at], &stmts[plan.at + 1..]);
        let mut inner = self.inner_scope(stmts, &plan, scope);
        let assigned_deferred = self.assign_deferred(&stmts[..plan.at], &mut inner);

        // Handed-over locals: a binding each, saved (or a placeholder, or
        // re-created) at the sites after the split.
        let mut ids = Vec::new();
        let mut placeholders = Vec::new();
        for v in &plan.exports {
            let transient = v.transient_init.is_some();
            let id = self.new_binding(&v.binding.ident, transient, v.binding.mutable);
            self.bindings[id].migration = v.migration.clone();
            ids.push(id);
            if transient {
                continue;
            }
            let source = if plan.reassigned(stmts, v) {
                let snap = self.fresh("placeholder");
                placeholders.push((v.binding.ident.clone(), id, snap.clone()));
                Source::Placeholder(snap)
            } else {
                Source::Live
            };
            inner.saved.push(Saved {
                binding: id,
                source,
                hidden_by: NameSet::new(),
            });
        }
        let snapshots: TokenStream = placeholders
            .iter()
            .map(|(ident, id, snap)| self.snapshot_stmt(*id, snap, ident))
            .collect();
        let snaps: Vec<&Ident> = placeholders.iter().map(|(_, _, s)| s).collect();

        // The statements before `t`, lowered for their own sites.
        let prefix_scope = scope.then(ContFrame::Rest {
            stmts: stmts[plan.at..].into(),
            shadowed: NameSet::new(),
        });
        let prefix_code = self.lower_stmts(&plan.prefix, &prefix_scope, &plan.prefix_after);
        let Split {
            items,
            normal_head,
            resume_head,
            post,
        } = self.lower_site_stmt(t, plan.range, &inner);

        let restore = self.restore_code(&plan.exports, &ids);
        let pats = plan.exports.iter().map(|v| binding_pat(&v.binding));
        let names: Vec<&Ident> = plan.exports.iter().map(|v| &v.binding.ident).collect();
        // Fix each slot's type from the local on the normal path, which rustc
        // checks first, so restored values have known types on the resume path.
        let rt = rt();
        let binds = plan
            .exports
            .iter()
            .zip(&ids)
            .filter(|(v, _)| v.transient_init.is_none())
            .map(|(v, id)| {
                let (slot, ident) = (self.slot_ident(*id), &v.binding.ident);
                quote!(#rt::Slot::bind(&#slot, &#ident);)
            });
        let head = Ident::new("__cp_head", Span::mixed_site());
        let resuming = self.resuming_into(plan.range);
        let hoisted: TokenStream = plan.items.iter().map(clean_stmt).collect();
        let after_merge: TokenStream = plan.after_merge.iter().map(clean_stmt).collect();
        let suffix_code: TokenStream = suffix.iter().map(clean_stmt).collect();
        quote! {
            #hoisted
            #items
            #[allow(unused_mut, unused_variables, unused_parens, clippy::let_unit_value)]
            let (#(#pats,)* #(#snaps,)* #head) = if !#resuming {
                #prefix_code
                #snapshots
                let #head = #normal_head;
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

    /// The scope of `t` and of the statements after the split: the rest of
    /// the block follows `t` (with what `t` declares or assigns), and what
    /// the prefix declares hides outer locals of the same name.
    fn inner_scope(&self, stmts: &[Stmt], plan: &split::SplitPlan, scope: &Scope) -> Scope {
        let t = &stmts[plan.at];
        let mut inner = scope.then(ContFrame::Rest {
            stmts: stmts[plan.at + 1..].into(),
            shadowed: match t {
                Stmt::Local(l) => pat_names(&l.pat),
                _ => NameSet::new(),
            },
        });
        if let Some(assigned) = split::assigned_local(t) {
            inner.cont.push(ContFrame::Assigns([assigned].into()));
        }
        inner.bind_inner(&plan.prefix_names);
        inner.ref_locals.retain(|n| !plan.prefix_names.contains(n));
        inner
    }

    /// Deferred locals the prefix definitely assigns are set from here on:
    /// saved at every site after the split; returns their assignments for
    /// the split's resume path.
    fn assign_deferred(&self, prefix: &[Stmt], inner: &mut Scope) -> TokenStream {
        let rt = rt();
        let mut code = TokenStream::new();
        for saved in &mut inner.saved {
            if !matches!(saved.source, Source::Deferred) {
                continue;
            }
            let ident = &self.bindings[saved.binding].ident;
            if deferred::definitely_assigns(&ident.to_string(), prefix) {
                saved.source = Source::Live;
                let slot = &self.bindings[saved.binding].slot;
                code.extend(quote!(#ident = #rt::Slot::take(&mut #slot);));
            }
        }
        code
    }

    /// Code that rebinds exported locals on the resume path, in declaration
    /// order: saved ones from their slots, transient ones by running their
    /// initialiser again.
    fn restore_code(&self, exported: &[Visible], ids: &[usize]) -> TokenStream {
        exported
            .iter()
            .zip(ids)
            .map(|(v, &id)| match (&v.transient_init, &v.transient_pat) {
                (Some(init), Some(pat)) => quote!(let #pat = #init;),
                _ => restore_stmt(&v.binding.ident, &self.bindings[id].slot),
            })
            .collect()
    }

    /// Splits the statement that contains sites `range`.
    fn lower_site_stmt(&mut self, stmt: &Stmt, range: SiteRange, scope: &Scope) -> Split {
        match stmt {
            Stmt::Macro(m) => match sites::marker(&m.attrs) {
                Some(index) => self.checkpoint_split(index, scope),
                None => self.misplaced(range, m.span()),
            },
            Stmt::Expr(expr, semi) => {
                if let Some(index) = direct_site(expr) {
                    let mut split = self.direct_site_split(index, expr, scope);
                    if semi.is_none() {
                        let head = Ident::new("__cp_head", Span::mixed_site());
                        split.post = quote!(#head);
                    }
                    return split;
                }
                if let Expr::Assign(a) = strip_parens(expr) {
                    if sites::sites_in_expr(&a.left).is_none() {
                        // `state = match state { .. checkpoint!() .. };`
                        let left = &a.left;
                        let mut split = match site_with_postfix(&a.right) {
                            Some((index, site_expr, rest)) => {
                                let mut s = self.direct_site_split(index, &site_expr, scope);
                                s.post = rest;
                                s
                            }
                            None => self.lower_ctrl(&a.right, range, scope),
                        };
                        let post = split.post;
                        split.post = quote!(#left = #post #semi);
                        return split;
                    }
                }
                let mut split = self.lower_ctrl(expr, range, scope);
                if semi.is_some() {
                    let post = split.post;
                    split.post = quote!(#post;);
                }
                split
            }
            Stmt::Local(local) => {
                let Some(init) = &local.init else {
                    return self.misplaced(range, local.span());
                };
                if let Some((_, diverge)) = &init.diverge {
                    if let Some(r) = sites::sites_in_expr(diverge) {
                        return self.misplaced(r, diverge.span());
                    }
                }
                let attrs = clean_attrs(&local.attrs);
                let pat = &local.pat;
                let diverge = init.diverge.as_ref().map(|(e, d)| quote!(#e #d));
                if let Some((index, site_expr, rest)) = site_with_postfix(&init.expr) {
                    let mut split = self.direct_site_split(index, &site_expr, scope);
                    split.post = quote!(#(#attrs)* let #pat = #rest #diverge;);
                    return split;
                }
                let mut split = self.lower_ctrl(&init.expr, range, scope);
                let post = split.post;
                split.post = quote!(#(#attrs)* let #pat = #post #diverge;);
                split
            }
            Stmt::Item(_) => self.misplaced(range, stmt.span()),
        }
    }

    fn misplaced(&mut self, range: SiteRange, _span: Span) -> Split {
        let site = self.site(range.first);
        self.errors.push(
            site.span,
            format!(
                "{} must be a statement of its own (or the whole initialiser of a `let`), directly in the workflow body or inside its blocks, `if`, `match` and loops; it cannot be part of a larger expression",
                site.kind.describe()
            ),
        );
        Split {
            items: TokenStream::new(),
            normal_head: quote!(()),
            resume_head: quote!(()),
            post: TokenStream::new(),
        }
    }

    /// `checkpoint!()`: save on the normal path, arrive on the resume path.
    fn checkpoint_split(&mut self, index: u32, scope: &Scope) -> Split {
        let frame = frame_ident();
        let enc = Ident::new("__cp_enc", Span::mixed_site());
        let span = self.site(index).span;
        let SiteFields { loops, fields } = self.site_fields(index, scope);
        Split {
            items: TokenStream::new(),
            normal_head: quote_spanned! {span=>
                #frame.save(#index, #loops, |#enc| { #fields ::core::result::Result::Ok(()) }).await
            },
            resume_head: quote!(#frame.arrive()),
            post: TokenStream::new(),
        }
    }

    /// A suspension call `ctx.wait_for(..).await` as a whole statement or
    /// initialiser: its value comes from the call or, on resume, from the
    /// delivered signal.
    fn direct_site_split(&mut self, index: u32, expr: &Expr, scope: &Scope) -> Split {
        let site = self.site(index).clone();
        if site.kind == SiteKind::Checkpoint {
            return self.checkpoint_split(index, scope);
        }
        let Expr::Await(aw) = strip_parens(expr) else {
            return self.misplaced(
                SiteRange {
                    first: index,
                    last: index,
                },
                site.span,
            );
        };
        let Expr::MethodCall(call) = &*aw.base else {
            return self.misplaced(
                SiteRange {
                    first: index,
                    last: index,
                },
                site.span,
            );
        };
        if let Some(r) = call.args.iter().find_map(sites::sites_in_expr) {
            return self.misplaced(r, call.span());
        }
        let frame = frame_ident();
        let enc = Ident::new("__cp_enc", Span::mixed_site());
        let SiteFields { loops, fields } = self.site_fields(index, scope);
        let method = &call.method;
        let turbofish = call.turbofish.as_ref().map(|t| {
            let args = &t.args;
            quote!(::<#args, _>)
        });
        let args = call.args.iter();
        let span = site.span;
        let normal_head = quote_spanned! {span=>
            #frame.#method #turbofish(#index, #loops, |#enc| { #fields ::core::result::Result::Ok(()) }, #(#args),*).await
        };
        let rt = rt();
        let resume_head = match site.kind {
            SiteKind::Sleep => quote!(#frame.arrive()),
            _ => {
                let slot = Self::wait_slot_ident(index);
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

    /// The loop positions and the field-encoding statements for a site, and
    /// records the site's layout.
    fn site_fields(&mut self, index: u32, scope: &Scope) -> SiteFields {
        let span = self.site(index).span;
        let describe = self.site(index).describe();
        let enc = Ident::new("__cp_enc", Span::mixed_site());
        let rt = rt();
        let mut code = TokenStream::new();
        let mut layout = SiteLayout {
            fields: Vec::new(),
            loops: scope.loop_positions.len() as u32,
        };
        for saved in &scope.saved {
            let binding = &mut self.bindings[saved.binding];
            let name = binding.ident.to_string();
            if matches!(saved.source, Source::Deferred) {
                continue;
            }
            binding.saved_at.push(index);
            layout.fields.push(saved.binding);
            let source = match &saved.source {
                Source::Placeholder(snap) if !liveness::live_after(&name, &scope.cont) => {
                    Source::Snapshot(snap.clone())
                }
                Source::Placeholder(_) => Source::Live,
                other => other.clone(),
            };
            match &source {
                Source::Placeholder(_) => unreachable!("resolved above"),
                Source::Deferred => unreachable!("skipped above"),
                Source::Snapshot(snap) => code.extend(quote!(#enc.encoded(&#snap)?;)),
                Source::Through => {
                    // Saving an inner local of the same name instead would
                    // write its value into the item on resume.
                    if saved.hidden_by.contains(&name) {
                        self.errors.push(
                            span,
                            format!(
                                "the loop item `{name}` must be saved at {describe} because the loop writes through its items, but an inner `{name}` hides it here; rename one of them"
                            ),
                        );
                        continue;
                    }
                    let ident = Ident::new(&name, span.resolved_at(binding.ident.span()));
                    code.extend(quote_spanned! {span=>
                        #rt::save_through(#enc, &#ident)?;
                    });
                }
                Source::Live => {
                    if binding.borrowed {
                        binding.borrowed = false; // one error per local
                        self.errors.push(
                            binding.ident.span(),
                            format!(
                                "`{name}` holds a reference (it is assigned a borrowed value: a string literal, `&..`, `.as_str()`) and is used after {describe}; a reference cannot be saved in a checkpoint: own the value (declare it `let {name}: String;` and assign `\"..\".to_owned()`), or borrow again after the checkpoint"
                            ),
                        );
                        continue;
                    }
                    if saved.hidden_by.contains(&name) {
                        self.errors.push(
                            span,
                            format!(
                                "`{name}` must be saved at {describe} because it is used after it, but an inner `{name}` hides it here; rename one of them"
                            ),
                        );
                        continue;
                    }
                    let ident = Ident::new(&name, span.resolved_at(binding.ident.span()));
                    let ops = &binding.ops;
                    let encode = match order::observed_after(&name, &scope.cont) {
                        Some(observed) => {
                            quote_spanned!(span=> #ops.encode_order_observed(&#ident, #enc, #observed)?;)
                        }
                        None => quote_spanned!(span=> #ops.encode(&#ident, #enc)?;),
                    };
                    code.extend(encode);
                }
            }
        }
        self.layouts[index as usize - 1] = layout;
        let (positions, items) = (&scope.loop_positions, &scope.loop_items);
        let loops = if positions.is_empty() {
            quote!(&[])
        } else {
            quote!(&[#(#positions,)* #rt::LOOP_ITEMS, #(#items),*])
        };
        SiteFields {
            loops,
            fields: code,
        }
    }

    /// Lowers a control-flow expression that contains sites.
    fn lower_ctrl(&mut self, expr: &Expr, range: SiteRange, scope: &Scope) -> Split {
        let unit = || quote!(());
        match expr {
            Expr::Paren(p) => self.lower_ctrl(&p.expr, range, scope),
            Expr::Group(g) => self.lower_ctrl(&g.expr, range, scope),
            Expr::Block(b) => {
                let label = &b.label;
                let block = self.lower_block(&b.block, scope);
                Split {
                    items: TokenStream::new(),
                    normal_head: unit(),
                    resume_head: unit(),
                    post: quote!(#label #block),
                }
            }
            Expr::Loop(l) => {
                let label = &l.label;
                let scope = scope.then(ContFrame::Loop {
                    body: std::rc::Rc::new(l.body.clone()),
                    cond: None,
                    endless: true,
                    label: label.as_ref().map(|l| l.name.ident.to_string()),
                });
                let body = self.lower_block(&l.body, &scope);
                Split {
                    items: TokenStream::new(),
                    normal_head: unit(),
                    resume_head: unit(),
                    post: quote!(#label loop #body),
                }
            }
            Expr::While(w) => self.lower_while(w, scope),
            Expr::ForLoop(f) => self.lower_for(f, scope),
            Expr::If(i) if site_with_postfix(scrutinee_of_if(&i.cond)).is_some() => {
                let block = scrutinee::desugar_if(i);
                self.lower_ctrl(&block, range, scope)
            }
            Expr::Match(m) if site_with_postfix(&m.expr).is_some() => {
                let block = scrutinee::desugar_match(m);
                self.lower_ctrl(&block, range, scope)
            }
            Expr::If(i) => {
                if let Some(r) = if_conditions(i).into_iter().find_map(sites::sites_in_expr) {
                    return self.misplaced(r, i.span());
                }
                let arms = if_arms(i);
                let reentry = match if_rederives(i, &scope.ref_locals) {
                    true => Reentry::Rederive,
                    false => Reentry::Restore,
                };
                self.lower_arms(None, arms, reentry, scope)
            }
            Expr::Match(m) => self.lower_match(m, scope),
            _ => self.misplaced(range, expr.span()),
        }
    }
}

fn clean_attrs(attrs: &[syn::Attribute]) -> Vec<syn::Attribute> {
    attrs
        .iter()
        .filter(|a| !a.path().is_ident("transient"))
        .cloned()
        .collect()
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

fn clean_expr(expr: &Expr) -> TokenStream {
    let mut expr = expr.clone();
    sites::StripMarkers.visit_expr_mut(&mut expr);
    expr.into_token_stream()
}

#[cfg(test)]
mod tests;
