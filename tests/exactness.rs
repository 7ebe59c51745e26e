//! Issue 9's shapes: loops whose resume used to compute a different result
//! than the uninterrupted run, and idiomatic shapes the transform used to
//! reject. Each workflow is run uninterrupted, then crashed after every
//! checkpoint and resumed (`checkpoint_runtime::testing`); the output and the
//! side effects must equal the uninterrupted run's.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::{Harness, SideEffects};

fn fx(ctx: &Ctx) -> &SideEffects {
    ctx.resource::<SideEffects>()
}

// 1. Iterating a HashMap / HashSet: the rebuilt map iterates in another
// order, so resuming by position would take some keys twice and others never.
#[workflow]
async fn invoice_totals(ctx: &Ctx, prices: HashMap<String, u64>) -> Vec<String> {
    let mut seen = Vec::new();
    for (item, price) in &prices {
        fx(ctx).record(format!("bill:{item}"));
        seen.push(format!("{item}={price}"));
        checkpoint!("billed");
    }
    seen
}

#[tokio::test]
async fn hash_map_loop_takes_every_key_once() {
    let prices: HashMap<String, u64> = (0..12).map(|i| (format!("sku-{i}"), i * 10)).collect();
    let out = Harness::new(invoice_totals)
        .input(prices.clone())
        .assert_exact()
        .await;
    let mut keys: Vec<_> = out
        .iter()
        .map(|s| s.split('=').next().unwrap().to_owned())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 12, "{out:?}");
}

#[workflow]
async fn notify_subscribers(ctx: &Ctx, users: HashSet<String>) -> (u32, Vec<String>) {
    let mut sent = 0;
    let mut order = Vec::new();
    for (i, user) in users.iter().enumerate() {
        fx(ctx).record(format!("mail:{user}"));
        order.push(format!("{i}:{user}"));
        sent += 1;
        checkpoint!("mailed");
    }
    (sent, order)
}

#[tokio::test]
async fn hash_set_loop_with_enumerate_takes_every_item_once() {
    let users: HashSet<String> = (0..9).map(|i| format!("user{i}")).collect();
    let (sent, order) = Harness::new(notify_subscribers)
        .input(users)
        .assert_exact()
        .await;
    assert_eq!(sent, 9);
    assert_eq!(order.len(), 9);
}

#[workflow]
async fn drain_queue_map(ctx: &Ctx, mut pending: HashMap<u32, String>) -> BTreeMap<u32, String> {
    let mut done = BTreeMap::new();
    let ids: Vec<u32> = pending.keys().copied().collect();
    for id in ids {
        let job = pending.remove(&id).unwrap_or_default();
        fx(ctx).record(format!("run:{id}"));
        done.insert(id, job.to_uppercase());
        checkpoint!("ran");
    }
    done
}

#[tokio::test]
async fn keys_collected_from_a_hash_map_keep_their_order() {
    let pending: HashMap<u32, String> = (0..10).map(|i| (i, format!("job{i}"))).collect();
    let done = Harness::new(drain_queue_map)
        .input(pending)
        .assert_exact()
        .await;
    assert_eq!(done.len(), 10);
}

// 2. Writes made through `iter_mut()` before a checkpoint survive it.
#[workflow]
async fn bump_all(ctx: &Ctx, mut v: Vec<u32>) -> Vec<u32> {
    for x in v.iter_mut() {
        *x += 100;
        checkpoint!("bumped");
    }
    v
}

