//! Proc-macros for checkpointed async workflows: `#[workflow]` and
//! `checkpoint!()`. Use them through `checkpoint_runtime`, which re-exports
//! them and provides the runtime the generated code calls.
//!
//! The macro works in three passes, each in its own module:
//! - [`parse`]: the attribute and the function signature;
//! - [`sites`] and [`names`]: where the checkpoint sites are, which locals code
//!   reads;
//! - [`lower`] and [`expand`]: the resumable body and the workflow type.
#![forbid(unsafe_code)]

mod expand;
mod lower;
mod names;
mod parse;
mod sites;

use proc_macro::TokenStream;

/// Turns an `async fn` into a durable, resumable workflow.
///
/// See the `checkpoint_runtime` crate for the full documentation.
///
/// ```ignore
/// use checkpoint_runtime::prelude::*;
///
/// #[workflow]
/// async fn count(ctx: &Ctx, n: u32) -> u32 {
///     let mut total = 0;
///     for i in 0..n {
///         total += i;
///         checkpoint!("step");
///     }
///     total
/// }
/// ```
#[proc_macro_attribute]
pub fn workflow(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::workflow(args.into(), item.into())
        .unwrap_or_else(|e| e.to_compile_error())
        .into()
}

/// Takes a checkpoint: `checkpoint!()` or `checkpoint!("label")`.
///
/// Only valid directly inside the body of a `#[workflow]` async fn, where the
/// `#[workflow]` attribute rewrites it; anywhere else it is a compile error.
///
/// ```ignore
/// checkpoint!("after_review");
/// ```
#[proc_macro]
pub fn checkpoint(input: TokenStream) -> TokenStream {
    let input = proc_macro2::TokenStream::from(input);
    let span = match input.clone().into_iter().next() {
        Some(t) => t.span(),
        None => proc_macro2::Span::call_site(),
    };
    syn::Error::new(
        span,
        "checkpoint!() can only be used directly inside the body of a #[workflow] async fn (not in a closure, an async block or another function)",
    )
    .to_compile_error()
    .into()
}
