//! A differential fuzzer for the `#[workflow]` transform.
//!
//! [`gen`] builds random, type-correct, terminating workflow bodies from the
//! grammar of supported control-flow forms (nested `for` / `while` /
//! `while let` / `loop` over `Vec`, `VecDeque`, `BTreeMap`, `HashMap`,
//! `HashSet` and ranges, `match` / `if let` / `let else` on an enum with
//! data, explicit state machines, shadowing, early `return` and `?`,
//! `let x;` assigned in branches, `#[transient]` locals, closures, waits and
//! sleeps, and the exactness forms of issue 32: hash order observed after a
//! checkpoint, by iterators the macro rewrites or by helpers it cannot,
//! shared `Arc<Mutex<..>>` handles, plain or hidden in a struct, a field
//! `#[serde(skip)]` drops, stateful transients), with checkpoints
//! and side effects at random statement positions. Each program is printed
//! twice: as a `#[workflow]` and as a plain `async fn` twin (no checkpoints;
//! waits answered from the same script by [`PlainCtx`]; the iterators of the
//! `hash_observe` form wrapped in [`canon`], the canonical order the runtime
//! gives a hash collection's iterators in a workflow body; the locals of the
//! `struct_handle` and `serde_skip` forms passed through [`round_trip`]
//! where the workflow decodes them). [`check_case`]
//! is the oracle:
//!
//! 1. the crash harness (`checkpoint_runtime::testing::Harness`): crashed
//!    right after every checkpoint and resumed, the run returns the
//!    uninterrupted output and runs every side effect exactly as often;
//! 2. the uninterrupted workflow's output and effect log equal the plain
//!    twin's (the log compared as a multiset when the program iterates a
//!    hash collection, whose bodies are generated order-insensitive);
//! 3. a refusal at save (the runtime's `Error::Inexact`, recognised by its
//!    text, [`REFUSAL`]) passes only when the program holds a form the
//!    runtime is expected to refuse (`gen::EXPECTED_REFUSED`: a helper or
//!    `Debug` observing hash order, a shared handle, iterating a clone of a
//!    hash collection), and then nothing else is compared; any other
//!    refusal is a failure (a false refusal).
//!
//! `build.rs` generates the CI sample into `OUT_DIR`; `tests/fuzz.rs` runs
//! it; `src/bin/shrink.rs` reduces a failing program. See
//! `docs/fuzzing.md` at the workspace's root.
#![forbid(unsafe_code)]

pub mod gen;

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use checkpoint_runtime::testing::{Harness, SideEffects};
use checkpoint_runtime::{IntoWorkflow, RetryError, RetryPolicy, Workflow};
use serde::{Deserialize, Serialize};

/// The enum with data that generated `match` / `if let` / `let else` use.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum Job {
    /// No data.
    Idle,
    /// One field.
    Small(u64),
    /// Two fields.
    Pair(u64, u64),
    /// Named fields, one not `Copy`.
    Named {
        /// A number.
        id: u64,
        /// A string.
        tag: String,
    },
}

/// The state of generated explicit state machines.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub enum S {
    /// Initial state.
    Start,
    /// A struct variant.
    A {
        /// Carried value.
        n: u64,
    },
    /// A tuple variant.
    B(u64),
    /// Final state.
    Done,
}

/// A job from a number (all four variants occur).
pub fn mk_job(x: u64) -> Job {
    match x % 4 {
        0 => Job::Idle,
        1 => Job::Small(x),
        2 => Job::Pair(x, x / 2),
        _ => Job::Named {
            id: x,
            tag: format!("tag{}", x % 10),
        },
    }
}

/// A number from a job.
pub fn job_value(j: &Job) -> u64 {
    match j {
        Job::Idle => 0,
        Job::Small(n) => *n,
        Job::Pair(a, b) => a.wrapping_mul(3).wrapping_add(*b),
        Job::Named { id, tag } => id.wrapping_add(tag.len() as u64),
    }
}

/// Fails for some inputs (generated `?` statements).
pub fn check(x: u64) -> Result<u64, String> {
    if x % 11 == 10 {
        Err(format!("bad {x}"))
    } else {
        Ok(x.wrapping_add(1))
    }
}

