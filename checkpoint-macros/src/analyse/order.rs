//! Whether the code after a site may observe the iteration order of a local.
//!
//! A `HashMap`/`HashSet` rebuilt from a checkpoint iterates in another order
//! (a new random seed, another insertion history). The iterators the body
//! itself takes (`x.iter()`, `x.keys()`, `for k in &x`, ...) are put in one
//! canonical order on both paths (`lower::canonical`); what the macro cannot
//! rewrite may still see the order: a helper the local is passed to, `Debug`
//! formatting, a clone or a move into another local (whose iteration is not
//! followed), a method the macro does not know. The macro cannot see types,
//! so it finds the uses that *may* observe order, whatever the local's type;
//! the runtime then refuses the save only if a hash-ordered collection is
//! inside the saved type (see the runtime's `exactness` module and
//! `docs/exactness.md`).
//!
//! The rule is conservative: a use is order-free only in the shapes listed
//! here (an iterating method the macro rewrites; a method known not to
//! iterate, called on the local or on a field of it; an index; an assignment
//! to it or a field; an operand of an operator or of a comparison; the run's
//! output, which is stored and decoded anew in every case). Anything else
//! counts as observing.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::punctuated::Punctuated;
use syn::visit::{self, Visit};
use syn::{Expr, Stmt, Token};

use super::liveness::ContFrame;
use super::syntax::strip_parens;
use crate::names::pat_names;

/// Methods that hand out an iterator over a collection's items, in its
/// iteration order: `lower::canonical` routes each call of one on a local
/// through the runtime's order probe.
pub(crate) const ITERATING: &[&str] = &[
    "iter",
    "iter_mut",
    "keys",
    "values",
    "values_mut",
    "into_iter",
    "drain",
    "into_keys",
    "into_values",
];

/// The local `lower::canonical` binds the order probe to, by which this
/// analysis recognises the rewritten iterators.
pub(crate) const PROBE: &str = "__cp_order";

/// The iterator of a block `lower::canonical` wrote:
/// `{ use ..; let __cp_order = order_probe(&place); (&&__cp_order).in_canonical_order(iter) }`.
fn canonical_iter(block: &syn::Block) -> Option<&Expr> {
    let probed = block.stmts.iter().any(|s| match s {
        Stmt::Local(l) => matches!(&l.pat, syn::Pat::Ident(p) if p.ident == PROBE),
        _ => false,
    });
    match block.stmts.last() {
        Some(Stmt::Expr(Expr::MethodCall(m), None))
            if probed && m.method == "in_canonical_order" && m.args.len() == 1 =>
        {
            m.args.first()
        }
        _ => None,
    }
}

/// Methods that neither iterate the collection they are called on nor hand
/// out something that does (std's maps, sets, vectors and strings).
const ORDER_FREE: &[&str] = &[
    "get",
    "get_mut",
    "get_key_value",
    "contains_key",
    "contains",
    "insert",
    "remove",
    "remove_entry",
    // `HashSet::take(&value)` and `::replace(value)` look one value up by
    // itself; `Option::take()`/`replace(v)` swap a value out.
    "take",
    "replace",
    "entry",
    "len",
    "is_empty",
    "clear",
    "reserve",
    "shrink_to_fit",
    "capacity",
    "push",
    "push_back",
    "push_front",
    "pop",
    "pop_back",
    "pop_front",
    "push_str",
    "is_some",
    "is_none",
    "is_ok",
    "is_err",
    "unwrap_or_default",
    "to_string",
    "as_str",
    "starts_with",
    "ends_with",
    "eq",
    "ne",
    "cmp",
    "partial_cmp",
    "min",
    "max",
    "abs",
    "saturating_add",
    "saturating_sub",
    "checked_add",
    "checked_sub",
    "wrapping_add",
];

