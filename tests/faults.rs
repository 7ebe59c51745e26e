//! Bad bytes in the store: a checkpoint whose bytes do not decode is refused
//! before any user code runs, with an error naming the workflow, the site and
//! the field; the run stays intact (not resumed, nothing overwritten), and
//! nothing panics.

use std::time::Duration;

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
            signal: "go".into(),
            deadline: None,
        }
    );
    let before = rt.checkpoints("n-1").await.unwrap();
    drop(rt);
    closed(path.to_str().unwrap()).await;

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
                signal: "more".into(),
                deadline: None,
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
    closed(path.to_str().unwrap()).await;

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

// ---------------------------------------------------------------------------
// Checksums: a flipped bit in a stored checkpoint is refused, never resumed.

/// A directory for one test's files: in memory (`/dev/shm`) when there is
/// one, since the fuzz test below opens a store a few thousand times.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = base.join(format!("cp-faults-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, file: &str) -> String {
        self.0.join(file).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Makes the SQLite file `db` of a dropped runtime hold everything by
/// itself, for tests that read or copy its raw bytes: waits a little for
/// the runtime's background tasks to close the store (which folds the
/// write-ahead log back), and otherwise folds the log in from a connection
/// of its own (`wal_checkpoint(TRUNCATE)`), as any SQLite tool would.
async fn closed(db: &str) {
    let wal = format!("{db}-wal");
    let gone = || std::fs::metadata(&wal).map_or(true, |m| m.len() == 0);
    let since = std::time::Instant::now();
    while !gone() && since.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    while !gone() {
        let conn = rusqlite::Connection::open(db).unwrap();
        let busy: i64 = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .unwrap();
        if busy == 0 {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the write-ahead log of `{db}` could not be folded back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The site of run `id`'s latest checkpoint.
async fn latest_site(rt: &Runtime, id: &str) -> String {
    rt.checkpoints(id)
        .await
        .unwrap()
        .last()
        .unwrap()
        .site
        .clone()
}

/// Asserts that run `id` of `notes` was refused with a message naming it,
/// its workflow, `site` and the field `text`, and that no user code ran.
async fn assert_refused(rt: &Runtime, id: &str, site: &str, effects: &SideEffects) {
    let error = match rt.status(id).await.unwrap() {
        Status::Failed { error } => error,
        other => panic!("expected a refused run, got {other:?}"),
    };
    let expected = format!(
        "cannot decode field `text` of run `{id}` (workflow `notes`) at site `{site}`: the run \
         cannot be loaded, so it was set aside (the other runs go on): checkpoint #1 is \
         damaged: the field's bytes do not match the checksum stored with them"
    );
    assert!(error.starts_with(&expected), "{error}");
    assert!(
        effects.all().is_empty(),
        "user code ran: {:?}",
        effects.all()
    );
    let err = rt.handle(notes, id).result().await.unwrap_err();
    assert!(matches!(err, Error::Decode { .. }), "{err}");
    // The damaged version is still listed, flagged with what is wrong.
    let listed = rt.checkpoints(id).await.unwrap();
    assert_eq!(listed.len(), 1);
    let damaged = listed[0].damaged.as_deref().expect("flagged as damaged");
    assert!(damaged.contains("checkpoint #1 is damaged"), "{damaged}");
}

#[tokio::test]
async fn a_flipped_bit_in_a_sqlite_file_is_refused_naming_run_site_and_field() {
    let dir = Scratch::new("sqlite-bit");
    let url = dir.path("runs.db");
    let rt = Runtime::open(&url).await.unwrap();
    rt.start(notes, "n-2", "bit-flip".to_string())
        .await
        .unwrap();
    rt.run_until_idle().await.unwrap();
    let site = latest_site(&rt, "n-2").await;
    drop(rt);
    closed(&url).await;

    // One bit of the file itself, in the bytes of the field `text`
    // ("notes about bit-flip"): `e` becomes `d`.
    let mut file = std::fs::read(&url).unwrap();
    let needle = b"notes about bit-flip";
    let at: Vec<usize> = file
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the field's bytes should be stored once");
    file[at[0] + 3] ^= 1;
    std::fs::write(&url, file).unwrap();

    let effects = SideEffects::new();
    let rt = Runtime::builder()
        .resource(effects.clone())
        .open(&url)
        .await
        .unwrap();
    rt.register(notes);
    rt.signal("n-2", "go", &true).await.unwrap();
    rt.run_until_idle().await.unwrap();
    assert_refused(&rt, "n-2", &site, &effects).await;
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
)]
async fn a_flipped_bit_in_a_postgres_row_is_refused_naming_run_site_and_field() {
    let Ok(base) = std::env::var("CHECKPOINT_TEST_POSTGRES_URL") else {
        eprintln!("skipped: CHECKPOINT_TEST_POSTGRES_URL is not set");
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000_000)
        .unwrap_or(0);
    let schema = format!("cp_faults_{}_{nanos}", std::process::id());
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}schema={schema}");
    let outcome = async {
        let rt = Runtime::open(&url).await.unwrap();
        rt.start(notes, "n-3", "bit-flip".to_string())
            .await
            .unwrap();
        rt.run_until_idle().await.unwrap();
        let site = latest_site(&rt, "n-3").await;
        drop(rt);

        // One bit of the row's `data`, in the field `text`.
        let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        let changed = client
            .execute(
                &format!(
                    "UPDATE {schema}.cp_checkpoints SET data = set_bit(data, 26, \
                     1 - get_bit(data, 26)) WHERE run = 'n-3'"
                ),
                &[],
            )
            .await
            .unwrap();
        assert_eq!(changed, 1);

        let effects = SideEffects::new();
        let rt = Runtime::builder()
            .resource(effects.clone())
            .open(&url)
            .await
            .unwrap();
        rt.register(notes);
        rt.signal("n-3", "go", &true).await.unwrap();
        rt.run_until_idle().await.unwrap();
        assert_refused(&rt, "n-3", &site, &effects).await;
        drop(rt);
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
        task.abort();
    };
    outcome.await;
}

#[workflow]
async fn ledger(ctx: &Ctx, name: String) -> String {
    let title = format!("ledger of {name}");
    let mut entries: Vec<u32> = Vec::new();
    for i in 0..3u32 {
        entries.push(i * 7 + 1);
        checkpoint!("entry");
    }
    let bonus: u32 = ctx.wait_for("bonus").await;
    let total: u32 = entries.iter().sum::<u32>() + bonus;
    format!("{title}: {entries:?} + {bonus} = {total}")
}

/// One stored value to damage: column `col` of row `rowid` of `table`,
/// `bits` long.
#[derive(Debug, Clone)]
struct Cell {
    table: &'static str,
    col: &'static str,
    rowid: i64,
    bits: usize,
}

/// The non-NULL cells of the checkpoint rows of run `id` (every column), of
/// the shapes and of the run's head.
fn cells(path: &str, id: &str) -> Vec<Cell> {
    use rusqlite::types::Value;
    let db = rusqlite::Connection::open(path).unwrap();
    let ord: i64 = db
        .query_row("SELECT ord FROM runs WHERE id = ?1", [id], |r| r.get(0))
        .unwrap();
    let mut out = Vec::new();
    let mut add = |table: &'static str, cols: &[&'static str], filter: &str| {
        let sql = format!(
            "SELECT rowid, {} FROM {table} WHERE {filter}",
            cols.join(", ")
        );
        let mut stmt = db.prepare(&sql).unwrap();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            let rowid: i64 = row.get(0).unwrap();
            for (i, col) in cols.iter().enumerate() {
                let bits = match row.get::<_, Value>(i + 1).unwrap() {
                    Value::Null | Value::Real(_) => continue,
                    Value::Integer(_) => 64,
                    Value::Text(t) => 8 * t.len(),
                    Value::Blob(b) => 8 * b.len(),
                };
                out.push(Cell {
                    table,
                    col,
                    rowid,
                    bits,
                });
            }
        }
    };
    add(
        "checkpoints",
        &[
            "data",
            "refs",
            "loops",
            "checksum",
            "suspend",
            "size",
            "seq",
            "shape",
            "created_at",
            "prev",
            "floor",
        ],
        &format!("run = {ord}"),
    );
    add("shapes", &["body"], "1");
    add("heads", &["latest"], &format!("run = {ord}"));
    out
}

