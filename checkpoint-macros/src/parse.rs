//! Parsing and checking the `#[workflow]` item: what the user wrote, before any
//! analysis of the body.

use proc_macro2::TokenStream;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{FnArg, Ident, ItemFn, LitStr, Pat, ReturnType, Type};

use crate::errors::Errors;

/// `#[workflow(name = "...", version = N, renamed_site(from = "..", to = ".."))]`
/// arguments.
#[derive(Default)]
pub struct WorkflowArgs {
    pub name: Option<LitStr>,
    pub version: Option<u32>,
    pub renamed_sites: Vec<RenamedSite>,
}

/// `renamed_site(from = "old key", to = "key")`: checkpoints older code
/// took at site `from` resume at site `to`.
pub struct RenamedSite {
    pub from: LitStr,
    pub to: LitStr,
}

/// A parameter that is part of the workflow's input.
pub struct InputParam {
    pub ident: Ident,
    pub mutable: bool,
    pub ty: Type,
}

/// A checked `#[workflow] async fn`.
pub struct WorkflowFn {
    pub item: ItemFn,
    /// The `ctx: &Ctx` parameter, if the function takes one.
    pub ctx: Option<Ident>,
    pub inputs: Vec<InputParam>,
    pub output: Type,
    /// The name runs are stored under.
    pub name: String,
    /// `version = N`, 1 by default.
    pub version: u32,
    pub renamed_sites: Vec<RenamedSite>,
}

pub fn parse_args(args: TokenStream) -> syn::Result<WorkflowArgs> {
    let mut out = WorkflowArgs::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            let lit: LitStr = meta.value()?.parse()?;
            if lit.value().trim().is_empty() {
                return Err(syn::Error::new(
                    lit.span(),
                    "workflow name must not be empty",
                ));
            }
            out.name = Some(lit);
            Ok(())
        } else if meta.path.is_ident("version") {
            let lit: syn::LitInt = meta.value()?.parse()?;
            let version: u32 = lit.base10_parse()?;
            if version == 0 {
                return Err(syn::Error::new(
                    lit.span(),
                    "workflow versions start at 1 (the default)",
                ));
            }
            out.version = Some(version);
            Ok(())
        } else if meta.path.is_ident("renamed_site") {
            let (mut from, mut to) = (None, None);
            let at = meta.path.span();
            meta.parse_nested_meta(|inner| {
                let slot = if inner.path.is_ident("from") {
                    &mut from
                } else if inner.path.is_ident("to") {
                    &mut to
                } else {
                    return Err(inner.error("expected `from = \"old site\"` or `to = \"site\"`"));
                };
                *slot = Some(inner.value()?.parse::<LitStr>()?);
                Ok(())
            })?;
            match (from, to) {
                (Some(from), Some(to)) => {
                    out.renamed_sites.push(RenamedSite { from, to });
                    Ok(())
                }
                _ => Err(syn::Error::new(
                    at,
                    "`renamed_site` needs both keys: `renamed_site(from = \"old site\", to = \"site\")`",
                )),
            }
        } else {
            Err(meta.error(
                "unknown #[workflow] argument; expected `name = \"...\"`, `version = N` or `renamed_site(from = \"..\", to = \"..\")`",
            ))
        }
    });
    parser.parse2(args)?;
    Ok(out)
}

/// Checks the signature and splits it into the parts code generation needs.
/// All problems are collected so the user sees them at once.
pub fn parse_fn(args: WorkflowArgs, item: ItemFn) -> syn::Result<WorkflowFn> {
    let mut errors = Errors::default();
    let sig = &item.sig;
    check_signature(sig, &mut errors);
    let (ctx, inputs) = split_params(sig, &mut errors);
    let output = match &sig.output {
        ReturnType::Default => syn::parse_quote!(()),
        ReturnType::Type(_, ty) => {
            if let Type::ImplTrait(it) = &**ty {
                errors.push(
                    it.span(),
                    "a workflow's output is stored and must be a concrete serializable type, not `impl Trait`",
                );
            }
            (**ty).clone()
        }
    };

    crate::migrate::check_body(&item.block, &mut errors);
    errors.finish()?;
    let version = args.version.unwrap_or(1);
    let name = args
        .name
        .map(|l| l.value())
        .unwrap_or_else(|| sig.ident.to_string());
    Ok(WorkflowFn {
        item,
        ctx,
        inputs,
        output,
        name,
        version,
        renamed_sites: args.renamed_sites,
    })
}

