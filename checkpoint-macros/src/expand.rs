//! Code generation for `#[workflow]`: the workflow type, its `Workflow` impl,
//! the site table and the body that loads a checkpoint and runs the lowered
//! statements.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, ItemFn, Stmt};

use crate::analyse::plan::{self, Binding, BodyPlan, SitePlan};
use crate::errors::Errors;
use crate::hidden::frame_ident;
use crate::lower::Lowerer;
use crate::migrate::Missing;
use crate::parse::{self, RenamedSite, WorkflowFn};
use crate::sites::{self, Site, SiteKind};

pub fn workflow(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let args = parse::parse_args(args)?;
    let item: ItemFn = syn::parse2(item)?;
    let mut wf = parse::parse_fn(args, item)?;
    let mut_params = wf
        .inputs
        .iter()
        .filter(|p| p.mutable)
        .map(|p| p.ident.to_string())
        .collect();
    crate::analyse::transients::check(&wf.item.block, &mut_params)?;
    let sites = sites::number_sites(&mut wf.item.block, wf.ctx.as_ref())?;
    crate::lower::canonical::canonical_iteration(&mut wf.item.block, wf.ctx.as_ref());
    check_renamed_sites(&wf.renamed_sites, &sites)?;

    let mut stmts = vec![input_stmt(&wf)?];
    stmts.extend(wf.item.block.stmts.iter().cloned());
    let plan = plan::plan_body(&stmts, &sites, wf.ctx.as_ref()).checked()?;
    let body = Lowerer::new(&sites, &plan).lower_body();
    Ok(generate(&wf, &sites, &plan, body))
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
fn generate(wf: &WorkflowFn, sites: &[Site], plan: &BodyPlan, body: TokenStream) -> TokenStream {
    let (bindings, layouts) = (&plan.bindings[..], &plan.sites[..]);
    let rt = quote!(::checkpoint_runtime::__private);
    let item = &wf.item;
    let vis = &item.vis;
    let ident = &item.sig.ident;
    let attrs = &item.attrs;
    let name = &wf.name;
    let version = wf.version;
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

    let site_table = site_table(sites, bindings, layouts, &wf.renamed_sites);
    let save_traits = save_traits(sites, bindings);
    let slots = bindings
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.transient && !b.saved_at.is_empty())
        .map(|(_, b)| {
            let (slot, ops, save_trait) = (&b.slot, &b.ops, &b.save_trait);
            let take = quote_spanned!(b.ident.span()=> <_ as #save_trait>::__cp_ops(#rt::type_of_slot(&#slot)));
            quote! {
                let mut #slot = #rt::Slot::new();
                let #ops = #take;
            }
        });
    let wait_slots = sites
        .iter()
        .filter(|s| {
            !matches!(
                s.kind,
                SiteKind::Checkpoint | SiteKind::Sleep | SiteKind::Retry
            )
        })
        .map(|s| {
            let slot = Lowerer::wait_slot_ident(s.number);
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
            const VERSION: u32 = #version;
            const SITES: &'static [#rt::SiteInfo] = &[#(#site_table),*];

            fn run(
                self,
                #frame: #rt::Frame,
                #input: ::core::option::Option<Self::Input>,
            ) -> #rt::BoxFuture<'static, Self::Output> {
                ::std::boxed::Box::pin(Self::#body_fn(#frame, #input))
            }

            // Decided here from the output type (an alias of `Result` too),
            // by method resolution: `ErrOutput` applies to `Result`s only.
            fn output_error(
                output: &Self::Output,
            ) -> ::core::option::Option<::std::string::String> {
                #[allow(unused_imports)]
                use #rt::{ErrOutput as _, PlainOutput as _};
                (&#rt::OutputProbe(output)).output_error()
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

/// Each `renamed_site(from, to)` names a site of the body as `to`, and
/// as `from` none (else checkpoints at `from` would have two sites).
fn check_renamed_sites(renames: &[RenamedSite], sites: &[Site]) -> syn::Result<()> {
    let mut errors = Errors::default();
    let keys: Vec<&str> = sites.iter().map(|s| s.key()).collect();
    for (i, r) in renames.iter().enumerate() {
        let (from, to) = (r.from.value(), r.to.value());
        if !keys.contains(&to.as_str()) {
            errors.push(
                r.to.span(),
                format!(
                    "no site of this workflow is named \"{to}\" (its sites: {})",
                    keys.iter()
                        .map(|k| format!("\"{k}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        if keys.contains(&from.as_str()) {
            errors.push(
                r.from.span(),
                format!("\"{from}\" is the name of a site of this workflow: a checkpoint taken there resumes there, not at \"{to}\""),
            );
        }
        if renames[..i].iter().any(|o| o.from.value() == from) {
            errors.push(r.from.span(), format!("site \"{from}\" is renamed twice"));
        }
    }
    errors.finish()
}

/// The older keys site `site` takes on resume: its key before readable
/// names (`#N`) and the `from` of the renames to it.
fn renamed_from(site: &Site, renames: &[RenamedSite]) -> Vec<String> {
    let mut out: Vec<String> = site.legacy_key().into_iter().collect();
    out.extend(
        renames
            .iter()
            .filter(|r| r.to.value() == site.key())
            .map(|r| r.from.value()),
    );
    out
}

fn site_table<'a>(
    sites: &'a [Site],
    bindings: &'a [Binding],
    layouts: &'a [SitePlan],
    renames: &'a [RenamedSite],
) -> impl Iterator<Item = TokenStream> + 'a {
    let rt = quote!(::checkpoint_runtime::__private);
    sites.iter().zip(layouts).map(move |(site, layout)| {
        let key = site.key();
        let renamed_from = renamed_from(site, renames);
        let label = match &site.label {
            Some(l) => quote!(::core::option::Option::Some(#l)),
            None => quote!(::core::option::Option::None),
        };
        let kind = match site.kind {
            SiteKind::Checkpoint => quote!(Checkpoint),
            SiteKind::WaitFor => quote!(WaitFor),
            SiteKind::WaitForTimeout => quote!(WaitForTimeout),
            SiteKind::Sleep => quote!(Sleep),
            SiteKind::Join => quote!(Join),
            SiteKind::JoinAll => quote!(JoinAll),
            SiteKind::Retry => quote!(Retry),
        };
        let fields = field_names(bindings, layout);
        let loops = layout.loops;
        let signal = match &site.signal {
            Some(s) => quote!(::core::option::Option::Some(#s)),
            None => quote!(::core::option::Option::None),
        };
        let migrated = migrated(bindings, layout);
        let before = sites::before(sites, site.number).iter().map(|s| s.key());
        quote! {
            #rt::SiteInfo { key: #key, label: #label, kind: #rt::SiteKind::#kind, fields: &[#(#fields),*], loops: #loops, signal: #signal, renamed_from: &[#(#renamed_from),*], sites_before: &[#(#before),*], migrated: #migrated }
        }
    })
}

/// Whether a field of the site has a migration (its fields are then
/// matched by name, not position).
fn migrated(bindings: &[Binding], layout: &SitePlan) -> bool {
    layout
        .fields
        .iter()
        .any(|f| bindings[f.binding].migration.is_some())
}

/// Field names of a site: the locals' names, made unique with `#n` when an
/// inner local has the same name as an outer one.
fn field_names(bindings: &[Binding], layout: &SitePlan) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in &layout.fields {
        let base = bindings[f.binding].field_name();
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
            let d = sites::numbered(sites, *s).describe();
            if !where_saved.contains(&d) {
                where_saved.push(d);
            }
        }
        let where_saved = where_saved.join(", ");
        let message = format!(
            "local `{name}` is live across {where_saved}, but `{{Self}}` cannot be saved in a checkpoint"
        );
        let label = format!("`{name}` is saved at {where_saved}");
        let local = b.ident.to_string();
        let note = format!(
            "locals used after a checkpoint are saved with serde: derive `Serialize` and `Deserialize` for its type; if building it again gives an equal value (a client, a connection pool: not an iterator or anything else that keeps a position), declare it `#[transient] let {local} = ...;` so it is re-created on resume; a reference cannot be saved: own the value, or borrow again after the checkpoint"
        );
        quote! {
            #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
            trait #trait_ident: ::core::marker::Sized {
                fn __cp_ops(_: #rt::TypeOf<Self>) -> #rt::SaveOps<Self>;
            }
            // Not recommended: the error is this trait's message, once,
            // rather than one per serde trait the type lacks.
            #[diagnostic::do_not_recommend]
            impl<T: #rt::Save> #trait_ident for T {
                fn __cp_ops(_: #rt::TypeOf<Self>) -> #rt::SaveOps<Self> {
                    #rt::SaveOps::new()
                }
            }
        }
    })
}

/// The loads of a site with migrated fields: fields found by name (or old
/// name), converted from an old type, or given a value when missing; the
/// migrations' own tokens carry their spans, so a migration that does not
/// fit its local is a type error on the attribute.
fn migrated_loads(bindings: &[Binding], layout: &SitePlan, names: &[String]) -> TokenStream {
    let rt = quote!(::checkpoint_runtime::__private);
    let frame = frame_ident();
    let none = quote!(::core::option::Option::None);
    let (old_slot, at) = (
        Ident::new("__cp_old", Span::mixed_site()),
        Ident::new("__cp_at", Span::mixed_site()),
    );
    let mut plans = Vec::new();
    let mut loads = Vec::new();
    for (f, name) in layout.fields.iter().zip(names) {
        let binding = &bindings[f.binding];
        let (slot, ops) = (&binding.slot, &binding.ops);
        let m = binding.migration.as_ref();
        let old_name = match m.and_then(|m| m.renamed_from.as_ref()) {
            Some(l) => quote!(::core::option::Option::Some(#l)),
            None => none.clone(),
        };
        let convert = m.and_then(|m| m.convert.as_ref());
        let from_type = match convert {
            Some((ty, _)) => quote!(::core::option::Option::Some(::core::any::type_name::<#ty>())),
            None => none.clone(),
        };
        let missing = m.and_then(|m| m.missing.as_ref());
        let may_be_missing = missing.is_some();
        plans.push(quote! {
            #rt::FieldPlan { name: #name, type_name: #rt::Slot::type_name(&#slot), renamed_from: #old_name, from_type: #from_type, may_be_missing: #may_be_missing }
        });
        // `let v: T = <migration>;`: the local's type checks the migration,
        // with the error on the migration's own tokens.
        let declared = |value: TokenStream, span: Span| match m.and_then(|m| m.ty.as_ref()) {
            Some(ty) => quote_spanned!(span=> { let __cp_value: #ty = #value; __cp_value }),
            None => value,
        };
        let convert_arm = convert.map(|(ty, with)| {
            let span = with.span();
            let value = declared(
                quote_spanned!(span=> #with(#rt::Slot::take(&mut #old_slot))),
                span,
            );
            let put = quote!(#rt::Slot::put(&mut #slot, #value));
            quote! {
                ::core::option::Option::Some(#at) if #frame.stored_type(#at) == ::core::option::Option::Some(::core::any::type_name::<#ty>()) => {
                    let mut #old_slot = #rt::Slot::<#ty>::new();
                    #rt::load(&mut #old_slot, &#frame, #at)?;
                    #put;
                }
            }
        });
        let missing_arm = match missing {
            Some(Missing::Default(span)) => {
                quote_spanned!(*span=> #rt::Slot::put(&mut #slot, ::core::default::Default::default()))
            }
            Some(Missing::Value(e)) => {
                let span = e.span();
                let value = declared(quote_spanned!(span=> #e), span);
                quote!(#rt::Slot::put(&mut #slot, #value))
            }
            None => quote!(return ::core::result::Result::Err(#frame.field_missing(#name))),
        };
        loads.push(quote! {
            match #frame.stored_field(#name, #old_name) {
                #convert_arm
                ::core::option::Option::Some(#at) => #ops.load(&mut #slot, &#frame, #at)?,
                ::core::option::Option::None => { #missing_arm; }
            }
        });
    }
    quote! {
        #frame.check_migrated_fields(&[#(#plans),*])?;
        #(#loads)*
    }
}

/// Before any user code: check the target site's fields against the code and
/// decode them into their slots; any mismatch or bad byte halts the run.
fn load_checkpoint(sites: &[Site], bindings: &[Binding], layouts: &[SitePlan]) -> TokenStream {
    let rt = quote!(::checkpoint_runtime::__private);
    let frame = frame_ident();
    let arms = sites.iter().zip(layouts).map(|(site, layout)| {
        let index = site.number;
        let names = field_names(bindings, layout);
        let fields = if migrated(bindings, layout) {
            migrated_loads(bindings, layout, &names)
        } else {
            let checks = layout.fields.iter().zip(&names).map(|(f, name)| {
                let slot = &bindings[f.binding].slot;
                quote!((#name, #rt::Slot::type_name(&#slot)))
            });
            let loads = layout.fields.iter().enumerate().map(|(i, f)| {
                let (slot, ops) = (&bindings[f.binding].slot, &bindings[f.binding].ops);
                quote!(#ops.load(&mut #slot, &#frame, #i)?;)
            });
            quote! {
                #frame.check_fields(&[#(#checks),*])?;
                #(#loads)*
            }
        };
        let signal = match site.kind {
            SiteKind::WaitFor => {
                let slot = Lowerer::wait_slot_ident(index);
                quote!(#rt::load_signal(&mut #slot, &#frame)?;)
            }
            SiteKind::WaitForTimeout => {
                let slot = Lowerer::wait_slot_ident(index);
                quote!(#rt::load_signal_timeout(&mut #slot, &#frame)?;)
            }
            SiteKind::Join => {
                let slot = Lowerer::wait_slot_ident(index);
                quote!(#rt::load_join(&mut #slot, &#frame)?;)
            }
            SiteKind::JoinAll => {
                let slot = Lowerer::wait_slot_ident(index);
                quote!(#rt::load_join_all(&mut #slot, &#frame)?;)
            }
            _ => TokenStream::new(),
        };
        quote! {
            ::core::option::Option::Some(#index) => {
                #fields
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
