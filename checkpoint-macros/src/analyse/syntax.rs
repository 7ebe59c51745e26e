//! What can be judged from an expression's syntax alone: constants, pure
//! reads of locals, and borrows.

use syn::visit::Visit;
use syn::Expr;

use crate::names::NameSet;

/// Methods that borrow their receiver and return a reference or a borrowing
/// iterator (besides `iter*`, `as_*` and `*_mut`, see [`borrowing_method`]).
const BORROWING_METHODS: &[&str] = &[
    "borrow",
    "borrow_mut",
    "chars",
    "char_indices",
    "bytes",
    "keys",
    "values",
    "lines",
    "chunks",
    "chunks_exact",
    "rchunks",
    "windows",
    "split",
    "splitn",
    "rsplit",
    "split_terminator",
    "split_whitespace",
    "split_ascii_whitespace",
    "matches",
    "match_indices",
    "range",
    "first",
    "last",
    "get",
];

fn borrowing_method(name: &str) -> bool {
    BORROWING_METHODS.contains(&name)
        || name.starts_with("iter")
        || name.starts_with("as_")
        || name.ends_with("_mut")
}

/// Whether an expression evaluates to a reference (or an iterator of
/// references) into locals, judged from its syntax.
pub(crate) fn yields_reference(expr: &Expr, refs: &NameSet) -> bool {
    match strip_parens(expr) {
        Expr::Reference(_) => true,
        Expr::Path(p) => p
            .path
            .get_ident()
            .is_some_and(|i| refs.contains(&i.to_string())),
        Expr::Field(f) => yields_reference(&f.base, refs),
        Expr::Index(i) => yields_reference(&i.expr, refs),
        Expr::MethodCall(m) => {
            borrowing_method(&m.method.to_string()) || yields_reference(&m.receiver, refs)
        }
        _ => false,
    }
}

/// Whether an initialiser's value is a borrow, judged from its syntax: `&x`,
/// a string literal, `x.as_str()`, or an `if` / `match` / block every
/// non-diverging branch of which is one (`if adult { "adult" } else {
/// "junior" }`). Such a local cannot be saved.
pub(crate) fn yields_borrowed_value(expr: &Expr) -> bool {
    fn tail(block: &syn::Block) -> Option<&Expr> {
        match block.stmts.last() {
            Some(syn::Stmt::Expr(e, None)) => Some(e),
            _ => None,
        }
    }
    fn diverges(e: &Expr) -> bool {
        match strip_parens(e) {
            Expr::Return(_) | Expr::Break(_) | Expr::Continue(_) => true,
            Expr::Macro(m) => m.mac.path.segments.last().is_some_and(|s| {
                ["panic", "unreachable", "todo", "unimplemented"]
                    .contains(&s.ident.to_string().as_str())
            }),
            Expr::Block(b) => tail(&b.block).is_some_and(diverges),
            _ => false,
        }
    }
    // Some branch yields a borrow, and every other one diverges or does too.
    fn branches<'a>(mut all: impl Iterator<Item = &'a Expr>) -> bool {
        let mut any = false;
        let ok = all.all(|e| {
            if diverges(e) {
                true
            } else {
                any = true;
                yields_borrowed_value(e)
            }
        });
        ok && any
    }
    match strip_parens(expr) {
        Expr::Reference(_) => true,
        Expr::Lit(l) => matches!(
            l.lit,
            syn::Lit::Str(_) | syn::Lit::ByteStr(_) | syn::Lit::CStr(_)
        ),
        Expr::MethodCall(m) => [
            "as_str", "as_slice", "as_bytes", "as_ref", "as_deref", "borrow",
        ]
        .contains(&m.method.to_string().as_str()),
        Expr::Block(b) => tail(&b.block).is_some_and(yields_borrowed_value),
        Expr::If(i) => {
            let Some((_, els)) = &i.else_branch else {
                return false;
            };
            let Some(then) = tail(&i.then_branch) else {
                return false;
            };
            branches([then, &**els].into_iter())
        }
        Expr::Match(m) => branches(m.arms.iter().map(|a| &*a.body)),
        _ => false,
    }
}

