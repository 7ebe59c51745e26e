//! Code generation for `#[workflow]`: the workflow type, its `Workflow` impl,
//! the site table and the body that loads a checkpoint and runs the lowered
//! statements.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::{Ident, ItemFn, Stmt};

use crate::lower::{frame_ident, Binding, Lowerer, SiteLayout};
use crate::parse::{self, WorkflowFn};
use crate::sites::{self, Site, SiteKind};

pub fn workflow(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let args = parse::parse_args(args)?;
    let item: ItemFn = syn::parse2(item)?;
    let mut wf = parse::parse_fn(args, item)?;
    let sites = sites::number_sites(&mut wf.item.block, wf.ctx.as_ref())?;

    let mut stmts = vec![input_stmt(&wf)?];
    stmts.extend(wf.item.block.stmts.iter().cloned());
    let mut lowerer = Lowerer::new(&sites, wf.ctx.as_ref());
    let body = lowerer.lower_body(&stmts);
    let (bindings, layouts) = lowerer.finish()?;
    Ok(generate(&wf, &sites, &bindings, &layouts, body))
}

/// `let (a, mut b) = <input>;`: the parameters become the body's first
/// statement, so they are saved and restored like any other local.
fn input_stmt(wf: &WorkflowFn) -> syn::Result<Stmt> {
    let frame = frame_ident();
    let input = Ident::new("__cp_input", Span::mixed_site());
    let pats: Vec<TokenStream> = wf
        .inputs
        .iter()
        .map(|p| {
            let ident = &p.ident;
            if p.mutable {
                quote!(mut #ident)
            } else {
                quote!(#ident)
            }
        })
        .collect();
    let pat = match pats.len() {
        1 => pats[0].clone(),
        _ => quote!((#(#pats),*)),
    };
    syn::parse2(quote! {
        let #pat = match #input {
            ::core::option::Option::Some(input) => input,
            ::core::option::Option::None => {
                match #frame.halt(::checkpoint_runtime::__private::missing_input(&#frame)).await {}
            }
        };
    })
}

/// The workflow's items: its type, the function that names it, its
/// `Workflow` impl and the resumable body. Long because it is one `quote!`
/// template of those items, kept in one piece so it reads as the expansion
/// does.
fn generate(
    wf: &WorkflowFn,
    sites: &[Site],
    bindings: &[Binding],
    layouts: &[SiteLayout],
    body: TokenStream,
) -> TokenStream {
    let rt = quote!(::checkpoint_runtime::__private);
    let item = &wf.item;
    let vis = &item.vis;
    let ident = &item.sig.ident;
    let attrs = &item.attrs;
    let name = &wf.name;
    let output = &wf.output;
    let input_types: Vec<_> = wf.inputs.iter().map(|p| &p.ty).collect();
    let input_ty = match input_types.len() {
        1 => quote!(#(#input_types)*),
        _ => quote!((#(#input_types),*)),
    };
    let frame = frame_ident();
    let input = Ident::new("__cp_input", Span::mixed_site());
    let ctx_owned = Ident::new("__cp_ctx", Span::mixed_site());
    let ctx_binding = wf.ctx.as_ref().map(
        |c| quote!(#[allow(unused_variables)] let #c: &::checkpoint_runtime::Ctx = &#ctx_owned;),
    );

    let site_table = site_table(sites, bindings, layouts);
    let save_traits = save_traits(sites, bindings);
    let slots = bindings
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.transient && !b.saved_at.is_empty())
        .map(|(_, b)| {
            let slot = &b.slot;
            quote!(let mut #slot = #rt::Slot::new();)
        });
    let wait_slots = sites
        .iter()
        .filter(|s| matches!(s.kind, SiteKind::WaitFor | SiteKind::WaitForTimeout))
        .map(|s| {
            let slot = Lowerer::wait_slot_ident(s.index);
            quote!(let mut #slot = #rt::Slot::new();)
        });
    let load = load_checkpoint(sites, bindings, layouts);
    let body_fn = Ident::new("__checkpoint_body", Span::call_site());

    // The workflow is named by a function item (see `IntoWorkflow`), not a
    // unit struct: a unit struct's name would turn every `let <name> = ..`
    // pattern in the module into a struct pattern.
    let ty = Ident::new(&format!("__checkpoint_workflow_{ident}"), ident.span());
    quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Default)]
        #vis struct #ty;

        impl ::core::fmt::Debug for #ty {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(#name)
            }
        }

        #(#attrs)*
        #vis fn #ident(_: #rt::WorkflowToken) -> #ty {
            #ty
        }

        impl ::checkpoint_runtime::Workflow for #ty {
            type Input = #input_ty;
            type Output = #output;
            const NAME: &'static str = #name;
            const SITES: &'static [#rt::SiteInfo] = &[#(#site_table),*];

            fn run(
                self,
                #frame: #rt::Frame,
                #input: ::core::option::Option<Self::Input>,
            ) -> #rt::BoxFuture<'static, Self::Output> {
                ::std::boxed::Box::pin(Self::#body_fn(#frame, #input))
            }
        }

        impl #ty {
            #[doc(hidden)]
            // No blanket `allow` here: the user's own code keeps its lints;
            // the generated statements carry the `allow`s they need.
            async fn #body_fn(
                mut #frame: #rt::Frame,
                #input: ::core::option::Option<#input_ty>,
            ) -> #output {
                #(#save_traits)*
                let #ctx_owned = #frame.ctx();
                #ctx_binding
                #(#slots)*
                #(#wait_slots)*
                #load
                #body
            }
        }
    }
}

