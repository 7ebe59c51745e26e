//! The walk that plans a body: statement lists and their splits, the
//! statement each is split at, and each site's fields ([`Planner::site`]).
//! Loops and branches are in `control`.

use std::rc::Rc;

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Block, Expr, Ident, Stmt};

use super::types::{
    After, Binding, BlockPlan, BlockStmts, BodyPlan, Ctrl, Export, Field, Rebuilt, Recreated,
    RecreatedWhy, Rederived, Refused, Save, SiteCall, SitePlan, SiteStmt, SplitNode, Stmts, Why,
    Wrap,
};
use crate::analyse::liveness::{self, ContFrame};
use crate::analyse::split::{self, direct_site, site_with_postfix, SplitPlan};
use crate::analyse::syntax::strip_parens;
use crate::analyse::{deferred, order, syntax};
use crate::errors::Errors;
use crate::names::{free_in_expr, free_in_stmts, pat_names, NameSet};
use crate::sites::{self, Site, SiteKind, SiteRange};

/// Where a saved local's value comes from while planning (resolved into a
/// [`Save`] at each site).
#[derive(Clone)]
pub(super) enum Source {
    Live,
    Snapshot(Ident),
    Through,
    /// A local declared without a value (`let x;`, hoisted to the top of its
    /// block) that may still be unassigned here: never saved. From the split
    /// whose prefix assigns it on, it is `Live` (see `deferred`).
    Deferred,
    /// A local assigned again after the split (`state = match state { .. }`):
    /// where it is live, itself; where it is dead (moved, about to be
    /// assigned), the snapshot taken at the split, so that the resume path has
    /// a value of its type that nothing reads before the assignment.
    Placeholder(Ident),
}

#[derive(Clone)]
pub(super) struct Saved {
    pub binding: usize,
    pub source: Source,
    pub why: Why,
    /// Names bound in scopes nested inside the one that declared this local;
    /// if one equals this local's name, the local cannot be named at the site.
    pub hidden_by: NameSet,
    /// A deferred local of the block being planned (hoisted to its top): a
    /// later `let` of the same name in that block ends it, since no code of
    /// the block can name it again (`let d: u64; .. let d = d + 1;`).
    pub hoisted_here: bool,
    /// Borrowed around the code being planned: by an enclosing loop's
    /// iterator or re-derived branch (decoded when it was entered), or by a
    /// `#[transient]` (kept).
    pub held: Option<After>,
}

/// A `#[transient]` local in scope: the sites after which the code reads it
/// build it again on the uninterrupted path (see [`Rebuilt`]).
#[derive(Clone)]
pub(super) struct InScopeTransient {
    pub ident: Ident,
    pub pat: syn::Pat,
    pub init: Expr,
    /// The names its initialiser reads.
    pub inputs: NameSet,
    /// Names bound in scopes nested inside the one that declared it: if one
    /// is its name or an input's, it cannot be built again there.
    pub hidden_by: NameSet,
    /// Borrowed around the code being planned (by a loop's iterator, a
    /// re-derived branch, a closure or another transient): it cannot be
    /// replaced at the sites inside, and is kept (docs/exactness.md).
    pub held: bool,
    /// Built after the merge of the split whose head is being planned: a
    /// site that is that head comes before it.
    pub after_head: bool,
    /// Handed over by the split whose head is being planned: a site that is
    /// that head binds it anew (`let`); elsewhere it is assigned.
    pub here: bool,
}

/// What is in scope at a point of the body.
#[derive(Clone, Default)]
pub(super) struct Scope {
    pub saved: Vec<Saved>,
    /// `#[transient]` locals, in declaration order.
    pub transients: Vec<InScopeTransient>,
    /// How many `for` loops enclose it.
    pub loops: usize,
    /// Locals known to hold references that are re-derived on resume (items
    /// of `for` loops over borrowed collections, bindings of re-evaluated
    /// `match`es): a `match` on them is evaluated again rather than restored.
    pub ref_locals: NameSet,
    /// Locals re-created or re-derived on resume (for the site plans).
    pub recreated: Vec<Recreated>,
    pub rederived: Vec<Rederived>,
    /// What runs after the code being planned (see `liveness`).
    pub cont: Vec<ContFrame>,
}

