//! The growing-history rows of the bench table (`examples/bench.rs`,
//! `BENCH_ONLY=history`): an agent appends one ~500-byte message per
//! checkpoint to a `Vec<Message>` local, 4,000 times (times `BENCH_SCALE`),
//! one run on an SQLite file, every version kept (no retention).
//!
//! - **Store size**: the file plus its WAL with the runtime open, as a user
//!   sees them, against the final state (the latest checkpoint's bytes).
//!   Target: at most 3x.
//! - **Bytes written per checkpoint**, against the bytes appended per
//!   checkpoint (one message): the rows and segments the store wrote
//!   (`SqliteStore::bytes_written`), what the process passed to write
//!   syscalls (`wchar`: whole WAL frames and their copy into the main file)
//!   and the growth of the file and its WAL, each over the run, per
//!   checkpoint. A second run appends messages of half the size: the fixed
//!   part and the part per appended byte are the line through the two.
//!   Target: rows and segments at most 2x the appended bytes plus the fixed
//!   part. (A run whose history does not grow is shown beside.)
//! - **Latency at the end**: the median time between two checkpoints
//!   returning over the last twentieth of the run (the message is built,
//!   the state encoded and stored), against the raw commit floor (a raw
//!   `INSERT` + `COMMIT` of one message's bytes, SQLite defaults + WAL,
//!   measured right after) plus 1.5 times the time to encode that final
//!   state once (postcard, through the runtime's own encoder). Target:
//!   at most 1x.
//! - **Loading the latest version** (what a resume reads) after the whole
//!   history, against the same state forked into a run of one version
//!   (stored whole): the history's length must not cost beyond the state's
//!   size. Target: at most 1.5x. `BENCH_LOAD_ROUNDS` sets how
//!   many loads of each alternate (default 201).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::store::sqlite::SqliteStore;
use checkpoint_runtime::store::Store;
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::disk::{disk_size, settle, wal_path};
use super::floor::{raw_conn, raw_sequential, Floor};
use super::process::{cpu_split, thread_ticks, written_bytes};
use super::stats::{median_of, met, mib, ms, scaled, us};
use super::BoxError;

/// One message of the agent's conversation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub(crate) struct Message {
    role: String,
    content: String,
    turn: u32,
}

/// Turn `i`'s message: about 500 bytes encoded.
pub(crate) fn message(i: u32) -> Message {
    message_of(i, CONTENT)
}

/// Turn `i`'s message, its content about `size` bytes.
pub(crate) fn message_of(i: u32, size: usize) -> Message {
    let words = [
        "plan", "tool", "call", "result", "observe", "think", "answer",
    ];
    let mut content = String::with_capacity(480);
    let mut k = i as usize;
    while content.len() < size {
        content.push_str(words[k % words.len()]);
        content.push(' ');
        k = k.wrapping_mul(31).wrapping_add(7);
    }
    Message {
        role: if i % 2 == 0 { "assistant" } else { "tool" }.to_owned(),
        content,
        turn: i,
    }
}

/// How many messages the history holds in the run that does not grow.
const STILL: u32 = 8;

/// The content of a message (about 500 bytes encoded), and of one in the
/// run with smaller messages.
pub(crate) const CONTENT: usize = 486;
const SMALL: usize = 236;

/// The raw commit floor, measured between the agent's last checkpoints:
/// after each of them, one raw `INSERT` + `COMMIT` of `bytes`, timed; the
/// agent's checkpoint latency is then the time from the end of that commit
/// to the next checkpoint's return (so that the two alternate, and a
/// disturbance of the disk hits both alike).
#[derive(Clone)]
pub(crate) struct RawFloor(Arc<Mutex<FloorState>>);

pub(crate) struct FloorState {
    conn: Connection,
    bytes: Vec<u8>,
    /// From this turn on, each checkpoint is followed by a raw commit.
    from: u32,
    raw: Vec<Duration>,
    ours: Vec<Duration>,
    last: Option<Instant>,
    /// Threads' CPU ticks when the measured turns began.
    ticks: Vec<(u32, String, u64)>,
}

