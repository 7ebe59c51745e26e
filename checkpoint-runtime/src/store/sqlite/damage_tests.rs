//! Damaged SQLite stores: checksums (a flipped bit in a field's bytes or in
//! what locates them is refused, naming run, workflow, site and field),
//! rows written before checksums existed, a missing shape, corrupt
//! references, and read-only files and directories. The messages are pinned.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use futures::executor::block_on;
use rusqlite::Connection;

use super::SqliteStore;
use crate::history::Event;
use crate::store::conformance::{claim_one, new_run, req};
use crate::store::{CheckpointRecord, FieldRecord, Lease, Release, RunState, Store, Suspend};
use crate::Error;

/// How every damage error ends.
const REFUSED: &str = "; it is refused rather than resumed with wrong values (restore the \
                       store from a backup, or fork an intact version of the run)";

fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("runs.db")).unwrap();
    (dir, store)
}

fn peek(store: &SqliteStore) -> Connection {
    Connection::open(store.path()).unwrap()
}

/// A checkpoint of run `run` at site `site` with these fields.
fn cp(
    run: &str,
    seq: u64,
    site: &'static str,
    fields: &[(&'static str, &[u8])],
) -> CheckpointRecord {
    let mut data = Vec::new();
    let mut recs = Vec::new();
    for (name, bytes) in fields {
        recs.push(FieldRecord {
            name: Cow::Borrowed(*name),
            type_name: Cow::Borrowed("alloc::vec::Vec<u8>"),
            offset: data.len(),
            len: bytes.len(),
        });
        data.extend_from_slice(bytes);
    }
    CheckpointRecord::new(
        Arc::from(run),
        seq,
        Cow::Borrowed(site),
        Some(Cow::Borrowed(site)),
        vec![seq],
        recs,
        data,
        None,
        SystemTime::now(),
    )
}

/// Run `r` (workflow `wf`) with checkpoints #1 (`goal`, `done`) and #2
/// (`goal` unchanged, so its bytes are shared with #1's row; `done`
/// grown), both at site `step`. Returns the records and the lease.
fn two_checkpoints(store: &SqliteStore) -> (Vec<Arc<CheckpointRecord>>, Lease) {
    new_run(store, "r");
    let c = claim_one(store, "a", "a1");
    let one = Arc::new(cp(
        "r",
        1,
        "step",
        &[("goal", b"\x03abc"), ("done", b"\x01\x07")],
    ));
    let two = Arc::new(cp(
        "r",
        2,
        "step",
        &[("goal", b"\x03abc"), ("done", b"\x02\x07\x08")],
    ));
    for cp in [&one, &two] {
        block_on(store.save_checkpoint(&c.lease, cp.clone(), None)).unwrap();
    }
    (vec![one, two], c.lease)
}

/// Runs `sql` on the store's file, behind its back.
fn damage(store: &SqliteStore, sql: &str) {
    let n = peek(store).execute(sql, []).unwrap();
    assert!(n > 0, "nothing damaged by {sql}");
}

/// The decode error of `r`'s checkpoint `seq` read back through `get`.
fn refused(r: Result<Option<Arc<CheckpointRecord>>, Error>) -> String {
    match r {
        Err(e @ Error::Decode { .. }) => e.to_string(),
        other => panic!("expected a decode error, got {other:?}"),
    }
}

#[test]
fn a_flipped_bit_in_a_field_is_refused_naming_run_site_and_field() {
    let (_dir, store) = open();
    let (cps, lease) = two_checkpoints(&store);
    // Intact: each version reads back as written.
    assert_eq!(
        block_on(store.checkpoint("r", 1)).unwrap(),
        Some(cps[0].clone())
    );
    assert_eq!(
        block_on(store.latest_checkpoint("r")).unwrap(),
        Some(cps[1].clone())
    );
    let sealed: i64 = peek(&store)
        .query_row(
            "SELECT count(*) FROM checkpoints WHERE checksum IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(sealed, 2);

    // One bit of `goal`'s bytes, which both versions use from row #1.
    damage(
        &store,
        "UPDATE checkpoints SET data = x'03616262' || substr(data, 5) WHERE seq = 1",
    );
    let latest = refused(block_on(store.latest_checkpoint("r")));
    assert_eq!(
        latest,
        format!(
            "cannot decode field `goal` of run `r` (workflow `wf`) at site `step`: checkpoint #2 \
             is damaged: the field's bytes do not match the checksum stored with them{REFUSED}"
        )
    );
    let first = refused(block_on(store.checkpoint("r", 1)));
    assert!(
        first.contains("field `goal`") && first.contains("checkpoint #1"),
        "{first}"
    );

    // The listing still lists both, flagged.
    let listed = block_on(store.list_checkpoints("r")).unwrap();
    assert_eq!(listed.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2]);
    assert!(listed.iter().all(|c| c.is_damaged()));
    assert_eq!(listed[1].site_key, "step");
    assert_eq!(listed[1].damage.as_ref().unwrap().to_string(), latest);
    // A fork of a damaged version is refused with the same error.
    let err = block_on(store.fork("r", 2, "r2")).unwrap_err();
    assert_eq!(err.to_string(), latest);
    assert!(block_on(store.load_run("r2")).unwrap().is_none());

    // A claim sets the run aside, naming the field; the other runs go on.
    block_on(store.release("r", &lease, Release::Abandon)).unwrap();
    new_run(&store, "s");
    let got = block_on(store.claim(&req("b", "b1"))).unwrap();
    let ids: Vec<&str> = got.claimed.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(ids, ["s"]);
    let rec = block_on(store.load_run("r")).unwrap().unwrap();
    let RunState::Failed { error } = rec.state else {
        panic!("r: {:?}", rec.state)
    };
    let error = error.to_string();
    for part in [
        "cannot decode field `goal` of run `r` (workflow `wf`) at site `step`",
        "the run cannot be loaded, so it was set aside (the other runs go on)",
        "checkpoint #2 is damaged: the field's bytes do not match the checksum",
    ] {
        assert!(error.contains(part), "`{part}` missing from: {error}");
    }
}

#[test]
fn damaged_metadata_is_refused() {
    // Each damages what locates or names the latest checkpoint's bytes.
    let cases = [
        ("seq", "UPDATE checkpoints SET seq = 3 WHERE seq = 2"),
        (
            "created_at",
            "UPDATE checkpoints SET created_at = created_at + 1 WHERE seq = 2",
        ),
        (
            "loops",
            "UPDATE checkpoints SET loops = x'0103' WHERE seq = 2",
        ),
        (
            "size",
            "UPDATE checkpoints SET size = size - 1, data = substr(data, 2) WHERE seq = 2",
        ),
        (
            "shape",
            "UPDATE shapes SET body = CAST(replace(CAST(body AS TEXT), 'goal', 'gaol') AS BLOB)",
        ),
        (
            "refs",
            "UPDATE checkpoints SET refs = x'00020000000000000303' WHERE seq = 2",
        ),
        (
            "checksum",
            "UPDATE checkpoints SET checksum = x'00' || substr(checksum, 2) WHERE seq = 2",
        ),
        (
            "suspension",
            "UPDATE checkpoints SET suspend = '{\"Sleeping\":{\"until\":\
             {\"secs_since_epoch\":1,\"nanos_since_epoch\":0}}}' WHERE seq = 2",
        ),
    ];
    for (what, sql) in cases {
        let (_dir, store) = open();
        two_checkpoints(&store);
        damage(&store, sql);
        let err = refused(block_on(store.latest_checkpoint("r")));
        assert!(
            err.contains("of run `r` (workflow `wf`)") && err.contains("is damaged: "),
            "{what}: {err}"
        );
    }
}

#[test]
fn rows_written_before_checksums_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    let (cps, lease) = {
        let store = SqliteStore::open(&path).unwrap();
        two_checkpoints(&store)
    };
    // As a version-1 file: no checksum column (nor a run version, nor
    // segments).
    {
        let db = Connection::open(&path).unwrap();
        db.execute_batch(
            "DROP INDEX runs_ready; DROP INDEX runs_due; DROP INDEX runs_held; \
             CREATE INDEX runs_active ON runs (ord) WHERE state < 3; \
             ALTER TABLE checkpoints DROP COLUMN checksum; DROP INDEX runs_parked; \
             DROP TABLE segments; DROP TABLE signal_sites; \
             ALTER TABLE runs DROP COLUMN version; \
             DROP TABLE joins; DROP INDEX runs_parent; ALTER TABLE runs DROP COLUMN parent; \
             ALTER TABLE runs DROP COLUMN join_pending; \
             ALTER TABLE runs DROP COLUMN cancel_request; \
             DROP TABLE stream_items; DROP TABLE run_progress; DROP TABLE schedules; \
             DROP INDEX runs_queue; DROP INDEX runs_queue_order; DROP TABLE queue_admissions; ALTER TABLE runs DROP COLUMN tags; ALTER TABLE runs DROP COLUMN queue; \
             ALTER TABLE runs DROP COLUMN priority; \
             PRAGMA user_version = 1",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        peek(&store)
            .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
            .unwrap(),
        super::migrations::SCHEMA_VERSION
    );
    let unsealed: i64 = peek(&store)
        .query_row(
            "SELECT count(*) FROM checkpoints WHERE checksum IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(unsealed, 2);
    assert_eq!(
        block_on(store.latest_checkpoint("r")).unwrap(),
        Some(cps[1].clone())
    );
    assert_eq!(block_on(store.list_checkpoints("r")).unwrap(), cps);
    // The run goes on, and its new checkpoints are sealed.
    block_on(store.release("r", &lease, Release::Abandon)).unwrap();
    let c = claim_one(&store, "b", "b1");
    assert_eq!(c.checkpoint, Some(cps[1].clone()));
    let three = Arc::new(cp(
        "r",
        3,
        "step",
        &[("goal", b"\x03abc"), ("done", b"\x00")],
    ));
    block_on(store.save_checkpoint(&c.lease, three.clone(), None)).unwrap();
    assert_eq!(block_on(store.latest_checkpoint("r")).unwrap(), Some(three));
    let sealed: i64 = peek(&store)
        .query_row(
            "SELECT count(*) FROM checkpoints WHERE checksum IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(sealed, 1);
    // NULL is "not checked": an old row's damage goes unseen (what the
    // column exists to end), while the new row, which shares `goal`'s bytes
    // with row #1, notices it.
    damage(
        &store,
        "UPDATE checkpoints SET data = x'03616262' || substr(data, 5) WHERE seq = 1",
    );
    let old = block_on(store.checkpoint("r", 1)).unwrap().unwrap();
    assert_eq!(old.field_bytes(0), Some(&b"\x03abb"[..]));
    let err = refused(block_on(store.latest_checkpoint("r")));
    assert!(
        err.contains("field `goal`") && err.contains("checkpoint #3"),
        "{err}"
    );
}

#[test]
fn a_missing_shape_is_named_and_the_other_versions_still_work() {
    let (_dir, store) = open();
    new_run(&store, "r");
    let c = claim_one(&store, "a", "a1");
    let one = Arc::new(cp("r", 1, "step", &[("goal", b"\x01a")]));
    let two = Arc::new(cp(
        "r",
        2,
        "review",
        &[("goal", b"\x01a"), ("notes", b"\x01n")],
    ));
    let three = Arc::new(cp("r", 3, "step", &[("goal", b"\x01b")]));
    for cp in [&one, &two, &three] {
        block_on(store.save_checkpoint(&c.lease, cp.clone(), None)).unwrap();
    }
    let shape: i64 = peek(&store)
        .query_row("SELECT shape FROM checkpoints WHERE seq = 2", [], |r| {
            r.get(0)
        })
        .unwrap();
    damage(&store, &format!("DELETE FROM shapes WHERE id = {shape}"));

    let expected = format!(
        "cannot decode field `-` of run `r` (workflow `wf`) at site `<unreadable>`: checkpoint \
         #2 is damaged: it refers to shape {shape} (its site and field list), which is missing \
         from the store{REFUSED}"
    );
    assert_eq!(refused(block_on(store.checkpoint("r", 2))), expected);
    // The listing has all three (it had none before), #2 flagged.
    let listed = block_on(store.list_checkpoints("r")).unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!((&listed[0], &listed[2]), (&one, &three));
    assert_eq!(listed[1].seq, 2);
    assert_eq!(listed[1].site_key, "<unreadable>");
    assert_eq!(listed[1].damage.as_ref().unwrap().to_string(), expected);
    // The history (it failed with "Query returned no rows" before): every
    // checkpoint is there, #2 without its label.
    let saved: Vec<(u64, Option<String>)> = block_on(store.history("r"))
        .unwrap()
        .into_iter()
        .filter_map(|h| match h.event {
            Event::CheckpointSaved { seq, label } => Some((seq, label)),
            _ => None,
        })
        .collect();
    assert_eq!(
        saved,
        [
            (1, Some("step".into())),
            (2, None),
            (3, Some("step".into()))
        ]
    );
    // Intact versions fork; the damaged one is refused.
    block_on(store.fork("r", 1, "from-1")).unwrap();
    assert_eq!(
        block_on(store.latest_checkpoint("from-1"))
            .unwrap()
            .unwrap()
            .field_bytes(0),
        Some(&b"\x01a"[..])
    );
    block_on(store.fork("r", 3, "from-3")).unwrap();
    assert_eq!(
        block_on(store.fork("r", 2, "from-2"))
            .unwrap_err()
            .to_string(),
        expected
    );
    // The latest is intact: the run resumes.
    assert_eq!(block_on(store.latest_checkpoint("r")).unwrap(), Some(three));
}

#[test]
fn corrupt_refs_name_workflow_run_site_and_field() {
    let (_dir, store) = open();
    two_checkpoints(&store);
    damage(
        &store,
        "UPDATE checkpoints SET refs = x'FFFFFFFFFFFFFFFF' WHERE seq = 2",
    );
    assert_eq!(
        refused(block_on(store.latest_checkpoint("r"))),
        format!(
            "cannot decode field `goal, done` of run `r` (workflow `wf`) at site `step`: \
             checkpoint #2 is damaged: its field references do not decode{REFUSED}"
        )
    );
    // References that decode but point past the bytes name their field.
    let (_dir, store) = open();
    two_checkpoints(&store);
    let refs = super::error::to_postcard(&super::checkpoints::refs::StoredRefs {
        raw: false,
        fields: vec![(0, 0, 3), (0, 1000, 3)],
    })
    .unwrap();
    peek(&store)
        .execute("UPDATE checkpoints SET refs = ?1 WHERE seq = 2", [refs])
        .unwrap();
    assert_eq!(
        refused(block_on(store.latest_checkpoint("r"))),
        format!(
            "cannot decode field `done` of run `r` (workflow `wf`) at site `step`: checkpoint #2 \
             is damaged: its field reference points outside the stored bytes{REFUSED}"
        )
    );
    // References to other bytes of the right length: the checksum names
    // the field.
    let (_dir, store) = open();
    two_checkpoints(&store);
    let first: i64 = peek(&store)
        .query_row("SELECT id FROM checkpoints WHERE seq = 1", [], |r| r.get(0))
        .unwrap();
    let refs = super::error::to_postcard(&super::checkpoints::refs::StoredRefs {
        raw: false,
        fields: vec![(first as u64, 2, 4), (0, 0, 3)],
    })
    .unwrap();
    peek(&store)
        .execute("UPDATE checkpoints SET refs = ?1 WHERE seq = 2", [refs])
        .unwrap();
    assert_eq!(
        refused(block_on(store.latest_checkpoint("r"))),
        format!(
            "cannot decode field `goal` of run `r` (workflow `wf`) at site `step`: checkpoint #2 \
             is damaged: the field's bytes do not match the checksum stored with them{REFUSED}"
        )
    );
    // And a reference to a row that is gone.
    let (_dir, store) = open();
    two_checkpoints(&store);
    damage(
        &store,
        "UPDATE checkpoints SET refs = NULL, data = NULL, size = NULL WHERE seq = 1",
    );
    let err = refused(block_on(store.latest_checkpoint("r")));
    assert!(
        err.starts_with(
            "cannot decode field `goal` of run `r` (workflow `wf`) at site `step`: checkpoint #2 \
             is damaged: its bytes cannot be read: the bytes of checkpoint row"
        ),
        "{err}"
    );
}

/// Makes `path` read-only for this process until dropped: by its
/// permissions, or (for a process that ignores them, such as root) as an
/// immutable file. `None` if neither works here.
struct ReadOnly {
    path: PathBuf,
    mode: u32,
    immutable: bool,
}

impl ReadOnly {
    fn make(path: &Path) -> Option<ReadOnly> {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        let ro = if path.is_dir() { 0o555 } else { 0o444 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(ro)).ok()?;
        let mut guard = ReadOnly {
            path: path.to_owned(),
            mode,
            immutable: false,
        };
        if writable(path) {
            let chattr = std::process::Command::new("chattr")
                .arg("+i")
                .arg(path)
                .output();
            guard.immutable = chattr.is_ok_and(|o| o.status.success());
            if writable(path) {
                return None;
            }
        }
        Some(guard)
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if self.immutable {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&self.path)
                .output();
        }
        let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(self.mode));
    }
}

/// Whether this process can write `path` (a file) or create a file in it
/// (a directory).
fn writable(path: &Path) -> bool {
    if path.is_dir() {
        let probe = path.join("probe");
        let ok = std::fs::write(&probe, b"x").is_ok();
        let _ = std::fs::remove_file(&probe);
        ok
    } else {
        std::fs::OpenOptions::new().write(true).open(path).is_ok()
    }
}

/// The store at `path`, closed again (its write-ahead log folded back).
fn stored(path: &Path) {
    let store = SqliteStore::open(path).unwrap();
    new_run(&store, "r");
}

#[test]
fn a_read_only_file_is_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.db");
    stored(&path);
    let Some(_ro) = ReadOnly::make(&path) else {
        eprintln!("skipped: cannot make a file read-only for this process");
        return;
    };
    let err = SqliteStore::open(&path).unwrap_err().to_string();
    let shown = path.display();
    let expected = format!(
        "store error: sqlite: the store `{shown}` is read-only: this process cannot write the \
         file ("
    );
    assert!(err.starts_with(&expected), "{err}");
    for part in [
        "The SQLite store writes even to read runs (its write-ahead log); make the file \
         writable for this user (for example `chmod u+w ",
        "), or open a writable copy of it",
    ] {
        assert!(err.contains(part), "`{part}` missing from: {err}");
    }
    assert!(
        !err.contains("unable to open database file (opening"),
        "{err}"
    );
}

#[test]
fn a_read_only_directory_is_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("data");
    std::fs::create_dir(&sub).unwrap();
    let path = sub.join("runs.db");
    stored(&path);
    // What is refused is creating the write-ahead log. A close under load
    // sometimes leaves `-wal`/`-shm` behind (about 1 run in 40 of this
    // test), and SQLite then opens the store through them: take them away
    // (the store was closed; its rows do not matter here).
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(sub.join(format!("runs.db{suffix}")));
    }
    let Some(_ro) = ReadOnly::make(&sub) else {
        eprintln!("skipped: cannot make a directory read-only for this process");
        return;
    };
    let err = SqliteStore::open(&path).unwrap_err().to_string();
    let expected = format!(
        "store error: sqlite: the store `{}` is read-only: this process cannot create files in \
         its directory `{}` (",
        path.display(),
        sub.display()
    );
    assert!(err.starts_with(&expected), "{err}");
    assert!(
        err.contains(
            "), where SQLite keeps the store's write-ahead log (`runs.db-wal`, `runs.db-shm`); \
             make the directory writable for this user, or move the file to one that is"
        ),
        "{err}"
    );
    // A new file there is refused the same way.
    let err = SqliteStore::open(sub.join("new.db"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is read-only: this process cannot create files"),
        "{err}"
    );
}

