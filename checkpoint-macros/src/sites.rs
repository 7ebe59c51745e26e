//! Finding checkpoint sites: `checkpoint!()` / `checkpoint!("label")` and the
//! suspension points `ctx.wait_for(..).await`, `ctx.wait_for_timeout(..).await`,
//! `ctx.sleep(..).await`, `ctx.join(..).await`, `ctx.join_all(..).await`,
//! `ctx.retry(..).await`.
//!
//! Sites are numbered in source order. Each site node is tagged with a marker
//! attribute holding its number, so later passes can tell which sites a piece
//! of code contains (always a contiguous range, thanks to source order).

use std::collections::HashMap;

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::visit::{self, Visit};
use syn::visit_mut::{self, VisitMut};
use syn::{Attribute, Expr, Ident, LitStr, Macro, Stmt};

use crate::errors::Errors;

const MARKER: &str = "__checkpoint_site";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiteKind {
    Checkpoint,
    WaitFor,
    WaitForTimeout,
    Sleep,
    Join,
    JoinAll,
    Retry,
}

impl SiteKind {
    fn from_method(name: &str) -> Option<Self> {
        match name {
            "wait_for" => Some(Self::WaitFor),
            "wait_for_timeout" => Some(Self::WaitForTimeout),
            "sleep" => Some(Self::Sleep),
            "join" => Some(Self::Join),
            "join_all" => Some(Self::JoinAll),
            "retry" => Some(Self::Retry),
            _ => None,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::Checkpoint => "checkpoint!()",
            Self::WaitFor => "ctx.wait_for(..).await",
            Self::WaitForTimeout => "ctx.wait_for_timeout(..).await",
            Self::Sleep => "ctx.sleep(..).await",
            Self::Join => "ctx.join(..).await",
            Self::JoinAll => "ctx.join_all(..).await",
            Self::Retry => "ctx.retry(..).await",
        }
    }
}

/// What is known about a site before lowering.
#[derive(Clone, Debug)]
pub struct Site {
    /// The site's number, from 1 in source order: the `#N` of messages, of
    /// the keys older versions gave unlabelled sites, and the number the
    /// generated code passes the runtime (see [`numbered`]).
    pub number: u32,
    pub kind: SiteKind,
    pub label: Option<String>,
    /// A wait's signal name, when it is a string literal.
    pub signal: Option<String>,
    /// A retry's name, when it is a string literal (part of its key only:
    /// it is no signal).
    pub retry_name: Option<String>,
    pub span: Span,
    /// See [`Site::key`]; set once every site is known ([`assign_keys`]).
    key: String,
}

impl Site {
    /// The key stored with each checkpoint and matched on resume: the
    /// label; for an unlabelled site, a readable name that an edit elsewhere
    /// in the body does not change: `wait_for("approval")` for a wait on a
    /// literal signal name, otherwise the kind and its number among the
    /// unlabelled sites of that kind (`checkpoint 2`, `sleep 1`,
    /// `wait_for 1`); a second wait on the same literal is
    /// `wait_for("approval") 2`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key versions before readable names gave an unlabelled site
    /// (`#N`, its number among all sites), which it still takes on resume.
    pub fn legacy_key(&self) -> Option<String> {
        self.label.is_none().then(|| format!("#{}", self.number))
    }

    /// How errors and messages name this site.
    pub fn describe(&self) -> String {
        match &self.label {
            Some(l) => format!("checkpoint \"{l}\""),
            None => format!("{} #{}", self.kind.describe(), self.number),
        }
    }
}

/// The entry of site `number` in a list kept per site in site order (the
/// sites, their plans). Sites are numbered from 1 everywhere: in keys and
/// messages (`#N`), in the generated code, and in the runtime
/// (`Frame::target`, `SiteInfo::numbered`); this is the one place in the
/// macro where a number becomes a position.
pub fn numbered<T>(per_site: &[T], number: u32) -> &T {
    &per_site[position(number)]
}

/// [`numbered`], to change the entry.
pub fn numbered_mut<T>(per_site: &mut [T], number: u32) -> &mut T {
    &mut per_site[position(number)]
}

/// The entries of the sites before site `number`.
pub fn before<T>(per_site: &[T], number: u32) -> &[T] {
    &per_site[..position(number)]
}

fn position(number: u32) -> usize {
    (number as usize)
        .checked_sub(1)
        .expect("site numbers start at 1")
}