impl RawFloor {
    fn new(conn: Connection, bytes: Vec<u8>, from: u32) -> RawFloor {
        RawFloor(Arc::new(Mutex::new(FloorState {
            conn,
            bytes,
            from,
            raw: Vec::new(),
            ours: Vec::new(),
            last: None,
            ticks: Vec::new(),
        })))
    }

    /// Called when the checkpoint of `turn` returned.
    fn checkpointed(&self, turn: u32) {
        let now = Instant::now();
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if turn <= s.from {
            s.last = Some(now);
            if turn == s.from {
                s.ticks = thread_ticks();
            }
            return;
        }
        if let Some(last) = s.last {
            s.ours.push(now - last);
        }
        let bytes = std::mem::take(&mut s.bytes);
        let raw = raw_sequential(&s.conn, &bytes, 1).expect("raw commit");
        s.bytes = bytes;
        s.raw.extend(raw);
        s.last = Some(Instant::now());
    }

    /// The checkpoint latencies and raw commit times measured, and the CPU
    /// microseconds per measured turn of the writer thread and of the main
    /// thread (the raw commits included).
    fn take(&self) -> (Vec<Duration>, Vec<Duration>, (f64, f64)) {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let turns = s.ours.len().max(1) as f64;
        let (w, m) = cpu_split(&s.ticks, &thread_ticks());
        let cpu = (w / turns, m / turns);
        (std::mem::take(&mut s.ours), std::mem::take(&mut s.raw), cpu)
    }
}

/// The agent: `n` turns, each appending a message whose content has about
/// `size` bytes (none with `size` 0), then a checkpoint.
#[workflow]
pub(crate) async fn agent(ctx: &Ctx, args: (u32, usize)) -> usize {
    let (n, size) = args;
    let grow = size > 0;
    let mut history: Vec<Message> = if grow {
        Vec::new()
    } else {
        (0..STILL).map(message).collect()
    };
    let mut turn = 0u32;
    while turn < n {
        if grow {
            history.push(message_of(turn, size));
        }
        turn += 1;
        checkpoint!("turn");
        if let Some(f) = ctx.try_resource::<RawFloor>() {
            f.checkpointed(turn);
        }
        if let Some(p) = ctx.try_resource::<super::workloads::Probe>() {
            p.mark();
        }
    }
    history.len()
}

/// One measured run of [`agent`].
struct AgentRun {
    /// Bytes passed to write syscalls, per checkpoint.
    written: f64,
    /// Bytes of checkpoint rows and segments the store wrote
    /// (`SqliteStore::bytes_written`), per checkpoint.
    logical: f64,
    /// Growth of the file plus its WAL, per checkpoint.
    growth: f64,
    /// The file plus its WAL at the end, the runtime open.
    disk: u64,
    /// The WAL's share of `disk`.
    wal: u64,
    /// The latest checkpoint's bytes.
    state: usize,
    /// The latency of the last checkpoints, and of the raw commits between
    /// them (see [`RawFloor`]).
    times: Vec<Duration>,
    raw: Vec<Duration>,
    /// CPU us per measured turn: writer thread, main thread.
    cpu: (f64, f64),
    took: Duration,
}

async fn run_agent(
    path: &std::path::Path,
    id: &str,
    n: u32,
    size: usize,
    floor: RawFloor,
) -> Result<AgentRun, BoxError> {
    let store = Arc::new(SqliteStore::open(path)?);
    let rt = Runtime::builder()
        .resource(floor.clone())
        .store(store.clone())
        .in_memory();
    rt.register(agent);
    settle();
    let (start, wrote, before) = (Instant::now(), written_bytes(), disk_size(path));
    let stored = store.bytes_written();
    rt.start(agent, id, (n, size)).await?.result().await?;
    let took = start.elapsed();
    let per = |v: u64| v as f64 / f64::from(n.max(1));
    let written = per(written_bytes().saturating_sub(wrote));
    let logical = per(store.bytes_written() - stored);
    let (disk, wal) = (disk_size(path), super::disk::file_len(&wal_path(path)));
    let growth = per(disk.saturating_sub(before));
    let (times, raw, cpu) = floor.take();
    drop(rt);
    drop(store);
    let store = SqliteStore::open(path)?;
    let state = store
        .latest_checkpoint(id)
        .await?
        .map(|c| c.data.len())
        .unwrap_or(0);
    Ok(AgentRun {
        written,
        logical,
        growth,
        disk,
        wal,
        state,
        times,
        raw,
        cpu,
        took,
    })
}

