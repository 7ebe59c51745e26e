//! The bytes-on-disk row of the bench table (`BENCH_ONLY=bytes`): the
//! file and its WAL per checkpoint at several state sizes, while the worker
//! is open and once closed, against a raw row of the same payload (SQLite
//! defaults + WAL) measured the same way.

use std::path::Path;

use checkpoint_runtime::prelude::*;

use super::disk::{db_size, disk_size, file_len, wal_path};
use super::floor::{raw_batched, raw_conn, Floor};
use super::stats::{met, mib, scaled};
use super::workloads::{durable_loop, open_rt, Probe};
use super::BoxError;

/// Disk use per checkpoint of one case of [`bytes_per_checkpoint`].
struct DiskUse {
    /// Growth of the file plus its WAL per checkpoint, the worker still open.
    open: f64,
    /// Growth of the file per checkpoint once closed (the WAL folded in).
    closed: f64,
    /// The WAL file's size at the end, the worker still open.
    wal: u64,
    /// Payload bytes per checkpoint.
    payload: usize,
}

/// Bytes on disk per checkpoint: `runs` × `n` checkpoints of `size` bytes.
/// The runs are created first by a client-only runtime (their rows are not
/// counted), then executed by a worker, with the file measured while that
/// worker is still open and again once it closed.
async fn bytes_per_checkpoint(
    dir: &Path,
    name: &str,
    runs: usize,
    n: u32,
    size: u32,
) -> Result<DiskUse, BoxError> {
    let path = dir.join(format!("{name}.db"));
    let url = path.to_str().expect("utf-8 temp path");
    {
        let client = Runtime::builder().client_only().open(url).await?;
        for r in 0..runs {
            client
                .start(durable_loop, &format!("{name}-{r}"), (n, size))
                .await?;
        }
        client.close().await;
    }
    let before = db_size(&path);
    let probe = Probe::default();
    let rt = open_rt(&path, &probe, runs.max(64)).await?;
    rt.run_until_idle().await?;
    let (open, wal) = (disk_size(&path), file_len(&wal_path(&path)));
    let cps = rt.checkpoints(&format!("{name}-0")).await?;
    let payload = cps.last().map(|c| c.size).unwrap_or(0);
    rt.close().await;
    drop(rt);
    let closed = db_size(&path);
    let total = runs as f64 * f64::from(n);
    Ok(DiskUse {
        open: open.saturating_sub(before) as f64 / total,
        closed: closed.saturating_sub(before) as f64 / total,
        wal,
        payload,
    })
}

pub(crate) async fn bytes_row(d: &Path, scale: f64) -> Result<String, BoxError> {
    // Bytes on disk per checkpoint at several state sizes, counted as a
    // user sees them while the worker is open: the file and its WAL. The
    // smallest size gives the fixed overhead per checkpoint (bytes beyond
    // its payload); the target is checked at the others, after taking that
    // off. The size once closed (WAL folded in) is shown beside.
    let (b_runs, b_n) = (50usize, scaled(200, scale) as u32);
    let sizes = [16u32, 1000, 2000, 4000];
    eprintln!("bytes on disk: {b_runs} runs x {b_n} checkpoints, states of {sizes:?} B ...");
    let mut points = Vec::new();
    for size in sizes {
        let used = bytes_per_checkpoint(d, &format!("bytes-{size}"), b_runs, b_n, size).await?;
        // The same payload inserted raw (one table of blobs, SQLite's
        // defaults + WAL), measured the same way: open, then closed.
        let path = d.join(format!("raw-bytes-{size}.db"));
        let conn = raw_conn(&path, Floor::Defaults)?;
        let bytes: Vec<u8> = (0..used.payload).map(|i| i as u8).collect();
        let empty = disk_size(&path);
        raw_batched(&conn, &bytes, b_n as usize, b_runs)?;
        let rows = b_runs as f64 * f64::from(b_n);
        let raw_open = disk_size(&path).saturating_sub(empty) as f64 / rows;
        drop(conn);
        let raw_closed = db_size(&path) as f64 / rows;
        points.push((used, raw_open, raw_closed));
    }
    let small = &points[0].0;
    let fixed = small.open - small.payload as f64;
    let ratios: Vec<f64> = points[1..]
        .iter()
        .map(|(u, _, _)| (u.open - fixed) / u.payload.max(1) as f64)
        .collect();
    let worst = ratios.iter().copied().fold(0f64, f64::max);
    let ours: Vec<String> = points[1..]
        .iter()
        .map(|(u, _, _)| {
            format!(
                "{:.0} B at {} B payload (closed: {:.0} B; WAL {:.1} MiB)",
                u.open,
                u.payload,
                u.closed,
                mib(u.wal)
            )
        })
        .collect();
    let raws: Vec<String> = points[1..]
        .iter()
        .map(|(u, open, closed)| format!("{open:.0} B at {} B (closed: {closed:.0} B)", u.payload))
        .collect();
    Ok(format!(
        "| bytes on disk per checkpoint ({b_runs} runs x {b_n} per size; file + WAL with the worker open) | {}; fixed overhead {fixed:.0} B ({:.0} B at {} B, closed {:.0} B) | a raw row of the payload, SQLite defaults + WAL, file + WAL with the connection open: {} | (bytes - fixed) / payload: {} | <= 1.5x + fixed | {} |",
        ours.join(", "),
        small.open,
        small.payload,
        small.closed,
        raws.join(", "),
        ratios
            .iter()
            .zip(&points[1..])
            .map(|(r, (u, _, _))| format!("{r:.2}x at {} B", u.payload))
            .collect::<Vec<_>>()
            .join(", "),
        met(worst <= 1.5),
    ))
}