#[test]
fn a_missing_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope").join("runs.db");
    let err = SqliteStore::open(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!(
            "store error: sqlite: the store `{}` cannot be created: its directory `{}` does not \
             exist (create it, or give another path)",
            path.display(),
            dir.path().join("nope").display()
        )),
        "{err}"
    );
}

#[test]
fn a_suspension_survives_its_seal() {
    // A waiting checkpoint's deadline and a sleeping one's time are sealed
    // as stored (JSON), and read back intact.
    let (_dir, store) = open();
    new_run(&store, "r");
    let c = claim_one(&store, "a", "a1");
    let mut one = cp("r", 1, "wait", &[("goal", b"\x01a")]);
    one.suspend = Some(Suspend::Waiting {
        signal: "go".into(),
        deadline: Some(SystemTime::now() + std::time::Duration::from_secs(3600)),
        payload_schema: None,
        sites_before: None,
    });
    let one = Arc::new(one);
    block_on(store.save_checkpoint(&c.lease, one.clone(), None)).unwrap();
    assert_eq!(block_on(store.latest_checkpoint("r")).unwrap(), Some(one));
}

#[test]
fn a_damaged_run_row_is_marked_and_then_reads_back_failed() {
    let (_dir, store) = open();
    for id in ["a", "b", "c"] {
        new_run(&store, id);
    }
    // `b`'s row no longer reads: a text where its epoch was; `c` waits
    // (with a passed deadline) for no signal.
    damage(&store, "UPDATE runs SET epoch = 'x' WHERE id = 'b'");
    damage(
        &store,
        "UPDATE runs SET state = 1, signal = NULL, due = 0 WHERE id = 'c'",
    );
    assert!(block_on(store.load_run("b")).is_err());
    let got = block_on(store.claim(&req("w", "w1"))).unwrap();
    let ids: Vec<&str> = got.claimed.iter().map(|c| c.run.id.as_str()).collect();
    assert_eq!(ids, ["a"]);
    for (id, why) in [
        ("b", "Invalid column type Text"),
        ("c", "waits for no signal"),
    ] {
        let rec = block_on(store.load_run(id)).unwrap().unwrap();
        let crate::Status::Failed { error } = rec.status() else {
            panic!("{id}: {:?}", rec.state);
        };
        for part in [&format!("run `{id}`"), "workflow `wf`", "set aside", why] {
            assert!(error.contains(part), "`{part}` missing from: {error}");
        }
    }
    assert!(block_on(store.claim(&req("v", "v1")))
        .unwrap()
        .claimed
        .is_empty());
}
