//! Migrations: how new code takes the fields of checkpoints that older code
//! saved, declared on the `let` of the local they concern:
//!
//! ```text
//! #[migrate(default)]                  // an old checkpoint lacks it: `Default::default()`
//! #[migrate(value = 3)]                // ... lacks it: this value
//! #[migrate(renamed_from = "task")]    // saved as `task` by older code
//! #[migrate(from = u32, with = widen)] // saved as a `u32`: `widen(old)`
//! ```
//!
//! Keys combine (`renamed_from` with `from`/`with`, and either with
//! `default` or `value`). The generated load type-checks each migration
//! against the local (`with` must turn a `from` into the local's type,
//! `value` must be one), with the error on the user's tokens. Renamed sites
//! are the workflow attribute's `renamed_site(from = "..", to = "..")`
//! ([`crate::parse`]).
//!
//! This module parses and checks; `expand` generates the loads.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::visit::{self, Visit};
use syn::{Attribute, Expr, LitStr, Pat, Path, Type};

use crate::errors::Errors;

/// The attribute's name.
const ATTR: &str = "migrate";

/// What a local's `#[migrate(..)]` says.
#[derive(Clone)]
pub struct Migration {
    /// The attribute, for errors.
    pub span: Span,
    /// `renamed_from = "old"`: the field's name in older checkpoints.
    pub renamed_from: Option<LitStr>,
    /// `from = T, with = f`: older checkpoints hold a `T`; `f(T)` gives the
    /// local's value.
    pub convert: Option<(Type, Path)>,
    /// What an older checkpoint that lacks the field gives it.
    pub missing: Option<Missing>,
    /// The local's declared type (`let name: Type`), which `value` and
    /// `with` must give: required for them, so that a mismatch is reported
    /// on the migration, not where the local is used.
    pub ty: Option<Type>,
}

/// `default` or `value = expr`.
#[derive(Clone)]
pub enum Missing {
    Default(Span),
    Value(Expr),
}

pub fn is_migrate(attr: &Attribute) -> bool {
    attr.path().is_ident(ATTR)
}

/// The migration of a `let` with these attributes and pattern, if it has
/// one; `None` for a malformed one too (reported once, by [`check_body`]).
pub fn of_local(attrs: &[Attribute], pat: &Pat) -> Option<Migration> {
    let attr = attrs.iter().find(|a| is_migrate(a))?;
    let mut m = parse(attr).ok()?;
    m.ty = declared_type(pat);
    Some(m)
}

/// `T` of `let name: T`.
fn declared_type(pat: &Pat) -> Option<Type> {
    match pat {
        Pat::Type(t) => Some((*t.ty).clone()),
        _ => None,
    }
}

fn parse(attr: &Attribute) -> syn::Result<Migration> {
    let mut out = Migration {
        span: attr.path().span(),
        renamed_from: None,
        convert: None,
        missing: None,
        ty: None,
    };
    let mut from: Option<Type> = None;
    let mut with: Option<Path> = None;
    let set_missing = |m: Missing, span: Span, out: &mut Migration| {
        if out.missing.is_some() {
            return Err(syn::Error::new(
                span,
                "`default` and `value = ..` both say what an old checkpoint without the field gives it: keep one",
            ));
        }
        out.missing = Some(m);
        Ok(())
    };
    attr.parse_nested_meta(|meta| {
        let key = meta.path.clone();
        if key.is_ident("default") {
            set_missing(Missing::Default(key.span()), key.span(), &mut out)
        } else if key.is_ident("value") {
            let e: Expr = meta.value()?.parse()?;
            set_missing(Missing::Value(e), key.span(), &mut out)
        } else if key.is_ident("renamed_from") {
            let lit: LitStr = meta.value()?.parse()?;
            if lit.value().trim().is_empty() {
                return Err(syn::Error::new(lit.span(), "`renamed_from` needs the field's old name"));
            }
            out.renamed_from = Some(lit);
            Ok(())
        } else if key.is_ident("from") {
            from = Some(meta.value()?.parse()?);
            Ok(())
        } else if key.is_ident("with") {
            with = Some(meta.value()?.parse()?);
            Ok(())
        } else {
            Err(meta.error(
                "unknown migration; expected `default`, `value = <expr>`, `renamed_from = \"old name\"` or `from = <old type>, with = <fn>`",
            ))
        }
    })?;
    out.convert = match (from, with) {
        (Some(t), Some(f)) => Some((t, f)),
        (None, None) => None,
        (Some(t), None) => {
            return Err(syn::Error::new(
                t.span(),
                "`from = <old type>` needs `with = <fn>`: the function from the old type to the local's",
            ))
        }
        (None, Some(f)) => {
            return Err(syn::Error::new(
                f.span(),
                "`with = <fn>` needs `from = <old type>`: the type older checkpoints hold",
            ))
        }
    };
    if out.renamed_from.is_none() && out.convert.is_none() && out.missing.is_none() {
        return Err(syn::Error::new(
            out.span,
            "#[migrate] needs what to do: `default`, `value = <expr>`, `renamed_from = \"old name\"` or `from = <old type>, with = <fn>`",
        ));
    }
    Ok(out)
}

