//! Name analysis: which local names a piece of code reads, and which names a
//! pattern binds.
//!
//! The macro cannot see types or resolve paths, so "a use of local `x`" means a
//! single-segment path `x` that is not bound by an inner scope of the code being
//! looked at. Identifiers inside macro invocations (`format!`, `vec!`, ...) and
//! `{x}` captures inside their string literals count as uses too: missing a use
//! would leave a local uninitialised on resume, while an extra one only saves a
//! little more.

use std::collections::BTreeSet;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};
use syn::{Expr, Ident, Pat, Stmt};

/// A set of local names (as strings, since hygiene is not visible to us).
pub type NameSet = BTreeSet<String>;

/// One name bound by a pattern.
#[derive(Clone, Debug)]
pub struct PatBinding {
    pub ident: Ident,
    pub mutable: bool,
    /// `ref x` / `ref mut x`: the binding is a reference into the matched value.
    pub by_ref: bool,
}

/// The bindings a pattern introduces, in source order.
pub fn pat_bindings(pat: &Pat) -> Vec<PatBinding> {
    let mut out = Vec::new();
    collect_pat(pat, &mut out);
    out
}

fn collect_pat(pat: &Pat, out: &mut Vec<PatBinding>) {
    match pat {
        Pat::Ident(p) => {
            // `None`, `Red`, `MAX`: by convention constants and variants start
            // with an upper-case letter; rustc warns on bindings that do.
            let starts_upper = p
                .ident
                .to_string()
                .chars()
                .next()
                .is_some_and(|c| c.is_uppercase());
            if !starts_upper || p.subpat.is_some() || p.mutability.is_some() || p.by_ref.is_some() {
                out.push(PatBinding {
                    ident: p.ident.clone(),
                    mutable: p.mutability.is_some(),
                    by_ref: p.by_ref.is_some(),
                });
            }
            if let Some((_, sub)) = &p.subpat {
                collect_pat(sub, out);
            }
        }
        Pat::Or(p) => {
            if let Some(first) = p.cases.first() {
                collect_pat(first, out);
            }
        }
        Pat::Paren(p) => collect_pat(&p.pat, out),
        Pat::Reference(p) => collect_pat(&p.pat, out),
        Pat::Slice(p) => p.elems.iter().for_each(|e| collect_pat(e, out)),
        Pat::Struct(p) => p.fields.iter().for_each(|f| collect_pat(&f.pat, out)),
        Pat::Tuple(p) => p.elems.iter().for_each(|e| collect_pat(e, out)),
        Pat::TupleStruct(p) => p.elems.iter().for_each(|e| collect_pat(e, out)),
        Pat::Type(p) => collect_pat(&p.pat, out),
        _ => {}
    }
}

/// Names bound by a pattern, as a set.
pub fn pat_names(pat: &Pat) -> NameSet {
    pat_bindings(pat)
        .into_iter()
        .map(|b| b.ident.to_string())
        .collect()
}

/// Free local names read by an expression.
pub fn free_in_expr(expr: &Expr) -> NameSet {
    let mut v = FreeNames::default();
    v.visit_expr(expr);
    v.free
}

/// Free local names read by a sequence of statements (a `let` hides its names
/// from the statements after it).
pub fn free_in_stmts(stmts: &[Stmt]) -> NameSet {
    let mut v = FreeNames::default();
    v.scopes.push(NameSet::new());
    for stmt in stmts {
        v.visit_stmt(stmt);
    }
    v.free
}

#[derive(Default)]
struct FreeNames {
    scopes: Vec<NameSet>,
    free: NameSet,
}

impl FreeNames {
    fn is_bound(&self, name: &str) -> bool {
        self.scopes.iter().any(|s| s.contains(name))
    }

    fn use_name(&mut self, name: String) {
        if !self.is_bound(&name) {
            self.free.insert(name);
        }
    }

    fn bind(&mut self, names: NameSet) {
        if self.scopes.is_empty() {
            self.scopes.push(NameSet::new());
        }
        if let Some(top) = self.scopes.last_mut() {
            top.extend(names);
        }
    }

    fn with_scope(&mut self, names: NameSet, f: impl FnOnce(&mut Self)) {
        self.scopes.push(names);
        f(self);
        self.scopes.pop();
    }

    fn tokens(&mut self, tokens: TokenStream) {
        for tt in tokens {
            match tt {
                TokenTree::Ident(i) => self.use_name(i.to_string()),
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Literal(lit) => {
                    for name in format_captures(&lit.to_string()) {
                        self.use_name(name);
                    }
                }
                TokenTree::Punct(_) => {}
            }
        }
    }
}