/// What the signature of a workflow cannot be: not `async`, `const`,
/// `unsafe`, `extern`, generic or variadic.
fn check_signature(sig: &syn::Signature, errors: &mut Errors) {
    if sig.asyncness.is_none() {
        errors.push(
            sig.fn_token.span(),
            "#[workflow] must be placed on an `async fn`",
        );
    }
    if let Some(c) = &sig.constness {
        errors.push(c.span(), "#[workflow] functions cannot be `const`");
    }
    if let Some(u) = &sig.unsafety {
        errors.push(u.span(), "#[workflow] functions cannot be `unsafe`");
    }
    if let Some(abi) = &sig.abi {
        errors.push(
            abi.span(),
            "#[workflow] functions cannot have an `extern` ABI",
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push(
            sig.generics.span(),
            "#[workflow] functions cannot be generic: the stored run must name one concrete workflow",
        );
    }
    if let Some(v) = &sig.variadic {
        errors.push(v.span(), "#[workflow] functions cannot be variadic");
    }
}

/// The `ctx: &Ctx` parameter, if any, and the input parameters.
fn split_params(sig: &syn::Signature, errors: &mut Errors) -> (Option<Ident>, Vec<InputParam>) {
    let mut ctx = None;
    let mut inputs = Vec::new();
    for (i, arg) in sig.inputs.iter().enumerate() {
        match arg {
            FnArg::Receiver(r) => errors.push(
                r.span(),
                "#[workflow] cannot be used on a method with `self`; use a free `async fn`",
            ),
            FnArg::Typed(pt) => {
                let Pat::Ident(pi) = &*pt.pat else {
                    errors.push(
                        pt.pat.span(),
                        "workflow parameters must be plain names (`name: Type`); destructure inside the body",
                    );
                    continue;
                };
                if pi.by_ref.is_some() || pi.subpat.is_some() {
                    errors.push(
                        pi.span(),
                        "workflow parameters must be plain names (`name: Type`)",
                    );
                    continue;
                }
                let first_typed =
                    i == 0 || (i == 1 && matches!(sig.inputs.first(), Some(FnArg::Receiver(_))));
                if first_typed && is_ctx_type(&pt.ty) {
                    ctx = Some(pi.ident.clone());
                    continue;
                }
                if is_ctx_type(&pt.ty) {
                    errors.push(pt.span(), "`ctx: &Ctx` must be the first parameter");
                    continue;
                }
                if let Type::ImplTrait(it) = &*pt.ty {
                    errors.push(
                        it.span(),
                        "workflow inputs are stored with the run and need a concrete type, not `impl Trait`",
                    );
                    continue;
                }
                if let Type::Reference(r) = &*pt.ty {
                    errors.push(
                        r.span(),
                        "workflow inputs are stored with the run and must be owned (`Serialize + DeserializeOwned`); take the value, not a reference",
                    );
                    continue;
                }
                inputs.push(InputParam {
                    ident: pi.ident.clone(),
                    mutable: pi.mutability.is_some(),
                    ty: (*pt.ty).clone(),
                });
            }
        }
    }

    (ctx, inputs)
}

/// `&Ctx`, `&checkpoint_runtime::Ctx`, ... : a shared reference to a path whose
/// last segment is `Ctx`.
pub fn is_ctx_type(ty: &Type) -> bool {
    let Type::Reference(r) = ty else { return false };
    if r.mutability.is_some() {
        return false;
    }
    match &*r.elem {
        Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Ctx"),
        _ => false,
    }
}
