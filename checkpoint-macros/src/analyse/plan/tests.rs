//! Tests of the analysis on bodies: each parses a body, plans it and asks
//! the plan what a site saves, re-creates, re-derives or refuses (no code
//! is generated).

use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Block, Ident};

use super::*;
use crate::sites;

/// Plans `body` (with a `ctx` parameter); its sites with their keys.
fn planned(body: TokenStream) -> syn::Result<(Vec<Site>, BodyPlan)> {
    let mut block: Block = syn::parse2(quote!({ #body })).expect("body parses");
    let ctx = Ident::new("ctx", Span::call_site());
    let sites = sites::number_sites(&mut block, Some(&ctx)).expect("sites");
    let plan = plan_body(&block.stmts, &sites, Some(&ctx)).checked()?;
    Ok((sites, plan))
}

/// For each site, its key and the names of the locals it saves.
fn saved_per_site(body: TokenStream) -> Vec<(String, Vec<String>)> {
    let (sites, plan) = planned(body).expect("the plan has no refusal");
    sites
        .iter()
        .zip(&plan.sites)
        .map(|(s, p)| {
            (
                s.key().to_owned(),
                p.fields
                    .iter()
                    .map(|f| plan.bindings[f.binding].ident.to_string())
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

#[test]
fn errors_name_the_variable_and_the_site() {
    let err = planned(quote! {
        let data = vec![1];
        let r = &data;
        checkpoint!("after");
        r.len()
    })
    .err()
    .expect("a reference live across a checkpoint is an error");
    let msg = err.to_string();
    assert!(
        msg.contains("`r` holds a reference") && msg.contains("checkpoint \"after\""),
        "{msg}"
    );
}

/// The plan of `body`'s sites, refusals included.
fn site_plans(body: TokenStream) -> (BodyPlan, Vec<String>) {
    let mut block: Block = syn::parse2(quote!({ #body })).expect("body parses");
    let ctx = Ident::new("ctx", Span::call_site());
    let sites = sites::number_sites(&mut block, Some(&ctx)).expect("sites");
    let keys = sites.iter().map(|s| s.key().to_owned()).collect();
    (plan_body(&block.stmts, &sites, Some(&ctx)), keys)
}

/// `name (why)` of each field of site `i`.
fn fields(plan: &BodyPlan, i: usize) -> Vec<String> {
    plan.sites[i]
        .fields
        .iter()
        .map(|f| {
            let b = &plan.bindings[f.binding];
            let how = match &f.save {
                Save::Live { order_observed } => match order_observed {
                    Some(_) => "live, order observed",
                    None => "live",
                },
                Save::Snapshot(_) => "snapshot",
                Save::Through => "through",
            };
            format!("{} ({how}, {:?})", b.field_name(), f.why)
        })
        .collect()
}

#[test]
fn the_plan_says_what_each_site_saves_re_creates_and_re_derives_and_why() {
    let (plan, keys) = site_plans(quote! {
        let url = config();
        #[transient]
        let client = Client::new(&url);
        let mut queue = load();
        let mut done = Vec::new();
        for _ in 0..queue.len() {
            let job = queue.pop();
            checkpoint!("popped");
            done.push(client.run(job));
        }
        for (i, item) in done.iter().enumerate() {
            checkpoint!("listed");
            report(i, item, &client);
        }
        done
    });
    assert!(plan.errors.is_none());
    assert_eq!(keys, vec!["popped", "listed"]);
    assert_eq!(
        fields(&plan, 0),
        vec![
            "url (live, ReadAfter)",
            "queue (live, ReadAfter)",
            "done (live, ReadAfter)",
            "queue@entry (snapshot, LoopEntry)",
            // Passed to a call the macro cannot see into: if it is
            // hash-ordered, its order counts as observed.
            "job (live, order observed, ReadAfter)",
        ]
    );
    let recreated = |i: usize| -> Vec<(String, RecreatedWhy)> {
        plan.sites[i]
            .recreated
            .iter()
            .map(|r| (r.name.clone(), r.why))
            .collect()
    };
    assert_eq!(
        recreated(0),
        vec![("client".into(), RecreatedWhy::Transient)]
    );
    assert_eq!(
        recreated(1),
        vec![("client".into(), RecreatedWhy::Transient)]
    );
    assert_eq!(plan.sites[0].loops, 1);
    let rederived: Vec<(String, RederivedWhy)> = plan.sites[1]
        .rederived
        .iter()
        .map(|r| (r.name.clone(), r.why))
        .collect();
    assert_eq!(
        rederived,
        vec![
            ("i".into(), RederivedWhy::LoopItem),
            ("item".into(), RederivedWhy::LoopItem)
        ]
    );
    assert!(plan.sites.iter().all(|s| s.refused.is_empty()));
}

#[test]
fn a_refused_local_is_in_its_site_s_plan_with_the_reason() {
    let (plan, _) = site_plans(quote! {
        let data = vec![1];
        let r = &data;
        checkpoint!("after");
        r.len()
    });
    let refused: Vec<(&str, bool)> = plan.sites[0]
        .refused
        .iter()
        .map(|r| (r.name.as_str(), r.why.contains("holds a reference")))
        .collect();
    assert_eq!(refused, vec![("r", true)]);
    assert!(plan.checked().is_err(), "a refusal is a compile error");
}

#[test]
fn a_local_assigned_again_is_saved_as_a_placeholder_where_it_is_dead() {
    let (plan, _) = site_plans(quote! {
        let mut state = S::A;
        loop {
            state = match state {
                S::A => {
                    checkpoint!("a");
                    S::B
                }
                S::B => {
                    let n = count(&state);
                    checkpoint!("b");
                    use_it(n);
                    break;
                }
            }
        }
    });
    assert!(plan.errors.is_none());
    // Dead at both sites (the arm's value replaces it): its snapshot from
    // the split holds its place.
    assert_eq!(fields(&plan, 0), vec!["state (snapshot, ReadAfter)"]);
    assert_eq!(
        fields(&plan, 1),
        vec![
            "state (snapshot, ReadAfter)",
            "n (live, order observed, ReadAfter)"
        ]
    );
}

#[test]
fn a_mut_binding_of_a_re_derived_arm_is_saved_because_it_changes() {
    let (plan, _) = site_plans(quote! {
        let v = load();
        match &v {
            Some(mut x) => {
                x += 1;
                checkpoint!("x");
                use_it(x);
            }
            None => {}
        }
        v
    });
    assert!(plan.errors.is_none());
    assert_eq!(
        fields(&plan, 0),
        vec![
            "v (live, ReadAfter)",
            "x (live, order observed, ChangedBinding)"
        ]
    );
    let rederived: Vec<&str> = plan.sites[0]
        .rederived
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(rederived, vec!["x"]);
}

/// For each site, the transients built again after it, and whether each is
/// bound anew (`let`) or assigned.
fn rebuilt_per_site(body: TokenStream) -> Vec<Vec<(String, bool)>> {
    let (_, plan) = planned(body).expect("the plan has no refusal");
    plan.sites
        .iter()
        .map(|p| {
            p.rebuilt
                .iter()
                .map(|r| (r.ident.to_string(), r.rebind))
                .collect()
        })
        .collect()
}

#[test]
fn transients_read_after_a_site_are_built_again_there() {
    let got = rebuilt_per_site(quote! {
        #[transient]
        let budget = Budget::new();
        #[transient]
        let unused = Budget::new();
        let mut out = Vec::new();
        for step in 0..3 {
            out.push(budget.charge());
            checkpoint!("planned");
            out.push(budget.charge());
        }
        #[transient]
        let local = Budget::new();
        local.charge();
        checkpoint!("end");
        local.charge() + budget.charge()
    });
    // In the loop, `budget` (built before it) is assigned; at the end, both
    // are handed over by the split at the site, so both are bound anew;
    // `unused` is never read after a site.
    assert_eq!(
        got,
        vec![
            vec![("budget".to_owned(), false)],
            vec![("budget".to_owned(), true), ("local".to_owned(), true)],
        ]
    );
}

#[test]
fn a_transient_another_reads_is_built_again_with_it_first() {
    let body = quote! {
        #[transient]
        let client = Client::new();
        #[transient]
        let api = Api::new(&client);
        #[transient]
        let other = Client::new();
        let mut out = Vec::new();
        for step in 0..3 {
            out.push(api.call());
            checkpoint!("round");
        }
        out.len() as u32 + other.get(0)
    };
    // Only `api` and `other` are read after the site; `api` is built from
    // `client`, which is built again too, before it.
    assert_eq!(
        rebuilt_per_site(body.clone()),
        vec![vec![
            ("client".to_owned(), false),
            ("api".to_owned(), false),
            ("other".to_owned(), false),
        ]]
    );
    let (_, plan) = planned(body).expect("the plan has no refusal");
    assert!(plan.sites[0].rebuilt_reads_rebuilt);
}

#[test]
fn transients_borrowed_around_a_site_or_built_after_it_are_not_built_again() {
    let got = rebuilt_per_site(quote! {
        #[transient]
        let text = load();
        #[transient]
        let scale = |x: u32| x * 2;
        #[transient]
        let client = Client::new();
        let mut n = 0;
        for line in text.lines() {
            n += scale(line.len() as u32) + client.get(0);
            checkpoint!("line");
        }
        #[transient]
        let late = Client::new();
        checkpoint!("late");
        late.get(n) + client.get(n)
    });
    // `text` is borrowed by the loop's iterator, `scale` is a closure (built
    // once), `late` is built after the merge of the split at "late" (after
    // that site on every path); `client` is read after both sites: built
    // before the loop, handed over by the split at "late".
    assert_eq!(
        got,
        vec![
            vec![("client".to_owned(), false)],
            vec![("client".to_owned(), true)],
        ]
    );
}

#[test]
fn a_transient_whose_input_an_inner_local_hides_at_a_site_is_refused() {
    let err = planned(quote! {
        let region = 7;
        #[transient]
        let client = Client::new(region);
        for region in regions {
            checkpoint!("fetched");
            client.get(region);
        }
    })
    .err()
    .expect("refused")
    .to_string();
    assert!(
        err.contains("`client`") && err.contains("inner `region`"),
        "{err}"
    );
}

#[test]
fn a_transient_a_loop_borrows_and_its_body_uses_is_refused() {
    let err = planned(quote! {
        #[transient]
        let cache = Cache::load();
        let mut n = 0;
        for entry in cache.entries() {
            n += cache.hits(entry);
            checkpoint!("entry");
        }
        n
    })
    .err()
    .expect("refused")
    .to_string();
    assert!(
        err.contains("`cache`") && err.contains("borrowed by the loop"),
        "{err}"
    );
}
