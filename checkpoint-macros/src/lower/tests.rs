//! Unit tests of the analysis: which locals each site saves, and the size
//! of the expansion.

use super::*;

/// Lowers `body` and returns, for each site, the names of the locals it saves.
fn saved_per_site(body: TokenStream) -> Vec<(String, Vec<String>)> {
    let mut block: Block = syn::parse2(quote!({ #body })).expect("body parses");
    let ctx = Ident::new("ctx", Span::call_site());
    let sites = sites::number_sites(&mut block, Some(&ctx)).expect("sites");
    let mut lowerer = Lowerer::new(&sites, Some(&ctx));
    lowerer.lower_body(&block.stmts);
    let (bindings, layouts) = lowerer.finish().expect("lowering succeeds");
    sites
        .iter()
        .zip(layouts)
        .map(|(s, l)| {
            (
                s.key().to_owned(),
                l.fields
                    .iter()
                    .map(|&b| bindings[b].ident.to_string())
                    .collect(),
            )
        })
        .collect()
}

fn expect(body: TokenStream, want: &[(&str, &[&str])]) {
    let got = saved_per_site(body);
    let want: Vec<(String, Vec<String>)> = want
        .iter()
        .map(|(k, f)| (k.to_string(), f.iter().map(|s| s.to_string()).collect()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn only_locals_used_after_the_site_are_saved() {
    expect(
        quote! {
            let a = 1;
            let client = make_client();
            let b = client.get(a);
            checkpoint!("x");
            b + 1
        },
        &[("x", &["b"])],
    );
}

#[test]
fn uses_inside_macros_count() {
    expect(
        quote! {
            let a = f(1);
            let b = f(2);
            let c = f(3);
            let tag = "constant";
            checkpoint!("x");
            println!("{a} {} {tag}", b);
            vec![c; 2]
        },
        &[("x", &["a", "b", "c"])],
    );
}

#[test]
fn a_local_shadowed_before_its_next_use_is_dead() {
    expect(
        quote! {
            let x = 1;
            let y = x;
            checkpoint!("x");
            let x = 2;
            x + y
        },
        &[("x", &["y"])],
    );
}

#[test]
fn loop_carried_locals_are_live() {
    expect(
        quote! {
            let mut i = 0;
            let unused_after = 5;
            let total = unused_after * 2;
            loop {
                checkpoint!("top");
                i += 1;
                if i > 3 { break; }
            }
            total
        },
        &[("top", &["i", "total"])],
    );
}

#[test]
fn for_loop_iterables_are_snapshotted_and_bindings_rederived() {
    expect(
        quote! {
            let tasks = vec![1, 2, 3];
            let mut done = Vec::new();
            for t in &tasks {
                let doubled = t * 2;
                checkpoint!("task");
                done.push(doubled + t);
            }
            done
        },
        &[("task", &["tasks", "done", "doubled"])],
    );
}

#[test]
fn match_arm_bindings_are_restored_when_the_scrutinee_is_a_call() {
    expect(
        quote! {
            match fetch() {
                Some(v) => { checkpoint!("got"); v + 1 }
                None => 0,
            }
        },
        &[("got", &["v"])],
    );
}

#[test]
fn pure_scrutinees_are_evaluated_again_instead() {
    expect(
        quote! {
            let opt = fetch();
            match &opt {
                Some(v) => { checkpoint!("got"); v + 1 }
                None => 0,
            }
        },
        &[("got", &["opt"])],
    );
}

#[test]
fn suspension_points_are_sites() {
    expect(
        quote! {
            let vendor = load();
            let approval: Approval = ctx.wait_for("finance").await;
            ctx.sleep(d).await;
            (vendor, approval)
        },
        &[
            ("wait_for(\"finance\")", &["vendor"]),
            ("sleep 1", &["vendor", "approval"]),
        ],
    );
}

#[test]
fn transient_locals_are_recreated_not_saved() {
    expect(
        quote! {
            let url = config();
            #[transient]
            let client = Client::new(&url);
            checkpoint!("a");
            client.get()
        },
        &[("a", &["url"])],
    );
}

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
fn errors_name_the_variable_and_the_site() {
    let mut block: Block = syn::parse2(quote!({
        let data = vec![1];
        let r = &data;
        checkpoint!("after");
        r.len()
    }))
    .expect("parses");
    let sites = sites::number_sites(&mut block, None).expect("sites");
    let mut lowerer = Lowerer::new(&sites, None);
    lowerer.lower_body(&block.stmts);
    let err = lowerer
        .finish()
        .err()
        .expect("a reference live across a checkpoint is an error");
    let msg = err.to_string();
    assert!(
        msg.contains("`r` holds a reference") && msg.contains("checkpoint \"after\""),
        "{msg}"
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
    // 1,811 tokens today (the workflow's version and each site's signal
    // name included); 346 lines before the save traits were made small, 114
    // of them three near-identical traits.
    let tokens = out.split_whitespace().count();
    assert!(tokens < 1900, "{tokens} tokens");
}

fn keys(body: TokenStream) -> syn::Result<Vec<(String, Option<String>)>> {
    let mut block: Block = syn::parse2(quote!({ #body })).expect("body parses");
    let ctx = Ident::new("ctx", Span::call_site());
    let sites = sites::number_sites(&mut block, Some(&ctx))?;
    Ok(sites
        .iter()
        .map(|s| (s.key().to_owned(), s.legacy_key()))
        .collect())
}

#[test]
fn unlabelled_sites_are_named_after_what_they_are_and_keep_their_old_keys() {
    let got = keys(quote! {
        checkpoint!();
        let x: bool = ctx.wait_for("approval").await;
        checkpoint!("named");
        let y: bool = ctx.wait_for("approval").await;
        ctx.sleep(d).await;
        let z: u8 = ctx.wait_for(name).await;
        let t: Option<u8> = ctx.wait_for_timeout("reply", d).await;
        checkpoint!();
        (x, y, z, t)
    })
    .expect("sites");
    let want: Vec<(String, Option<String>)> = [
        ("checkpoint 1", Some("#1")),
        ("wait_for(\"approval\")", Some("#2")),
        ("named", None),
        ("wait_for(\"approval\") 2", Some("#4")),
        ("sleep 1", Some("#5")),
        ("wait_for 1", Some("#6")),
        ("wait_for_timeout(\"reply\")", Some("#7")),
        ("checkpoint 2", Some("#8")),
    ]
    .iter()
    .map(|(k, l)| (k.to_string(), l.map(str::to_owned)))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn a_label_that_is_another_site_s_name_or_an_old_key_is_an_error() {
    let err = keys(quote! {
        checkpoint!();
        checkpoint!("checkpoint 1");
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("also the name of an unlabelled site"),
        "{err}"
    );
    let err = keys(quote! { checkpoint!("#3"); }).unwrap_err();
    assert!(err.to_string().contains("reserved"), "{err}");
}
