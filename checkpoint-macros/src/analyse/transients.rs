//! What a `#[transient]` local may be built from.
//!
//! A transient is not saved: on resume its initialiser runs again, at the
//! split that hands it over, with the locals it reads restored as they were
//! *at the checkpoint*. The uninterrupted run built it from their values
//! *where it was declared*. The two agree only if nothing the initialiser
//! reads changes in between, so an initialiser that reads a local declared
//! `mut` is refused here, naming both (the rest of the model, such as a
//! transient iterator, is in `docs/exactness.md`).

use syn::visit::{self, Visit};
use syn::{Block, Local};

use crate::errors::Errors;
use crate::names::{free_in_expr, pat_bindings, pat_names, NameSet};

/// Refuses each `#[transient]` local whose initialiser reads a local that is
/// declared `mut` anywhere in the body (`mut_params`: the parameters
/// declared `mut`).
pub(crate) fn check(body: &Block, mut_params: &NameSet) -> syn::Result<()> {
    let mut finder = Finder {
        mutable: mut_params.clone(),
        transients: Vec::new(),
    };
    finder.visit_block(body);
    let mut errors = Errors::default();
    for local in &finder.transients {
        let Some(init) = &local.init else { continue };
        let read = free_in_expr(&init.expr);
        let Some(changing) = read.iter().find(|n| finder.mutable.contains(*n)) else {
            continue;
        };
        let names: Vec<String> = pat_names(&local.pat).into_iter().collect();
        let name = names.join("`, `");
        errors.push(
            syn::spanned::Spanned::span(&local.pat),
            format!(
                "`#[transient]` local `{name}` is built again on resume from `{changing}`, which is declared `mut` and may change after `{name}` is made: a resumed run would build it from the value `{changing}` has at the checkpoint, not the value it had here; drop `#[transient]` so that `{name}` is saved, or build it only from locals that do not change"
            ),
        );
    }
    errors.finish()
}

struct Finder {
    mutable: NameSet,
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

    fn visit_item(&mut self, _: &'ast syn::Item) {}
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
