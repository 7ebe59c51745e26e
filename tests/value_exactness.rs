//! Issue 32's values: a value rebuilt from a checkpoint is not always the
//! value the uninterrupted run holds. Each source of difference in
//! `docs/exactness.md` that is refused at save has a workflow here that
//! resumed to a different result before (the comment says what it returned)
//! and is now refused naming the local, the site and what to write instead;
//! the shapes next to them that are exact must keep running, uninterrupted
//! and crashed after every checkpoint (`checkpoint_runtime::testing`).
//! The compile-time refusals are UI cases (`tests/ui/transient_*.rs`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::{Harness, SideEffects};
use serde::{Deserialize, Serialize};

fn fx(ctx: &Ctx) -> &SideEffects {
    ctx.resource::<SideEffects>()
}

/// Runs `wf` under the crash harness and returns the refusal's message,
/// checking that it names the local and the site.
async fn refused<W>(h: Harness<W>, local: &str, site: &str) -> String
where
    W: checkpoint_runtime::Workflow,
{
    let err = h
        .run()
        .await
        .expect_err("the save must be refused, not resumed to another result");
    assert!(
        matches!(err, Error::Inexact { .. }),
        "refused as inexact: {err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("field `{local}`")),
        "names the local: {msg}"
    );
    assert!(
        msg.contains(&format!("site `{site}`")),
        "names the site: {msg}"
    );
    msg
}

// 1. Hash order observed outside `for`: a crawl frontier drained through
// `iter().next()`. Resumed in another order it fetched other pages first
// (the resumed runs disagreed with the uninterrupted one). Every iterator the
// body takes from a local now comes in one canonical order on both paths.
#[workflow]
async fn crawl(ctx: &Ctx, start: Vec<u32>) -> Vec<u32> {
    let mut frontier: HashSet<u32> = start.into_iter().collect();
    let mut fetched = Vec::new();
    while let Some(page) = frontier.iter().next().cloned() {
        frontier.remove(&page);
        fx(ctx).record(format!("fetch:{page}"));
        fetched.push(page);
        if page < 20 {
            frontier.insert(page * 3 + 1);
        }
        checkpoint!("fetched");
    }
    fetched
}

#[tokio::test]
async fn a_hash_set_drained_by_iter_next_resumes_exactly() {
    let out = Harness::new(crawl)
        .input(vec![1, 2, 3, 4, 5, 60, 70])
        .assert_exact()
        .await;
    assert_eq!(out, [1, 2, 3, 4, 5, 7, 10, 13, 16, 22, 31, 40, 49, 60, 70]);
}

// `max_by_key` with tied scores picks the first maximum in iteration order:
// resumed, another key.
#[workflow]
async fn pick_tool(ctx: &Ctx, scores: HashMap<String, u32>) -> String {
    let mut scores = scores;
    scores.insert("search".into(), 9);
    checkpoint!("scored");
    let best = scores
        .iter()
        .max_by_key(|(_, s)| **s)
        .map(|(k, _)| k.clone());
    fx(ctx).record(format!("use:{best:?}"));
    best.unwrap_or_default()
}

#[tokio::test]
async fn max_by_key_over_a_hash_map_resumes_exactly() {
    let scores: HashMap<String, u32> = (0..6).map(|i| (format!("tool-{i}"), 9)).collect();
    Harness::new(pick_tool).input(scores).assert_exact().await;
}

// Keys collected after a checkpoint, and a `for` loop without a site.
#[workflow]
async fn plan(ctx: &Ctx, steps: HashSet<String>) -> Vec<String> {
    checkpoint!("planned");
    let mut order: Vec<String> = steps.iter().cloned().collect();
    for s in &steps {
        order.push(s.to_uppercase());
    }
    order
}

#[tokio::test]
async fn keys_collected_after_a_checkpoint_resume_exactly() {
    let steps: HashSet<String> = (0..8).map(|i| format!("step-{i}")).collect();
    let out = Harness::new(plan).input(steps).assert_exact().await;
    assert_eq!(out.len(), 16);
}

// A hash map inside a value, iterated through a field: exact too.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Graph {
    name: String,
    edges: HashMap<u32, Vec<u32>>,
}