fn site_table<'a>(
    sites: &'a [Site],
    bindings: &'a [Binding],
    layouts: &'a [SiteLayout],
) -> impl Iterator<Item = TokenStream> + 'a {
    let rt = quote!(::checkpoint_runtime::__private);
    sites.iter().zip(layouts).map(move |(site, layout)| {
        let key = site.key();
        let label = match &site.label {
            Some(l) => quote!(::core::option::Option::Some(#l)),
            None => quote!(::core::option::Option::None),
        };
        let kind = match site.kind {
            SiteKind::Checkpoint => quote!(Checkpoint),
            SiteKind::WaitFor => quote!(WaitFor),
            SiteKind::WaitForTimeout => quote!(WaitForTimeout),
            SiteKind::Sleep => quote!(Sleep),
        };
        let fields = field_names(bindings, layout);
        let loops = layout.loops;
        quote! {
            #rt::SiteInfo { key: #key, label: #label, kind: #rt::SiteKind::#kind, fields: &[#(#fields),*], loops: #loops }
        }
    })
}

/// Field names of a site: the locals' names, made unique with `#n` when an
/// inner local has the same name as an outer one.
fn field_names(bindings: &[Binding], layout: &SiteLayout) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for &b in &layout.fields {
        let base = bindings[b].field_name();
        let mut name = base.clone();
        let mut n = 1;
        while out.contains(&name) {
            n += 1;
            name = format!("{base}#{n}");
        }
        out.push(name);
    }
    out
}

/// One marker trait per saved local, implemented for every type that can be
/// saved: a local that cannot be saved fails this bound, with the message
/// that names it and its sites (see the runtime's `save` module).
fn save_traits<'a>(
    sites: &'a [Site],
    bindings: &'a [Binding],
) -> impl Iterator<Item = TokenStream> + 'a {
    let rt = quote!(::checkpoint_runtime::__private);
    // One trait per name, listing the sites of every local of that name.
    let mut by_trait: Vec<(&Binding, Vec<u32>)> = Vec::new();
    for b in bindings
        .iter()
        .filter(|b| !b.transient && !b.saved_at.is_empty())
    {
        match by_trait
            .iter_mut()
            .find(|(first, _)| first.save_trait == b.save_trait)
        {
            Some((_, at)) => at.extend(&b.saved_at),
            None => by_trait.push((b, b.saved_at.clone())),
        }
    }
    by_trait.into_iter().map(move |(b, saved_at)| {
        let trait_ident = &b.save_trait;
        let name = b.field_name();
        let mut where_saved: Vec<String> = Vec::new();
        for s in &saved_at {
            let d = sites[*s as usize - 1].describe();
            if !where_saved.contains(&d) {
                where_saved.push(d);
            }
        }
        let where_saved = where_saved.join(", ");
        let message = format!(
            "local `{name}` is live across {where_saved}, but `{{Self}}` cannot be saved in a checkpoint"
        );
        let label = format!("`{name}` is saved here");
        let local = b.ident.to_string();
        let note = format!(
            "locals used after a checkpoint are saved with serde: derive `Serialize` and `Deserialize` for its type, or declare it `#[transient] let {local} = ...;` so it is re-created on resume; a reference cannot be saved: own the value, or borrow again after the checkpoint"
        );
        quote! {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait #trait_ident: ::core::marker::Sized {
                fn __cp_ops(_: #rt::TypeOf<Self>) -> #rt::SaveOps<Self>;
            }
            impl<T: #rt::Save> #trait_ident for T {
                fn __cp_ops(_: #rt::TypeOf<Self>) -> #rt::SaveOps<Self> {
                    #rt::SaveOps::new()
                }
            }
        }
    })
}

/// Before any user code: check the target site's fields against the code and
/// decode them into their slots; any mismatch or bad byte halts the run.
fn load_checkpoint(sites: &[Site], bindings: &[Binding], layouts: &[SiteLayout]) -> TokenStream {
    let rt = quote!(::checkpoint_runtime::__private);
    let frame = frame_ident();
    let arms = sites.iter().zip(layouts).map(|(site, layout)| {
        let index = site.index;
        let names = field_names(bindings, layout);
        let checks = layout.fields.iter().zip(&names).map(|(&b, name)| {
            let slot = &bindings[b].slot;
            quote!((#name, #rt::Slot::type_name(&#slot)))
        });
        let loads = layout.fields.iter().enumerate().map(|(i, &b)| {
            let (slot, trait_ident) = (&bindings[b].slot, &bindings[b].save_trait);
            let span = bindings[b].ident.span();
            quote_spanned! {span=>
                <_ as #trait_ident>::__cp_ops(#rt::type_of_slot(&#slot)).load(&mut #slot, &#frame, #i)?;
            }
        });
        let signal = match site.kind {
            SiteKind::WaitFor => {
                let slot = Lowerer::wait_slot_ident(index);
                quote!(#rt::load_signal(&mut #slot, &#frame)?;)
            }
            SiteKind::WaitForTimeout => {
                let slot = Lowerer::wait_slot_ident(index);
                quote!(#rt::load_signal_timeout(&mut #slot, &#frame)?;)
            }
            _ => TokenStream::new(),
        };
        quote! {
            ::core::option::Option::Some(#index) => {
                #frame.check_fields(&[#(#checks),*])?;
                #(#loads)*
                #signal
            }
        }
    });
    quote! {
        let loaded = (|| -> ::core::result::Result<(), ::checkpoint_runtime::Error> {
            match #frame.target() {
                #(#arms)*
                _ => {}
            }
            ::core::result::Result::Ok(())
        })();
        if let ::core::result::Result::Err(e) = loaded {
            match #frame.halt(e).await {}
        }
        #frame.resumed().await;
    }
}
