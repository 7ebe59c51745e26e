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

use std::collections::BTreeMap;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Block, Expr, Ident, Pat, Stmt};

use crate::names::{
    self, free_in_expr, free_in_stmts, pat_bindings, pat_names, NameSet, PatBinding,
};
use crate::parse::Errors;
use crate::sites::{self, Site, SiteKind, SiteRange};

/// A local that some checkpoint saves, or that is re-created on resume.
pub struct Binding {
    pub ident: Ident,
    pub transient: bool,
    /// The sites that save it, in order.
    pub saved_at: Vec<u32>,
}

/// How a saved local is written into a checkpoint.
#[derive(Clone)]
enum Source {
    /// Encode the local itself.
    Live,
    /// Encode a snapshot taken when the enclosing `for` loop started: the local
    /// was moved into (or is borrowed by) the loop's iterator.
    Snapshot(Ident),
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
    /// Locals known to hold references that are re-derived on resume (items
    /// of `for` loops over borrowed collections, bindings of re-evaluated
    /// `match`es): a `match` on them is evaluated again rather than restored.
    ref_locals: NameSet,
}

impl Scope {
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

/// `let x = <restored value of binding id>;`
fn restore_stmt(ident: &Ident, id: usize) -> TokenStream {
    let rt = rt();
    let slot = Lowerer::slot_ident(id);
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

    pub fn slot_ident(binding: usize) -> Ident {
        Ident::new(&format!("__cp_slot_{binding}"), Span::mixed_site())
    }

    pub fn wait_slot_ident(site: u32) -> Ident {
        Ident::new(&format!("__cp_wait_{site}"), Span::mixed_site())
    }

    pub fn save_trait_ident(binding: usize) -> Ident {
        Ident::new(&format!("__CpSave{binding}"), Span::mixed_site())
    }

    /// Registers a local that sites may save; returns its id (and slot).
    fn new_binding(&mut self, ident: &Ident, transient: bool) -> usize {
        self.bindings.push(Binding {
            ident: ident.clone(),
            transient,
            saved_at: Vec::new(),
        });
        self.bindings.len() - 1
    }

    fn site(&self, index: u32) -> &Site {
        &self.sites[index as usize]
    }

    fn is_ctx(&self, name: &str) -> bool {
        self.ctx.is_some_and(|c| c == name)
    }

    /// `matches!(frame.target(), Some(first..=last))`
    fn resuming_into(&self, range: SiteRange) -> TokenStream {
        let frame = frame_ident();
        let (first, last) = (range.first, range.last);
        quote!(::core::matches!(#frame.target(), ::core::option::Option::Some(#first..=#last)))
    }

    /// Lowers the whole body (a block's statements) into statements.
    pub fn lower_body(&mut self, stmts: &[Stmt]) -> TokenStream {
        self.lower_stmts(stmts, &Scope::default(), &NameSet::new())
    }

    fn lower_block(&mut self, block: &Block, scope: &Scope) -> TokenStream {
        let inner = self.lower_stmts(&block.stmts, scope, &NameSet::new());
        quote_spanned!(block.brace_token.span.join()=> { #inner })
    }

    /// Lowers a statement list; `after` are the names read after these
    /// statements by code that can still see their locals.
    fn lower_stmts(&mut self, stmts: &[Stmt], scope: &Scope, after: &NameSet) -> TokenStream {
        let Some(j) = stmts
            .iter()
            .rposition(|s| sites::sites_in_stmt(s).is_some())
        else {
            return stmts.iter().map(clean_stmt).collect();
        };
        let (prefix, t, suffix) = (&stmts[..j], &stmts[j], &stmts[j + 1..]);
        let Some(range) = sites::sites_in_stmt(t) else {
            return TokenStream::new();
        };
        // Items (`fn`, `use`, `struct`, `macro_rules!`) cannot read locals: keep
        // them at this level so the code after the split still sees them.
        let (items, prefix): (Vec<Stmt>, Vec<Stmt>) = prefix
            .iter()
            .cloned()
            .partition(|s| matches!(s, Stmt::Item(_)));
        let prefix = prefix.as_slice();
        let hoisted: TokenStream = items.iter().map(clean_stmt).collect();

        // Which locals declared before `t` does the code after the split read?
        let mut needed = free_in_stmts(suffix);
        needed.extend(after.iter().cloned());
        needed.extend(post_merge_free(t, &inner_refs(scope)));
        let visible = visible_bindings(prefix);
        loop {
            let before = needed.len();
            for v in visible.values() {
                if let Some(init) = &v.transient_init {
                    if needed.contains(&v.binding.ident.to_string()) {
                        needed.extend(free_in_expr(init));
                    }
                }
            }
            if needed.len() == before {
                break;
            }
        }
        let mut exported: Vec<&Visible> = visible
            .values()
            .filter(|v| {
                let name = v.binding.ident.to_string();
                needed.contains(&name) && !self.is_ctx(&name)
            })
            .collect();
        exported.sort_by_key(|v| v.order);

        // The scope of `t` and of the statements after the split.
        let mut inner = scope.clone();
        let prefix_names: NameSet = visible.keys().cloned().collect();
        inner.bind_inner(&prefix_names);
        inner.ref_locals.retain(|n| !prefix_names.contains(n));
        let first_site = self.site(range.first).describe();
        let mut exported_ids = Vec::new();
        for v in &exported {
            if let Some(err) = reference_error(v, &first_site) {
                self.errors.add(err);
            }
            let id = self.new_binding(&v.binding.ident, v.transient_init.is_some());
            exported_ids.push(id);
            if v.transient_init.is_none() {
                inner.saved.push(Saved {
                    binding: id,
                    source: Source::Live,
                    hidden_by: NameSet::new(),
                });
            }
        }

        // The statements before `t`, lowered for their own sites.
        let mut prefix_after = names::free_in_stmts(std::slice::from_ref(t));
        prefix_after.extend(needed.iter().cloned());
        let prefix_code = self.lower_stmts(prefix, scope, &prefix_after);

        let Split {
            items,
            normal_head,
            resume_head,
            post,
        } = self.lower_site_stmt(t, range, &inner);

        let restore = self.restore_code(&exported, &exported_ids);
        let pats = exported.iter().map(|v| binding_pat(&v.binding));
        let names = exported
            .iter()
            .map(|v| &v.binding.ident)
            .collect::<Vec<_>>();
        // Fix each slot's type from the local on the normal path, which rustc
        // checks first, so restored values have known types on the resume path.
        let binds = exported
            .iter()
            .zip(&exported_ids)
            .filter(|(v, _)| v.transient_init.is_none())
            .map(|(v, id)| {
                let slot = Self::slot_ident(*id);
                let ident = &v.binding.ident;
                let rt = rt();
                quote!(#rt::Slot::bind(&#slot, &#ident);)
            });
        let head = Ident::new("__cp_head", Span::mixed_site());
        let resuming = self.resuming_into(range);
        let suffix_code: TokenStream = suffix.iter().map(clean_stmt).collect();
        quote! {
            #hoisted
            #items
            #[allow(unused_mut, unused_variables, unused_parens, clippy::let_unit_value)]
            let (#(#pats,)* #head) = if !#resuming {
                #prefix_code
                let #head = #normal_head;
                #(#binds)*
                (#(#names,)* #head)
            } else {
                #restore
                let #head = #resume_head;
                (#(#names,)* #head)
            };
            #post
            #suffix_code
        }
    }

    /// Code that rebinds exported locals on the resume path, in declaration
    /// order: saved ones from their slots, transient ones by running their
    /// initialiser again.
    fn restore_code(&self, exported: &[&Visible], ids: &[usize]) -> TokenStream {
        exported
            .iter()
            .zip(ids)
            .map(|(v, &id)| match (&v.transient_init, &v.transient_pat) {
                (Some(init), Some(pat)) => quote!(let #pat = #init;),
                _ => restore_stmt(&v.binding.ident, id),
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
        let (positions, fields) = self.site_fields(index, scope);
        Split {
            items: TokenStream::new(),
            normal_head: quote_spanned! {span=>
                #frame.save(#index, &[#(#positions),*], |#enc| { #fields ::core::result::Result::Ok(()) }).await
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
            let mut split = self.checkpoint_split(index, scope);
            split.resume_head = {
                let frame = frame_ident();
                quote!(#frame.arrive())
            };
            return split;
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
        let (positions, fields) = self.site_fields(index, scope);
        let method = &call.method;
        let turbofish = call.turbofish.as_ref().map(|t| {
            let args = &t.args;
            quote!(::<#args, _>)
        });
        let args = call.args.iter();
        let span = site.span;
        let normal_head = quote_spanned! {span=>
            #frame.#method #turbofish(#index, &[#(#positions),*], |#enc| { #fields ::core::result::Result::Ok(()) }, #(#args),*).await
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
    fn site_fields(&mut self, index: u32, scope: &Scope) -> (Vec<Ident>, TokenStream) {
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
            binding.saved_at.push(index);
            let name = binding.ident.to_string();
            layout.fields.push(saved.binding);
            match &saved.source {
                Source::Snapshot(snap) => code.extend(quote!(#enc.encoded(&#snap)?;)),
                Source::Live => {
                    if saved.hidden_by.contains(&name) {
                        self.errors.push(
                            span,
                            format!(
                                "`{name}` must be saved at {describe} because it is used after it, but an inner `{name}` hides it here; rename one of them"
                            ),
                        );
                        continue;
                    }
                    let trait_ident = Self::save_trait_ident(saved.binding);
                    let ident = Ident::new(&name, span.resolved_at(binding.ident.span()));
                    code.extend(quote_spanned! {span=>
                        <_ as #trait_ident>::__cp_encode(&#ident, #enc)?;
                    });
                }
            }
        }
        let _ = rt;
        self.layouts[index as usize] = layout;
        (scope.loop_positions.clone(), code)
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
                let body = self.lower_block(&l.body, scope);
                Split {
                    items: TokenStream::new(),
                    normal_head: unit(),
                    resume_head: unit(),
                    post: quote!(#label loop #body),
                }
            }
            Expr::While(w) => self.lower_while(w, scope),
            Expr::ForLoop(f) => self.lower_for(f, scope),
            Expr::If(i) => {
                if let Some(r) = if_conditions(i).into_iter().find_map(sites::sites_in_expr) {
                    return self.misplaced(r, i.span());
                }
                let arms = if_arms(i);
                let rederive = if_rederives(i, &scope.ref_locals);
                self.lower_arms(None, arms, rederive, scope)
            }
            Expr::Match(m) => {
                if let Some(r) = sites::sites_in_expr(&m.expr) {
                    return self.misplaced(r, m.expr.span());
                }
                if let Some(r) = m
                    .arms
                    .iter()
                    .find_map(|a| a.guard.as_ref().and_then(|(_, g)| sites::sites_in_expr(g)))
                {
                    return self.misplaced(r, m.span());
                }
                let arms = m
                    .arms
                    .iter()
                    .map(|a| {
                        let carried = carried_bindings(&[&a.pat], &a.body, self.ctx);
                        let pat = &a.pat;
                        let guard = a.guard.as_ref().map(|(i, g)| quote!(#i #g));
                        (
                            quote!(#pat #guard),
                            carried,
                            sites::sites_in_expr(&a.body),
                            (*a.body).clone(),
                        )
                    })
                    .collect();
                self.lower_arms(
                    Some(&m.expr),
                    arms,
                    match_rederives(m, &scope.ref_locals),
                    scope,
                )
            }
            _ => self.misplaced(range, expr.span()),
        }
    }

    /// `if` chains and `match`: the head picks an arm and carries the arm's
    /// bindings; the post runs the arm's body.
    ///
    /// On resume the head either restores the bindings of the arm that holds
    /// the site from the checkpoint, or, when the condition / scrutinee is pure
    /// (`rederive`), evaluates it again after the merge, which re-derives
    /// bindings that borrow from restored locals.
    fn lower_arms(
        &mut self,
        scrutinee: Option<&Expr>,
        arms: Vec<(TokenStream, Vec<PatBinding>, Option<SiteRange>, Expr)>,
        rederive: bool,
        scope: &Scope,
    ) -> Split {
        let frame = frame_ident();
        let rt = rt();
        let enum_ident = Ident::new(
            &format!("__CpArms{}", self.fresh("arms")),
            Span::mixed_site(),
        );
        let n = arms.len();
        let params: Vec<Ident> = (0..n).map(|i| format_ident!("T{}", i)).collect();
        let variants: Vec<Ident> = (0..n).map(|i| format_ident!("A{}", i)).collect();
        let items = quote! {
            #[allow(non_camel_case_types, dead_code)]
            enum #enum_ident<#(#params),*> { #(#variants(#params)),* }
        };

        // Bindings saved per arm (restore mode, arms holding sites only).
        let mut saved_ids: Vec<Vec<usize>> = Vec::new();
        for (_, carried, sites, _) in &arms {
            let mut ids = Vec::new();
            if let (Some(range), false) = (sites, rederive) {
                let describe = self.site(range.first).describe();
                for b in carried {
                    if b.by_ref {
                        self.errors.push(
                            b.ident.span(),
                            format!("`{}` is a reference (`ref` binding) used after {describe}; a reference cannot be saved in a checkpoint: bind by value, or borrow again after the checkpoint", b.ident),
                        );
                    }
                    ids.push(self.new_binding(&b.ident, false));
                }
            }
            saved_ids.push(ids);
        }

        // Normal head: evaluate the condition / scrutinee, carry the bindings.
        let carry = |i: usize| {
            let names: Vec<&Ident> = arms[i].1.iter().map(|b| &b.ident).collect();
            let binds = saved_ids[i].iter().zip(&names).map(|(id, name)| {
                let slot = Self::slot_ident(*id);
                quote!(#rt::Slot::bind(&#slot, &#name);)
            });
            let v = &variants[i];
            quote!({ #(#binds)* #enum_ident::#v((#(#names,)*)) })
        };
        let normal_head = match scrutinee {
            Some(scrutinee) => {
                let arms_code = arms.iter().enumerate().map(|(i, (pat, ..))| {
                    let c = carry(i);
                    quote!(#pat => #c,)
                });
                quote!(match #scrutinee { #(#arms_code)* })
            }
            None => {
                // `if` chain: the arm tokens are the conditions; the last arm is
                // the `else` (synthetic when the user wrote none).
                let mut code = TokenStream::new();
                for (i, (cond, ..)) in arms.iter().enumerate() {
                    let c = carry(i);
                    if i + 1 < n {
                        code.extend(quote!(if #cond #c else));
                    } else {
                        code.extend(c);
                    }
                }
                code
            }
        };

        // Resume head (restore mode) and the arms' bodies.
        let site_arms: Vec<usize> = arms
            .iter()
            .enumerate()
            .filter(|(_, a)| a.2.is_some())
            .map(|(i, _)| i)
            .collect();
        let mut resume_arms = Vec::new();
        let mut post_arms = Vec::new();
        for (i, (_, carried, sites, body)) in arms.iter().enumerate() {
            let v = &variants[i];
            let pats = carried.iter().map(binding_pat);
            let Some(range) = sites else {
                let body = clean_expr(body);
                post_arms.push(quote!(#enum_ident::#v((#(#pats,)*)) => #body,));
                continue;
            };
            let mut arm_scope = scope.clone();
            let carried_names: NameSet = carried.iter().map(|b| b.ident.to_string()).collect();
            arm_scope.bind_inner(&carried_names);
            if rederive {
                arm_scope.ref_locals.extend(carried_names.iter().cloned());
            }
            let mut restores = Vec::new();
            for (b, &id) in carried.iter().zip(&saved_ids[i]) {
                arm_scope.saved.push(Saved {
                    binding: id,
                    source: Source::Live,
                    hidden_by: NameSet::new(),
                });
                restores.push(restore_stmt(&b.ident, id));
            }
            if !rederive {
                let names = carried.iter().map(|b| &b.ident);
                let (first, last) = (range.first, range.last);
                let pattern = if Some(&i) == site_arms.last() {
                    quote!(_)
                } else {
                    quote!(::core::option::Option::Some(#first..=#last))
                };
                resume_arms
                    .push(quote!(#pattern => { #(#restores)* #enum_ident::#v((#(#names,)*)) }));
            }
            let overwrite = if rederive {
                self.restore_mutable_bindings(carried, &free_in_expr(body), *range, &mut arm_scope)
            } else {
                TokenStream::new()
            };
            let body_block: Block = match body {
                Expr::Block(b) if b.label.is_none() => b.block.clone(),
                other => syn::parse_quote!({ #other }),
            };
            let body = self.lower_block(&body_block, &arm_scope);
            post_arms.push(quote!(#enum_ident::#v((#(#pats,)*)) => { #overwrite #body }));
        }

        let head = Ident::new("__cp_head", Span::mixed_site());
        if rederive {
            // The condition / scrutinee reads only restored locals and makes no
            // calls: evaluate it again after the merge, when the restored locals
            // have their types, and check it picks the arm that holds the site.
            let checks = arms.iter().zip(&variants).filter_map(|((_, _, sites, _), v)| {
                let range = (*sites)?;
                let (first, last) = (range.first, range.last);
                Some(quote!((::core::option::Option::Some(#first..=#last), #enum_ident::#v(..)) => true,))
            });
            let h = Ident::new("__cp_rederived", Span::mixed_site());
            let post = quote! {
                match match #head {
                    ::core::option::Option::Some(#h) => #h,
                    ::core::option::Option::None => {
                        let #h = #normal_head;
                        let ok = match (#frame.target(), &#h) { #(#checks)* _ => false };
                        if !ok {
                            match #frame.halt(#rt::diverged(&#frame, "the `if`/`match` around the site took another branch when evaluated again on resume")).await {}
                        }
                        #h
                    }
                } { #(#post_arms)* }
            };
            Split {
                items,
                normal_head: quote!(::core::option::Option::Some(#normal_head)),
                resume_head: quote!(::core::option::Option::None),
                post,
            }
        } else {
            Split {
                items,
                normal_head,
                resume_head: quote!(match #frame.target() { #(#resume_arms)* }),
                post: quote!(match #head { #(#post_arms)* }),
            }
        }
    }

    fn lower_while(&mut self, w: &syn::ExprWhile, scope: &Scope) -> Split {
        let unit = quote!(());
        if let Some(r) = sites::sites_in_expr(&w.cond) {
            return self.misplaced(r, w.cond.span());
        }
        let label = &w.label;
        let Some(range) = sites::sites_in_block(&w.body) else {
            return self.misplaced(SiteRange { first: 0, last: 0 }, w.span());
        };
        let resuming = self.resuming_into(range);
        let frame = frame_ident();
        let _ = frame;
        let rt = rt();
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
                let mut body_scope = scope.clone();
                body_scope.bind_inner(&pat_names(&l.pat));
                let mut restores = Vec::new();
                let mut ids = Vec::new();
                for b in &carried {
                    let id = self.new_binding(&b.ident, false);
                    ids.push(id);
                    body_scope.saved.push(Saved {
                        binding: id,
                        source: Source::Live,
                        hidden_by: NameSet::new(),
                    });
                    restores.push(restore_stmt(&b.ident, id));
                }
                let names: Vec<&Ident> = carried.iter().map(|b| &b.ident).collect();
                let pats = carried.iter().map(binding_pat);
                let (pat, e) = (&l.pat, &l.expr);
                let binds = ids.iter().zip(&names).map(|(id, name)| {
                    let slot = Self::slot_ident(*id);
                    quote!(#rt::Slot::bind(&#slot, &#name);)
                });
                head_code = quote! {
                    #[allow(unused_mut, unreachable_patterns)]
                    let (#(#pats,)*) = if !#resuming {
                        match #e { #pat => { #(#binds)* (#(#names,)*) } _ => break }
                    } else {
                        #(#restores)*
                        (#(#names,)*)
                    };
                };
                body_code = self.lower_block(&w.body, &body_scope);
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
    fn restore_mutable_bindings(
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

    fn lower_for(&mut self, f: &syn::ExprForLoop, scope: &Scope) -> Split {
        let unit = quote!(());
        if let Some(r) = sites::sites_in_expr(&f.expr) {
            return self.misplaced(r, f.expr.span());
        }
        let Some(range) = sites::sites_in_block(&f.body) else {
            return self.misplaced(SiteRange { first: 0, last: 0 }, f.span());
        };
        let frame = frame_ident();
        let rt = rt();
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
                snapshots.extend(quote! {
                    let #snap = match #rt::encode(&#ident) {
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

/// A `let` binding of a prefix that is still visible at its end.
struct Visible {
    binding: PatBinding,
    order: usize,
    /// `#[transient]`: the pattern and initialiser to run again on resume.
    transient_pat: Option<Pat>,
    transient_init: Option<Expr>,
    /// The initialiser is `&expr` / `&mut expr`.
    reference_init: bool,
}

/// The bindings declared by top-level `let`s of `stmts` that are visible after
/// them (the last one of each name).
fn visible_bindings(stmts: &[Stmt]) -> BTreeMap<String, Visible> {
    let mut out = BTreeMap::new();
    let mut order = 0;
    for stmt in stmts {
        let Stmt::Local(local) = stmt else { continue };
        let init = local.init.as_ref().map(|i| &*i.expr);
        // `let tag = "n";`: a constant is re-created on resume rather than
        // saved (a `&'static str` could not be deserialized anyway).
        let constant = matches!(&local.pat, Pat::Ident(p) if p.mutability.is_none() && p.by_ref.is_none())
            || matches!(&local.pat, Pat::Type(t) if matches!(&*t.pat, Pat::Ident(p) if p.mutability.is_none() && p.by_ref.is_none()));
        let constant = constant
            && local
                .init
                .as_ref()
                .is_some_and(|i| i.diverge.is_none() && is_constant(&i.expr));
        let transient = constant || local.attrs.iter().any(|a| a.path().is_ident("transient"));
        let reference_init = matches!(init.map(strip_parens), Some(Expr::Reference(_)));
        for binding in pat_bindings(&local.pat) {
            order += 1;
            out.insert(
                binding.ident.to_string(),
                Visible {
                    binding,
                    order,
                    transient_pat: transient.then(|| local.pat.clone()),
                    transient_init: if transient { init.cloned() } else { None },
                    reference_init,
                },
            );
        }
    }
    out
}

fn reference_error(v: &Visible, site: &str) -> Option<syn::Error> {
    if v.transient_init.is_some() {
        return None;
    }
    let name = &v.binding.ident;
    if v.binding.by_ref || v.reference_init {
        return Some(syn::Error::new(
            name.span(),
            format!(
                "`{name}` is a reference that is used after {site}; a reference cannot be saved in a checkpoint: own the value (e.g. `.clone()` / `.to_owned()`), or borrow again after the checkpoint"
            ),
        ));
    }
    None
}

/// Names a statement's code reads after its split point: everything but the
/// head that the normal path evaluates before the split.
fn post_merge_free(stmt: &Stmt, refs: &NameSet) -> NameSet {
    match stmt {
        Stmt::Local(l) => {
            let mut out = NameSet::new();
            if let Some(init) = &l.init {
                match site_with_postfix(&init.expr) {
                    // The chain after the call runs after the split.
                    Some(_) => out.extend(free_in_expr(&init.expr)),
                    None => out.extend(post_merge_free_expr(&init.expr, refs)),
                }
                if let Some((_, d)) = &init.diverge {
                    out.extend(free_in_expr(d));
                }
            }
            out
        }
        Stmt::Expr(e, _) if direct_site(e).is_none() => post_merge_free_expr(e, refs),
        _ => NameSet::new(),
    }
}

fn post_merge_free_expr(expr: &Expr, refs: &NameSet) -> NameSet {
    match expr {
        Expr::Paren(p) => post_merge_free_expr(&p.expr, refs),
        Expr::Group(g) => post_merge_free_expr(&g.expr, refs),
        Expr::If(i) => {
            let mut out: NameSet = if_arms(i)
                .iter()
                .flat_map(|(.., body)| free_in_expr(body))
                .collect();
            if if_rederives(i, refs) {
                out.extend(if_conditions(i).into_iter().flat_map(free_in_expr));
            }
            out
        }
        Expr::Match(m) => {
            let mut out: NameSet = m
                .arms
                .iter()
                .flat_map(|a| {
                    let bound = pat_names(&a.pat);
                    free_in_expr(&a.body)
                        .into_iter()
                        .filter(move |n| !bound.contains(n))
                })
                .collect();
            if match_rederives(m, refs) {
                out.extend(free_in_expr(&m.expr));
                for a in &m.arms {
                    if let Some((_, g)) = &a.guard {
                        let bound = pat_names(&a.pat);
                        out.extend(free_in_expr(g).into_iter().filter(|n| !bound.contains(n)));
                    }
                }
            }
            out
        }
        Expr::ForLoop(f) => {
            let bound = pat_names(&f.pat);
            let mut out: NameSet = names::free_in_stmts(&f.body.stmts)
                .into_iter()
                .filter(|n| !bound.contains(n))
                .collect();
            out.extend(free_in_expr(&f.expr));
            out
        }
        other => free_in_expr(other),
    }
}

/// The arms of an `if` / `else if` / `else` chain: (condition tokens or empty
/// for `else`, carried bindings, sites, body).
fn if_arms(i: &syn::ExprIf) -> Vec<(TokenStream, Vec<PatBinding>, Option<SiteRange>, Expr)> {
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
        out.push((
            quote!(#cond),
            carried,
            sites::sites_in_block(&cur.then_branch),
            body,
        ));
        match &cur.else_branch {
            Some((_, e)) => match &**e {
                Expr::If(next) => cur = next,
                other => {
                    out.push((
                        TokenStream::new(),
                        Vec::new(),
                        sites::sites_in_expr(other),
                        other.clone(),
                    ));
                    break;
                }
            },
            None => {
                out.push((TokenStream::new(), Vec::new(), None, syn::parse_quote!({})));
                break;
            }
        }
    }
    out
}

fn if_conditions(i: &syn::ExprIf) -> Vec<&Expr> {
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
fn let_patterns(cond: &Expr) -> Vec<&Pat> {
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
fn carried_bindings(pats: &[&Pat], body: &Expr, ctx: Option<&Ident>) -> Vec<PatBinding> {
    let used = free_in_expr(body);
    pats.iter()
        .flat_map(|p| pat_bindings(p))
        .filter(|b| used.contains(&b.ident.to_string()) && ctx.is_none_or(|c| b.ident != *c))
        .collect()
}

/// The references a scope is known to hold.
fn inner_refs(scope: &Scope) -> NameSet {
    scope.ref_locals.clone()
}

/// A `match` is resumed by evaluating its scrutinee again (instead of
/// restoring the arm's bindings) when the scrutinee and guards are pure and
/// the arms bind references: the scrutinee is borrowed (`&x`, `x.as_ref()`, a
/// local holding a re-derived reference) or a pattern says `ref`. Bindings
/// that move out of an owned scrutinee are restored instead.
fn match_rederives(m: &syn::ExprMatch, refs: &NameSet) -> bool {
    is_pure(&m.expr)
        && m.arms
            .iter()
            .all(|a| a.guard.as_ref().is_none_or(|(_, g)| is_pure(g)))
        && (yields_reference(&m.expr, refs) || m.arms.iter().any(|a| binds_by_ref(&a.pat)))
}

/// The same for an `if let` chain: every condition pure, and every `let`
/// condition borrowing.
fn if_rederives(i: &syn::ExprIf, refs: &NameSet) -> bool {
    let conds = if_conditions(i);
    let mut lets = conds.iter().flat_map(|c| let_conditions(c)).peekable();
    lets.peek().is_some()
        && conds.iter().all(|c| is_pure(c))
        && lets.all(|l| yields_reference(&l.expr, refs) || binds_by_ref(&l.pat))
}

fn let_conditions(cond: &Expr) -> Vec<&syn::ExprLet> {
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

fn binds_by_ref(pat: &Pat) -> bool {
    pat_bindings(pat).iter().any(|b| b.by_ref)
}

/// Methods that borrow their receiver and return a reference or a borrowing
/// iterator.
const BORROWING_METHODS: &[&str] = &[
    "as_ref",
    "as_mut",
    "as_deref",
    "as_deref_mut",
    "as_str",
    "as_slice",
    "as_bytes",
    "borrow",
    "borrow_mut",
    "iter",
    "iter_mut",
    "chars",
    "bytes",
    "keys",
    "values",
    "values_mut",
    "lines",
];

/// Whether an expression evaluates to a reference (or an iterator of
/// references) into locals, judged from its syntax.
fn yields_reference(expr: &Expr, refs: &NameSet) -> bool {
    match strip_parens(expr) {
        Expr::Reference(_) => true,
        Expr::Path(p) => p
            .path
            .get_ident()
            .is_some_and(|i| refs.contains(&i.to_string())),
        Expr::Field(f) => yields_reference(&f.base, refs),
        Expr::Index(i) => yields_reference(&i.expr, refs),
        Expr::MethodCall(m) => {
            BORROWING_METHODS.contains(&m.method.to_string().as_str())
                || yields_reference(&m.receiver, refs)
        }
        _ => false,
    }
}

/// A literal (`"n"`, `3`, `-1.5`, `b"x"`, `true`) or a path that names a
/// constant by convention (`MAX_RETRIES`, `u32::MAX`).
fn is_constant(expr: &Expr) -> bool {
    match strip_parens(expr) {
        Expr::Lit(_) => true,
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => is_constant(&u.expr),
        Expr::Path(p) => {
            p.qself.is_none()
                && p.path.segments.last().is_some_and(|s| {
                    let name = s.ident.to_string();
                    name.len() > 1
                        && name
                            .chars()
                            .all(|c| c.is_uppercase() || c.is_ascii_digit() || c == '_')
                })
        }
        _ => false,
    }
}

/// An expression that only reads locals: paths, fields, indexing, references,
/// literals, operators, `let` patterns over those, and argument-less method
/// calls (`opt.as_ref()`, `s.as_str()`), which are pure by convention.
/// Evaluating it again on resume gives the same value and re-derives any
/// references it makes into restored locals.
fn is_pure(expr: &Expr) -> bool {
    match expr {
        Expr::Path(_) | Expr::Lit(_) => true,
        Expr::Paren(p) => is_pure(&p.expr),
        Expr::Group(g) => is_pure(&g.expr),
        Expr::Field(f) => is_pure(&f.base),
        Expr::Index(i) => is_pure(&i.expr) && is_pure(&i.index),
        Expr::Reference(r) => is_pure(&r.expr),
        Expr::Unary(u) => is_pure(&u.expr),
        Expr::Binary(b) => is_pure(&b.left) && is_pure(&b.right),
        Expr::Let(l) => is_pure(&l.expr),
        Expr::Tuple(t) => t.elems.iter().all(is_pure),
        Expr::MethodCall(m) => m.args.is_empty() && is_pure(&m.receiver),
        _ => false,
    }
}

fn strip_parens(expr: &Expr) -> &Expr {
    match expr {
        Expr::Paren(p) => strip_parens(&p.expr),
        Expr::Group(g) => strip_parens(&g.expr),
        other => other,
    }
}

/// `ctx.wait_for(..).await.unwrap_or(..)?`: a suspension call at the root of a
/// chain of method calls, field accesses and `?`. Returns the site, the call
/// itself and the chain with the call replaced by the site's value.
fn site_with_postfix(expr: &Expr) -> Option<(u32, Expr, TokenStream)> {
    if let Some(index) = direct_site(expr) {
        let head = Ident::new("__cp_head", Span::mixed_site());
        return Some((index, expr.clone(), quote!(#head)));
    }
    match expr {
        Expr::MethodCall(m) if m.args.iter().all(|a| sites::sites_in_expr(a).is_none()) => {
            let (index, site, rest) = site_with_postfix(&m.receiver)?;
            let (dot, method, turbofish, args) = (&m.dot_token, &m.method, &m.turbofish, &m.args);
            Some((index, site, quote!(#rest #dot #method #turbofish (#args))))
        }
        Expr::Field(f) => {
            let (index, site, rest) = site_with_postfix(&f.base)?;
            let (dot, member) = (&f.dot_token, &f.member);
            Some((index, site, quote!(#rest #dot #member)))
        }
        Expr::Try(t) => {
            let (index, site, rest) = site_with_postfix(&t.expr)?;
            let q = &t.question_token;
            Some((index, site, quote!(#rest #q)))
        }
        _ => None,
    }
}

/// The site number of an expression that *is* a site (not one that contains one).
fn direct_site(expr: &Expr) -> Option<u32> {
    match strip_parens(expr) {
        Expr::Macro(m) => sites::marker(&m.attrs),
        Expr::Await(a) => sites::marker(&a.attrs),
        _ => None,
    }
}

fn clean_attrs(attrs: &[syn::Attribute]) -> Vec<syn::Attribute> {
    attrs
        .iter()
        .filter(|a| !a.path().is_ident("transient"))
        .cloned()
        .collect()
}

/// A user statement emitted unchanged, minus `#[transient]` markers.
fn clean_stmt(stmt: &Stmt) -> TokenStream {
    let mut stmt = stmt.clone();
    sites::StripTransient.visit_stmt_mut(&mut stmt);
    stmt.into_token_stream()
}

fn clean_expr(expr: &Expr) -> TokenStream {
    let mut expr = expr.clone();
    sites::StripTransient.visit_expr_mut(&mut expr);
    expr.into_token_stream()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lowers `body` and returns, for each site, the names of the locals it saves.
    fn saved_per_site(body: TokenStream) -> Vec<(String, Vec<String>)> {
        let mut block: Block = syn::parse2(quote!({ #body })).expect("body parses");
        let ctx = Ident::new("ctx", Span::call_site());
        let sites = sites::number_sites(&mut block, Some(&ctx)).expect("sites");
        let mut lowerer = Lowerer::new(&sites, Some(&ctx));
        lowerer.lower_body(&block.stmts);
        let (bindings, layouts) = lowerer.finish().expect("lowering succeeds");
        sites
            .iter()
            .zip(layouts)
            .map(|(s, l)| {
                (
                    s.key(),
                    l.fields
                        .iter()
                        .map(|&b| bindings[b].ident.to_string())
                        .collect(),
                )
            })
            .collect()
    }

    fn expect(body: TokenStream, want: &[(&str, &[&str])]) {
        let got = saved_per_site(body);
        let want: Vec<(String, Vec<String>)> = want
            .iter()
            .map(|(k, f)| (k.to_string(), f.iter().map(|s| s.to_string()).collect()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn only_locals_used_after_the_site_are_saved() {
        expect(
            quote! {
                let a = 1;
                let client = make_client();
                let b = client.get(a);
                checkpoint!("x");
                b + 1
            },
            &[("x", &["b"])],
        );
    }

    #[test]
    fn uses_inside_macros_count() {
        expect(
            quote! {
                let a = f(1);
                let b = f(2);
                let c = f(3);
                let tag = "constant";
                checkpoint!("x");
                println!("{a} {} {tag}", b);
                vec![c; 2]
            },
            &[("x", &["a", "b", "c"])],
        );
    }

    #[test]
    fn a_local_shadowed_before_its_next_use_is_dead() {
        expect(
            quote! {
                let x = 1;
                let y = x;
                checkpoint!("x");
                let x = 2;
                x + y
            },
            &[("x", &["y"])],
        );
    }

    #[test]
    fn loop_carried_locals_are_live() {
        expect(
            quote! {
                let mut i = 0;
                let unused_after = 5;
                let total = unused_after * 2;
                loop {
                    checkpoint!("top");
                    i += 1;
                    if i > 3 { break; }
                }
                total
            },
            &[("top", &["i", "total"])],
        );
    }

    #[test]
    fn for_loop_iterables_are_snapshotted_and_bindings_rederived() {
        expect(
            quote! {
                let tasks = vec![1, 2, 3];
                let mut done = Vec::new();
                for t in &tasks {
                    let doubled = t * 2;
                    checkpoint!("task");
                    done.push(doubled + t);
                }
                done
            },
            &[("task", &["tasks", "done", "doubled"])],
        );
    }

    #[test]
    fn match_arm_bindings_are_restored_when_the_scrutinee_is_a_call() {
        expect(
            quote! {
                match fetch() {
                    Some(v) => { checkpoint!("got"); v + 1 }
                    None => 0,
                }
            },
            &[("got", &["v"])],
        );
    }

    #[test]
    fn pure_scrutinees_are_evaluated_again_instead() {
        expect(
            quote! {
                let opt = fetch();
                match &opt {
                    Some(v) => { checkpoint!("got"); v + 1 }
                    None => 0,
                }
            },
            &[("got", &["opt"])],
        );
    }

    #[test]
    fn suspension_points_are_sites() {
        expect(
            quote! {
                let vendor = load();
                let approval: Approval = ctx.wait_for("finance").await;
                ctx.sleep(d).await;
                (vendor, approval)
            },
            &[("#1", &["vendor"]), ("#2", &["vendor", "approval"])],
        );
    }

    #[test]
    fn transient_locals_are_recreated_not_saved() {
        expect(
            quote! {
                let url = config();
                #[transient]
                let client = Client::new(&url);
                checkpoint!("a");
                client.get()
            },
            &[("a", &["url"])],
        );
    }

    fn expansion_size(sites: usize) -> usize {
        let mut stmts = TokenStream::new();
        for i in 0..sites {
            let label = format!("s{i}");
            stmts.extend(quote! {
                for i in 0..n {
                    let mut j = 0;
                    while j < i { j += 1; total += j; checkpoint!(#label); }
                }
            });
        }
        let item: syn::ItemFn = syn::parse2(quote! {
            async fn wf(ctx: &Ctx, n: u64) -> u64 { let mut total = 0; #stmts total }
        })
        .expect("parses");
        crate::expand::workflow(TokenStream::new(), quote!(#item))
            .expect("expands")
            .to_string()
            .len()
    }

    #[test]
    fn expansion_grows_linearly_with_the_number_of_sites() {
        let (s10, s20, s40) = (expansion_size(10), expansion_size(20), expansion_size(40));
        eprintln!("expansion size for 10/20/40 sites: {s10} / {s20} / {s40} bytes");
        // Each extra site adds about the same amount of code.
        let per_site_a = (s20 - s10) as f64 / 10.0;
        let per_site_b = (s40 - s20) as f64 / 20.0;
        assert!(
            per_site_b < per_site_a * 1.5,
            "expansion is super-linear: {s10} {s20} {s40}"
        );
    }

    #[test]
    fn errors_name_the_variable_and_the_site() {
        let mut block: Block = syn::parse2(quote!({
            let data = vec![1];
            let r = &data;
            checkpoint!("after");
            r.len()
        }))
        .expect("parses");
        let sites = sites::number_sites(&mut block, None).expect("sites");
        let mut lowerer = Lowerer::new(&sites, None);
        lowerer.lower_body(&block.stmts);
        let err = lowerer
            .finish()
            .err()
            .expect("a reference live across a checkpoint is an error");
        let msg = err.to_string();
        assert!(
            msg.contains("`r` is a reference") && msg.contains("checkpoint \"after\""),
            "{msg}"
        );
    }
}
