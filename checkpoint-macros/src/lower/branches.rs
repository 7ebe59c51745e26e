//! `if` chains and `match`: which arm holds the site, and whether the arm's
//! bindings are restored from the checkpoint or re-derived by evaluating the
//! condition again (the plan's `Reentry`).

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::{Expr, Ident};

use super::{binding_pat, carried_ident, clean_expr, frame_ident, rt, Lowerer, Split};
use crate::analyse::branches::Reentry;
use crate::analyse::plan::{ArmBody, ArmPlan, ArmsPlan};

/// The enum a lowered `if` / `match` carries its chosen arm's bindings in,
/// from the head to the post: one variant per arm.
struct ArmsEnum {
    ident: Ident,
    variants: Vec<Ident>,
    /// Its definition.
    item: TokenStream,
}

impl ArmsEnum {
    fn new(ident: Ident, arms: usize) -> Self {
        let params: Vec<Ident> = (0..arms).map(|i| format_ident!("T{}", i)).collect();
        let variants: Vec<Ident> = (0..arms).map(|i| format_ident!("A{}", i)).collect();
        let item = quote! {
            #[allow(non_camel_case_types, dead_code)]
            enum #ident<#(#params),*> { #(#variants(#params)),* }
        };
        ArmsEnum {
            ident,
            variants,
            item,
        }
    }

