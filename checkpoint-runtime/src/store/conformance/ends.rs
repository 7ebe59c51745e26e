//! Conformance: how runs end, are retried and forked, and what a damaged store does.

use super::*;

/// Conformance: finish completes the run.
pub fn finish_completes_the_run(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    let output: Arc<[u8]> = Arc::from(&b"42"[..]);
    let outcome = Outcome::Completed {
        output: output.clone(),
        error: None,
    };
    block_on(store.finish("r", &c.lease, outcome)).unwrap();
    let rec = load(store, "r");
    assert_eq!(
        rec.state,
        RunState::Completed {
            output,
            error: None
        }
    );
    assert_eq!(rec.lease, None);
    assert_eq!(rec.status(), crate::Status::Completed);
    assert!(events(store, "r").contains(&Event::Completed));
    // Finished: never claimed again, and fenced writes are refused.
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
    let err = block_on(store.save_checkpoint(&c.lease, cp("r", 1), None)).unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert!(!block_on(store.cancel("r")).unwrap());
}

/// Issue 34, item 6: a signal to a run that has ended was stored and never
/// read; it is refused naming the run's status, and nothing is written.
pub fn a_signal_to_an_ended_run_is_refused_and_not_stored(store: &dyn Store) {
    new_run(store, "done");
    let c = claim_one(store, "a", "a1");
    let outcome = Outcome::Completed {
        output: Arc::from(&b"1"[..]),
        error: None,
    };
    block_on(store.finish("done", &c.lease, outcome)).unwrap();
    new_run(store, "gone");
    assert!(block_on(store.cancel("gone")).unwrap());
    for (id, status) in [("done", "completed"), ("gone", "cancelled")] {
        let before = events(store, id);
        let err = block_on(store.put_signal(id, "approval", b"true".to_vec())).unwrap_err();
        assert!(
            matches!(&err, Error::RunEnded { run, status: s, signal } if run == id && s == status && signal == "approval"),
            "{err:?}"
        );
        assert!(block_on(store.pending_signals(id)).unwrap().is_empty());
        assert_eq!(events(store, id), before, "no event for a refused signal");
    }
    // A run that has not ended still takes it; an unknown run is named.
    new_run(store, "open");
    block_on(store.put_signal("open", "approval", b"true".to_vec())).unwrap();
    assert_eq!(block_on(store.pending_signals("open")).unwrap().len(), 1);
    let err = block_on(store.put_signal("nope", "approval", b"1".to_vec())).unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err:?}");
}

/// Conformance: retry makes a failed run runnable from its latest checkpoint.
pub fn retry_makes_a_failed_run_runnable_from_its_latest_checkpoint(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    block_on(store.save_checkpoint(&c.lease, cp("r", 1), None)).unwrap();
    block_on(store.save_checkpoint(&c.lease, cp("r", 2), None)).unwrap();
    let error = Error::internal("boom");
    block_on(store.finish("r", &c.lease, Outcome::Failed { error })).unwrap();
    block_on(store.retry("r")).unwrap();
    let rec = load(store, "r");
    assert_eq!(
        (rec.state, rec.lease, rec.attempt),
        (RunState::Ready, None, 0)
    );
    assert!(events(store, "r")
        .iter()
        .any(|e| matches!(e, Event::Retried { reason, .. } if reason.contains("boom"))));
    // Any worker takes it up from checkpoint #2, as a new attempt.
    let c = claim_one(store, "b", "b1");
    assert_eq!(c.checkpoint.as_ref().map(|cp| cp.seq), Some(2));
    assert_eq!(c.run.attempt, 1);
    // Nothing else is retried: a running, a completed, an unknown run.
    let err = block_on(store.retry("r")).unwrap_err();
    assert!(matches!(err, Error::NotRetryable { .. }), "{err}");
    let done = Outcome::Completed {
        output: Arc::from(&b"1"[..]),
        error: None,
    };
    block_on(store.finish("r", &c.lease, done)).unwrap();
    let err = block_on(store.retry("r")).unwrap_err();
    assert!(
        matches!(&err, Error::NotRetryable { status, .. } if status == "completed"),
        "{err}"
    );
    let err = block_on(store.retry("nope")).unwrap_err();
    assert!(matches!(err, Error::UnknownRun { .. }), "{err}");
    // A run whose workflow returned `Err` counts as failed: retried too.
    new_run(store, "e");
    let c = claim_one(store, "a", "a1");
    let err_output = Outcome::Completed {
        output: Arc::from(&b"{\"Err\":\"no\"}"[..]),
        error: Some("no".into()),
    };
    block_on(store.finish("e", &c.lease, err_output)).unwrap();
    block_on(store.retry("e")).unwrap();
    assert_eq!(load(store, "e").state, RunState::Ready);
}

