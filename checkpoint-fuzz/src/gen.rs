//! The program generator: a small AST of workflow bodies, a seeded random
//! generator that only builds type-correct, terminating programs, a
//! pretty-printer (as a `#[workflow]` and as its plain `async fn` twin), and
//! the one-step reductions the shrinker tries.
//!
//! This file is shared verbatim by `build.rs` (`#[path = "src/gen.rs"]`) and
//! the crate, so it uses `std` only.

use std::collections::BTreeSet;
use std::fmt::Write as _;

// ---------------------------------------------------------------------------
// PRNG

/// SplitMix64: tiny, fixed forever, so a seed names the same program forever.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
    /// A uniformly chosen index below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// The seed of program `index` in the sample of `seed`.
pub fn program_seed(seed: u64, index: usize) -> u64 {
    let mut r = Rng::new(seed ^ (index as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    r.next_u64()
}

// ---------------------------------------------------------------------------
// Forms

/// Every form the generator knows, by name. A form that is switched off is
/// never generated.
pub const FORMS: &[&str] = &[
    "effects",
    "shadow",
    "if",
    "block",
    "for_range",
    "for_range_len",
    "for_ref",
    "for_iter_mut",
    "for_into_iter",
    "for_drain",
    "for_chunks",
    "for_zip",
    "for_filter",
    "for_enumerate",
    "for_btree",
    "for_hash",
    "while",
    "while_let",
    "loop_value",
    "labels",
    "match_owned",
    "match_ref",
    "if_let",
    "if_let_ref_opt",
    "let_else",
    "state_machine",
    "early_return",
    "try",
    "deferred_let",
    "transient",
    "closure_chain",
    "wait_for",
    "wait_timeout",
    "sleep",
    // Shapes that combine the above with a checkpoint in a place known to be
    // hard for the transform (they were in KNOWN_FAILING until the macro
    // handled them).
    "cp_hash_for",
    "cp_iter_mut",
    "range_len_mutated",
    "cp_state_machine",
    "cp_deferred_let",
    "cp_match_ref",
    "cp_if_let_ref",
    "cp_match_ref_move",
    "wait_scrutinee",
    "transient_closure",
    // Exactness of values (issue 32). The runtime iterates every iterator a
    // body takes from a local in one canonical order, and refuses at save
    // what the macro cannot rewrite.
    //
    // `hash_observe`: after a checkpoint, the body observes hash order
    // through iterators the macro rewrites (`hs.iter().next()`,
    // `max_by_key` with ties, `keys().collect()`, an order-dependent fold);
    // exact, the plain twin computes the same canonical order (`canon`).
    "hash_observe",
    // `hash_helper`: after a checkpoint, a helper (`first_of(&hs)`) or
    // `Debug` observes hash order: expected refused at save.
    "hash_helper",
    // `shared_handle`: an `Arc<Mutex<u64>>` shared by two locals across a
    // checkpoint: expected refused at save.
    "shared_handle",
    // `hash_clone_for`: `for x in hs.clone()` over a hash collection (the
    // macro cannot follow the clone's order): expected refused at save when
    // a checkpoint precedes it; without the form, hash `into_iter` loops
    // iterate an owned snapshot taken with `.iter()`.
    "hash_clone_for",
    // Known gaps (in KNOWN_FAILING below).
    "transient_cell",
    "transient_stateful",
];

/// Forms whose programs the runtime is expected to refuse at save
/// (`Error::Inexact`): a program holding one passes the oracle either by
/// being refused or by matching its twin as usual.
pub const EXPECTED_REFUSED: &[&str] = &["hash_helper", "shared_handle", "hash_clone_for"];

/// Forms the current macro gets wrong: in the grammar but switched off in
/// the default sample, so that CI stays green while a fix is under way
/// (`CHECKPOINT_FUZZ_FORMS=all` switches them on, `+form` one of them).
///
/// The ten that were listed here when the fuzzer was written (hash-ordered
/// loops, `iter_mut` writes, `0..q.len()` with a changing `q`, state
/// machines, `let x;` assigned after a checkpoint, `match &j` /
/// `if let .. = &o` with a checkpoint in an arm, waits as scrutinees,
/// transient closures) all resume exactly now; `tests/exactness.rs` and
/// `tests/shapes.rs` hold hand-written workflows of each. Listed now, the
/// known gaps of issue 32 (neither refused nor exact):
///
/// - `transient_cell`: `let base = Cell::new(..); #[transient] let off =
///   base.get(); base.set(..); checkpoint!(); .. off ..`. The `Cell` is
///   saved with its new value and a resumed run would rebuild `off` from
///   it. The macro refuses it at compile time now (it sees `base.set(..)`,
///   `tests/ui/transient_reads_cell.rs`); it stays listed because the
///   fuzzer counts a program that does not compile as a failure.
/// - `transient_stateful`: a `#[transient]` `Counter` (a `Cell` inside)
///   bumped in a loop with a checkpoint inside and read after it: a resumed
///   run rebuilds the counter from its initializer, losing the bumps made
///   before the crash.
pub const KNOWN_FAILING: &[&str] = &["transient_cell", "transient_stateful"];

/// A set of enabled forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forms(pub BTreeSet<String>);

impl Forms {
    /// Every form.
    pub fn all() -> Self {
        Forms(FORMS.iter().map(|s| s.to_string()).collect())
    }
    /// Every form except the known-failing ones.
    pub fn default_sample() -> Self {
        let mut f = Self::all();
        for k in KNOWN_FAILING {
            f.0.remove(*k);
        }
        f
    }
    /// Parses `CHECKPOINT_FUZZ_FORMS`: empty means the default sample; `all`
    /// means every form; otherwise a comma-separated list where `+name`
    /// adds to the default sample, `-name` removes from it, and a bare
    /// `name` list replaces it.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Ok(Self::default_sample());
        }
        if spec == "all" {
            return Ok(Self::all());
        }
        let parts: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let relative = parts
            .iter()
            .all(|p| p.starts_with('+') || p.starts_with('-'));
        let mut f = if relative {
            Self::default_sample()
        } else {
            Forms(BTreeSet::new())
        };
        for p in parts {
            let (add, name) = match p.strip_prefix('-') {
                Some(n) => (false, n),
                None => (true, p.trim_start_matches('+')),
            };
            if !FORMS.contains(&name) {
                return Err(format!(
                    "unknown form `{name}` (known: {})",
                    FORMS.join(", ")
                ));
            }
            if add {
                f.0.insert(name.to_owned());
            } else {
                f.0.remove(name);
            }
        }
        Ok(f)
    }
    /// Whether `form` is on.
    pub fn on(&self, form: &str) -> bool {
        self.0.contains(form)
    }
    /// A stable one-line description (for generated code and messages).
    pub fn spec(&self) -> String {
        self.0.iter().cloned().collect::<Vec<_>>().join(",")
    }
}

// ---------------------------------------------------------------------------
// AST

/// A collection local of the program (all are declared in the prologue).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Coll {
    /// `v: Vec<u64>`
    V,
    /// `q: VecDeque<u64>`
    Q,
    /// `bm: BTreeMap<u64, u64>`
    Bm,
    /// `hm: HashMap<u64, u64>`
    Hm,
    /// `hs: HashSet<u64>`
    Hs,
}

impl Coll {
    fn name(self) -> &'static str {
        match self {
            Coll::V => "v",
            Coll::Q => "q",
            Coll::Bm => "bm",
            Coll::Hm => "hm",
            Coll::Hs => "hs",
        }
    }
    fn is_hash(self) -> bool {
        matches!(self, Coll::Hm | Coll::Hs)
    }
    fn is_map(self) -> bool {
        matches!(self, Coll::Bm | Coll::Hm)
    }
    fn is_seq(self) -> bool {
        matches!(self, Coll::V | Coll::Q)
    }
}

/// An integer (`u64`) expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// A literal.
    Lit(u64),
    /// Reads a value: the text is a `u64` expression such as `acc`, `*x`,
    /// `(i as u64)` or `c.query(3)`.
    Read(String),
    /// `a.wrapping_add(b)`
    Add(Box<Expr>, Box<Expr>),
    /// `a.wrapping_mul(k)`
    Mul(Box<Expr>, u64),
    /// `(a % k)`, k > 0
    Rem(Box<Expr>, u64),
    /// `(coll.len() as u64)`
    Len(Coll),
}

/// A condition `e % m == r`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cond {
    /// The tested value.
    pub e: Expr,
    /// The modulus (> 0).
    pub m: u64,
    /// The remainder it is compared with.
    pub r: u64,
}

/// The kinds of `for` loops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForKind {
    /// `for i in 0..hi` (`i: u64`)
    Range { var: String, hi: u64 },
    /// `for i in 0..coll.len()` (`i: usize`), the body may change `coll`.
    RangeLen { var: String, coll: Coll },
    /// `for x in &coll` or `for x in coll.iter()`; maps bind `(k, x)`.
    Ref {
        coll: Coll,
        key: String,
        var: String,
        amp: bool,
    },
    /// `for x in coll.iter_mut()`; maps bind `(k, x)`.
    IterMut {
        coll: Coll,
        key: String,
        var: String,
    },
    /// `for x in coll.clone()` / `coll.clone().into_iter()`; a hash
    /// collection without `clone` iterates an owned snapshot instead,
    /// `coll.iter().copied().collect::<Vec<_>>()` (maps: `.map(|(k, x)| (*k, *x))`).
    IntoIter {
        coll: Coll,
        key: String,
        var: String,
        explicit: bool,
        clone: bool,
    },
    /// `for x in coll.drain(..)`.
    Drain { coll: Coll, var: String },
    /// `for c in v.chunks(n)`.
    Chunks { var: String, n: u64 },
    /// `for (a, b) in v.iter().zip(q.iter())`.
    Zip { a: String, b: String },
    /// `for x in coll.iter().filter(|x| **x % m != 0)`.
    Filter { coll: Coll, var: String, m: u64 },
    /// `for (i, x) in coll.iter().enumerate()`.
    Enumerate {
        coll: Coll,
        idx: String,
        var: String,
    },
}

/// How a `match` / `if let` reaches the job value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scrut {
    /// `match j` (moves `j`)
    Owned,
    /// `match &j`
    Ref,
    /// `match j.clone()`
    Clone,
}

/// A `Job` variant pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pat {
    /// `Job::Idle`
    Idle,
    /// `Job::Small(n)`
    Small(String),
    /// `Job::Pair(a, b)`
    Pair(String, String),
    /// `Job::Named { id, tag }`
    Named(String, String),
}

/// The kinds of suspension calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// `ctx.wait_for::<u64>(name)`
    For,
    /// `ctx.wait_for_timeout::<u64>(name, 1 ms)`; `scripted` says whether the
    /// harness delivers a signal (Some) or lets it time out (None).
    Timeout { scripted: bool },
}

