//! The pretty-printer: a [`Program`] as a `#[workflow]` and as its plain
//! `async fn` twin.
//!
//! Both twins come out of one walk over the AST ([`Mode`] says which), so
//! that they differ only where they must (checkpoints, `#[transient]`, the
//! `canon(..)` wrapping of observed hash order). Kept apart from the AST
//! because it is the one place that knows the Rust text of each statement.

use std::fmt::Write as _;

use super::ast::{
    for_is_hash, Coll, Cond, Divergence, Expr, ForKind, Pat, Program, Scrut, Stmt, Wait,
};

/// Which of the twins is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The `#[workflow]`: checkpoints and `#[transient]` as written.
    Workflow,
    /// The plain `async fn`: no checkpoints, no attributes.
    Plain,
}

impl Program {
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
            Stmt::Retry { id, ok, bind } => {
                let answer = match ok {
                    true => format!("Ok(acc % 97 + {id})"),
                    false => "Err(acc % 89)".to_owned(),
                };
                self.line(&format!("let {bind}: u64 = ctx"));
                self.indent += 1;
                self.line(&format!(
                    "    .retry(\"r{id}\", RetryPolicy::fixed(Duration::from_millis(1)).max_attempts(3), || {{"
                ));
                self.indent += 2;
                self.line(&format!(
                    "ctx.resource::<SideEffects>().record(format!(\"r{id}-{{tick}}\"));"
                ));
                self.line(&format!("let r: Result<u64, u64> = {answer};"));
                self.line("async move { r }");
                self.indent -= 2;
                self.line("    })");
                self.line("    .await");
                self.line("    .unwrap_or_else(|e| 1000 + u64::from(e.attempts()));");
                self.indent -= 1;
            }
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
            Stmt::StructHandle { id, looped } => self.struct_handle(*id, *looped, wf),
            Stmt::SerdeSkip { id, looped } => self.serde_skip(*id, *looped, wf),
            Stmt::SkipItems { id, n } => self.skip_items(*id, *n, wf),
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
            Stmt::TransientStateful {
                id,
                k,
                n,
                looped,
                chained,
            } => self.transient_stateful(*id, *k, *n, *looped, *chained, wf),
        }
    }

    /// `transient_stateful`: a transient keeps no state across a
    /// checkpoint: the twin builds the counter (and its view, when
    /// `chained`) again where the workflow's checkpoint is
    /// (docs/exactness.md), the view dropped first since it borrows it.
    fn transient_stateful(
        &mut self,
        id: u32,
        k: u64,
        n: u64,
        looped: bool,
        chained: bool,
        wf: bool,
    ) {
        // What the bumps and reads go through.
        let via = if chained {
            format!("view{id}")
        } else {
            format!("ctr{id}")
        };
        self.line("{");
        self.indent += 1;
        if wf {
            self.line("#[transient]");
            self.line(&format!("let ctr{id} = Counter::new({k});"));
            if chained {
                self.line("#[transient]");
                self.line(&format!("let view{id} = CounterView::new(&ctr{id});"));
            }
        } else {
            self.line(&format!("let mut ctr{id} = Counter::new({k});"));
            if chained {
                self.line(&format!("let mut view{id} = CounterView::new(&ctr{id});"));
            }
        }
        if looped {
            self.line(&format!("for _i{id} in 0..{n}u64 {{"));
            self.indent += 1;
        }
        self.line(&format!("{via}.bump();"));
        if wf {
            self.line("checkpoint!();");
        } else if chained {
            self.line(&format!("drop(view{id});"));
            self.line(&format!("ctr{id} = Counter::new({k});"));
            self.line(&format!("view{id} = CounterView::new(&ctr{id});"));
        } else {
            self.line(&format!("ctr{id} = Counter::new({k});"));
        }
        if looped {
            self.indent -= 1;
            self.line("}");
        } else {
            self.line(&format!("{via}.bump();"));
        }
        self.line(&format!("acc = acc.wrapping_add({via}.get());"));
        if !wf {
            // The view first: it borrows the counter until its last use.
            if chained {
                self.line(&format!("let _ = &mut view{id};"));
            }
            self.line(&format!("let _ = &mut ctr{id};"));
        }
        self.indent -= 1;
        self.line("}");
    }

    /// `struct_handle`: two `Logged` share one handle; the workflow saves
    /// both at a checkpoint and goes on from the decoded values, which the
    /// twin computes with `round_trip` (the loop's iterable borrows `sh`,
    /// which is decoded at loop entry instead).
    fn struct_handle(&mut self, id: u32, looped: bool, wf: bool) {
        let twin = |p: &mut Self, line: &str| {
            if !wf {
                p.line(line);
            }
        };
        self.line("{");
        self.indent += 1;
        let items = if looped { "vec![1, 2]" } else { "Vec::new()" };
        self.line(&format!(
            "let mut sh{id} = Logged {{ items: {items}, log: Arc::new(Mutex::new(acc % 1000)) }};"
        ));
        self.line(&format!(
            "let mut shb{id} = Logged {{ items: Vec::new(), log: Arc::clone(&sh{id}.log) }};"
        ));
        self.line(&format!("*sh{id}.log.lock().unwrap() += 1;"));
        if looped {
            twin(self, &format!("sh{id} = round_trip(sh{id});"));
            self.line(&format!("for x{id} in &sh{id}.items {{"));
            self.indent += 1;
            self.line(&format!("*sh{id}.log.lock().unwrap() += *x{id};"));
            self.line(&format!("*shb{id}.log.lock().unwrap() += 10;"));
            if wf {
                self.line("checkpoint!();");
            }
            twin(self, &format!("shb{id} = round_trip(shb{id});"));
            self.indent -= 1;
            self.line("}");
        } else {
            if wf {
                self.line("checkpoint!();");
            }
            twin(self, &format!("sh{id} = round_trip(sh{id});"));
            twin(self, &format!("shb{id} = round_trip(shb{id});"));
        }
        self.line(&format!("*sh{id}.log.lock().unwrap() += 2;"));
        self.line(&format!(
            "acc = acc.wrapping_add(*shb{id}.log.lock().unwrap()).wrapping_mul(3).wrapping_add(*sh{id}.log.lock().unwrap());"
        ));
        self.indent -= 1;
        self.line("}");
    }

    /// `serde_skip`: a `Skipping` whose skipped field is read after a
    /// checkpoint (0 from then on; in the looped shape, from loop entry).
    fn serde_skip(&mut self, id: u32, looped: bool, wf: bool) {
        self.line("{");
        self.indent += 1;
        let items = if looped { "vec![1, 2]" } else { "Vec::new()" };
        self.line(&format!(
            "let mut sk{id} = Skipping {{ items: {items}, kept: acc % 100, skipped: acc % 7 + 1 }};"
        ));
        self.line(&format!("sk{id}.kept += sk{id}.skipped;"));
        if looped {
            if !wf {
                self.line(&format!("sk{id} = round_trip(sk{id});"));
            }
            self.line(&format!("for x{id} in &sk{id}.items {{"));
            self.indent += 1;
            self.line(&format!(
                "acc = acc.wrapping_add(*x{id} + sk{id}.skipped + sk{id}.kept);"
            ));
            if wf {
                self.line("checkpoint!();");
            }
            self.indent -= 1;
            self.line("}");
        } else {
            if wf {
                self.line("checkpoint!();");
            } else {
                self.line(&format!("sk{id} = round_trip(sk{id});"));
            }
            self.line(&format!("sk{id}.skipped += 1;"));
        }
        self.line(&format!(
            "acc = acc.wrapping_add(sk{id}.kept * 10 + sk{id}.skipped);"
        ));
        self.indent -= 1;
        self.line("}");
    }
}

