//! Whether a local is read again after a site before it is assigned: a
//! local that every path from the site assigns before reading (`state =
//! match state { .. checkpoint!() .. }`, `let outcome;` assigned after the
//! checkpoint) is dead there, and need not (often cannot: it is moved or
//! uninitialised) be saved.
//!
//! The code after a site is its *continuation*: the rest of each enclosing
//! block, the assignment the site's construct feeds, the next iteration of
//! each enclosing loop. Lowering keeps it as a stack of [`ContFrame`]s in its
//! scope. The analysis is conservative: whatever it cannot follow (`break`,
//! `continue`, a use inside a macro or closure) counts as a read, so a local
//! is only ever left out of a checkpoint when no path can read it; and if it
//! errs, rustc's definite-initialisation check of the generated code rejects
//! the program instead of letting it resume to a different result.

use std::rc::Rc;

use syn::{Block, Expr, Stmt};

use crate::names::{free_in_expr, pat_names, NameSet};

use super::syntax::strip_parens;

/// One level of a site's continuation, innermost first.
#[derive(Clone)]
pub(super) enum ContFrame {
    /// The statements after the current one in its block; `shadowed` names
    /// are bound anew by the current statement (`let x = <construct>`).
    Rest {
        stmts: Rc<[Stmt]>,
        shadowed: NameSet,
    },
    /// The construct holding the site is the value assigned to these names.
    Assigns(NameSet),
    /// The site is in the body of a loop: the next iteration, then (for
    /// `while` and `for`) the code after the loop.
    Loop {
        body: Rc<Block>,
        /// `while`'s condition, evaluated before each iteration.
        cond: Option<Rc<Expr>>,
        /// Only `break` leaves it (`loop`).
        endless: bool,
    },
}

/// What the code from some point on does with a local first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// It may be read before being assigned.
    Read,
    /// Every path assigns it (or ends) before reading it.
    Dead,
    /// This code neither reads nor assigns it: what follows decides.
    Open,
}

/// Whether `name` may be read after the site whose continuation is `cont`
/// (innermost frame last).
pub(super) fn live_after(name: &str, cont: &[ContFrame]) -> bool {
    flow_of_cont(name, cont) == Flow::Read
}

fn flow_of_cont(name: &str, cont: &[ContFrame]) -> Flow {
    let Some((frame, outer)) = cont.split_last() else {
        // The function returns: nothing reads it.
        return Flow::Dead;
    };
    match frame {
        ContFrame::Rest { stmts, shadowed } => {
            if shadowed.contains(name) {
                return flow_of_cont(name, outer);
            }
            match stmts_flow(name, stmts) {
                Flow::Open => flow_of_cont(name, outer),
                decided => decided,
            }
        }
        ContFrame::Assigns(names) if names.contains(name) => Flow::Dead,
        ContFrame::Assigns(_) => flow_of_cont(name, outer),
        ContFrame::Loop {
            body,
            cond,
            endless,
        } => {
            let next = match cond.as_deref().map(|c| expr_flow(name, c)) {
                Some(Flow::Read) => return Flow::Read,
                Some(Flow::Dead) => Flow::Dead,
                _ => stmts_flow(name, &body.stmts),
            };
            match (next, endless) {
                (Flow::Read, _) => Flow::Read,
                (Flow::Dead, true) => Flow::Dead,
                // An endless loop whose body neither reads nor assigns it is
                // left by `break` only, which counts as a read.
                (Flow::Open, true) => Flow::Read,
                // `while` / `for`: the body may not run again; then the code
                // after the loop decides.
                (_, false) => match flow_of_cont(name, outer) {
                    Flow::Read => Flow::Read,
                    _ if next == Flow::Dead => Flow::Dead,
                    other => other,
                },
            }
        }
    }
}

