//! The plan's types (see the parent module).

use proc_macro2::{Span, TokenStream};
use syn::{Expr, Ident, Pat, Stmt};

use crate::analyse::branches::Reentry;
use crate::analyse::deferred::DeferredLocal;
use crate::migrate::Migration;
use crate::names::PatBinding;
use crate::sites::SiteRange;

/// What [`plan_body`] found.
pub struct BodyPlan {
    /// Every local some site saves or re-creates, in the order the walk met
    /// them (the order of the generated slots).
    pub bindings: Vec<Binding>,
    /// One per site, in site order: `sites[i]` is the site numbered `i + 1`.
    pub sites: Vec<SitePlan>,
    /// The body's statements, planned.
    pub body: BlockStmts,
    /// Every error found, in the order the body reads.
    pub(super) errors: Option<syn::Error>,
}

impl BodyPlan {
    /// The plan, if nothing was refused; else every error at once.
    pub fn checked(self) -> syn::Result<BodyPlan> {
        match self.errors {
            Some(e) => Err(e),
            None => Ok(self),
        }
    }
}

/// What a site does with the locals around it. The expansion needs only
/// what is saved (`fields`, `loops`); the rest, and each `why`, are for
/// readers and the tests to ask.
#[derive(Clone, Default, Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct SitePlan {
    /// The locals a checkpoint taken here stores, in field order.
    pub fields: Vec<Field>,
    /// How many `for` loops hold the site (their positions are stored too).
    pub loops: u32,
    /// Locals the code after the site reads that are built again on resume
    /// rather than saved.
    pub recreated: Vec<Recreated>,
    /// Locals the code after the site reads that resuming derives again from
    /// restored ones (a loop's item, an arm's binding of a re-evaluated
    /// `match`) rather than saving them.
    pub rederived: Vec<Rederived>,
    /// Locals that would have to cross the site but cannot: each is also a
    /// compile error.
    pub refused: Vec<Refused>,
    /// `#[transient]` locals the code after the site reads that the
    /// uninterrupted path builds again once the checkpoint is stored, as a
    /// resumed run does (docs/exactness.md: a transient keeps no state
    /// across a checkpoint), in declaration order.
    pub rebuilt: Vec<Rebuilt>,
    /// One of `rebuilt` is built from another (`Api::new(&client)`): the
    /// old ones are dropped before any is built again, since the old `api`
    /// may still borrow the old `client`.
    pub rebuilt_reads_rebuilt: bool,
}

/// A `#[transient]` built again after a site on the uninterrupted path.
#[derive(Clone, Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Rebuilt {
    pub ident: Ident,
    /// Its `let` pattern and initialiser, as declared.
    pub pat: Pat,
    pub init: Expr,
    /// Handed over by the split the site is the head of: bound anew
    /// (`let pat = init;`) before the split hands it over; otherwise (an
    /// outer local) assigned (`ident = init;`).
    pub rebind: bool,
}

/// One saved local of a site.
#[derive(Clone, Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Field {
    /// Into [`BodyPlan::bindings`].
    pub binding: usize,
    pub save: Save,
    pub why: Why,
    /// What the uninterrupted path continues with once the checkpoint is
    /// stored (docs/exactness.md: the decoded state, on both paths).
    pub after: After,
}

/// What the uninterrupted path does with a saved local once the checkpoint
/// is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    /// Replaced by the value decoded from the checkpoint's bytes, as a
    /// resumed run restores it.
    Decoded,
    /// Borrowed around the site by an enclosing `for` loop's iterator or a
    /// re-derived `if let` / `match` on a borrow: it cannot be replaced
    /// here, so it was replaced by its decoded value where that borrow
    /// began (the loop or branch entered); the bytes saved here are its
    /// encoding, and the value decodes to itself again unless its
    /// `Deserialize` changes what it decodes each time.
    DecodedAtEntry,
    /// Borrowed by a `#[transient]` that the site does not build again (a
    /// closure that captures it, a transient a loop borrows): kept as it is
    /// (docs/exactness.md, the open row on transients). What a transient
    /// built again at the site reads is `Decoded` (the transient is dropped
    /// first).
    Kept,
    /// Saved as a snapshot taken earlier (loop entry, where it was decoded;
    /// or a placeholder nothing reads), or written back through a loop's
    /// item: nothing to replace here beyond what the lowering writes back.
    Snapshot,
}