/// A statement of a workflow body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stmt {
    /// `checkpoint!()` / `checkpoint!("label")`
    Checkpoint(Option<String>),
    /// A side effect. Outside hash loops it bumps `tick` and records
    /// `e{site}-{tick}`; inside (`path` non-empty) it records
    /// `e{site}-{tick}-{path..}` without bumping.
    Effect { site: u32, path: Vec<String> },
    /// `acc = acc.wrapping_mul(31).wrapping_add(e)`, or with `commut`
    /// `acc = acc.wrapping_add(e)`.
    Acc { e: Expr, commut: bool },
    /// `trace.push(format!("t{site}:{}", e))`
    Trace { site: u32, e: Expr },
    /// `trace.push(format!("s{site}:{}", var))` for a `String` local.
    TraceStr { site: u32, var: String },
    /// A bounded insertion into a collection.
    Push { coll: Coll, e: Expr },
    /// Removes one element (pop / remove), adding it to `acc`.
    Pop { coll: Coll, e: Expr },
    /// `*target = (*target).wrapping_add(e)` through an `iter_mut` binding.
    WriteThrough { target: String, e: Expr },
    /// `let [mut] name = e;`
    Let {
        name: String,
        mutable: bool,
        e: Expr,
    },
    /// `name = e;`
    Assign { name: String, e: Expr },
    /// `let name = format!("<{name}>");` (shadowing with another type).
    ShadowStr { name: String },
    /// `let name = name.wrapping_add(e);` (shadowing, same type).
    ShadowInt { name: String, e: Expr },
    /// `let name = mk_job(e);`
    LetJob { name: String, e: Expr },
    /// `let name = if e % 3 == 0 { None } else { Some(e) };`
    LetOpt { name: String, e: Expr },
    /// `let moved = name; trace.push(format!("{moved:?}"));`
    MoveJob { name: String, moved: String },
    /// `#[transient] let name = Conn::open(k);`
    LetConn { name: String, k: u64 },
    /// `#[transient] let name = move |a: u64| a.wrapping_mul(k).wrapping_add(1);`
    LetClosure { name: String, k: u64 },
    /// An iterator chain with closures, in one statement.
    Chain { coll: Coll, k: u64, m: u64 },
    /// `let name; if cond { then; name = a; } else { els; name = b; }`
    Deferred {
        name: String,
        cond: Cond,
        then: Vec<Stmt>,
        a: Expr,
        els: Vec<Stmt>,
        b: Expr,
    },
    /// `if cond { then } [else { els }]`
    If {
        cond: Cond,
        then: Vec<Stmt>,
        els: Option<Vec<Stmt>>,
    },
    /// `{ body }`
    Block(Vec<Stmt>),
    /// A `for` loop. `hash` loops bump `tick` before the loop.
    For {
        label: Option<String>,
        kind: ForKind,
        body: Vec<Stmt>,
    },
    /// `let mut g = 0; while g < bound { g += 1; body }`
    While {
        label: Option<String>,
        fuel: String,
        bound: u64,
        body: Vec<Stmt>,
    },
    /// `let mut g = 0; while let Some(x) = pop(coll) { g += 1; if g > bound { break; } body }`
    WhileLet {
        label: Option<String>,
        coll: Coll,
        var: String,
        fuel: String,
        bound: u64,
        body: Vec<Stmt>,
    },
    /// `let mut g = 0; [let r =] 'l: loop { g += 1; if g > bound { break [0]; } body }`;
    /// with a value, `acc` absorbs it afterwards.
    Loop {
        label: Option<String>,
        fuel: String,
        bound: u64,
        value: Option<String>,
        body: Vec<Stmt>,
    },
    /// `if cond { break ['l] [value]; }`
    BreakIf {
        cond: Cond,
        label: Option<String>,
        value: Option<Expr>,
    },
    /// `if cond { continue ['l]; }`
    ContinueIf { cond: Cond, label: Option<String> },
    /// `match <scrut> job { arms }` (all four variants, in order).
    Match {
        job: String,
        scrut: Scrut,
        arms: Vec<(Pat, Vec<Stmt>)>,
    },
    /// `if let pat = <scrut> job { then } else { els }`
    IfLetJob {
        job: String,
        scrut: Scrut,
        pat: Pat,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
    },
    /// `if let Some(r) = &opt { then } else { els }`
    IfLetOpt {
        opt: String,
        bind: String,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
    },
    /// `let pat = job.clone() else { diverge };`
    LetElse {
        job: String,
        pat: Pat,
        diverge: Box<Stmt>,
    },
    /// `continue;` / `break;` / early return (only as a `LetElse` diverge).
    Diverge(Divergence),
    /// An explicit state machine over `S`.
    Machine {
        st: String,
        fuel: String,
        bound: u64,
        n: String,
        m: String,
        start: Vec<Stmt>,
        a: Vec<Stmt>,
        b: Vec<Stmt>,
    },
    /// `if cond { return out; }`
    ReturnIf { cond: Cond },
    /// `let name = check(e)?;` (Result programs only)
    Try { name: String, e: Expr },
    /// A suspension call: statement, or `let bind = ...` (a `u64` for
    /// `wait_for`, an `Option<u64>` for `wait_for_timeout`).
    Wait {
        kind: Wait,
        name: String,
        bind: Option<String>,
    },
    /// `match ctx.wait_for_timeout(..).await { Some(x) => .., None => .. }`,
    /// or with `if_let`, `if let Some(x) = .. { .. } else { .. }`.
    WaitScrutinee {
        name: String,
        scripted: bool,
        bind: String,
        if_let: bool,
        some: Vec<Stmt>,
        none: Vec<Stmt>,
    },
    /// `ctx.sleep(Duration::from_millis(1)).await;`
    Sleep,
    /// `hash_observe`: `checkpoint!()`, then the hash order observed through
    /// an iterator the macro puts in canonical order (`how` picks one of
    /// four); the plain twin wraps the iterator in `canon(..)`.
    HashObserve { site: u32, how: u8 },
    /// `hash_helper`: `checkpoint!()`, then the hash order observed where the
    /// macro cannot rewrite it (a helper, `Debug`): refused at save.
    HashHelper { site: u32, how: u8 },
    /// `shared_handle`: a block that saves an `Arc<Mutex<u64>>` shared by two
    /// locals across a checkpoint: refused at save.
    SharedHandle { id: u32 },
    /// `transient_cell` (known failing): a `#[transient]` built from a
    /// `Cell` that changes before the checkpoint.
    TransientCell { id: u32 },
    /// `transient_stateful` (known failing): a `#[transient]` counter bumped
    /// in a loop with a checkpoint inside, read after it.
    TransientStateful { id: u32, k: u64, n: u64 },
}

/// How a `let else` leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Divergence {
    /// `continue;`
    Continue,
    /// `return out;`
    Return,
}

/// A generated program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// The sample seed.
    pub seed: u64,
    /// The index in the sample.
    pub index: usize,
    /// Whether the output is a `Result` (and `?` may appear).
    pub result: bool,
    /// The workflow's input.
    pub input: Vec<u64>,
    /// The body, between the fixed prologue and epilogue.
    pub body: Vec<Stmt>,
}

/// How many signals are scripted per scripted signal name.
pub const SIGNALS_PER_NAME: u64 = 64;

impl Program {
    /// Whether the program iterates a hash collection (then the twin's effect
    /// log is compared as a multiset).
    pub fn iterates_hash(&self) -> bool {
        let mut found = false;
        walk(&self.body, &mut |s| {
            if let Stmt::For { kind, .. } = s {
                if for_is_hash(kind) {
                    found = true;
                }
            }
        });
        found
    }

    /// Whether the program holds a form the runtime is expected to refuse at
    /// save ([`EXPECTED_REFUSED`]): then a refusal is a pass.
    pub fn expects_refusal(&self) -> bool {
        let mut found = false;
        walk(&self.body, &mut |s| {
            found |= matches!(
                s,
                Stmt::HashHelper { .. }
                    | Stmt::SharedHandle { .. }
                    | Stmt::For {
                        kind: ForKind::IntoIter {
                            clone: true,
                            coll: Coll::Hm | Coll::Hs,
                            ..
                        },
                        ..
                    }
            );
        });
        found
    }

    /// The scripted signals: `(name, payloads)`.
    pub fn script(&self) -> Vec<(String, Vec<u64>)> {
        let mut out = Vec::new();
        walk(&self.body, &mut |s| {
            let (name, scripted) = match s {
                Stmt::Wait { kind, name, .. } => (
                    name,
                    match kind {
                        Wait::For => true,
                        Wait::Timeout { scripted } => *scripted,
                    },
                ),
                Stmt::WaitScrutinee { name, scripted, .. } => (name, *scripted),
                _ => return,
            };
            if scripted {
                let base: u64 = name
                    .trim_start_matches(|c: char| !c.is_ascii_digit())
                    .parse()
                    .unwrap_or(0);
                out.push((
                    name.clone(),
                    (0..SIGNALS_PER_NAME).map(|i| base * 100 + i).collect(),
                ));
            }
        });
        out
    }

    /// Number of statements (all levels).
    pub fn size(&self) -> usize {
        let mut n = 0;
        walk(&self.body, &mut |_| n += 1);
        n
    }

    /// The output type.
    pub fn out_type(&self) -> &'static str {
        if self.result {
            "Result<(u64, u64, Vec<String>), String>"
        } else {
            "(u64, u64, Vec<String>)"
        }
    }

    /// The workflow and its plain twin, as Rust items named `fz_{tag}` and
    /// `plain_{tag}`.
    pub fn render(&self, tag: &str) -> String {
        let mut s = String::new();
        writeln!(s, "#[workflow]").unwrap();
        writeln!(
            s,
            "pub async fn fz_{tag}(ctx: &Ctx, input: Vec<u64>) -> {} {{",
            self.out_type()
        )
        .unwrap();
        s.push_str(&self.render_body(Mode::Workflow, 1));
        writeln!(s, "}}\n").unwrap();
        writeln!(
            s,
            "pub async fn plain_{tag}(ctx: &PlainCtx, input: Vec<u64>) -> {} {{",
            self.out_type()
        )
        .unwrap();
        s.push_str(&self.render_body(Mode::Plain, 1));
        writeln!(s, "}}").unwrap();
        s
    }

    /// The workflow body alone (prologue, body, epilogue).
    pub fn render_body(&self, mode: Mode, indent: usize) -> String {
        let mut p = Printer {
            out: String::new(),
            indent,
            mode,
            result: self.result,
        };
        for line in PROLOGUE {
            p.line(line);
        }
        p.stmts(&self.body);
        p.line(EPILOGUE);
        if self.result {
            p.line("Ok((acc, tick, trace))");
        } else {
            p.line("(acc, tick, trace)");
        }
        p.out
    }
}

const PROLOGUE: &[&str] = &[
    "let mut acc: u64 = 1;",
    "let mut tick: u64 = 0;",
    "let mut trace: Vec<String> = Vec::new();",
    "let mut v: Vec<u64> = input.clone();",
    "let mut q: VecDeque<u64> = input.iter().map(|x| x + 1).collect();",
    "let mut bm: BTreeMap<u64, u64> = input.iter().map(|x| (x % 7, *x)).collect();",
    "let mut hm: HashMap<u64, u64> = input.iter().map(|x| (x % 5 + 10, *x)).collect();",
    "let mut hs: HashSet<u64> = input.iter().map(|x| x * 3).collect();",
];