/// A non-serializable resource (generated `#[transient]` locals).
pub struct Conn {
    base: u64,
}

impl Conn {
    /// Opens a "connection".
    pub fn open(base: u64) -> Self {
        Conn { base }
    }
    /// Queries it.
    pub fn query(&self, x: u64) -> u64 {
        self.base.wrapping_mul(7).wrapping_add(x)
    }
}

/// The final state of the collections. The body hands the hash collections
/// over already collected into sorted ones (`&hm.iter().map(..).collect()`):
/// passing `&hm` itself to a helper after a checkpoint would let the helper
/// observe the hash order, which the runtime refuses at save.
pub fn summary(
    v: &[u64],
    q: &VecDeque<u64>,
    bm: &BTreeMap<u64, u64>,
    hm: &BTreeMap<u64, u64>,
    hs: &BTreeSet<u64>,
) -> String {
    format!("v={v:?} q={q:?} bm={bm:?} hm={hm:?} hs={hs:?}")
}

/// The items of `iter` in the order the runtime's order probe gives a
/// `HashMap`/`HashSet` iterator in a workflow body (`checkpoint_runtime`'s
/// `iteration::canonical_order`): sorted by their postcard bytes, a stable
/// sort. The plain twin wraps the iterators of the `hash_observe` form in it,
/// so that it computes what the workflow computes.
pub fn canon<I>(iter: I) -> std::vec::IntoIter<I::Item>
where
    I: IntoIterator,
    I::Item: Serialize,
{
    let mut keyed: Vec<(Vec<u8>, I::Item)> = iter
        .into_iter()
        .map(|item| (postcard::to_allocvec(&item).unwrap_or_default(), item))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed
        .into_iter()
        .map(|(_, item)| item)
        .collect::<Vec<_>>()
        .into_iter()
}

/// The first item of `hs` in its own iteration order (the `hash_helper`
/// form: a helper the macro cannot rewrite observes the hash order).
pub fn first_of(hs: &HashSet<u64>) -> u64 {
    hs.iter().next().copied().unwrap_or(0)
}

/// The first key of `hm` in its own iteration order (`hash_helper`).
pub fn first_key(hm: &HashMap<u64, u64>) -> u64 {
    hm.keys().next().copied().unwrap_or(0)
}

/// A struct of the program's own hiding a shared mutable handle (the
/// `struct_handle` form): serde shows neither `Arc` nor `Mutex`, so it is
/// saved, and each handle comes back as a value of its own.
#[derive(Serialize, Deserialize, Debug)]
pub struct Logged {
    /// What a loop of the form iterates.
    pub items: Vec<u64>,
    /// The handle, shared with another `Logged` before the checkpoint.
    pub log: std::sync::Arc<Mutex<u64>>,
}

/// A struct with a field serde skips (the `serde_skip` form): it comes back
/// as its default.
#[derive(Serialize, Deserialize, Debug, Default)]
pub struct Skipping {
    /// What a loop of the form iterates.
    pub items: Vec<u64>,
    /// Saved.
    pub kept: u64,
    /// Not saved: 0 once decoded.
    #[serde(skip)]
    pub skipped: u64,
}

/// The value decoded from `value`'s postcard bytes: what the plain twin
/// does where the workflow saves a local (the `struct_handle` and
/// `serde_skip` forms), since after a checkpoint a workflow goes on from
/// the decoded state (docs/exactness.md), and at the entry of a loop whose
/// iterable borrows it around a checkpoint.
pub fn round_trip<T: Serialize + serde::de::DeserializeOwned>(value: T) -> T {
    let bytes = postcard::to_allocvec(&value).expect("encodes");
    postcard::from_bytes(&bytes).expect("decodes")
}

/// A non-serializable resource with state (the `transient_stateful`
/// form): a `#[transient]` local keeps no state across a checkpoint, so the
/// bumps before one are gone after it on every path. Atomic so that a
/// [`CounterView`] borrowing it may be held across an `.await`.
pub struct Counter {
    n: AtomicU64,
}

impl Counter {
    /// A counter at `start`.
    pub fn new(start: u64) -> Self {
        Counter {
            n: AtomicU64::new(start),
        }
    }
    /// Adds one.
    pub fn bump(&self) {
        self.n.fetch_add(1, Ordering::Relaxed);
    }
    /// The count.
    pub fn get(&self) -> u64 {
        self.n.load(Ordering::Relaxed)
    }
}

