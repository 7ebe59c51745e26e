//! The resume matrix: one workflow per control-flow shape of DESIGN.md's
//! "Resume semantics", each run uninterrupted and then stopped right after
//! every one of its checkpoints and resumed in a fresh runtime; the output
//! must always equal the uninterrupted run's (see `checkpoint_runtime::testing`).
#![allow(clippy::needless_return)]

use std::time::Duration;

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::{Harness, Report, SideEffects};
use serde::{Deserialize, Serialize};

/// Runs the harness (uninterrupted, then a crash after every checkpoint) and
/// returns the uninterrupted output and the number of checkpoints taken.
async fn check<I: IntoWorkflow>(
    wf: I,
    input: <I::Workflow as Workflow>::Input,
) -> (<I::Workflow as Workflow>::Output, u64) {
    check_with(Harness::new(wf).input(input)).await
}

async fn check_with<W: Workflow>(harness: Harness<W>) -> (W::Output, u64) {
    let report = run_harness(harness).await;
    let output = serde_json::from_value(report.output.clone()).expect("output decodes");
    (output, report.checkpoints)
}

async fn run_harness<W: Workflow>(harness: Harness<W>) -> Report {
    let report = harness.run().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report.crash_points.len() as u64 >= report.checkpoints,
        "a crash point per checkpoint: {report}"
    );
    report
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Task {
    id: u32,
    name: String,
}

fn tasks(n: u32) -> Vec<Task> {
    (1..=n)
        .map(|id| Task {
            id,
            name: format!("task-{id}"),
        })
        .collect()
}

/// Not serializable: may only be used where no checkpoint needs it.
struct Connection {
    base: u32,
}

impl Connection {
    fn open(base: u32) -> Self {
        Connection { base }
    }
    fn query(&self, x: u32) -> u32 {
        self.base + x
    }
}

// 1. Straight-line code, labelled and unlabelled checkpoints.
#[workflow]
async fn straight_line(ctx: &Ctx, n: u32) -> String {
    let a = n + 1;
    checkpoint!("first");
    let b = a * 2;
    checkpoint!();
    let c = format!("{a}-{b}");
    checkpoint!("third");
    c
}

#[tokio::test]
async fn w01_straight_line() {
    let (out, n) = check(straight_line, 4).await;
    assert_eq!(out, "5-10");
    assert_eq!(n, 3);
}

// 2. if / else with checkpoints in both branches.
#[workflow]
async fn if_else(ctx: &Ctx, n: i32) -> Vec<String> {
    let mut log = vec![format!("start {n}")];
    if n > 0 {
        log.push("positive".into());
        checkpoint!("positive");
        log.push(format!("still positive {n}"));
    } else {
        checkpoint!("not_positive");
        log.push("not positive".into());
    }
    log
}

#[tokio::test]
async fn w02_if_else() {
    assert_eq!(check(if_else, 3).await.0.len(), 3);
    assert_eq!(check(if_else, -3).await.0.len(), 2);
}

// 3. else-if chains; a branch without checkpoint.
#[workflow]
async fn else_if_chain(ctx: &Ctx, n: u32) -> String {
    let tag = "n";
    let out = if n == 0 {
        checkpoint!("zero");
        format!("{tag}=zero")
    } else if n < 10 {
        checkpoint!("small");
        format!("{tag}=small {n}")
    } else {
        format!("{tag}=big")
    };
    checkpoint!("after");
    out
}

#[tokio::test]
async fn w03_else_if_chain() {
    assert_eq!(check(else_if_chain, 0).await.0, "n=zero");
    assert_eq!(check(else_if_chain, 5).await.0, "n=small 5");
    assert_eq!(check(else_if_chain, 50).await.0, "n=big");
}

fn classify(n: u32) -> Option<u32> {
    (n % 2 == 0).then_some(n / 2)
}

// 4. match with guards and arm bindings restored from the checkpoint.
#[workflow]
async fn match_guards(ctx: &Ctx, n: u32) -> String {
    match classify(n) {
        Some(half) if half > 10 => {
            checkpoint!("big_half");
            format!("big {half}")
        }
        Some(half) => {
            let doubled = half * 4;
            checkpoint!("half");
            format!("half {half} {doubled}")
        }
        None => "odd".to_string(),
    }
}

