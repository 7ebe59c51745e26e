//! How a `for` loop with a checkpoint inside resumes at exactly the item it
//! left, with exactly the items it had left (part of the generated-code ABI;
//! the macro emits calls to these).
//!
//! A resumed `for` loop evaluates its iterable again and skips the items
//! already taken. Three things could make that different from the
//! uninterrupted run, and each has its own tool here:
//!
//! - **Hash order.** A `HashMap`/`HashSet` rebuilt from a checkpoint iterates
//!   in another order (a new random seed). [`order_probe`] picks, at compile
//!   time and from the type of the collection the loop starts from, whether
//!   the loop's base iterator goes through [`canonical_order`]: its items
//!   sorted by their postcard bytes, the same order in every process, on the
//!   uninterrupted path and on resume alike.
//! - **Writes through the items.** `for x in v.iter_mut()` writes into `v`
//!   while `v` is borrowed, so `v` cannot be saved at the checkpoint; it is
//!   saved at loop entry instead. A [`WrittenItems`] log keeps the final
//!   value of every finished item, and [`ItemPart`] writes those (and the
//!   current item's, saved through the loop's bindings) back into the
//!   rebuilt iterator's items on resume.
//! - **Inputs the body changes** (`for _ in 0..q.len()` while the body pops
//!   `q`): the macro saves the iterable's inputs as of loop entry and
//!   evaluates the iterable from those on resume; nothing here is needed.
//!
//! And where only the run can tell (the order of a type the macro cannot
//! see, such as a `HashSet` a helper returns), each item taken gets a
//! [`fingerprint`](Fingerprinted); a checkpoint stores the current item's
//! after the loop positions (behind [`LOOP_ITEMS`]), and a resumed loop whose
//! next item has another fingerprint is refused before its body runs.

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::abi::Encoder;
use crate::codec;
use crate::frame::Frame;
use crate::Error;

/// A zero-sized stand-in for the type of the collection a loop starts from,
/// so that method resolution can look at that type without keeping a borrow.
pub struct Probe<T: ?Sized>(PhantomData<fn() -> PhantomData<T>>);

/// `Probe` of the type of `_value`.
pub fn order_probe<T: ?Sized>(_value: &T) -> Probe<T> {
    Probe(PhantomData)
}

/// Chosen (by autoref) for hash-ordered collections: the base iterator goes
/// through `canonical_order`.
pub trait HashOrdered {
    /// Re-orders `iter` canonically.
    fn in_stable_order<I>(&self, iter: I) -> CanonicalOrder<I::Item>
    where
        I: IntoIterator,
        I::Item: StableOrderItem,
    {
        canonical_order(iter)
    }
}

/// Chosen for every other collection: the iterator is used as it is.
pub trait SourceOrdered {
    /// `iter`, unchanged.
    fn in_stable_order<I: IntoIterator>(&self, iter: I) -> I {
        iter
    }
}

impl<T: ?Sized> SourceOrdered for Probe<T> {}

macro_rules! hash_ordered {
    ($($ty:ty => [$($p:ident),*];)*) => {$(
        impl<$($p),*> HashOrdered for &Probe<$ty> {}
        impl<$($p),*> HashOrdered for &Probe<&$ty> {}
        impl<$($p),*> HashOrdered for &Probe<&mut $ty> {}
    )*};
}

hash_ordered! {
    HashMap<K, V, S> => [K, V, S];
    HashSet<K, S> => [K, S];
}

/// Chosen (by autoref) for hash-ordered collections of serializable items,
/// for every iterator a workflow body takes from a local (`.iter()`,
/// `.keys()`, `.values()`, `.drain()`, `for x in &map`, ...: the macro
/// routes each through [`in_canonical_order`](CanonicalIfHashed::in_canonical_order)):
/// the items come in `canonical_order`, the same on the uninterrupted path
/// and after a resume, whatever seed the rebuilt collection has. Items that
/// do not serialize cannot come from a checkpoint: such a collection keeps
/// its own order ([`KeepsOrder`]).
pub trait CanonicalIfHashed {
    /// Re-orders `iter` canonically.
    fn in_canonical_order<I>(&self, iter: I) -> CanonicalOrder<I::Item>
    where
        I: IntoIterator,
        I::Item: StableOrderItem,
    {
        canonical_order(iter)
    }
}

