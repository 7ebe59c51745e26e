//! Where a statement list that contains sites is split, and what the code
//! before the split hands over to the code after it.
//!
//! The list is split at its last statement `t` that contains a site (see
//! `lower`'s module docs for the code this becomes). The locals declared
//! before `t` that the code after the split reads are *handed over*: on the
//! normal path the prefix computes them, on the resume path they come from
//! the checkpoint, or are re-created (`#[transient]`, constants). [`plan_split`]
//! decides which, and how; lowering only writes it out.

use std::collections::BTreeMap;

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Expr, Ident, Pat, Stmt};

use super::branches::{if_arms, if_conditions, if_rederives, match_reentry, Reentry};
use super::deferred;
use super::syntax::{self, strip_parens};
use crate::names::{
    self, free_in_expr, free_in_stmts, pat_bindings, pat_names, NameSet, PatBinding,
};
use crate::sites::{self, Site, SiteRange};

/// How a statement list is split (see the module docs).
pub(crate) struct SplitPlan {
    /// The index of `t`, the last statement that contains a site.
    pub at: usize,
    /// The sites `t` contains.
    pub range: SiteRange,
    /// Items of the prefix (`fn`, `use`, `struct`): kept at this level,
    /// outside the split, so the code after it sees them too.
    pub items: Vec<Stmt>,
    /// The prefix statements that run on the normal path only.
    pub prefix: Vec<Stmt>,
    /// Transient `let`s that nothing before the merge reads: they run once,
    /// right after it, on both paths (a closure then has one type, and a
    /// transient borrowing a handed-over local borrows it in its final place).
    pub after_merge: Vec<Stmt>,
    /// The locals handed over, in declaration order.
    pub exports: Vec<Visible>,
    /// Names the code after the prefix reads (`after` for the prefix's own
    /// split).
    pub prefix_after: NameSet,
    /// Every name the prefix declares: from the split on they hide outer
    /// locals of the same name.
    pub prefix_names: NameSet,
    /// References handed over across a site: refused (each local with its
    /// error).
    pub errors: Vec<(Ident, syn::Error)>,
}

impl SplitPlan {
    /// Whether a handed-over local may be dead at some sites after the split:
    /// assigned again (`state = match state { .. }`), or moved by the split
    /// statement (`match &reply { .. => { messages.push(reply); checkpoint!()
    /// } }`). Where it is dead a placeholder holds its place (see `lower`'s
    /// `Source::Placeholder`).
    pub fn reassigned(&self, stmts: &[Stmt], v: &Visible) -> bool {
        let name = v.binding.ident.to_string();
        let moved = match &stmts[self.at] {
            Stmt::Expr(e, _) => syntax::moves_local(&name, e),
            Stmt::Local(l) => l
                .init
                .as_ref()
                .is_some_and(|i| syntax::moves_local(&name, &i.expr)),
            _ => false,
        };
        moved || (v.binding.mutable && deferred::assigned_in(&name, &stmts[self.at..]))
    }
}

/// Plans the split of `stmts` (`None`: no site in them). `after` are the
/// names read after these statements by code that can still see their
/// locals; `refs` the locals known to hold re-derived references.
pub(crate) fn plan_split(
    stmts: &[Stmt],
    after: &NameSet,
    refs: &NameSet,
    ctx: Option<&Ident>,
    sites: &[Site],
) -> Option<SplitPlan> {
    let at = stmts
        .iter()
        .rposition(|s| sites::sites_in_stmt(s).is_some())?;
    let (prefix, t, suffix) = (&stmts[..at], &stmts[at], &stmts[at + 1..]);
    let range = sites::sites_in_stmt(t)?;
    let (items, prefix): (Vec<Stmt>, Vec<Stmt>) = prefix
        .iter()
        .cloned()
        .partition(|s| matches!(s, Stmt::Item(_)));

    // Which locals declared before `t` does the code after the split read?
    // (A transient that is needed makes what its initialiser reads needed.)
    let mut needed = free_in_stmts(suffix);
    needed.extend(after.iter().cloned());
    needed.extend(post_merge_free(t, refs));
    let visible = visible_bindings(&prefix);
    add_transient_inputs(&mut needed, &visible);
    let moved = transients_after_merge(&prefix, &visible, &needed, &head_free(t));
    let moved_names: NameSet = moved
        .iter()
        .filter_map(|&k| match &prefix[k] {
            Stmt::Local(l) => Some(pat_names(&l.pat)),
            _ => None,
        })
        .flatten()
        .collect();
    let after_merge = moved.iter().map(|&k| prefix[k].clone()).collect();
    let prefix_names: NameSet = visible.keys().cloned().collect();
    let is_ctx = |name: &str| ctx.is_some_and(|c| c == name);
    let mut exports: Vec<Visible> = visible
        .into_values()
        .filter(|v| {
            let name = v.binding.ident.to_string();
            needed.contains(&name) && !is_ctx(&name) && !moved_names.contains(&name)
        })
        .collect();
    exports.sort_by_key(|v| v.order);
    let first_site = sites::numbered(sites, range.first).describe();
    let errors = exports
        .iter()
        .filter_map(|v| Some((v.binding.ident.clone(), reference_error(v, &first_site)?)))
        .collect();
    let prefix: Vec<Stmt> = prefix
        .into_iter()
        .enumerate()
        .filter(|(k, _)| !moved.contains(k))
        .map(|(_, s)| s)
        .collect();
    let mut prefix_after = names::free_in_stmts(std::slice::from_ref(t));
    prefix_after.extend(needed);
    Some(SplitPlan {
        at,
        range,
        items,
        prefix,
        after_merge,
        exports,
        prefix_after,
        prefix_names,
        errors,
    })
}

