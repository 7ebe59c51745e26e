//! OpenTelemetry (feature `otel`): a run started inside a traced request
//! stays in that trace, across a suspension and a resume on another
//! runtime. The spans are exported with the SDK's in-memory exporter.
//! (One test in this binary: `tracing` caches callsite interest
//! process-wide.)

use std::sync::Arc;

use checkpoint_runtime::otel::W3cPropagation;
use checkpoint_runtime::prelude::*;
use checkpoint_runtime::store::MemoryStore;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[workflow(name = "approval")]
async fn approval(ctx: &Ctx, vendor: String) -> String {
    let note = format!("review {vendor}");
    checkpoint!("reviewed");
    let ok: bool = ctx.wait_for("approved").await;
    format!("{note}: {ok}")
}

#[test]
fn a_resumed_run_joins_the_trace_it_was_started_in() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("test");
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let request_trace = tracing::subscriber::with_default(subscriber, || {
        rt.block_on(async {
            let store = Arc::new(MemoryStore::new());
            let a = Runtime::builder()
                .trace_propagation(W3cPropagation)
                .store(store.clone())
                .in_memory();
            // The request that starts the run.
            let request = tracing::info_span!("POST /vendors");
            let trace = request.context().span().span_context().trace_id();
            {
                let _entered = request.enter();
                a.start(approval, "v-1", "acme".into()).await.unwrap();
            }
            drop(request);
            a.run_until_idle().await.unwrap();
            // Later, another worker resumes it.
            let b = Runtime::builder()
                .trace_propagation(W3cPropagation)
                .store(store)
                .in_memory();
            b.register(approval);
            b.signal("v-1", "approved", &true).await.unwrap();
            let out = b.handle(approval, "v-1").result().await.unwrap();
            assert_eq!(out, "review acme: true");
            a.close().await;
            b.close().await;
            trace
        })
    });
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let runs: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "checkpoint.run")
        .collect();
    assert_eq!(
        runs.len(),
        2,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    for span in &runs {
        assert_eq!(
            span.span_context.trace_id(),
            request_trace,
            "every execution is in the request's trace"
        );
    }
    // Numbers stay numbers, each field once; a fresh start and a resume
    // each say so at INFO.
    use opentelemetry::Value;
    for (span, from_seq, event) in [(runs[0], 0, "started"), (runs[1], 2, "resumed")] {
        let value = |key: &str| {
            let found: Vec<&Value> = span
                .attributes
                .iter()
                .filter(|kv| kv.key.as_str() == key)
                .map(|kv| &kv.value)
                .collect();
            assert_eq!(found.len(), 1, "{key} in {:?}", span.attributes);
            found[0].clone()
        };
        assert_eq!(value("attempt"), Value::I64(1));
        assert_eq!(value("version"), Value::I64(1));
        assert_eq!(value("from_seq"), Value::I64(from_seq));
        let events: Vec<&str> = span.events.iter().map(|e| e.name.as_ref()).collect();
        assert!(events.contains(&event), "{events:?}");
    }
    let request = spans
        .iter()
        .find(|s| s.name == "POST /vendors")
        .expect("the request span");
    assert!(runs
        .iter()
        .all(|s| s.parent_span_id == request.span_context.span_id()));
}
