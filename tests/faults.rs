//! Bad bytes in the store: a checkpoint whose bytes do not decode is refused
//! before any user code runs, with an error naming the workflow, the site and
//! the field; the run stays intact (not resumed, nothing overwritten), and
//! nothing panics.

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::SideEffects;

#[workflow]
async fn notes(ctx: &Ctx, title: String) -> String {
    let text = format!("notes about {title}");
    let decision: bool = ctx.wait_for("go").await;
    ctx.resource::<SideEffects>().record("resumed");
    format!("{text}: {decision}")
}

#[tokio::test]
async fn undecodable_checkpoint_bytes_fail_the_run_cleanly() {
    let dir = std::env::temp_dir().join(format!("cp-faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("runs.db");
    let url = path.to_string_lossy().to_string();

    let rt = Runtime::open(&url).await.unwrap();
    rt.start(notes, "n-1", "rust".to_string()).await.unwrap();
    rt.run_until_idle().await.unwrap();
    assert_eq!(
        rt.status("n-1").await.unwrap(),
        Status::Waiting {
            signal: "go".into()
        }
    );
    let before = rt.checkpoints("n-1").await.unwrap();
    drop(rt);

    // Overwrite every stored checkpoint byte with 0xFF: as postcard, a
    // length that never ends.
    {
        let db = rusqlite::Connection::open(&path).unwrap();
        let changed = db
            .execute(
                "UPDATE checkpoints SET data = unhex(replace(hex(zeroblob(length(data))), '00', 'FF')) \
                 WHERE data IS NOT NULL AND length(data) > 0",
                [],
            )
            .unwrap();
        assert!(changed > 0, "no checkpoint bytes found to corrupt");
    }

    let effects = SideEffects::new();
    let rt = Runtime::builder()
        .resource(effects.clone())
        .open(&url)
        .await
        .unwrap();
    rt.register(notes);
    rt.signal("n-1", "go", &true).await.unwrap();
    rt.run_until_idle().await.unwrap();

    let error = match rt.status("n-1").await.unwrap() {
        Status::Failed { error } => error,
        other => panic!("expected a failed run, got {other:?}"),
    };
    for part in ["notes", "text"] {
        assert!(error.contains(part), "`{part}` missing from: {error}");
    }
    assert!(
        effects.all().is_empty(),
        "user code ran on garbage: {:?}",
        effects.all()
    );
    let err = rt.handle(notes, "n-1").result().await.unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err}");
    // Nothing was overwritten: the same checkpoint versions are listed.
    let after = rt.checkpoints("n-1").await.unwrap();
    assert_eq!(
        before.iter().map(|c| c.seq).collect::<Vec<_>>(),
        after.iter().map(|c| c.seq).collect::<Vec<_>>()
    );
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
}

#[workflow]
async fn tally(ctx: &Ctx, n: u32) -> u32 {
    let mut total = 0;
    for i in 0..3 {
        total += i + n;
        checkpoint!("counted");
    }
    let extra: u32 = ctx.wait_for("more").await;
    total + extra
}

/// One run whose checkpoint cannot be read (its `refs` column damaged) is
/// marked failed, naming the run, its workflow and site, and every other run
/// goes on: `run_until_idle` completes them and returns `Ok`.
#[tokio::test]
async fn one_damaged_run_is_marked_and_the_others_complete() {
    let dir = std::env::temp_dir().join(format!("cp-faults-isolation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("runs.db");
    let _ = std::fs::remove_file(&path);
    let url = path.to_string_lossy().to_string();
    let ids: Vec<String> = (0..6).map(|i| format!("t-{i}")).collect();

    let rt = Runtime::open(&url).await.unwrap();
    rt.register(tally);
    for (i, id) in ids.iter().enumerate() {
        rt.start(tally, id, i as u32).await.unwrap();
    }
    rt.run_until_idle().await.unwrap();
    for id in &ids {
        assert_eq!(
            rt.status(id).await.unwrap(),
            Status::Waiting {
                signal: "more".into()
            },
            "{id}"
        );
    }
    let site = rt
        .checkpoints("t-2")
        .await
        .unwrap()
        .last()
        .unwrap()
        .site
        .clone();
    drop(rt);

    // Damage where run t-2's checkpoints say their fields are.
    {
        let db = rusqlite::Connection::open(&path).unwrap();
        let changed = db
            .execute(
                "UPDATE checkpoints SET refs = x'FFFFFFFFFFFFFFFF' \
                 WHERE refs IS NOT NULL AND run = (SELECT ord FROM runs WHERE id = 't-2')",
                [],
            )
            .unwrap();
        assert!(changed > 0, "no refs found to damage");
    }

    let rt = Runtime::open(&url).await.unwrap();
    rt.register(tally);
    for id in &ids {
        rt.signal(id, "more", &100u32).await.unwrap();
    }
    rt.run_until_idle()
        .await
        .expect("one damaged run must not stop the others");
    for (i, id) in ids.iter().enumerate() {
        if id == "t-2" {
            continue;
        }
        assert_eq!(rt.status(id).await.unwrap(), Status::Completed, "{id}");
        let n = i as u32;
        let out = rt.handle(tally, id).result().await.unwrap();
        assert_eq!(out, 3 * n + 3 + 100, "{id}");
    }
    let error = match rt.status("t-2").await.unwrap() {
        Status::Failed { error } => error,
        other => panic!("expected the damaged run to be marked failed, got {other:?}"),
    };
    let site = format!("site `{site}`");
    for part in [
        "run `t-2`",
        "workflow `tally`",
        &site,
        "`total`",
        "field references",
    ] {
        assert!(error.contains(part), "`{part}` missing from: {error}");
    }
    let history = rt.history("t-2").await.unwrap();
    assert!(
        history.iter().any(|h| matches!(h, Event::Failed { .. })),
        "no failure recorded in the history: {history:?}"
    );
    // Marked once: nothing left to do, also for a worker that starts now.
    rt.run_until_idle().await.unwrap();
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
}