/// The store alone: `n` checkpoints of the growing history (two fields:
/// the history and the turn), encoded beforehand and saved through
/// `Store::save_checkpoint`; the last `tail` saves timed, each followed by
/// a timed raw commit (as [`RawFloor`]). Returns the medians (save, raw)
/// and the CPU us per timed save of the writer and the main thread.
async fn store_alone(
    d: &std::path::Path,
    n: u32,
    tail: u32,
    bytes: &[u8],
) -> Result<(Duration, Duration, (f64, f64)), BoxError> {
    use checkpoint_runtime::store::{CheckpointRecord, ClaimRequest, FieldRecord, NewRun};
    use std::borrow::Cow;
    let store = SqliteStore::open(d.join("history-store.db"))?;
    let raw = raw_conn(&d.join("history-raw-store.db"), Floor::Defaults)?;
    let id = "alone";
    store
        .create_run(NewRun {
            id: id.to_owned(),
            workflow: "agent".to_owned(),
            input: Arc::from(&b"null"[..]),
            version: 1,
            trace: None,
            parent: None,
            max_running: None,
            options: Default::default(),
        })
        .await?;
    let claimed = store
        .claim(&ClaimRequest {
            worker: Arc::from("bench"),
            instance: Arc::from("bench-1"),
            workflows: vec!["agent"],
            ttl: Duration::from_secs(600),
            limit: 1,
            only: Some(id.to_owned()),
            revisit_parked: false,
            clock_now: SystemTime::now(),
            queues: Default::default(),
        })
        .await?;
    let lease = claimed.claimed.first().ok_or("not claimed")?.lease.clone();
    let mut history: Vec<Message> = Vec::new();
    let (mut ours, mut raws) = (Vec::new(), Vec::new());
    let mut ticks = Vec::new();
    for turn in 1..=n {
        history.push(message(turn - 1));
        let h = checkpoint_runtime::__private::encode(&history)?;
        let t = checkpoint_runtime::__private::encode(&turn)?;
        let mut data = h.bytes().to_vec();
        data.extend_from_slice(t.bytes());
        let field = |name: &'static str, type_name: &'static str, offset, len| FieldRecord {
            name: Cow::Borrowed(name),
            type_name: Cow::Borrowed(type_name),
            offset,
            len,
        };
        let fields = vec![
            field("history", h.type_name(), 0, h.bytes().len()),
            field("turn", t.type_name(), h.bytes().len(), t.bytes().len()),
        ];
        let cp = Arc::new(CheckpointRecord::new(
            Arc::from(id),
            u64::from(turn),
            Cow::Borrowed("turn"),
            Some(Cow::Borrowed("turn")),
            vec![],
            fields,
            data,
            None,
            std::time::SystemTime::now(),
        ));
        if turn == n - tail {
            ticks = thread_ticks();
        }
        let start = Instant::now();
        store.save_checkpoint(&lease, cp, None).await?;
        if turn > n - tail {
            ours.push(start.elapsed());
            raws.extend(raw_sequential(&raw, bytes, 1)?);
        }
    }
    let (w, m) = cpu_split(&ticks, &thread_ticks());
    let turns = f64::from(tail.max(1));
    Ok((
        median_of(&mut ours),
        median_of(&mut raws),
        (w / turns, m / turns),
    ))
}

/// The same agent on the in-memory store (the runtime's own part of a
/// checkpoint: encoding the locals into a new record, and the executor):
/// the median time between two of the last `tail` checkpoints returning.
async fn in_memory(n: u32, tail: u32) -> Result<Duration, BoxError> {
    let conn = Connection::open_in_memory()?;
    conn.execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")?;
    // A floor that only marks the time (no commit: an in-memory database).
    let floor = RawFloor::new(conn, Vec::new(), n - tail);
    let rt = Runtime::builder().resource(floor.clone()).in_memory();
    rt.register(agent);
    rt.start(agent, "memory", (n, CONTENT))
        .await?
        .result()
        .await?;
    let (mut times, _, _) = floor.take();
    Ok(median_of(&mut times))
}

