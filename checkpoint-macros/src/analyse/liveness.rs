//! Whether a local is read again after a site before it is assigned: a
//! local that every path from the site assigns before reading (`state =
//! match state { .. checkpoint!() .. }`, `let outcome;` assigned after the
//! checkpoint) is dead there, and need not (often cannot: it is moved or
//! uninitialised) be saved.
//!
//! The code after a site is its *continuation*: the rest of each enclosing
//! block, the assignment the site's construct feeds, the next iteration of
//! each enclosing loop. Lowering keeps it as a stack of [`ContFrame`]s in its
//! scope. Unlabelled `break` and `continue` are followed to where they go.
//! The analysis is conservative: whatever it does not follow (a labelled
//! `break`, a use inside a macro or closure) counts as a read, so a local is
//! only left out of a checkpoint when no path can read it; and if it errs,
//! rustc's definite-initialisation check of the generated code rejects the
//! program instead of letting it resume to a different result.

use std::rc::Rc;

use syn::{Block, Expr, Stmt};

use crate::names::{free_in_expr, pat_names, NameSet};

use super::syntax::strip_parens;

/// One level of a site's continuation, innermost first.
#[derive(Clone)]
pub(crate) enum ContFrame {
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
        /// Its label, which `break` / `continue` may name.
        label: Option<String>,
    },
}

/// What the paths through some code do with a local, as far as they go:
/// whether one may read it before assigning it, and how the others leave
/// (those that assign it first, or return, are finished and not recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Flow {
    /// Some path may read it before assigning it.
    pub read: bool,
    /// Some path reaches the end of the code without touching it.
    pub open: bool,
    /// Some path leaves by an unlabelled `break` of an enclosing loop.
    pub brk: bool,
    /// Some path leaves by an unlabelled `continue` of an enclosing loop.
    pub cont: bool,
}

const OPEN: Flow = Flow {
    read: false,
    open: true,
    brk: false,
    cont: false,
};
const DEAD: Flow = Flow {
    read: false,
    open: false,
    brk: false,
    cont: false,
};
/// Whatever is not followed (a labelled `break`, a use inside a macro)
/// counts as a read.
const READ: Flow = Flow {
    read: true,
    open: true,
    brk: false,
    cont: false,
};

impl Flow {
    /// `self`, then (on the paths that reach its end) `then`.
    fn then(self, then: impl FnOnce() -> Flow) -> Flow {
        if !self.open || self.read {
            return self;
        }
        let t = then();
        Flow {
            read: t.read,
            open: t.open,
            brk: self.brk || t.brk,
            cont: self.cont || t.cont,
        }
    }

    /// Either of two branches.
    fn or(self, other: Flow) -> Flow {
        Flow {
            read: self.read || other.read,
            open: self.open || other.open,
            brk: self.brk || other.brk,
            cont: self.cont || other.cont,
        }
    }

    /// The paths of a loop body, once the loop is done with them: `continue`
    /// and the end of the body run the body again, `break` leaves; `exits`
    /// says whether the loop can also end by itself (`while`, `for`).
    fn looped(body: Flow, exits: bool) -> Flow {
        Flow {
            read: body.read,
            open: exits || body.brk,
            brk: false,
            cont: false,
        }
    }
}

/// Whether `name` may be read after the site whose continuation is `cont`
/// (innermost frame last).
pub(crate) fn live_after(name: &str, cont: &[ContFrame]) -> bool {
    // The label of the loop each frame's code is directly in: that of the
    // nearest loop frame outside it.
    let enclosing_label = |i: usize| -> Label {
        cont[..i].iter().rev().find_map(|f| match f {
            ContFrame::Loop { label, .. } => Some(label.as_deref()),
            _ => None,
        })?
    };
    let mut flow = OPEN;
    for (i, frame) in cont.iter().enumerate().rev() {
        if flow.read {
            return true;
        }
        flow = match frame {
            ContFrame::Rest { stmts, shadowed } => {
                if shadowed.contains(name) {
                    flow
                } else {
                    flow.then(|| stmts_flow(name, stmts, enclosing_label(i)))
                }
            }
            ContFrame::Assigns(names) if names.contains(name) => Flow {
                open: false,
                ..flow
            },
            ContFrame::Assigns(_) => flow,
            ContFrame::Loop {
                body,
                cond,
                endless,
                label,
            } => {
                // `break` leaves the loop; the paths still going on, and
                // those that `continue`, start the next iteration (after
                // `while`'s condition), which may run again and again.
                let mut out = Flow {
                    read: flow.read,
                    open: flow.brk,
                    brk: false,
                    cont: false,
                };
                if flow.open || flow.cont {
                    let label = label.as_deref();
                    let iteration = match cond {
                        Some(c) => {
                            expr_flow(name, c, label).then(|| stmts_flow(name, &body.stmts, label))
                        }
                        None => stmts_flow(name, &body.stmts, label),
                    };
                    out = out.or(Flow::looped(iteration, !*endless));
                }
                out
            }
        };
    }
    flow.read
}

