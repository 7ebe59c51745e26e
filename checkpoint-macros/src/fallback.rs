//! What `#[workflow]` emits beside its error, as thiserror's `fallback.rs`
//! does: the item that names the workflow, with the workflow's input and
//! output types, so that `rt.start(wf, ..)` and `rt.register(wf)` call sites
//! type-check and the user sees the one error that matters, not a second one
//! at every call site.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{FnArg, Ident, ItemFn, ReturnType, Type};

use crate::parse::{self, is_ctx_type};

/// The fallback for `item`, or nothing when the item is too broken to name
/// a workflow (it does not parse as a function, or is a method).
pub fn workflow(args: TokenStream, item: TokenStream) -> TokenStream {
    let Ok(item) = syn::parse2::<ItemFn>(item) else {
        return TokenStream::new();
    };
    if matches!(item.sig.inputs.first(), Some(FnArg::Receiver(_))) {
        // A method sits in an `impl`, where no item of ours can go.
        return TokenStream::new();
    }
    let ident = &item.sig.ident;
    let vis = &item.vis;
    let name = parse::parse_args(args)
        .ok()
        .and_then(|a| a.name)
        .map(|l| l.value())
        .unwrap_or_else(|| ident.to_string());
    let ty = Ident::new(&format!("__checkpoint_workflow_{ident}"), ident.span());
    let rt = quote!(::checkpoint_runtime::__private);
    let named = quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Default, Debug)]
        #vis struct #ty;

        #[allow(dead_code)]
        #vis fn #ident(_: #rt::WorkflowToken) -> #ty {
            #ty
        }
    };
    let Some((input, output)) = signature_types(&item) else {
        return named;
    };
    let message = format!("workflow `{name}` did not compile");
    quote! {
        #named

        impl ::checkpoint_runtime::Workflow for #ty {
            type Input = #input;
            type Output = #output;
            const NAME: &'static str = #name;
            const SITES: &'static [#rt::SiteInfo] = &[];

            fn run(
                self,
                _: #rt::Frame,
                _: ::core::option::Option<Self::Input>,
            ) -> #rt::BoxFuture<'static, Self::Output> {
                ::std::boxed::Box::pin(async { ::core::unreachable!(#message) })
            }
        }
    }
}

/// The input and output types, when they can stand in an impl as written:
/// no generics, no `impl Trait`, no references.
fn signature_types(item: &ItemFn) -> Option<(TokenStream, TokenStream)> {
    let sig = &item.sig;
    if !sig.generics.params.is_empty() {
        return None;
    }
    let mut inputs = Vec::new();
    for (i, arg) in sig.inputs.iter().enumerate() {
        let FnArg::Typed(pt) = arg else { return None };
        if i == 0 && is_ctx_type(&pt.ty) {
            continue;
        }
        if !standalone(&pt.ty) {
            return None;
        }
        inputs.push(&*pt.ty);
    }
    let input = match inputs.as_slice() {
        [one] => quote!(#one),
        many => quote!((#(#many),*)),
    };
    let output = match &sig.output {
        ReturnType::Default => quote!(()),
        ReturnType::Type(_, ty) if standalone(ty) => quote!(#ty),
        ReturnType::Type(..) => return None,
    };
    Some((input, output))
}

fn standalone(ty: &Type) -> bool {
    struct Finder(bool);
    impl<'ast> syn::visit::Visit<'ast> for Finder {
        fn visit_type_impl_trait(&mut self, _: &'ast syn::TypeImplTrait) {
            self.0 = false;
        }
        fn visit_type_reference(&mut self, _: &'ast syn::TypeReference) {
            self.0 = false;
        }
    }
    let mut f = Finder(true);
    syn::visit::Visit::visit_type(&mut f, ty);
    f.0
}