impl Printer {
    /// `skip_items`: a loop writing through its items sets a skipped field
    /// after the item's checkpoint. The workflow goes on with the current
    /// item decoded at the checkpoint and each finished item decoded from
    /// the loop's log (and the vector at loop entry, which the loop's
    /// iterator borrows); the twin decodes them by hand where that happens.
    fn skip_items(&mut self, id: u32, n: u64, wf: bool) {
        self.line("{");
        self.indent += 1;
        self.line(&format!(
            "let mut ski{id}: Vec<Skipping> = (0..{n}u64).map(|k| Skipping {{ items: Vec::new(), kept: k, skipped: k + 1 }}).collect();"
        ));
        if !wf {
            // The loop's iterator borrows it: decoded at loop entry.
            self.line(&format!("ski{id} = round_trip(ski{id});"));
        }
        self.line(&format!("for s{id} in ski{id}.iter_mut() {{"));
        self.indent += 1;
        self.line(&format!("s{id}.kept += s{id}.skipped;"));
        if wf {
            self.line("checkpoint!();");
        } else {
            self.line(&format!("*s{id} = round_trip(std::mem::take(s{id}));"));
        }
        self.line(&format!("s{id}.skipped = acc % 5 + 1;"));
        self.line(&format!("acc = acc.wrapping_add(s{id}.skipped);"));
        if !wf {
            self.line(&format!("*s{id} = round_trip(std::mem::take(s{id}));"));
        }
        self.indent -= 1;
        self.line("}");
        self.line(&format!("for s{id} in &ski{id} {{"));
        self.indent += 1;
        self.line(&format!(
            "acc = acc.wrapping_add(s{id}.kept * 3 + s{id}.skipped);"
        ));
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
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
