//! What a `#[transient]` local may be built from.
//!
//! A transient is not saved: on resume its initialiser runs again, at the
//! split that hands it over, with the locals it reads restored as they were
//! *at the checkpoint*. The uninterrupted run built it from their values
//! *where it was declared*. The two agree only if nothing the initialiser
//! reads changes in between, so an initialiser that reads a local declared
//! `mut`, or one the body changes through a shared reference (`base.set(..)`
//! on a `Cell`, `.borrow_mut()` on a `RefCell`, `.lock()` on a `Mutex`: see
//! [`INTERIOR_MUTATORS`]), is refused here, naming both. A change the body
//! cannot show (through a clone of an `Rc`, inside a method of the user's
//! own) stays invisible: the rest of the model, such as a transient
//! iterator, is in `docs/exactness.md`.

use syn::visit::{self, Visit};
use syn::{Block, Local};

use crate::errors::Errors;
use crate::names::{free_in_expr, pat_bindings, pat_names, NameSet};

/// Methods that change their receiver through a shared reference (`Cell`,
/// `RefCell`, `Mutex`, `RwLock`, the atomics), with their argument count:
/// called on a local, they change it even though it is not declared `mut`.
/// The count keeps namesakes out (`str::replace(from, to)`,
/// `Iterator::take(n)`, `io::Write::write(buf)`).
const INTERIOR_MUTATORS: &[(&str, usize)] = &[
    ("set", 1),
    ("replace", 1),
    ("replace_with", 1),
    ("swap", 1),
    ("take", 0),
    ("update", 1),
    ("borrow_mut", 0),
    ("try_borrow_mut", 0),
    ("lock", 0),
    ("try_lock", 0),
    ("write", 0),
    ("try_write", 0),
    ("store", 2),
    ("fetch_add", 2),
    ("fetch_sub", 2),
    ("fetch_and", 2),
    ("fetch_or", 2),
    ("fetch_xor", 2),
    ("fetch_max", 2),
    ("fetch_min", 2),
    ("fetch_update", 3),
    ("compare_exchange", 4),
    ("compare_exchange_weak", 4),
];
/// Refuses each `#[transient]` local whose initialiser reads a local that is
/// declared `mut` anywhere in the body (`mut_params`: the parameters
/// declared `mut`), or that the body changes through one of the
/// [`INTERIOR_MUTATORS`].
pub(crate) fn check(body: &Block, mut_params: &NameSet) -> syn::Result<()> {
    let mut finder = Finder {
        mutable: mut_params.clone(),
        mutated: Vec::new(),
        transients: Vec::new(),
    };
    finder.visit_block(body);
    let mut errors = Errors::default();
    for local in &finder.transients {
        let Some(init) = &local.init else { continue };
        let read = free_in_expr(&init.expr);
        let names: Vec<String> = pat_names(&local.pat).into_iter().collect();
        let name = names.join("`, `");
        if crate::analyse::syntax::holds_anonymous_type(&init.expr) {
            let captured = finder
                .transients
                .iter()
                .filter(|t| !std::ptr::eq(*t, local))
                .flat_map(|t| pat_names(&t.pat))
                .find(|t| read.contains(t));
            if let Some(t) = captured {
                let span = pat_bindings(&local.pat).first().map_or_else(
                    || syn::spanned::Spanned::span(&local.pat),
                    |b| b.ident.span(),
                );
                errors.push(
                    span,
                    format!(
                        "`#[transient]` closure `{name}` captures the `#[transient]` `{t}`: a transient is built again after each checkpoint, but not while a closure (built once) borrows it, so the closure would go on with the first `{t}` while a resumed run builds a new one; take it as an argument (`|{t}: &_, ..| ..`, called with `&{t}`), or call `{t}` directly"
                    ),
                );
                continue;
            }
        }
        if let Some(changed) = closure_state(&init.expr) {
            let ClosureState { captured, how } = changed;
            let span = pat_bindings(&local.pat).first().map_or_else(
                || syn::spanned::Spanned::span(&local.pat),
                |b| b.ident.span(),
            );
            errors.push(
                span,
                format!(
                    "`#[transient]` closure `{name}` changes `{captured}`, which it owns (`{how}`): a closure is built once, so the uninterrupted run would keep that state across a checkpoint while a resumed run builds the closure again and starts over; keep `{captured}` in a saved local declared before the closure and pass it in as an argument (`|{captured}: &mut _| ..`)"
                ),
            );
            continue;
        }
        let how = if let Some(changing) = read.iter().find(|n| finder.mutable.contains(*n)) {
            format!("from `{changing}`, which is declared `mut` and may change after `{name}` is made: a resumed run would build it from the value `{changing}` has at the checkpoint")
        } else if let Some((changing, method)) =
            finder.mutated.iter().find(|(n, _)| read.contains(n))
        {
            format!("from `{changing}`, which the body changes through a shared reference (`{changing}.{method}(..)`) and may change after `{name}` is made: a resumed run would build it from the value `{changing}` has at the checkpoint")
        } else {
            continue;
        };
        errors.push(
            syn::spanned::Spanned::span(&local.pat),
            format!(
                "`#[transient]` local `{name}` is built again on resume {how}, not the value it had here; drop `#[transient]` so that `{name}` is saved, or build it only from locals that do not change"
            ),
        );
    }
    errors.finish()
}