#[workflow]
async fn walk(ctx: &Ctx, graph: Graph) -> Vec<u32> {
    checkpoint!("loaded");
    let firsts: Vec<u32> = graph.edges.keys().copied().collect();
    firsts
}

#[tokio::test]
async fn a_hash_map_inside_a_struct_iterated_through_a_field_resumes_exactly() {
    let graph = Graph {
        name: "g".into(),
        edges: (0..8).map(|i| (i, vec![i + 1])).collect(),
    };
    Harness::new(walk).input(graph).assert_exact().await;
}

// What the macro cannot put in order is refused at save: a helper the value
// is passed to, ...
fn outline(g: &Graph) -> Vec<u32> {
    g.edges.keys().copied().collect()
}

#[workflow]
async fn walk_with_helper(ctx: &Ctx, graph: Graph) -> Vec<u32> {
    checkpoint!("loaded");
    outline(&graph)
}

#[tokio::test]
async fn a_hash_map_inside_a_struct_passed_to_a_helper_is_refused_at_save() {
    let graph = Graph {
        name: "g".into(),
        edges: (0..8).map(|i| (i, vec![i + 1])).collect(),
    };
    let msg = refused(
        Harness::new(walk_with_helper).input(graph),
        "graph",
        "loaded",
    )
    .await;
    assert!(
        msg.contains("`HashMap<u32, Vec<u32>>` inside `Graph`"),
        "says where: {msg}"
    );
    assert!(
        msg.contains("passed, moved or borrowed"),
        "names the use: {msg}"
    );
    assert!(
        msg.contains("BTreeMap"),
        "says what to write instead: {msg}"
    );
}

// ... and `Debug` formatting.
#[workflow]
async fn report(ctx: &Ctx, seen: HashSet<u32>) -> String {
    checkpoint!("seen");
    format!("seen: {seen:?}")
}

#[tokio::test]
async fn debug_formatting_a_hash_set_is_refused_at_save() {
    let msg = refused(Harness::new(report).input((0..8).collect()), "seen", "seen").await;
    assert!(msg.contains("HashSet<u32>"), "names the type: {msg}");
    assert!(
        msg.contains("formatted by `format!`"),
        "names the use: {msg}"
    );
}

// The rewrite the message suggests is exact.
#[workflow]
async fn report_ordered(ctx: &Ctx, seen: BTreeSet<u32>) -> String {
    checkpoint!("seen");
    format!("seen: {seen:?}")
}

#[tokio::test]
async fn the_suggested_btree_set_resumes_exactly() {
    let out = Harness::new(report_ordered)
        .input((0..3).collect())
        .assert_exact()
        .await;
    assert_eq!(out, "seen: {0, 1, 2}");
}

// Order-free uses of hash collections stay exact and are not refused:
// lookups, inserts, counts, returning the map as the output, and a `for`
// loop with a checkpoint inside (iterated in a canonical order).
#[workflow]
async fn tool_results(ctx: &Ctx, calls: Vec<String>) -> HashMap<String, usize> {
    let mut results: HashMap<String, usize> = HashMap::new();
    let mut seen: HashSet<String> = HashSet::new();
    for call in &calls {
        if seen.contains(call) {
            continue;
        }
        fx(ctx).record(format!("call:{call}"));
        seen.insert(call.clone());
        results.insert(call.clone(), call.len() + seen.len());
        checkpoint!("called");
    }
    for (name, n) in &results {
        fx(ctx).record(format!("log:{name}={n}"));
        checkpoint!("logged");
    }
    results
}

