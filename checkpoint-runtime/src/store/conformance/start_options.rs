//! Conformance: a run's start options ([`NewRun::options`]): its tags,
//! queue and priority are stored with it and read back by every read, its
//! tags filter listings and counts, and a start time keeps it from being
//! claimed until the claim's clock reaches it.

use super::*;
use crate::StartOptions;

fn create_with(store: &dyn Store, id: &str, parent: Option<&str>, options: StartOptions) {
    let r = block_on(store.create_run(with_options(id, parent, options))).unwrap();
    assert!(matches!(r, Created::New), "{id} is new");
}

fn with_options(id: &str, parent: Option<&str>, options: StartOptions) -> NewRun {
    NewRun {
        id: id.into(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: parent.map(str::to_owned),
        max_running: None,
        options,
    }
}

fn ids(store: &dyn Store, filter: &RunFilter) -> Vec<String> {
    block_on(store.list_runs(filter))
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect()
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Conformance: tags, queue and priority are stored with a run, for a
/// lone start, starts made together and a child, and read back by
/// `load_run`, `list_runs` and a claim; a run started without options has
/// none; a second create of the id changes nothing.
pub fn start_options_are_stored_with_the_run(store: &dyn Store) {
    let acme = StartOptions::new()
        .tag("tenant", "acme")
        .tag("plan", "pro \"quoted\" ünï")
        .queue("llm")
        .priority(-3);
    create_with(store, "alone", None, acme.clone());
    // Starts made at the same time (a backend may write them together).
    let together = ["t-1", "t-2", "t-3"].map(|id| {
        let opts = StartOptions::new().tag("batch", id).priority(7);
        store.create_run(with_options(id, None, opts))
    });
    for r in block_on(futures::future::join_all(together)) {
        assert!(matches!(r.unwrap(), Created::New));
    }
    create_with(
        store,
        "alone/child",
        Some("alone"),
        StartOptions::new().tag("tenant", "acme").queue("small"),
    );
    new_run(store, "plain");

    let rec = load(store, "alone");
    assert_eq!(
        rec.tags,
        tags(&[("tenant", "acme"), ("plan", "pro \"quoted\" ünï")])
    );
    assert_eq!((rec.queue.as_deref(), rec.priority), (Some("llm"), -3));
    assert_eq!(rec.state, RunState::Ready);
    for id in ["t-1", "t-2", "t-3"] {
        let rec = load(store, id);
        assert_eq!(rec.tags, tags(&[("batch", id)]), "{id}");
        assert_eq!((rec.queue, rec.priority), (None, 7), "{id}");
    }
    let child = load(store, "alone/child");
    assert_eq!(child.tags, tags(&[("tenant", "acme")]));
    assert_eq!(child.queue.as_deref(), Some("small"));
    let plain = load(store, "plain");
    assert!(plain.tags.is_empty());
    assert_eq!((plain.queue, plain.priority), (None, 0));

    // Listed with them.
    let listed = block_on(store.list_runs(&RunFilter::new().id_prefix("alone"))).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].tags, rec.tags);
    assert_eq!(listed[0].queue.as_deref(), Some("llm"));

    // A create of an existing id keeps what it was created with.
    let again = block_on(store.create_run(with_options(
        "alone",
        None,
        StartOptions::new().tag("tenant", "other").queue("x"),
    )))
    .unwrap();
    let Created::Existing(existing) = again else {
        panic!("`alone` exists");
    };
    assert_eq!(existing.tags, rec.tags);
    assert_eq!(load(store, "alone").queue.as_deref(), Some("llm"));

    // A claim carries them too.
    let c = block_on(store.claim(&ClaimRequest {
        only: Some("alone".into()),
        ..req("a", "a1")
    }))
    .unwrap()
    .claimed
    .remove(0);
    assert_eq!(c.run.id, "alone");
    block_on(store.finish(
        "alone",
        &c.lease,
        Outcome::Completed {
            output: Arc::from(&b"1"[..]),
            error: None,
        },
    ))
    .unwrap();
    let done = load(store, "alone");
    assert_eq!(done.tags, rec.tags, "an end keeps the tags");
    assert_eq!((done.queue.as_deref(), done.priority), (Some("llm"), -3));
}

