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