/// How a saved local is written into a checkpoint.
#[derive(Clone, Debug)]
pub enum Save {
    /// The local as it is at the site; `order_observed`: the code after the
    /// site observes its iteration order (what it observes, for the error
    /// a hash-ordered type gets at save).
    Live { order_observed: Option<String> },
    /// A snapshot taken earlier (this variable holds it): at loop entry, for
    /// a local the loop's iterator took or borrows; at the split, for a local
    /// dead at this site and assigned again later (a placeholder of its type).
    Snapshot(Ident),
    /// What a loop binding points to (`*x` of `for x in v.iter_mut()`).
    Through,
}

/// Why a site saves a local.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The code after the site reads it before assigning it.
    ReadAfter,
    /// Declared `let x;` and definitely assigned before the site.
    AssignedDeferred,
    /// A `mut` binding of a loop item or a re-derived arm: re-deriving gives
    /// the value before the body changed it.
    ChangedBinding,
    /// A copy, taken at loop entry, of a `mut` local the loop's iterable and
    /// body both read: the iterable is evaluated again from it on resume.
    LoopEntry,
    /// The items a loop writing through its items has finished (their final
    /// values are written back on resume).
    WrittenItems,
    /// The current item of a loop writing through its items.
    WrittenThrough,
}

/// A local re-created on resume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recreated {
    pub name: String,
    pub why: RecreatedWhy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecreatedWhy {
    /// Declared `#[transient]`: its initialiser runs again.
    Transient,
    /// Immutable and initialised with a constant.
    Constant,
}

/// A local derived again on resume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rederived {
    pub name: String,
    pub why: RederivedWhy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RederivedWhy {
    /// An item of a `for` loop: the iterable is evaluated again and the
    /// items already taken are skipped.
    LoopItem,
    /// A binding of an `if let` / `match` whose condition is evaluated again.
    ArmBinding,
}

/// A local refused at a site.
#[derive(Clone, Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct Refused {
    pub name: String,
    /// The compile error's text.
    pub why: String,
}

/// A local that some site saves, or that is re-created on resume.
pub struct Binding {
    pub ident: Ident,
    pub transient: bool,
    /// Declared `mut`: the code may change it.
    pub mutable: bool,
    /// The field's name in checkpoints when it is not the local's name (a
    /// loop's entry snapshot `q@entry`, its written items, `*x`).
    pub field_name: Option<String>,
    /// The sites that save it, in order.
    pub saved_at: Vec<u32>,
    /// The slot its value is restored into: `__cp_slot_<name>`.
    pub slot: Ident,
    /// Its saving operations, taken once through `save_trait` where the body
    /// starts (`__cp_ops_<name>`), so that a type that cannot be saved is one
    /// error, however many sites save the local.
    pub ops: Ident,
    /// The marker trait carrying the message for a type that cannot be
    /// saved: `__cp_save_<name>`, shared by the locals of one name.
    pub save_trait: Ident,
    /// How it is taken from checkpoints of older code (`#[migrate(..)]`).
    pub migration: Option<Migration>,
    /// A `let x;` assigned a borrowed value later: refused (once) where a
    /// site would save it.
    pub borrowed: bool,
}

impl Binding {
    /// The field's name in checkpoints.
    pub fn field_name(&self) -> String {
        self.field_name
            .clone()
            .unwrap_or_else(|| self.ident.to_string())
    }
}