impl Scope {
    pub fn then(&self, frame: ContFrame) -> Scope {
        let mut s = self.clone();
        s.cont.push(frame);
        s
    }

    pub fn bind_inner(&mut self, names: &NameSet) {
        for s in &mut self.saved {
            s.hidden_by.extend(names.iter().cloned());
        }
        for t in &mut self.transients {
            t.hidden_by.extend(names.iter().cloned());
        }
    }

    /// Marks the transients named in `names` as borrowed from now on.
    pub fn hold_transients(&mut self, names: &NameSet) {
        for t in &mut self.transients {
            let name = t.ident.to_string();
            if names.contains(&name) && !t.hidden_by.contains(&name) {
                t.held = true;
            }
        }
    }

    /// A `#[transient]` `let` comes into scope.
    fn declare_transient(&mut self, pat: &syn::Pat, init: &Expr, after_head: bool) {
        let here = !after_head;
        // A closure has a type of its own per expression: built once
        // (docs/exactness.md, the row on closures).
        if syntax::holds_anonymous_type(init) {
            return;
        }
        for binding in crate::names::pat_bindings(pat) {
            self.transients.push(InScopeTransient {
                ident: binding.ident,
                pat: pat.clone(),
                init: init.clone(),
                inputs: free_in_expr(init),
                hidden_by: NameSet::new(),
                held: false,
                after_head,
                here,
            });
        }
    }

    pub fn save(&mut self, binding: usize, source: Source, why: Why) {
        self.saved.push(Saved {
            binding,
            source,
            why,
            hidden_by: NameSet::new(),
            hoisted_here: false,
            held: None,
        });
    }
}
pub(crate) struct Planner<'a> {
    pub sites: &'a [Site],
    pub ctx: Option<&'a Ident>,
    pub bindings: Vec<Binding>,
    pub plans: Vec<SitePlan>,
    counter: usize,
    pub errors: Errors,
}

impl<'a> Planner<'a> {
    pub fn new(sites: &'a [Site], ctx: Option<&'a Ident>) -> Self {
        Planner {
            sites,
            ctx,
            bindings: Vec::new(),
            plans: vec![SitePlan::default(); sites.len()],
            counter: 0,
            errors: Errors::default(),
        }
    }

    pub fn plan(mut self, stmts: &[Stmt]) -> BodyPlan {
        let body = self.block_stmts(stmts, &Scope::default());
        BodyPlan {
            bindings: self.bindings,
            sites: self.plans,
            body,
            errors: self.errors.finish().err(),
        }
    }

    /// A generated variable's name, unique in the body.
    pub fn fresh(&mut self, what: &str) -> Ident {
        self.counter += 1;
        Ident::new(&format!("__cp_{what}_{}", self.counter), Span::mixed_site())
    }

    pub fn site_info(&self, number: u32) -> &Site {
        sites::numbered(self.sites, number)
    }

