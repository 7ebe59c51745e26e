//! What an operator sees of the runtime: `tracing` spans and events, and
//! metrics through the `metrics` facade. Without a subscriber or a
//! recorder, a checkpoint pays a disabled-event check, two clock reads and
//! three calls into the no-op recorder.
//!
//! **Spans.** Each execution of a run is one `checkpoint.run` span, with
//! the fields `workflow`, `run`, `attempt`, `worker`, `version` (the
//! workflow version executing it, recorded once the code is picked) and
//! `from_seq` (the checkpoint it resumes from, 0 for a fresh start).
//! Numbers are recorded as signed 64-bit integers, which OpenTelemetry
//! exporters keep as numbers (`tracing-opentelemetry` turns unsigned ones
//! into strings). With
//! a [`TracePropagation`] set on the runtime
//! ([`RuntimeBuilder::trace_propagation`](crate::RuntimeBuilder::trace_propagation)),
//! a run stores the trace context it was started in and every execution's
//! span joins it, however much later and on whichever worker it resumes.
//!
//! **Events** (target `checkpoint`), inside that span:
//!
//! | event | level | fields |
//! |---|---|---|
//! | `started` | info | (a fresh start, or a restart before the first checkpoint) |
//! | `checkpoint saved` | debug | `site`, `seq`, `bytes`, `commit_us` |
//! | `resumed` | info | `from_seq` |
//! | `suspended` | info | |
//! | `completed` | info | |
//! | `failed` | warn | `error` |
//! | `parked` | warn | `error` |
//! | `lease lost` | warn | `error` |
//! | `cancelled` | info | |
//! | `retrying` | warn | `error` (a store error: the run is handed back) |
//!
//! **Metrics** (names as below, labelled with `workflow`):
//!
//! - `checkpoint_checkpoints_total` (counter) and `checkpoint_commit_seconds`
//!   (histogram: the time a checkpoint took to be stored durably);
//! - `checkpoint_executions_total` (counter) and `checkpoint_executions_ended_total`
//!   (counter, labelled `outcome`: `completed`, `failed`, `suspended`,
//!   `parked`, `stopped`, `retried`, `shutdown`, `panicked`);
//! - `checkpoint_runs` (gauge, labelled `status`), set by
//!   [`Runtime::record_run_metrics`](crate::Runtime::record_run_metrics).

use std::time::Duration;

use crate::Error;

/// Carries a run's trace context across executions: the context current
/// when the run is started is stored with it (as text, for example a W3C
/// `traceparent`), and each execution's span is made a child of it.
///
/// The `otel` feature provides one for OpenTelemetry
/// (`otel::W3cPropagation`, feature `otel`). A minimal one, for a system that
/// carries a request id in a span field:
///
/// ```
/// use checkpoint_runtime::observe::TracePropagation;
///
/// struct RequestIds;
///
/// impl TracePropagation for RequestIds {
///     fn current(&self) -> Option<String> {
///         Some("request-7".to_owned()) // read from the current span in practice
///     }
///     fn attach(&self, span: &tracing::Span, context: &str) {
///         span.in_scope(|| tracing::info!(parent = context, "joined"));
///     }
/// }
/// let rt = checkpoint_runtime::Runtime::builder()
///     .trace_propagation(RequestIds)
///     .in_memory();
/// ```
pub trait TracePropagation: Send + Sync + 'static {
    /// The current trace context, to store with a run being started.
    fn current(&self) -> Option<String>;

    /// Makes `span` (an execution's) part of the stored `context`.
    fn attach(&self, span: &tracing::Span, context: &str);
}

/// The span of one execution.
pub(crate) fn run_span(
    workflow: &'static str,
    run: &str,
    attempt: u32,
    worker: &str,
    from_seq: u64,
) -> tracing::Span {
    // `&'static str` labels: nothing is allocated when no recorder is set.
    metrics::counter!("checkpoint_executions_total", "workflow" => workflow).increment(1);
    tracing::info_span!(
        target: "checkpoint",
        "checkpoint.run",
        workflow,
        run,
        attempt = i64::from(attempt),
        worker,
        version = tracing::field::Empty,
        from_seq = number(from_seq)
    )
}

/// Records the workflow version executing the run on its span (once: a
/// field recorded twice shows twice).
pub(crate) fn record_version(span: &tracing::Span, version: u32) {
    span.record("version", i64::from(version));
}

/// `n` as the `i64` a span or event records (see the module doc).
fn number(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// The run starts from its beginning (no checkpoint to resume from).
pub(crate) fn started() {
    tracing::info!(target: "checkpoint", "started");
}

/// A checkpoint was stored durably in `commit`.
pub(crate) fn checkpoint_saved(
    workflow: &'static str,
    site: &str,
    seq: u64,
    bytes: usize,
    commit: Duration,
) {
    tracing::debug!(
        target: "checkpoint",
        site,
        seq = number(seq),
        bytes = number(bytes),
        commit_us = number(commit.as_micros()),
        "checkpoint saved"
    );
    metrics::counter!("checkpoint_checkpoints_total", "workflow" => workflow).increment(1);
    metrics::histogram!("checkpoint_commit_seconds", "workflow" => workflow)
        .record(commit.as_secs_f64());
}

/// The run was resumed from checkpoint `from_seq`, before its user code.
pub(crate) fn resumed(from_seq: u64) {
    tracing::info!(target: "checkpoint", from_seq = number(from_seq), "resumed");
}

/// A halt on `err` that ends the execution without a write of its own.
pub(crate) fn stopped(err: &Error) {
    match err {
        Error::LeaseLost { .. } => {
            tracing::warn!(target: "checkpoint", error = %err, "lease lost")
        }
        _ => tracing::info!(target: "checkpoint", "cancelled"),
    }
}

/// An execution dropped unpolled: its lease's local deadline had passed
/// (see `RunShared::lease_lapsed`).
pub(crate) fn lease_lapsed(epoch: u64) {
    tracing::warn!(
        target: "checkpoint",
        epoch = number(epoch),
        "lease lapsed by this worker's clock (frozen or unable to renew): execution stopped before running more of the workflow"
    );
}

/// How an execution ended, for the events and the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    Failed,
    Suspended,
    Parked,
    Stopped,
    Retried,
    Shutdown,
    Panicked,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Suspended => "suspended",
            Outcome::Parked => "parked",
            Outcome::Stopped => "stopped",
            Outcome::Retried => "retried",
            Outcome::Shutdown => "shutdown",
            Outcome::Panicked => "panicked",
        }
    }
}

/// An execution ended with `outcome` (`detail`: the error, if any).
pub(crate) fn ended(workflow: &'static str, outcome: Outcome, detail: Option<&str>) {
    let error = detail.unwrap_or("");
    match outcome {
        Outcome::Completed => tracing::info!(target: "checkpoint", "completed"),
        Outcome::Suspended => tracing::info!(target: "checkpoint", "suspended"),
        Outcome::Failed | Outcome::Panicked => {
            tracing::warn!(target: "checkpoint", error, "failed")
        }
        Outcome::Parked => tracing::warn!(target: "checkpoint", error, "parked"),
        Outcome::Retried => tracing::warn!(target: "checkpoint", error, "retrying"),
        Outcome::Stopped | Outcome::Shutdown => {}
    }
    metrics::counter!(
        "checkpoint_executions_ended_total",
        "workflow" => workflow,
        "outcome" => outcome.label()
    )
    .increment(1);
}