/// The hash collections are read by the body itself, through iterators the
/// macro puts in canonical order (passing `&hm` to `summary` would observe
/// the hash order where the macro cannot rewrite it: refused at save).
const EPILOGUE: &str = "trace.push(summary(&v, &q, &bm, &hm.iter().map(|(k, x)| (*k, *x)).collect(), &hs.iter().copied().collect()));";

fn for_is_hash(kind: &ForKind) -> bool {
    match kind {
        ForKind::Ref { coll, .. }
        | ForKind::IterMut { coll, .. }
        | ForKind::IntoIter { coll, .. } => coll.is_hash(),
        _ => false,
    }
}

/// Calls `f` on every statement, outer before inner.
pub fn walk(stmts: &[Stmt], f: &mut dyn FnMut(&Stmt)) {
    for s in stmts {
        f(s);
        for b in children(s) {
            walk(b, f);
        }
    }
}

fn children(s: &Stmt) -> Vec<&Vec<Stmt>> {
    match s {
        Stmt::Deferred { then, els, .. } => vec![then, els],
        Stmt::If { then, els, .. } => {
            let mut v = vec![then];
            if let Some(e) = els {
                v.push(e);
            }
            v
        }
        Stmt::Block(b)
        | Stmt::For { body: b, .. }
        | Stmt::While { body: b, .. }
        | Stmt::WhileLet { body: b, .. }
        | Stmt::Loop { body: b, .. } => vec![b],
        Stmt::Match { arms, .. } => arms.iter().map(|(_, b)| b).collect(),
        Stmt::IfLetJob { then, els, .. } | Stmt::IfLetOpt { then, els, .. } => vec![then, els],
        Stmt::Machine { start, a, b, .. } => vec![start, a, b],
        Stmt::WaitScrutinee { some, none, .. } => vec![some, none],
        _ => vec![],
    }
}

fn children_mut(s: &mut Stmt) -> Vec<&mut Vec<Stmt>> {
    match s {
        Stmt::Deferred { then, els, .. } => vec![then, els],
        Stmt::If { then, els, .. } => {
            let mut v = vec![then];
            if let Some(e) = els {
                v.push(e);
            }
            v
        }
        Stmt::Block(b)
        | Stmt::For { body: b, .. }
        | Stmt::While { body: b, .. }
        | Stmt::WhileLet { body: b, .. }
        | Stmt::Loop { body: b, .. } => vec![b],
        Stmt::Match { arms, .. } => arms.iter_mut().map(|(_, b)| b).collect(),
        Stmt::IfLetJob { then, els, .. } | Stmt::IfLetOpt { then, els, .. } => vec![then, els],
        Stmt::Machine { start, a, b, .. } => vec![start, a, b],
        Stmt::WaitScrutinee { some, none, .. } => vec![some, none],
        _ => vec![],
    }
}

/// Whether a statement list takes a checkpoint (explicitly or by suspending).
pub fn takes_checkpoint(stmts: &[Stmt]) -> bool {
    let mut found = false;
    walk(stmts, &mut |s| {
        if matches!(
            s,
            Stmt::Checkpoint(_)
                | Stmt::Wait { .. }
                | Stmt::WaitScrutinee { .. }
                | Stmt::Sleep
                | Stmt::HashObserve { .. }
                | Stmt::HashHelper { .. }
                | Stmt::SharedHandle { .. }
                | Stmt::TransientCell { .. }
                | Stmt::TransientStateful { .. }
        ) {
            found = true;
        }
    });
    found
}

// ---------------------------------------------------------------------------
// Printer

/// Which of the twins is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The `#[workflow]`: checkpoints and `#[transient]` as written.
    Workflow,
    /// The plain `async fn`: no checkpoints, no attributes.
    Plain,
}

struct Printer {
    out: String,
    indent: usize,
    mode: Mode,
    result: bool,
}

fn expr(e: &Expr) -> String {
    match e {
        Expr::Lit(n) => format!("{n}"),
        Expr::Read(s) => s.clone(),
        Expr::Add(a, b) => format!("{}.wrapping_add({})", atom(a), expr(b)),
        Expr::Mul(a, k) => format!("{}.wrapping_mul({k})", atom(a)),
        Expr::Rem(a, k) => format!("({} % {k})", atom(a)),
        Expr::Len(c) => format!("({}.len() as u64)", c.name()),
    }
}

/// An expression usable as a method receiver.
fn atom(e: &Expr) -> String {
    match e {
        Expr::Lit(n) => format!("{n}u64"),
        Expr::Read(s) if s.starts_with('*') => format!("({s})"),
        _ => expr(e),
    }
}

fn cond(c: &Cond) -> String {
    format!("{} % {} == {}", atom(&c.e), c.m, c.r)
}

fn pat(p: &Pat) -> String {
    match p {
        Pat::Idle => "Job::Idle".into(),
        Pat::Small(n) => format!("Job::Small({n})"),
        Pat::Pair(a, b) => format!("Job::Pair({a}, {b})"),
        Pat::Named(id, tag) => format!("Job::Named {{ id: {id}, tag: {tag} }}"),
    }
}

fn scrut(job: &str, s: Scrut) -> String {
    match s {
        Scrut::Owned => job.to_owned(),
        Scrut::Ref => format!("&{job}"),
        Scrut::Clone => format!("{job}.clone()"),
    }
}

fn label_prefix(l: &Option<String>) -> String {
    match l {
        Some(l) => format!("'{l}: "),
        None => String::new(),
    }
}

fn label_ref(l: &Option<String>) -> String {
    match l {
        Some(l) => format!(" '{l}"),
        None => String::new(),
    }
}

fn wait_call(name: &str, kind: &Wait) -> String {
    match kind {
        Wait::For => format!("ctx.wait_for::<u64>(\"{name}\").await"),
        // A scripted signal must win the race against the deadline: the
        // harness delivers it as soon as the run waits, so give it time.
        Wait::Timeout { scripted: true } => {
            format!("ctx.wait_for_timeout::<u64>(\"{name}\", Duration::from_secs(30)).await")
        }
        Wait::Timeout { scripted: false } => {
            format!("ctx.wait_for_timeout::<u64>(\"{name}\", Duration::from_millis(1)).await")
        }
    }
}