/// A literal (`"n"`, `3`, `-1.5`, `b"x"`, `true`) or a path that names a
/// constant by convention (`MAX_RETRIES`, `u32::MAX`).
/// `let tag = "n";`, `let limit: u32 = 3;`: an immutable local initialised
/// with a constant, re-created on resume rather than saved (a `&'static
/// str` could not be deserialized anyway).
pub(crate) fn is_constant_local(local: &syn::Local) -> bool {
    let plain = |p: &syn::PatIdent| p.mutability.is_none() && p.by_ref.is_none();
    let immutable = match &local.pat {
        syn::Pat::Ident(p) => plain(p),
        syn::Pat::Type(t) => matches!(&*t.pat, syn::Pat::Ident(p) if plain(p)),
        _ => false,
    };
    immutable
        && local
            .init
            .as_ref()
            .is_some_and(|i| i.diverge.is_none() && is_constant(&i.expr))
}

pub(crate) fn is_constant(expr: &Expr) -> bool {
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
pub(crate) fn is_pure(expr: &Expr) -> bool {
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

/// Whether `expr` may move local `name` out (a bare `name` passed, pushed,
/// returned or bound by value), outside closures. Uses that only borrow it
/// (a method's receiver, a field or index base, `&name`, a comparison, a
/// macro's arguments) do not count; a `Copy` local used by value does, which
/// only makes the caller more careful.
pub(crate) fn moves_local(name: &str, expr: &Expr) -> bool {
    use syn::visit::{self, Visit};
    struct Mover<'a> {
        name: &'a str,
        found: bool,
    }
    impl Mover<'_> {
        fn is_name(&self, e: &Expr) -> bool {
            matches!(strip_parens(e), Expr::Path(p) if p.qself.is_none() && p.path.is_ident(self.name))
        }
    }
    impl<'ast> Visit<'ast> for Mover<'_> {
        fn visit_expr(&mut self, e: &'ast Expr) {
            match e {
                Expr::Path(p) if p.qself.is_none() && p.path.is_ident(self.name) => {
                    self.found = true
                }
                Expr::MethodCall(m) => {
                    if !self.is_name(&m.receiver) {
                        self.visit_expr(&m.receiver);
                    }
                    m.args.iter().for_each(|a| self.visit_expr(a));
                }
                Expr::Field(f) if self.is_name(&f.base) => {}
                Expr::Index(i) => {
                    if !self.is_name(&i.expr) {
                        self.visit_expr(&i.expr);
                    }
                    self.visit_expr(&i.index);
                }
                Expr::Reference(r) if self.is_name(&r.expr) => {}
                Expr::Binary(b) if self.is_name(&b.left) || self.is_name(&b.right) => {
                    for side in [&b.left, &b.right] {
                        if !self.is_name(side) {
                            self.visit_expr(side);
                        }
                    }
                }
                Expr::Closure(_) | Expr::Macro(_) => {}
                _ => visit::visit_expr(self, e),
            }
        }
        fn visit_stmt_macro(&mut self, _: &'ast syn::StmtMacro) {}
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    let mut m = Mover { name, found: false };
    m.visit_expr(expr);
    m.found
}

pub(crate) fn strip_parens(expr: &Expr) -> &Expr {
    match expr {
        Expr::Paren(p) => strip_parens(&p.expr),
        Expr::Group(g) => strip_parens(&g.expr),
        other => other,
    }
}

/// Whether an initialiser holds a closure or an `async` block anywhere: its
/// value's type may then contain that expression's own anonymous type
/// (`|x| x * k`, `make(move || ..)`), which a second copy of the
/// expression would not have, so such a `#[transient]` cannot be assigned
/// a value built again.
pub(crate) fn holds_anonymous_type(expr: &Expr) -> bool {
    struct Finder(bool);
    impl<'ast> Visit<'ast> for Finder {
        fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {
            self.0 = true;
        }
        fn visit_expr_async(&mut self, _: &'ast syn::ExprAsync) {
            self.0 = true;
        }
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    let mut f = Finder(false);
    f.visit_expr(expr);
    f.0
}

/// A `let` pattern as the left side of an assignment that sets the same
/// names (`x`, `x: T`, `mut x`, `(a, _)`), or `None` if it has no such form
/// (`ref x`, `x @ ..`, a struct pattern).
pub(crate) fn assignee(pat: &syn::Pat) -> Option<proc_macro2::TokenStream> {
    use quote::quote;
    match pat {
        syn::Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
            let ident = &p.ident;
            Some(quote!(#ident))
        }
        syn::Pat::Type(t) => assignee(&t.pat),
        syn::Pat::Paren(p) => assignee(&p.pat),
        syn::Pat::Wild(_) => Some(quote!(_)),
        syn::Pat::Tuple(t) => {
            let parts = t.elems.iter().map(assignee).collect::<Option<Vec<_>>>()?;
            Some(quote!((#(#parts,)*)))
        }
        _ => None,
    }
}