/// Gives each site its key (see [`Site::key`]).
fn assign_keys(sites: &mut [Site]) {
    let mut seen: HashMap<String, u32> = HashMap::new();
    for site in sites.iter_mut() {
        if let Some(label) = &site.label {
            site.key = label.clone();
            continue;
        }
        let call = match site.kind {
            SiteKind::Checkpoint => "checkpoint",
            SiteKind::WaitFor => "wait_for",
            SiteKind::WaitForTimeout => "wait_for_timeout",
            SiteKind::Sleep => "sleep",
            SiteKind::Join => "join",
            SiteKind::JoinAll => "join_all",
            SiteKind::Retry => "retry",
        };
        let named = site.signal.as_ref().or(site.retry_name.as_ref());
        let base = match named {
            Some(signal) => format!("{call}({signal:?})"),
            None => call.to_owned(),
        };
        let n = seen.entry(base.clone()).or_insert(0);
        *n += 1;
        site.key = match (named, *n) {
            (Some(_), 1) => base,
            (_, n) => format!("{base} {n}"),
        };
    }
}

/// Tags every site in `body` and returns them in source order.
pub fn number_sites(block: &mut syn::Block, ctx: Option<&Ident>) -> syn::Result<Vec<Site>> {
    let mut finder = SiteFinder {
        ctx,
        sites: Vec::new(),
        labels: HashMap::new(),
        closure_depth: 0,
        errors: Errors::default(),
    };
    finder.visit_block_mut(block);
    finder.errors.finish()?;
    assign_keys(&mut finder.sites);
    let mut errors = Errors::default();
    for (i, site) in finder.sites.iter().enumerate() {
        let legacy = site
            .key
            .strip_prefix('#')
            .is_some_and(|n| n.parse::<u32>().is_ok());
        if site.label.is_some() && legacy {
            errors.push(
                site.span,
                format!("checkpoint label \"{}\" is reserved: `#N` names the unlabelled sites of older versions", site.key),
            );
        }
        if let Some(other) = finder.sites[..i].iter().find(|o| o.key == site.key) {
            let labelled = if site.label.is_some() { site } else { other };
            errors.push(
                labelled.span,
                format!(
                    "checkpoint label \"{}\" is also the name of an unlabelled site; choose another label",
                    site.key
                ),
            );
        }
    }
    errors.finish()?;
    Ok(finder.sites)
}

struct SiteFinder<'a> {
    ctx: Option<&'a Ident>,
    sites: Vec<Site>,
    labels: HashMap<String, Span>,
    /// > 0 inside a closure or async block, where a site cannot resume.
    closure_depth: usize,
    errors: Errors,
}