/// A second transient built from a [`Counter`] (the `transient_stateful`
/// form, `chained`): it borrows the counter, so both are built again after
/// a checkpoint, the view dropped first.
pub struct CounterView<'a> {
    counter: &'a Counter,
}

impl<'a> CounterView<'a> {
    /// A view of `counter`.
    pub fn new(counter: &'a Counter) -> Self {
        CounterView { counter }
    }
    /// Adds one to the counter.
    pub fn bump(&self) {
        self.counter.bump();
    }
    /// The counter's count.
    pub fn get(&self) -> u64 {
        self.counter.get()
    }
}

/// What the plain twin gets as `ctx`: the same method names as `Ctx`, with
/// waits answered from the program's signal script, sleeps that return at
/// once, and side effects recorded in a plain log.
pub struct PlainCtx {
    script: Mutex<HashMap<String, VecDeque<u64>>>,
    effects: SideEffects,
}

impl PlainCtx {
    /// A context that answers waits from `script` (`(name, payloads)`).
    pub fn new(script: &[(String, Vec<u64>)]) -> Self {
        PlainCtx {
            script: Mutex::new(
                script
                    .iter()
                    .map(|(n, p)| (n.clone(), p.iter().copied().collect()))
                    .collect(),
            ),
            effects: SideEffects::new(),
        }
    }

    fn next(&self, name: &str) -> Option<u64> {
        let mut s = self.script.lock().unwrap_or_else(|e| e.into_inner());
        s.get_mut(name).and_then(|q| q.pop_front())
    }

    /// The next scripted payload for `name` (panics when there is none, as
    /// the harness would wait forever).
    pub async fn wait_for<T: From<u64>>(&self, name: &str) -> T {
        match self.next(name) {
            Some(x) => T::from(x),
            None => panic!("plain twin: no scripted signal `{name}` left"),
        }
    }

    /// The next scripted payload for `name`, or `None` (timed out).
    pub async fn wait_for_timeout<T: From<u64>>(&self, name: &str, _d: Duration) -> Option<T> {
        self.next(name).map(T::from)
    }

    /// Returns at once.
    pub async fn sleep(&self, _d: Duration) {}

    /// Makes the attempts `ctx.retry` makes, without backoff or storage.
    pub async fn retry<T, E, Op, Fut>(
        &self,
        _name: &str,
        policy: RetryPolicy<E>,
        op: Op,
    ) -> Result<T, RetryError<E>>
    where
        Op: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match op().await {
                Ok(v) => return Ok(v),
                Err(error) if !policy.retries(&error) => {
                    return Err(RetryError::NotRetryable { attempt, error })
                }
                Err(last) if attempt >= policy.attempts() => {
                    return Err(RetryError::Exhausted {
                        attempts: attempt,
                        last,
                    })
                }
                Err(_) => {}
            }
        }
    }

    /// Only [`SideEffects`] is available.
    pub fn resource<T: Any>(&self) -> &T {
        (&self.effects as &dyn Any)
            .downcast_ref::<T>()
            .expect("plain twin: only SideEffects is a resource")
    }

    /// The effects recorded so far.
    pub fn effects(&self) -> Vec<String> {
        self.effects.all()
    }
}

/// What the runtime says when it refuses to save a checkpoint because a
/// resumed run could compute something else (`Error::Inexact`). Matched by
/// text, not by the error's variant, so that the fuzzer also builds against
/// runtimes that predate the refusal.
pub const REFUSAL: &str = "so that a resumed run computes what this one does";

/// What [`check_case`] found on a program that passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// Checkpoints the uninterrupted run took (each one a crash point the
    /// harness checked); 0 when refused.
    pub checkpoints: u64,
    /// The runtime refused a save (the message), as the program expects:
    /// it holds a form the macro cannot make exact
    /// ([`gen::Program::expects_refusal`]). Nothing else was compared.
    pub refused: Option<String>,
}

