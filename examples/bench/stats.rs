//! Small helpers every section of the bench table shares to turn its
//! measurements into cells: the scaled counts (`BENCH_SCALE`), medians and
//! percentiles of timings, units (ms, us, MiB) and the `met` column. Kept
//! apart so that each section's file holds only its own measurement.

use std::time::Duration;

pub(crate) fn scaled(n: usize, scale: f64) -> usize {
    ((n as f64 * scale).round() as usize).max(1)
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn median_of(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

pub(crate) fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let i = ((v.len().saturating_sub(1)) as f64 * p).round() as usize;
    v.get(i).copied().unwrap_or_default()
}

pub(crate) fn met(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "**no**"
    }
}

pub(crate) fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}
