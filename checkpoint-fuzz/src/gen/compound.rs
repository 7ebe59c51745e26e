//! The compound statements of the generator (a second `impl Gen`, split
//! from the statement picker in `generator.rs` by size): `for` loops over
//! every collection and iterator kind with their item bindings, the job
//! `match` / `if let` / `let else` family, and the rare exactness forms of
//! issue 32 (hash order observed after a checkpoint, shared handles, plain
//! or in a struct, fields serde skips, stateful transients).
//!
//! Each generator checks the scope ([`Env`]) so that the loop or match it
//! builds borrows, binds and terminates correctly.

use super::ast::{takes_checkpoint, Coll, Divergence, Expr, ForKind, Pat, Scrut, Stmt};
use super::env::{Borrow, Env, LoopInfo, Ty, Var};
use super::generator::{Gen, COLL_ITER};

impl Gen {
    /// The forms of issue 32 (exactness of values), rarely: outside hash
    /// loops (whose bodies must not depend on the order), each with its own
    /// checkpoint(s).
    pub(super) fn exactness_form(&mut self, env: &Env) -> Option<Stmt> {
        let r = self.rng.below(1000);
        if env.hash.is_some() || r >= 76 {
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
                let (id, k) = (self.id(), self.rng.range(0, 9));
                let looped = self.rng.below(2) == 0;
                // Only before a loop: a transient borrowing another declared
                // in the checkpoint's own block does not compile (the split
                // moves the first out while the second borrows it).
                let chained = self.rng.below(2) == 0 && looped;
                Some(Stmt::TransientStateful {
                    id,
                    k,
                    n,
                    looped,
                    chained,
                })
            }
            46..=55 if self.on("struct_handle") && self.cp_cost(env, 2) => {
                Some(Stmt::StructHandle {
                    id: self.id(),
                    looped: self.rng.below(2) == 0,
                })
            }
            56..=65 if self.on("serde_skip") && self.cp_cost(env, 2) => Some(Stmt::SerdeSkip {
                id: self.id(),
                looped: self.rng.below(2) == 0,
            }),
            66..=75 if self.on("skip_items") => {
                let n = self.rng.range(1, 3);
                if !self.cp_cost(env, n as i64) {
                    return None;
                }
                Some(Stmt::SkipItems { id: self.id(), n })
            }
            _ => None,
        }
    }

    pub(super) fn gen_job(&mut self, env: &mut Env, out: &mut Vec<Stmt>) -> Option<Stmt> {
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

    pub(super) fn gen_for(&mut self, env: &mut Env) -> Option<Stmt> {
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