    /// `Enum::Ai`
    fn variant(&self, i: usize) -> TokenStream {
        let (ident, v) = (&self.ident, &self.variants[i]);
        quote!(#ident::#v)
    }
}

impl Lowerer<'_> {
    /// `if` chains and `match`: the head picks an arm and carries the arm's
    /// bindings; the post runs the arm's body.
    ///
    /// On resume the head either restores the bindings of the arm that holds
    /// the site from the checkpoint, or, when the condition / scrutinee is pure
    /// (`rederive`), evaluates it again after the merge, which re-derives
    /// bindings that borrow from restored locals.
    pub(super) fn lower_arms(&mut self, plan: &ArmsPlan) -> Split {
        let (arms, reentry) = (&plan.arms, plan.reentry);
        let rederive = reentry == Reentry::Rederive;
        let frame = frame_ident();
        let arms_enum = ArmsEnum::new(plan.ident.clone(), arms.len());
        let normal_head = arms_head(plan.scrutinee.as_ref(), arms, &arms_enum, rederive);
        let by_site = reentry == Reentry::BySite;
        let (resume_arms, post_arms) = self.arm_bodies(arms, &arms_enum, by_site);
        let items = arms_enum.item.clone();
        if by_site {
            let h = Ident::new("__cp_entered", Span::mixed_site());
            let post = quote! {{
                let #h = match #frame.target() {
                    #(#resume_arms)*
                    _ => #normal_head,
                };
                match #h { #(#post_arms)* }
            }};
            return Split {
                items,
                ..Split::post(post)
            };
        }
        if rederive {
            let post = rederived_post(arms, &arms_enum, normal_head, post_arms);
            let locals: Vec<(usize, Option<Ident>)> =
                plan.decoded_at_entry.iter().map(|&id| (id, None)).collect();
            let resuming = quote!(#frame.target().is_some());
            let decode = self.decode_at_entry(&locals, &resuming);
            let post = quote!({ #decode #post });
            Split {
                items,
                ..Split::post(post)
            }
        } else {
            let head = Ident::new("__cp_head", Span::mixed_site());
            Split {
                items,
                normal_head,
                resume_head: quote!(match #frame.target() { #(#resume_arms)* }),
                post: quote!(match #head { #(#post_arms)* }),
            }
        }
    }

    /// The arms of the resume head (restore mode: which arm holds the target
    /// site) and of the post (each arm's body, lowered).
    fn arm_bodies(
        &mut self,
        arms: &[ArmPlan],
        arms_enum: &ArmsEnum,
        by_site: bool,
    ) -> (Vec<TokenStream>, Vec<TokenStream>) {
        let last_site_arm = arms.iter().rposition(|a| a.sites.is_some());
        let carried_ident = carried_ident();
        let mut resume_arms = Vec::new();
        let mut post_arms = Vec::new();
        for (i, arm) in arms.iter().enumerate() {
            let v = arms_enum.variant(i);
            let pats: Vec<TokenStream> = arm.carried.iter().map(binding_pat).collect();
            match &arm.body {
                ArmBody::Plain(body) => {
                    let body = clean_expr(body);
                    post_arms.push(quote!(#v((#(#pats,)*)) => #body,));
                }
                ArmBody::Rederived { overwrite, block } => {
                    let overwrite = self.overwrite(overwrite);
                    let body = self.lower_block(block);
                    post_arms.push(quote!(#v((#(#pats,)*)) => { #overwrite #body }));
                }
                ArmBody::Restored(_) | ArmBody::Broken => {
                    let Some(range) = arm.sites else { continue };
                    let (first, last) = (range.first, range.last);
                    // Entered by site, the head's last arm is the normal path's.
                    let pattern = if Some(i) == last_site_arm && !by_site {
                        quote!(_)
                    } else {
                        quote!(::core::option::Option::Some(#first..=#last))
                    };
                    resume_arms.push(quote!(#pattern => #v(::core::option::Option::None),));
                    if let ArmBody::Restored(block) = &arm.body {
                        let body = self.lower_block(block);
                        post_arms.push(quote!(#v(#carried_ident) => #body,));
                    }
                }
            }
        }
        (resume_arms, post_arms)
    }
}

/// The normal path's head: the original `match` / `if` chain, each arm
/// producing its variant with the bindings it carries. In restore mode an arm
/// holding a site carries them as `Some(tuple)` on the normal path and `None`
/// on resume; its body starts by binding them as ordinary locals, so the
/// body's own split saves only those still needed after its checkpoints (a
/// binding moved before the checkpoint is not saved).
fn arms_head(
    scrutinee: Option<&Expr>,
    arms: &[ArmPlan],
    arms_enum: &ArmsEnum,
    rederive: bool,
) -> TokenStream {
    let carry = |i: usize| {
        let names = arms[i].carried.iter().map(|b| &b.ident);
        let v = arms_enum.variant(i);
        if !rederive && arms[i].sites.is_some() {
            quote!(#v(::core::option::Option::Some((#(#names,)*))))
        } else {
            quote!(#v((#(#names,)*)))
        }
    };
    match scrutinee {
        Some(scrutinee) => {
            let arms_code = arms.iter().enumerate().map(|(i, arm)| {
                let (head, c) = (&arm.head, carry(i));
                quote!(#head => #c,)
            });
            quote!(match #scrutinee { #(#arms_code)* })
        }
        None => {
            // `if` chain: the heads are the conditions; the last arm is the
            // `else` (synthetic when the user wrote none).
            let mut code = TokenStream::new();
            for (i, arm) in arms.iter().enumerate() {
                let (cond, c) = (&arm.head, carry(i));
                if i + 1 < arms.len() {
                    code.extend(quote!(if #cond { #c } else));
                } else {
                    code.extend(quote!({ #c }));
                }
            }
            code
        }
    }
}

/// Re-derive mode: the condition / scrutinee reads only restored locals and
/// makes no calls, so it is evaluated after the merge, on both paths (on the
/// normal path the arms' borrows must not cross the merge, where the locals
/// they borrow are moved into place), and on resume checked to pick the arm
/// that holds the site.
fn rederived_post(
    arms: &[ArmPlan],
    arms_enum: &ArmsEnum,
    head: TokenStream,
    post_arms: Vec<TokenStream>,
) -> TokenStream {
    let (frame, rt) = (frame_ident(), rt());
    let checks = arms.iter().enumerate().filter_map(|(i, arm)| {
        let range = arm.sites?;
        let (first, last, v) = (range.first, range.last, arms_enum.variant(i));
        Some(quote!((::core::option::Option::Some(#first..=#last), #v(..)) => true,))
    });
    let h = Ident::new("__cp_rederived", Span::mixed_site());
    quote! {{
        let #h = #head;
        if #frame.target().is_some() {
            let ok = match (#frame.target(), &#h) { #(#checks)* _ => false };
            if !ok {
                match #frame.halt(#rt::diverged(&#frame, "the `if`/`match` around the site took another branch when evaluated again on resume")).await {}
            }
        }
        match #h { #(#post_arms)* }
    }}
}
