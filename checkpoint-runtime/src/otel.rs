//! OpenTelemetry for runs (feature `otel`): [`W3cPropagation`] stores the
//! W3C `traceparent` of the span a run is started in, and makes every
//! execution's `checkpoint.run` span a child of it, so a run resumed days
//! later on another worker shows in its original trace. It reads and sets
//! contexts through `tracing-opentelemetry`, whose layer the application
//! installs with its own exporter (see `examples/otel.rs`).

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::observe::TracePropagation;

/// The W3C Trace Context format (`traceparent`), through
/// `tracing-opentelemetry`.
///
/// ```
/// use checkpoint_runtime::otel::W3cPropagation;
/// let rt = checkpoint_runtime::Runtime::builder()
///     .trace_propagation(W3cPropagation)
///     .in_memory();
/// # let _ = rt;
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct W3cPropagation;

const TRACEPARENT: &str = "traceparent";

impl TracePropagation for W3cPropagation {
    fn current(&self) -> Option<String> {
        let context = tracing::Span::current().context();
        let mut carrier: HashMap<String, String> = HashMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
        carrier.remove(TRACEPARENT)
    }

    fn attach(&self, span: &tracing::Span, context: &str) {
        let carrier = HashMap::from([(TRACEPARENT.to_owned(), context.to_owned())]);
        let parent = TraceContextPropagator::new().extract(&carrier);
        // Fails only if the span is disabled or already entered: the run
        // then keeps a trace of its own.
        let _ = span.set_parent(parent);
    }
}
