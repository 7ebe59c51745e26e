//! Proc-macros for checkpointed async workflows: `#[workflow]` and
//! `checkpoint!()`. Use them through `checkpoint_runtime`, which re-exports
//! them and provides the runtime the generated code calls.
//!
//! The macro works in passes, each in its own module:
//! - `parse`: the attribute and the function signature;
//! - `sites` and `names`: where the checkpoint sites are, which locals code
//!   reads;
//! - `analyse`: the body's plan (`analyse::plan::plan_body`): where it is
//!   split, what each site saves, re-creates, re-derives or refuses, and why;
//! - `lower` and `expand`: the resumable body written out from the plan,
//!   and the workflow type
//!   (with `fallback` when an earlier pass reported an error).
//!
//! Every pass reports into `errors::Errors`, a module beneath them all, so
//! no two passes import each other.
#![forbid(unsafe_code)]

mod analyse;
mod errors;
mod expand;
mod fallback;
mod hidden;
mod lower;
mod migrate;
mod names;
mod parse;
mod sites;

use proc_macro::TokenStream;

/// Turns an `async fn` into a durable, resumable workflow.
///
/// The optional first parameter `ctx: &Ctx` is supplied by the runtime; the
/// other parameters are the workflow's input (one bare, several as a tuple)
/// and the return type is its output. `#[workflow(name = "...")]` sets the
/// name runs are stored under (default: the function's name). The function's
/// name becomes a value naming the workflow, for `rt.start(..)` and
/// `rt.register(..)`.
///
/// ```
/// use checkpoint_runtime::prelude::*;
///
/// #[workflow(name = "counting")]
/// async fn count(ctx: &Ctx, n: u32) -> u32 {
///     let mut total = 0;
///     for i in 0..n {
///         total += i;
///         checkpoint!("step");
///     }
///     total
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let rt = Runtime::in_memory();
/// let h = rt.start(count, "count-1", 4).await?;
/// assert_eq!(h.result().await?, 6);
/// assert_eq!(rt.checkpoints("count-1").await?.len(), 4);
/// # Ok(()) }
/// ```
///
/// # Versions, renamed sites and migrations
///
/// `#[workflow(version = N)]` (1 by default) lets several versions of one
/// name be registered side by side. When the code changes under runs that
/// are under way, `#[migrate(..)]` on a local's `let` says how the new code
/// takes the checkpoints older code stored: `default` or `value = <expr>`
/// for a field they lack, `renamed_from = "old"` for a field stored under
/// another name, `from = OldType, with = <fn>` for a field stored as another
/// type. `value` and `with` are checked against the local's declared type.
/// `#[workflow(renamed_site(from = "old site", to = "site"))]` resumes the
/// checkpoints of a site that changed its name (a label, say).
///
/// ```
/// use checkpoint_runtime::prelude::*;
///
/// fn widen(old: u32) -> u64 {
///     u64::from(old)
/// }
///
/// #[workflow(name = "tally", renamed_site(from = "counted", to = "item"))]
/// async fn tally(ctx: &Ctx, items: Vec<String>) -> String {
///     #[migrate(from = u32, with = widen)] // older versions counted in a u32
///     let mut count: u64 = 0;
///     #[migrate(renamed_from = "seen")]    // and called this `seen`
///     let mut kept: Vec<String> = Vec::new();
///     #[migrate(value = "unit".to_owned())] // which they did not have
///     let unit: String = "item".to_owned();
///     for item in items {
///         count += 1;
///         kept.push(item);
///         checkpoint!("item");
///     }
///     format!("{count} {unit}(s): {}", kept.join(", "))
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let rt = Runtime::in_memory();
/// let out = rt.start(tally, "t-1", vec!["a".into(), "b".into()]).await?.result().await?;
/// assert_eq!(out, "2 item(s): a, b");
/// # Ok(()) }
/// ```
#[proc_macro_attribute]
pub fn workflow(args: TokenStream, item: TokenStream) -> TokenStream {
    let (args, item) = (
        proc_macro2::TokenStream::from(args),
        proc_macro2::TokenStream::from(item),
    );
    match expand::workflow(args.clone(), item.clone()) {
        Ok(expanded) => expanded.into(),
        Err(e) => {
            let mut out = e.to_compile_error();
            out.extend(fallback::workflow(args, item));
            out.into()
        }
    }
}

/// Takes a checkpoint: `checkpoint!()` or `checkpoint!("label")`; returns
/// once the checkpoint is stored (durably, on durable stores).
///
/// Only valid directly inside the body of a `#[workflow]` async fn (at any
/// depth of blocks, `if`, `match` and loops), where `#[workflow]` rewrites
/// it; in a closure, an `async` block or any other function it is a compile
/// error.
///
/// ```
/// use checkpoint_runtime::prelude::*;
///
/// #[workflow]
/// async fn two_steps(ctx: &Ctx, name: String) -> String {
///     let greeting = format!("hello {name}");
///     checkpoint!("greeted");
///     format!("{greeting}!")
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Error> {
/// let rt = Runtime::in_memory();
/// let out = rt.start(two_steps, "t-1", "ada".into()).await?.result().await?;
/// assert_eq!(out, "hello ada!");
/// let saved = rt.checkpoints("t-1").await?;
/// assert_eq!(saved[0].label.as_deref(), Some("greeted"));
/// assert_eq!(saved[0].fields[0].name, "greeting");
/// # Ok(()) }
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
