//! The error collector every pass reports into, so that the user sees all
//! the problems of a workflow at once. A module of its own, beneath every
//! pass: the passes that report errors (`parse`, `migrate`, `sites`,
//! `lower`, `expand`) import it and nothing else of each other's for it.

use proc_macro2::Span;

/// Collects several `syn::Error`s into one.
#[derive(Default)]
pub struct Errors {
    inner: Option<syn::Error>,
}

impl Errors {
    pub fn push(&mut self, span: Span, msg: impl std::fmt::Display) {
        self.add(syn::Error::new(span, msg));
    }

    pub fn add(&mut self, err: syn::Error) {
        match &mut self.inner {
            Some(e) => e.combine(err),
            None => self.inner = Some(err),
        }
    }

    pub fn finish(self) -> syn::Result<()> {
        match self.inner {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