/// Chosen for every other collection: the iterator is used as it is.
pub trait KeepsOrder {
    /// `iter`, unchanged.
    fn in_canonical_order<I: IntoIterator>(&self, iter: I) -> I {
        iter
    }
}

impl<T: ?Sized> KeepsOrder for Probe<T> {}

macro_rules! canonical_if_hashed {
    ($($ty:ty => [$($p:ident),*] where [$($bound:tt)*];)*) => {$(
        impl<$($p),*> CanonicalIfHashed for &Probe<$ty> where $($bound)* {}
        impl<$($p),*> CanonicalIfHashed for &Probe<&$ty> where $($bound)* {}
        impl<$($p),*> CanonicalIfHashed for &Probe<&mut $ty> where $($bound)* {}
    )*};
}

canonical_if_hashed! {
    HashMap<K, V, S> => [K, V, S] where [K: Serialize, V: Serialize];
    HashSet<K, S> => [K, S] where [K: Serialize];
}

/// Items that a loop over a hash-ordered collection can put in a canonical
/// order: those that serialize (their bytes are the sort key).
#[diagnostic::on_unimplemented(
    message = "a `for` loop over a `HashMap`/`HashSet` with a checkpoint inside needs items that implement `Serialize`, but `{Self}` does not",
    label = "the items of this loop",
    note = "a hash-ordered collection iterates in another order once it is rebuilt on resume; the loop is made exact by iterating in the order of the items' serialized bytes; make the items serializable, or iterate a `BTreeMap`/`BTreeSet`/`Vec` instead"
)]
pub trait StableOrderItem {
    /// Appends the item's sort key to `buf`.
    fn sort_key(&self, buf: &mut Vec<u8>);
}

impl<T: Serialize> StableOrderItem for T {
    fn sort_key(&self, buf: &mut Vec<u8>) {
        // An item that fails to encode sorts as empty bytes; items that
        // encode alike keep their relative order (a stable sort), which then
        // does not matter: they are restored from those same bytes.
        if codec::encode_into(self, buf).is_err() {
            buf.clear();
        }
    }
}

/// The items of a hash-ordered iterator, sorted by their postcard bytes.
pub struct CanonicalOrder<T> {
    items: std::vec::IntoIter<T>,
}

/// Sorts the items of `iter` by their postcard bytes.
pub fn canonical_order<I>(iter: I) -> CanonicalOrder<I::Item>
where
    I: IntoIterator,
    I::Item: StableOrderItem,
{
    let mut keyed: Vec<(Vec<u8>, I::Item)> = iter
        .into_iter()
        .map(|item| {
            let mut key = Vec::new();
            item.sort_key(&mut key);
            (key, item)
        })
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    CanonicalOrder {
        items: keyed
            .into_iter()
            .map(|(_, item)| item)
            .collect::<Vec<_>>()
            .into_iter(),
    }
}

impl<T> Iterator for CanonicalOrder<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.items.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.items.size_hint()
    }
}

impl<T> ExactSizeIterator for CanonicalOrder<T> {}
impl<T> DoubleEndedIterator for CanonicalOrder<T> {
    fn next_back(&mut self) -> Option<T> {
        self.items.next_back()
    }
}

/// A piece of a mutable loop's item: what is saved of it, and how a saved
/// value is written back into the same piece of the rebuilt item on resume.
/// `&mut T` writes through; `&T` and plain values (indices from
/// `enumerate`) are already equal on resume and are left alone.
#[diagnostic::on_unimplemented(
    message = "a `for` loop that writes through its items (`iter_mut()`, `values_mut()`, `&mut v`, ...) with a checkpoint inside must save what it wrote, but its item type `{Self}` is not supported",
    label = "the items of this loop",
    note = "supported items: `&mut T`, `&mut [T]`, `&T`, integers, and tuples of those (as from `enumerate()`, `zip()` or a map's `iter_mut()`), with `T: Serialize + Deserialize`; otherwise iterate by index (`for i in 0..v.len() {{ let x = &mut v[i]; .. }}`)"
)]
pub trait ItemPart {
    /// The piece's value as it is saved.
    type Owned: Serialize + DeserializeOwned;