impl Printer {
    fn line(&mut self, s: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn stmts(&mut self, b: &[Stmt]) {
        for s in b {
            self.stmt(s);
        }
    }

    fn block(&mut self, head: &str, b: &[Stmt], tail: &str) {
        self.line(&format!("{head} {{"));
        self.indent += 1;
        self.stmts(b);
        if !tail.is_empty() {
            self.line(tail);
        }
        self.indent -= 1;
    }

    fn ret(&self) -> &'static str {
        if self.result {
            "return Ok((acc, tick, trace));"
        } else {
            "return (acc, tick, trace);"
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        let wf = self.mode == Mode::Workflow;
        match s {
            Stmt::Checkpoint(l) => {
                if wf {
                    match l {
                        Some(l) => self.line(&format!("checkpoint!(\"{l}\");")),
                        None => self.line("checkpoint!();"),
                    }
                }
            }
            Stmt::Effect { site, path } => {
                if path.is_empty() {
                    self.line("tick += 1;");
                    self.line(&format!(
                        "ctx.resource::<SideEffects>().record(format!(\"e{site}-{{tick}}\"));"
                    ));
                } else {
                    let holes: String = path.iter().map(|_| "-{}").collect();
                    self.line(&format!(
                        "ctx.resource::<SideEffects>().record(format!(\"e{site}-{{tick}}{holes}\", {}));",
                        path.join(", ")
                    ));
                }
            }
            Stmt::Acc { e, commut } => {
                if *commut {
                    self.line(&format!("acc = acc.wrapping_add({});", expr(e)));
                } else {
                    self.line(&format!(
                        "acc = acc.wrapping_mul(31).wrapping_add({});",
                        expr(e)
                    ));
                }
            }
            Stmt::Trace { site, e } => self.line(&format!(
                "trace.push(format!(\"t{site}:{{}}\", {}));",
                expr(e)
            )),
            Stmt::TraceStr { site, var } => {
                self.line(&format!("trace.push(format!(\"s{site}:{{}}\", {var}));"))
            }
            Stmt::Push { coll, e } => {
                let e = expr(e);
                let op = match coll {
                    Coll::V => format!("v.push({e})"),
                    Coll::Q => format!("q.push_back({e})"),
                    Coll::Bm => format!("bm.insert({} % 7, {e})", atom_s(&e)),
                    Coll::Hm => format!("hm.insert({} % 5 + 10, {e})", atom_s(&e)),
                    Coll::Hs => format!("hs.insert({} % 9)", atom_s(&e)),
                };
                self.line(&format!(
                    "if {}.len() < {} {{ {op}; }}",
                    coll.name(),
                    COLL_CAP
                ));
            }
            Stmt::Pop { coll, e } => {
                let e = expr(e);
                let op = match coll {
                    Coll::V => "v.pop()".to_owned(),
                    Coll::Q => "q.pop_front()".to_owned(),
                    Coll::Bm => format!("bm.remove(&({} % 7))", atom_s(&e)),
                    Coll::Hm => format!("hm.remove(&({} % 5 + 10))", atom_s(&e)),
                    // `take` looks one value up: order-free, so the save of
                    // `hs` after it must not be refused.
                    Coll::Hs => format!("hs.take(&({} % 9))", atom_s(&e)),
                };
                self.line(&format!("acc = acc.wrapping_add({op}.unwrap_or(3));"));
            }
            Stmt::WriteThrough { target, e } => self.line(&format!(
                "*{target} = (*{target}).wrapping_add({});",
                expr(e)
            )),
            Stmt::Let { name, mutable, e } => {
                let m = if *mutable { "mut " } else { "" };
                self.line(&format!("let {m}{name}: u64 = {};", expr(e)))
            }
            Stmt::Assign { name, e } => self.line(&format!("{name} = {};", expr(e))),
            Stmt::ShadowStr { name } => {
                self.line(&format!("let {name} = format!(\"<{{{name}}}>\");"))
            }
            Stmt::ShadowInt { name, e } => {
                self.line(&format!("let {name} = {name}.wrapping_add({});", expr(e)))
            }
            Stmt::LetJob { name, e } => self.line(&format!("let {name} = mk_job({});", expr(e))),
            Stmt::LetOpt { name, e } => {
                let e = expr(e);
                self.line(&format!(
                    "let {name}: Option<u64> = if {} % 3 == 0 {{ None }} else {{ Some({e}) }};",
                    atom_s(&e)
                ))
            }
            Stmt::MoveJob { name, moved } => {
                self.line(&format!("let {moved} = {name};"));
                self.line(&format!("trace.push(format!(\"{{{moved}:?}}\"));"));
            }
            Stmt::LetConn { name, k } => {
                if wf {
                    self.line("#[transient]");
                }
                self.line(&format!("let {name} = Conn::open({k});"));
            }
            Stmt::LetClosure { name, k } => {
                if wf {
                    self.line("#[transient]");
                }
                self.line(&format!(
                    "let {name} = move |a: u64| a.wrapping_mul({k}).wrapping_add(1);"
                ));
            }
            Stmt::Chain { coll, k, m } => {
                let items = match coll {
                    Coll::Bm | Coll::Hm => format!("{}.values()", coll.name()),
                    _ => format!("{}.iter()", coll.name()),
                };
                self.line(&format!(
                    "acc = acc.wrapping_add({items}.map(|x| x.wrapping_mul({k})).filter(|x| x % {m} != 0).fold(0u64, |s, x| s.wrapping_add(x)));"
                ));
            }
            Stmt::Deferred {
                name,
                cond: c,
                then,
                a,
                els,
                b,
            } => {
                self.line(&format!("let {name}: u64;"));
                self.block(
                    &format!("if {}", cond(c)),
                    then,
                    &format!("{name} = {};", expr(a)),
                );
                self.block("} else", els, &format!("{name} = {};", expr(b)));
                self.line("}");
            }
            Stmt::If { cond: c, then, els } => {
                self.block(&format!("if {}", cond(c)), then, "");
                if let Some(e) = els {
                    self.block("} else", e, "");
                }
                self.line("}");
            }
            Stmt::Block(b) => {
                self.block("", b, "");
                self.line("}");
            }
            Stmt::For { label, kind, body } => {
                if for_is_hash(kind) {
                    self.line("tick += 1;");
                }
                let head = match kind {
                    ForKind::Range { var, hi } => format!("for {var} in 0..{hi}u64"),
                    ForKind::RangeLen { var, coll } => {
                        format!("for {var} in 0..{}.len()", coll.name())
                    }
                    ForKind::Ref {
                        coll,
                        key,
                        var,
                        amp,
                    } => {
                        let bind = if coll.is_map() {
                            format!("({key}, {var})")
                        } else {
                            var.clone()
                        };
                        if *amp {
                            format!("for {bind} in &{}", coll.name())
                        } else {
                            format!("for {bind} in {}.iter()", coll.name())
                        }
                    }
                    ForKind::IterMut { coll, key, var } => {
                        let bind = if coll.is_map() {
                            format!("({key}, {var})")
                        } else {
                            var.clone()
                        };
                        format!("for {bind} in {}.iter_mut()", coll.name())
                    }
                    ForKind::IntoIter {
                        coll,
                        key,
                        var,
                        explicit,
                        clone,
                    } => {
                        let bind = if coll.is_map() {
                            format!("({key}, {var})")
                        } else {
                            var.clone()
                        };
                        if !clone && coll.is_map() {
                            format!(
                                "for {bind} in {}.iter().map(|(k, x)| (*k, *x)).collect::<Vec<_>>()",
                                coll.name()
                            )
                        } else if !clone {
                            format!(
                                "for {bind} in {}.iter().copied().collect::<Vec<_>>()",
                                coll.name()
                            )
                        } else if *explicit {
                            format!("for {bind} in {}.clone().into_iter()", coll.name())
                        } else {
                            format!("for {bind} in {}.clone()", coll.name())
                        }
                    }
                    ForKind::Drain { coll, var } => {
                        format!("for {var} in {}.drain(..)", coll.name())
                    }
                    ForKind::Chunks { var, n } => format!("for {var} in v.chunks({n})"),
                    ForKind::Zip { a, b } => format!("for ({a}, {b}) in v.iter().zip(q.iter())"),
                    ForKind::Filter { coll, var, m } => format!(
                        "for {var} in {}.iter().filter(|x| **x % {m} != 0)",
                        coll.name()
                    ),
                    ForKind::Enumerate { coll, idx, var } => {
                        format!("for ({idx}, {var}) in {}.iter().enumerate()", coll.name())
                    }
                };
                self.block(&format!("{}{head}", label_prefix(label)), body, "");
                self.line("}");
            }
            Stmt::While {
                label,
                fuel,
                bound,
                body,
            } => {
                self.line(&format!("let mut {fuel}: u64 = 0;"));
                self.line(&format!("{}while {fuel} < {bound} {{", label_prefix(label)));
                self.indent += 1;
                self.line(&format!("{fuel} += 1;"));
                self.stmts(body);
                self.indent -= 1;
                self.line("}");
            }
            Stmt::WhileLet {
                label,
                coll,
                var,
                fuel,
                bound,
                body,
            } => {
                let pop = match coll {
                    Coll::Q => "q.pop_front()",
                    _ => "v.pop()",
                };
                self.line(&format!("let mut {fuel}: u64 = 0;"));
                self.line(&format!(
                    "{}while let Some({var}) = {pop} {{",
                    label_prefix(label)
                ));
                self.indent += 1;
                self.line(&format!("{fuel} += 1;"));
                self.line(&format!("if {fuel} > {bound} {{ break; }}"));
                self.stmts(body);
                self.indent -= 1;
                self.line("}");
            }
            Stmt::Loop {
                label,
                fuel,
                bound,
                value,
                body,
            } => {
                self.line(&format!("let mut {fuel}: u64 = 0;"));
                let head = match value {
                    Some(r) => format!("let {r}: u64 = {}loop {{", label_prefix(label)),
                    None => format!("{}loop {{", label_prefix(label)),
                };
                self.line(&head);
                self.indent += 1;
                self.line(&format!("{fuel} += 1;"));
                if value.is_some() {
                    self.line(&format!(
                        "if {fuel} > {bound} {{ break{} {fuel}; }}",
                        label_ref(label)
                    ));
                } else {
                    self.line(&format!("if {fuel} > {bound} {{ break; }}"));
                }
                self.stmts(body);
                self.indent -= 1;
                if let Some(r) = value {
                    self.line("};");
                    self.line(&format!("acc = acc.wrapping_mul(31).wrapping_add({r});"));
                } else {
                    self.line("}");
                }
            }
            Stmt::BreakIf {
                cond: c,
                label,
                value,
            } => {
                let v = match value {
                    Some(e) => format!(" {}", expr(e)),
                    None => String::new(),
                };
                self.line(&format!(
                    "if {} {{ break{}{v}; }}",
                    cond(c),
                    label_ref(label)
                ))
            }
            Stmt::ContinueIf { cond: c, label } => self.line(&format!(
                "if {} {{ continue{}; }}",
                cond(c),
                label_ref(label)
            )),
            Stmt::Match {
                job,
                scrut: sc,
                arms,
            } => {
                self.line(&format!("match {} {{", scrut(job, *sc)));
                self.indent += 1;
                for (p, body) in arms {
                    self.block(&format!("{} =>", pat(p)), body, "");
                    self.line("}");
                }
                self.indent -= 1;
                self.line("}");
            }
            Stmt::IfLetJob {
                job,
                scrut: sc,
                pat: p,
                then,
                els,
            } => {
                self.block(
                    &format!("if let {} = {}", pat(p), scrut(job, *sc)),
                    then,
                    "",
                );
                self.block("} else", els, "");
                self.line("}");
            }
            Stmt::IfLetOpt {
                opt,
                bind,
                then,
                els,
            } => {
                self.block(&format!("if let Some({bind}) = &{opt}"), then, "");
                self.block("} else", els, "");
                self.line("}");
            }
            Stmt::LetElse {
                job,
                pat: p,
                diverge,
            } => {
                self.line(&format!("let {} = {job}.clone() else {{", pat(p)));
                self.indent += 1;
                self.stmt(diverge);
                self.indent -= 1;
                self.line("};");
            }
            Stmt::Diverge(d) => match d {
                Divergence::Continue => self.line("continue;"),
                Divergence::Return => {
                    let r = self.ret();
                    self.line(r)
                }
            },
            Stmt::Machine {
                st,
                fuel,
                bound,
                n,
                m,
                start,
                a,
                b,
            } => {
                self.line(&format!("let mut {st} = S::Start;"));
                self.line(&format!("let mut {fuel}: u64 = 0;"));
                self.line("loop {");
                self.indent += 1;
                self.line(&format!("{fuel} += 1;"));
                self.line(&format!("if {fuel} > {bound} {{ break; }}"));
                self.line(&format!("{st} = match {st} {{"));
                self.indent += 1;
                self.block("S::Start =>", start, "S::A { n: acc % 5 }");
                self.line("}");
                self.block(
                    &format!("S::A {{ n: {n} }} =>"),
                    a,
                    &format!("S::B({n}.wrapping_add(1))"),
                );
                self.line("}");
                self.block(
                    &format!("S::B({m}) =>"),
                    b,
                    &format!("if {m} % 3 == 0 {{ S::Done }} else {{ S::A {{ n: {m} }} }}"),
                );
                self.line("}");
                self.line("S::Done => break,");
                self.indent -= 1;
                self.line("};");
                self.line(&format!("trace.push(format!(\"{{{st}:?}}\"));"));
                self.indent -= 1;
                self.line("}");
            }
            Stmt::ReturnIf { cond: c } => {
                let r = self.ret();
                self.line(&format!("if {} {{ {r} }}", cond(c)))
            }
            Stmt::Try { name, e } => self.line(&format!("let {name}: u64 = check({})?;", expr(e))),
            Stmt::Wait { kind, name, bind } => {
                let call = wait_call(name, kind);
                match (bind, kind) {
                    (None, _) => self.line(&format!("{call};")),
                    (Some(b), Wait::For) => self.line(&format!("let {b}: u64 = {call};")),
                    (Some(b), Wait::Timeout { .. }) => {
                        self.line(&format!("let {b}: Option<u64> = {call};"))
                    }
                }
            }
            Stmt::WaitScrutinee {
                name,
                scripted,
                bind,
                if_let,
                some,
                none,
            } => {
                let call = wait_call(
                    name,
                    &Wait::Timeout {
                        scripted: *scripted,
                    },
                );
                if *if_let {
                    self.block(&format!("if let Some({bind}) = {call}"), some, "");
                    self.block("} else", none, "");
                    self.line("}");
                } else {
                    self.line(&format!("match {call} {{"));
                    self.indent += 1;
                    self.block(&format!("Some({bind}) =>"), some, "");
                    self.line("}");
                    self.block("None =>", none, "");
                    self.line("}");
                    self.indent -= 1;
                    self.line("}");
                }
            }
            Stmt::Sleep => self.line("ctx.sleep(Duration::from_millis(1)).await;"),
            Stmt::HashObserve { site, how } => {
                if wf {
                    self.line("checkpoint!();");
                }
                let it = |base: &str| {
                    if wf {
                        base.to_owned()
                    } else {
                        format!("canon({base})")
                    }
                };
                let v = format!("ho{site}");
                match how {
                    0 => self.line(&format!(
                        "let {v}: u64 = {}.next().copied().unwrap_or(0);",
                        it("hs.iter()")
                    )),
                    1 => self.line(&format!(
                        "let {v}: u64 = {}.max_by_key(|(_, x)| **x % 3).map(|(k, _)| *k).unwrap_or(0);",
                        it("hm.iter()")
                    )),
                    2 => {
                        // Built outside the macro: what `format!` iterates is
                        // not rewritten (and would be refused).
                        self.line(&format!(
                            "let {v}: Vec<u64> = {}.copied().collect::<Vec<_>>();",
                            it("hm.keys()")
                        ));
                        self.line(&format!("trace.push(format!(\"h{site}:{{:?}}\", {v}));"));
                    }
                    _ => self.line(&format!(
                        "let {v}: u64 = {}.copied().fold(0u64, |a, x| a.wrapping_mul(31).wrapping_add(x));",
                        it("hs.iter()")
                    )),
                }
                if *how != 2 {
                    self.line(&format!("acc = acc.wrapping_mul(31).wrapping_add({v});"));
                }
            }
            Stmt::HashHelper { site, how } => {
                if wf {
                    self.line("checkpoint!();");
                }
                match how {
                    0 => self.line("acc = acc.wrapping_mul(31).wrapping_add(first_of(&hs));"),
                    1 => self.line("acc = acc.wrapping_mul(31).wrapping_add(first_key(&hm));"),
                    _ => self.line(&format!("trace.push(format!(\"h{site}:{{:?}}\", hs));")),
                }
            }
            Stmt::SharedHandle { id } => {
                self.line("{");
                self.indent += 1;
                self.line(&format!("let sh{id} = Arc::new(Mutex::new(acc % 1000));"));
                self.line(&format!("let shb{id} = Arc::clone(&sh{id});"));
                self.line(&format!("*sh{id}.lock().unwrap() += 1;"));
                if wf {
                    self.line("checkpoint!();");
                }
                self.line(&format!("*sh{id}.lock().unwrap() += 2;"));
                self.line(&format!(
                    "acc = acc.wrapping_add(*shb{id}.lock().unwrap());"
                ));
                self.indent -= 1;
                self.line("}");
            }
            Stmt::TransientCell { id } => {
                self.line("{");
                self.indent += 1;
                self.line(&format!("let base{id} = std::cell::Cell::new(acc % 7);"));
                if wf {
                    self.line("#[transient]");
                }
                self.line(&format!("let off{id} = base{id}.get();"));
                self.line(&format!("base{id}.set(base{id}.get() + 1);"));
                if wf {
                    self.line("checkpoint!();");
                }
                self.line(&format!("acc = acc.wrapping_add(off{id});"));
                self.indent -= 1;
                self.line("}");
            }
            Stmt::TransientStateful { id, k, n } => {
                self.line("{");
                self.indent += 1;
                if wf {
                    self.line("#[transient]");
                }
                self.line(&format!("let ctr{id} = Counter::new({k});"));
                self.line(&format!("for _i{id} in 0..{n}u64 {{"));
                self.indent += 1;
                self.line(&format!("ctr{id}.bump();"));
                if wf {
                    self.line("checkpoint!();");
                }
                self.indent -= 1;
                self.line("}");
                self.line(&format!("acc = acc.wrapping_add(ctr{id}.get());"));
                self.indent -= 1;
                self.line("}");
            }
        }
    }
}

fn atom_s(e: &str) -> String {
    if e.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        if e.chars().all(|c| c.is_ascii_digit()) {
            format!("{e}u64")
        } else {
            e.to_owned()
        }
    } else {
        format!("({e})")
    }
}

