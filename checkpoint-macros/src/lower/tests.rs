//! Tests of the expansion: its size and how it reads.

use proc_macro2::TokenStream;
use quote::quote;

fn expansion_size(sites: usize) -> usize {
    let mut stmts = TokenStream::new();
    for i in 0..sites {
        let label = format!("s{i}");
        stmts.extend(quote! {
            for i in 0..n {
                let mut j = 0;
                while j < i { j += 1; total += j; checkpoint!(#label); }
            }
        });
    }
    let item: syn::ItemFn = syn::parse2(quote! {
        async fn wf(ctx: &Ctx, n: u64) -> u64 { let mut total = 0; #stmts total }
    })
    .expect("parses");
    crate::expand::workflow(TokenStream::new(), quote!(#item))
        .expect("expands")
        .to_string()
        .len()
}

#[test]
fn expansion_grows_linearly_with_the_number_of_sites() {
    let (s10, s20, s40) = (expansion_size(10), expansion_size(20), expansion_size(40));
    eprintln!("expansion size for 10/20/40 sites: {s10} / {s20} / {s40} bytes");
    // Each extra site adds about the same amount of code.
    let per_site_a = (s20 - s10) as f64 / 10.0;
    let per_site_b = (s40 - s20) as f64 / 20.0;
    assert!(
        per_site_b < per_site_a * 1.5,
        "expansion is super-linear: {s10} {s20} {s40}"
    );
}

#[test]
fn the_expansion_reads_like_the_workflow() {
    let item = quote! {
        async fn onboarding(ctx: &Ctx, user: String) -> Vec<String> {
            let mut done = Vec::new();
            for step in ["account", "mailbox", "badge"] {
                ctx.resource::<SideEffects>().record(format!("{step}:{user}"));
                done.push(step.to_owned());
                checkpoint!("step_done");
            }
            let approved: bool = ctx.wait_for("manager_ok").await;
            if approved {
                done.push("approved".into());
            }
            done
        }
    };
    let out = crate::expand::workflow(TokenStream::new(), item)
        .unwrap()
        .to_string();
    // Slots and save traits are named after the locals they serve, one
    // trait per name however often the local is saved.
    assert!(out.contains("__cp_slot_done"), "{out}");
    assert!(out.contains("__cp_slot_user"), "{out}");
    assert_eq!(out.matches("trait __cp_save_done").count(), 1, "{out}");
    assert_eq!(out.matches("trait __cp_save_").count(), 2, "{out}");
    // The user's code keeps its lints: no blanket `allow` over the body.
    assert!(!out.contains("clippy :: all"), "{out}");
    assert!(!out.contains("unreachable_code"), "{out}");
    // 2,048 tokens today (the workflow's version and each site's signal
    // name included; 1,811 before the uninterrupted path decoded the saved
    // locals after each site, about 120 tokens a site here); 346 lines
    // before the save traits were made small, 114 of them three
    // near-identical traits.
    let tokens = out.split_whitespace().count();
    assert!(tokens < 2150, "{tokens} tokens");
}
