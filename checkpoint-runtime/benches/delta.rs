//! Criterion benchmarks of fields stored by appending in the SQLite store
//! (see `src/store/delta/`, the planning both SQL stores share, and
//! `src/store/sqlite/checkpoints/delta.rs`), on a history of ~500-byte
//! messages (a postcard `Vec<Vec<u8>>`) at 1,000 and 4,000 messages:
//!
//! - `delta/append_<n>`: finding what a grown history appended to the one
//!   before (the writer does this for every changed field: a quick check,
//!   then one comparison of the old bytes), next to `delta/compare_<n>`,
//!   a plain comparison of as many bytes, and `delta/encode_<n>`, encoding
//!   the history once (postcard);
//! - `delta/load_latest_<n>`: reassembling the latest version of a run that
//!   appended one message per checkpoint `n` times (its base, the folded
//!   level-1 segments and up to 63 level-0 ones, read from the file, then
//!   checked against its seal), next to `delta/load_whole_<n>`, the same
//!   state in a run of one version (a fork: stored whole): `load_latest_<n>_grown`
//!   and `load_latest_<n>_whole`.
//!
//! ```text
//! cargo bench -p checkpoint-runtime --bench delta
//! ```

use std::borrow::Cow;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use checkpoint_runtime::store::sqlite::{__appended_tail, SqliteStore};
use checkpoint_runtime::store::{CheckpointRecord, ClaimRequest, FieldRecord, NewRun, Store};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures::executor::block_on;

const SIZES: [usize; 2] = [1000, 4000];

fn message(i: usize) -> Vec<u8> {
    (0..500).map(|k| (k * 31 + i) as u8).collect()
}

fn encode(history: &[Vec<u8>]) -> Vec<u8> {
    postcard::to_allocvec(history).expect("encode")
}

/// A checkpoint of run `run` holding `history` (and the turn).
fn record(run: &str, seq: u64, history: &[u8]) -> Arc<CheckpointRecord> {
    let turn = postcard::to_allocvec(&seq).expect("encode");
    let mut data = history.to_vec();
    data.extend_from_slice(&turn);
    let field = |name: &'static str, offset, len| FieldRecord {
        name: Cow::Borrowed(name),
        type_name: Cow::Borrowed("alloc::vec::Vec<alloc::vec::Vec<u8>>"),
        offset,
        len,
    };
    let fields = vec![
        field("history", 0, history.len()),
        field("turn", history.len(), turn.len()),
    ];
    Arc::new(CheckpointRecord::new(
        Arc::from(run),
        seq,
        Cow::Borrowed("turn"),
        None,
        vec![],
        fields,
        data,
        None,
        SystemTime::now(),
    ))
}

/// A store where run `grown-<n>` appended a message per checkpoint `n`
/// times, and `whole-<n>` is its latest version forked (stored whole).
fn build(store: &SqliteStore, n: usize) {
    let id = format!("grown-{n}");
    block_on(store.create_run(NewRun {
        id: id.clone(),
        workflow: "wf".into(),
        input: Arc::from(&b"null"[..]),
        version: 1,
        trace: None,
        parent: None,
        max_running: None,
        options: Default::default(),
    }))
    .expect("create");
    let claimed = block_on(store.claim(&ClaimRequest {
        worker: Arc::from("bench"),
        instance: Arc::from("bench-1"),
        workflows: vec!["wf"],
        ttl: Duration::from_secs(3600),
        limit: 1,
        only: Some(id.clone()),
        revisit_parked: false,
        clock_now: SystemTime::now(),
        queues: Default::default(),
    }))
    .expect("claim");
    let lease = claimed.claimed[0].lease.clone();
    let mut history = Vec::new();
    for seq in 1..=n as u64 {
        history.push(message(seq as usize));
        let cp = record(&id, seq, &encode(&history));
        block_on(store.save_checkpoint(&lease, cp, None)).expect("save");
    }
    block_on(store.fork(&id, n as u64, &format!("whole-{n}"))).expect("fork");
}

fn bench_delta(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("delta.db")).expect("open");
    let mut group = c.benchmark_group("delta");
    for n in SIZES {
        let history: Vec<Vec<u8>> = (0..n).map(message).collect();
        let old = encode(&history[..n - 1]);
        let new = encode(&history);
        // The new element (its length and bytes); both headers are 2 bytes.
        assert_eq!(__appended_tail(&new, &old), Some(new.len() - old.len()));
        group.throughput(Throughput::Bytes(new.len() as u64));
        group.bench_function(format!("append_{n}"), |b| {
            b.iter(|| __appended_tail(black_box(&new), black_box(&old)))
        });
        let same = new.clone();
        group.bench_function(format!("compare_{n}"), |b| {
            b.iter(|| black_box(&new[..]) == black_box(&same[..]))
        });
        group.bench_function(format!("encode_{n}"), |b| {
            b.iter(|| encode(black_box(&history)))
        });
        build(&store, n);
        for run in ["grown", "whole"] {
            let id = format!("{run}-{n}");
            group.bench_function(format!("load_latest_{n}_{run}"), |b| {
                b.iter(|| block_on(store.latest_checkpoint(&id)).expect("load"))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    targets = bench_delta
}
criterion_main!(benches);