/// What a statement list does with `name`.
pub(crate) fn stmts_flow(name: &str, stmts: &[Stmt], label: Label) -> Flow {
    let mut flow = OPEN;
    for (i, stmt) in stmts.iter().enumerate() {
        if !flow.open || flow.read {
            break;
        }
        flow = match stmt {
            Stmt::Local(l) => {
                let mut f = match &l.init {
                    Some(init) => {
                        let mut f = expr_flow(name, &init.expr, label);
                        if let Some((_, d)) = &init.diverge {
                            // The `else` diverges: its paths never reach the
                            // rest of the block.
                            let d = expr_flow(name, d, label);
                            f = f.or(Flow { open: false, ..d });
                        }
                        f
                    }
                    None => OPEN,
                };
                if f.open && !f.read && pat_names(&l.pat).contains(name) {
                    // Shadowed for the rest of the block; its exits still go
                    // where they go.
                    let rest = Expr::Block(syn::ExprBlock {
                        attrs: Vec::new(),
                        label: None,
                        block: Block {
                            brace_token: Default::default(),
                            stmts: stmts[i + 1..].to_vec(),
                        },
                    });
                    let exits = has_exit(&rest);
                    f.brk |= exits;
                    f.cont |= exits;
                    return flow.then(|| f);
                }
                flow.then(|| f)
            }
            Stmt::Item(_) => flow,
            Stmt::Expr(e, _) => flow.then(|| expr_flow(name, e, label)),
            Stmt::Macro(m) => flow.then(|| {
                if macro_reads(name, &m.mac) {
                    READ
                } else {
                    OPEN
                }
            }),
        };
    }
    flow
}

fn macro_reads(name: &str, mac: &syn::Macro) -> bool {
    let e = Expr::Macro(syn::ExprMacro {
        attrs: Vec::new(),
        mac: mac.clone(),
    });
    free_in_expr(&e).contains(name)
}

/// What evaluating `expr` does with `name`.
pub(crate) fn expr_flow(name: &str, expr: &Expr, label: Label) -> Flow {
    match strip_parens(expr) {
        Expr::Assign(a) => match strip_parens(&a.left) {
            Expr::Path(p) if p.path.is_ident(name) => {
                expr_flow(name, &a.right, label).then(|| DEAD)
            }
            _ => expr_flow(name, &a.right, label).then(|| expr_flow(name, &a.left, label)),
        },
        Expr::Block(b) if b.label.is_none() => stmts_flow(name, &b.block.stmts, label),
        Expr::If(i) => if_flow(name, i, label),
        Expr::Match(m) => match_flow(name, m, label),
        Expr::Return(r) => match &r.expr {
            Some(e) => expr_flow(name, e, label).then(|| DEAD),
            None => DEAD,
        },
        Expr::Break(b) if same_loop(b.label.as_ref(), label) => {
            let value = b.expr.as_ref().map_or(OPEN, |e| expr_flow(name, e, label));
            value.then(|| Flow {
                open: false,
                brk: true,
                ..DEAD
            })
        }
        Expr::Continue(c) if same_loop(c.label.as_ref(), label) => Flow {
            open: false,
            cont: true,
            ..DEAD
        },
        // Where a `break` / `continue` of an outer loop goes is not followed.
        Expr::Break(_) | Expr::Continue(_) => READ,
        Expr::Loop(l) => {
            let inner = l.label.as_ref().map(|l| l.name.ident.to_string());
            Flow::looped(stmts_flow(name, &l.body.stmts, inner.as_deref()), false)
        }
        Expr::While(w) => {
            let inner = w.label.as_ref().map(|l| l.name.ident.to_string());
            let inner = inner.as_deref();
            let cond = match strip_parens(&w.cond) {
                Expr::Let(l) => expr_flow(name, &l.expr, inner),
                c => expr_flow(name, c, inner),
            };
            let body = cond
                .then(|| stmts_flow(name, &w.body.stmts, inner))
                .or(cond);
            Flow::looped(body, true)
        }
        Expr::ForLoop(f) => expr_flow(name, &f.expr, label).then(|| {
            let inner = f.label.as_ref().map(|l| l.name.ident.to_string());
            let label = inner.as_deref();
            let body = if pat_names(&f.pat).contains(name) {
                shadowed_exits(&Expr::Block(syn::ExprBlock {
                    attrs: Vec::new(),
                    label: None,
                    block: f.body.clone(),
                }))
            } else {
                stmts_flow(name, &f.body.stmts, label)
            };
            Flow::looped(body, true)
        }),
        other => {
            if free_in_expr(other).contains(name) || has_exit(other) {
                READ
            } else {
                OPEN
            }
        }
    }
}

/// The label of the loop whose `break` / `continue` the code being looked
/// at is directly in (`None`: unlabelled, or no loop).
type Label<'a> = Option<&'a str>;

/// Whether `break` / `continue` with `target` leaves the loop `label` names
/// (an unlabelled one always leaves the innermost loop).
fn same_loop(target: Option<&syn::Lifetime>, label: Label) -> bool {
    match target {
        None => true,
        Some(t) => label == Some(t.ident.to_string().as_str()),
    }
}

