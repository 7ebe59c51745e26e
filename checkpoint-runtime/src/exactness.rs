//! Checks that a value saved at a checkpoint comes back as the value the
//! uninterrupted run goes on with (part of the generated-code ABI; the macro
//! emits calls to these). `docs/exactness.md` is the model: every way a
//! resumed run could observe a difference, and which check here, in the
//! macro or in [`iteration`](crate::iteration) treats it.
//!
//! Each probe is chosen by method resolution on the local's type where the
//! generated code names the local (autoref specialisation: the impl on
//! `&Probe<T>` for the types it is about wins over the fallback on
//! `Probe<T>`), so a check costs nothing for the types it is not about.
//!
//! - [`SharedHandle`]: an `Arc`/`Rc` (or an `Option` of one) that another
//!   handle still shares when it is saved would come back as a copy of its
//!   own, and writes through one handle would no longer be seen through the
//!   other: refused at save.
//! - [`RoundTrips`]: in debug builds, a value whose type has `PartialEq` is
//!   decoded from the bytes just saved and compared (a `#[serde(skip)]`
//!   field, a lossy `Serialize` impl): refused at save when it differs.
//! - [`IteratorTransient`]: a `#[transient]` iterator would restart from its
//!   first item on resume: refused at compile time.
//!
//! Hash order is checked by [`Encoder::typed_field_order_observed`], for the
//! locals whose order the macro finds observed after the site.

use std::rc::Rc;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::abi::Encoder;
use crate::codec;
use crate::Error;

/// A saved local, for the probes to look at its type.
pub struct ValueProbe<'a, T: ?Sized>(&'a T);

/// [`ValueProbe`] of a saved local.
pub fn value_probe<T: ?Sized>(value: &T) -> ValueProbe<'_, T> {
    ValueProbe(value)
}

/// The message of a handle shared when it is saved.
fn shared_message(kind: &str, strong: usize, weak: usize) -> String {
    format!(
        "it is an `{kind}` that {} other handle(s) share (strong count {strong}, weak count {weak}): a checkpoint saves a copy of the value, so after a resume this handle would no longer share it, and a write through one would not be seen through the other; keep the value in one owned local (no `{kind}`), or drop the other handles before the checkpoint",
        strong - 1 + weak
    )
}

/// Chosen for `Arc`/`Rc` locals (and `Option`s of them): refuses a handle
/// that others share when it is saved.
pub trait SharedHandle {
    /// The strong and weak counts of the handle (`None`: no handle).
    fn counts(&self) -> Option<(&'static str, usize, usize)>;

    /// `Err` if another handle shares the value.
    fn refuse_shared(&self, enc: &Encoder) -> Result<(), Error> {
        match self.counts() {
            Some((kind, strong, weak)) if strong > 1 || weak > 0 => {
                Err(enc.inexact(shared_message(kind, strong, weak)))
            }
            _ => Ok(()),
        }
    }
}

impl<T: ?Sized> SharedHandle for &ValueProbe<'_, Arc<T>> {
    fn counts(&self) -> Option<(&'static str, usize, usize)> {
        Some(("Arc", Arc::strong_count(self.0), Arc::weak_count(self.0)))
    }
}

impl<T: ?Sized> SharedHandle for &ValueProbe<'_, Rc<T>> {
    fn counts(&self) -> Option<(&'static str, usize, usize)> {
        Some(("Rc", Rc::strong_count(self.0), Rc::weak_count(self.0)))
    }
}

impl<T: ?Sized> SharedHandle for &ValueProbe<'_, Option<Arc<T>>> {
    fn counts(&self) -> Option<(&'static str, usize, usize)> {
        self.0
            .as_ref()
            .map(|a| ("Arc", Arc::strong_count(a), Arc::weak_count(a)))
    }
}

impl<T: ?Sized> SharedHandle for &ValueProbe<'_, Option<Rc<T>>> {
    fn counts(&self) -> Option<(&'static str, usize, usize)> {
        self.0
            .as_ref()
            .map(|a| ("Rc", Rc::strong_count(a), Rc::weak_count(a)))
    }
}

/// Chosen for every other local: nothing to refuse.
pub trait NotAHandle {
    /// Always `Ok`.
    fn refuse_shared(&self, _enc: &Encoder) -> Result<(), Error> {
        Ok(())
    }
}

