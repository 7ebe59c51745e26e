//! Issue 9's idiomatic shapes that the transform used to reject: explicit
//! state machines, `let x;` assigned in branches, borrowed scrutinees with a
//! checkpoint in an arm, suspension calls as scrutinees, transient closures.
//! Each runs uninterrupted, then crashed after every checkpoint and resumed;
//! output and effects must equal the uninterrupted run's.

// `single_match`: shape 11 as the outside suite wrote it. `unused_variables`:
// shape 10's arm bindings, which the macro's re-match after each checkpoint
// leaves used only before it (a known wart: the lint names the user's
// binding).
#![allow(unused_variables, clippy::single_match)]

use std::collections::BTreeMap;
use std::time::Duration;

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::testing::{Harness, SideEffects};
use serde::{Deserialize, Serialize};

fn fx(ctx: &Ctx) -> &SideEffects {
    ctx.resource::<SideEffects>()
}

// 4a. An agent as an explicit state machine: `state = match state { .. }`
// with a checkpoint inside an arm whose value is the next state.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
enum AgentState {
    Plan {
        goal: String,
    },
    Act {
        steps: Vec<String>,
        done: Vec<String>,
    },
    Reflect {
        done: Vec<String>,
        attempts: u32,
    },
    Done(String),
}

#[workflow]
async fn agent(ctx: &Ctx, goal: String) -> String {
    let mut state = AgentState::Plan { goal };
    let mut turns = 0u32;
    loop {
        turns += 1;
        state = match state {
            AgentState::Plan { goal } => {
                fx(ctx).record(format!("plan:{goal}"));
                let steps: Vec<String> = goal.split(' ').map(str::to_owned).collect();
                checkpoint!("planned");
                AgentState::Act {
                    steps,
                    done: Vec::new(),
                }
            }
            AgentState::Act {
                mut steps,
                mut done,
            } => {
                if let Some(step) = steps.pop() {
                    fx(ctx).record(format!("tool:{step}"));
                    done.push(step.to_uppercase());
                    checkpoint!("acted");
                    AgentState::Act { steps, done }
                } else {
                    AgentState::Reflect { done, attempts: 0 }
                }
            }
            AgentState::Reflect { done, attempts } if attempts < 2 => {
                checkpoint!("reflected");
                AgentState::Reflect {
                    done,
                    attempts: attempts + 1,
                }
            }
            AgentState::Reflect { done, .. } => AgentState::Done(done.join("+")),
            AgentState::Done(answer) => break format!("{answer} in {turns} turns"),
        };
    }
}

#[tokio::test]
async fn state_machine_assigned_from_a_match_with_checkpoints_in_arms() {
    let out = Harness::new(agent)
        .input("find book flight".into())
        .assert_exact()
        .await;
    assert_eq!(out, "FLIGHT+BOOK+FIND in 9 turns");
}

// 4b. `let next = match state { .. }; state = next;` with arms binding
// non-`Copy` payloads by value.
#[derive(Serialize, Deserialize, Clone, Debug)]
enum Order {
    New(Vec<String>),
    Paid { items: Vec<String>, amount: u64 },
    Shipped(String),
}

#[workflow]
async fn order_saga(ctx: &Ctx, items: Vec<String>) -> String {
    let mut state = Order::New(items);
    loop {
        let next = match state {
            Order::New(items) => {
                let amount = items.len() as u64 * 100;
                fx(ctx).record(format!("charge:{amount}"));
                checkpoint!("charged");
                Order::Paid { items, amount }
            }
            Order::Paid { items, amount } => {
                fx(ctx).record(format!("ship:{}", items.len()));
                checkpoint!("shipped");
                Order::Shipped(format!("{} items for {amount}", items.len()))
            }
            Order::Shipped(note) => return note,
        };
        state = next;
    }
}

#[tokio::test]
async fn state_machine_through_a_next_local() {
    let out = Harness::new(order_saga)
        .input(vec!["a".into(), "b".into()])
        .assert_exact()
        .await;
    assert_eq!(out, "2 items for 200");
}

