//! The random generator: [`Gen`], its expression, condition and block
//! helpers, and the statement picker (`stmt` / `try_stmt`), which chooses
//! each statement by a weighted draw among the forms that are switched on
//! and that the scope ([`Env`]) allows.
//!
//! The larger compound statements (`for` loops, the job `match` / `if let`
//! / `let else` family, the exactness forms of issue 32) are generated in
//! `compound.rs`, a second `impl Gen`, to keep each file readable.

use super::ast::{Coll, Cond, Expr, Stmt, Wait};
use super::env::{Env, LoopInfo, Ty, Var};
use super::{Forms, Rng};

pub(super) struct Gen {
    pub(super) rng: Rng,
    pub(super) forms: Forms,
    pub(super) next_id: u32,
    pub(super) size_left: i64,
    pub(super) budget: i64,
    pub(super) result: bool,
    pub(super) block_counter: u32,
}

/// The largest number of loop iterations assumed for a collection loop.
pub(super) const COLL_ITER: i64 = 9;

impl Gen {
    pub(super) fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }
    pub(super) fn on(&self, f: &str) -> bool {
        self.forms.on(f)
    }

    pub(super) fn expr(&mut self, env: &Env, depth: u32) -> Expr {
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

    pub(super) fn block(&mut self, env: &Env, n: usize) -> Vec<Stmt> {
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

    pub(super) fn body_len(&mut self) -> usize {
        self.rng.range(1, 4) as usize
    }

    pub(super) fn cp_cost(&mut self, env: &Env, weight: i64) -> bool {
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

    pub(super) fn fresh(&mut self, p: &str) -> String {
        let id = self.id();
        format!("{p}{id}")
    }

    pub(super) fn int_var(&self, env: &Env, name: &str, read: &str, needs: Option<Coll>) -> Var {
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

    pub(super) fn label(&mut self) -> Option<String> {
        if self.on("labels") && self.rng.chance(50) {
            Some(self.fresh("l"))
        } else {
            None
        }
    }

    /// Pushes one statement (sometimes a few) for `env`.
    pub(super) fn stmt(&mut self, env: &mut Env, out: &mut Vec<Stmt>) {
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
            91 | 92 if self.on("sleep") || self.on("retry") => {
                // Only with the form on does a retry take a draw, so that
                // samples without it stay as they were.
                let retry = self.on("retry")
                    && env.hash.is_none()
                    && (!self.on("sleep") || self.rng.chance(50));
                if !retry {
                    return self.cp_cost(env, 6).then_some(Stmt::Sleep);
                }
                let ok = self.rng.chance(50);
                if !self.cp_cost(env, if ok { 2 } else { 6 }) {
                    return None;
                }
                let id = self.id();
                let bind = self.fresh("r");
                env.vars.push(self.int_var(env, &bind, &bind, None));
                Some(Stmt::Retry { id, ok, bind })
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
}
