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