/// Runs both oracles on one program: `wf` is its workflow, `plain` and
/// `plain_fx` the plain twin's output (as JSON) and effect log.
pub async fn check_case<I>(
    wf: I,
    prog: &gen::Program,
    plain: serde_json::Value,
    plain_fx: Vec<String>,
) -> Result<Checked, String>
where
    I: IntoWorkflow,
    I::Workflow: Workflow<Input = Vec<u64>>,
{
    check_parts(
        wf,
        prog.input.clone(),
        &prog.script(),
        prog.iterates_hash(),
        prog.expects_refusal(),
        plain,
        plain_fx,
    )
    .await
}

/// [`check_case`] with the program's parts spelled out (the shrinker's
/// scratch programs call this): `script` as from [`gen::Program::script`],
/// `unordered` compares the effect logs as multisets, `may_refuse` accepts
/// a refusal at save ([`REFUSAL`]); any other refusal is a failure (a false
/// refusal of a program the macro should have made exact).
pub async fn check_parts<I>(
    wf: I,
    input: Vec<u64>,
    script: &[(String, Vec<u64>)],
    unordered: bool,
    may_refuse: bool,
    plain: serde_json::Value,
    plain_fx: Vec<String>,
) -> Result<Checked, String>
where
    I: IntoWorkflow,
    I::Workflow: Workflow<Input = Vec<u64>>,
{
    let mut h = Harness::new(wf)
        .input(input)
        .timeout(Duration::from_secs(60));
    for (name, payloads) in script.iter().cloned() {
        for p in payloads {
            h = h.signal(&name, &p);
        }
    }
    let report = match h.run().await {
        Ok(r) => r,
        Err(e) => {
            let e = e.to_string();
            return if e.contains(REFUSAL) && may_refuse {
                Ok(Checked {
                    checkpoints: 0,
                    refused: Some(e),
                })
            } else if e.contains(REFUSAL) {
                Err(format!(
                    "harness: refused a program with no form expected to be refused: {e}"
                ))
            } else {
                Err(format!("harness: {e}"))
            };
        }
    };
    let mut problems = Vec::new();
    if (report.crash_points.len() as u64) < report.checkpoints {
        problems.push(format!(
            "only {} crash points for {} checkpoints",
            report.crash_points.len(),
            report.checkpoints
        ));
    }
    for p in &report.crash_points {
        for d in &p.duplicated {
            problems.push(format!(
                "crash after checkpoint {} ({}): effect `{}` ran {}x, expected {}",
                p.k,
                p.label.as_deref().unwrap_or(&p.site),
                d.effect,
                d.got,
                d.expected
            ));
        }
        for d in &p.missing {
            problems.push(format!(
                "crash after checkpoint {} ({}): effect `{}` ran {}x, expected {}",
                p.k,
                p.label.as_deref().unwrap_or(&p.site),
                d.effect,
                d.got,
                d.expected
            ));
        }
    }
    if report.output != plain {
        problems.push(format!(
            "workflow output {} differs from the plain twin's {}",
            report.output, plain
        ));
    }
    let (mut a, mut b) = (report.effects.clone(), plain_fx);
    if unordered {
        a.sort();
        b.sort();
    }
    if a != b {
        problems.push(format!(
            "workflow effects {a:?} differ from the plain twin's {b:?}"
        ));
    }
    if problems.is_empty() {
        Ok(Checked {
            checkpoints: report.checkpoints,
            refused: None,
        })
    } else {
        Err(problems.join("\n"))
    }
}

/// The imports generated programs need (the generated module and the
/// shrinker's scratch program start with `use checkpoint_fuzz::prelude::*;`).
pub mod prelude {
    pub use crate::{
        canon, check, first_key, first_of, job_value, mk_job, round_trip, summary, Conn, Counter,
        CounterView, Job, Logged, PlainCtx, Skipping, S,
    };
    pub use checkpoint_runtime::prelude::*;
    pub use checkpoint_runtime::testing::SideEffects;
    pub use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
    pub use std::sync::{Arc, Mutex};
    pub use std::time::Duration;
}

/// The default sample: seed, number of programs, size.
pub const DEFAULT_SEED: u64 = 0x5EED_2026;
/// Default number of programs in the CI sample.
pub const DEFAULT_COUNT: usize = 300;
/// Default program size (statements, roughly).
pub const DEFAULT_SIZE: usize = 30;