/// A block's statements (see `lower`'s module docs for the code a split
/// becomes).
pub enum BlockStmts {
    /// No site: emitted as written.
    Plain(Vec<Stmt>),
    /// `let x;` declarations hoisted to the top (each with its binding),
    /// `#[transient]` closures defined once at the top, then the rest.
    Split {
        deferred: Vec<(DeferredLocal, usize)>,
        closures: Vec<Stmt>,
        body: Stmts,
    },
}

/// A `{ .. }` block that holds sites.
pub struct BlockPlan {
    pub span: Span,
    pub stmts: BlockStmts,
}

/// A statement list, split at its last statement that holds a site.
pub enum Stmts {
    Plain(Vec<Stmt>),
    Split(Box<SplitNode>),
}

/// One split (see `analyse::split` for how it is decided).
pub struct SplitNode {
    /// The sites the split statement holds.
    pub range: SiteRange,
    /// Items of the prefix, kept outside the split.
    pub items: Vec<Stmt>,
    /// The locals handed over, in declaration order.
    pub exports: Vec<Export>,
    /// Deferred locals the prefix definitely assigns (binding ids): the
    /// resume path assigns them from the checkpoint.
    pub assigned_deferred: Vec<usize>,
    /// The statements before the split statement, planned the same way.
    pub prefix: Stmts,
    /// The split statement.
    pub head: SiteStmt,
    /// Transients run once after the merge, on both paths.
    pub after_merge: Vec<Stmt>,
    /// The statements after the split statement (no site).
    pub suffix: Vec<Stmt>,
}

/// A local a split hands over.
pub struct Export {
    pub binding: PatBinding,
    /// Its binding (slot, save trait).
    pub id: usize,
    /// `#[transient]` or constant: the pattern and initialiser run again on
    /// resume.
    pub recreate: Option<(Pat, Expr)>,
    /// Assigned again after the split: the snapshot taken at the split that
    /// sites where it is dead save instead.
    pub placeholder: Option<Ident>,
}

/// The statement a split is made at.
pub enum SiteStmt {
    /// The statement is a site, or a site with a chain after it
    /// (`ctx.wait_for(..).await.unwrap_or(..)?`).
    Site {
        site: u32,
        call: SiteCall,
        /// The chain with the call replaced by the site's value
        /// (`__cp_head`), or `None` for the bare site.
        rest: Option<TokenStream>,
        wrap: Wrap,
    },
    /// A block, loop or branch that holds sites.
    Ctrl { ctrl: Ctrl, wrap: Wrap },
    /// A site where none can be (reported).
    Misplaced,
}

/// What a site does.
pub enum SiteCall {
    /// `checkpoint!()`.
    Checkpoint,
    /// `ctx.wait_for(..).await` and the other suspension calls.
    Suspend(syn::ExprMethodCall),
}

/// What the split statement is around its site or control flow.
pub enum Wrap {
    /// An expression statement (with or without `;`).
    Expr { semi: bool },
    /// `left = <it>;`
    Assign {
        left: Expr,
        semi: Option<syn::token::Semi>,
    },
    /// `let pat = <it> else { .. };`
    Let {
        attrs: Vec<syn::Attribute>,
        pat: Pat,
        diverge: Option<TokenStream>,
    },
}

/// Control flow that holds sites.
pub enum Ctrl {
    Block {
        label: Option<syn::Label>,
        block: BlockPlan,
    },
    Loop {
        label: Option<syn::Label>,
        body: BlockPlan,
    },
    While(Box<WhilePlan>),
    For(Box<ForPlan>),
    Arms(Box<ArmsPlan>),
    /// A site where none can be (reported).
    Misplaced,
}

/// `while` / `while let` re-entering its body.
pub struct WhilePlan {
    pub label: Option<syn::Label>,
    pub range: SiteRange,
    /// `while let pat = expr` with the bindings the body reads, carried into
    /// the body (whose first statement unpacks them); or the condition.
    pub cond: WhileCond,
    pub body: BlockPlan,
}

