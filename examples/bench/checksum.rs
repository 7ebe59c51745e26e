//! The checksum row of the bench table (`BENCH_ONLY=checksum`): what
//! sealing and checking a durable checkpoint's checksums costs, as a share
//! of the durable checkpoint's median latency when the latency row
//! measured it (`DURABLE_MEDIAN`, set by `latency.rs`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;

use super::stats::{met, us};
use super::workloads::durable_loop;
use super::BoxError;

/// The median durable checkpoint latency, once `latency_row` measured it.
pub(crate) static DURABLE_MEDIAN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// What the checksums of a durable checkpoint cost (see
/// `checkpoint_runtime::store::checksums`): sealing one (at every write of
/// the SQLite and PostgreSQL stores) and checking it (at every read that
/// rebuilds one), on a real checkpoint of `durable_loop` (1,000-byte state),
/// next to the durable checkpoint's median latency when it was measured.
pub(crate) async fn checksum_row() -> Result<String, BoxError> {
    use checkpoint_runtime::store::{checksums, verify_checksums, MemoryStore, Store};
    eprintln!("checksums: sealing and checking a 1,000-byte-state checkpoint ...");
    let store = Arc::new(MemoryStore::new());
    let rt = Runtime::builder().store(store.clone()).in_memory();
    rt.start(durable_loop, "sum", (10, 1000))
        .await?
        .result()
        .await?;
    let cp = store
        .latest_checkpoint("sum")
        .await?
        .ok_or("no checkpoint")?;
    const N: u32 = 100_000;
    let timed = |f: &dyn Fn()| {
        let mut best = Duration::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            for _ in 0..N {
                f();
            }
            best = best.min(start.elapsed() / N);
        }
        best
    };
    let seal = checksums(&cp);
    let sealing = timed(&|| {
        black_box(checksums(black_box(&cp)));
    });
    let checking = timed(&|| {
        black_box(verify_checksums(black_box(&cp), black_box(&seal)).is_ok());
    });
    let both = sealing + checking;
    let gbps = cp.data.len() as f64 / sealing.as_secs_f64().max(1e-12) / 1e9;
    let (floor, ratio, ok) = match DURABLE_MEDIAN.get() {
        Some(d) => {
            let r = both.as_secs_f64() / d.as_secs_f64().max(1e-12);
            (
                format!("durable checkpoint median {:.0} us", us(*d)),
                format!("{r:.4}x"),
                met(r <= 0.01),
            )
        }
        None => (
            "durable latency not measured (add `latency`)".to_owned(),
            "-".to_owned(),
            "-",
        ),
    };
    Ok(format!(
        "| checkpoint checksums (CRC-32 per field + metadata), {} B in {} fields | seal {} ns ({gbps:.1} GB/s) + check {} ns per checkpoint | {floor} | {ratio} (seal + check / durable) | <= 0.01x | {ok} |",
        cp.data.len(),
        cp.fields.len(),
        sealing.as_nanos(),
        checking.as_nanos(),
    ))
}