/// The most elements an insertion leaves in a collection.
pub const COLL_CAP: usize = 6;

// ---------------------------------------------------------------------------
// Generator

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Int,
    Str,
    Job,
    Opt,
}

#[derive(Clone, Debug)]
struct Var {
    name: String,
    ty: Ty,
    /// How to read it as a `u64` (Int only).
    read: String,
    /// A plain `let mut` that may be assigned.
    mutable: bool,
    /// Block it was declared in (moves/shadowing only there).
    block: u32,
    /// Reading it needs this collection not to be mutably borrowed.
    needs: Option<Coll>,
    /// Declared inside the current hash loop body (may change there).
    local_to_hash: bool,
}

#[derive(Clone, Debug)]
struct LoopInfo {
    label: Option<String>,
    /// A `loop` whose `break` carries a value.
    value: bool,
    /// `continue` would skip the state machine's assignment.
    no_continue: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Borrow {
    Shared,
    Mut,
    GrowOnly,
}

#[derive(Clone, Debug)]
struct Env {
    vars: Vec<Var>,
    loops: Vec<LoopInfo>,
    borrows: Vec<(Coll, Borrow)>,
    /// Inside a hash loop: the effect path (loop keys and inner indices).
    hash: Option<Vec<String>>,
    mult: i64,
    depth: u32,
    block: u32,
    no_cp: bool,
    /// Inside a state machine arm.
    in_machine: bool,
    /// Index in `loops` of the outermost enclosing hash loop: leaving it
    /// early (`break`, or `continue` of an outer loop) would depend on the
    /// iteration order.
    hash_loop: Option<usize>,
}

impl Env {
    fn borrow(&self, c: Coll) -> Option<Borrow> {
        self.borrows
            .iter()
            .rev()
            .find(|(x, _)| *x == c)
            .map(|(_, b)| *b)
    }
    fn can_read(&self, c: Coll) -> bool {
        self.borrow(c) != Some(Borrow::Mut)
    }
    fn can_grow(&self, c: Coll) -> bool {
        matches!(self.borrow(c), None | Some(Borrow::GrowOnly))
    }
    fn can_shrink(&self, c: Coll) -> bool {
        self.borrow(c).is_none()
    }
    fn can_iter_mut(&self, c: Coll) -> bool {
        self.borrows.iter().all(|(x, _)| *x != c)
    }
    /// Visible variables (the last of each name).
    fn visible(&self) -> Vec<&Var> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for v in self.vars.iter().rev() {
            if seen.insert(v.name.clone()) {
                out.push(v);
            }
        }
        out
    }
    fn ints(&self) -> Vec<&Var> {
        self.visible()
            .into_iter()
            .filter(|v| v.ty == Ty::Int && v.needs.is_none_or(|c| self.can_read(c)))
            .collect()
    }
}

struct Gen {
    rng: Rng,
    forms: Forms,
    next_id: u32,
    size_left: i64,
    budget: i64,
    result: bool,
    block_counter: u32,
}

/// The largest number of loop iterations assumed for a collection loop.
const COLL_ITER: i64 = 9;

