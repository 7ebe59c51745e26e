//! OpenTelemetry, exported to standard output: a run started inside a
//! request span, suspended for an approval and resumed, shows as one trace
//! (the request, then a `checkpoint.run` span per execution).
//!
//! ```text
//! cargo run --example otel
//! ```

use checkpoint_runtime::otel::W3cPropagation;
use checkpoint_runtime::prelude::*;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;

#[workflow(name = "vendor-approval")]
async fn vendor_approval(ctx: &Ctx, vendor: String) -> String {
    let note = format!("reviewed {vendor}");
    checkpoint!("reviewed");
    let approved: bool = ctx.wait_for("approval").await;
    format!("{note}: approved={approved}")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(opentelemetry_stdout::SpanExporter::default())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("vendor-approval")));
    tracing::subscriber::set_global_default(subscriber)?;

    let rt = Runtime::builder()
        .trace_propagation(W3cPropagation)
        .in_memory();
    {
        let request = tracing::info_span!("POST /vendors");
        let _entered = request.enter();
        rt.start(vendor_approval, "vendor-42", "acme".into())
            .await?;
    }
    rt.run_until_idle().await?; // now waiting for the approval
    rt.signal("vendor-42", "approval", &true).await?;
    let out = rt.handle(vendor_approval, "vendor-42").result().await?;
    println!("result: {out}");
    rt.close().await;
    provider.shutdown()?;
    Ok(())
}