impl SiteFinder<'_> {
    fn add(
        &mut self,
        kind: SiteKind,
        label: Option<LitStr>,
        signal: Option<String>,
        span: Span,
        attrs: &mut Vec<Attribute>,
    ) {
        if self.closure_depth > 0 {
            self.errors.push(
                span,
                format!(
                    "{} cannot be used inside a closure or an `async` block: only code directly in the #[workflow] body can be resumed; move it out of the closure",
                    kind.describe()
                ),
            );
            return;
        }
        let label = label.map(|l| {
            let value = l.value();
            if value.is_empty() {
                self.errors.push(l.span(), "checkpoint label must not be empty");
            } else if let Some(first) = self.labels.get(&value) {
                let mut e = syn::Error::new(
                    l.span(),
                    format!("checkpoint label \"{value}\" is used twice; each checkpoint site needs its own label"),
                );
                e.combine(syn::Error::new(*first, "first used here"));
                self.errors.add(e);
            } else {
                self.labels.insert(value.clone(), l.span());
            }
            value
        });
        // Site numbers start at 1, as `#N` in keys and messages do.
        let number = self.sites.len() as u32 + 1;
        attrs.push(syn::parse_quote_spanned!(span=> #[__checkpoint_site = #number]));
        self.sites.push(Site {
            number,
            kind,
            label,
            retry_name: None,
            signal,
            span,
            key: String::new(),
        });
    }

    fn checkpoint_macro(&mut self, mac: &Macro, attrs: &mut Vec<Attribute>) -> bool {
        if !is_checkpoint_macro(mac) {
            return false;
        }
        let label = if mac.tokens.is_empty() {
            Ok(None)
        } else {
            mac.parse_body::<LitStr>().map(Some).map_err(|_| {
                syn::Error::new(
                    mac.tokens.span(),
                    "checkpoint!() takes nothing or a string literal label: `checkpoint!()` or `checkpoint!(\"label\")`",
                )
            })
        };
        match label {
            Ok(label) => self.add(SiteKind::Checkpoint, label, None, mac.path.span(), attrs),
            Err(e) => self.errors.add(e),
        }
        true
    }
}

impl VisitMut for SiteFinder<'_> {
    fn visit_stmt_mut(&mut self, stmt: &mut Stmt) {
        if let Stmt::Macro(m) = stmt {
            if self.checkpoint_macro(&m.mac.clone(), &mut m.attrs) {
                return;
            }
        }
        visit_mut::visit_stmt_mut(self, stmt);
    }

    fn visit_expr_mut(&mut self, expr: &mut Expr) {
        match expr {
            Expr::Macro(m) if is_checkpoint_macro(&m.mac) => {
                self.checkpoint_macro(&m.mac.clone(), &mut m.attrs);
                return;
            }
            Expr::Await(a) if suspension_kind(&a.base, self.ctx).is_some() => {
                if let Some(kind) = suspension_kind(&a.base, self.ctx) {
                    // Visit the call's arguments first: they run before the site.
                    visit_mut::visit_expr_mut(self, &mut a.base);
                    let span = a.base.span();
                    let signal = literal_signal(&a.base);
                    let before = self.sites.len();
                    self.add(kind, None, signal, span, &mut a.attrs);
                    if let (SiteKind::Retry, Some(site)) = (kind, self.sites.get_mut(before)) {
                        site.retry_name = literal_first_arg(&a.base);
                    }
                }
                return;
            }
            Expr::Closure(_) | Expr::Async(_) => {
                self.closure_depth += 1;
                visit_mut::visit_expr_mut(self, expr);
                self.closure_depth -= 1;
                return;
            }
            _ => {}
        }
        visit_mut::visit_expr_mut(self, expr);
    }

    fn visit_item_mut(&mut self, _: &mut syn::Item) {
        // A nested fn is not part of the workflow: its `checkpoint!()` expands to
        // the "outside a workflow" error by itself.
    }
}

fn is_checkpoint_macro(mac: &Macro) -> bool {
    mac.path
        .segments
        .last()
        .is_some_and(|s| s.ident == "checkpoint")
}

/// `ctx.wait_for(..)` etc. on the workflow's own `ctx` parameter.
/// The signal name of `ctx.wait_for("name")` / `ctx.wait_for_timeout("name", ..)`
/// when it is a string literal.
fn literal_signal(base: &Expr) -> Option<String> {
    let Expr::MethodCall(call) = base else {
        return None;
    };
    if !matches!(
        SiteKind::from_method(&call.method.to_string()),
        Some(SiteKind::WaitFor | SiteKind::WaitForTimeout)
    ) {
        return None;
    }
    literal_first_arg(base)
}

/// The first argument of a method call, when it is a string literal.
fn literal_first_arg(base: &Expr) -> Option<String> {
    let Expr::MethodCall(call) = base else {
        return None;
    };
    match call.args.first()? {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => Some(s.value()),
        _ => None,
    }
}

pub fn suspension_kind(base: &Expr, ctx: Option<&Ident>) -> Option<SiteKind> {
    let ctx = ctx?;
    let Expr::MethodCall(call) = base else {
        return None;
    };
    let Expr::Path(recv) = &*call.receiver else {
        return None;
    };
    if !recv.path.is_ident(ctx) {
        return None;
    }
    SiteKind::from_method(&call.method.to_string())
}

/// The site number of a tagged node's attributes.
pub fn marker(attrs: &[Attribute]) -> Option<u32> {
    attrs.iter().find_map(|a| {
        if !a.path().is_ident(MARKER) {
            return None;
        }
        let syn::Meta::NameValue(nv) = &a.meta else {
            return None;
        };
        let Expr::Lit(lit) = &nv.value else {
            return None;
        };
        let syn::Lit::Int(i) = &lit.lit else {
            return None;
        };
        i.base10_parse().ok()
    })
}

/// The range of site numbers inside a piece of code, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteRange {
    pub first: u32,
    pub last: u32,
}

#[derive(Default)]
struct RangeFinder {
    range: Option<SiteRange>,
}

impl RangeFinder {
    fn note(&mut self, attrs: &[Attribute]) {
        if let Some(i) = marker(attrs) {
            self.range = Some(match self.range {
                None => SiteRange { first: i, last: i },
                Some(r) => SiteRange {
                    first: r.first.min(i),
                    last: r.last.max(i),
                },
            });
        }
    }
}

