//! `if` chains and `match`: which arm holds the site, and whether the arm's
//! bindings are restored from the checkpoint or re-derived by evaluating the
//! condition again.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::spanned::Spanned;
use syn::{Block, Expr, Ident};

use super::{binding_pat, clean_expr, frame_ident, rt, Lowerer, Scope, Split};
use crate::analyse::branches::{match_arms, match_reentry, Arm, Reentry};
use crate::names::{free_in_expr, free_in_stmts, NameSet};
use crate::sites;

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
    /// A `match` that holds sites in its arms (a site in its scrutinee or a
    /// guard is misplaced).
    pub(super) fn lower_match(&mut self, m: &syn::ExprMatch, scope: &Scope) -> Split {
        if let Some(r) = sites::sites_in_expr(&m.expr) {
            return self.misplaced(r, m.expr.span());
        }
        if let Some(r) = m
            .arms
            .iter()
            .find_map(|a| a.guard.as_ref().and_then(|(_, g)| sites::sites_in_expr(g)))
        {
            return self.misplaced(r, m.span());
        }
        let reentry = match_reentry(m, &scope.ref_locals);
        let rebound;
        let m = match reentry {
            Reentry::Rederive => {
                rebound = rebind_after_sites(m);
                &rebound
            }
            _ => m,
        };
        let arms = match_arms(m, self.ctx);
        self.lower_arms(Some(&m.expr), arms, reentry, scope)
    }

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
        arms: Vec<Arm>,
        reentry: Reentry,
        scope: &Scope,
    ) -> Split {
        let rederive = reentry == Reentry::Rederive;
        let frame = frame_ident();
        let ident = Ident::new(
            &format!("__CpArms{}", self.fresh("arms")),
            Span::mixed_site(),
        );
        let arms_enum = ArmsEnum::new(ident, arms.len());
        let normal_head = arms_head(scrutinee, &arms, &arms_enum, rederive);
        let by_site = reentry == Reentry::BySite;
        let (resume_arms, post_arms) = self.arm_bodies(&arms, &arms_enum, rederive, by_site, scope);
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
                normal_head: quote!(()),
                resume_head: quote!(()),
                post,
            };
        }
        if rederive {
            let post = rederived_post(&arms, &arms_enum, normal_head, post_arms);
            Split {
                items,
                normal_head: quote!(()),
                resume_head: quote!(()),
                post,
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
        arms: &[Arm],
        arms_enum: &ArmsEnum,
        rederive: bool,
        by_site: bool,
        scope: &Scope,
    ) -> (Vec<TokenStream>, Vec<TokenStream>) {
        let last_site_arm = arms.iter().rposition(|a| a.sites.is_some());
        let carried_ident = Ident::new("__cp_carried", Span::mixed_site());
        let mut resume_arms = Vec::new();
        let mut post_arms = Vec::new();
        for (i, arm) in arms.iter().enumerate() {
            let v = arms_enum.variant(i);
            let pats: Vec<TokenStream> = arm.carried.iter().map(binding_pat).collect();
            let Some(range) = arm.sites else {
                let body = clean_expr(&arm.body);
                post_arms.push(quote!(#v((#(#pats,)*)) => #body,));
                continue;
            };
            let mut body_block: Block = match &arm.body {
                Expr::Block(b) if b.label.is_none() => b.block.clone(),
                other => syn::parse_quote!({ #other }),
            };
            let mut arm_scope = scope.clone();
            if rederive {
                let carried_names: NameSet =
                    arm.carried.iter().map(|b| b.ident.to_string()).collect();
                arm_scope.bind_inner(&carried_names);
                arm_scope.ref_locals.extend(carried_names.iter().cloned());
                let overwrite = self.restore_mutable_bindings(
                    &arm.carried,
                    &free_in_expr(&arm.body),
                    range,
                    &mut arm_scope,
                );
                let body = self.lower_block(&body_block, &arm_scope);
                post_arms.push(quote!(#v((#(#pats,)*)) => { #overwrite #body }));
                continue;
            }
            for b in arm.carried.iter().filter(|b| b.by_ref) {
                let describe = self.site(range.first).describe();
                self.errors.push(
                    b.ident.span(),
                    format!("`{}` is a reference (`ref` binding) in the branch of {describe}; a reference cannot be saved in a checkpoint: bind by value, or borrow again after the checkpoint", b.ident),
                );
            }
            let (first, last) = (range.first, range.last);
            // Entered by site, the head's last arm is the normal path's.
            let pattern = if Some(i) == last_site_arm && !by_site {
                quote!(_)
            } else {
                quote!(::core::option::Option::Some(#first..=#last))
            };
            resume_arms.push(quote!(#pattern => #v(::core::option::Option::None),));
            let unpack = unpack_carried(&carried_ident, &pats);
            match syn::parse2::<syn::Stmt>(unpack) {
                Ok(stmt) => body_block.stmts.insert(0, stmt),
                Err(e) => {
                    self.errors.add(e);
                    continue;
                }
            }
            let body = self.lower_block(&body_block, &arm_scope);
            post_arms.push(quote!(#v(#carried_ident) => #body,));
        }
        (resume_arms, post_arms)
    }
}

/// `match &mut x { Pat { a, b } => { *a += 1; checkpoint!(); b.push(..) } }`:
/// the checkpoint saves `x` while `a` and `b` borrow it mutably and are used
/// after it, which rustc refuses (E0502). An arm of a re-derived `match` on
/// a `&mut` borrow, without a guard, gets its statements after each
/// top-level site that still read its bindings wrapped in the same `match`
/// again, so that the old borrows end before the site and the rest of the
/// arm uses fresh ones, on the uninterrupted path and after a resume alike
/// (nothing between the site and the re-match can change what the pattern
/// matches while the old bindings are live, so it matches again; if it does
/// not, the run halts as diverged rather than go on).
fn rebind_after_sites(m: &syn::ExprMatch) -> syn::ExprMatch {
    let mut m = m.clone();
    if !matches!(crate::analyse::syntax::strip_parens(&m.expr), Expr::Reference(r) if r.mutability.is_some())
    {
        return m;
    }
    let scrutinee = (*m.expr).clone();
    for arm in &mut m.arms {
        if arm.guard.is_some() {
            continue;
        }
        let bound: NameSet = crate::names::pat_names(&arm.pat);
        if bound.is_empty() {
            continue;
        }
        let mut block: Block = match &*arm.body {
            Expr::Block(b) if b.label.is_none() => b.block.clone(),
            _ => continue,
        };
        if rebind_block(&mut block, &arm.pat, &scrutinee, &bound) {
            *arm.body = Expr::Block(syn::ExprBlock {
                attrs: Vec::new(),
                label: None,
                block,
            });
        }
    }
    m
}

/// Wraps what follows the first top-level site of `block` that reads
/// `bound` in `match scrutinee { pat => { .. } }`, recursively; whether
/// anything changed.
fn rebind_block(block: &mut Block, pat: &syn::Pat, scrutinee: &Expr, bound: &NameSet) -> bool {
    let Some(k) = block.stmts.iter().enumerate().position(|(k, s)| {
        crate::sites::sites_in_stmt(s).is_some()
            && free_in_stmts(&block.stmts[k + 1..])
                .iter()
                .any(|n| bound.contains(n))
    }) else {
        return false;
    };
    let rest = block.stmts.split_off(k + 1);
    let mut inner = Block {
        brace_token: Default::default(),
        stmts: rest,
    };
    rebind_block(&mut inner, pat, scrutinee, bound);
    let (frame, rt) = (frame_ident(), rt());
    let rematch: Expr = syn::parse_quote! {
        match #scrutinee {
            #pat => #inner,
            #[allow(unreachable_patterns)]
            _ => match #frame.halt(#rt::diverged(
                &#frame,
                "the `match` around the site no longer matched its arm's pattern after the checkpoint",
            )).await {},
        }
    };
    block.stmts.push(syn::Stmt::Expr(rematch, None));
    true
}

/// The normal path's head: the original `match` / `if` chain, each arm
/// producing its variant with the bindings it carries. In restore mode an arm
/// holding a site carries them as `Some(tuple)` on the normal path and `None`
/// on resume; its body starts by binding them as ordinary locals, so the
/// body's own split saves only those still needed after its checkpoints (a
/// binding moved before the checkpoint is not saved).
fn arms_head(
    scrutinee: Option<&Expr>,
    arms: &[Arm],
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
    arms: &[Arm],
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