pub enum WhileCond {
    Let {
        pat: Box<Pat>,
        expr: Box<Expr>,
        carried: Vec<PatBinding>,
    },
    Plain(Expr),
}

/// A `for` loop that holds sites: re-evaluates its iterable on resume and
/// skips the items already taken.
pub struct ForPlan {
    pub label: Option<syn::Label>,
    pub pat: Pat,
    /// The iterable, in a stable order where it is a hash collection's.
    pub iterable: Expr,
    pub range: SiteRange,
    /// How many `for` loops enclose this one.
    pub depth: usize,
    /// The loop as errors name it.
    pub described: String,
    /// Whether items get a fingerprint (not a range's).
    pub fingerprinted: bool,
    /// The generated variables: iterator, items taken, the current item's
    /// position and fingerprint.
    pub iter: Ident,
    pub next: Ident,
    pub pos: Ident,
    pub item_fp: Ident,
    /// Locals only the iterable reads, snapshot before the loop (binding,
    /// snapshot variable).
    pub snapshots: Vec<(usize, Ident)>,
    /// Saved locals the iterable names that no enclosing loop or branch
    /// already borrows: the uninterrupted path replaces them by their
    /// decoded value at loop entry (from their snapshot when they have
    /// one), since the iterator may borrow them across the sites inside.
    pub decoded_at_entry: Vec<(usize, Option<Ident>)>,
    /// Copies at loop entry the iterable is evaluated from on resume.
    pub entries: Vec<EntryCopy>,
    pub items: ForItems,
    pub body: BlockPlan,
}

/// A copy of an iterable's input saved at loop entry.
pub struct EntryCopy {
    pub local: Ident,
    pub snap: Ident,
    /// The copy's binding (its slot and save trait).
    pub binding: usize,
}

/// How a `for` loop's items are kept.
pub enum ForItems {
    /// Not written through: `mut` bindings get their saved values back.
    Plain { overwrite: Overwrite },
    /// Written through: a log of finished items and the bindings saved
    /// through (`*x`), each with its binding.
    WritingBack {
        log: Ident,
        log_binding: usize,
        cur: Ident,
        bindings: Vec<(Ident, usize)>,
    },
}

/// `mut` bindings that are re-derived on resume but may have changed before
/// the site: overwritten from the checkpoint when resuming into `range`.
pub struct Overwrite {
    pub range: SiteRange,
    pub bindings: Vec<(Ident, usize)>,
}

/// An `if` chain or a `match` that holds sites.
pub struct ArmsPlan {
    /// The `match`'s scrutinee (`None` for an `if` chain).
    pub scrutinee: Option<Expr>,
    /// The generic enum the head carries the chosen arm's bindings in.
    pub ident: Ident,
    pub reentry: Reentry,
    pub arms: Vec<ArmPlan>,
    /// Re-derived from a borrow: the saved locals the condition or
    /// scrutinee names, replaced by their decoded value before it is
    /// evaluated on the uninterrupted path (the arms' bindings borrow them
    /// across the sites inside).
    pub decoded_at_entry: Vec<usize>,
}

pub struct ArmPlan {
    /// `pattern if guard`, or the `if` condition (empty for `else`).
    pub head: TokenStream,
    /// The bindings of its pattern that its body reads.
    pub carried: Vec<PatBinding>,
    pub sites: Option<SiteRange>,
    pub body: ArmBody,
}

pub enum ArmBody {
    /// No site: as written.
    Plain(Expr),
    /// Re-derived: the bindings come from evaluating the head again.
    Rederived {
        overwrite: Overwrite,
        block: BlockPlan,
    },
    /// Restored: the body starts by unpacking the carried bindings.
    Restored(BlockPlan),
    /// Its unpacking did not parse (reported).
    Broken,
}