struct Finder {
    mutable: NameSet,
    /// Locals the body calls one of the [`INTERIOR_MUTATORS`] on, with the
    /// first such method.
    mutated: Vec<(String, String)>,
    transients: Vec<Local>,
}

impl<'ast> Visit<'ast> for Finder {
    fn visit_local(&mut self, l: &'ast Local) {
        for b in pat_bindings(&l.pat) {
            if b.mutable {
                self.mutable.insert(b.ident.to_string());
            }
        }
        if l.attrs.iter().any(|a| a.path().is_ident("transient")) {
            self.transients.push(l.clone());
        }
        visit::visit_local(self, l);
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        let method = call.method.to_string();
        if INTERIOR_MUTATORS.contains(&(method.as_str(), call.args.len())) {
            if let Some(root) = receiver_local(&call.receiver) {
                if !self.mutated.iter().any(|(n, _)| *n == root) {
                    self.mutated.push((root, method));
                }
            }
        }
        visit::visit_expr_method_call(self, call);
    }

    fn visit_item(&mut self, _: &'ast syn::Item) {}
}

/// Methods of the standard collections, `String` and iterators that change
/// their receiver through `&mut self`.
const MUT_METHODS: &[&str] = &[
    "push",
    "push_str",
    "push_back",
    "push_front",
    "pop",
    "pop_back",
    "pop_front",
    "insert",
    "remove",
    "clear",
    "extend",
    "append",
    "truncate",
    "retain",
    "drain",
    "sort",
    "sort_by",
    "sort_by_key",
    "sort_unstable",
    "dedup",
    "reverse",
    "entry",
    "get_mut",
    "next",
    "nth",
];

/// Methods that only read their receiver (of std's types and common
/// conversions): a closure calling them on a value it owns keeps no state.
const PURE_METHODS: &[&str] = &[
    "clone",
    "len",
    "is_empty",
    "get",
    "contains",
    "contains_key",
    "to_string",
    "to_owned",
    "as_str",
    "as_ref",
    "as_slice",
    "iter",
    "keys",
    "values",
    "starts_with",
    "ends_with",
    "eq",
    "ne",
    "cmp",
    "partial_cmp",
    "min",
    "max",
    "abs",
    "pow",
    "is_some",
    "is_none",
    "is_ok",
    "is_err",
    "first",
    "last",
    "trim",
    "to_lowercase",
    "to_uppercase",
    "chars",
    "bytes",
    "lines",
    "split",
    "join",
    "format",
    "count",
    "sum",
    "wrapping_add",
    "wrapping_mul",
    "saturating_add",
    "checked_add",
];

/// A change a `#[transient]` closure makes to state it owns.
struct ClosureState {
    captured: String,
    how: String,
}

/// The first change a closure in `init` makes to a captured local that the
/// closure owns: one declared inside the initialiser (`{ let mut n = 0;
/// move || { n += 1; n } }`), or any local a `move` closure captures. A
/// plain closure changing an outer local changes that local, which is
/// saved: not state of the closure's own.
fn closure_state(init: &syn::Expr) -> Option<ClosureState> {
    struct Seeker {
        outer: NameSet,
        found: Option<ClosureState>,
    }
    impl<'ast> Visit<'ast> for Seeker {
        fn visit_expr_closure(&mut self, c: &'ast syn::ExprClosure) {
            if self.found.is_some() {
                return;
            }
            let mut bound: NameSet = c.inputs.iter().flat_map(pat_names).collect();
            let mut changes = Changes::default();
            changes.visit_expr(&c.body);
            bound.extend(changes.declared.iter().cloned());
            let owned = |name: &String| c.capture.is_some() || !self.outer.contains(name);
            // A value the initialiser builds and the closure owns may also
            // change inside a call the macro cannot see into. (A value a
            // `move` closure takes from outside is a copy of a `Copy` value
            // or a compile error where a site saves it.)
            let built_here = |name: &String| !self.outer.contains(name);
            let opaque = changes
                .opaque
                .into_iter()
                .filter(|(name, _)| built_here(name))
                .map(|(captured, how)| ClosureState {
                    captured,
                    how: format!("{how}, a call that may change it"),
                });
            self.found = changes
                .changed
                .into_iter()
                .filter(|(name, _)| owned(name))
                .map(|(captured, how)| ClosureState { captured, how })
                .chain(opaque)
                .find(|st| !bound.contains(&st.captured));
        }
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    #[derive(Default)]
    struct Changes {
        declared: NameSet,
        changed: Vec<(String, String)>,
        /// Calls that may change what they are given, out of the macro's
        /// sight: a method of its own, a function it is passed to.
        opaque: Vec<(String, String)>,
    }
    impl<'ast> Visit<'ast> for Changes {
        fn visit_local(&mut self, l: &'ast Local) {
            self.declared.extend(pat_names(&l.pat));
            visit::visit_local(self, l);
        }
        fn visit_expr(&mut self, e: &'ast syn::Expr) {
            use quote::ToTokens;
            let change = match e {
                syn::Expr::Assign(a) => {
                    receiver_local(&a.left).map(|n| (n.clone(), format!("{n} = ..")))
                }
                syn::Expr::Binary(b) if is_compound_assign(&b.op) => {
                    let op = b.op.to_token_stream().to_string();
                    receiver_local(&b.left).map(|n| (n.clone(), format!("{n} {op} ..")))
                }
                syn::Expr::Reference(r) if r.mutability.is_some() => {
                    receiver_local(&r.expr).map(|n| (n.clone(), format!("&mut {n}")))
                }
                syn::Expr::MethodCall(m) => {
                    let method = m.method.to_string();
                    let changes = MUT_METHODS.contains(&method.as_str())
                        || INTERIOR_MUTATORS.contains(&(method.as_str(), m.args.len()));
                    let root = receiver_local(&m.receiver);
                    if !changes && !PURE_METHODS.contains(&method.as_str()) {
                        if let Some(n) = &root {
                            self.opaque.push((n.clone(), format!("{n}.{method}(..)")));
                        }
                    }
                    match changes {
                        true => root.map(|n| (n.clone(), format!("{n}.{method}(..)"))),
                        false => None,
                    }
                }
                syn::Expr::Call(c) => {
                    for arg in &c.args {
                        if let Some(n) = receiver_local(arg) {
                            let f = c.func.to_token_stream().to_string().replace(' ', "");
                            self.opaque.push((n.clone(), format!("{f}(.. {n} ..)")));
                        }
                    }
                    None
                }
                _ => None,
            };
            self.changed.extend(change);
            visit::visit_expr(self, e);
        }
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    let mut seeker = Seeker {
        outer: free_in_expr(init),
        found: None,
    };
    seeker.visit_expr(init);
    seeker.found
}

fn is_compound_assign(op: &syn::BinOp) -> bool {
    use syn::BinOp::*;
    matches!(
        op,
        AddAssign(_)
            | SubAssign(_)
            | MulAssign(_)
            | DivAssign(_)
            | RemAssign(_)
            | BitXorAssign(_)
            | BitAndAssign(_)
            | BitOrAssign(_)
            | ShlAssign(_)
            | ShrAssign(_)
    )
}

/// The local a method is called on: `x` of `x.m()`, `x.a.b.m()`,
/// `x[i].m()`, `(&x).m()`, `(*x).m()`; not through another call (`x.clone()`
/// is another value).
fn receiver_local(expr: &syn::Expr) -> Option<String> {
    match expr {
        syn::Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
        syn::Expr::Field(f) => receiver_local(&f.base),
        syn::Expr::Index(i) => receiver_local(&i.expr),
        syn::Expr::Paren(p) => receiver_local(&p.expr),
        syn::Expr::Reference(r) => receiver_local(&r.expr),
        syn::Expr::Unary(u) if matches!(u.op, syn::UnOp::Deref(_)) => receiver_local(&u.expr),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn checked(body: proc_macro2::TokenStream) -> Result<(), String> {
        let block: Block = syn::parse2(quote!({ #body })).expect("parses");
        check(&block, &NameSet::new()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_transient_built_from_a_mut_local_is_refused_naming_both() {
        let err = checked(quote! {
            let mut base = 30;
            #[transient]
            let offset = base;
            for i in 0..3 { out.push(offset + i); base += 10; checkpoint!(); }
        })
        .unwrap_err();
        assert!(err.contains("`offset`") && err.contains("`base`"), "{err}");
    }

    #[test]
    fn a_transient_built_from_a_local_changed_through_a_shared_reference_is_refused() {
        for change in [
            quote!(base.set(40);),
            quote!(*base.borrow_mut() += 1;),
            quote!(*state.base.lock().unwrap() = 2;),
        ] {
            let err = checked(quote! {
                let base = Cell::new(30);
                let state = State::default();
                #[transient]
                let offset = base.get() + state.base.lock().unwrap().clone();
                #change
                checkpoint!();
                out.push(offset);
            })
            .unwrap_err();
            assert!(
                err.contains("`offset`") && err.contains("shared reference"),
                "{err}"
            );
        }
    }

    #[test]
    fn namesakes_of_the_mutators_change_nothing() {
        checked(quote! {
            let name = String::from("a-b");
            let items = vec![1, 2, 3];
            #[transient]
            let client = Client::new(&name, &items);
            let dashed = name.replace("-", "_");
            let first: Vec<_> = items.iter().take(2).collect();
            checkpoint!();
        })
        .unwrap();
    }

    #[test]
    fn a_transient_closure_changing_state_it_owns_is_refused() {
        for init in [
            quote!({
                let mut n = 0;
                move || {
                    n += 1;
                    n
                }
            }),
            quote!(move || {
                seen.push(1);
                seen.len()
            }),
            quote!({
                let hits = Cell::new(0);
                move || hits.set(hits.get() + 1)
            }),
            quote!({
                let mut it = 0..10;
                move || it.next()
            }),
        ] {
            let err = checked(quote! {
                let seen = Vec::new();
                #[transient]
                let next = #init;
                checkpoint!();
                next();
            })
            .unwrap_err();
            assert!(
                err.contains("closure `next`") && err.contains("owns"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_transient_closure_changing_only_its_own_locals_or_an_outer_saved_one_is_accepted() {
        checked(quote! {
            let mut count = 0;
            let prefix = String::from("a");
            #[transient]
            let label = move |x: u32| { let mut s = prefix.clone(); s.push_str(&x.to_string()); s };
            #[transient]
            let scale = |x: u32| { let mut y = x; y *= 2; y };
            checkpoint!();
            label(scale(1));
        })
        .unwrap();
    }

    #[test]
    fn a_transient_closure_owning_a_value_it_calls_into_is_refused() {
        for init in [
            quote!({
                let numbers = Numbers::new();
                move || numbers.draw()
            }),
            quote!({
                let tracker = Tracker::default();
                move |x: u32| record(&tracker, x)
            }),
        ] {
            let err = checked(quote! {
                #[transient]
                let next = #init;
                checkpoint!();
                next();
            })
            .unwrap_err();
            assert!(
                err.contains("closure `next`") && err.contains("a call that may change it"),
                "{err}"
            );
        }
        // Reading a value it owns keeps no state.
        checked(quote! {
            #[transient]
            let label = { let prefix = String::from("v"); move |x: u32| format!("{}{x}", prefix.clone()) };
            checkpoint!();
            label(1);
        })
        .unwrap();
    }

    #[test]
    fn a_transient_closure_capturing_a_transient_is_refused() {
        let err = checked(quote! {
            #[transient]
            let client = Client::new();
            #[transient]
            let fetch = |url: &str| client.get(url);
            checkpoint!();
            fetch("a");
        })
        .unwrap_err();
        assert!(
            err.contains("closure `fetch`") && err.contains("captures the `#[transient]` `client`"),
            "{err}"
        );
    }

    #[test]
    fn a_transient_built_from_unchanging_locals_is_accepted() {
        checked(quote! {
            let base = 30;
            #[transient]
            let client = Client::new(base, ctx.resource::<Config>());
            let mut n = 0;
            checkpoint!();
        })
        .unwrap();
    }
}
