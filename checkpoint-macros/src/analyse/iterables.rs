//! What a `for` loop's iterable is, judged from its syntax: whether it writes
//! through its items, and which part of it starts from a collection whose
//! order may be a hash order (see `checkpoint_runtime`'s `iteration` module
//! for what is done about each).

use quote::quote;
use syn::Expr;

use super::syntax::strip_parens;

/// Methods that start iterating a collection (the base iterator that a hash
/// order would come from).
const ITERATING_METHODS: &[&str] = &[
    "iter",
    "iter_mut",
    "into_iter",
    "keys",
    "values",
    "values_mut",
    "into_keys",
    "into_values",
    "drain",
];

/// Whether the iterable hands out mutable references into something the loop
/// borrows: a `&mut` or a `*_mut` method call anywhere in it
/// (`v.iter_mut()`, `m.values_mut()`, `v.chunks_mut(2)`, `&mut v`,
/// `a.iter_mut().zip(b.iter())`).
pub(crate) fn writes_through(expr: &Expr) -> bool {
    struct Finder(bool);
    impl<'ast> syn::visit::Visit<'ast> for Finder {
        fn visit_expr_reference(&mut self, r: &'ast syn::ExprReference) {
            self.0 |= r.mutability.is_some();
            syn::visit::visit_expr_reference(self, r);
        }
        fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
            self.0 |= m.method.to_string().ends_with("_mut");
            syn::visit::visit_expr_method_call(self, m);
        }
        fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {
            // A closure's own `&mut` does not make the loop's items mutable.
        }
    }
    let mut f = Finder(false);
    syn::visit::Visit::visit_expr(&mut f, expr);
    f.0
}

/// A range, or adapters over one (`0..n`, `(0..n).rev()`, `(1..=n).step_by(2)`):
/// its items are integers that depend only on their position.
pub(crate) fn is_range(expr: &Expr) -> bool {
    match strip_parens(expr) {
        Expr::Range(_) => true,
        Expr::MethodCall(m) => {
            ["rev", "step_by", "skip", "take"].contains(&m.method.to_string().as_str())
                && is_range(&m.receiver)
        }
        _ => false,
    }
}

/// A place: a local or a field of one (`map`, `state.pending`).
fn is_place(expr: &Expr) -> bool {
    match strip_parens(expr) {
        Expr::Path(p) => p.qself.is_none() && p.path.get_ident().is_some(),
        Expr::Field(f) => is_place(&f.base),
        _ => false,
    }
}

/// The iterable with its base iterator (the part that starts from a place:
/// `&map`, `map`, `map.iter()`, `set.drain()`) routed through the runtime's
/// order probe, which keeps the iterator as it is unless the place is a
/// `HashMap`/`HashSet`, and then iterates it in a canonical order. `None`
/// when the iterable does not start from a place (a range, a call).
pub(crate) fn in_stable_order(expr: &Expr) -> Option<Expr> {
    let wrap = |base: &Expr, root: &Expr| -> Expr {
        let rt = quote!(::checkpoint_runtime::__private);
        syn::parse_quote! {{
            #[allow(unused_imports)]
            use #rt::{HashOrdered as _, SourceOrdered as _};
            let probe = #rt::order_probe(&#root);
            (&&probe).in_stable_order(#base)
        }}
    };
    match strip_parens(expr) {
        Expr::Reference(r) if is_place(&r.expr) => Some(wrap(expr, &r.expr)),
        e if is_place(e) => Some(wrap(expr, e)),
        // `set.clone()` iterated by value: a clone keeps the original's
        // order only until the original is rebuilt on resume.
        Expr::MethodCall(m)
            if m.method == "clone" && m.args.is_empty() && is_place(&m.receiver) =>
        {
            Some(wrap(expr, &m.receiver))
        }
        _ => in_stable_order_chain(expr, &wrap),
    }
}

/// [`in_stable_order`] inside a method chain: only a call of an iterating
/// method on a place (`m.iter()`) is a base iterator; a place as the receiver
/// of any other method (`v.clone()`, `v.windows(2)`) is not.
fn in_stable_order_chain(expr: &Expr, wrap: &dyn Fn(&Expr, &Expr) -> Expr) -> Option<Expr> {
    let Expr::MethodCall(m) = strip_parens(expr) else {
        return None;
    };
    let name = m.method.to_string();
    if is_place(&m.receiver) && ITERATING_METHODS.contains(&name.as_str()) {
        return Some(wrap(expr, &m.receiver));
    }
    // `map.clone().into_iter()`: a clone keeps the original's order only
    // until the original is rebuilt on resume.
    if let Expr::MethodCall(inner) = strip_parens(&m.receiver) {
        if inner.method == "clone"
            && inner.args.is_empty()
            && is_place(&inner.receiver)
            && ITERATING_METHODS.contains(&name.as_str())
        {
            return Some(wrap(expr, &inner.receiver));
        }
    }
    let inner = in_stable_order_chain(&m.receiver, wrap)?;
    let mut m = m.clone();
    m.receiver = Box::new(inner);
    Some(Expr::MethodCall(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;

    fn wrapped_base(src: &str) -> Option<String> {
        let e: Expr = syn::parse_str(src).unwrap();
        // The argument of `in_stable_order(..)` is the base iterator.
        in_stable_order(&e).map(|w| {
            let text = w.to_token_stream().to_string();
            let start = text.find("in_stable_order (").unwrap() + "in_stable_order (".len();
            let mut depth = 1;
            let mut end = start;
            for (i, c) in text[start..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = start + i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            text[start..end].trim().to_owned()
        })
    }

    #[test]
    fn the_base_iterator_is_the_part_that_starts_from_a_place() {
        assert_eq!(wrapped_base("&prices").as_deref(), Some("& prices"));
        assert_eq!(wrapped_base("users").as_deref(), Some("users"));
        assert_eq!(
            wrapped_base("users.iter().enumerate()").as_deref(),
            Some("users . iter ()")
        );
        assert_eq!(
            wrapped_base("state.seen.keys().cloned().filter(|k| k.len() > 1)").as_deref(),
            Some("state . seen . keys ()")
        );
        assert_eq!(
            wrapped_base("m.clone().into_iter()").as_deref(),
            Some("m . clone () . into_iter ()")
        );
        assert_eq!(wrapped_base("0..q.len()"), None);
        assert_eq!(wrapped_base("xs.clone()").as_deref(), Some("xs . clone ()"));
        assert_eq!(wrapped_base("xs.clone().len()"), None);
        assert_eq!(wrapped_base("v.windows(2).map(|w| w[0])"), None);
        assert_eq!(wrapped_base("make_map().iter()"), None);
        assert_eq!(wrapped_base("m.get(&k).unwrap().iter()"), None);
    }

    #[test]
    fn mutable_iteration_is_seen_anywhere_in_the_iterable() {
        let yes = [
            "v.iter_mut()",
            "&mut v",
            "m.values_mut()",
            "v.chunks_mut(2)",
            "a.iter_mut().zip(b.iter())",
            "all(&mut v)",
        ];
        for src in yes {
            assert!(writes_through(&syn::parse_str(src).unwrap()), "{src}");
        }
        let no = [
            "v.iter()",
            "&v",
            "v.drain(..)",
            "v.iter().map(|x| { let mut y = *x; y })",
        ];
        for src in no {
            assert!(!writes_through(&syn::parse_str(src).unwrap()), "{src}");
        }
    }
}
