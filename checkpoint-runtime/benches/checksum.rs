//! Criterion benchmarks of checkpoint checksums (see
//! `checkpoint_runtime::store::checksums`): sealing a checkpoint, as the
//! SQLite and PostgreSQL stores do at every write, and checking it, as they
//! do at every read that rebuilds one, over typical payloads: a few small
//! fields, a 1 KB state (the durable-latency benchmarks' payload), a 10 KB
//! and a 100 KB one.
//!
//! ```text
//! cargo bench -p checkpoint-runtime --bench checksum
//! ```

use std::borrow::Cow;
use std::hint::black_box;
use std::sync::Arc;
use std::time::SystemTime;

use checkpoint_runtime::store::{checksums, verify_checksums, CheckpointRecord, FieldRecord};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

/// A checkpoint of `fields` fields sharing `size` bytes, with the metadata
/// a real one has (site, label, loop positions, type names, schema keys).
fn record(size: usize, fields: usize) -> CheckpointRecord {
    let data: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
    let each = size / fields;
    let recs = (0..fields)
        .map(|i| FieldRecord {
            name: Cow::Owned(format!("field_{i}")),
            type_name: Cow::Borrowed("alloc::vec::Vec<my_crate::Task>"),
            offset: i * each,
            len: if i + 1 == fields {
                size - i * each
            } else {
                each
            },
        })
        .collect();
    let keys: Vec<Option<Cow<'static, str>>> = (0..fields)
        .map(|_| Some(Cow::Borrowed("9f2c4b1a7e3d5c60")))
        .collect();
    CheckpointRecord::new(
        Arc::from("vendor-42"),
        17,
        Cow::Borrowed("task_done"),
        Some(Cow::Borrowed("task_done")),
        vec![4],
        recs,
        data,
        None,
        SystemTime::now(),
    )
    .with_schemas(keys)
}

fn bench_checksums(c: &mut Criterion) {
    let mut group = c.benchmark_group("checksum");
    for (size, fields) in [(64usize, 3usize), (1000, 4), (10_000, 6), (100_000, 8)] {
        let cp = record(size, fields);
        let seal = checksums(&cp);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::new("seal", size), &cp, |b, cp| {
            b.iter(|| checksums(black_box(cp)))
        });
        group.bench_with_input(BenchmarkId::new("check", size), &cp, |b, cp| {
            b.iter(|| verify_checksums(black_box(cp), black_box(&seal)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_checksums);
criterion_main!(benches);