/// Conformance: a tag filter lists (and counts) the runs that carry every
/// tag it asks for, with the other filters and in pages.
pub fn runs_are_filtered_by_tags(store: &dyn Store) {
    let t = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .fold(StartOptions::new(), |o, (k, v)| o.tag(k, v))
    };
    create_with(store, "a", None, t(&[("tenant", "acme"), ("plan", "pro")]));
    create_with(store, "b", None, t(&[("tenant", "acme"), ("plan", "free")]));
    create_with(store, "c", None, t(&[("tenant", "beta"), ("plan", "pro")]));
    create_with(store, "d", None, t(&[("plan", "pro")]));
    new_run(store, "e");
    create_with(store, "a/1", Some("a"), t(&[("tenant", "acme")]));

    let f = RunFilter::new;
    assert_eq!(ids(store, &f().tag("tenant", "acme")), ["a", "b", "a/1"]);
    assert_eq!(
        ids(store, &f().tag("tenant", "acme").tag("plan", "pro")),
        ["a"]
    );
    assert_eq!(ids(store, &f().tag("plan", "pro")), ["a", "c", "d"]);
    assert!(ids(store, &f().tag("tenant", "nobody")).is_empty());
    // A key's value must match, not only the key.
    assert!(ids(store, &f().tag("tenant", "ACME")).is_empty());
    assert!(ids(store, &f().tag("region", "acme")).is_empty());
    // With the other filters, newest first and in pages.
    assert_eq!(ids(store, &f().tag("tenant", "acme").parent("a")), ["a/1"]);
    assert_eq!(
        ids(store, &f().tag("plan", "pro").newest_first().limit(2)),
        ["d", "c"]
    );
    assert_eq!(
        ids(store, &f().tag("plan", "pro").offset(1).limit(1)),
        ["c"]
    );
    assert_eq!(
        ids(store, &f().tag("plan", "pro").status(StatusKind::Queued)),
        ["a", "c", "d"]
    );
    assert_eq!(ids(store, &f()).len(), 6, "no tag asked: every run");

    let counts = block_on(store.count_runs(&f().tag("tenant", "acme"))).unwrap();
    assert_eq!(counts.get(&StatusKind::Queued), Some(&3), "{counts:?}");
    let counts =
        block_on(store.count_runs(&f().tag("tenant", "acme").tag("plan", "free"))).unwrap();
    assert_eq!(counts.get(&StatusKind::Queued), Some(&1), "{counts:?}");
    let none = block_on(store.count_runs(&f().tag("tenant", "nobody"))).unwrap();
    assert!(none.is_empty(), "{none:?}");
}

/// Conformance: a run created with a start time is `Sleeping` until then,
/// is not claimed before the claim's clock reaches it (and is, from its
/// input, once it does), and is counted by `next_wakeup`; a start time
/// that has passed leaves it claimable at once.
pub fn a_run_is_not_claimed_before_its_start_time(store: &dyn Store) {
    let now = SystemTime::now();
    let at = now + Duration::from_secs(3600);
    create_with(store, "later", None, StartOptions::new().start_at(at));
    assert_eq!(load(store, "later").state, RunState::Sleeping { until: at });
    assert_eq!(
        load(store, "later").status(),
        Status::Sleeping { until: at }
    );
    let early = ClaimRequest {
        clock_now: now,
        ..req("a", "a1")
    };
    assert!(block_on(store.claim(&early)).unwrap().claimed.is_empty());
    let by_name = ClaimRequest {
        only: Some("later".into()),
        ..early.clone()
    };
    assert!(block_on(store.claim(&by_name)).unwrap().claimed.is_empty());
    let wake = block_on(store.next_wakeup(now)).unwrap();
    assert_eq!(wake.timer, Some(at), "next_wakeup counts the start time");

    // A start time already passed: claimable at once.
    create_with(
        store,
        "past",
        None,
        StartOptions::new().start_at(now - Duration::from_secs(5)),
    );
    let c = block_on(store.claim(&early)).unwrap().claimed;
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].run.id, "past");

    // Due on the claim's clock: claimed as a new run, from its input.
    let due = ClaimRequest {
        clock_now: at,
        ..req("b", "b1")
    };
    let c = block_on(store.claim(&due)).unwrap().claimed;
    assert_eq!(c.len(), 1, "due at its start time");
    assert_eq!(c[0].run.id, "later");
    assert_eq!(
        (c[0].run.state.clone(), c[0].run.latest_seq),
        (RunState::Ready, 0)
    );
    assert!(c[0].checkpoint.is_none());
    assert_eq!(c[0].run.wake, None);
}