/// Adds to `needed` what the initialisers of needed transients read, until
/// nothing more is added (a transient is rebuilt from those on resume).
fn add_transient_inputs(needed: &mut NameSet, visible: &BTreeMap<String, Visible>) {
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
}

/// A `let` binding of a prefix that is still visible at its end.
pub(crate) struct Visible {
    pub binding: PatBinding,
    pub order: usize,
    /// The index of its `let` in the prefix.
    pub stmt: usize,
    /// `#[transient]`: the pattern and initialiser to run again on resume.
    pub transient_pat: Option<Pat>,
    pub transient_init: Option<Expr>,
    /// Re-created because it is an immutable local initialised with a
    /// constant (not declared `#[transient]`).
    pub constant: bool,
    /// The initialiser is `&expr` / `&mut expr`.
    pub reference_init: bool,
    /// Its `#[migrate(..)]`.
    pub migration: Option<crate::migrate::Migration>,
}

/// The bindings declared by top-level `let`s of `stmts` that are visible after
/// them (the last one of each name).
fn visible_bindings(stmts: &[Stmt]) -> BTreeMap<String, Visible> {
    let mut out = BTreeMap::new();
    let mut order = 0;
    for (index, stmt) in stmts.iter().enumerate() {
        let Stmt::Local(local) = stmt else { continue };
        let init = local.init.as_ref().map(|i| &*i.expr);
        let declared = local.attrs.iter().any(|a| a.path().is_ident("transient"));
        let constant = !declared && syntax::is_constant_local(local);
        let transient = constant || declared;
        let reference_init = init.is_some_and(syntax::yields_borrowed_value);
        let migration = crate::migrate::of_local(&local.attrs, &local.pat);
        for binding in pat_bindings(&local.pat) {
            order += 1;
            out.insert(
                binding.ident.to_string(),
                Visible {
                    binding,
                    order,
                    stmt: index,
                    transient_pat: transient.then(|| local.pat.clone()),
                    transient_init: if transient { init.cloned() } else { None },
                    constant,
                    reference_init,
                    migration: migration.clone(),
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
                "`{name}` holds a reference (its value is borrowed: `&..`, a string literal, `.as_str()`) and is used after {site}; a reference cannot be saved in a checkpoint: own the value (`String` rather than `&str`: `\"..\".to_owned()`; `.clone()` / `.to_owned()`), or borrow again after the checkpoint"
            ),
        ));
    }
    None
}