#[tokio::test]
async fn order_free_uses_of_hash_collections_resume_exactly() {
    let calls: Vec<String> = ["search", "fetch", "search", "summarise", "fetch", "rank"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = Harness::new(tool_results).input(calls).assert_exact().await;
    assert_eq!(out.len(), 4);
    assert_eq!(out["search"], 7);
}

// 2. Shared ownership: two handles to one `Arc<Mutex<Vec<_>>>` came back as
// two vectors; the uninterrupted run returned [4, 4], a resumed one [1, 4].
// Refused whenever a handle to a mutable value is saved: the type says so,
// however many handles share it at that moment.
#[workflow]
async fn shared_log(ctx: &Ctx, first: u32) -> (usize, usize) {
    let log = Arc::new(Mutex::new(vec![first]));
    let view = Arc::clone(&log);
    checkpoint!("shared");
    for i in 0..3 {
        log.lock().unwrap().push(i);
    }
    let a = log.lock().unwrap().len();
    let b = view.lock().unwrap().len();
    (a, b)
}

#[tokio::test]
async fn a_handle_to_a_mutable_value_is_refused_at_save() {
    let msg = refused(Harness::new(shared_log).input(7), "log", "shared").await;
    assert!(
        msg.contains("`Arc<Mutex<Vec<u32>>>`"),
        "names the type: {msg}"
    );
    assert!(msg.contains("owned local"), "says what to do: {msg}");
}

// Handles to an immutable value: a copy behaves as the shared value did.
#[workflow]
async fn shared_prompt(ctx: &Ctx, words: Vec<String>) -> Vec<String> {
    let prompt: Arc<str> = Arc::from(words.join(" "));
    let system = Arc::clone(&prompt);
    let mut out = Vec::new();
    for w in &words {
        out.push(format!("{}|{w}|{}", prompt.len(), system.len()));
        checkpoint!("asked");
    }
    out
}

#[tokio::test]
async fn handles_to_an_immutable_value_resume_exactly() {
    let out = Harness::new(shared_prompt)
        .input(vec!["a".into(), "bc".into()])
        .assert_exact()
        .await;
    assert_eq!(out, ["4|a|4", "4|bc|4"]);
}

// 5. A `#[serde(skip)]` field comes back as its default. The uninterrupted
// run used to keep the real value ([5, 4]) where a resumed one had the
// default ([5, 2]). After each checkpoint the uninterrupted run now goes on
// from the decoded state, as a resumed run does: both return [5, 2]. The
// skipped field is its default from the first checkpoint on, on every path
// (docs/exactness.md: a saved value *is* what serde writes of it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Budget {
    spent: u32,
    #[serde(skip)]
    limit: u32,
}

#[workflow]
async fn spend(ctx: &Ctx, limit: u32) -> Vec<u32> {
    let mut budget = Budget { spent: 0, limit };
    let mut left = Vec::new();
    for cost in [1, 2] {
        budget.spent += cost;
        left.push(budget.limit - budget.spent.min(budget.limit) + cost);
        checkpoint!("spent");
    }
    left
}

#[tokio::test]
async fn a_field_serde_skips_is_its_default_after_a_checkpoint_on_every_path() {
    let out = Harness::new(spend).input(5).assert_exact().await;
    assert_eq!(
        out,
        [5, 2],
        "the limit is 0 (its default) after the first checkpoint"
    );
    // The uninterrupted run alone, with no crash: the same.
    let rt = Runtime::in_memory();
    let h = rt.start(spend, "spend", 5).await.unwrap();
    assert_eq!(h.result().await.unwrap(), [5, 2]);
}

// The same inside a loop over a borrow of the value (the loop's iterator
// borrows `plan` across the checkpoint, so it is decoded where the loop
// starts) and under a `match` on a borrow of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Plan {
    steps: Vec<u32>,
    #[serde(skip)]
    bonus: u32,
}

#[workflow]
async fn follow(ctx: &Ctx, bonus: u32) -> Vec<u32> {
    let plan = Plan {
        steps: vec![1, 2],
        bonus,
    };
    let mut out = vec![plan.bonus];
    for step in &plan.steps {
        out.push(step + plan.bonus);
        checkpoint!("step");
    }
    let choice = Some(plan);
    match &choice {
        Some(p) => {
            checkpoint!("chosen");
            out.push(p.bonus + 100);
        }
        None => out.push(0),
    }
    out
}

#[tokio::test]
async fn a_skipped_field_behind_a_borrow_around_a_checkpoint_is_its_default_on_every_path() {
    let out = Harness::new(follow).input(7).assert_exact().await;
    assert_eq!(out, [7, 1, 2, 100]);
}

// 6. A shared mutable handle hidden in a struct of the user's own: serde
// shows neither `Arc` nor `Mutex`, so nothing refuses it at save. The
// uninterrupted run used to return (4, 4) (both handles one vector), a
// resumed one (4, 1). After the checkpoint both paths hold the decoded
// state, where the two handles are two vectors: (4, 1) on every path.
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    log: Arc<Mutex<Vec<u32>>>,
}