impl<'ast> Visit<'ast> for RangeFinder {
    fn visit_stmt_macro(&mut self, m: &'ast syn::StmtMacro) {
        self.note(&m.attrs);
    }
    fn visit_expr_macro(&mut self, m: &'ast syn::ExprMacro) {
        self.note(&m.attrs);
    }
    fn visit_expr_await(&mut self, a: &'ast syn::ExprAwait) {
        self.note(&a.attrs);
        visit::visit_expr_await(self, a);
    }
    fn visit_item(&mut self, _: &'ast syn::Item) {}
}

pub fn sites_in_stmt(stmt: &Stmt) -> Option<SiteRange> {
    let mut f = RangeFinder::default();
    f.visit_stmt(stmt);
    f.range
}

pub fn sites_in_expr(expr: &Expr) -> Option<SiteRange> {
    let mut f = RangeFinder::default();
    f.visit_expr(expr);
    f.range
}

pub fn sites_in_block(block: &syn::Block) -> Option<SiteRange> {
    let mut f = RangeFinder::default();
    f.visit_block(block);
    f.range
}

/// Removes the `#[transient]` and `#[migrate(..)]` markers the user put on
/// `let` statements (the macro has read them; rustc knows neither).
pub struct StripMarkers;

impl VisitMut for StripMarkers {
    fn visit_local_mut(&mut self, l: &mut syn::Local) {
        l.attrs
            .retain(|a| !a.path().is_ident("transient") && !crate::migrate::is_migrate(a));
        visit_mut::visit_local_mut(self, l);
    }
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn keys(body: proc_macro2::TokenStream) -> syn::Result<Vec<(String, Option<String>)>> {
        let mut block: syn::Block = syn::parse2(quote!({ #body })).expect("body parses");
        let ctx = Ident::new("ctx", Span::call_site());
        let sites = number_sites(&mut block, Some(&ctx))?;
        Ok(sites
            .iter()
            .map(|s| (s.key().to_owned(), s.legacy_key()))
            .collect())
    }

    #[test]
    fn unlabelled_sites_are_named_after_what_they_are_and_keep_their_old_keys() {
        let got = keys(quote! {
            checkpoint!();
            let x: bool = ctx.wait_for("approval").await;
            checkpoint!("named");
            let y: bool = ctx.wait_for("approval").await;
            ctx.sleep(d).await;
            let z: u8 = ctx.wait_for(name).await;
            let t: Option<u8> = ctx.wait_for_timeout("reply", d).await;
            checkpoint!();
            (x, y, z, t)
        })
        .expect("sites");
        let want: Vec<(String, Option<String>)> = [
            ("checkpoint 1", Some("#1")),
            ("wait_for(\"approval\")", Some("#2")),
            ("named", None),
            ("wait_for(\"approval\") 2", Some("#4")),
            ("sleep 1", Some("#5")),
            ("wait_for 1", Some("#6")),
            ("wait_for_timeout(\"reply\")", Some("#7")),
            ("checkpoint 2", Some("#8")),
        ]
        .iter()
        .map(|(k, l)| (k.to_string(), l.map(str::to_owned)))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_retry_is_named_after_its_literal_name_and_is_no_signal() {
        let mut block: syn::Block = syn::parse2(quote!({
            let a = ctx.retry("fetch", p, || op()).await;
            let b = ctx.retry("fetch", p, || op()).await;
            let c = ctx.retry(name, p, || op()).await;
            (a, b, c)
        }))
        .expect("body parses");
        let ctx = Ident::new("ctx", Span::call_site());
        let sites = number_sites(&mut block, Some(&ctx)).expect("sites");
        let keys: Vec<&str> = sites.iter().map(Site::key).collect();
        assert_eq!(keys, ["retry(\"fetch\")", "retry(\"fetch\") 2", "retry 1"]);
        assert!(sites
            .iter()
            .all(|s| s.kind == SiteKind::Retry && s.signal.is_none()));
    }

    #[test]
    fn a_label_that_is_another_site_s_name_or_an_old_key_is_an_error() {
        let err = keys(quote! {
            checkpoint!();
            checkpoint!("checkpoint 1");
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("also the name of an unlabelled site"),
            "{err}"
        );
        let err = keys(quote! { checkpoint!("#3"); }).unwrap_err();
        assert!(err.to_string().contains("reserved"), "{err}");
    }
}