impl Gen {
    fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }
    fn on(&self, f: &str) -> bool {
        self.forms.on(f)
    }

    fn expr(&mut self, env: &Env, depth: u32) -> Expr {
        let r = self.rng.below(10);
        if depth >= 2 || r < 3 {
            return self.leaf(env);
        }
        match r {
            3..=5 => Expr::Add(
                Box::new(self.expr(env, depth + 1)),
                Box::new(self.expr(env, depth + 1)),
            ),
            6 | 7 => Expr::Mul(Box::new(self.expr(env, depth + 1)), self.rng.range(2, 9)),
            8 => Expr::Rem(Box::new(self.expr(env, depth + 1)), self.rng.range(2, 11)),
            _ => self.leaf(env),
        }
    }

    fn leaf(&mut self, env: &Env) -> Expr {
        let ints = env.ints();
        let r = self.rng.below(10);
        if r < 2 || (ints.is_empty() && r < 8) {
            return Expr::Lit(self.rng.range(0, 20));
        }
        if r < 3 {
            let c = [Coll::V, Coll::Q, Coll::Bm, Coll::Hm, Coll::Hs][self.rng.below(5)];
            if env.can_read(c) {
                return Expr::Len(c);
            }
        }
        if r < 5 && env.hash.is_none() {
            return Expr::Read(if self.rng.chance(50) { "acc" } else { "tick" }.into());
        }
        if ints.is_empty() {
            return Expr::Read("tick".into());
        }
        let v = ints[self.rng.below(ints.len())];
        Expr::Read(v.read.clone())
    }

    fn cond(&mut self, env: &Env) -> Cond {
        let m = self.rng.range(2, 4);
        Cond {
            e: self.expr(env, 1),
            m,
            r: self.rng.range(0, m - 1),
        }
    }

    fn block(&mut self, env: &Env, n: usize) -> Vec<Stmt> {
        let mut env = env.clone();
        self.block_counter += 1;
        env.block = self.block_counter;
        env.depth += 1;
        let mut out = Vec::new();
        for _ in 0..n {
            if self.size_left <= 0 {
                break;
            }
            self.stmt(&mut env, &mut out);
        }
        out
    }

    fn body_len(&mut self) -> usize {
        self.rng.range(1, 4) as usize
    }

    fn cp_cost(&mut self, env: &Env, weight: i64) -> bool {
        if env.no_cp {
            return false;
        }
        let c = env.mult * weight;
        if c <= self.budget {
            self.budget -= c;
            true
        } else {
            false
        }
    }

    fn fresh(&mut self, p: &str) -> String {
        let id = self.id();
        format!("{p}{id}")
    }

    fn int_var(&self, env: &Env, name: &str, read: &str, needs: Option<Coll>) -> Var {
        Var {
            name: name.to_owned(),
            ty: Ty::Int,
            read: read.to_owned(),
            mutable: false,
            block: env.block,
            needs,
            local_to_hash: env.hash.is_some(),
        }
    }

    fn label(&mut self) -> Option<String> {
        if self.on("labels") && self.rng.chance(50) {
            Some(self.fresh("l"))
        } else {
            None
        }
    }

    /// Pushes one statement (sometimes a few) for `env`.
    fn stmt(&mut self, env: &mut Env, out: &mut Vec<Stmt>) {
        self.size_left -= 1;
        if let Some(s) = self.exactness_form(env) {
            out.push(s);
            return;
        }
        for _attempt in 0..20 {
            let pick = self.rng.below(100);
            if let Some(s) = self.try_stmt(env, pick, out) {
                out.push(s);
                return;
            }
        }
        out.push(Stmt::Acc {
            e: Expr::Lit(1),
            commut: true,
        });
    }

    fn try_stmt(&mut self, env: &mut Env, pick: usize, out: &mut Vec<Stmt>) -> Option<Stmt> {
        let hash = env.hash.is_some();
        let compound_ok = env.depth < 4 && self.size_left > 2;
        match pick {
            0..=11 => {
                if self.cp_cost(env, 1) {
                    let l = if self.rng.chance(50) {
                        Some(self.fresh("c"))
                    } else {
                        None
                    };
                    Some(Stmt::Checkpoint(l))
                } else {
                    None
                }
            }
            12..=19 if self.on("effects") => {
                let site = self.id();
                Some(Stmt::Effect {
                    site,
                    path: env.hash.clone().unwrap_or_default(),
                })
            }
            20..=25 => {
                let e = self.expr(env, 0);
                Some(Stmt::Acc { e, commut: hash })
            }
            26..=28 if !hash => {
                let site = self.id();
                let strs: Vec<String> = env
                    .visible()
                    .iter()
                    .filter(|v| v.ty == Ty::Str)
                    .map(|v| v.name.clone())
                    .collect();
                if !strs.is_empty() && self.rng.chance(50) {
                    let var = strs[self.rng.below(strs.len())].clone();
                    return Some(Stmt::TraceStr { site, var });
                }
                let e = self.expr(env, 0);
                Some(Stmt::Trace { site, e })
            }
            29..=31 if !hash => {
                let c = [Coll::V, Coll::Q, Coll::Bm, Coll::Hm, Coll::Hs][self.rng.below(5)];
                if !env.can_grow(c) {
                    return None;
                }
                let e = self.expr(env, 0);
                Some(Stmt::Push { coll: c, e })
            }
            32 if !hash => {
                let c = [Coll::V, Coll::Q, Coll::Bm, Coll::Hm, Coll::Hs][self.rng.below(5)];
                if !env.can_shrink(c) {
                    return None;
                }
                let e = self.expr(env, 0);
                Some(Stmt::Pop { coll: c, e })
            }
            33..=36 => {
                // let / shadow / assign
                let mutable = !hash && self.rng.chance(40);
                let name = self.fresh("x");
                let e = self.expr(env, 0);
                let mut var = self.int_var(env, &name, &name, None);
                var.mutable = mutable;
                env.vars.push(var);
                Some(Stmt::Let { name, mutable, e })
            }
            37 | 38 => {
                let cands: Vec<Var> = env
                    .visible()
                    .into_iter()
                    .filter(|v| v.ty == Ty::Int && v.read == v.name)
                    .cloned()
                    .collect();
                if cands.is_empty() {
                    return None;
                }
                let v = cands[self.rng.below(cands.len())].clone();
                if !hash && v.mutable && self.rng.chance(50) {
                    let e = self.expr(env, 0);
                    return Some(Stmt::Assign { name: v.name, e });
                }
                if !self.on("shadow") || v.block != env.block {
                    return None;
                }
                if self.rng.chance(50) && !hash {
                    let mut nv = v.clone();
                    nv.ty = Ty::Str;
                    nv.mutable = false;
                    env.vars.push(nv);
                    Some(Stmt::ShadowStr { name: v.name })
                } else {
                    let e = self.expr(env, 0);
                    let mut nv = v.clone();
                    nv.mutable = false;
                    env.vars.push(nv);
                    Some(Stmt::ShadowInt { name: v.name, e })
                }
            }
            39..=41 if compound_ok => {
                let c = self.cond(env);
                let n = self.body_len();
                let then = self.block(env, n);
                let els = if self.rng.chance(50) {
                    let n = self.body_len();
                    Some(self.block(env, n))
                } else {
                    None
                };
                Some(Stmt::If { cond: c, then, els })
            }
            42 if compound_ok && self.on("block") => {
                let n = self.body_len();
                Some(Stmt::Block(self.block(env, n)))
            }
            43..=58 if compound_ok => self.gen_for(env),
            59..=61 if compound_ok && self.on("while") && !hash => {
                let bound = self.rng.range(1, 3);
                let fuel = self.fresh("g");
                let label = self.label();
                let mut inner = env.clone();
                inner.mult *= bound as i64;
                inner.loops.push(LoopInfo {
                    label: label.clone(),
                    value: false,
                    no_continue: false,
                });
                inner.vars.push(self.int_var(env, &fuel, &fuel, None));
                let n = self.body_len();
                let body = self.block(&inner, n);
                Some(Stmt::While {
                    label,
                    fuel,
                    bound,
                    body,
                })
            }
            62..=63 if compound_ok && self.on("while_let") && !hash => {
                let coll = if self.rng.chance(50) {
                    Coll::V
                } else {
                    Coll::Q
                };
                if !env.can_shrink(coll) {
                    return None;
                }
                let bound = self.rng.range(1, 3);
                let fuel = self.fresh("g");
                let var = self.fresh("p");
                let label = self.label();
                let mut inner = env.clone();
                inner.mult *= bound as i64;
                inner.loops.push(LoopInfo {
                    label: label.clone(),
                    value: false,
                    no_continue: false,
                });
                inner.vars.push(self.int_var(env, &fuel, &fuel, None));
                inner.vars.push(self.int_var(env, &var, &var, None));
                let n = self.body_len();
                let body = self.block(&inner, n);
                Some(Stmt::WhileLet {
                    label,
                    coll,
                    var,
                    fuel,
                    bound,
                    body,
                })
            }
            64..=65 if compound_ok && self.on("loop_value") && !hash => {
                let bound = self.rng.range(1, 3);
                let fuel = self.fresh("g");
                let label = self.label();
                let value = if self.rng.chance(60) {
                    Some(self.fresh("r"))
                } else {
                    None
                };
                let mut inner = env.clone();
                inner.mult *= bound as i64;
                inner.loops.push(LoopInfo {
                    label: label.clone(),
                    value: value.is_some(),
                    no_continue: false,
                });
                inner.vars.push(self.int_var(env, &fuel, &fuel, None));
                let n = self.body_len();
                let body = self.block(&inner, n);
                if let Some(r) = &value {
                    let _ = r;
                }
                Some(Stmt::Loop {
                    label,
                    fuel,
                    bound,
                    value,
                    body,
                })
            }
            66..=68 if !env.loops.is_empty() => {
                // break / continue to some enclosing loop
                let i = self.rng.below(env.loops.len());
                let target = &env.loops[i];
                let innermost = i == env.loops.len() - 1;
                if target.label.is_none() && !innermost {
                    return None;
                }
                let label = if innermost && self.rng.chance(50) {
                    None
                } else {
                    target.label.clone()
                };
                if label.is_none() && !innermost {
                    return None;
                }
                let value_loop = target.value;
                let mut no_continue = target.no_continue;
                let mut no_break = false;
                if let Some(h) = env.hash_loop {
                    if i < h {
                        return None;
                    }
                    if i == h {
                        no_break = true;
                    }
                }
                if no_break && no_continue {
                    return None;
                }
                if no_break {
                    no_continue = false;
                }
                let c = self.cond(env);
                if !no_break && (no_continue || self.rng.chance(50)) {
                    let value = if value_loop {
                        Some(self.expr(env, 1))
                    } else {
                        None
                    };
                    Some(Stmt::BreakIf {
                        cond: c,
                        label,
                        value,
                    })
                } else {
                    Some(Stmt::ContinueIf { cond: c, label })
                }
            }
            69..=73 if compound_ok && !hash => self.gen_job(env, out),
            74 if compound_ok && self.on("if_let_ref_opt") && !hash => {
                let opt = self.fresh("o");
                let e = self.expr(env, 0);
                out.push(Stmt::LetOpt {
                    name: opt.clone(),
                    e,
                });
                let bind = self.fresh("r");
                let mut inner = env.clone();
                if !self.on("cp_if_let_ref") {
                    inner.no_cp = true;
                }
                inner
                    .vars
                    .push(self.int_var(env, &bind, &format!("*{bind}"), None));
                let n = self.body_len();
                let then = self.block(&inner, n);
                let mut outer = env.clone();
                outer.no_cp = inner.no_cp;
                let n = self.body_len();
                let els = self.block(&outer, n);
                Some(Stmt::IfLetOpt {
                    opt,
                    bind,
                    then,
                    els,
                })
            }
            75 | 76 if compound_ok && self.on("state_machine") && !hash => {
                let st = self.fresh("st");
                let fuel = self.fresh("g");
                let n = self.fresh("n");
                let m = self.fresh("m");
                let bound = self.rng.range(2, 5);
                let mut inner = env.clone();
                inner.mult *= bound as i64;
                inner.loops.push(LoopInfo {
                    label: None,
                    value: false,
                    no_continue: true,
                });
                if !self.on("cp_state_machine") {
                    inner.no_cp = true;
                }
                inner.in_machine = true;
                let k = self.body_len();
                let start = self.block(&inner, k);
                let mut ia = inner.clone();
                ia.vars.push(self.int_var(env, &n, &n, None));
                let k = self.body_len();
                let a = self.block(&ia, k);
                let mut ib = inner.clone();
                ib.vars.push(self.int_var(env, &m, &m, None));
                let k = self.body_len();
                let b = self.block(&ib, k);
                Some(Stmt::Machine {
                    st,
                    fuel,
                    bound,
                    n,
                    m,
                    start,
                    a,
                    b,
                })
            }
            77 | 78 if self.on("early_return") && !hash => {
                // rare: condition must be unlikely-ish
                let mut c = self.cond(env);
                c.m = self.rng.range(5, 9);
                c.r = 0;
                Some(Stmt::ReturnIf { cond: c })
            }
            79 | 80 if self.on("try") && self.result && !hash => {
                let name = self.fresh("z");
                let e = self.expr(env, 0);
                env.vars.push(self.int_var(env, &name, &name, None));
                Some(Stmt::Try { name, e })
            }
            81 | 82 if compound_ok && self.on("deferred_let") && !hash => {
                let name = self.fresh("d");
                let c = self.cond(env);
                let mut inner = env.clone();
                if !self.on("cp_deferred_let") {
                    inner.no_cp = true;
                }
                let n = self.body_len();
                let then = self.block(&inner, n);
                let a = self.expr(env, 0);
                let n = self.body_len();
                let els = self.block(&inner, n);
                let b = self.expr(env, 0);
                env.vars.push(self.int_var(env, &name, &name, None));
                Some(Stmt::Deferred {
                    name,
                    cond: c,
                    then,
                    a,
                    els,
                    b,
                })
            }
            83 if self.on("transient") => {
                let name = self.fresh("conn");
                let k = self.rng.range(1, 9);
                let read = format!("{name}.query({})", self.rng.range(0, 9));
                env.vars.push(self.int_var(env, &name, &read, None));
                Some(Stmt::LetConn { name, k })
            }
            84 if self.on("transient_closure") => {
                let name = self.fresh("f");
                let k = self.rng.range(2, 9);
                let read = format!("{name}({})", self.rng.range(0, 9));
                env.vars.push(self.int_var(env, &name, &read, None));
                Some(Stmt::LetClosure { name, k })
            }
            85 | 86 if self.on("closure_chain") => {
                let c = [Coll::V, Coll::Q, Coll::Bm, Coll::Hm, Coll::Hs][self.rng.below(5)];
                if !env.can_read(c) {
                    return None;
                }
                Some(Stmt::Chain {
                    coll: c,
                    k: self.rng.range(1, 9),
                    m: self.rng.range(2, 5),
                })
            }
            87..=90 if !hash && (self.on("wait_for") || self.on("wait_timeout")) => {
                let timeout = if !self.on("wait_for") {
                    true
                } else if !self.on("wait_timeout") {
                    false
                } else {
                    self.rng.chance(50)
                };
                let scripted = !timeout || self.rng.chance(50);
                let weight = if scripted { 2 } else { 6 };
                if !self.cp_cost(env, weight) {
                    return None;
                }
                let id = self.id();
                let name = format!("{}{id}", if timeout { "t" } else { "w" });
                let kind = if timeout {
                    Wait::Timeout { scripted }
                } else {
                    Wait::For
                };
                if timeout && compound_ok && self.on("wait_scrutinee") && self.rng.chance(40) {
                    let bind = self.fresh("s");
                    let mut inner = env.clone();
                    inner.vars.push(self.int_var(env, &bind, &bind, None));
                    let n = self.body_len();
                    let some = self.block(&inner, n);
                    let n = self.body_len();
                    let none = self.block(env, n);
                    return Some(Stmt::WaitScrutinee {
                        name,
                        scripted,
                        bind,
                        if_let: self.rng.chance(50),
                        some,
                        none,
                    });
                }
                let bind = if self.rng.chance(70) {
                    Some(self.fresh("w"))
                } else {
                    None
                };
                if let Some(b) = &bind {
                    if timeout {
                        env.vars.push(Var {
                            ty: Ty::Opt,
                            ..self.int_var(env, b, b, None)
                        });
                    } else {
                        env.vars.push(self.int_var(env, b, b, None));
                    }
                }
                Some(Stmt::Wait { kind, name, bind })
            }
            91 | 92 if self.on("sleep") => {
                if self.cp_cost(env, 6) {
                    Some(Stmt::Sleep)
                } else {
                    None
                }
            }
            93..=95 if env.hash.is_none() => {
                // use an Option local: fold it into acc
                let opts: Vec<String> = env
                    .visible()
                    .iter()
                    .filter(|v| v.ty == Ty::Opt)
                    .map(|v| v.name.clone())
                    .collect();
                if opts.is_empty() {
                    return None;
                }
                let o = opts[self.rng.below(opts.len())].clone();
                Some(Stmt::Acc {
                    e: Expr::Read(format!("{o}.unwrap_or(7)")),
                    commut: false,
                })
            }
            96..=99 => {
                // write through an iter_mut binding, if any
                let muts: Vec<String> = env
                    .visible()
                    .iter()
                    .filter(|v| v.ty == Ty::Int && v.read.starts_with("*") && v.mutable)
                    .map(|v| v.name.clone())
                    .collect();
                if muts.is_empty() {
                    return None;
                }
                let t = muts[self.rng.below(muts.len())].clone();
                let e = self.expr(env, 0);
                Some(Stmt::WriteThrough { target: t, e })
            }
            _ => None,
        }
    }

    /// The forms of issue 32 (exactness of values), rarely: outside hash
    /// loops (whose bodies must not depend on the order), each with its own
    /// checkpoint(s).
    fn exactness_form(&mut self, env: &Env) -> Option<Stmt> {
        let r = self.rng.below(1000);
        if env.hash.is_some() || r >= 46 {
            return None;
        }
        let hash_ok = env.can_read(Coll::Hm) && env.can_read(Coll::Hs);
        match r {
            0..=19 if self.on("hash_observe") && hash_ok && self.cp_cost(env, 1) => {
                Some(Stmt::HashObserve {
                    site: self.id(),
                    how: self.rng.below(4) as u8,
                })
            }
            20..=22 if self.on("hash_helper") && hash_ok && self.cp_cost(env, 1) => {
                Some(Stmt::HashHelper {
                    site: self.id(),
                    how: self.rng.below(3) as u8,
                })
            }
            23..=25 if self.on("shared_handle") && self.cp_cost(env, 1) => {
                Some(Stmt::SharedHandle { id: self.id() })
            }
            26..=35 if self.on("transient_cell") && self.cp_cost(env, 1) => {
                Some(Stmt::TransientCell { id: self.id() })
            }
            36..=45 if self.on("transient_stateful") => {
                let n = self.rng.range(1, 3);
                if !self.cp_cost(env, n as i64) {
                    return None;
                }
                Some(Stmt::TransientStateful {
                    id: self.id(),
                    k: self.rng.range(0, 9),
                    n,
                })
            }
            _ => None,
        }
    }

    fn gen_job(&mut self, env: &mut Env, out: &mut Vec<Stmt>) -> Option<Stmt> {
        // A job local, then match / if let / let else on it.
        let job = self.fresh("j");
        let e = self.expr(env, 0);
        out.push(Stmt::LetJob {
            name: job.clone(),
            e,
        });
        let which = self.rng.below(4);
        let pats = |g: &mut Gen| {
            vec![
                Pat::Idle,
                Pat::Small(g.fresh("n")),
                Pat::Pair(g.fresh("a"), g.fresh("b")),
                Pat::Named(g.fresh("id"), g.fresh("tag")),
            ]
        };
        let bind_pat = |g: &Gen, env: &Env, p: &Pat, by_ref: bool| -> Vec<Var> {
            let mk = |n: &str| {
                let read = if by_ref {
                    format!("*{n}")
                } else {
                    n.to_owned()
                };
                g.int_var(env, n, &read, None)
            };
            match p {
                Pat::Idle => vec![],
                Pat::Small(n) => vec![mk(n)],
                Pat::Pair(a, b) => vec![mk(a), mk(b)],
                Pat::Named(id, tag) => {
                    let mut t = mk(tag);
                    t.ty = Ty::Str;
                    vec![mk(id), t]
                }
            }
        };
        match which {
            0 | 1 if self.on("match_owned") || self.on("match_ref") => {
                let sc = if !self.on("match_ref") {
                    Scrut::Owned
                } else if !self.on("match_owned") {
                    Scrut::Ref
                } else {
                    [Scrut::Owned, Scrut::Ref, Scrut::Clone][self.rng.below(3)]
                };
                let mut arms = Vec::new();
                for p in pats(self) {
                    let mut inner = env.clone();
                    if sc == Scrut::Ref && !self.on("cp_match_ref") {
                        inner.no_cp = true;
                    }
                    inner.vars.extend(bind_pat(self, env, &p, sc == Scrut::Ref));
                    let n = self.body_len().min(2);
                    let b = self.block(&inner, n);
                    arms.push((p, b));
                }
                let cp_in_arms = arms.iter().any(|(_, b)| takes_checkpoint(b));
                let m = Stmt::Match {
                    job: job.clone(),
                    scrut: sc,
                    arms,
                };
                if sc == Scrut::Ref
                    && self.rng.chance(50)
                    && (!cp_in_arms || self.on("cp_match_ref_move"))
                {
                    out.push(m);
                    return Some(Stmt::MoveJob {
                        name: job,
                        moved: self.fresh("mv"),
                    });
                }
                if sc != Scrut::Owned {
                    env.vars.push(Var {
                        ty: Ty::Job,
                        ..self.int_var(env, &job, &job, None)
                    });
                }
                Some(m)
            }
            2 if self.on("if_let") => {
                let sc = [Scrut::Owned, Scrut::Ref, Scrut::Clone][self.rng.below(3)];
                let ps = pats(self);
                let p = ps[self.rng.below(4)].clone();
                let mut inner = env.clone();
                if sc == Scrut::Ref && !self.on("cp_if_let_ref") {
                    inner.no_cp = true;
                }
                inner.vars.extend(bind_pat(self, env, &p, sc == Scrut::Ref));
                let n = self.body_len();
                let then = self.block(&inner, n);
                let mut outer = env.clone();
                outer.no_cp = inner.no_cp;
                let n = self.body_len();
                let els = self.block(&outer, n);
                Some(Stmt::IfLetJob {
                    job,
                    scrut: sc,
                    pat: p,
                    then,
                    els,
                })
            }
            3 if self.on("let_else") => {
                let ps = pats(self);
                let p = ps[1 + self.rng.below(3)].clone();
                let diverge = if !env.loops.is_empty()
                    && !env.loops.last().is_some_and(|l| l.value)
                    && !env.in_machine
                {
                    Divergence::Continue
                } else if env.in_machine || !self.on("early_return") {
                    return None;
                } else {
                    Divergence::Return
                };
                env.vars.extend(bind_pat(self, env, &p, false));
                Some(Stmt::LetElse {
                    job,
                    pat: p,
                    diverge: Box::new(Stmt::Diverge(diverge)),
                })
            }
            _ => {
                env.vars.push(Var {
                    ty: Ty::Job,
                    ..self.int_var(env, &job, &job, None)
                });
                Some(Stmt::Trace {
                    site: self.id(),
                    e: Expr::Read(format!("job_value(&{job})")),
                })
            }
        }
    }

    fn gen_for(&mut self, env: &mut Env) -> Option<Stmt> {
        let hash = env.hash.is_some();
        let label = self.label();
        let mut inner = env.clone();
        inner.loops.push(LoopInfo {
            label: label.clone(),
            value: false,
            no_continue: false,
        });
        let pick = if hash { 0 } else { self.rng.below(14) };
        let colls = [Coll::V, Coll::Q, Coll::Bm, Coll::Hm, Coll::Hs];
        let kind = match pick {
            0 | 1 if self.on("for_range") => {
                let var = self.fresh("i");
                let hi = self.rng.range(1, 3);
                inner.mult *= hi as i64;
                inner.vars.push(self.int_var(env, &var, &var, None));
                if let Some(p) = &mut inner.hash {
                    p.push(var.clone());
                }
                ForKind::Range { var, hi }
            }
            2 if self.on("for_range_len") => {
                let coll = if self.rng.chance(50) {
                    Coll::V
                } else {
                    Coll::Q
                };
                if !env.can_read(coll) || env.borrow(coll) == Some(Borrow::GrowOnly) {
                    return None;
                }
                let var = self.fresh("i");
                inner.mult *= COLL_ITER;
                let grow = self.on("range_len_mutated") && env.can_grow(coll);
                inner.borrows.push((
                    coll,
                    if grow {
                        Borrow::GrowOnly
                    } else {
                        Borrow::Shared
                    },
                ));
                inner
                    .vars
                    .push(self.int_var(env, &var, &format!("({var} as u64)"), None));
                let el = format!("{var}_el");
                let _ = el;
                inner.vars.push(Var {
                    name: format!("{}[{var}]", coll.name()),
                    ..self.int_var(env, &var, &format!("{}[{var}]", coll.name()), Some(coll))
                });
                let n = self.body_len();
                let mut body = self.block(&inner, n);
                if grow && self.rng.chance(70) {
                    let at = self.rng.below(body.len() + 1);
                    body.insert(
                        at,
                        Stmt::Push {
                            coll,
                            e: Expr::Read(format!("({var} as u64)")),
                        },
                    );
                }
                return Some(Stmt::For {
                    label,
                    kind: ForKind::RangeLen { var, coll },
                    body,
                });
            }
            3..=5 => {
                let c = colls[self.rng.below(5)];
                if c.is_hash() && !self.on("for_hash") || c == Coll::Bm && !self.on("for_btree") {
                    return None;
                }
                if c.is_seq() && !self.on("for_ref") {
                    return None;
                }
                if !env.can_read(c) {
                    return None;
                }
                let key = self.fresh("k");
                let var = self.fresh("x");
                inner.borrows.push((c, Borrow::Shared));
                self.bind_items(env, &mut inner, c, &key, &var, "*", false);
                ForKind::Ref {
                    coll: c,
                    key,
                    var,
                    amp: self.rng.chance(50),
                }
            }
            6 if self.on("for_iter_mut") => {
                let c = [Coll::V, Coll::Q, Coll::Bm, Coll::Hm][self.rng.below(4)];
                if c.is_hash() && !self.on("for_hash") || !env.can_iter_mut(c) {
                    return None;
                }
                let key = self.fresh("k");
                let var = self.fresh("x");
                inner.borrows.push((c, Borrow::Mut));
                self.bind_items(env, &mut inner, c, &key, &var, "*", true);
                if !self.on("cp_iter_mut") {
                    inner.no_cp = true;
                }
                let n = self.body_len();
                let mut body = self.block(&inner, n);
                let at = self.rng.below(body.len() + 1);
                body.insert(
                    at,
                    Stmt::WriteThrough {
                        target: var.clone(),
                        e: Expr::Lit(self.rng.range(1, 5)),
                    },
                );
                return Some(Stmt::For {
                    label,
                    kind: ForKind::IterMut { coll: c, key, var },
                    body,
                });
            }
            7 if self.on("for_into_iter") => {
                let c = colls[self.rng.below(5)];
                if c.is_hash() && !self.on("for_hash") || !env.can_read(c) {
                    return None;
                }
                let key = self.fresh("k");
                let var = self.fresh("x");
                self.bind_items(env, &mut inner, c, &key, &var, "", false);
                let clone = !c.is_hash() || (self.on("hash_clone_for") && self.rng.chance(25));
                ForKind::IntoIter {
                    coll: c,
                    key,
                    var,
                    explicit: self.rng.chance(50),
                    clone,
                }
            }
            8 if self.on("for_drain") => {
                let c = if self.rng.chance(50) {
                    Coll::V
                } else {
                    Coll::Q
                };
                if !env.can_iter_mut(c) {
                    return None;
                }
                let var = self.fresh("x");
                inner.borrows.push((c, Borrow::Mut));
                inner.mult *= COLL_ITER;
                inner.vars.push(self.int_var(env, &var, &var, None));
                ForKind::Drain { coll: c, var }
            }
            9 if self.on("for_chunks") => {
                if !env.can_read(Coll::V) {
                    return None;
                }
                let var = self.fresh("c");
                inner.borrows.push((Coll::V, Borrow::Shared));
                inner.mult *= COLL_ITER;
                inner.vars.push(self.int_var(
                    env,
                    &var,
                    &format!("{var}.iter().sum::<u64>()"),
                    None,
                ));
                inner.vars.push(Var {
                    name: format!("{var}.len"),
                    ..self.int_var(env, &var, &format!("({var}.len() as u64)"), None)
                });
                ForKind::Chunks {
                    var,
                    n: self.rng.range(1, 3),
                }
            }
            10 if self.on("for_zip") => {
                if !env.can_read(Coll::V) || !env.can_read(Coll::Q) {
                    return None;
                }
                let a = self.fresh("a");
                let b = self.fresh("b");
                inner.borrows.push((Coll::V, Borrow::Shared));
                inner.borrows.push((Coll::Q, Borrow::Shared));
                inner.mult *= COLL_ITER;
                inner
                    .vars
                    .push(self.int_var(env, &a, &format!("*{a}"), None));
                inner
                    .vars
                    .push(self.int_var(env, &b, &format!("*{b}"), None));
                ForKind::Zip { a, b }
            }
            11 if self.on("for_filter") => {
                let c = if self.rng.chance(50) {
                    Coll::V
                } else {
                    Coll::Q
                };
                if !env.can_read(c) {
                    return None;
                }
                let var = self.fresh("x");
                inner.borrows.push((c, Borrow::Shared));
                inner.mult *= COLL_ITER;
                inner
                    .vars
                    .push(self.int_var(env, &var, &format!("*{var}"), None));
                ForKind::Filter {
                    coll: c,
                    var,
                    m: self.rng.range(2, 4),
                }
            }
            12 | 13 if self.on("for_enumerate") => {
                let c = if self.rng.chance(50) {
                    Coll::V
                } else {
                    Coll::Q
                };
                if !env.can_read(c) {
                    return None;
                }
                let idx = self.fresh("i");
                let var = self.fresh("x");
                inner.borrows.push((c, Borrow::Shared));
                inner.mult *= COLL_ITER;
                inner
                    .vars
                    .push(self.int_var(env, &idx, &format!("({idx} as u64)"), None));
                inner
                    .vars
                    .push(self.int_var(env, &var, &format!("*{var}"), None));
                ForKind::Enumerate { coll: c, idx, var }
            }
            _ => return None,
        };
        let n = self.body_len();
        let body = self.block(&inner, n);
        Some(Stmt::For { label, kind, body })
    }

    /// Binds the items of a collection loop (`deref` is how to read a
    /// binding: `*` for references, empty for owned).
    #[allow(clippy::too_many_arguments)]
    fn bind_items(
        &mut self,
        env: &Env,
        inner: &mut Env,
        c: Coll,
        key: &str,
        var: &str,
        deref: &str,
        mutable: bool,
    ) {
        inner.mult *= COLL_ITER;
        let mut x = self.int_var(env, var, &format!("{deref}{var}"), None);
        x.mutable = mutable;
        x.local_to_hash = false;
        inner.vars.push(x);
        if c.is_map() {
            inner
                .vars
                .push(self.int_var(env, key, &format!("{deref}{key}"), None));
        }
        if c.is_hash() {
            // Order-insensitive body: effects carry the item, no other
            // order-dependent state changes.
            let item = if c.is_map() { key } else { var };
            let mut path = inner.hash.clone().unwrap_or_default();
            path.push(item.to_owned());
            inner.hash = Some(path);
            if inner.hash_loop.is_none() {
                inner.hash_loop = Some(inner.loops.len() - 1);
            }
            if !self.on("cp_hash_for") {
                inner.no_cp = true;
            }
        }
    }
}