/// The first use of `name` after the site whose continuation is `cont` that
/// may observe its iteration order, described for a message (`None`: every
/// use is order-free).
pub(crate) fn observed_after(name: &str, cont: &[ContFrame]) -> Option<String> {
    // The outermost `Rest` frame is the body's own statement list: its tail
    // expression is the run's output.
    let body_level = cont
        .iter()
        .position(|f| matches!(f, ContFrame::Rest { .. }));
    for (i, frame) in cont.iter().enumerate().rev() {
        let found = match frame {
            ContFrame::Rest { stmts, shadowed } => {
                if shadowed.contains(name) {
                    None
                } else {
                    stmts_observe(name, stmts, body_level == Some(i))
                }
            }
            ContFrame::Assigns(_) => None,
            ContFrame::Loop { body, cond, .. } => cond
                .as_ref()
                .and_then(|c| expr_observes(name, c))
                .or_else(|| stmts_observe(name, &body.stmts, false)),
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

fn stmts_observe(name: &str, stmts: &[Stmt], output_tail: bool) -> Option<String> {
    let mut v = Observer::new(name);
    for (i, stmt) in stmts.iter().enumerate() {
        let is_tail = output_tail && i + 1 == stmts.len();
        match stmt {
            Stmt::Expr(e, None) if is_tail => v.output(e),
            Stmt::Local(l) => {
                if let Some(init) = &l.init {
                    v.visit_expr(&init.expr);
                    if let Some((_, d)) = &init.diverge {
                        v.visit_expr(d);
                    }
                }
                // Rebound: the statements after it see another local.
                if pat_names(&l.pat).contains(name) {
                    break;
                }
            }
            other => v.visit_stmt(other),
        }
        if v.found.is_some() {
            break;
        }
    }
    v.found
}

fn expr_observes(name: &str, expr: &Expr) -> Option<String> {
    let mut v = Observer::new(name);
    v.visit_expr(expr);
    v.found
}

/// Finds the first use of one name that may observe its order.
struct Observer<'a> {
    name: &'a str,
    found: Option<String>,
    /// Inside a macro's arguments, which `lower::canonical` leaves alone.
    in_macro: bool,
}

impl<'a> Observer<'a> {
    fn new(name: &'a str) -> Self {
        Observer {
            name,
            found: None,
            in_macro: false,
        }
    }

    fn observe(&mut self, what: String) {
        if self.found.is_none() {
            self.found = Some(what);
        }
    }

    /// Whether `expr` is the local, or a field, index or borrow of it.
    fn rooted_here(&self, expr: &Expr) -> bool {
        match strip_parens(expr) {
            Expr::Path(p) => p.qself.is_none() && p.path.is_ident(self.name),
            Expr::Field(f) => self.rooted_here(&f.base),
            Expr::Index(i) => self.rooted_here(&i.expr),
            Expr::Reference(r) => self.rooted_here(&r.expr),
            Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => self.rooted_here(&u.expr),
            _ => false,
        }
    }

    /// A place rooted in the local, read or written in an order-free way:
    /// only its index expressions are looked at.
    fn place(&mut self, expr: &Expr) {
        match strip_parens(expr) {
            Expr::Field(f) => self.place(&f.base),
            Expr::Index(i) => {
                self.place(&i.expr);
                self.visit_expr(&i.index);
            }
            Expr::Reference(r) => self.place(&r.expr),
            Expr::Unary(u) => self.place(&u.expr),
            _ => {}
        }
    }

    /// An operand: a place rooted in the local is order-free there.
    fn operand(&mut self, expr: &Expr) {
        if self.rooted_here(expr) {
            self.place(expr);
        } else {
            self.visit_expr(expr);
        }
    }

    /// The run's output (the body's tail, or `return`): stored and decoded
    /// anew whether or not the run was resumed, so moving the local into it
    /// observes nothing; what computes it is looked at as usual.
    fn output(&mut self, expr: &Expr) {
        match strip_parens(expr) {
            e if self.rooted_here(e) => self.place(e),
            Expr::Call(c) if is_constructor(&c.func) => c.args.iter().for_each(|a| self.output(a)),
            Expr::Tuple(t) => t.elems.iter().for_each(|e| self.output(e)),
            Expr::Struct(s) => {
                for f in &s.fields {
                    self.output(&f.expr);
                }
                if let Some(rest) = &s.rest {
                    self.visit_expr(rest);
                }
            }
            other => self.visit_expr(other),
        }
    }

    /// A macro's arguments, when they parse as expressions (`format!`,
    /// `vec!`, `assert_eq!`); otherwise any mention counts. A `{name}`
    /// capture in a format string formats the local.
    fn mac(&mut self, mac: &syn::Macro) {
        let parsed = mac
            .parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated)
            .ok();
        match parsed {
            Some(args) => {
                let was = std::mem::replace(&mut self.in_macro, true);
                for arg in &args {
                    if let Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) = arg
                    {
                        if captures(&s.value(), self.name) {
                            let what =
                                format!("`{}` formatted by `{}!`", self.name, path_text(&mac.path));
                            self.observe(what);
                        }
                        continue;
                    }
                    self.visit_expr(arg);
                }
                self.in_macro = was;
            }
            None => {
                if mentions(&mac.tokens, self.name) {
                    let what = format!("`{}` used inside `{}!`", self.name, path_text(&mac.path));
                    self.observe(what);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Observer<'_> {
    fn visit_expr(&mut self, expr: &'ast Expr) {
        if self.found.is_some() {
            return;
        }
        match expr {
            Expr::MethodCall(m) if self.rooted_here(&m.receiver) => {
                let method = m.method.to_string();
                let canonical =
                    !self.in_macro && m.args.is_empty() && ITERATING.contains(&method.as_str());
                if canonical || ORDER_FREE.contains(&method.as_str()) {
                    self.place(&m.receiver);
                    m.args.iter().for_each(|a| self.visit_expr(a));
                } else {
                    let what = format!("`.{}()` on `{}`", m.method, self.name);
                    self.observe(what);
                }
            }
            Expr::Assign(a) if self.rooted_here(&a.left) => {
                self.place(&a.left);
                self.visit_expr(&a.right);
            }
            Expr::Binary(b) => {
                self.operand(&b.left);
                self.operand(&b.right);
            }
            Expr::Unary(u) => self.operand(&u.expr),
            Expr::Index(i) if self.rooted_here(&i.expr) => self.place(expr),
            Expr::Field(f) if self.rooted_here(&f.base) => {
                // A field read as a value: a copy of a number or a flag, or
                // a collection moved into something that may iterate it.
                let what = format!("`{}` read as a value", expr.to_token_stream());
                self.observe(what);
            }
            Expr::If(i) => {
                self.operand(&i.cond);
                self.visit_block(&i.then_branch);
                if let Some((_, e)) = &i.else_branch {
                    self.visit_expr(e);
                }
            }
            Expr::Return(r) => {
                if let Some(e) = &r.expr {
                    self.output(e);
                }
            }
            Expr::Block(b) if b.label.is_none() && canonical_iter(&b.block).is_some() => {
                // An iterator in canonical order: only what it iterates over
                // is looked at (the probe borrows the place, nothing more).
                let iter = canonical_iter(&b.block).expect("checked above");
                self.operand(iter);
            }
            Expr::ForLoop(f) => {
                // Its iterable, if a place, is iterated in a canonical order
                // (`lower::canonical`, or `loops` for a loop with a site).
                if self.rooted_here(&f.expr) && !self.in_macro {
                    self.place(&f.expr);
                } else {
                    self.visit_expr(&f.expr);
                }
                if !pat_names(&f.pat).contains(self.name) {
                    self.visit_block(&f.body);
                }
            }
            Expr::Closure(c) => {
                if !c.inputs.iter().any(|p| pat_names(p).contains(self.name)) {
                    self.visit_expr(&c.body);
                }
            }
            Expr::Macro(m) => self.mac(&m.mac),
            Expr::Path(p) if p.qself.is_none() && p.path.is_ident(self.name) => {
                let what = format!("`{}` passed, moved or borrowed as a whole", self.name);
                self.observe(what);
            }
            _ => visit::visit_expr(self, expr),
        }
    }

    fn visit_stmt_macro(&mut self, m: &'ast syn::StmtMacro) {
        self.mac(&m.mac);
    }

    fn visit_local(&mut self, l: &'ast syn::Local) {
        if let Some(init) = &l.init {
            self.visit_expr(&init.expr);
            if let Some((_, d)) = &init.diverge {
                self.visit_expr(d);
            }
        }
    }

    fn visit_item(&mut self, _: &'ast syn::Item) {}
}

/// `Ok`, `Some`, `Err`, a tuple struct or variant: a capitalised last
/// segment.
fn is_constructor(func: &Expr) -> bool {
    match strip_parens(func) {
        Expr::Path(p) => p
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident.to_string().starts_with(char::is_uppercase)),
        _ => false,
    }
}

/// Whether a format string captures `name` (`{name}`, `{name:?}`).
fn captures(format: &str, name: &str) -> bool {
    format.split('{').skip(1).any(|part| {
        let inner = part.split('}').next().unwrap_or("");
        let arg = inner.split(':').next().unwrap_or("").trim();
        arg == name
    })
}

/// Whether `tokens` contain the identifier `name`.
fn mentions(tokens: &TokenStream, name: &str) -> bool {
    tokens.clone().into_iter().any(|t| match t {
        proc_macro2::TokenTree::Ident(i) => i == name,
        proc_macro2::TokenTree::Group(g) => mentions(&g.stream(), name),
        _ => false,
    })
}

fn path_text(path: &syn::Path) -> String {
    path.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sites;
    use quote::quote;
    use std::rc::Rc;

    fn observed(name: &str, after: TokenStream) -> Option<String> {
        let mut block: syn::Block = syn::parse2(quote!({ #after })).expect("parses");
        sites::number_sites(&mut block, None).expect("sites");
        let cont = vec![ContFrame::Rest {
            stmts: Rc::from(block.stmts),
            shadowed: Default::default(),
        }];
        observed_after(name, &cont)
    }

    #[test]
    fn lookups_inserts_and_counts_observe_nothing() {
        let after = quote! {
            if seen.contains(&u) { return Ok(()); }
            seen.insert(u.clone());
            let n = seen.len() + 1;
            state.tools.insert(k, v);
            let t = state.tools.get(&k).cloned();
            let was = seen.take(&u);
            seen.replace(u.clone());
            state.count += 1;
            if state.count > 3 && !seen.is_empty() { log(n) }
            Ok(Summary { seen, state })
        };
        assert_eq!(observed("seen", after.clone()), None);
        assert_eq!(observed("state", after), None);
    }

    #[test]
    fn iterating_formatting_and_passing_observe() {
        for (after, want) in [
            (
                quote!(let u = set.retain(|x| keep(x));),
                "`.retain()` on `set`",
            ),
            (
                quote!(println!("{}", set.iter().count());),
                "`.iter()` on `set`",
            ),
            (quote!(println!("{:?}", set);), "passed, moved or borrowed"),
            (quote!(println!("{set:?}");), "formatted by `println!`"),
            (quote!(render(&set);), "passed, moved or borrowed"),
            (quote!(let copy = set.clone();), "`.clone()`"),
            (quote!(let f = g.set;), "read as a value"),
        ] {
            let name = if after.to_string().contains("g . set") {
                "g"
            } else {
                "set"
            };
            let got = observed(name, after.clone()).unwrap_or_else(|| panic!("{after}"));
            assert!(got.contains(want), "{after}: {got}");
        }
    }

    #[test]
    fn iterators_the_macro_puts_in_canonical_order_observe_nothing() {
        let after = quote! {
            let first = map.iter().next().cloned();
            let best = map.values().max();
            let ks: Vec<_> = map.keys().cloned().collect();
            for (k, v) in &map { total += v; }
            for (k, v) in &map { total += v; checkpoint!(); }
        };
        assert_eq!(observed("map", after), None);
    }

    #[test]
    fn a_rebinding_ends_the_search() {
        assert_eq!(
            observed("set", quote!(let set = fresh(); set.iter();)),
            None
        );
    }
}