#[tokio::test]
async fn iter_mut_writes_survive_a_resume() {
    let out = Harness::new(bump_all)
        .input(vec![1, 2, 3])
        .assert_exact()
        .await;
    assert_eq!(out, vec![101, 102, 103]);
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
struct Ticket {
    id: u32,
    status: String,
    notes: Vec<String>,
}

#[workflow]
async fn triage(ctx: &Ctx, mut tickets: Vec<Ticket>) -> Vec<Ticket> {
    for (i, t) in tickets.iter_mut().enumerate() {
        t.notes.push(format!("seen as #{i}"));
        checkpoint!("seen");
        fx(ctx).record(format!("triage:{}", t.id));
        t.status = if t.id % 2 == 0 {
            "urgent".into()
        } else {
            "later".into()
        };
        checkpoint!("triaged");
    }
    tickets
}

#[tokio::test]
async fn iter_mut_enumerate_keeps_writes_before_and_after_checkpoints() {
    let tickets: Vec<Ticket> = (1..=4)
        .map(|id| Ticket {
            id,
            status: "new".into(),
            notes: vec![],
        })
        .collect();
    let out = Harness::new(triage).input(tickets).assert_exact().await;
    assert_eq!(out[1].status, "urgent");
    assert_eq!(out[2].notes, vec!["seen as #2".to_owned()]);
}

#[workflow]
async fn scores(ctx: &Ctx, mut by_team: BTreeMap<String, u32>) -> BTreeMap<String, u32> {
    for score in by_team.values_mut() {
        *score *= 2;
        checkpoint!("doubled");
        *score += 1;
    }
    by_team
}

#[tokio::test]
async fn values_mut_writes_survive_a_resume() {
    let teams: BTreeMap<String, u32> = [("a".to_owned(), 1), ("b".to_owned(), 2)].into();
    let out = Harness::new(scores).input(teams).assert_exact().await;
    assert_eq!(out["a"], 3);
    assert_eq!(out["b"], 5);
}

// 3. An iterable whose inputs the body changes keeps its value at loop entry.
#[workflow]
async fn bfs(ctx: &Ctx, start: u32) -> Vec<u32> {
    let mut q = VecDeque::from([start]);
    let mut order = Vec::new();
    let mut level = 0;
    while !q.is_empty() && level < 4 {
        for _ in 0..q.len() {
            let node = q.pop_front().unwrap_or_default();
            order.push(node);
            q.push_back(node * 2);
            q.push_back(node * 2 + 1);
            checkpoint!("visited");
        }
        level += 1;
    }
    order
}

#[tokio::test]
async fn range_over_a_changing_length_keeps_its_bounds() {
    let out = Harness::new(bfs).input(1).assert_exact().await;
    assert_eq!(out, (1..16).collect::<Vec<_>>());
}

#[workflow]
async fn pop_front_batch(ctx: &Ctx, mut q: Vec<String>) -> (Vec<String>, Vec<String>) {
    let mut handled = Vec::new();
    for _ in 0..q.len() {
        let job = q.remove(0);
        fx(ctx).record(format!("job:{job}"));
        handled.push(job);
        checkpoint!("popped");
    }
    (handled, q)
}

#[tokio::test]
async fn range_over_a_queue_the_body_pops() {
    let q: Vec<String> = (0..5).map(|i| format!("j{i}")).collect();
    let (handled, rest) = Harness::new(pop_front_batch)
        .input(q.clone())
        .assert_exact()
        .await;
    assert_eq!(handled, q);
    assert!(rest.is_empty());
}

// Where only the run can tell: a helper whose order the macro cannot see
// (here it rotates its list on every call, as a `HashSet` built anew would
// reorder it). The resumed loop stands at another item than it left, so the
// resume is refused before the body runs, naming the loop.
static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn pending_jobs() -> Vec<String> {
    let mut jobs: Vec<String> = (0..6).map(|i| format!("job-{i}")).collect();
    let turn = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let len = jobs.len();
    jobs.rotate_left(turn % len);
    jobs
}

#[workflow]
async fn run_pending(ctx: &Ctx, batch: u32) -> Vec<String> {
    let mut done = Vec::new();
    for job in pending_jobs() {
        fx(ctx).record(format!("run:{job}:{batch}"));
        done.push(job);
        checkpoint!("ran");
    }
    done
}

#[tokio::test]
async fn a_loop_that_resumes_at_another_item_is_refused_naming_it() {
    let err = Harness::new(run_pending)
        .input(1)
        .run()
        .await
        .expect_err("a resume at another item must be refused");
    let msg = err.to_string();
    assert!(msg.contains("resumed at another item"), "{msg}");
    assert!(msg.contains("for job in pending_jobs()"), "{msg}");
    assert!(msg.contains("ran"), "the site is named: {msg}");
}