/// Flips bit `bit` of `cell` in the file at `path`, keeping the value's
/// type (a text that is no longer UTF-8 becomes a blob).
fn flip(path: &str, cell: &Cell, bit: usize) {
    use rusqlite::types::Value;
    let db = rusqlite::Connection::open(path).unwrap();
    let select = format!("SELECT {} FROM {} WHERE rowid = ?1", cell.col, cell.table);
    let value: Value = db.query_row(&select, [cell.rowid], |r| r.get(0)).unwrap();
    let flip_in = |mut b: Vec<u8>| {
        b[bit / 8] ^= 1 << (bit % 8);
        b
    };
    let value = match value {
        Value::Integer(i) => Value::Integer(i ^ (1i64 << bit)),
        Value::Blob(b) => Value::Blob(flip_in(b)),
        Value::Text(t) => match String::from_utf8(flip_in(t.into_bytes())) {
            Ok(t) => Value::Text(t),
            Err(e) => Value::Blob(e.into_bytes()),
        },
        other => other,
    };
    let update = format!(
        "UPDATE {} SET {} = ?1 WHERE rowid = ?2",
        cell.table, cell.col
    );
    db.execute(&update, rusqlite::params![value, cell.rowid])
        .unwrap();
}

/// What a run resumed from a damaged store did.
#[derive(Debug, PartialEq)]
enum Resumed {
    /// It computed what the uninterrupted run computes.
    Exact,
    /// It was refused: failed with an error naming the run, parked (a
    /// flipped site key or field name no longer fits the code), or left
    /// waiting (not resumed).
    Refused,
    /// It computed something else: what checksums are there to prevent.
    Wrong(String),
}