/// The first thing a statement list does with `name`.
pub(super) fn stmts_flow(name: &str, stmts: &[Stmt]) -> Flow {
    for stmt in stmts {
        let flow = match stmt {
            Stmt::Local(l) => {
                let mut flow = Flow::Open;
                if let Some(init) = &l.init {
                    flow = expr_flow(name, &init.expr);
                    if flow == Flow::Open {
                        if let Some((_, d)) = &init.diverge {
                            // The `else` diverges; reading there is a read.
                            if expr_flow(name, d) == Flow::Read {
                                flow = Flow::Read;
                            }
                        }
                    }
                }
                if flow == Flow::Open && pat_names(&l.pat).contains(name) {
                    // Shadowed for the rest of the block.
                    return Flow::Open;
                }
                flow
            }
            Stmt::Item(_) => Flow::Open,
            Stmt::Expr(e, _) => expr_flow(name, e),
            Stmt::Macro(m) => {
                if macro_reads(name, &m.mac) {
                    Flow::Read
                } else {
                    Flow::Open
                }
            }
        };
        if flow != Flow::Open {
            return flow;
        }
    }
    Flow::Open
}

fn macro_reads(name: &str, mac: &syn::Macro) -> bool {
    let e = Expr::Macro(syn::ExprMacro {
        attrs: Vec::new(),
        mac: mac.clone(),
    });
    free_in_expr(&e).contains(name)
}

/// Both branches of a fork: read if either may read, dead if both are.
fn fork(a: Flow, b: Flow) -> Flow {
    match (a, b) {
        (Flow::Read, _) | (_, Flow::Read) => Flow::Read,
        (Flow::Dead, Flow::Dead) => Flow::Dead,
        _ => Flow::Open,
    }
}

fn seq(first: Flow, then: impl FnOnce() -> Flow) -> Flow {
    match first {
        Flow::Open => then(),
        decided => decided,
    }
}

/// The first thing evaluating `expr` does with `name`.
pub(super) fn expr_flow(name: &str, expr: &Expr) -> Flow {
    match strip_parens(expr) {
        Expr::Assign(a) => match strip_parens(&a.left) {
            Expr::Path(p) if p.path.is_ident(name) => seq(expr_flow(name, &a.right), || Flow::Dead),
            _ => seq(expr_flow(name, &a.right), || expr_flow(name, &a.left)),
        },
        Expr::Block(b) => stmts_flow(name, &b.block.stmts),
        Expr::If(i) => {
            let (cond, binds) = match strip_parens(&i.cond) {
                Expr::Let(l) => (expr_flow(name, &l.expr), pat_names(&l.pat).contains(name)),
                c => (expr_flow(name, c), false),
            };
            seq(cond, || {
                let then = if binds {
                    Flow::Open
                } else {
                    stmts_flow(name, &i.then_branch.stmts)
                };
                let els = i
                    .else_branch
                    .as_ref()
                    .map_or(Flow::Open, |(_, e)| expr_flow(name, e));
                fork(then, els)
            })
        }
        Expr::Match(m) => seq(expr_flow(name, &m.expr), || {
            let mut out: Option<Flow> = None;
            for arm in &m.arms {
                let flow = if pat_names(&arm.pat).contains(name) {
                    Flow::Open
                } else {
                    let guard = arm
                        .guard
                        .as_ref()
                        .map_or(Flow::Open, |(_, g)| expr_flow(name, g));
                    seq(guard, || expr_flow(name, &arm.body))
                };
                out = Some(match out {
                    None => flow,
                    Some(prev) => fork(prev, flow),
                });
            }
            out.unwrap_or(Flow::Open)
        }),
        Expr::Return(r) => match &r.expr {
            Some(e) => seq(expr_flow(name, e), || Flow::Dead),
            None => Flow::Dead,
        },
        // The code a `break` / `continue` goes on with is not followed here.
        Expr::Break(_) | Expr::Continue(_) => Flow::Read,
        Expr::Loop(l) => match stmts_flow(name, &l.body.stmts) {
            Flow::Dead => Flow::Dead,
            _ if contains_path(name, expr) => Flow::Read,
            // No read inside; left by `break` (a read) or never.
            _ => Flow::Read,
        },
        Expr::While(w) => seq(expr_flow(name, &w.cond), || {
            if contains_path(name, &Expr::Block(block_expr(&w.body))) {
                Flow::Read
            } else {
                Flow::Open
            }
        }),
        Expr::ForLoop(f) => seq(expr_flow(name, &f.expr), || {
            let shadowed = pat_names(&f.pat).contains(name);
            if !shadowed && contains_path(name, &Expr::Block(block_expr(&f.body))) {
                Flow::Read
            } else {
                Flow::Open
            }
        }),
        other => {
            if free_in_expr(other).contains(name) || has_exit(other) {
                Flow::Read
            } else {
                Flow::Open
            }
        }
    }
}

