//! Planning loops and branches that hold sites: what a `for` loop keeps
//! (snapshots of what its iterator took, copies at entry, the items it
//! writes through) and how an `if` / `match` is re-entered.

use std::rc::Rc;

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};
use syn::{Block, Expr, Ident};

use super::types::{
    After, ArmBody, ArmPlan, ArmsPlan, Ctrl, EntryCopy, ForItems, ForPlan, Overwrite, Rederived,
    RederivedWhy, Refused, WhileCond, WhilePlan, Why,
};
use super::walk::{Planner, Scope, Source};
use crate::analyse::branches::{
    carried_bindings, if_arms, if_conditions, if_rederives, match_arms, match_reentry, Arm, Reentry,
};
use crate::analyse::iterables;
use crate::analyse::liveness::ContFrame;
use crate::analyse::rewrite::{rebind_after_sites, unpack_carried};
use crate::analyse::scrutinee::{desugar_if, desugar_match, desugar_while, scrutinee_of_if};
use crate::analyse::split::site_with_postfix;
use crate::analyse::syntax::{strip_parens, yields_reference};
use crate::hidden::{binding_pat, carried_ident};
use crate::names::{self, free_in_expr, pat_bindings, pat_names, NameSet, PatBinding};
use crate::sites::{self, SiteRange};