/// Names captured by a format string's placeholders: `{name}`, `{name:?}`,
/// and `{:>width$.prec$}` width / precision arguments.
fn format_captures(literal: &str) -> Vec<String> {
    if !literal.starts_with('"') && !literal.starts_with('r') {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut rest = literal;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        if let Some(after) = rest.strip_prefix('{') {
            rest = after;
            continue;
        }
        let Some(close) = rest.find('}') else { break };
        let placeholder = &rest[..close];
        rest = &rest[close + 1..];
        let (arg, spec) = placeholder.split_once(':').unwrap_or((placeholder, ""));
        if is_identifier(arg.trim()) {
            out.push(arg.trim().to_owned());
        }
        // `width$` / `prec$` inside the spec.
        for (i, _) in spec.match_indices('$') {
            let before = &spec[..i];
            let start = before
                .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map_or(0, |p| p + 1);
            if is_identifier(&before[start..]) {
                out.push(before[start..].to_owned());
            }
        }
    }
    out
}

fn is_identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

impl<'ast> Visit<'ast> for FreeNames {
    fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
        if p.qself.is_none() && p.path.leading_colon.is_none() && p.path.segments.len() == 1 {
            self.use_name(p.path.segments[0].ident.to_string());
        }
        visit::visit_expr_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
    }

    fn visit_block(&mut self, b: &'ast syn::Block) {
        self.with_scope(NameSet::new(), |v| {
            for stmt in &b.stmts {
                v.visit_stmt(stmt);
            }
        });
    }

    fn visit_local(&mut self, l: &'ast syn::Local) {
        if let Some(init) = &l.init {
            self.visit_expr(&init.expr);
            if let Some((_, diverge)) = &init.diverge {
                self.visit_expr(diverge);
            }
        }
        self.bind(pat_names(&l.pat));
    }

    fn visit_expr_closure(&mut self, c: &'ast syn::ExprClosure) {
        let names = c.inputs.iter().flat_map(pat_names).collect();
        self.with_scope(names, |v| v.visit_expr(&c.body));
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        self.with_scope(pat_names(&arm.pat), |v| {
            if let Some((_, guard)) = &arm.guard {
                v.visit_expr(guard);
            }
            v.visit_expr(&arm.body);
        });
    }

    fn visit_expr_for_loop(&mut self, f: &'ast syn::ExprForLoop) {
        self.visit_expr(&f.expr);
        self.with_scope(pat_names(&f.pat), |v| v.visit_block(&f.body));
    }

    fn visit_expr_if(&mut self, e: &'ast syn::ExprIf) {
        // `if let` bindings are visible in the condition's rest and the then-block.
        self.with_scope(NameSet::new(), |v| {
            v.visit_expr(&e.cond);
            v.visit_block(&e.then_branch);
        });
        if let Some((_, els)) = &e.else_branch {
            self.visit_expr(els);
        }
    }

    fn visit_expr_while(&mut self, e: &'ast syn::ExprWhile) {
        self.with_scope(NameSet::new(), |v| {
            v.visit_expr(&e.cond);
            v.visit_block(&e.body);
        });
    }

    fn visit_expr_let(&mut self, e: &'ast syn::ExprLet) {
        self.visit_expr(&e.expr);
        self.bind(pat_names(&e.pat));
    }

    fn visit_item(&mut self, _: &'ast syn::Item) {
        // Items cannot read locals.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> NameSet {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn reads_through_macros_and_format_captures() {
        let e: Expr = syn::parse_quote!({
            println!("{a} and {b:?} {{not}} {:>w$.p$}", c);
            vec![d; n]
        });
        assert_eq!(
            free_in_expr(&e),
            names(&["a", "b", "c", "d", "n", "p", "w"])
        );
    }

    #[test]
    fn inner_bindings_hide_names() {
        let e: Expr = syn::parse_quote!({
            let x = y + 1;
            let f = |z| z + x + w;
            match q {
                Some(k) => k,
                None => m,
            }
        });
        assert_eq!(free_in_expr(&e), names(&["m", "q", "w", "y"]));
    }

    #[test]
    fn pattern_bindings() {
        let p: Pat =
            syn::parse_quote!((mut a, Foo { b, c: ref d, .. }, None, [e, ..], x @ Some(_)));
        let got: Vec<_> = pat_bindings(&p)
            .into_iter()
            .map(|b| (b.ident.to_string(), b.mutable, b.by_ref))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a".into(), true, false),
                ("b".into(), false, false),
                ("d".into(), false, true),
                ("e".into(), false, false),
                ("x".into(), false, false),
            ]
        );
    }
}