/// Names a statement's code reads after its split point: everything but the
/// head that the normal path evaluates before the split.
pub(crate) fn post_merge_free(stmt: &Stmt, refs: &NameSet) -> NameSet {
    match stmt {
        Stmt::Local(l) => {
            let mut out = NameSet::new();
            if let Some(init) = &l.init {
                match site_with_postfix(&init.expr) {
                    // The chain after the call runs after the split.
                    Some(_) => out.extend(postfix_free(&init.expr)),
                    None => out.extend(post_merge_free_expr(&init.expr, refs)),
                }
                if let Some((_, d)) = &init.diverge {
                    out.extend(free_in_expr(d));
                }
            }
            out
        }
        Stmt::Expr(Expr::Assign(a), _) if sites::sites_in_expr(&a.left).is_none() => {
            let mut out = free_in_expr(&a.left);
            match site_with_postfix(&a.right) {
                Some(_) => out.extend(postfix_free(&a.right)),
                None => out.extend(post_merge_free_expr(&a.right, refs)),
            }
            out
        }
        Stmt::Expr(e, _) if direct_site(e).is_none() => post_merge_free_expr(e, refs),
        // A retry's call runs again when resumed: what it reads is saved.
        Stmt::Expr(e, _) if is_retry(e) => free_in_expr(e),
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
                .flat_map(|arm| free_in_expr(&arm.body))
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
            // Re-derived or entered by site, the scrutinee and guards are
            // evaluated after the merge.
            if match_reentry(m, refs) != Reentry::Restore {
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

/// The transient `let`s of `prefix` (by index) that can run after the merge
/// instead of at their place: needed after it, and neither they nor what
/// their initialisers read is touched by the prefix statements after them or
/// by the split statement's head (moved, they build the same value).
fn transients_after_merge(
    prefix: &[Stmt],
    visible: &BTreeMap<String, Visible>,
    needed: &NameSet,
    head_reads: &NameSet,
) -> Vec<usize> {
    let mut out = Vec::new();
    for (k, stmt) in prefix.iter().enumerate() {
        let Stmt::Local(local) = stmt else { continue };
        let names = pat_names(&local.pat);
        let all_transient_here = !names.is_empty()
            && names.iter().all(|n| {
                visible
                    .get(n)
                    .is_some_and(|v| v.stmt == k && v.transient_init.is_some())
            });
        if !all_transient_here || !names.iter().any(|n| needed.contains(n)) {
            continue;
        }
        // Moving it later must not change what it is built from either: the
        // statements it would move past (and the head) must not touch what
        // its initialiser reads.
        let later = free_in_stmts(&prefix[k + 1..]);
        let inputs = local
            .init
            .as_ref()
            .map(|i| free_in_expr(&i.expr))
            .unwrap_or_default();
        if names
            .iter()
            .chain(&inputs)
            .any(|n| later.contains(n) || head_reads.contains(n))
        {
            continue;
        }
        out.push(k);
    }
    out
}

/// Names the head of a split statement reads: what the normal path
/// evaluates before the merge (a condition, a scrutinee, a wait's arguments).
pub(crate) fn head_free(stmt: &Stmt) -> NameSet {
    fn expr_head(e: &Expr) -> NameSet {
        match strip_parens(e) {
            Expr::If(i) => if_conditions(i)
                .into_iter()
                .flat_map(free_in_expr)
                .collect(),
            Expr::Match(m) => {
                let mut out = free_in_expr(&m.expr);
                for a in &m.arms {
                    if let Some((_, g)) = &a.guard {
                        out.extend(free_in_expr(g));
                    }
                }
                out
            }
            Expr::Block(_) | Expr::Loop(_) | Expr::While(_) | Expr::ForLoop(_) => NameSet::new(),
            other => free_in_expr(other),
        }
    }
    match stmt {
        Stmt::Local(l) => l
            .init
            .as_ref()
            .map_or_else(NameSet::new, |i| expr_head(&i.expr)),
        Stmt::Expr(Expr::Assign(a), _) => expr_head(&a.right),
        Stmt::Expr(e, _) => expr_head(e),
        _ => NameSet::new(),
    }
}

/// The local a statement assigns as a whole: `x = <construct>;`.
pub(crate) fn assigned_local(stmt: &Stmt) -> Option<String> {
    let Stmt::Expr(Expr::Assign(a), _) = stmt else {
        return None;
    };
    let Expr::Path(p) = strip_parens(&a.left) else {
        return None;
    };
    p.path.get_ident().map(|i| i.to_string())
}

/// `ctx.wait_for(..).await.unwrap_or(..)?`: a suspension call at the root of a
/// chain of method calls, field accesses and `?`. Returns the site, the call
/// itself and the chain with the call replaced by the site's value.
pub(crate) fn site_with_postfix(expr: &Expr) -> Option<(u32, Expr, TokenStream)> {
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

/// What a suspension call with its chain (see [`site_with_postfix`]) reads
/// after the split. The arguments of `ctx.join(..)` / `ctx.join_all(..)`
/// are not among them: they are moved into the call, on the normal path
/// only (a resume takes the children's outcomes instead). Those of a wait
/// or a sleep still count, as they always have, so that the fields the
/// sites of existing workflows save do not change.
fn postfix_free(expr: &Expr) -> NameSet {
    if direct_site(expr).is_some() {
        let joins = match strip_parens(expr) {
            Expr::Await(a) => matches!(&*a.base, Expr::MethodCall(m)
                if m.method == "join" || m.method == "join_all"),
            _ => false,
        };
        return if joins {
            NameSet::new()
        } else {
            free_in_expr(expr)
        };
    }
    match expr {
        Expr::MethodCall(m) => {
            let mut out = postfix_free(&m.receiver);
            out.extend(m.args.iter().flat_map(free_in_expr));
            out
        }
        Expr::Field(f) => postfix_free(&f.base),
        Expr::Try(t) => postfix_free(&t.expr),
        other => free_in_expr(other),
    }
}

/// Whether an expression is a `ctx.retry(..).await` site: its call is made
/// on both paths (a resume goes on with the next attempt), so what its
/// arguments read is read after the split too.
fn is_retry(expr: &Expr) -> bool {
    direct_site(expr).is_some()
        && matches!(strip_parens(expr), Expr::Await(a)
            if matches!(&*a.base, Expr::MethodCall(m) if m.method == "retry"))
}

/// The site number of an expression that *is* a site (not one that contains one).
pub(crate) fn direct_site(expr: &Expr) -> Option<u32> {
    match strip_parens(expr) {
        Expr::Macro(m) => sites::marker(&m.attrs),
        Expr::Await(a) => sites::marker(&a.attrs),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handed-over locals of `body`'s outermost split, each as `name` or
    /// `name (transient)`, and the statements run after the merge.
    fn plan(body: TokenStream) -> (Vec<String>, usize) {
        let mut block: syn::Block = syn::parse2(quote!({ #body })).unwrap();
        let ctx = Ident::new("ctx", Span::call_site());
        let sites = sites::number_sites(&mut block, Some(&ctx)).unwrap();
        let plan = plan_split(
            &block.stmts,
            &NameSet::new(),
            &NameSet::new(),
            Some(&ctx),
            &sites,
        )
        .expect("a site");
        assert!(
            plan.errors.is_empty(),
            "{:?}",
            plan.errors
                .iter()
                .map(|e| e.1.to_string())
                .collect::<Vec<_>>()
        );
        let exports = plan
            .exports
            .iter()
            .map(|v| match v.transient_init {
                Some(_) => format!("{} (transient)", v.binding.ident),
                None => v.binding.ident.to_string(),
            })
            .collect();
        (exports, plan.after_merge.len())
    }

    #[test]
    fn only_what_the_code_after_the_split_reads_is_handed_over() {
        let (exports, _) = plan(quote! {
            let a = 1;
            let client = make_client();
            let b = client.get(a);
            checkpoint!("x");
            b + 1
        });
        assert_eq!(exports, vec!["b"]);
    }

    #[test]
    fn a_transient_nothing_before_the_merge_reads_runs_after_it() {
        let (exports, after_merge) = plan(quote! {
            let keywords = load();
            #[transient]
            let s = scorer(&keywords);
            for d in &docs { checkpoint!("r"); use_it(s.score(d)); }
        });
        assert_eq!(
            exports,
            vec!["keywords"],
            "what the transient reads is handed over"
        );
        assert_eq!(after_merge, 1);
    }

    #[test]
    fn a_transient_the_prefix_reads_is_re_created_in_place() {
        let (exports, after_merge) = plan(quote! {
            #[transient]
            let client = connect();
            let data = client.fetch();
            checkpoint!("fetched");
            client.send(data)
        });
        assert_eq!(exports, vec!["client (transient)", "data"]);
        assert_eq!(after_merge, 0);
    }

    #[test]
    fn a_transient_whose_inputs_change_before_the_split_stays_in_place() {
        // Moved after the merge, `limit` would read the changed `cfg`.
        let (exports, after_merge) = plan(quote! {
            let mut cfg = load();
            #[transient]
            let limit = cfg.limit;
            cfg.limit += 1;
            checkpoint!("c");
            use_it(limit, cfg)
        });
        assert_eq!(after_merge, 0);
        assert_eq!(exports, vec!["cfg", "limit (transient)"]);
    }

    #[test]
    fn a_borrowed_value_across_a_site_is_refused() {
        let mut block: syn::Block = syn::parse2(quote!({
            let tier = if adult { "adult" } else { "junior" };
            checkpoint!("tiered");
            use_it(tier)
        }))
        .unwrap();
        let sites = sites::number_sites(&mut block, None).unwrap();
        let plan =
            plan_split(&block.stmts, &NameSet::new(), &NameSet::new(), None, &sites).unwrap();
        let msg = plan.errors[0].1.to_string();
        assert!(
            msg.contains("`tier` holds a reference") && msg.contains("checkpoint \"tiered\""),
            "{msg}"
        );
    }

    #[test]
    fn a_reassigned_state_is_marked() {
        let mut block: syn::Block = syn::parse2(quote!({
            let mut state = S::A;
            let mut turns = 0;
            loop {
                turns += 1;
                state = match state {
                    S::A => {
                        checkpoint!();
                        S::B
                    }
                    S::B => break,
                }
            }
        }))
        .unwrap();
        let sites = sites::number_sites(&mut block, None).unwrap();
        let plan =
            plan_split(&block.stmts, &NameSet::new(), &NameSet::new(), None, &sites).unwrap();
        let reassigned: Vec<String> = plan
            .exports
            .iter()
            .filter(|v| plan.reassigned(&block.stmts, v))
            .map(|v| v.binding.ident.to_string())
            .collect();
        assert_eq!(reassigned, vec!["state"]);
    }
}