impl Planner<'_> {
    pub(super) fn plan_while(&mut self, w: &syn::ExprWhile, scope: &Scope) -> Ctrl {
        if site_with_postfix(scrutinee_of_if(&w.cond)).is_some() {
            let desugared = desugar_while(w);
            let range = sites::sites_in_expr(&desugared).unwrap_or(SiteRange { first: 1, last: 1 });
            return self.ctrl(&desugared, range, scope);
        }
        if let Some(r) = sites::sites_in_expr(&w.cond) {
            self.report_misplaced(r);
            return Ctrl::Misplaced;
        }
        let Some(range) = sites::sites_in_block(&w.body) else {
            self.report_misplaced(SiteRange { first: 1, last: 1 });
            return Ctrl::Misplaced;
        };
        let scope = &scope.then(ContFrame::Loop {
            body: Rc::new(w.body.clone()),
            cond: Some(Rc::new((*w.cond).clone())),
            endless: false,
            label: w.label.as_ref().map(|l| l.name.ident.to_string()),
        });
        let (cond, body) = match strip_parens(&w.cond) {
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
                let mut body = w.body.clone();
                match syn::parse2::<syn::Stmt>(unpack(&carried)) {
                    Ok(stmt) => body.stmts.insert(0, stmt),
                    Err(e) => self.errors.add(e),
                }
                let cond = WhileCond::Let {
                    pat: l.pat.clone(),
                    expr: l.expr.clone(),
                    carried,
                };
                (cond, self.block(&body, scope))
            }
            cond => (WhileCond::Plain(cond.clone()), self.block(&w.body, scope)),
        };
        Ctrl::While(Box::new(WhilePlan {
            label: w.label.clone(),
            range,
            cond,
            body,
        }))
    }

    /// Bindings that are re-derived on resume (loop items, re-evaluated
    /// `match` arms) but declared `mut` may have changed before the site: save
    /// them too, and on resume overwrite the re-derived value with the saved one.
    fn overwrite(
        &mut self,
        bindings: &[PatBinding],
        used: &NameSet,
        range: SiteRange,
        scope: &mut Scope,
    ) -> Overwrite {
        let mut out = Vec::new();
        for b in bindings
            .iter()
            .filter(|b| b.mutable && used.contains(&b.ident.to_string()))
        {
            let id = self.new_binding(&b.ident, false, true);
            scope.save(id, Source::Live, Why::ChangedBinding);
            out.push((b.ident.clone(), id));
        }
        Overwrite {
            range,
            bindings: out,
        }
    }

    /// A `#[transient]` the loop's iterator borrows cannot be built again
    /// at the sites inside (docs/exactness.md): a resumed run builds it
    /// before the loop and skips the items taken, which is exact when its
    /// only state is that position. A body that uses it could change other
    /// state of it, which would survive a checkpoint uninterrupted and not
    /// a resume: refused.
    fn refuse_transients_used_while_borrowed(
        &mut self,
        scope: &Scope,
        borrowed: &NameSet,
        body_names: &NameSet,
        f: &syn::ExprForLoop,
        range: SiteRange,
    ) {
        for t in &scope.transients {
            let name = t.ident.to_string();
            if t.held
                || t.hidden_by.contains(&name)
                || !borrowed.contains(&name)
                || !body_names.contains(&name)
            {
                continue;
            }
            let site = self.site_info(range.first).describe();
            let why = format!(
                "the `#[transient]` `{name}` is borrowed by the loop `{}` around {site}, so it cannot be built again there (a transient keeps no state across a checkpoint), and the loop's body uses it: what the body changes in it would survive the checkpoint uninterrupted but not a resume; iterate over a saved local (collect what the loop needs before it), or use another `#[transient]` in the body",
                loop_described(f)
            );
            self.errors.push(syn::spanned::Spanned::span(&f.expr), &why);
            sites::numbered_mut(&mut self.plans, range.first)
                .refused
                .push(Refused { name, why });
        }
    }

    pub(super) fn plan_for(&mut self, f: &syn::ExprForLoop, scope: &Scope) -> Ctrl {
        if let Some(r) = sites::sites_in_expr(&f.expr) {
            self.report_misplaced(r);
            return Ctrl::Misplaced;
        }
        let Some(range) = sites::sites_in_block(&f.body) else {
            self.report_misplaced(SiteRange { first: 1, last: 1 });
            return Ctrl::Misplaced;
        };
        let (iter, next, pos, item_fp) = (
            self.fresh("iter"),
            self.fresh("next"),
            self.fresh("pos"),
            self.fresh("item_fp"),
        );
        let iter_names = free_in_expr(&f.expr);
        let body_names = names::free_in_stmts(&f.body.stmts);
        let mut body_scope = scope.clone();
        let snapshots = self.iterable_snapshots(&iter_names, &body_names, &mut body_scope);
        let entries = self.entry_copies(f, &iter_names, &body_names, scope, &mut body_scope);
        // The iterator may borrow what the iterable names across the sites
        // inside (not the locals it is evaluated from copies of): decoded
        // at loop entry on the uninterrupted path, not at the sites.
        let mut borrowed = iter_names.clone();
        for e in &entries {
            borrowed.remove(&e.local.to_string());
        }
        self.refuse_transients_used_while_borrowed(&body_scope, &borrowed, &body_names, f, range);
        body_scope.hold_transients(&borrowed);
        let decoded_at_entry = self
            .hold(&mut body_scope, &borrowed, After::DecodedAtEntry)
            .into_iter()
            .map(|b| {
                let snap = snapshots
                    .iter()
                    .find(|(s, _)| *s == b)
                    .map(|(_, i)| i.clone());
                (b, snap)
            })
            .collect();
        let items = pat_names(&f.pat);
        body_scope.bind_inner(&items);
        if yields_reference(&f.expr, &scope.ref_locals) {
            body_scope.ref_locals.extend(items.iter().cloned());
        }
        body_scope.recreated.retain(|r| !items.contains(&r.name));
        body_scope.rederived.retain(|r| !items.contains(&r.name));
        body_scope
            .rederived
            .extend(items.iter().map(|name| Rederived {
                name: name.clone(),
                why: RederivedWhy::LoopItem,
            }));
        body_scope.loops += 1;
        body_scope.cont.push(ContFrame::Loop {
            body: Rc::new(f.body.clone()),
            cond: None,
            endless: false,
            label: f.label.as_ref().map(|l| l.name.ident.to_string()),
        });
        let items = if iterables::writes_through(&f.expr) {
            self.written_items(f, &mut body_scope)
        } else {
            ForItems::Plain {
                overwrite: self.overwrite(
                    &pat_bindings(&f.pat),
                    &body_names,
                    range,
                    &mut body_scope,
                ),
            }
        };
        let body = self.block(&f.body, &body_scope);
        Ctrl::For(Box::new(ForPlan {
            label: f.label.clone(),
            pat: (*f.pat).clone(),
            iterable: iterables::in_stable_order(&f.expr).unwrap_or_else(|| (*f.expr).clone()),
            range,
            depth: scope.loops,
            described: loop_described(f),
            fingerprinted: !iterables::is_range(&f.expr),
            iter,
            next,
            pos,
            item_fp,
            snapshots,
            decoded_at_entry,
            entries,
            items,
            body,
        }))
    }

    /// Locals only the iterable reads were moved into (or are borrowed by)
    /// the iterator: they are saved as snapshots taken before the loop starts
    /// (issue 32, item 9: also those held by a placeholder).
    fn iterable_snapshots(
        &mut self,
        iter_names: &NameSet,
        body_names: &NameSet,
        body_scope: &mut Scope,
    ) -> Vec<(usize, Ident)> {
        let mut out = Vec::new();
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
                out.push((binding, snap.clone()));
                body_scope.saved[i].source = Source::Snapshot(snap);
            }
        }
        out
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
            body_scope.save(id, Source::Snapshot(snap.clone()), Why::LoopEntry);
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
    fn written_items(&mut self, f: &syn::ExprForLoop, body_scope: &mut Scope) -> ForItems {
        let log = self.fresh("written");
        let pat = &f.pat;
        let pat_text = quote!(#pat).to_string().replace(" ,", ",");
        let log_binding = self.new_binding(&log, false, true);
        self.bindings[log_binding].field_name = Some(format!("{pat_text}@written"));
        body_scope.save(log_binding, Source::Live, Why::WrittenItems);
        let mut bindings = Vec::new();
        for b in pat_bindings(&f.pat) {
            let id = self.new_binding(&b.ident, false, false);
            self.bindings[id].field_name = Some(format!("*{}", b.ident));
            body_scope.save(id, Source::Through, Why::WrittenThrough);
            bindings.push((b.ident.clone(), id));
        }
        ForItems::WritingBack {
            log,
            log_binding,
            cur: self.fresh("item"),
            bindings,
        }
    }

    pub(super) fn plan_if(&mut self, i: &syn::ExprIf, range: SiteRange, scope: &Scope) -> Ctrl {
        if site_with_postfix(scrutinee_of_if(&i.cond)).is_some() {
            return self.ctrl(&desugar_if(i), range, scope);
        }
        if let Some(r) = if_conditions(i).into_iter().find_map(sites::sites_in_expr) {
            self.report_misplaced(r);
            return Ctrl::Misplaced;
        }
        let reentry = match if_rederives(i, &scope.ref_locals) {
            true => Reentry::Rederive,
            false => Reentry::Restore,
        };
        let mut read = NameSet::new();
        for cond in if_conditions(i) {
            read.extend(free_in_expr(cond));
        }
        self.plan_arms(None, if_arms(i), (reentry, read), scope)
    }

    /// A `match` that holds sites in its arms (a site in its scrutinee or a
    /// guard is misplaced).
    pub(super) fn plan_match(
        &mut self,
        m: &syn::ExprMatch,
        range: SiteRange,
        scope: &Scope,
    ) -> Ctrl {
        if site_with_postfix(&m.expr).is_some() {
            return self.ctrl(&desugar_match(m), range, scope);
        }
        if let Some(r) = sites::sites_in_expr(&m.expr) {
            self.report_misplaced(r);
            return Ctrl::Misplaced;
        }
        if let Some(r) = m
            .arms
            .iter()
            .find_map(|a| a.guard.as_ref().and_then(|(_, g)| sites::sites_in_expr(g)))
        {
            self.report_misplaced(r);
            return Ctrl::Misplaced;
        }
        let reentry = match_reentry(m, &scope.ref_locals);
        let rebound;
        let m = match reentry {
            Reentry::Rederive => {
                rebound = rebind_after_sites(m);
                &rebound
            }
            _ => m,
        };
        let arms = match_arms(m, self.ctx);
        // A re-matched `match &mut x` ends its bindings' borrows before
        // each site (`rebind_after_sites`): `x` is replaced there.
        let read = match strip_parens(&m.expr) {
            Expr::Reference(r) if r.mutability.is_some() => NameSet::new(),
            e => free_in_expr(e),
        };
        self.plan_arms(Some(&m.expr), arms, (reentry, read), scope)
    }

    /// An `if` chain or a `match`: each arm that holds a site is planned with
    /// its bindings re-derived (the head evaluated again) or restored (carried
    /// into the arm's body, which unpacks them first).
    /// `read`: the locals the condition or scrutinee reads (which the arms'
    /// bindings may borrow when they are re-derived).
    fn plan_arms(
        &mut self,
        scrutinee: Option<&Expr>,
        arms: Vec<Arm>,
        (reentry, read): (Reentry, NameSet),
        scope: &Scope,
    ) -> Ctrl {
        let ident = Ident::new(
            &format!("__CpArms{}", self.fresh("arms")),
            Span::mixed_site(),
        );
        let rederive = reentry == Reentry::Rederive;
        let mut scope = scope.clone();
        // Only bindings can borrow what the condition reads.
        let decoded_at_entry = match rederive && arms.iter().any(|a| !a.carried.is_empty()) {
            true => {
                scope.hold_transients(&read);
                self.hold(&mut scope, &read, After::DecodedAtEntry)
            }
            false => Vec::new(),
        };
        let scope = &scope;
        let mut planned = Vec::new();
        for arm in arms {
            let Some(range) = arm.sites else {
                planned.push(ArmPlan {
                    head: arm.head,
                    carried: arm.carried,
                    sites: None,
                    body: ArmBody::Plain(arm.body),
                });
                continue;
            };
            let mut body_block: Block = match &arm.body {
                Expr::Block(b) if b.label.is_none() => b.block.clone(),
                other => syn::parse_quote!({ #other }),
            };
            let mut arm_scope = scope.clone();
            let body = if rederive {
                let carried_names: NameSet =
                    arm.carried.iter().map(|b| b.ident.to_string()).collect();
                arm_scope.bind_inner(&carried_names);
                arm_scope.ref_locals.extend(carried_names.iter().cloned());
                arm_scope
                    .recreated
                    .retain(|r| !carried_names.contains(&r.name));
                arm_scope
                    .rederived
                    .retain(|r| !carried_names.contains(&r.name));
                arm_scope
                    .rederived
                    .extend(carried_names.iter().map(|name| Rederived {
                        name: name.clone(),
                        why: RederivedWhy::ArmBinding,
                    }));
                let overwrite = self.overwrite(
                    &arm.carried,
                    &free_in_expr(&arm.body),
                    range,
                    &mut arm_scope,
                );
                ArmBody::Rederived {
                    overwrite,
                    block: self.block(&body_block, &arm_scope),
                }
            } else {
                for b in arm.carried.iter().filter(|b| b.by_ref) {
                    let describe = self.site_info(range.first).describe();
                    self.errors.push(
                        b.ident.span(),
                        format!("`{}` is a reference (`ref` binding) in the branch of {describe}; a reference cannot be saved in a checkpoint: bind by value, or borrow again after the checkpoint", b.ident),
                    );
                }
                match syn::parse2::<syn::Stmt>(unpack(&arm.carried)) {
                    Ok(stmt) => {
                        body_block.stmts.insert(0, stmt);
                        ArmBody::Restored(self.block(&body_block, &arm_scope))
                    }
                    Err(e) => {
                        self.errors.add(e);
                        ArmBody::Broken
                    }
                }
            };
            planned.push(ArmPlan {
                head: arm.head,
                carried: arm.carried,
                sites: Some(range),
                body,
            });
        }
        Ctrl::Arms(Box::new(ArmsPlan {
            scrutinee: scrutinee.cloned(),
            ident,
            reentry,
            arms: planned,
            decoded_at_entry,
        }))
    }
}

/// `let (a, mut b) = <carried>;`, the first statement of a body whose
/// bindings are carried in (see `rewrite::unpack_carried`).
fn unpack(carried: &[PatBinding]) -> TokenStream {
    let pats: Vec<TokenStream> = carried.iter().map(binding_pat).collect();
    unpack_carried(&carried_ident(), &pats)
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
