//! A run's trace context, stored when it is started, carried to every
//! execution, on another runtime and after a restart.

use std::sync::{Arc, Mutex};

use checkpoint_runtime::observe::TracePropagation;
use checkpoint_runtime::prelude::*;
use checkpoint_runtime::store::MemoryStore;

#[workflow(name = "review")]
async fn review(ctx: &Ctx, docs: Vec<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for d in docs {
        seen.push(d);
        checkpoint!("doc");
    }
    let ok: bool = ctx.wait_for("approval").await;
    format!("{} {ok}", seen.join(","))
}

/// Records what it attached, and hands out a context at start.
#[derive(Clone, Default)]
struct Recording {
    attached: Arc<Mutex<Vec<String>>>,
}

impl TracePropagation for Recording {
    fn current(&self) -> Option<String> {
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned())
    }
    fn attach(&self, _span: &tracing::Span, context: &str) {
        self.attached.lock().unwrap().push(context.to_owned());
    }
}

#[tokio::test]
async fn a_run_s_trace_context_is_carried_to_every_execution() {
    let store = Arc::new(MemoryStore::new());
    let starter = Recording::default();
    let a = Runtime::builder()
        .trace_propagation(starter.clone())
        .store(store.clone())
        .in_memory();
    a.start(review, "r-2", vec!["x".into()]).await.unwrap();
    a.run_until_idle().await.unwrap();
    // Another worker, days later: it joins the trace the run was started in.
    let later = Recording::default();
    let b = Runtime::builder()
        .trace_propagation(later.clone())
        .store(store)
        .in_memory();
    b.register(review);
    b.signal("r-2", "approval", &false).await.unwrap();
    assert_eq!(b.handle(review, "r-2").result().await.unwrap(), "x false");
    let context = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    assert_eq!(*starter.attached.lock().unwrap(), [context]);
    assert_eq!(*later.attached.lock().unwrap(), [context]);
    // And the history keeps it, in `Started`.
    let history = b.history("r-2").await.unwrap();
    assert!(matches!(
        &history[0],
        Event::Started { trace: Some(t), .. } if t == context
    ));
}