impl<T: ?Sized> NotAHandle for ValueProbe<'_, T> {}

/// Values larger than this are not decoded again to be compared (the check
/// runs in debug builds, on every save; a long appended history would make
/// each save decode all of it).
pub const ROUND_TRIP_LIMIT: usize = 64 * 1024;

/// Chosen for locals whose type has `PartialEq`: in debug builds, the value
/// decoded from the bytes just saved must equal the value itself.
pub trait RoundTrips {
    /// `Err` if the field encoded last does not decode to an equal value.
    fn refuse_lossy(&self, enc: &Encoder) -> Result<(), Error>;
}

impl<T: PartialEq + DeserializeOwned> RoundTrips for &ValueProbe<'_, T> {
    fn refuse_lossy(&self, enc: &Encoder) -> Result<(), Error> {
        let bytes = enc.last_field_bytes();
        // A value unequal to itself (a NaN inside) cannot be compared.
        #[allow(clippy::eq_op)]
        let comparable = self.0 == self.0;
        if !cfg!(debug_assertions) || bytes.len() > ROUND_TRIP_LIMIT || !comparable {
            return Ok(());
        }
        match codec::decode::<T>(bytes) {
            Ok((back, rest)) if rest.is_empty() && back == *self.0 => Ok(()),
            Ok(_) => Err(enc.inexact_last(
                "the value decoded from its saved bytes is not equal to it (a `#[serde(skip)]` field comes back as its default; a `Serialize`/`Deserialize` impl that drops or rebuilds state), so a resumed run would go on with another value; save what the code needs (drop the `skip`, or keep that state in a local of its own), or make the impls round-trip (checked in debug builds)".to_owned(),
            )),
            Err(e) => Err(enc.inexact_last(format!(
                "the bytes just saved do not decode as its type ({e}): its `Serialize` and `Deserialize` impls do not agree"
            ))),
        }
    }
}

/// Chosen for locals whose type has no `PartialEq`: nothing to compare.
pub trait NotComparable {
    /// Always `Ok`.
    fn refuse_lossy(&self, _enc: &Encoder) -> Result<(), Error> {
        Ok(())
    }
}

impl<T: ?Sized> NotComparable for ValueProbe<'_, T> {}

/// What a `#[transient]` local must not be: an iterator, which a resumed run
/// would rebuild at its first item. Implemented for no type, so that the
/// bound fails with this message.
#[diagnostic::on_unimplemented(
    message = "a `#[transient]` local cannot be an iterator (`{Self}`): on resume its initialiser runs again and it would start again from its first item",
    label = "this `#[transient]` local is an iterator",
    note = "save the position instead: keep the collection (or what it is read from) and an index in ordinary locals, and take the item by index after the checkpoint"
)]
pub trait RebuiltAtStart {}

/// A `#[transient]` local, for [`IteratorTransient`] to look at its type.
pub struct TransientProbe<'a, T: ?Sized>(&'a T);

/// [`TransientProbe`] of a `#[transient]` local.
pub fn transient_probe<T: ?Sized>(value: &T) -> TransientProbe<'_, T> {
    TransientProbe(value)
}

/// Chosen for `#[transient]` iterators: refused at compile time.
pub trait IteratorTransient {
    /// The iterator's type.
    type Iter;

    /// Fails to compile ([`RebuiltAtStart`] is implemented for no type).
    fn refuse_iterator(&self)
    where
        Self::Iter: RebuiltAtStart,
    {
    }
}

impl<I: Iterator> IteratorTransient for &TransientProbe<'_, I> {
    type Iter = I;
}

/// Chosen for every other `#[transient]` local.
pub trait NotAnIterator {
    /// Nothing to refuse.
    fn refuse_iterator(&self) {}
}

impl<T: ?Sized> NotAnIterator for TransientProbe<'_, T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_pick_the_impl_of_the_type() {
        let shared = Arc::new(1);
        let other = Arc::clone(&shared);
        assert_eq!((&&value_probe(&shared)).counts(), Some(("Arc", 2, 0)));
        drop(other);
        assert_eq!((&&value_probe(&shared)).counts(), Some(("Arc", 1, 0)));
        let rc = Some(Rc::new(2));
        let weak = Rc::downgrade(rc.as_ref().unwrap());
        assert_eq!((&&value_probe(&rc)).counts(), Some(("Rc", 1, 1)));
        drop(weak);
    }
}