    /// Appends the piece's current value to `buf`.
    fn save(&self, buf: &mut Vec<u8>) -> postcard::Result<()>;

    /// Writes a saved value back into the piece.
    fn restore(&mut self, value: Self::Owned);
}

impl<T: Serialize + DeserializeOwned> ItemPart for &mut T {
    type Owned = T;
    fn save(&self, buf: &mut Vec<u8>) -> postcard::Result<()> {
        codec::encode_into::<T>(self, buf)
    }
    fn restore(&mut self, value: T) {
        **self = value;
    }
}

impl<T: Serialize + DeserializeOwned> ItemPart for &mut [T] {
    type Owned = Vec<T>;
    fn save(&self, buf: &mut Vec<u8>) -> postcard::Result<()> {
        codec::append(&**self, buf)
    }
    fn restore(&mut self, value: Vec<T>) {
        // The rebuilt chunk has the length it had (the same collection, the
        // same chunking); a saved chunk of another length writes what fits.
        for (slot, v) in self.iter_mut().zip(value) {
            *slot = v;
        }
    }
}

impl<T: Serialize + DeserializeOwned> ItemPart for &T {
    type Owned = T;
    fn save(&self, buf: &mut Vec<u8>) -> postcard::Result<()> {
        codec::encode_into::<T>(self, buf)
    }
    fn restore(&mut self, _: T) {}
}

macro_rules! plain_parts {
    ($($t:ty),*) => {$(
        impl ItemPart for $t {
            type Owned = $t;
            fn save(&self, buf: &mut Vec<u8>) -> postcard::Result<()> {
                codec::encode_into(self, buf)
            }
            fn restore(&mut self, _: $t) {}
        }
    )*};
}

plain_parts!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, bool, char);

macro_rules! tuple_parts {
    ($(($($p:ident . $i:tt),*);)*) => {$(
        impl<$($p: ItemPart),*> ItemPart for ($($p,)*) {
            type Owned = ($($p::Owned,)*);
            fn save(&self, buf: &mut Vec<u8>) -> postcard::Result<()> {
                $(self.$i.save(buf)?;)*
                Ok(())
            }
            fn restore(&mut self, value: Self::Owned) {
                $(self.$i.restore(value.$i);)*
            }
        }
    )*};
}

tuple_parts! {
    (A.0, B.1);
    (A.0, B.1, C.2);
    (A.0, B.1, C.2, D.3);
}

/// `&mut item` with the item's own shape (`&mut T` stays `&mut T`, a tuple
/// of pieces stays a tuple): what a mutable loop's pattern binds, so the
/// loop keeps the item itself and can save it once the body is done with it.
pub trait Reborrow {
    /// The reborrowed item.
    type Out<'b>
    where
        Self: 'b;

    /// Reborrows the item for one iteration's body.
    fn reborrow(&mut self) -> Self::Out<'_>;
}

impl<T: ?Sized> Reborrow for &mut T {
    type Out<'b>
        = &'b mut T
    where
        Self: 'b;
    fn reborrow(&mut self) -> &mut T {
        self
    }
}

impl<'a, T: ?Sized> Reborrow for &'a T {
    type Out<'b>
        = &'a T
    where
        Self: 'b;
    fn reborrow(&mut self) -> &'a T {
        self
    }
}

macro_rules! plain_reborrow {
    ($($t:ty),*) => {$(
        impl Reborrow for $t {
            type Out<'b> = $t;
            fn reborrow(&mut self) -> $t {
                *self
            }
        }
    )*};
}

plain_reborrow!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, bool, char);