    /// Registers a local that sites may save; returns its id.
    pub fn new_binding(&mut self, ident: &Ident, transient: bool, mutable: bool) -> usize {
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

    /// Marks the saved locals of `scope` named in `names` (and visible
    /// there) as borrowed from now on (`how`: what the uninterrupted path
    /// does with them at the sites inside); returns those no enclosing code
    /// held already.
    pub fn hold(&self, scope: &mut Scope, names: &NameSet, how: After) -> Vec<usize> {
        let mut out = Vec::new();
        for s in &mut scope.saved {
            if matches!(s.source, Source::Deferred | Source::Through) {
                continue;
            }
            let name = self.bindings[s.binding].ident.to_string();
            if !names.contains(&name) || s.hidden_by.contains(&name) || s.held.is_some() {
                continue;
            }
            out.push(s.binding);
            s.held = Some(how);
        }
        out
    }

    pub fn block(&mut self, block: &Block, scope: &Scope) -> BlockPlan {
        BlockPlan {
            span: block.brace_token.span.join(),
            stmts: self.block_stmts(&block.stmts, scope),
        }
    }

    /// A block's statements: the declarations that can be deferred (see
    /// `deferred`) are hoisted to its top, then the rest is planned.
    fn block_stmts(&mut self, stmts: &[Stmt], scope: &Scope) -> BlockStmts {
        if !stmts.iter().any(|s| sites::sites_in_stmt(s).is_some()) {
            return BlockStmts::Plain(stmts.to_vec());
        }
        let hoisted = deferred::hoist(stmts);
        let (closures, rest) = deferred::hoist_transient_closures(&hoisted.stmts);
        let mut scope = scope.clone();
        for saved in &mut scope.saved {
            saved.hoisted_here = false;
        }
        let names: NameSet = hoisted.locals.iter().map(|d| d.ident.to_string()).collect();
        scope.bind_inner(&names);
        scope.ref_locals.retain(|n| !names.contains(n));
        let mut deferred = Vec::new();
        for d in hoisted.locals {
            let id = self.new_binding(&d.ident, false, true);
            self.bindings[id].migration = d.migration();
            self.bindings[id].borrowed = d.borrowed;
            scope.save(id, Source::Deferred, Why::AssignedDeferred);
            if let Some(saved) = scope.saved.last_mut() {
                saved.hoisted_here = true;
            }
            deferred.push((d, id));
        }
        // What the block's `#[transient]` closures capture stays borrowed
        // by them at its sites.
        self.hold(&mut scope, &free_in_stmts(&closures), After::Kept);
        scope.hold_transients(&free_in_stmts(&closures));
        let body = self.stmts(&rest, &scope, &NameSet::new());
        BlockStmts::Split {
            deferred,
            closures,
            body,
        }
    }

    /// Plans a statement list; `after` are the names read after these
    /// statements by code that can still see their locals.
    fn stmts(&mut self, stmts: &[Stmt], scope: &Scope, after: &NameSet) -> Stmts {
        let Some(plan) = split::plan_split(stmts, after, &scope.ref_locals, self.ctx, self.sites)
        else {
            return Stmts::Plain(stmts.to_vec());
        };
        for e in plan.errors.iter().cloned() {
            sites::numbered_mut(&mut self.plans, plan.range.first)
                .refused
                .push(Refused {
                    name: e.0.to_string(),
                    why: e.1.to_string(),
                });
            self.errors.add(e.1);
        }
        let (t, suffix) = (&stmts[plan.at], &stmts[plan.at + 1..]);
        let mut inner = self.inner_scope(stmts, &plan, scope);
        let assigned_deferred = self.assign_deferred(&stmts[..plan.at], &mut inner);

        // Handed-over locals: a binding each, saved (or a placeholder, or
        // re-created) at the sites after the split.
        let mut exports = Vec::new();
        for v in &plan.exports {
            let transient = v.transient_init.is_some();
            let id = self.new_binding(&v.binding.ident, transient, v.binding.mutable);
            self.bindings[id].migration = v.migration.clone();
            let mut export = Export {
                binding: v.binding.clone(),
                id,
                recreate: None,
                placeholder: None,
            };
            if let (Some(init), Some(pat)) = (&v.transient_init, &v.transient_pat) {
                if !v.constant {
                    inner.declare_transient(pat, init, false);
                }
                export.recreate = Some((pat.clone(), init.clone()));
                inner.recreated.push(Recreated {
                    name: v.binding.ident.to_string(),
                    why: match v.constant {
                        true => RecreatedWhy::Constant,
                        false => RecreatedWhy::Transient,
                    },
                });
                exports.push(export);
                continue;
            }
            let source = if plan.reassigned(stmts, v) {
                let snap = self.fresh("placeholder");
                export.placeholder = Some(snap.clone());
                Source::Placeholder(snap)
            } else {
                Source::Live
            };
            inner.save(id, source, Why::ReadAfter);
            exports.push(export);
        }

        // Transients moved after the merge run again on resume too.
        for stmt in &plan.after_merge {
            let Stmt::Local(local) = stmt else { continue };
            let declared = local.attrs.iter().any(|a| a.path().is_ident("transient"));
            if let (true, Some(init)) = (declared, &local.init) {
                inner.declare_transient(&local.pat, &init.expr, true);
            }
            inner
                .recreated
                .extend(pat_names(&local.pat).into_iter().map(|name| Recreated {
                    name,
                    why: match declared {
                        true => RecreatedWhy::Transient,
                        false => RecreatedWhy::Constant,
                    },
                }));
        }

        // What the transients read may stay borrowed by them at the sites
        // after the split (a closure capturing it, `scorer(&keywords)`): a
        // closure's captures are kept; what a transient that sites build
        // again reads is decoded where it is built again too (see
        // `plan_site`), and kept where it is not.
        let mut kept_inputs = NameSet::new();
        let inits = plan
            .after_merge
            .iter()
            .filter_map(|stmt| match stmt {
                Stmt::Local(l) => Some(&*l.init.as_ref()?.expr),
                _ => None,
            })
            .chain(exports.iter().filter_map(|e| Some(&e.recreate.as_ref()?.1)));
        for init in inits {
            let read = free_in_expr(init);
            if syntax::holds_anonymous_type(init) {
                kept_inputs.extend(read.iter().cloned());
            }
        }
        self.hold(&mut inner, &kept_inputs, After::Kept);
        // A transient a closure captures stays as it is; one another
        // transient reads is built again with it (`wanted_again`).
        inner.hold_transients(&kept_inputs);

        // The statements before `t`, planned for their own sites.
        let prefix_scope = scope.then(ContFrame::Rest {
            stmts: stmts[plan.at..].into(),
            shadowed: NameSet::new(),
        });
        let prefix = self.stmts(&plan.prefix, &prefix_scope, &plan.prefix_after);
        let head = self.site_stmt(t, plan.range, &inner);
        Stmts::Split(Box::new(SplitNode {
            range: plan.range,
            items: plan.items,
            exports,
            assigned_deferred,
            prefix,
            head,
            after_merge: plan.after_merge,
            suffix: suffix.to_vec(),
        }))
    }

    /// The scope of `t` and of the statements after the split: the rest of
    /// the block follows `t` (with what `t` declares or assigns), and what
    /// the prefix declares hides outer locals of the same name.
    fn inner_scope(&self, stmts: &[Stmt], plan: &SplitPlan, scope: &Scope) -> Scope {
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
        // A deferred local of this block that the prefix declares again is
        // gone for the rest of the block: not saved, not refused as hidden.
        inner.saved.retain(|s| {
            !(s.hoisted_here
                && plan
                    .prefix_names
                    .contains(&self.bindings[s.binding].ident.to_string()))
        });
        inner.ref_locals.retain(|n| !plan.prefix_names.contains(n));
        inner
            .recreated
            .retain(|r| !plan.prefix_names.contains(&r.name));
        // What the prefix declares again hides the outer transient for the
        // rest of the block: no code of it can name that one.
        inner
            .transients
            .retain(|t| !plan.prefix_names.contains(&t.ident.to_string()));
        inner
            .rederived
            .retain(|r| !plan.prefix_names.contains(&r.name));
        inner
    }

    /// Deferred locals the prefix definitely assigns are set from here on:
    /// saved at every site after the split; returns their bindings.
    fn assign_deferred(&self, prefix: &[Stmt], inner: &mut Scope) -> Vec<usize> {
        let mut out = Vec::new();
        for saved in &mut inner.saved {
            if !matches!(saved.source, Source::Deferred) {
                continue;
            }
            let ident = &self.bindings[saved.binding].ident;
            if deferred::definitely_assigns(&ident.to_string(), prefix) {
                saved.source = Source::Live;
                out.push(saved.binding);
            }
        }
        out
    }

    /// Plans the statement that contains sites `range`.
    fn site_stmt(&mut self, stmt: &Stmt, range: SiteRange, scope: &Scope) -> SiteStmt {
        match stmt {
            Stmt::Macro(m) => match sites::marker(&m.attrs) {
                Some(index) => self.site(index, None, None, Wrap::Expr { semi: true }, scope),
                None => self.misplaced(range),
            },
            Stmt::Expr(expr, semi) => {
                let semi_bool = semi.is_some();
                if let Some(index) = direct_site(expr) {
                    let wrap = Wrap::Expr { semi: semi_bool };
                    return self.site(index, Some(expr), None, wrap, scope);
                }
                if let Expr::Assign(a) = strip_parens(expr) {
                    if sites::sites_in_expr(&a.left).is_none() {
                        // `state = match state { .. checkpoint!() .. };`
                        let wrap = Wrap::Assign {
                            left: (*a.left).clone(),
                            semi: *semi,
                        };
                        return match site_with_postfix(&a.right) {
                            Some((index, site_expr, rest)) => {
                                self.site(index, Some(&site_expr), Some(rest), wrap, scope)
                            }
                            None => self.ctrl_stmt(&a.right, range, wrap, scope),
                        };
                    }
                }
                self.ctrl_stmt(expr, range, Wrap::Expr { semi: semi_bool }, scope)
            }
            Stmt::Local(local) => {
                let Some(init) = &local.init else {
                    return self.misplaced(range);
                };
                if let Some((_, diverge)) = &init.diverge {
                    if let Some(r) = sites::sites_in_expr(diverge) {
                        return self.misplaced(r);
                    }
                }
                let wrap = Wrap::Let {
                    attrs: local
                        .attrs
                        .iter()
                        .filter(|a| !a.path().is_ident("transient"))
                        .cloned()
                        .collect(),
                    pat: local.pat.clone(),
                    diverge: init.diverge.as_ref().map(|(e, d)| quote!(#e #d)),
                };
                match site_with_postfix(&init.expr) {
                    Some((index, site_expr, rest)) => {
                        self.site(index, Some(&site_expr), Some(rest), wrap, scope)
                    }
                    None => self.ctrl_stmt(&init.expr, range, wrap, scope),
                }
            }
            Stmt::Item(_) => self.misplaced(range),
        }
    }

    fn ctrl_stmt(&mut self, expr: &Expr, range: SiteRange, wrap: Wrap, scope: &Scope) -> SiteStmt {
        match self.ctrl(expr, range, scope) {
            Ctrl::Misplaced => SiteStmt::Misplaced,
            ctrl => SiteStmt::Ctrl { ctrl, wrap },
        }
    }

    /// Reports a site where none can be (the first of `range`).
    pub fn misplaced(&mut self, range: SiteRange) -> SiteStmt {
        self.report_misplaced(range);
        SiteStmt::Misplaced
    }

    pub fn report_misplaced(&mut self, range: SiteRange) {
        let site = self.site_info(range.first);
        let (span, kind) = (site.span, site.kind.describe());
        self.errors.push(
            span,
            format!(
                "{kind} must be a statement of its own (or the whole initialiser of a `let`), directly in the workflow body or inside its blocks, `if`, `match` and loops; it cannot be part of a larger expression"
            ),
        );
    }

    /// A site as a whole statement or initialiser (`expr` the site's
    /// expression; `None` for a `checkpoint!()` statement).
    fn site(
        &mut self,
        number: u32,
        expr: Option<&Expr>,
        rest: Option<TokenStream>,
        wrap: Wrap,
        scope: &Scope,
    ) -> SiteStmt {
        let one = SiteRange {
            first: number,
            last: number,
        };
        let call = match self.site_info(number).kind {
            SiteKind::Checkpoint => SiteCall::Checkpoint,
            _ => {
                let Some(Expr::Await(aw)) = expr.map(strip_parens) else {
                    return self.misplaced(one);
                };
                let Expr::MethodCall(call) = &*aw.base else {
                    return self.misplaced(one);
                };
                if let Some(r) = call.args.iter().find_map(sites::sites_in_expr) {
                    return self.misplaced(r);
                }
                SiteCall::Suspend(call.clone())
            }
        };
        self.plan_site(number, scope);
        SiteStmt::Site {
            site: number,
            call,
            rest,
            wrap,
        }
    }

    /// What site `index` saves, given what is in scope there: its plan.
    fn plan_site(&mut self, number: u32, scope: &Scope) {
        let span = self.site_info(number).span;
        let describe = self.site_info(number).describe();
        let mut plan = SitePlan {
            fields: Vec::new(),
            loops: scope.loops as u32,
            recreated: scope.recreated.clone(),
            rederived: scope.rederived.clone(),
            refused: std::mem::take(&mut sites::numbered_mut(&mut self.plans, number).refused),
            rebuilt: Vec::new(),
            rebuilt_reads_rebuilt: false,
        };
        let rebuilt = self.plan_rebuilt(number, scope, &mut plan);
        for saved in &scope.saved {
            let binding = &mut self.bindings[saved.binding];
            let name = binding.ident.to_string();
            if matches!(saved.source, Source::Deferred) {
                continue;
            }
            binding.saved_at.push(number);
            let save = match &saved.source {
                Source::Placeholder(snap) if !liveness::live_after(&name, &scope.cont) => {
                    Save::Snapshot(snap.clone())
                }
                Source::Snapshot(snap) => Save::Snapshot(snap.clone()),
                Source::Through => Save::Through,
                Source::Live | Source::Placeholder(_) => Save::Live {
                    order_observed: None,
                },
                Source::Deferred => unreachable!("skipped above"),
            };
            // Saving an inner local of the same name instead would write
            // its value into the item on resume (or save the wrong local).
            let refusal = match &save {
                Save::Through if saved.hidden_by.contains(&name) => Some((span, format!(
                    "the loop item `{name}` must be saved at {describe} because the loop writes through its items, but an inner `{name}` hides it here; rename one of them"
                ))),
                Save::Live { .. } if binding.borrowed => {
                    binding.borrowed = false; // one error per local
                    Some((binding.ident.span(), format!(
                        "`{name}` holds a reference (it is assigned a borrowed value: a string literal, `&..`, `.as_str()`) and is used after {describe}; a reference cannot be saved in a checkpoint: own the value (declare it `let {name}: String;` and assign `\"..\".to_owned()`), or borrow again after the checkpoint"
                    )))
                }
                Save::Live { .. } if saved.hidden_by.contains(&name) => Some((span, format!(
                    "`{name}` must be saved at {describe} because it is used after it, but an inner `{name}` hides it here; rename one of them"
                ))),
                _ => None,
            };
            // A transient that reads it and is not built again here keeps
            // borrowing it (docs/exactness.md).
            let kept_by_transient = scope.transients.iter().any(|t| {
                t.inputs.contains(&name)
                    && !t.hidden_by.contains(&name)
                    && !t.after_head
                    && !rebuilt.contains(&t.ident.to_string())
            });
            let after = match (&save, saved.held) {
                (Save::Live { .. }, None) if kept_by_transient => After::Kept,
                (Save::Live { .. }, None) | (Save::Through, _) => After::Decoded,
                (Save::Live { .. }, Some(held)) => held,
                (Save::Snapshot(_), _) => After::Snapshot,
            };
            if let Some((at, why)) = refusal {
                self.errors.push(at, &why);
                plan.fields.push(Field {
                    binding: saved.binding,
                    save,
                    why: saved.why,
                    after,
                });
                plan.refused.push(Refused { name, why });
                continue;
            }
            let save = match save {
                Save::Live { .. } => Save::Live {
                    order_observed: order::observed_after(&name, &scope.cont),
                },
                other => other,
            };
            plan.fields.push(Field {
                binding: saved.binding,
                save,
                why: saved.why,
                after,
            });
        }
        *sites::numbered_mut(&mut self.plans, number) = plan;
    }

    /// The transients site `number` builds again on the uninterrupted path
    /// (docs/exactness.md): those the code after it reads and the ones their
    /// initialisers read ([`wanted_again`]), unless they are borrowed around
    /// it (kept) or built after it. One whose name or input
    /// an inner local hides there is refused: it could not be built from
    /// the same values. Returns the names built again.
    fn plan_rebuilt(&mut self, number: u32, scope: &Scope, plan: &mut SitePlan) -> NameSet {
        let mut names = NameSet::new();
        let describe = self.site_info(number).describe();
        let span = self.site_info(number).span;
        let wanted = wanted_again(scope);
        for t in &scope.transients {
            let name = t.ident.to_string();
            if !wanted.contains(&name) {
                continue;
            }
            let hidden = std::iter::once(&name)
                .chain(&t.inputs)
                .find(|n| t.hidden_by.contains(*n));
            if let Some(hidden) = hidden {
                let why = format!(
                    "the `#[transient]` `{name}` is built again after {describe} (a transient keeps no state across a checkpoint: a resumed run builds it there too), but an inner `{hidden}` hides {what} here; rename one of them",
                    what = if *hidden == name { "it" } else { "what it is built from" },
                );
                self.errors.push(span, &why);
                plan.refused.push(Refused { name, why });
                continue;
            }
            if !t.here && syntax::assignee(&t.pat).is_none() {
                let why = format!(
                    "the `#[transient]` `{name}` is built again after {describe} (a transient keeps no state across a checkpoint: a resumed run builds it there too), which assigns it there, and its pattern cannot be assigned; bind it to one name (`let {name} = ..`)"
                );
                self.errors.push(t.ident.span(), &why);
                plan.refused.push(Refused { name, why });
                continue;
            }
            let same = |r: &Rebuilt| {
                let (a, b) = (&r.pat, &t.pat);
                quote!(#a).to_string() == quote!(#b).to_string()
            };
            names.insert(name);
            if plan.rebuilt.iter().any(same) {
                continue; // one `let (a, b) = ..` builds both
            }
            plan.rebuilt.push(Rebuilt {
                ident: t.ident.clone(),
                pat: t.pat.clone(),
                init: t.init.clone(),
                rebind: t.here,
            });
        }
        plan.rebuilt_reads_rebuilt = scope
            .transients
            .iter()
            .filter(|t| names.contains(&t.ident.to_string()))
            .any(|t| t.inputs.iter().any(|i| names.contains(i)));
        names
    }

    /// Plans a control-flow expression that contains sites.
    pub fn ctrl(&mut self, expr: &Expr, range: SiteRange, scope: &Scope) -> Ctrl {
        // The code inside runs after the merge: the transients built there
        // are built before it, and are outer locals in it.
        let mut entered;
        let scope = if scope.transients.iter().any(|t| t.after_head || t.here) {
            entered = scope.clone();
            for t in &mut entered.transients {
                t.after_head = false;
                t.here = false;
            }
            &entered
        } else {
            scope
        };
        match expr {
            Expr::Paren(p) => self.ctrl(&p.expr, range, scope),
            Expr::Group(g) => self.ctrl(&g.expr, range, scope),
            Expr::Block(b) => Ctrl::Block {
                label: b.label.clone(),
                block: self.block(&b.block, scope),
            },
            Expr::Loop(l) => {
                let label = &l.label;
                let scope = scope.then(ContFrame::Loop {
                    body: Rc::new(l.body.clone()),
                    cond: None,
                    endless: true,
                    label: label.as_ref().map(|l| l.name.ident.to_string()),
                });
                Ctrl::Loop {
                    label: label.clone(),
                    body: self.block(&l.body, &scope),
                }
            }
            Expr::While(w) => self.plan_while(w, scope),
            Expr::ForLoop(f) => self.plan_for(f, scope),
            Expr::If(i) => self.plan_if(i, range, scope),
            Expr::Match(m) => self.plan_match(m, range, scope),
            _ => {
                self.report_misplaced(range);
                Ctrl::Misplaced
            }
        }
    }
}

/// The transients a site builds again: those the code after it reads
/// (`scope.cont`), and, transitively, the transients their initialisers
/// read (`#[transient] let api = Api::new(&client);`): a resumed run builds
/// `client` anew to build `api`, so the uninterrupted run must too, or state
/// `client` keeps inside outlives the checkpoint on that path only. Built in
/// declaration order, `client` comes first. One borrowed around the site
/// (held) or built after it is not built there.
fn wanted_again(scope: &Scope) -> NameSet {
    let buildable = |t: &&InScopeTransient| !t.held && !t.after_head;
    let mut wanted: NameSet = scope
        .transients
        .iter()
        .filter(buildable)
        .map(|t| t.ident.to_string())
        .filter(|name| liveness::live_after(name, &scope.cont))
        .collect();
    loop {
        let inputs: Vec<String> = scope
            .transients
            .iter()
            .filter(|t| wanted.contains(&t.ident.to_string()))
            .flat_map(|t| t.inputs.iter().filter(|i| !t.hidden_by.contains(*i)))
            .filter(|i| !wanted.contains(*i))
            .filter(|i| {
                scope
                    .transients
                    .iter()
                    .filter(buildable)
                    .any(|u| u.ident == i.as_str())
            })
            .cloned()
            .collect();
        if inputs.is_empty() {
            return wanted;
        }
        wanted.extend(inputs);
    }
}