// 5. `let outcome;` assigned in branches, one of them with a checkpoint.
#[workflow]
async fn settle(ctx: &Ctx, paid: bool) -> String {
    let outcome;
    let fee: u32;
    if paid {
        fx(ctx).record("capture");
        checkpoint!("paid");
        outcome = "paid".to_owned();
        fee = 3;
    } else {
        outcome = "cancelled".to_owned();
        fee = 0;
    }
    checkpoint!("settled");
    format!("{outcome} fee={fee}")
}

#[tokio::test]
async fn deferred_initialisation_in_branches() {
    assert_eq!(
        Harness::new(settle).input(true).assert_exact().await,
        "paid fee=3"
    );
    assert_eq!(
        Harness::new(settle).input(false).assert_exact().await,
        "cancelled fee=0"
    );
}

// 5b. A deferred local shadowed by a later `let` of its own name in the
// same block (`let d = d + 3;`): the hoisted one ends there, so the sites
// after it save only the new one (the macro used to refuse this as "an
// inner `d` hides it"; found by the program fuzzer).
#[workflow]
async fn shadowed_deferred(ctx: &Ctx, paid: bool) -> u64 {
    let fee: u64;
    if paid {
        fee = 3;
        checkpoint!("paid");
    } else {
        fee = 0;
        checkpoint!("waived");
    }
    let fee = fee.wrapping_add(10);
    fx(ctx).record(format!("fee:{fee}"));
    checkpoint!("charged");
    fee * 2
}

#[tokio::test]
async fn a_deferred_local_shadowed_in_its_block() {
    assert_eq!(
        Harness::new(shadowed_deferred)
            .input(true)
            .assert_exact()
            .await,
        26
    );
    assert_eq!(
        Harness::new(shadowed_deferred)
            .input(false)
            .assert_exact()
            .await,
        20
    );
}

// 6. `match &reply` / `if let Some(r) = &reply` with a checkpoint in an arm,
// inside a loop, and `reply` moved afterwards.
#[workflow]
async fn summarise(ctx: &Ctx, replies: Vec<String>) -> (usize, Vec<String>) {
    let mut total = 0;
    let mut kept = Vec::new();
    for i in 0..replies.len() {
        let reply = replies[i].clone();
        match &reply {
            r if r.is_empty() => {}
            r => {
                checkpoint!("counted");
                total += r.len();
            }
        }
        kept.push(reply);
    }
    (total, kept)
}

#[tokio::test]
async fn match_on_a_borrow_then_move() {
    let (total, kept) = Harness::new(summarise)
        .input(vec!["ab".into(), "".into(), "cde".into()])
        .assert_exact()
        .await;
    assert_eq!(total, 5);
    assert_eq!(kept.len(), 3);
}

#[workflow]
async fn maybe_tool(ctx: &Ctx, calls: Vec<Option<String>>) -> Vec<String> {
    let mut log = Vec::new();
    for call in calls {
        let reply = call.map(|c| format!("result of {c}"));
        if let Some(r) = &reply {
            fx(ctx).record(format!("used:{r}"));
            checkpoint!("tool_used");
            log.push(r.len().to_string());
        }
        log.push(reply.unwrap_or_default());
    }
    log
}

#[tokio::test]
async fn if_let_on_a_borrow_then_move() {
    let calls = vec![Some("a".into()), None, Some("bb".into())];
    let out = Harness::new(maybe_tool).input(calls).assert_exact().await;
    assert_eq!(out, vec!["11", "result of a", "", "12", "result of bb"]);
}

// 7. Suspension calls as scrutinees.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct Decision {
    approved: bool,
    by: String,
}

#[workflow]
async fn approval(ctx: &Ctx, amount: u64) -> String {
    fx(ctx).record(format!("request:{amount}"));
    let verdict = match ctx
        .wait_for_timeout::<Decision>("decision", Duration::from_secs(30))
        .await
    {
        Some(d) if d.approved => format!("approved by {}", d.by),
        Some(d) => format!("rejected by {}", d.by),
        None => "timed out".to_owned(),
    };
    checkpoint!("decided");
    if let Some(note) = ctx
        .wait_for_timeout::<String>("note", Duration::from_millis(20))
        .await
    {
        return format!("{verdict}: {note}");
    }
    verdict
}