#[tokio::test]
async fn w04_match_guards() {
    assert_eq!(check(match_guards, 40).await.0, "big 20");
    assert_eq!(check(match_guards, 4).await.0, "half 2 8");
    assert_eq!(check(match_guards, 3).await, ("odd".to_string(), 0));
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
enum Step {
    Plan(String),
    Call { tool: String, retries: u32 },
    Done,
}

// 5. match on a reference: bindings are references, re-derived on resume.
#[workflow]
async fn match_on_reference(ctx: &Ctx, steps: Vec<Step>) -> Vec<String> {
    let mut out = Vec::new();
    for step in &steps {
        match step {
            Step::Plan(p) => {
                checkpoint!("plan");
                out.push(format!("plan {p}"));
            }
            Step::Call { tool, retries } => {
                checkpoint!("call");
                out.push(format!("call {tool} x{retries}"));
            }
            Step::Done => break,
        }
    }
    out
}

#[tokio::test]
async fn w05_match_on_reference() {
    let steps = vec![
        Step::Plan("a".into()),
        Step::Call {
            tool: "search".into(),
            retries: 2,
        },
        Step::Done,
        Step::Plan("never".into()),
    ];
    let (out, n) = check(match_on_reference, steps).await;
    assert_eq!(out, vec!["plan a", "call search x2"]);
    assert_eq!(n, 2);
}

// 6. if let, with the binding used after the checkpoint.
#[workflow]
async fn if_let(ctx: &Ctx, v: Option<String>) -> String {
    if let Some(name) = v {
        checkpoint!("named");
        format!("hello {name}")
    } else {
        checkpoint!("anonymous");
        "hello".to_string()
    }
}

#[tokio::test]
async fn w06_if_let() {
    assert_eq!(check(if_let, Some("ada".into())).await.0, "hello ada");
    assert_eq!(check(if_let, None).await.0, "hello");
}

// 7. let-else.
#[workflow]
async fn let_else(ctx: &Ctx, v: Vec<u32>) -> u32 {
    checkpoint!("start");
    let Some(first) = v.first().copied() else {
        return 0;
    };
    checkpoint!("has_first");
    first * 10
}

#[tokio::test]
async fn w07_let_else() {
    assert_eq!(check(let_else, vec![4, 5]).await.0, 40);
    assert_eq!(check(let_else, vec![]).await.0, 0);
}

// 8. Locals declared in inner blocks, and a block's value.
#[workflow]
async fn inner_blocks(ctx: &Ctx, n: u32) -> u32 {
    let outer = n * 2;
    let inner_value = {
        let a = outer + 1;
        checkpoint!("in_block");
        let b = a * 3;
        {
            let c = b + 1;
            checkpoint!("deeper");
            c + outer
        }
    };
    inner_value
}

#[tokio::test]
async fn w08_inner_blocks() {
    assert_eq!(check(inner_blocks, 1).await.0, 12);
}

// 9. loop with break value; checkpoint resumes in the same iteration.
#[workflow]
async fn loop_break_value(ctx: &Ctx, limit: u32) -> (u32, Vec<u32>) {
    let mut seen = Vec::new();
    let mut i = 0;
    let found = loop {
        i += 1;
        checkpoint!("iteration");
        seen.push(i);
        if i * i > limit {
            break i;
        }
    };
    (found, seen)
}

#[tokio::test]
async fn w09_loop_break_value() {
    let ((found, seen), n) = check(loop_break_value, 20).await;
    assert_eq!(found, 5);
    assert_eq!(seen, vec![1, 2, 3, 4, 5]);
    assert_eq!(n, 5);
}

// 10. while.
#[workflow]
async fn while_counter(ctx: &Ctx, n: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < n {
        k += 1;
        checkpoint!("tick");
        out.push(k * k);
    }
    out
}

#[tokio::test]
async fn w10_while() {
    assert_eq!(check(while_counter, 4).await.0, vec![1, 4, 9, 16]);
}

// 10b. while with the checkpoint in a branch taken on some iterations only
// (the shape of the no-checkpoint benchmark): a resume continues the rest of
// that iteration, then the iterations that skip the branch.
#[workflow]
async fn while_sometimes(ctx: &Ctx, n: u64) -> (u64, Vec<u64>) {
    let mut acc = 1u64;
    let mut i = 0u64;
    let mut taken = Vec::new();
    while i < n {
        acc = acc.wrapping_mul(31).wrapping_add(i);
        if i % 3 == 1 {
            taken.push(i);
            checkpoint!("sometimes");
            acc += 7;
        }
        i += 1;
    }
    (acc, taken)
}

#[tokio::test]
async fn w10b_while_with_a_conditional_checkpoint() {
    let (mut acc, mut taken) = (1u64, Vec::new());
    for i in 0..8u64 {
        acc = acc.wrapping_mul(31).wrapping_add(i);
        if i % 3 == 1 {
            taken.push(i);
            acc += 7;
        }
    }
    let (out, checkpoints) = check(while_sometimes, 8).await;
    assert_eq!(out, (acc, taken));
    assert_eq!(checkpoints, 3);
}

// 11. while let over a stack that the loop pops.
#[workflow]
async fn while_let(ctx: &Ctx, mut stack: Vec<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    while let Some(top) = stack.pop() {
        checkpoint!("popped");
        out.push(top * 10);
        if top == 2 {
            stack.push(100);
        }
    }
    out
}

#[tokio::test]
async fn w11_while_let() {
    assert_eq!(
        check(while_let, vec![1, 2, 3]).await.0,
        vec![30, 20, 1000, 10]
    );
}

// 12. for over a range.
#[workflow]
async fn for_range(ctx: &Ctx, n: u64) -> u64 {
    let mut sum = 0;
    for i in 0..n {
        sum += i;
        checkpoint!("added");
    }
    sum
}

#[tokio::test]
async fn w12_for_range() {
    assert_eq!(check(for_range, 6).await, (15, 6));
}

// 13. for over &v: the reference binding is used after the checkpoint.
#[workflow]
async fn for_ref(ctx: &Ctx, items: Vec<Task>) -> Vec<String> {
    let mut done = Vec::new();
    for t in &items {
        checkpoint!("before_use");
        done.push(format!("{}:{}", t.id, t.name));
    }
    done.push(format!("{} items", items.len()));
    done
}

#[tokio::test]
async fn w13_for_ref() {
    let (out, n) = check(for_ref, tasks(3)).await;
    assert_eq!(out, vec!["1:task-1", "2:task-2", "3:task-3", "3 items"]);
    assert_eq!(n, 3);
}

// 14. for (i, x) in v.iter().enumerate().
#[workflow]
async fn for_enumerate(ctx: &Ctx, items: Vec<Task>) -> Vec<String> {
    let mut out = Vec::new();
    for (i, t) in items.iter().enumerate() {
        let label = format!("#{i}");
        checkpoint!("enumerated");
        out.push(format!("{label} {}", t.name));
    }
    out
}

#[tokio::test]
async fn w14_for_enumerate() {
    assert_eq!(check(for_enumerate, tasks(3)).await.0[2], "#2 task-3");
}

// 15. for by value over an owned Vec.
#[workflow]
async fn for_owned(ctx: &Ctx, items: Vec<Task>) -> Vec<String> {
    let mut out = Vec::new();
    for t in items {
        checkpoint!("owned");
        out.push(t.name);
    }
    out
}

#[tokio::test]
async fn w15_for_owned() {
    assert_eq!(check(for_owned, tasks(4)).await.0.len(), 4);
}

// 16. Labelled break / continue across three nested loops.
#[workflow]
async fn nested_labels(ctx: &Ctx, n: u32) -> Vec<String> {
    let mut out = Vec::new();
    'outer: for i in 0..n {
        'middle: for j in 0..n {
            let mut k = 0;
            'inner: loop {
                k += 1;
                checkpoint!("inner");
                if k > 2 {
                    break 'inner;
                }
                if j == 1 {
                    continue 'middle;
                }
                if i == 2 {
                    break 'outer;
                }
                if k == 2 && j == 2 {
                    continue 'outer;
                }
                out.push(format!("{i}{j}{k}"));
            }
        }
    }
    out
}

