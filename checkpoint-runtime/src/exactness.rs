//! Checks that a value saved at a checkpoint comes back as the value the
//! uninterrupted run goes on with (part of the generated-code ABI; the macro
//! emits calls to these). `docs/exactness.md` is the model: every way a
//! resumed run could observe a difference, and which check here, in the
//! macro or in [`iteration`](crate::iteration) treats it.
//!
//! What is refused at save is decided from the saved type, once per type
//! and process, in generic code (`schema::type_info`, with its schema): the
//! generated code cannot ask about a local's type where it saves it, since
//! the type may only be known further down the body (`let sum = xs.sum();
//! checkpoint!(); .. sum` returned as a `u64`). Encoder::typed_field refuses:
//!
//! - a type that postcard writes but cannot read back (`deserialize_any`);
//! - a shared, mutable handle (`Arc<Mutex<..>>`, `Rc<RefCell<..>>`, a `Weak`
//!   anywhere in the type's name): a checkpoint saves a copy, so writes
//!   through one handle would no longer be seen through the others.
//!
//! A `#[transient]` local's type is probed where it is declared, by method
//! resolution ([`IteratorTransient`]): an iterator would restart from its
//! first item on resume, refused at compile time.
//!
//! Hash order is checked by [`Encoder::typed_field_order_observed`], for the
//! locals whose order the macro finds observed after the site.

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

/// `TransientProbe` of a `#[transient]` local.
pub fn transient_probe<T: ?Sized>(value: &T) -> TransientProbe<'_, T> {
    TransientProbe(value)
}

/// Chosen for `#[transient]` iterators: refused at compile time.
pub trait IteratorTransient {
    /// The iterator's type.
    type Iter;

    /// Fails to compile (`RebuiltAtStart` is implemented for no type).
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

/// Why a value of type `rust` (its `std::any::type_name`) cannot be saved
/// as a handle: a `Weak`, or an `Arc`/`Rc` around something mutable through
/// a shared reference (`Mutex`, `RwLock`, `RefCell`, `Cell`, atomics, ...).
/// An `Arc<str>` or an `Rc<Vec<T>>` is immutable: its copy behaves as the
/// value did.
pub(crate) fn shared_handle(rust: &str) -> Option<String> {
    const MUTABLE: &[&str] = &["Mutex<", "RwLock<", "Cell<", "Atomic", "OnceLock<"];
    let readable = crate::readable_type_name(rust);
    if rust.contains("::Weak<") {
        return Some(format!(
            "its type `{readable}` holds a `Weak` handle, which comes back dangling from a checkpoint (serde saves no referent for it); keep the value itself, or an id to look it up after the checkpoint"
        ));
    }
    let handle = ["alloc::sync::Arc<", "alloc::rc::Rc<"]
        .iter()
        .filter_map(|h| rust.find(h))
        .min()?;
    if !MUTABLE.iter().any(|m| rust[handle..].contains(m)) {
        return None;
    }
    Some(format!(
        "its type `{readable}` is a handle to a value that is changed through shared references: a checkpoint saves a copy of the value, so after a resume this handle would no longer share it, and a write through one handle would not be seen through another; keep the value in one owned local and pass `&mut` to what changes it, or keep shared state outside the run (a resource: `ctx.resource::<T>()`)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_mutable_handles_and_weak_ones_are_named() {
        for refused in [
            std::any::type_name::<std::sync::Arc<std::sync::Mutex<Vec<u32>>>>(),
            std::any::type_name::<Option<std::rc::Rc<std::cell::RefCell<u8>>>>(),
            std::any::type_name::<Vec<std::sync::Arc<std::sync::atomic::AtomicU64>>>(),
            std::any::type_name::<std::rc::Weak<String>>(),
        ] {
            assert!(shared_handle(refused).is_some(), "{refused}");
        }
        for saved in [
            std::any::type_name::<std::sync::Arc<str>>(),
            std::any::type_name::<std::rc::Rc<Vec<String>>>(),
            std::any::type_name::<std::sync::Mutex<Vec<u8>>>(),
            std::any::type_name::<Vec<std::cell::Cell<u8>>>(),
        ] {
            assert_eq!(shared_handle(saved), None, "{saved}");
        }
    }
}