#[tokio::test]
async fn suspension_calls_as_scrutinees() {
    let decision = Decision {
        approved: true,
        by: "ana".into(),
    };
    let h = Harness::new(approval)
        .input(120)
        .signal("decision", &decision);
    assert_eq!(h.assert_exact().await, "approved by ana");
    let h = Harness::new(approval)
        .input(120)
        .signal(
            "decision",
            &Decision {
                approved: false,
                by: "bo".into(),
            },
        )
        .signal("note", &"too much".to_owned());
    assert_eq!(h.assert_exact().await, "rejected by bo: too much");
}

#[workflow]
async fn wait_in_if_let(ctx: &Ctx, n: u32) -> u32 {
    let mut total = n;
    if let Some(extra) = ctx
        .wait_for_timeout::<u32>("extra", Duration::from_millis(20))
        .await
    {
        checkpoint!("got_extra");
        total += extra;
    }
    while let Some(more) = ctx
        .wait_for_timeout::<u32>("more", Duration::from_millis(5))
        .await
    {
        total += more;
        if total > 1000 {
            break;
        }
    }
    total
}

#[tokio::test]
async fn wait_as_if_let_and_while_let_scrutinee() {
    let h = Harness::new(wait_in_if_let).input(1).signal("extra", &5u32);
    assert_eq!(h.assert_exact().await, 6);
}

// 8. Transient closures, and a transient local borrowing another local.
struct Scorer<'a> {
    keywords: &'a [String],
}

impl Scorer<'_> {
    fn score(&self, text: &str) -> usize {
        self.keywords
            .iter()
            .filter(|k| text.contains(k.as_str()))
            .count()
    }
}

fn scorer(keywords: &[String]) -> Scorer<'_> {
    Scorer { keywords }
}

#[workflow]
async fn rank(ctx: &Ctx, docs: Vec<String>, keywords: Vec<String>) -> BTreeMap<String, usize> {
    #[transient]
    let weight = |x: &str| x.len() % 3;
    #[transient]
    let s = scorer(&keywords);
    let mut ranked = BTreeMap::new();
    for doc in &docs {
        checkpoint!("ranking");
        ranked.insert(doc.clone(), s.score(doc) * 10 + weight(doc));
    }
    ranked
}

#[tokio::test]
async fn transient_closure_and_borrowing_transient() {
    let docs = vec!["rust async".to_owned(), "python".to_owned()];
    let out = Harness::new(rank)
        .input((docs, vec!["rust".into(), "async".into()]))
        .assert_exact()
        .await;
    assert_eq!(out["rust async"], 21);
    assert_eq!(out["python"], 0);
}

// 9. Issue 32, item 6: an agent loop that moves the reply into the history
// inside an arm of `match &reply`, then checkpoints. The scrutinee cannot
// be evaluated again on resume (the reply is gone), nor before the split
// (its borrow would cross it): the arm is entered by its site. Rejected by
// rustc (E0382) before.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
enum Reply {
    Assistant { content: String, done: bool },
    Tool { name: String },
}

#[workflow]
async fn agent_turns(ctx: &Ctx, replies: Vec<Reply>) -> Result<(String, usize), String> {
    let mut messages: Vec<Reply> = Vec::new();
    let mut turn = 0;
    loop {
        let reply = replies[turn % replies.len()].clone();
        turn += 1;
        match &reply {
            Reply::Assistant { content, done } if *done => {
                let answer = content.clone();
                ctx.resource::<SideEffects>()
                    .record(format!("answer {turn}"));
                messages.push(reply);
                checkpoint!("answered");
                return Ok((answer, messages.len()));
            }
            Reply::Tool { name } => {
                ctx.resource::<SideEffects>()
                    .record(format!("tool {name} {turn}"));
                messages.push(reply);
                checkpoint!("tool_called");
            }
            _ => {
                messages.push(reply);
                checkpoint!("stepped");
            }
        }
        if turn > 10 {
            return Err("no answer".into());
        }
    }
}

