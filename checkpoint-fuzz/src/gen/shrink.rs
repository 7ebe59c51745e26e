//! The one-step reductions the shrinker (`src/bin/shrink.rs`) tries on a
//! failing program.
//!
//! Kept apart from the generator: it works on any [`Program`], knows
//! nothing of seeds or forms, and only ever makes a program smaller.

use super::ast::{children, children_mut, Expr, ForKind, Program, Stmt};

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