#[workflow]
async fn journal(ctx: &Ctx, first: u32) -> (usize, usize) {
    let journal = Journal {
        log: Arc::new(Mutex::new(vec![first])),
    };
    let view = Journal {
        log: Arc::clone(&journal.log),
    };
    checkpoint!("shared");
    for i in 0..3 {
        journal.log.lock().unwrap().push(i);
    }
    let a = journal.log.lock().unwrap().len();
    let b = view.log.lock().unwrap().len();
    (a, b)
}

#[tokio::test]
async fn a_handle_hidden_in_a_struct_is_two_values_after_a_checkpoint_on_every_path() {
    let out = Harness::new(journal).input(7).assert_exact().await;
    assert_eq!(out, (4, 1));
}

// The handle pushed through inside a loop with a checkpoint, the other
// handle in a local declared before it, one of them borrowed by the loop.
#[derive(Debug, Serialize, Deserialize)]
struct Job {
    items: Vec<u32>,
    log: Arc<Mutex<Vec<u32>>>,
}

#[workflow]
async fn job(ctx: &Ctx, items: Vec<u32>) -> (Vec<u32>, Vec<u32>) {
    let job = Job {
        items,
        log: Arc::new(Mutex::new(Vec::new())),
    };
    let seen = Journal {
        log: Arc::clone(&job.log),
    };
    for item in &job.items {
        job.log.lock().unwrap().push(*item);
        seen.log.lock().unwrap().push(*item * 10);
        checkpoint!("logged");
    }
    let a = job.log.lock().unwrap().clone();
    let b = seen.log.lock().unwrap().clone();
    (a, b)
}

#[tokio::test]
async fn a_handle_hidden_in_a_struct_a_loop_borrows_resumes_exactly() {
    let out = Harness::new(job).input(vec![1, 2, 3]).assert_exact().await;
    assert_eq!(out, (vec![1, 2, 3], vec![10, 20, 30]));
}

// 7. A `Deserialize` that rebuilds state: `Tokens` writes its text only and
// counts the words again when read back, while the body counts uses in the
// same field. The uninterrupted run used to return 5 (2 words + 3 uses), a
// resumed one 2 + the uses after its checkpoint. Now both go on from the
// rebuilt value: 3 (2 words, then the use after the last checkpoint).
#[derive(Debug, Clone, PartialEq)]
struct Tokens {
    text: String,
    count: usize,
}

impl Serialize for Tokens {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.text.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Tokens {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let count = text.split_whitespace().count();
        Ok(Tokens { text, count })
    }
}

#[workflow]
async fn count_uses(ctx: &Ctx, text: String) -> usize {
    let mut tokens = Tokens {
        count: text.split_whitespace().count(),
        text,
    };
    for _ in 0..3 {
        tokens.count += 1;
        checkpoint!("used");
    }
    tokens.count += 1;
    tokens.count
}

#[tokio::test]
async fn a_deserialize_that_rebuilds_state_resumes_exactly() {
    let out = Harness::new(count_uses)
        .input("two words".into())
        .assert_exact()
        .await;
    assert_eq!(out, 3);
}