#[tokio::test]
async fn w16_nested_labels() {
    let (out, n) = check(nested_labels, 4).await;
    assert_eq!(out, vec!["001", "002", "021", "101", "102", "121"]);
    assert!(n > 10);
}

fn parse_number(s: &str) -> Result<u32, String> {
    s.parse().map_err(|_| format!("not a number: {s}"))
}

// 17. `?` after checkpoints.
#[workflow]
async fn question_mark(ctx: &Ctx, inputs: Vec<String>) -> Result<u32, String> {
    let mut total = 0;
    for s in &inputs {
        checkpoint!("parsing");
        total += parse_number(s)?;
    }
    Ok(total)
}

#[tokio::test]
async fn w17_question_mark() {
    assert_eq!(
        check(question_mark, vec!["1".into(), "2".into()]).await.0,
        Ok(3)
    );
    assert_eq!(
        check(question_mark, vec!["1".into(), "x".into(), "3".into()])
            .await
            .0,
        Err("not a number: x".to_string())
    );
}

/// The run of a workflow returning `Err` is `Failed` with the error as
/// text, whatever the output type is spelled as (an alias too); an output
/// that merely serializes like a `Result` is not an error.
type Outcome<T> = Result<T, Rejection>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Rejection {
    code: u32,
}

#[workflow]
async fn aliased_result(ctx: &Ctx, n: u32) -> Outcome<u32> {
    checkpoint!("checked");
    if n > 10 {
        return Err(Rejection { code: n });
    }
    Ok(n)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum LooksLikeResult {
    Ok(u32),
    Err(String),
}

#[workflow]
async fn result_lookalike(ctx: &Ctx) -> LooksLikeResult {
    checkpoint!("made");
    LooksLikeResult::Err("a value, not a failure".into())
}

#[tokio::test]
async fn w17b_result_outputs_are_decided_by_type() {
    let rt = Runtime::in_memory();
    let h = rt.start(aliased_result, "bad", 12).await.unwrap();
    assert_eq!(h.result().await.unwrap(), Err(Rejection { code: 12 }));
    assert_eq!(
        h.status().await.unwrap(),
        Status::Failed {
            error: r#"{"code":12}"#.into()
        }
    );
    let h = rt.start(aliased_result, "good", 3).await.unwrap();
    assert_eq!(h.result().await.unwrap(), Ok(3));
    assert_eq!(h.status().await.unwrap(), Status::Completed);
    let h = rt.start(result_lookalike, "lookalike", ()).await.unwrap();
    assert_eq!(
        h.result().await.unwrap(),
        LooksLikeResult::Err("a value, not a failure".into())
    );
    assert_eq!(h.status().await.unwrap(), Status::Completed);
}

// 18. Early return from inside a loop.
#[workflow]
async fn early_return(ctx: &Ctx, items: Vec<u32>, needle: u32) -> Option<usize> {
    for (i, x) in items.iter().enumerate() {
        checkpoint!("looking");
        if *x == needle {
            return Some(i);
        }
    }
    None
}

#[tokio::test]
async fn w18_early_return() {
    assert_eq!(check(early_return, (vec![5, 6, 7], 6)).await.0, Some(1));
    assert_eq!(check(early_return, (vec![5, 6, 7], 9)).await.0, None);
}

// 19. Shadowing, including with a different type.
#[workflow]
async fn shadowing(ctx: &Ctx, n: u32) -> String {
    let x = n;
    checkpoint!("number");
    let x = format!("<{x}>");
    checkpoint!("string");
    let x = x.len();
    checkpoint!("length");
    format!("{x}")
}

#[tokio::test]
async fn w19_shadowing() {
    assert_eq!(check(shadowing, 12345).await.0, "7");
}

// 20. #[transient]: re-created on resume, never saved.
#[workflow]
async fn transient_local(ctx: &Ctx, base: u32) -> u32 {
    #[transient]
    let conn = Connection::open(base);
    let mut acc = 0;
    for i in 0..3 {
        acc += conn.query(i);
        checkpoint!("queried");
    }
    acc
}

#[tokio::test]
async fn w20_transient() {
    assert_eq!(check(transient_local, 10).await.0, 33);
}

// 21. A non-serializable local that is dead at every checkpoint compiles.
#[workflow]
async fn dead_non_serializable(ctx: &Ctx, base: u32) -> u32 {
    let conn = Connection::open(base);
    let answer = conn.query(2);
    checkpoint!("answered");
    answer * 2
}

#[tokio::test]
async fn w21_dead_non_serializable() {
    assert_eq!(check(dead_non_serializable, 1).await.0, 6);
}

// 22. Uses inside format!/vec!/other macros keep locals live.
#[workflow]
async fn macro_uses(ctx: &Ctx, n: u32) -> (String, Vec<u32>) {
    let greeting = "hi";
    let width = 5;
    let count = n;
    checkpoint!("macros");
    let s = format!("{greeting:>width$}!");
    (s, vec![count; 2])
}

#[tokio::test]
async fn w22_macro_uses() {
    assert_eq!(
        check(macro_uses, 3).await.0,
        ("   hi!".to_string(), vec![3, 3])
    );
}

// 23. let x = if ... { checkpoint; .. } else { .. }.
#[workflow]
async fn let_if_value(ctx: &Ctx, n: u32) -> u32 {
    let x = if n > 2 {
        let y = n * 10;
        checkpoint!("computed");
        y + 1
    } else {
        0
    };
    let z = match x {
        0 => 0,
        other => {
            checkpoint!("matched");
            other * 2
        }
    };
    z
}

#[tokio::test]
async fn w23_let_if_value() {
    assert_eq!(check(let_if_value, 5).await.0, 102);
}

// 24. Checkpoint in tail position.
#[workflow]
async fn tail_position(ctx: &Ctx, n: u32) -> u32 {
    let a = n + 1;
    if a > 3 {
        checkpoint!("tail");
        a
    } else {
        checkpoint!("tail_else");
        0
    }
}

#[tokio::test]
async fn w24_tail_position() {
    assert_eq!(check(tail_position, 5).await.0, 6);
}

// 25. Mutable loop items and arm bindings changed before the checkpoint.
#[workflow]
async fn mutable_bindings(ctx: &Ctx, xs: Vec<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    for mut x in xs.clone() {
        x += 100;
        checkpoint!("item");
        out.push(x);
    }
    let first = xs.first().copied();
    if let Some(mut f) = first {
        f *= 3;
        checkpoint!("first");
        out.push(f);
    }
    out
}

#[tokio::test]
async fn w25_mutable_bindings() {
    assert_eq!(
        check(mutable_bindings, vec![1, 2]).await.0,
        vec![101, 102, 3]
    );
}

// 26. An agent loop: plan, call tools with retry counters, observe.
#[workflow]
async fn agent(ctx: &Ctx, goal: String, steps: Vec<Step>) -> Result<Vec<String>, String> {
    let mut notes = vec![format!("goal: {goal}")];
    let mut retries_total = 0u32;
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Plan(p) => {
                notes.push(format!("plan {p}"));
                checkpoint!("planned");
            }
            Step::Call { tool, retries } => {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    retries_total += 1;
                    checkpoint!("attempt");
                    if attempt > *retries {
                        break;
                    }
                }
                notes.push(format!("{i}: {tool} after {attempt} attempts"));
            }
            Step::Done => break,
        }
    }
    notes.push(format!("retries: {retries_total}"));
    Ok(notes)
}