/// Resumes run `id` of `ledger` from the store at `path`, delivering its
/// signal, and says what it did.
async fn resume_ledger(path: &str, id: &str, expected: &str) -> Resumed {
    let rt = Runtime::open(path).await.unwrap();
    resume_on(&rt, id, expected).await
}

async fn resume_on(rt: &Runtime, id: &str, expected: &str) -> Resumed {
    rt.register(ledger);
    rt.signal(id, "bonus", &5u32).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), rt.run_until_idle())
        .await
        .expect("run_until_idle hung")
        .expect("one damaged run must not make run_until_idle fail");
    match rt.status(id).await.unwrap() {
        Status::Completed => match rt.handle(ledger, id).result().await {
            Ok(out) if out == expected => Resumed::Exact,
            Ok(out) => Resumed::Wrong(out),
            Err(e) => Resumed::Wrong(format!("completed, but its output is unreadable: {e}")),
        },
        Status::Failed { error } => {
            assert!(error.contains(&format!("run `{id}`")), "{error}");
            Resumed::Refused
        }
        Status::Waiting { .. } | Status::Incompatible { .. } => Resumed::Refused,
        other => panic!("unexpected status {other:?}"),
    }
}

/// A fixed-seed generator (xorshift64*) for the sample of bits to flip.
struct Bits(u64);

impl Bits {
    fn next(&mut self, below: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as usize % below.max(1)
    }
}