/// Conformance: fail records the error.
pub fn fail_records_the_error(store: &dyn Store) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    let error = Error::internal("boom");
    let outcome = Outcome::Failed {
        error: error.clone(),
    };
    block_on(store.finish("r", &c.lease, outcome)).unwrap();
    let rec = load(store, "r");
    assert_eq!(rec.state, RunState::Failed { error });
    assert!(matches!(rec.status(), crate::Status::Failed { .. }));
    assert!(events(store, "r")
        .iter()
        .any(|e| matches!(e, Event::Failed { .. })));
    // An `Err` output is a completed run that counts as failed.
    new_run(store, "s");
    let c = claim_one(store, "a", "a1");
    let outcome = Outcome::Completed {
        output: Arc::from(&b"{}"[..]),
        error: Some("no".into()),
    };
    block_on(store.finish("s", &c.lease, outcome)).unwrap();
    let status = load(store, "s").status();
    assert_eq!(status, crate::Status::Failed { error: "no".into() });
}

/// Conformance: fork copies a checkpoint.
pub fn fork_copies_a_checkpoint(store: &dyn Store) {
    let lease = waiting_run(store, None);
    block_on(store.take_signal("r", &lease, "go")).unwrap();
    block_on(store.save_checkpoint(&lease, cp("r", 2), None)).unwrap();
    block_on(store.fork("r", 1, "r2")).unwrap();
    let rec = load(store, "r2");
    assert!(matches!(&rec.state, RunState::Waiting { signal, .. } if signal == "go"));
    assert_eq!((rec.epoch, rec.attempt, rec.latest_seq), (0, 0, 1));
    assert_eq!(rec.lease, None);
    assert_eq!(rec.workflow, "wf");
    let cps = block_on(store.list_checkpoints("r2")).unwrap();
    assert_eq!(cps.len(), 1);
    assert_eq!((cps[0].seq, &*cps[0].run), (1, "r2"));
    let forked = Event::Forked {
        from: "r".into(),
        seq: 1,
        to: "r2".into(),
    };
    assert!(events(store, "r").contains(&forked));
    assert!(events(store, "r2").contains(&forked));
    let err = block_on(store.fork("r", 1, "r2")).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    let err = block_on(store.fork("r", 9, "r3")).unwrap_err();
    assert!(matches!(err, Error::UnknownCheckpoint { .. }), "{err}");
}

/// The rule of `rules::reject_signal` for a run whose latest checkpoint the
/// store no longer has: an error naming the run and that checkpoint, and
/// nothing changes (the state, the consumed signal, the history).
pub fn reject_signal_without_its_checkpoint_changes_nothing(fx: &dyn Fixture) {
    let store = fx.store();
    let lease = waiting_run(store, None);
    block_on(store.put_signal("r", "go", b"bad".to_vec())).unwrap();
    block_on(store.take_signal("r", &lease, "go")).unwrap();
    fx.lose_checkpoint("r", 1);
    // (In SQLite the checkpoint's row is its `CheckpointSaved` event.)
    let before = events(store, "r");
    let err = block_on(store.reject_signal("r", &lease, "unusable".into())).unwrap_err();
    assert!(
        matches!(&err, Error::Decode { run, workflow, .. } if run == "r" && workflow == "wf"),
        "{err}"
    );
    assert!(
        err.to_string().contains("its latest checkpoint")
            && err.to_string().contains("is missing from the store"),
        "{err}"
    );
    let rec = load(store, "r");
    assert_eq!(rec.state, RunState::Ready);
    let value = WakeValue::Signal {
        name: "go".into(),
        payload: Arc::from(&b"bad"[..]),
    };
    assert_eq!(rec.wake, Some(Wake { seq: 1, value }));
    assert!(rec.lease.is_some());
    assert_eq!(events(store, "r"), before, "nothing recorded");
}

/// A claim that meets a run whose latest checkpoint is missing marks it
/// failed, naming the run (see `rules::latest_checkpoint`), instead of
/// starting it over from its input; the other runs are claimed.
pub fn claim_sets_aside_a_run_whose_checkpoint_is_missing(fx: &dyn Fixture) {
    let store = fx.store();
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    block_on(store.save_checkpoint(&c.lease, cp("r", 1), None)).unwrap();
    block_on(store.save_checkpoint(&c.lease, cp("r", 2), None)).unwrap();
    block_on(store.release("r", &c.lease, Release::Abandon)).unwrap();
    new_run(store, "s");
    fx.lose_checkpoint("r", 2);
    let got = block_on(store.claim(&req("b", "b1"))).unwrap();
    let ids: Vec<&str> = got.claimed.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(ids, ["s"]);
    let rec = load(store, "r");
    let RunState::Failed { error } = &rec.state else {
        panic!("r: {:?}", rec.state);
    };
    let text = error.to_string();
    for part in ["run `r`", "workflow `wf`", "is missing from the store"] {
        assert!(text.contains(part), "`{part}` missing from: {text}");
    }
    assert!(events(store, "r")
        .iter()
        .any(|e| matches!(e, Event::Failed { .. })));
    assert!(block_on(store.claim(&req("b", "b1")))
        .unwrap()
        .claimed
        .is_empty());
}