/// What an `if` (or `if let`) chain does with `name`: its condition, then
/// either branch.
fn if_flow(name: &str, i: &syn::ExprIf, label: Label) -> Flow {
    let (cond, binds) = match strip_parens(&i.cond) {
        Expr::Let(l) => (
            expr_flow(name, &l.expr, label),
            pat_names(&l.pat).contains(name),
        ),
        c => (expr_flow(name, c, label), false),
    };
    cond.then(|| {
        let then = if binds {
            shadowed_exits(&Expr::Block(syn::ExprBlock {
                attrs: Vec::new(),
                label: None,
                block: i.then_branch.clone(),
            }))
        } else {
            stmts_flow(name, &i.then_branch.stmts, label)
        };
        let els = i
            .else_branch
            .as_ref()
            .map_or(OPEN, |(_, e)| expr_flow(name, e, label));
        then.or(els)
    })
}

/// What a `match` does with `name`: its scrutinee, then any arm (guard,
/// then body); an arm that binds `name` cannot touch the local.
fn match_flow(name: &str, m: &syn::ExprMatch, label: Label) -> Flow {
    expr_flow(name, &m.expr, label).then(|| {
        let mut out: Option<Flow> = None;
        for arm in &m.arms {
            let flow = if pat_names(&arm.pat).contains(name) {
                shadowed_exits(&arm.body)
            } else {
                let guard = arm
                    .guard
                    .as_ref()
                    .map_or(OPEN, |(_, g)| expr_flow(name, g, label));
                guard.then(|| expr_flow(name, &arm.body, label))
            };
            out = Some(out.map_or(flow, |prev| prev.or(flow)));
        }
        out.unwrap_or(DEAD)
    })
}

/// Code in which `name` is shadowed: it cannot touch the local, but its
/// exits still lead where they lead.
fn shadowed_exits(expr: &Expr) -> Flow {
    let exits = has_exit(expr);
    Flow {
        read: false,
        open: true,
        brk: exits,
        cont: exits,
    }
}

/// A `break` or `continue` anywhere in `expr` (outside closures).
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
                label: None,
            },
            ContFrame::Assigns(["state".to_owned()].into()),
            rest(quote::quote! { let z = 1; }),
        ];
        assert!(!live_after("state", &cont));
        assert!(live_after("turns", &cont));
    }

    #[test]
    fn break_and_continue_go_where_they_go() {
        let body: Block = syn::parse2(quote::quote!({
            if skip {
                continue;
            }
            x = 1;
            use_it(x);
        }))
        .unwrap();
        let in_loop = |after: proc_macro2::TokenStream, endless: bool| {
            vec![
                rest(after),
                ContFrame::Loop {
                    body: Rc::new(body.clone()),
                    cond: None,
                    endless,
                    label: None,
                },
                rest(quote::quote! { if done { break; } x = 2; }),
            ]
        };
        // `continue` starts the next iteration, which assigns before reading;
        // then the `for` loop may end and the code after it reads.
        assert!(live_after(
            "x",
            &in_loop(quote::quote! { use_it(x); }, false)
        ));
        assert!(!live_after("x", &in_loop(quote::quote! { x = 3; }, false)));
        // `loop`: only `break` leaves, and the code after the loop assigns.
        assert!(!live_after("x", &in_loop(quote::quote! { x = 3; }, true)));
        let labelled = [rest(quote::quote! { if done { break 'outer; } x = 1; })];
        assert!(
            live_after("x", &labelled),
            "a break of an outer loop is not followed"
        );
        let body: Block = syn::parse2(quote::quote!({
            if skip {
                continue 'l;
            }
            x = 1;
        }))
        .unwrap();
        let own_label = [
            ContFrame::Loop {
                body: Rc::new(body),
                cond: None,
                endless: false,
                label: Some("l".into()),
            },
            rest(quote::quote! { if skip { continue 'l; } x = 2; }),
        ];
        assert!(
            !live_after("x", &own_label),
            "continue 'l of the loop itself is followed"
        );
    }

    #[test]
    fn a_while_condition_and_body_are_both_followed() {
        let body: Block = syn::parse2(quote::quote!({
            x = 1;
            use_it(x);
        }))
        .unwrap();
        let frame = |cond: proc_macro2::TokenStream| ContFrame::Loop {
            body: Rc::new(body.clone()),
            cond: Some(Rc::new(syn::parse2(cond).unwrap())),
            endless: false,
            label: None,
        };
        let after = rest(quote::quote! { x = 0; });
        assert!(!live_after(
            "x",
            &[after.clone(), frame(quote::quote!(n < 3))]
        ));
        assert!(live_after("x", &[after, frame(quote::quote!(x < 3))]));
        let body_reads: Block = syn::parse2(quote::quote!({
            use_it(x);
        }))
        .unwrap();
        let reads = ContFrame::Loop {
            body: Rc::new(body_reads),
            cond: Some(Rc::new(syn::parse2(quote::quote!(n < 3)).unwrap())),
            endless: false,
            label: None,
        };
        assert!(live_after("x", &[rest(quote::quote! { x = 0; }), reads]));
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