// A `serde_json::Value` (tool arguments, say) is written by postcard but can
// never be read back: a run that saved one could not resume (it parked on a
// decode error at every resume). Refused at save, in every build.
#[workflow]
async fn tool_call(ctx: &Ctx, name: String) -> String {
    let args = serde_json::json!({ "tool": name, "limit": 3 });
    checkpoint!("planned");
    args["tool"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_value_postcard_cannot_read_back_is_refused_at_save() {
    let msg = refused(
        Harness::new(tool_call).input("search".into()),
        "args",
        "planned",
    )
    .await;
    assert!(msg.contains("`Value`"), "names the type: {msg}");
    assert!(msg.contains("deserialize_any"), "{msg}");
    assert!(
        msg.contains("serde_json::to_string"),
        "says what to do: {msg}"
    );
}

// 3, the rest of it. A `#[transient]` whose state the macro cannot see: a
// tool-call budget counted in a `Cell` inside a method of the user's own
// type. The uninterrupted run used to keep its count across checkpoints
// while a resumed run built it again at 0 ([0, 1, 2, 3, 4, 5] uninterrupted,
// [0, 1, 0, 1, 2, 3] resumed after the second checkpoint). A transient keeps
// no state across a checkpoint now, on any path: every path builds it again
// once a checkpoint is stored.
struct CallBudget {
    spent: std::cell::Cell<u32>,
}

impl CallBudget {
    fn new() -> CallBudget {
        CallBudget {
            spent: std::cell::Cell::new(0),
        }
    }

    fn charge(&self) -> u32 {
        let spent = self.spent.get();
        self.spent.set(spent + 1);
        spent
    }
}

#[workflow]
async fn tool_budget(ctx: &Ctx, steps: u32) -> Vec<u32> {
    #[transient]
    let budget = CallBudget::new();
    let mut charged = Vec::new();
    for step in 0..steps {
        charged.push(budget.charge());
        fx(ctx).record(format!("plan:{step}"));
        checkpoint!("planned");
        charged.push(budget.charge());
        checkpoint!("called");
    }
    charged
}

#[tokio::test]
async fn a_stateful_transient_keeps_no_state_across_a_checkpoint_on_every_path() {
    let out = Harness::new(tool_budget).input(3).assert_exact().await;
    assert_eq!(out, vec![0, 0, 0, 0, 0, 0]);
}

// The same with the transient declared in the block the checkpoint is in
// (handed over by its split rather than built before a loop), and read both
// before and after it.
#[workflow]
async fn two_calls(ctx: &Ctx, first: u32) -> (u32, u32, u32) {
    let base = first * 10;
    #[transient]
    let budget = CallBudget::new();
    let a = base + budget.charge() + budget.charge();
    checkpoint!("first");
    let b = base + budget.charge();
    checkpoint!("second");
    (a, b, base + budget.charge())
}

#[tokio::test]
async fn a_stateful_transient_of_the_same_block_is_built_again_after_each_checkpoint() {
    let out = Harness::new(two_calls).input(4).assert_exact().await;
    assert_eq!(out, (41, 40, 40));
}

// A transient another transient's initialiser reads: a client whose
// request counter is shared by its clones (as HTTP clients share their
// pool), and the API wrapper built from a clone of it. The wrapper was built
// again after each checkpoint but the client was not (the wrapper reads
// it), so the count went on uninterrupted ([0, 1, 2, 3]) while a resumed run
// built both anew ([0, 1, 0, 1] resumed after the first checkpoint). Both
// are built again now, the client first.
#[derive(Clone)]
struct Client {
    sent: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Client {
    fn new() -> Client {
        Client {
            sent: Default::default(),
        }
    }

    fn sent(&self) -> u32 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }
}

struct Api {
    client: Client,
}

impl Api {
    fn new(client: &Client) -> Api {
        Api {
            client: client.clone(),
        }
    }

    fn call(&self) -> u32 {
        self.client
            .sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

#[workflow]
async fn wrapped_client(ctx: &Ctx, rounds: u32) -> Vec<u32> {
    #[transient]
    let client = Client::new();
    #[transient]
    let api = Api::new(&client);
    let mut seen = Vec::new();
    for round in 0..rounds {
        seen.push(api.call());
        seen.push(api.call());
        fx(ctx).record(format!("round:{round}"));
        checkpoint!("round");
    }
    seen
}

#[tokio::test]
async fn a_transient_another_transient_reads_is_built_again_with_it() {
    let out = Harness::new(wrapped_client).input(2).assert_exact().await;
    assert_eq!(out, vec![0, 1, 0, 1]);
}

// The same with a wrapper that borrows the client (`Api<'a>`): the old
// wrapper is dropped before the client is built again.
struct Counter {
    sent: std::sync::atomic::AtomicU32,
}

struct Wrapper<'a> {
    counter: &'a Counter,
}

impl<'a> Wrapper<'a> {
    fn new(counter: &'a Counter) -> Wrapper<'a> {
        Wrapper { counter }
    }

    fn call(&self) -> u32 {
        self.counter
            .sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

#[workflow]
async fn borrowing_wrapper(ctx: &Ctx, rounds: u32) -> Vec<u32> {
    #[transient]
    let counter = Counter {
        sent: std::sync::atomic::AtomicU32::new(0),
    };
    #[transient]
    let wrapper = Wrapper::new(&counter);
    let mut seen = Vec::new();
    for round in 0..rounds {
        seen.push(wrapper.call());
        seen.push(wrapper.call());
        fx(ctx).record(format!("round:{round}"));
        checkpoint!("round");
    }
    seen
}

#[tokio::test]
async fn a_transient_borrowing_another_is_dropped_before_both_are_built_again() {
    let out = Harness::new(borrowing_wrapper)
        .input(3)
        .assert_exact()
        .await;
    assert_eq!(out, vec![0, 1, 0, 1, 0, 1]);
}

// The same with both declared in the block the checkpoint is in, the
// client read directly after it too.
#[workflow]
async fn wrapped_client_here(ctx: &Ctx, base: u32) -> (u32, u32, u32) {
    #[transient]
    let client = Client::new();
    #[transient]
    let api = Api::new(&client);
    let a = base + api.call() + api.call();
    checkpoint!("first");
    let b = base + api.call() + client.sent();
    checkpoint!("second");
    (a, b, base + api.call())
}

#[tokio::test]
async fn a_transient_another_transient_reads_in_the_same_block_is_built_again_with_it() {
    let out = Harness::new(wrapped_client_here)
        .input(10)
        .assert_exact()
        .await;
    assert_eq!(out, (11, 11, 10));
}

// A loop writing through its items that changes an item after its last
// checkpoint in the iteration: here a field `#[serde(skip)]` drops. A
// resumed run writes the finished items back from the loop's log, decoded
// (the note back to 0), while the uninterrupted run used to keep them as
// the body left them ([(1, 11), (1, 12), (1, 13)] uninterrupted, [(1, 0),
// (1, 0), (1, 13)] resumed in the last iteration). Every path now goes on
// with each finished item decoded from the log once the next is taken (the
// last one when the loop ends).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Task {
    done: u32,
    #[serde(skip)]
    note: u32,
}

#[workflow]
async fn mark_tasks(ctx: &Ctx, n: u32) -> Vec<(u32, u32)> {
    let mut tasks: Vec<Task> = (0..n).map(|_| Task::default()).collect();
    for (i, task) in tasks.iter_mut().enumerate() {
        task.done += 1;
        fx(ctx).record(format!("mark:{i}"));
        checkpoint!("marked");
        task.note = 11 + i as u32;
    }
    tasks.iter().map(|t| (t.done, t.note)).collect()
}

#[tokio::test]
async fn items_written_after_their_last_checkpoint_are_the_decoded_items_on_every_path() {
    let out = Harness::new(mark_tasks).input(3).assert_exact().await;
    assert_eq!(out, vec![(1, 0), (1, 0), (1, 0)]);
}

// A `#[transient]` that borrows a saved local whose round trip drops state
// (a field `#[serde(skip)]`): the saved local used to be kept as it was
// after a checkpoint (the transient borrowed it), so the uninterrupted run
// scored with the boost ([6, 5, 5]) and a resumed one without it ([6, 5,
// 0]). The local is decoded after each checkpoint and the transient built
// again from it, on every path.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Keywords {
    words: Vec<String>,
    #[serde(skip)]
    boost: usize,
}

struct KeywordScorer<'a> {
    keywords: &'a Keywords,
    // Something to drop: the old scorer is dropped before the keywords it
    // borrows are replaced.
    seen: Vec<usize>,
}

impl KeywordScorer<'_> {
    fn score(&mut self, doc: &str) -> usize {
        let hits = self
            .keywords
            .words
            .iter()
            .filter(|w| doc.contains(w.as_str()))
            .count();
        self.seen.push(hits);
        hits + self.keywords.boost
    }
}

#[workflow]
async fn score_docs(ctx: &Ctx, docs: Vec<String>) -> Vec<usize> {
    let keywords = Keywords {
        words: vec!["rust".into()],
        boost: 5,
    };
    #[transient]
    let mut scorer = KeywordScorer {
        keywords: &keywords,
        seen: Vec::new(),
    };
    let mut out = Vec::new();
    for doc in &docs {
        out.push(scorer.score(doc));
        checkpoint!("scored");
    }
    out
}

#[tokio::test]
async fn a_saved_local_a_transient_borrows_is_decoded_and_the_transient_built_again() {
    let docs = vec!["rust".to_owned(), "go".to_owned(), "rust".to_owned()];
    let out = Harness::new(score_docs).input(docs).assert_exact().await;
    assert_eq!(out, vec![6, 0, 1]);
}
