//! How generated code saves and loads a local (part of the generated-code
//! ABI).
//!
//! Each saved local gets a small marker trait of its own in the expansion,
//! carrying the `on_unimplemented` message that names the local and its
//! checkpoints, with a blanket impl for every [`Save`] type that hands out
//! that type's [`SaveOps`]. Every use of the local goes through the marker,
//! so a local that cannot be saved fails one bound, with that message, and
//! nothing else.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::abi::{self, Encoded, Encoder, Slot};
use crate::frame::{self, Frame};
use crate::Error;

/// What a saved local's type must be.
pub trait Save: Serialize + DeserializeOwned {}

impl<T: Serialize + DeserializeOwned> Save for T {}

/// The saving operations of one type, taken where `T: Save` is known.
pub struct SaveOps<T> {
    encode: fn(&T, &mut Encoder) -> Result<(), Error>,
    encode_order_observed: fn(&T, &mut Encoder, &'static str) -> Result<(), Error>,
    load: fn(&mut Slot<T>, &Frame, usize) -> Result<(), Error>,
    snapshot: fn(&T) -> Result<Encoded, Error>,
    decode_snapshot: fn(&Encoded) -> Result<T, Error>,
    /// `T` is made of the standard library's types only, whose postcard
    /// round trip gives back an equal value (see [`round_trips_exactly`]).
    exact: bool,
}

impl<T: Save> SaveOps<T> {
    /// The operations of `T`.
    pub fn new() -> Self {
        SaveOps {
            encode: |value, enc| enc.typed_field(value),
            encode_order_observed: |value, enc, observed| {
                enc.typed_field_order_observed(value, observed)
            },
            load: frame::resume::load,
            snapshot: abi::encode_typed,
            decode_snapshot: abi::decode_encoded,
            exact: round_trips_exactly(std::any::type_name::<T>()),
        }
    }
}

impl<T> Clone for SaveOps<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SaveOps<T> {}

impl<T: Save> Default for SaveOps<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> SaveOps<T> {
    /// Encodes `value` as the checkpoint's next field.
    pub fn encode(&self, value: &T, enc: &mut Encoder) -> Result<(), Error> {
        (self.encode)(value, enc)
    }

    /// Encodes `value` as the checkpoint's next field, refusing it if a
    /// hash-ordered collection is inside it: the code after the site
    /// observes its order (`observed` says how).
    pub fn encode_order_observed(
        &self,
        value: &T,
        enc: &mut Encoder,
        observed: &'static str,
    ) -> Result<(), Error> {
        (self.encode_order_observed)(value, enc, observed)
    }

    /// Decodes field `field` of the checkpoint being resumed into `slot`.
    pub fn load(&self, slot: &mut Slot<T>, frame: &Frame, field: usize) -> Result<(), Error> {
        (self.load)(slot, frame, field)
    }

    /// Encodes `value` now, for a later checkpoint.
    pub fn snapshot(&self, value: &T) -> Result<Encoded, Error> {
        (self.snapshot)(value)
    }

    /// Whether the value a local holds can differ from the one decoded
    /// from its bytes: false for a type of the standard library's types
    /// only, true for any type with a type of its own inside (which may
    /// skip a field, rebuild state in `Deserialize`, or hide a shared
    /// handle).
    pub fn needs_reload(&self) -> bool {
        !self.exact
    }

    /// The value the uninterrupted path continues with after a checkpoint
    /// stored `value` as field `field`: the value decoded from the stored
    /// bytes, with the load a resumed run makes (see
    /// [`Frame::begin_reload`]), so that both paths go on from the same
    /// state; `value` itself when its type round-trips exactly.
    pub fn reloaded(&self, value: T, frame: &Frame, field: usize) -> Result<T, Error> {
        if self.exact {
            return Ok(value);
        }
        drop(value);
        let mut slot = Slot::new();
        (self.load)(&mut slot, frame, field)?;
        Ok(slot.take())
    }

    /// [`SaveOps::reloaded`] for a local saved as a snapshot taken earlier
    /// (`snapshot`, of `value`): the value decoded from the snapshot's bytes.
    pub fn reloaded_snapshot(&self, value: T, snapshot: &Encoded) -> Result<T, Error> {
        if self.exact {
            return Ok(value);
        }
        drop(value);
        (self.decode_snapshot)(snapshot)
    }

    /// The value a local continues with once encoded as `value` is, for a
    /// local that a loop's iterable or a re-derived branch borrows around a
    /// site (where it cannot be replaced): decoded from its own encoding.
    pub fn round_trip(&self, value: T) -> Result<T, Error> {
        if self.exact {
            return Ok(value);
        }
        let encoded = (self.snapshot)(&value)?;
        drop(value);
        (self.decode_snapshot)(&encoded)
    }
}

/// Whether a type, named as `std::any::type_name` names it, is made of the
/// standard library's types only (`Vec<(u32, String)>`, `BTreeMap<String,
/// Option<f64>>`): each of those gives back an equal value from its postcard
/// bytes (floats bit for bit; a `HashMap`'s order is made canonical where
/// it is observed, or refused at save; shared mutable handles are refused at
/// save), so the uninterrupted path need not decode it after a checkpoint.
/// Any other path (a type of the user's own, or of another crate) may not.
pub fn round_trips_exactly(type_name: &str) -> bool {
    const PRIMITIVES: &[&str] = &[
        "bool", "char", "str", "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32",
        "i64", "i128", "isize", "f32", "f64",
    ];
    type_name
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| !word.is_empty())
        .all(|word| {
            word.starts_with("core::")
                || word.starts_with("alloc::")
                || word.starts_with("std::")
                || PRIMITIVES.contains(&word)
                || word.chars().all(|c| c.is_ascii_digit())
        })
}

/// The type of a value, for the marker trait's `Self` to be inferred from.
pub struct TypeOf<T>(PhantomData<fn() -> T>);

/// [`TypeOf`] a local.
pub fn type_of<T>(_: &T) -> TypeOf<T> {
    TypeOf(PhantomData)
}

/// [`TypeOf`] what a slot holds.
pub fn type_of_slot<T>(_: &Slot<T>) -> TypeOf<T> {
    TypeOf(PhantomData)
}