/// Generates program `index` of the sample `seed` with the given forms and
/// size (roughly the number of statements).
pub fn generate(seed: u64, index: usize, forms: &Forms, size: usize) -> Program {
    let mut rng = Rng::new(program_seed(seed, index));
    let result = forms.on("try") && rng.chance(35);
    let n_input = rng.range(2, 4) as usize;
    let input: Vec<u64> = (0..n_input).map(|_| rng.range(0, 30)).collect();
    let size = rng.range((size / 2).max(1) as u64, size as u64) as i64;
    let mut g = Gen {
        rng,
        forms: forms.clone(),
        next_id: 0,
        size_left: size,
        budget: 60,
        result,
        block_counter: 0,
    };
    let env = Env {
        vars: Vec::new(),
        loops: Vec::new(),
        borrows: Vec::new(),
        hash: None,
        mult: 1,
        depth: 0,
        block: 0,
        no_cp: false,
        in_machine: false,
        hash_loop: None,
    };
    let mut body = Vec::new();
    let mut e = env;
    while g.size_left > 0 {
        g.stmt(&mut e, &mut body);
    }
    if !takes_checkpoint(&body) {
        let at = g.rng.below(body.len() + 1);
        body.insert(at, Stmt::Checkpoint(Some(format!("c{}", g.id()))));
    }
    Program {
        seed,
        index,
        result,
        input,
        body,
    }
}