macro_rules! tuple_reborrow {
    ($(($($p:ident . $i:tt),*);)*) => {$(
        impl<$($p: Reborrow),*> Reborrow for ($($p,)*) {
            type Out<'b> = ($($p::Out<'b>,)*) where Self: 'b;
            fn reborrow(&mut self) -> Self::Out<'_> {
                ($(self.$i.reborrow(),)*)
            }
        }
    )*};
}

tuple_reborrow! {
    (A.0, B.1);
    (A.0, B.1, C.2);
    (A.0, B.1, C.2, D.3);
}

/// The final values of the items a mutable loop has finished, in order: saved
/// with each checkpoint inside the loop, written back into the rebuilt
/// iterator's first items on resume.
#[derive(Serialize, Deserialize, Default, Debug, Clone, PartialEq, Eq)]
pub struct WrittenItems {
    count: u64,
    bytes: Vec<u8>,
}

impl WrittenItems {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the final value of a finished item, and writes the value
    /// decoded from those bytes back into it: a resumed run writes the
    /// finished items back from this log ([`advance_writing_back`]), so
    /// every path goes on with the decoded items, whatever the body changed
    /// in an item after its last checkpoint (a field `#[serde(skip)]`
    /// drops; docs/exactness.md). Types made of the standard library's
    /// types only decode equal and are not decoded.
    pub fn push<P: ItemPart>(&mut self, item: &mut P, frame: &Frame) -> Result<(), Error> {
        let start = self.bytes.len();
        if let Err(e) = item.save(&mut self.bytes) {
            self.bytes.truncate(start);
            return Err(frame.loop_error(format!(
                "the value of loop item #{} could not be encoded: {e}",
                self.count
            )));
        }
        if !crate::save::round_trips_exactly(std::any::type_name::<P::Owned>()) {
            match codec::decode::<P::Owned>(&self.bytes[start..]) {
                Ok((value, _)) => item.restore(value),
                Err(e) => {
                    self.bytes.truncate(start);
                    return Err(frame.loop_error(format!(
                        "the saved value of loop item #{} does not decode: {e}",
                        self.count
                    )));
                }
            }
        }
        self.count += 1;
        Ok(())
    }

    /// How many finished items the log holds.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Skips the first `n` items of a mutable loop's rebuilt iterator, writing
/// each one's final value from `written` back into it.
pub fn advance_writing_back<I>(
    frame: &Frame,
    iter: &mut I,
    n: u64,
    written: &WrittenItems,
) -> Result<(), Error>
where
    I: Iterator,
    I::Item: ItemPart,
{
    if written.count != n {
        return Err(frame.loop_error(format!(
            "the checkpoint holds the values of {} finished loop item(s) but its loop position is {n}",
            written.count
        )));
    }
    let mut rest = written.bytes.as_slice();
    for i in 0..n {
        let Some(mut item) = iter.next() else {
            return Err(frame.loop_error(format!(
                "the loop's iterator ended before reaching the saved position {n}"
            )));
        };
        match codec::decode::<<I::Item as ItemPart>::Owned>(rest) {
            Ok((value, tail)) => {
                item.restore(value);
                rest = tail;
            }
            Err(e) => {
                return Err(frame.loop_error(format!(
                    "the saved value of loop item #{i} does not decode: {e}"
                )))
            }
        }
    }
    if !rest.is_empty() {
        return Err(frame.loop_error(format!(
            "{} trailing byte(s) after the saved values of the loop's finished items",
            rest.len()
        )));
    }
    Ok(())
}

/// A loop binding of a mutable loop, saved at a checkpoint so that writes
/// made through it in the current iteration before the checkpoint survive.
pub fn save_through<P: ItemPart>(enc: &mut Encoder, part: &P) -> Result<(), Error> {
    enc.field_with(std::any::type_name::<P::Owned>(), |buf| part.save(buf))
}

/// Writes the saved value of a mutable loop's binding back into the rebuilt
/// binding (see [`save_through`]).
pub fn restore_through<P: ItemPart>(part: &mut P, saved: &mut crate::abi::Slot<P::Owned>) {
    part.restore(saved.take());
}

/// Ties a slot's type to the saved form of a loop binding (type inference
/// only).
pub fn bind_through<P: ItemPart>(_slot: &crate::abi::Slot<P::Owned>, _part: &P) {}

pub use crate::store::LOOP_ITEMS;

/// A loop item, for method resolution to pick [`Fingerprinted`] when it
/// serializes and [`NotFingerprinted`] otherwise.
pub struct ItemProbe<'a, T: ?Sized>(pub &'a T);