/// Checks every `#[migrate]` of the body: well formed, on a `let` of one
/// local that is saved (not `#[transient]`), once per `let`, and nowhere
/// else (a closure or a nested item has no checkpoints to migrate).
pub fn check_body(block: &syn::Block, errors: &mut Errors) {
    let mut v = Checker { errors, nested: 0 };
    v.visit_block(block);
}

struct Checker<'a> {
    errors: &'a mut Errors,
    nested: usize,
}

impl Checker<'_> {
    fn misplaced(&mut self, attrs: &[Attribute]) {
        for a in attrs.iter().filter(|a| is_migrate(a)) {
            self.errors.push(
                a.path().span(),
                "#[migrate] goes on a `let` of the #[workflow] body that a checkpoint saves",
            );
        }
    }
}

impl<'ast> Visit<'ast> for Checker<'_> {
    fn visit_local(&mut self, l: &'ast syn::Local) {
        let found: Vec<&Attribute> = l.attrs.iter().filter(|a| is_migrate(a)).collect();
        if self.nested > 0 {
            self.misplaced(&l.attrs);
        } else if let Some(first) = found.first() {
            if let Some(second) = found.get(1) {
                self.errors.push(
                    second.path().span(),
                    "one #[migrate(..)] per local: put every key in the first one",
                );
            }
            if let Err(e) = parse(first) {
                self.errors.add(e);
            }
            if l.attrs.iter().any(|a| a.path().is_ident("transient")) {
                self.errors.push(
                    first.path().span(),
                    "a #[transient] local is re-created on resume, never saved: it has nothing to migrate",
                );
            } else if crate::analyse::syntax::is_constant_local(l) {
                self.errors.push(
                    first.path().span(),
                    "an immutable local initialised with a constant is re-created on resume, never saved: it has nothing to migrate",
                );
            }
            let needs_type = parse(first)
                .is_ok_and(|m| m.convert.is_some() || matches!(m.missing, Some(Missing::Value(_))));
            if needs_type && declared_type(&l.pat).is_none() {
                self.errors.push(
                    l.pat.span(),
                    "a migration with `value` or `with` needs the local's type written (`let name: Type = ..`): it is the type the migration must give",
                );
            }
            if !binds_one_local(&l.pat) {
                self.errors.push(
                    l.pat.span(),
                    "#[migrate] needs a `let` of one local (`let name: Type = ..`): destructure after it",
                );
            }
        }
        visit::visit_local(self, l);
    }

    fn visit_expr_closure(&mut self, c: &'ast syn::ExprClosure) {
        self.nested += 1;
        visit::visit_expr_closure(self, c);
        self.nested -= 1;
    }

    fn visit_expr_async(&mut self, a: &'ast syn::ExprAsync) {
        self.nested += 1;
        visit::visit_expr_async(self, a);
        self.nested -= 1;
    }

    fn visit_item(&mut self, _: &'ast syn::Item) {}

    fn visit_expr(&mut self, e: &'ast Expr) {
        // `#[migrate]` on an expression or statement that is not a `let`.
        let attrs: &[Attribute] = match e {
            Expr::Block(b) => &b.attrs,
            Expr::Call(c) => &c.attrs,
            Expr::MethodCall(m) => &m.attrs,
            Expr::Macro(m) => &m.attrs,
            Expr::Assign(a) => &a.attrs,
            _ => &[],
        };
        self.misplaced(attrs);
        visit::visit_expr(self, e);
    }
}

fn binds_one_local(pat: &Pat) -> bool {
    match pat {
        Pat::Ident(p) => p.subpat.is_none() && p.by_ref.is_none(),
        Pat::Type(t) => binds_one_local(&t.pat),
        _ => false,
    }
}
