//! `if` chains and `match`: which arm holds the site, and whether the arm's
//! bindings are restored from the checkpoint or re-derived by evaluating the
//! condition again.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::{Block, Expr, Ident};

use super::{binding_pat, clean_expr, frame_ident, rt, Lowerer, Scope, Split};
use crate::names::{free_in_expr, NameSet, PatBinding};
use crate::sites::SiteRange;

impl Lowerer<'_> {
    /// `if` chains and `match`: the head picks an arm and carries the arm's
    /// bindings; the post runs the arm's body.
    ///
    /// On resume the head either restores the bindings of the arm that holds
    /// the site from the checkpoint, or, when the condition / scrutinee is pure
    /// (`rederive`), evaluates it again after the merge, which re-derives
    /// bindings that borrow from restored locals.
    pub(super) fn lower_arms(
        &mut self,
        scrutinee: Option<&Expr>,
        arms: Vec<(TokenStream, Vec<PatBinding>, Option<SiteRange>, Expr)>,
        rederive: bool,
        scope: &Scope,
    ) -> Split {
        let frame = frame_ident();
        let rt = rt();
        let enum_ident = Ident::new(
            &format!("__CpArms{}", self.fresh("arms")),
            Span::mixed_site(),
        );
        let n = arms.len();
        let params: Vec<Ident> = (0..n).map(|i| format_ident!("T{}", i)).collect();
        let variants: Vec<Ident> = (0..n).map(|i| format_ident!("A{}", i)).collect();
        let items = quote! {
            #[allow(non_camel_case_types, dead_code)]
            enum #enum_ident<#(#params),*> { #(#variants(#params)),* }
        };

        // In restore mode an arm holding a site carries its bindings as
        // `Some(tuple)` on the normal path and `None` on resume; its body
        // starts by binding them as ordinary locals, so the body's own split
        // saves only those still needed after its checkpoints (a binding moved
        // before the checkpoint is not saved).
        let wraps = |i: usize| !rederive && arms[i].2.is_some();
        let carry = |i: usize| {
            let names = arms[i].1.iter().map(|b| &b.ident);
            let v = &variants[i];
            if wraps(i) {
                quote!(#enum_ident::#v(::core::option::Option::Some((#(#names,)*))))
            } else {
                quote!(#enum_ident::#v((#(#names,)*)))
            }
        };
        let normal_head = match scrutinee {
            Some(scrutinee) => {
                let arms_code = arms.iter().enumerate().map(|(i, (pat, ..))| {
                    let c = carry(i);
                    quote!(#pat => #c,)
                });
                quote!(match #scrutinee { #(#arms_code)* })
            }
            None => {
                // `if` chain: the arm tokens are the conditions; the last arm is
                // the `else` (synthetic when the user wrote none).
                let mut code = TokenStream::new();
                for (i, (cond, ..)) in arms.iter().enumerate() {
                    let c = carry(i);
                    if i + 1 < n {
                        code.extend(quote!(if #cond { #c } else));
                    } else {
                        code.extend(quote!({ #c }));
                    }
                }
                code
            }
        };

        // Resume head (restore mode) and the arms' bodies.
        let site_arms: Vec<usize> = arms
            .iter()
            .enumerate()
            .filter(|(_, a)| a.2.is_some())
            .map(|(i, _)| i)
            .collect();
        let carried_ident = Ident::new("__cp_carried", Span::mixed_site());
        let mut resume_arms = Vec::new();
        let mut post_arms = Vec::new();
        for (i, (_, carried, sites, body)) in arms.iter().enumerate() {
            let v = &variants[i];
            let pats: Vec<TokenStream> = carried.iter().map(binding_pat).collect();
            let Some(range) = sites else {
                let body = clean_expr(body);
                post_arms.push(quote!(#enum_ident::#v((#(#pats,)*)) => #body,));
                continue;
            };
            let mut body_block: Block = match body {
                Expr::Block(b) if b.label.is_none() => b.block.clone(),
                other => syn::parse_quote!({ #other }),
            };
            let mut arm_scope = scope.clone();
            if rederive {
                let carried_names: NameSet = carried.iter().map(|b| b.ident.to_string()).collect();
                arm_scope.bind_inner(&carried_names);
                arm_scope.ref_locals.extend(carried_names.iter().cloned());
                let overwrite = self.restore_mutable_bindings(
                    carried,
                    &free_in_expr(body),
                    *range,
                    &mut arm_scope,
                );
                let body = self.lower_block(&body_block, &arm_scope);
                post_arms.push(quote!(#enum_ident::#v((#(#pats,)*)) => { #overwrite #body }));
                continue;
            }
            for b in carried.iter().filter(|b| b.by_ref) {
                let describe = self.site(range.first).describe();
                self.errors.push(
                    b.ident.span(),
                    format!("`{}` is a reference (`ref` binding) in the branch of {describe}; a reference cannot be saved in a checkpoint: bind by value, or borrow again after the checkpoint", b.ident),
                );
            }
            let (first, last) = (range.first, range.last);
            let pattern = if Some(&i) == site_arms.last() {
                quote!(_)
            } else {
                quote!(::core::option::Option::Some(#first..=#last))
            };
            resume_arms.push(quote!(#pattern => #enum_ident::#v(::core::option::Option::None),));
            let unpack = unpack_carried(&carried_ident, &pats);
            match syn::parse2::<syn::Stmt>(unpack) {
                Ok(stmt) => body_block.stmts.insert(0, stmt),
                Err(e) => {
                    self.errors.add(e);
                    continue;
                }
            }
            let body = self.lower_block(&body_block, &arm_scope);
            post_arms.push(quote!(#enum_ident::#v(#carried_ident) => #body,));
        }

        let head = Ident::new("__cp_head", Span::mixed_site());
        if rederive {
            // The condition / scrutinee reads only restored locals and makes no
            // calls: evaluate it again after the merge, when the restored locals
            // have their types, and check it picks the arm that holds the site.
            let checks = arms.iter().zip(&variants).filter_map(|((_, _, sites, _), v)| {
                let range = (*sites)?;
                let (first, last) = (range.first, range.last);
                Some(quote!((::core::option::Option::Some(#first..=#last), #enum_ident::#v(..)) => true,))
            });
            // Evaluated after the merge on both paths: on the normal path the
            // arms' borrows must not cross the merge, where the locals they
            // borrow are moved into place.
            let h = Ident::new("__cp_rederived", Span::mixed_site());
            let post = quote! {{
                let #h = #normal_head;
                if #frame.target().is_some() {
                    let ok = match (#frame.target(), &#h) { #(#checks)* _ => false };
                    if !ok {
                        match #frame.halt(#rt::diverged(&#frame, "the `if`/`match` around the site took another branch when evaluated again on resume")).await {}
                    }
                }
                match #h { #(#post_arms)* }
            }};
            let _ = head;
            Split {
                items,
                normal_head: quote!(()),
                resume_head: quote!(()),
                post,
            }
        } else {
            Split {
                items,
                normal_head,
                resume_head: quote!(match #frame.target() { #(#resume_arms)* }),
                post: quote!(match #head { #(#post_arms)* }),
            }
        }
    }
}

/// `let (a, mut b) = <carried bindings>;`: the first statement of a branch
/// body whose bindings are carried as `Some(tuple)` on the normal path (the
/// resume path skips it, along with the rest of the body before the site).
pub(super) fn unpack_carried(carried: &Ident, pats: &[TokenStream]) -> TokenStream {
    let frame = frame_ident();
    let rt = rt();
    quote! {
        let (#(#pats,)*) = match #carried {
            ::core::option::Option::Some(carried) => carried,
            ::core::option::Option::None => match #frame.halt(#rt::diverged(
                &#frame,
                "a branch's bindings are missing on the normal path",
            )).await {},
        };
    }
}