/// The fingerprint of a serializable item: FNV-1a over its postcard bytes,
/// kept below [`LOOP_ITEMS`] and never 0 (a stable function: it is stored).
pub trait Fingerprinted {
    /// The item's fingerprint.
    fn fingerprint(&self) -> u64;
}

impl<T: Serialize + ?Sized> Fingerprinted for &ItemProbe<'_, T> {
    fn fingerprint(&self) -> u64 {
        // Hashed as postcard writes it: no buffer, no allocation per item.
        match postcard::serialize_with_flavor(self.0, Fnv(0xcbf2_9ce4_8422_2325)) {
            Ok(h) => (h >> 2) | 1,
            Err(_) => 0,
        }
    }
}

/// A postcard flavor that hashes the bytes (FNV-1a) instead of keeping them.
struct Fnv(u64);

impl postcard::ser_flavors::Flavor for Fnv {
    type Output = u64;

    #[inline]
    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0 ^= u64::from(data);
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<u64> {
        Ok(self.0)
    }
}

/// Items that do not serialize have no fingerprint (0), and are not checked.
pub trait NotFingerprinted {
    /// 0.
    fn fingerprint(&self) -> u64 {
        0
    }
}

impl<T: ?Sized> NotFingerprinted for ItemProbe<'_, T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_collections_take_the_canonical_order() {
        use SourceOrdered as _;
        let a: HashSet<u32> = (0..50).collect();
        let b: HashSet<u32> = (0..50).rev().collect();
        let order = |s: &HashSet<u32>| {
            let probe = order_probe(s);
            (&&probe)
                .in_stable_order(s.iter())
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(order(&a), order(&b));
        let v = vec![3, 1, 2];
        let probe = order_probe(&v);
        #[allow(clippy::needless_borrow)] // the generated code's autoref dispatch
        let kept: Vec<u32> = (&&probe).in_stable_order(v.iter()).copied().collect();
        assert_eq!(kept, vec![3, 1, 2], "a Vec keeps its own order");
    }

    #[test]
    #[allow(clippy::needless_borrow)] // the generated code's autoref dispatch
    fn serializable_items_have_stable_fingerprints() {
        use {Fingerprinted as _, NotFingerprinted as _};
        let a = (&&ItemProbe(&"invoice-7".to_owned())).fingerprint();
        assert_eq!(a, (&&ItemProbe(&"invoice-7".to_owned())).fingerprint());
        assert_ne!(a, (&&ItemProbe(&"invoice-8".to_owned())).fingerprint());
        assert!(a != 0 && a < LOOP_ITEMS);
        // Pinned: the fingerprint is stored, so it must not change.
        assert_eq!(
            (&&ItemProbe(&7u32)).fingerprint(),
            3_159_537_454_290_070_705
        );
        struct Opaque;
        assert_eq!((&&ItemProbe(&Opaque)).fingerprint(), 0);
    }

    #[test]
    fn item_parts_write_back_through_references() {
        let mut v = [1u32, 2, 3];
        let mut buf = Vec::new();
        for (i, x) in v.iter_mut().enumerate() {
            *x += 10;
            (i, x).save(&mut buf).unwrap();
        }
        let mut w = vec![0u32; 3];
        let mut rest = buf.as_slice();
        for mut item in w.iter_mut().enumerate() {
            let (value, tail) = codec::decode::<(usize, u32)>(rest).unwrap();
            item.restore(value);
            rest = tail;
        }
        assert_eq!(w, vec![11, 12, 13]);
    }
}