/// Fuzz: single bits flipped, one at a time, in every column of the stored
/// checkpoint rows of a run (its fields' bytes, shared with earlier rows or
/// its own, the references locating them, the loop positions, the
/// suspension, the sequence numbers, the times, the seal), in its shapes and
/// in its head. Every bit of the bytes, references, loop positions and
/// seals is flipped; a fixed sample of the others (`CHECKPOINT_FUZZ_ALL=1`
/// flips all of them). No resumed run may compute anything but what the
/// uninterrupted run computes: it is exact or refused. Without the seals,
/// the same harness sees wrong results (so it can tell).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_flipped_bit_resumes_to_a_different_result() {
    let dir = Scratch::new("fuzz");
    let base = dir.path("base.db");
    let expected = {
        let rt = Runtime::in_memory();
        let h = rt.start(ledger, "l-0", "flips".to_string()).await.unwrap();
        rt.signal("l-0", "bonus", &5u32).await.unwrap();
        h.result().await.unwrap()
    };
    assert_eq!(expected, "ledger of flips: [1, 8, 15] + 5 = 29");
    {
        let rt = Runtime::open(&base).await.unwrap();
        rt.start(ledger, "l-1", "flips".to_string()).await.unwrap();
        rt.run_until_idle().await.unwrap();
        assert_eq!(rt.checkpoints("l-1").await.unwrap().len(), 4);
    }
    closed(&base).await;
    // A file per case: a dropped runtime closes its store once its
    // background tasks have ended, and the next case must not wait for it.
    let cases = std::sync::atomic::AtomicUsize::new(0);
    let resume_flipped = |cell: Cell, bit: usize, unsealed: bool| {
        let n = cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let case = dir.path(&format!("case-{n}.db"));
        let (base, expected) = (base.clone(), expected.clone());
        async move {
            std::fs::copy(&base, &case).unwrap();
            if unsealed {
                let db = rusqlite::Connection::open(&case).unwrap();
                db.execute("UPDATE checkpoints SET checksum = NULL", [])
                    .unwrap();
            }
            flip(&case, &cell, bit);
            let resumed = resume_ledger(&case, "l-1", &expected).await;
            for file in [case.clone(), format!("{case}-wal"), format!("{case}-shm")] {
                let _ = std::fs::remove_file(file);
            }
            resumed
        }
    };

    let all = std::env::var_os("CHECKPOINT_FUZZ_ALL").is_some();
    let latest: i64 = rusqlite::Connection::open(&base)
        .unwrap()
        .query_row("SELECT latest FROM heads", [], |r| r.get(0))
        .unwrap();
    let mut bits = Bits(0x9e37_79b9_7f4a_7c15);
    let (mut exact, mut refused, mut wrong) = (0usize, 0usize, Vec::new());
    let mut missed = Vec::new();
    for cell in cells(&base, "l-1") {
        let exhaustive = matches!(cell.col, "data" | "refs" | "loops" | "checksum");
        let picked: Vec<usize> = if all || exhaustive {
            (0..cell.bits).collect()
        } else {
            (0..12).map(|_| bits.next(cell.bits)).collect()
        };
        // Every byte of the latest row's own fields and seal is used.
        let used = cell.table == "checkpoints"
            && cell.rowid == latest
            && matches!(cell.col, "data" | "checksum");
        for bit in picked {
            match resume_flipped(cell.clone(), bit, false).await {
                Resumed::Exact if used => missed.push(format!("{cell:?} bit {bit}")),
                Resumed::Exact => exact += 1,
                Resumed::Refused => refused += 1,
                Resumed::Wrong(out) => wrong.push(format!("{cell:?} bit {bit}: {out}")),
            }
        }
    }
    eprintln!(
        "flipped {} bits: {exact} exact, {refused} refused",
        exact + refused + wrong.len()
    );
    assert!(wrong.is_empty(), "wrong results:\n{}", wrong.join("\n"));
    assert!(
        missed.is_empty(),
        "used bytes flipped unnoticed:\n{}",
        missed.join("\n")
    );
    assert!(refused > 0);

    // The control: the same flips of the latest checkpoint's fields' bytes
    // (wherever they are stored), without the seals, resume wrong.
    let mut unsealed_wrong = 0;
    for cell in cells(&base, "l-1")
        .into_iter()
        .filter(|c| c.table == "checkpoints" && c.col == "data")
    {
        for bit in 0..cell.bits {
            if let Resumed::Wrong(_) = resume_flipped(cell.clone(), bit, true).await {
                unsealed_wrong += 1;
            }
        }
    }
    assert!(
        unsealed_wrong > 0,
        "without checksums no flip resumed wrong: the harness cannot tell"
    );
    eprintln!("without seals, {unsealed_wrong} flips of field bytes resumed to wrong results");
}