// ---------------------------------------------------------------------------
// Shrinking

/// Every program one reduction step smaller than `p`, biggest steps first:
/// drop a statement, replace a compound statement by one of its bodies,
/// empty a body, shrink a loop bound or a literal. Candidates may not
/// compile (e.g. a dropped `let`); the shrinker just tries them.
pub fn shrink_candidates(p: &Program) -> Vec<Program> {
    let mut out = Vec::new();
    let n = count_lists(&p.body);
    // For every statement list (by index in walk order) and every position.
    for list in 0..n {
        let len = list_len(&p.body, list);
        // Drop halves, then single statements.
        if len >= 4 {
            for (lo, hi) in [(0, len / 2), (len / 2, len)] {
                let mut q = p.clone();
                with_list(&mut q.body, list, &mut |l| {
                    l.drain(lo..hi);
                });
                out.push(q);
            }
        }
        for i in 0..len {
            let mut q = p.clone();
            with_list(&mut q.body, list, &mut |l| {
                l.remove(i);
            });
            out.push(q);
        }
        // Splice a compound's body in place of it.
        for i in 0..len {
            let mut k = 0;
            loop {
                let mut q = p.clone();
                let mut done = true;
                with_list(&mut q.body, list, &mut |l| {
                    let kids = children(&l[i]);
                    if k < kids.len() {
                        let b = kids[k].clone();
                        l.splice(i..=i, b);
                        done = false;
                    }
                });
                if done {
                    break;
                }
                out.push(q);
                k += 1;
            }
        }
    }
    // Empty bodies / shrink constants.
    for list in 0..n {
        let len = list_len(&p.body, list);
        for i in 0..len {
            let mut q = p.clone();
            let mut changed = false;
            with_list(&mut q.body, list, &mut |l| {
                changed = simplify(&mut l[i]);
            });
            if changed {
                out.push(q);
            }
        }
    }
    if p.input.len() > 1 {
        let mut q = p.clone();
        q.input.pop();
        out.push(q);
    }
    out
}

fn simplify(s: &mut Stmt) -> bool {
    match s {
        Stmt::For {
            kind: ForKind::Range { hi, .. },
            ..
        } if *hi > 1 => {
            *hi -= 1;
            true
        }
        Stmt::While { bound, .. } | Stmt::WhileLet { bound, .. } | Stmt::Loop { bound, .. }
            if *bound > 1 =>
        {
            *bound -= 1;
            true
        }
        Stmt::Machine { bound, .. } if *bound > 2 => {
            *bound -= 1;
            true
        }
        Stmt::Acc { e, .. }
        | Stmt::Trace { e, .. }
        | Stmt::Push { e, .. }
        | Stmt::Let { e, .. }
        | Stmt::Assign { e, .. }
        | Stmt::LetJob { e, .. }
        | Stmt::LetOpt { e, .. }
        | Stmt::Try { e, .. }
            if !matches!(e, Expr::Lit(_)) =>
        {
            *e = Expr::Lit(1);
            true
        }
        Stmt::If { els, .. } if els.is_some() => {
            *els = None;
            true
        }
        Stmt::Checkpoint(l) if l.is_some() => {
            *l = None;
            true
        }
        _ => false,
    }
}

fn count_lists(b: &[Stmt]) -> usize {
    let mut n = 1;
    for s in b {
        for c in children(s) {
            n += count_lists(c);
        }
    }
    n
}

fn list_len(b: &[Stmt], target: usize) -> usize {
    fn go(b: &[Stmt], target: usize, k: &mut usize) -> Option<usize> {
        if *k == target {
            return Some(b.len());
        }
        *k += 1;
        for s in b {
            for c in children(s) {
                if let Some(n) = go(c, target, k) {
                    return Some(n);
                }
            }
        }
        None
    }
    go(b, target, &mut 0).unwrap_or(0)
}

fn with_list(b: &mut Vec<Stmt>, target: usize, f: &mut dyn FnMut(&mut Vec<Stmt>)) {
    fn go(
        b: &mut Vec<Stmt>,
        target: usize,
        k: &mut usize,
        f: &mut dyn FnMut(&mut Vec<Stmt>),
    ) -> bool {
        if *k == target {
            f(b);
            return true;
        }
        *k += 1;
        for s in b.iter_mut() {
            for c in children_mut(s) {
                if go(c, target, k, f) {
                    return true;
                }
            }
        }
        false
    }
    go(b, target, &mut 0, f);
}
