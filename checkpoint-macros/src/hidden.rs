//! Names the generated code shares between passes: the frame every lowered
//! statement talks to and the path of the runtime's hidden interface. Beneath
//! `analyse` and `lower` both, since the analysis rewrites some syntax (a
//! scrutinee into a `let`, a branch's carried bindings) into code that names
//! them before lowering plans the rest.

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Ident;

use crate::names::PatBinding;

/// The frame of the running workflow: `__cp_frame`, hygienic.
pub fn frame_ident() -> Ident {
    Ident::new("__cp_frame", Span::mixed_site())
}

/// `::checkpoint_runtime::__private`, the runtime's interface for generated code.
pub fn rt() -> TokenStream {
    quote!(::checkpoint_runtime::__private)
}

/// The variable the head of a split `if` / `match` / `while let` carries
/// its arm's bindings into the body in.
pub fn carried_ident() -> Ident {
    Ident::new("__cp_carried", Span::mixed_site())
}

/// `mut x` or `x`, as the binding was declared.
pub fn binding_pat(b: &PatBinding) -> TokenStream {
    let ident = &b.ident;
    if b.mutable {
        quote!(mut #ident)
    } else {
        quote!(#ident)
    }
}
