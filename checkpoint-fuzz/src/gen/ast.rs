//! The syntax tree of a generated workflow body, and the walks over it.
//!
//! Kept apart from the generator, the printer and the shrinker because all
//! three work on it: `generator.rs` builds it, `render.rs` prints it,
//! `shrink.rs` reduces it, and the oracle (`lib.rs`) asks it questions
//! ([`Program::iterates_hash`], [`Program::expects_refusal`],
//! [`Program::script`]). It holds no randomness and no text.

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
    pub(super) fn name(self) -> &'static str {
        match self {
            Coll::V => "v",
            Coll::Q => "q",
            Coll::Bm => "bm",
            Coll::Hm => "hm",
            Coll::Hs => "hs",
        }
    }
    pub(super) fn is_hash(self) -> bool {
        matches!(self, Coll::Hm | Coll::Hs)
    }
    pub(super) fn is_map(self) -> bool {
        matches!(self, Coll::Bm | Coll::Hm)
    }
    pub(super) fn is_seq(self) -> bool {
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
    /// `retry`: `let {bind}: u64 = ctx.retry("r{id}", policy, op).await..;`
    /// with a 1 ms fixed backoff and 3 attempts; every attempt records an
    /// effect and answers (`ok`) or fails (then the retry is exhausted
    /// after 3 attempts: 2 backoffs and the outcome, 3 checkpoints).
    Retry { id: u32, ok: bool, bind: String },
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
    /// `struct_handle`: two `Logged` sharing one `Arc<Mutex<u64>>` across a
    /// checkpoint (in a block, or in a loop over `&sh.items` when
    /// `looped`): exact, both handles are values of their own after it.
    StructHandle { id: u32, looped: bool },
    /// `serde_skip`: a `Skipping` whose skipped field is read after a
    /// checkpoint (in a block, or in a loop over `&sk.items`): exact, it
    /// is 0 after it on every path.
    SerdeSkip { id: u32, looped: bool },
    /// `skip_items`: a loop writing through `Skipping` items that sets the
    /// skipped field after its checkpoint: exact, every path goes on with
    /// each finished item decoded from the loop's log.
    SkipItems { id: u32, n: u64 },
    /// `transient_cell` (known failing): a `#[transient]` built from a
    /// `Cell` that changes before the checkpoint.
    TransientCell { id: u32 },
    /// `transient_stateful`: a `#[transient]` counter bumped before a
    /// checkpoint and read after it, in a loop (`looped`, built before it)
    /// or in the checkpoint's own block: exact, it is built again after
    /// each checkpoint on every path. When `chained`, the bumps go through
    /// a second transient built from the first (`CounterView::new(&ctr)`):
    /// both are built again, the view dropped first.
    TransientStateful {
        id: u32,
        k: u64,
        n: u64,
        looped: bool,
        chained: bool,
    },
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
    /// save ([`EXPECTED_REFUSED`](super::EXPECTED_REFUSED)): then a refusal is a pass.
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
}

pub(super) fn for_is_hash(kind: &ForKind) -> bool {
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

pub(super) fn children(s: &Stmt) -> Vec<&Vec<Stmt>> {
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

pub(super) fn children_mut(s: &mut Stmt) -> Vec<&mut Vec<Stmt>> {
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
                | Stmt::Retry { .. }
                | Stmt::HashObserve { .. }
                | Stmt::HashHelper { .. }
                | Stmt::SharedHandle { .. }
                | Stmt::StructHandle { .. }
                | Stmt::SerdeSkip { .. }
                | Stmt::SkipItems { .. }
                | Stmt::TransientCell { .. }
                | Stmt::TransientStateful { .. }
        ) {
            found = true;
        }
    });
    found
}