#[tokio::test]
async fn w26_agent() {
    let steps = vec![
        Step::Plan("look".into()),
        Step::Call {
            tool: "search".into(),
            retries: 2,
        },
        Step::Done,
    ];
    let (out, n) = check(agent, ("answer".into(), steps)).await;
    assert_eq!(out.unwrap().last().unwrap(), "retries: 3");
    assert_eq!(n, 4);
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Approval {
    approved: bool,
    reason: String,
}

// 27. Waiting for a signal (human approval).
#[workflow]
async fn approval(ctx: &Ctx, vendor: String) -> String {
    let review = format!("reviewed {vendor}");
    checkpoint!("reviewed");
    let approval: Approval = ctx.wait_for("finance_approval").await;
    if !approval.approved {
        return format!("{review}: rejected ({})", approval.reason);
    }
    format!("{review}: approved ({})", approval.reason)
}

#[tokio::test]
async fn w27_wait_for_signal() {
    let harness = Harness::new(approval).input("acme".to_string()).signal(
        "finance_approval",
        &Approval {
            approved: true,
            reason: "budget ok".into(),
        },
    );
    let (out, n) = check_with(harness).await;
    assert_eq!(out, "reviewed acme: approved (budget ok)");
    assert_eq!(n, 2);
}

// 28. Waiting with a timeout that passes.
#[workflow]
async fn wait_timeout(ctx: &Ctx, n: u32) -> String {
    let before = n * 2;
    let answer: Option<u32> = ctx
        .wait_for_timeout("answer", Duration::from_millis(20))
        .await;
    format!("{before} {answer:?}")
}

#[tokio::test]
async fn w28_wait_for_timeout() {
    assert_eq!(check(wait_timeout, 4).await.0, "8 None");
}

// 29. Durable sleep inside a loop.
#[workflow]
async fn sleeper(ctx: &Ctx, rounds: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for r in 0..rounds {
        ctx.sleep(Duration::from_millis(5)).await;
        out.push(r);
    }
    out
}

#[tokio::test]
async fn w29_sleep() {
    assert_eq!(check(sleeper, 3).await, (vec![0, 1, 2], 3));
}

// 30. A larger state (~1 KB) carried through many checkpoints.
#[workflow]
async fn big_state(ctx: &Ctx, n: u32) -> usize {
    let mut blob: Vec<u8> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    for i in 0..n {
        blob.extend(std::iter::repeat_n(i as u8, 64));
        words.push(format!("word-{i}"));
        checkpoint!("grow");
    }
    blob.len() + words.len()
}

#[tokio::test]
async fn w30_big_state() {
    assert_eq!(check(big_state, 16).await, (16 * 64 + 16, 16));
}

// 31. Several parameters; side effects recorded and checked.
#[workflow]
async fn side_effects(ctx: &Ctx, customer: String, amount: u32) -> String {
    checkpoint!("validated");
    ctx.resource::<SideEffects>()
        .record(format!("charge {customer} {amount}"));
    checkpoint!("charged");
    format!("{customer} paid {amount}")
}

#[tokio::test]
async fn w31_side_effects() {
    let report = run_harness(Harness::new(side_effects).input(("bob".to_string(), 30))).await;
    assert_eq!(report.output, serde_json::json!("bob paid 30"));
    assert_eq!(report.effects, vec!["charge bob 30".to_string()]);
    // Crashing right after a stored checkpoint never runs the charge twice.
    assert!(report.duplicated_effects().is_empty(), "{report}");
    // Crashing just before "charged" is stored runs the charge again on resume
    // (at-least-once between checkpoints), and the report says so.
    let report = run_harness(
        Harness::new(side_effects)
            .input(("bob".to_string(), 30))
            .also_crash_before_checkpoints(),
    )
    .await;
    let dup = report.duplicated_effects();
    assert!(
        dup.iter()
            .any(|(p, e)| p.label.as_deref() == Some("charged")
                && e.effect == "charge bob 30"
                && e.got == 2),
        "{report}"
    );
}

// 32. No input, unit output, named workflow.
#[workflow(name = "nothing-much")]
async fn no_input(ctx: &Ctx) {
    let x = 1;
    checkpoint!("one");
    assert_eq!(x, 1);
}

#[tokio::test]
async fn w32_no_input() {
    assert_eq!(IntoWorkflow::name(no_input), "nothing-much");
    check(no_input, ()).await;
}

// 33. A suspension call followed by a method chain; items declared in the body.
#[workflow]
async fn postfix_and_items(ctx: &Ctx, n: u32) -> u32 {
    fn double(x: u32) -> u32 {
        x * 2
    }
    const BONUS: u32 = 7;
    let base = double(n);
    checkpoint!("doubled");
    let extra = ctx
        .wait_for_timeout::<u32>("extra", Duration::from_millis(10))
        .await
        .unwrap_or(BONUS);
    double(base) + extra
}

#[tokio::test]
async fn w33_postfix_and_items() {
    assert_eq!(check(postfix_and_items, 3).await.0, 19);
    let harness = Harness::new(postfix_and_items)
        .input(3)
        .signal("extra", &100u32);
    assert_eq!(check_with(harness).await.0, 112);
}

// 34. The DESIGN.md example, verbatim in shape.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Vendor {
    name: String,
    risky: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct ReviewError(String);

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
enum Decision {
    Rejected(String),
    Approved { security: String, done: Vec<String> },
}

async fn security_review(vendor: &Vendor) -> Result<String, ReviewError> {
    if vendor.risky {
        Err(ReviewError(format!("{} is risky", vendor.name)))
    } else {
        Ok(format!("{} passed", vendor.name))
    }
}

async fn notify_finance(_vendor: &Vendor) {}

fn onboarding_tasks(vendor: &Vendor) -> Vec<String> {
    vec![
        format!("account:{}", vendor.name),
        format!("badge:{}", vendor.name),
    ]
}

async fn run_task(task: &str) -> Result<String, ReviewError> {
    Ok(format!("{task} done"))
}

#[workflow]
async fn vendor_approval(ctx: &Ctx, vendor: Vendor) -> Result<Decision, ReviewError> {
    let security = security_review(&vendor).await?;
    checkpoint!("security_reviewed");
    notify_finance(&vendor).await;
    let approval: Approval = ctx.wait_for("finance_approval").await;
    if !approval.approved {
        return Ok(Decision::Rejected(approval.reason));
    }
    let mut done = Vec::new();
    for task in onboarding_tasks(&vendor) {
        done.push(run_task(&task).await?);
        checkpoint!("task_done");
    }
    Ok(Decision::Approved { security, done })
}

#[tokio::test]
async fn w34_design_example() {
    let vendor = Vendor {
        name: "acme".into(),
        risky: false,
    };
    let ok = Approval {
        approved: true,
        reason: "fine".into(),
    };
    let harness = Harness::new(vendor_approval)
        .input(vendor.clone())
        .signal("finance_approval", &ok);
    let (out, n) = check_with(harness).await;
    assert_eq!(
        out,
        Ok(Decision::Approved {
            security: "acme passed".into(),
            done: vec!["account:acme done".into(), "badge:acme done".into()],
        })
    );
    assert_eq!(n, 4);
    let no = Approval {
        approved: false,
        reason: "budget".into(),
    };
    let harness = Harness::new(vendor_approval)
        .input(vendor)
        .signal("finance_approval", &no);
    assert_eq!(
        check_with(harness).await.0,
        Ok(Decision::Rejected("budget".into()))
    );
    let risky = Vendor {
        name: "shady".into(),
        risky: true,
    };
    let report = Harness::new(vendor_approval)
        .input(risky)
        .run()
        .await
        .expect("harness");
    assert_eq!(report.checkpoints, 0);
    assert_eq!(report.output, serde_json::json!({"Err": "shady is risky"}));
}

async fn fetch(n: u32) -> Result<String, String> {
    if n % 2 == 0 {
        Ok(format!("item-{n}"))
    } else {
        Err(format!("odd-{n}"))
    }
}

// 35. Branch bindings moved before a checkpoint in their branch: only what
// is read after the checkpoint is saved.
#[workflow]
async fn moved_bindings(ctx: &Ctx, ns: Vec<u32>) -> Vec<String> {
    let mut seen = Vec::new();
    for n in ns {
        match fetch(n).await {
            Ok(item) => {
                seen.push(item);
                checkpoint!("pushed");
            }
            Err(e) => seen.push(e),
        }
        if let Ok(again) = fetch(n + 2).await {
            seen.push(again);
            checkpoint!("pushed_again");
        }
    }
    let mut queue = vec!["a".to_string(), "b".to_string()];
    while let Some(x) = queue.pop() {
        seen.push(x);
        checkpoint!("popped");
    }
    seen
}

#[tokio::test]
async fn w35_moved_bindings() {
    let (out, n) = check(moved_bindings, vec![2, 3]).await;
    assert_eq!(out, vec!["item-2", "item-4", "odd-3", "b", "a"]);
    assert_eq!(n, 4);
}
