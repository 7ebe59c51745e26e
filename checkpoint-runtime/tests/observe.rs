//! What an operator sees: the `checkpoint.run` span of each execution with
//! its fields, the events inside it, and the metrics. (One test in this
//! binary: `tracing` caches each callsite's interest process-wide, and a
//! test on another thread without a subscriber could race with it.)

use std::sync::{Arc, Mutex};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::store::MemoryStore;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

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

/// A span or event as seen: its name and fields (as text).
#[derive(Debug, Clone, Default)]
struct Seen {
    name: String,
    fields: Vec<(String, String)>,
    /// For an event: the `checkpoint.run` span it is in, by its `run` field.
    in_run: Option<String>,
}

impl Seen {
    fn get(&self, k: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
}

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.0.push((
            f.name().to_owned(),
            format!("{v:?}").trim_matches('"').to_owned(),
        ));
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        self.0.push((f.name().to_owned(), v.to_owned()));
    }
}

#[derive(Clone, Default)]
struct Collect {
    spans: Arc<Mutex<Vec<Seen>>>,
    events: Arc<Mutex<Vec<Seen>>>,
}

/// A span's fields, kept in its extensions (for the events inside it) and
/// at `index` in `spans` (spans may close after the test looks).
struct SpanFields {
    fields: Vec<(String, String)>,
    index: usize,
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Collect {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Vec::new();
        attrs.record(&mut Fields(&mut fields));
        let mut spans = self.spans.lock().unwrap();
        spans.push(Seen {
            name: attrs.metadata().name().to_owned(),
            fields: fields.clone(),
            in_run: None,
        });
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields {
                fields,
                index: spans.len() - 1,
            });
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut ext = span.extensions_mut();
            if let Some(f) = ext.get_mut::<SpanFields>() {
                let mut recorded = Vec::new();
                values.record(&mut Fields(&mut recorded));
                for (k, v) in recorded {
                    match f.fields.iter_mut().find(|(n, _)| *n == k) {
                        Some(slot) => slot.1 = v,
                        None => f.fields.push((k, v)),
                    }
                }
                self.spans.lock().unwrap()[f.index].fields = f.fields.clone();
            }
        }
    }
    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() != "checkpoint" {
            return;
        }
        let mut fields = Vec::new();
        event.record(&mut Fields(&mut fields));
        let name = fields
            .iter()
            .find(|(k, _)| k == "message")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let in_run = ctx.event_scope(event).and_then(|scope| {
            scope
                .from_root()
                .find(|s| s.name() == "checkpoint.run")
                .and_then(|s| {
                    s.extensions().get::<SpanFields>().and_then(|f| {
                        f.fields
                            .iter()
                            .find(|(k, _)| k == "run")
                            .map(|(_, v)| v.clone())
                    })
                })
        });
        self.events.lock().unwrap().push(Seen {
            name,
            fields,
            in_run,
        });
    }
}

/// A recorded metric: name, labels, value.
type Metric = (String, Vec<(String, String)>, DebugValue);

#[test]
fn each_execution_is_a_span_with_its_events_and_metrics() {
    let collect = Collect::default();
    let subscriber = tracing_subscriber::registry().with(collect.clone());
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        metrics::with_local_recorder(&recorder, || {
            rt.block_on(async {
                let store = Arc::new(MemoryStore::new());
                let a = Runtime::builder()
                    .worker_id("worker-a")
                    .store(store.clone())
                    .in_memory();
                a.start(review, "r-1", vec!["x".into(), "y".into()])
                    .await
                    .unwrap();
                a.run_until_idle().await.unwrap();
                let b = Runtime::builder()
                    .worker_id("worker-b")
                    .store(store)
                    .in_memory();
                b.register(review);
                b.signal("r-1", "approval", &true).await.unwrap();
                assert_eq!(b.handle(review, "r-1").result().await.unwrap(), "x,y true");
                let counts = b.record_run_metrics().await.unwrap();
                assert_eq!(counts[&StatusKind::Completed], 1);
            })
        })
    });

    let spans = collect.spans.lock().unwrap().clone();
    let runs: Vec<&Seen> = spans
        .iter()
        .filter(|s| s.name == "checkpoint.run")
        .collect();
    assert_eq!(runs.len(), 2, "two executions: {spans:?}");
    let (first, second) = (runs[0], runs[1]);
    for (span, worker, from_seq) in [(first, "worker-a", "0"), (second, "worker-b", "3")] {
        assert_eq!(span.get("workflow"), Some("review"));
        assert_eq!(span.get("run"), Some("r-1"));
        assert_eq!(span.get("worker"), Some(worker));
        assert_eq!(span.get("version"), Some("1"));
        assert_eq!(span.get("attempt"), Some("1"));
        assert_eq!(span.get("from_seq"), Some(from_seq), "{span:?}");
    }

    let events = collect.events.lock().unwrap().clone();
    let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "started",
            "checkpoint saved",
            "checkpoint saved",
            "checkpoint saved",
            "suspended",
            "resumed",
            "completed"
        ],
        "{events:?}"
    );
    assert!(
        events.iter().all(|e| e.in_run.as_deref() == Some("r-1")),
        "{events:?}"
    );
    let saved: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e.name == "checkpoint saved")
        .map(|e| (e.get("site").unwrap(), e.get("seq").unwrap()))
        .collect();
    assert_eq!(
        saved,
        [("doc", "1"), ("doc", "2"), ("wait_for(\"approval\")", "3")]
    );
    for e in events.iter().filter(|e| e.name == "checkpoint saved") {
        assert!(e.get("bytes").unwrap().parse::<u64>().unwrap() > 0);
        assert!(e.get("commit_us").unwrap().parse::<u64>().is_ok());
    }
    assert_eq!(events[5].get("from_seq"), Some("3"));

    let metrics: Vec<Metric> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let k = key.key();
            let labels = k
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (k.name().to_owned(), labels, value)
        })
        .collect();
    let find = |name: &str, label: (&str, &str)| {
        metrics
            .iter()
            .find(|(n, ls, _)| {
                n == name && ls.iter().any(|(k, v)| (k.as_str(), v.as_str()) == label)
            })
            .map(|(_, _, v)| format!("{v:?}"))
            .unwrap_or_else(|| panic!("no {name} {label:?} in {metrics:?}"))
    };
    assert_eq!(
        find("checkpoint_checkpoints_total", ("workflow", "review")),
        "Counter(3)"
    );
    assert_eq!(
        find("checkpoint_executions_total", ("workflow", "review")),
        "Counter(2)"
    );
    assert_eq!(
        find(
            "checkpoint_executions_ended_total",
            ("outcome", "suspended")
        ),
        "Counter(1)"
    );
    assert_eq!(
        find(
            "checkpoint_executions_ended_total",
            ("outcome", "completed")
        ),
        "Counter(1)"
    );
    let commits = find("checkpoint_commit_seconds", ("workflow", "review"));
    assert!(commits.starts_with("Histogram(["), "{commits}");
    let recorded = commits
        .trim_start_matches("Histogram([")
        .trim_end_matches("])")
        .split(',')
        .count();
    assert_eq!(recorded, 3, "{commits}");
    assert_eq!(
        find("checkpoint_runs", ("status", "completed")),
        "Gauge(1.0)"
    );
    assert_eq!(find("checkpoint_runs", ("status", "waiting")), "Gauge(0.0)");
}