/// The median of `rounds` timings of `f`.
pub(crate) fn timed<T>(rounds: usize, mut f: impl FnMut() -> T) -> Duration {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed()
        })
        .collect();
    median_of(&mut times)
}

/// The median of `rounds` loads of run `id`'s latest checkpoint.
async fn load_latest(store: &SqliteStore, id: &str, rounds: usize) -> Result<Duration, BoxError> {
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let cp = store.latest_checkpoint(id).await?;
        times.push(t.elapsed());
        std::hint::black_box(cp);
    }
    Ok(median_of(&mut times))
}

pub(crate) async fn rows(d: &std::path::Path, scale: f64) -> Result<Vec<String>, BoxError> {
    let n = scaled(4000, scale) as u32;
    let appended = checkpoint_runtime::__private::encode(&message(n / 2))?
        .bytes()
        .len();
    let tail = (n as usize / 20).max(10);
    let bytes: Vec<u8> = (0..appended).map(|i| i as u8).collect();
    let raw_floor = |name: &str| -> Result<RawFloor, BoxError> {
        let conn = raw_conn(&d.join(format!("history-raw-{name}.db")), Floor::Defaults)?;
        Ok(RawFloor::new(conn, bytes.clone(), n - tail as u32))
    };
    eprintln!("growing history: the agent without growth, {n} checkpoints ...");
    let still = run_agent(
        &d.join("history-still.db"),
        "still",
        n,
        0,
        raw_floor("still")?,
    )
    .await?;
    // A second growing run, with messages of half the size: the fixed part
    // and the part per appended byte are then the line through the two.
    let small = checkpoint_runtime::__private::encode(&message_of(n / 2, SMALL))?
        .bytes()
        .len();
    eprintln!(
        "growing history: the agent appending ~{small} B per checkpoint, {n} checkpoints ..."
    );
    let halved = run_agent(
        &d.join("history-small.db"),
        "small",
        n,
        SMALL,
        raw_floor("small")?,
    )
    .await?;
    eprintln!(
        "growing history: the agent appending ~{appended} B per checkpoint, {n} checkpoints ..."
    );
    let path = d.join("history.db");
    let grown = run_agent(&path, "agent", n, CONTENT, raw_floor("grown")?).await?;
    eprintln!(
        "growing history: {n} checkpoints in {:.1} s; encoding and loading ...",
        grown.took.as_secs_f64()
    );
    // Encoding the final state once, as the runtime does at a checkpoint.
    let history: Vec<Message> = (0..n).map(message).collect();
    let state = (history, n);
    let encode = timed(15, || {
        checkpoint_runtime::__private::encode(&state).map(|e| e.bytes().len())
    });
    let (mut ours, mut raw) = (grown.times.clone(), grown.raw.clone());
    let (latency, floor) = (median_of(&mut ours), median_of(&mut raw));
    let (mut still_ours, mut still_raw) = (still.times.clone(), still.raw.clone());
    let (still_latency, still_floor) = (median_of(&mut still_ours), median_of(&mut still_raw));
    let budget = floor + encode.mul_f64(1.5);

    eprintln!("growing history: the same agent on the in-memory store ...");
    let runtime_part = in_memory(n, tail as u32).await?;
    eprintln!("growing history: the store alone (records encoded beforehand) ...");
    let (alone, alone_floor, alone_cpu) = store_alone(d, n, tail as u32, &bytes).await?;
    let alone_budget = alone_floor + encode.mul_f64(1.5);
    let alone_ratio = alone.as_secs_f64() / alone_budget.as_secs_f64().max(1e-12);

    // Loading the latest version, against the same state stored whole.
    let store = SqliteStore::open(&path)?;
    store.fork("agent", u64::from(n), "agent-whole").await?;
    // Alternating, so that a disturbance hits both alike.
    let rounds: usize = std::env::var("BENCH_LOAD_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(201);
    let (mut long_t, mut whole_t) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        long_t.push(load_latest(&store, "agent", 1).await?);
        whole_t.push(load_latest(&store, "agent-whole", 1).await?);
    }
    let (long_load, whole_load) = (median_of(&mut long_t), median_of(&mut whole_t));
    drop(store);

    let size_ratio = grown.disk as f64 / grown.state.max(1) as f64;
    // Per checkpoint: bytes = fixed + slope x appended, through the two
    // growing runs.
    let line = |big: f64, little: f64| {
        let slope = (big - little) / (appended as f64 - small as f64).max(1.0);
        (big - slope * appended as f64, slope)
    };
    let (logical_fixed, logical_ratio) = line(grown.logical, halved.logical);
    let (disk_fixed, disk_ratio) = line(grown.written, halved.written);
    let (growth_fixed, growth_ratio) = line(grown.growth, halved.growth);
    let lat_ratio = latency.as_secs_f64() / budget.as_secs_f64().max(1e-12);
    let load_ratio = long_load.as_secs_f64() / whole_load.as_secs_f64().max(1e-12);
    Ok(vec![
        format!(
            "| growing history: store size after {n} checkpoints appending ~{appended} B each (one run, every version kept; file + WAL, runtime open) | {:.2} MiB (WAL {:.2} MiB; run took {:.1} s) | final state {:.2} MiB | {size_ratio:.2}x | <= 3x | {} |",
            mib(grown.disk),
            mib(grown.wal),
            grown.took.as_secs_f64(),
            mib(grown.state as u64),
            met(size_ratio <= 3.0),
        ),
        format!(
            "| growing history: bytes written per checkpoint = fixed + ratio x appended, the line through runs appending {small} B and {appended} B per checkpoint | rows and segments (`SqliteStore::bytes_written`): {:.0} B and {:.0} B, fixed {logical_fixed:.0} B; on disk (write syscalls: WAL frames and their copy into the file, whole 8 KiB pages): {:.0} B and {:.0} B, fixed {disk_fixed:.0} B; file + WAL growth {:.0} B and {:.0} B, fixed {growth_fixed:.0} B (a history that does not grow: {:.0} B, {:.0} B, {:.0} B) | {appended} B appended per checkpoint | rows and segments {logical_ratio:.2}x; on disk {disk_ratio:.2}x; growth {growth_ratio:.2}x | <= 2x + fixed (rows and segments) | {} |",
            halved.logical,
            grown.logical,
            halved.written,
            grown.written,
            halved.growth,
            grown.growth,
            still.logical,
            still.written,
            still.growth,
            met(logical_ratio <= 2.0),
        ),
        format!(
            "| growing history: checkpoint latency at {n} messages (median of the last {tail}, each after a raw commit: build the message, encode, store) | {:.0} us (CPU per turn: writer {:.0} us, main thread {:.0} us with the raw commit; the same agent on the in-memory store: {:.0} us, the runtime's part; the agent not growing: {:.0} us, its raw floor {:.0} us) | raw INSERT + COMMIT of {appended} B (SQLite defaults + WAL, alternating) {:.0} us + 1.5 x encoding the {:.2} MiB state once ({:.0} us) = {:.0} us | {lat_ratio:.2}x | <= 1x | {} |",
            us(latency),
            grown.cpu.0,
            grown.cpu.1,
            us(runtime_part),
            us(still_latency),
            us(still_floor),
            us(floor),
            mib(grown.state as u64),
            us(encode),
            us(budget),
            met(lat_ratio <= 1.0),
        ),
        format!(
            "| growing history: the store alone at {n} messages (`save_checkpoint` of records encoded beforehand: seal, delta, commit; median of the last {tail}, each after a raw commit) | {:.0} us (CPU per save: writer {:.0} us, main thread {:.0} us with the raw commit) | raw INSERT + COMMIT of {appended} B {:.0} us + 1.5 x encoding ({:.0} us) = {:.0} us | {alone_ratio:.2}x | <= 1x | {} |",
            us(alone),
            alone_cpu.0,
            alone_cpu.1,
            us(alone_floor),
            us(encode),
            us(alone_budget),
            met(alone_ratio <= 1.0),
        ),
        format!(
            "| growing history: loading the latest of {n} versions (what a resume reads; median of {rounds}, alternating) | {:.2} ms | the same state forked into a run of one version: {:.2} ms | {load_ratio:.2}x | <= 1.5x | {} |",
            ms(long_load),
            ms(whole_load),
            met(load_ratio <= 1.5),
        ),
    ])
}