fn block_expr(b: &Block) -> syn::ExprBlock {
    syn::ExprBlock {
        attrs: Vec::new(),
        label: None,
        block: b.clone(),
    }
}

fn contains_path(name: &str, expr: &Expr) -> bool {
    free_in_expr(expr).contains(name) || has_exit(expr)
}

/// A `break` or `continue` anywhere in `expr` (outside closures): where it
/// goes is not followed, so it counts as a read.
fn has_exit(expr: &Expr) -> bool {
    struct Finder(bool);
    impl<'ast> syn::visit::Visit<'ast> for Finder {
        fn visit_expr_break(&mut self, _: &'ast syn::ExprBreak) {
            self.0 = true;
        }
        fn visit_expr_continue(&mut self, _: &'ast syn::ExprContinue) {
            self.0 = true;
        }
        fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {}
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    let mut f = Finder(false);
    syn::visit::Visit::visit_expr(&mut f, expr);
    f.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rest(src: proc_macro2::TokenStream) -> ContFrame {
        let b: Block = syn::parse2(quote::quote!({ #src })).unwrap();
        ContFrame::Rest {
            stmts: b.stmts.into(),
            shadowed: NameSet::new(),
        }
    }

    #[test]
    fn assigned_before_read_is_dead() {
        let cont = [rest(quote::quote! { let y = 1; x = y; use_it(x); })];
        assert!(!live_after("x", &cont));
        let cont = [rest(quote::quote! { use_it(x); x = 2; })];
        assert!(live_after("x", &cont));
    }

    #[test]
    fn both_branches_must_assign() {
        let cont = [rest(
            quote::quote! { if c { x = 1; } else { x = 2; } use_it(x); },
        )];
        assert!(!live_after("x", &cont));
        let cont = [rest(quote::quote! { if c { x = 1; } use_it(x); })];
        assert!(live_after("x", &cont));
    }

    #[test]
    fn a_state_machine_assignment_kills_the_state() {
        let body: Block = syn::parse2(quote::quote!({
            turns += 1;
            state = match state {
                S::A => S::B,
                S::B => break,
            };
        }))
        .unwrap();
        let cont = [
            ContFrame::Loop {
                body: Rc::new(body),
                cond: None,
                endless: true,
            },
            ContFrame::Assigns(["state".to_owned()].into()),
            rest(quote::quote! { let z = 1; }),
        ];
        assert!(!live_after("state", &cont));
        assert!(live_after("turns", &cont));
    }

    #[test]
    fn break_and_continue_count_as_reads() {
        let cont = [rest(quote::quote! { if done { break; } x = 1; })];
        assert!(live_after("x", &cont));
    }

    #[test]
    fn return_ends_the_path() {
        let cont = [rest(quote::quote! { if c { return 1; } x = 2; use_it(x); })];
        assert!(!live_after("x", &cont));
    }

    #[test]
    fn shadowing_hides_the_rest_of_the_block() {
        let cont = [
            rest(quote::quote! { use_it(x); }),
            rest(quote::quote! { let x = 5; use_it(x); }),
        ];
        assert!(live_after("x", &cont), "read after the inner block ends");
        let cont = [
            rest(quote::quote! { x = 0; }),
            rest(quote::quote! { let x = 5; use_it(x); }),
        ];
        assert!(!live_after("x", &cont));
    }
}