#[tokio::test]
async fn a_reply_moved_in_an_arm_of_match_on_its_reference_resumes_exactly() {
    let replies = vec![
        Reply::Tool {
            name: "search".into(),
        },
        Reply::Assistant {
            content: "thinking".into(),
            done: false,
        },
        Reply::Tool {
            name: "fetch".into(),
        },
        Reply::Assistant {
            content: "42".into(),
            done: true,
        },
    ];
    let out = Harness::new(agent_turns)
        .input(replies)
        .assert_exact()
        .await;
    assert_eq!(out, Ok(("42".to_owned(), 4)));
}

// 10. Issue 32, item 10: `match &mut phase` with a checkpoint in an arm
// whose `&mut` bindings are used after it. The checkpoint saves `phase`
// while they borrow it: rustc refused it (E0502, four times). The arm's
// code after the site now matches again, with fresh bindings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
enum Phase {
    Running { attempts: u32, log: Vec<String> },
    Done,
}

#[workflow]
async fn attempts(ctx: &Ctx, n: u32) -> Phase {
    let mut phase = Phase::Running {
        attempts: 0,
        log: vec![],
    };
    for i in 0..n {
        match &mut phase {
            Phase::Running { attempts, log } => {
                *attempts += 1;
                fx(ctx).record(format!("try {i}"));
                checkpoint!("attempted");
                log.push(format!("attempt {attempts}"));
                checkpoint!("logged");
                if *attempts == 3 {
                    log.push("giving up".into());
                }
            }
            Phase::Done => {}
        }
    }
    phase
}

#[tokio::test]
async fn mut_bindings_of_a_match_on_a_mut_borrow_live_across_checkpoints() {
    let out = Harness::new(attempts).input(4).assert_exact().await;
    assert_eq!(
        out,
        Phase::Running {
            attempts: 4,
            log: vec![
                "attempt 1".into(),
                "attempt 2".into(),
                "attempt 3".into(),
                "giving up".into(),
                "attempt 4".into()
            ]
        }
    );
}

// 11. Issue 32, item 9: a `Vec` assigned again in one arm of a `match`
// inside a `loop`, then written through `iter_mut().filter(..)` around a
// checkpoint. rustc refused it (E0502 at `checkpoint!`): the local, held by
// a placeholder since it is assigned again, was saved at the site while the
// loop borrowed it; it is saved as of loop entry, with the items written.
#[workflow]
async fn bump_evens(ctx: &Ctx, rounds: u32) -> Vec<u32> {
    let mut v: Vec<u32> = vec![1, 2, 3];
    let mut r = 0;
    loop {
        match r % 2 {
            0 => {
                v = vec![r, r + 1, r + 2, r + 4];
            }
            _ => {}
        }
        for x in v.iter_mut().filter(|x| **x % 2 == 0) {
            *x += 100;
            fx(ctx).record(format!("bump {r} {x}"));
            checkpoint!("bumped");
        }
        r += 1;
        if r >= rounds {
            break;
        }
    }
    v
}

#[tokio::test]
async fn a_vec_assigned_in_a_match_arm_then_written_through_resumes_exactly() {
    let out = Harness::new(bump_evens).input(3).assert_exact().await;
    assert_eq!(out, [102, 3, 104, 106]);
}

// A `#[transient]` a `for` loop's iterator borrows around a checkpoint (a
// file's text read once, say): not built again at the site (it cannot be
// replaced while borrowed); a resumed run builds it before the loop and
// skips the lines taken (docs/exactness.md).
#[workflow]
async fn line_lengths(ctx: &Ctx, text: String) -> Vec<usize> {
    #[transient]
    let upper = text.to_uppercase();
    let mut lens = Vec::new();
    for line in upper.lines() {
        lens.push(line.len() + usize::from(line.starts_with('B')));
        checkpoint!("line");
    }
    lens
}

#[tokio::test]
async fn a_transient_a_loop_iterates_around_a_checkpoint_resumes_exactly() {
    let out = Harness::new(line_lengths)
        .input("a\nbb\nccc".into())
        .assert_exact()
        .await;
    assert_eq!(out, vec![1, 3, 3]);
}
