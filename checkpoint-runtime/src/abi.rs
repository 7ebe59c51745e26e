//! The values the `#[workflow]` macro's generated code hands to the frame
//! (part of `checkpoint_runtime::__private`; not a public API): the table of
//! checkpoint sites ([`SiteInfo`]), the [`Encoder`] that writes a site's live
//! locals, values encoded ahead of their checkpoint ([`Encoded`]), and the
//! [`Slot`]s restored values wait in. Nothing here touches the store: the
//! frame's commit path takes what an [`Encoder`] wrote.

use std::borrow::Cow;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec;
use crate::schema::{self, SchemaRef};
use crate::store::FieldRecord;
use crate::Error;

/// A checkpoint site, as the macro describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteInfo {
    /// The key stored with each checkpoint and matched on resume.
    pub key: &'static str,
    /// The user's label.
    pub label: Option<&'static str>,
    /// What kind of site.
    pub kind: SiteKind,
    /// The names of the saved fields, in order.
    pub fields: &'static [&'static str],
    /// How many `for` loops enclose the site.
    pub loops: u32,
    /// For a wait site whose signal name is a string literal, that name:
    /// a checkpoint waiting for another signal is not resumed here.
    pub signal: Option<&'static str>,
    /// Older keys of this site, whose checkpoints resume here too: the
    /// `#N` older versions gave an unlabelled site, and the `from` of
    /// `#[workflow(renamed_site(from = .., to = ..))]`.
    pub renamed_from: &'static [&'static str],
    /// The keys of the sites before this one in source order, stored with a
    /// suspension's checkpoint: a run resumed here by code that added a
    /// wait or sleep before it would skip that, and code that moved a site
    /// from before it to after it would run that part twice; both are
    /// refused.
    pub sites_before: &'static [&'static str],
    /// A field has a migration (`#[migrate(..)]`): the generated code
    /// matches the stored fields by name ([`FieldPlan`]), not position.
    pub migrated: bool,
}

impl SiteInfo {
    /// Whether a checkpoint stored under `key` resumes at this site.
    pub fn takes(&self, key: &str) -> bool {
        self.key == key || self.renamed_from.contains(&key)
    }

    /// The site numbered `number` in a workflow's site table. Sites are
    /// numbered from 1 in source order, everywhere: in the generated code,
    /// in [`Frame::target`](crate::frame::Frame::target) and in the `#n` key
    /// of an unlabelled site; this is the one place that turns a number into
    /// a table entry.
    pub fn numbered(sites: &'static [SiteInfo], number: u32) -> Option<&'static SiteInfo> {
        sites.get(usize::try_from(number).ok()?.checked_sub(1)?)
    }

    /// The number of the site a checkpoint stored under `key` resumes at:
    /// the site with that key, else the one that [`takes`](Self::takes) it
    /// (a renamed site).
    pub(crate) fn number_taking(sites: &[SiteInfo], key: &str) -> Option<u32> {
        let index = sites
            .iter()
            .position(|s| s.key == key)
            .or_else(|| sites.iter().position(|s| s.takes(key)))?;
        u32::try_from(index + 1).ok()
    }
}

/// How the code takes one field of a site with migrations from a stored
/// checkpoint (`#[migrate(..)]` on its local).
#[derive(Debug, Clone, Copy)]
pub struct FieldPlan {
    /// The field's name in the code.
    pub name: &'static str,
    /// Its type (`std::any::type_name`).
    pub type_name: &'static str,
    /// `renamed_from`: its name in older checkpoints.
    pub renamed_from: Option<&'static str>,
    /// `from = T`: the type older checkpoints hold, converted by `with`.
    pub from_type: Option<&'static str>,
    /// `default` / `value = ..`: a checkpoint may lack it.
    pub may_be_missing: bool,
}

/// The kinds of checkpoint sites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SiteKind {
    /// `checkpoint!()`.
    Checkpoint,
    /// `ctx.wait_for(..).await`.
    WaitFor,
    /// `ctx.wait_for_timeout(..).await`.
    WaitForTimeout,
    /// `ctx.sleep(..).await`.
    Sleep,
    /// `ctx.join(child).await`.
    Join,
    /// `ctx.join_all(children).await`.
    JoinAll,
    /// `ctx.retry(name, policy, op).await`.
    Retry,
}

/// Encodes the fields of one checkpoint.
pub struct Encoder {
    buf: Vec<u8>,
    fields: Vec<FieldRecord>,
    /// The schema of each field so far (`None`: none), in order.
    schemas: Vec<Option<&'static SchemaRef>>,
    names: &'static [&'static str],
    workflow: &'static str,
    run: Arc<str>,
    site: &'static str,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("site", &self.site)
            .field("fields", &self.fields.len())
            .field("bytes", &self.buf.len())
            .finish()
    }
}

impl Encoder {
    /// An encoder for the fields `names` of site `site`, writing into `buf`
    /// (empty, with the capacity the last checkpoint needed) and keeping the
    /// fields' schemas in `schemas` (a spare, emptied buffer).
    pub(crate) fn new(
        names: &'static [&'static str],
        workflow: &'static str,
        run: Arc<str>,
        site: &'static str,
        buf: Vec<u8>,
        schemas: Vec<Option<&'static SchemaRef>>,
    ) -> Self {
        Encoder {
            fields: Vec::with_capacity(names.len()),
            buf,
            schemas,
            names,
            workflow,
            run,
            site,
        }
    }

    /// The number of fields encoded so far.
    pub(crate) fn len(&self) -> usize {
        self.fields.len()
    }

    /// The encoded fields, their bytes and their schemas.
    pub(crate) fn into_parts(self) -> (Vec<FieldRecord>, Vec<u8>, Vec<Option<&'static SchemaRef>>) {
        (self.fields, self.buf, self.schemas)
    }

    fn next_name(&self) -> Result<&'static str, Error> {
        self.names.get(self.fields.len()).copied().ok_or_else(|| {
            Error::internal(format!(
                "site `{}` of workflow `{}` declares {} field(s) but more were encoded",
                self.site,
                self.workflow,
                self.names.len()
            ))
        })
    }

    /// Encodes the next field (postcard), recording `std::any::type_name::<T>()`
    /// and the schema of `T` (traced once per type and process; none if `T`
    /// cannot be traced), so that the field can be shown as JSON without this
    /// code. The generated code saves every field with this.
    pub fn typed_field<T: Serialize + DeserializeOwned>(&mut self, value: &T) -> Result<(), Error> {
        let info = schema::type_info::<T>();
        let facts = &info.facts;
        if let Some(why) = &facts.shared {
            return Err(self.inexact(why.clone()));
        }
        if let Some(found) = &facts.undecodable {
            return Err(self.inexact(format!(
                "its type cannot be read back from a checkpoint: {found} deserializes with `deserialize_any` (`serde_json::Value`, an untagged or internally tagged enum, `#[serde(flatten)]`), which postcard writes but can never read, so the run could not resume from this checkpoint; use a struct or an externally tagged enum, or keep the value as a `String` (`serde_json::to_string`) and parse it after the checkpoint"
            )));
        }
        self.push_field(std::any::type_name::<T>(), |buf| {
            codec::encode_into(value, buf)
        })?;
        if let Some(last) = self.schemas.last_mut() {
            *last = info.schema;
        }
        Ok(())
    }

    /// [`typed_field`](Encoder::typed_field) for a local whose iteration
    /// order the code after the site may observe (`observed`: how, as the
    /// macro found it): refused if a hash-ordered collection is inside it.
    pub fn typed_field_order_observed<T: Serialize + DeserializeOwned>(
        &mut self,
        value: &T,
        observed: &'static str,
    ) -> Result<(), Error> {
        if let Some(found) = &schema::type_info::<T>().facts.hash_ordered {
            return Err(self.inexact(format!(
                "it holds {found}, which iterates in another order once rebuilt from a checkpoint, and the code after this site observes that order ({observed}); use a `BTreeMap`/`BTreeSet` (or `IndexMap`/`IndexSet`, which keep insertion order), or sort before observing"
            )));
        }
        self.typed_field(value)
    }

    /// The [`Error::Inexact`] of the next field: why it cannot be saved
    /// exactly.
    pub fn inexact(&self, detail: String) -> Error {
        Error::Inexact {
            workflow: self.workflow.to_owned(),
            run: self.run.to_string(),
            site: self.site.to_owned(),
            field: self
                .names
                .get(self.fields.len())
                .copied()
                .unwrap_or("-")
                .to_owned(),
            detail: detail.into(),
        }
    }

    /// Encodes the next field (postcard), recording `std::any::type_name::<T>()`
    /// but no schema (see [`Encoder::typed_field`]).
    pub fn field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Error> {
        self.push_field(std::any::type_name::<T>(), |buf| codec::append(value, buf))
    }

    /// Appends the next field, of type `type_name`, as `encode` writes it.
    fn push_field(
        &mut self,
        type_name: &'static str,
        encode: impl FnOnce(&mut Vec<u8>) -> postcard::Result<()>,
    ) -> Result<(), Error> {
        let name = self.next_name()?;
        let offset = self.buf.len();
        if let Err(e) = encode(&mut self.buf) {
            self.buf.truncate(offset);
            return Err(Error::Encode {
                workflow: self.workflow.to_owned(),
                run: self.run.to_string(),
                site: self.site.to_owned(),
                field: name.to_owned(),
                detail: e.to_string().into(),
            });
        }
        self.fields.push(FieldRecord {
            name: Cow::Borrowed(name),
            type_name: Cow::Borrowed(type_name),
            offset,
            len: self.buf.len() - offset,
        });
        self.schemas.push(None);
        Ok(())
    }

    /// Appends the next field, of type `type_name`, as `encode` writes it
    /// (for values saved through a reference, see `iteration`).
    pub(crate) fn field_with(
        &mut self,
        type_name: &'static str,
        encode: impl FnOnce(&mut Vec<u8>) -> postcard::Result<()>,
    ) -> Result<(), Error> {
        self.push_field(type_name, encode)
    }

    /// Appends a field encoded earlier with [`encode`].
    pub fn encoded(&mut self, value: &Encoded) -> Result<(), Error> {
        let name = self.next_name()?;
        let offset = self.buf.len();
        self.buf.extend_from_slice(&value.bytes);
        self.fields.push(FieldRecord {
            name: Cow::Borrowed(name),
            type_name: Cow::Borrowed(value.type_name),
            offset,
            len: value.bytes.len(),
        });
        self.schemas.push(value.schema);
        Ok(())
    }
}

/// A value encoded ahead of its checkpoint (postcard bytes and type name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    bytes: Vec<u8>,
    type_name: &'static str,
    schema: Option<&'static SchemaRef>,
}

impl Encoded {
    /// The encoded bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// `std::any::type_name` of the encoded value's type.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }
}

/// Encodes a value now, to be stored by a later checkpoint with [`Encoder::encoded`].
pub fn encode<T: Serialize>(value: &T) -> Result<Encoded, Error> {
    let mut bytes = Vec::new();
    codec::encode_into(value, &mut bytes).map_err(|e| Error::Encode {
        workflow: String::new(),
        run: String::new(),
        site: String::new(),
        field: std::any::type_name::<T>().to_owned(),
        detail: e.to_string().into(),
    })?;
    Ok(Encoded {
        bytes,
        type_name: std::any::type_name::<T>(),
        schema: None,
    })
}

/// [`encode`], also recording the value's schema so the snapshot can be
/// shown as JSON without the workflow's binary (see [`Encoder::typed_field`]).
pub fn encode_typed<T: Serialize + DeserializeOwned>(value: &T) -> Result<Encoded, Error> {
    let mut encoded = encode(value)?;
    encoded.schema = schema::schema_of::<T>();
    Ok(encoded)
}

/// Decodes a value [`encode`]d earlier (a snapshot taken at loop entry).
pub(crate) fn decode_encoded<T: DeserializeOwned>(value: &Encoded) -> Result<T, Error> {
    match codec::decode::<T>(&value.bytes) {
        Ok((decoded, [])) => Ok(decoded),
        Ok((_, rest)) => Err(Error::internal(format!(
            "{} trailing byte(s) after a snapshot of type `{}`",
            rest.len(),
            value.type_name
        ))),
        Err(e) => Err(Error::internal(format!(
            "a snapshot of type `{}` does not decode: {e}",
            value.type_name
        ))),
    }
}

/// A restored value waiting to be moved into its local.
pub struct Slot<T>(Option<T>);

impl<T> std::fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("type", &std::any::type_name::<T>())
            .field("loaded", &self.0.is_some())
            .finish()
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot(None)
    }
}

impl<T> Slot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        Slot(None)
    }

    /// `std::any::type_name::<T>()`.
    pub fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }

    /// Loads the restored value (the frame's resume step does).
    pub(crate) fn fill(&mut self, value: T) {
        self.0 = Some(value);
    }

    /// Loads a value a migration made (generated code).
    pub fn put(&mut self, value: T) {
        self.0 = Some(value);
    }

    /// Ties the slot's type to a local's (type inference only; does nothing).
    pub fn bind(&self, _value: &T) {}

    /// Moves the restored value out.
    ///
    /// # Panics
    ///
    /// If nothing was loaded into the slot: generated code only takes slots it
    /// loaded successfully, so this is a bug in the generated code.
    pub fn take(&mut self) -> T {
        match self.0.take() {
            Some(v) => v,
            None => panic!(
                "checkpoint internal error: slot of type `{}` taken before it was loaded",
                std::any::type_name::<T>()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoder(names: &'static [&'static str]) -> Encoder {
        Encoder::new(
            names,
            "wf",
            Arc::from("run"),
            "site",
            Vec::new(),
            Vec::new(),
        )
    }

    /// A `Vec<u8>` written in one copy gives the bytes serde's element by
    /// element encoding gives (lengths on both sides of the varint's one- and
    /// two-byte forms), and loads back as the same vector.
    #[test]
    fn byte_vectors_encode_as_serde_would() {
        for len in [0usize, 1, 127, 128, 300, 16_384, 70_000] {
            let v: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let by_serde = postcard::to_stdvec(&v).unwrap();
            let mut enc = encoder(&["v", "after"]);
            enc.typed_field(&v).unwrap();
            enc.typed_field(&7u32).unwrap();
            let field = &enc.fields[0];
            assert_eq!(&enc.buf[..field.len], &by_serde[..], "{len} bytes");
            assert_eq!(field.type_name, std::any::type_name::<Vec<u8>>());
            assert_eq!(enc.fields[1].offset, by_serde.len());
            let back: Vec<u8> = postcard::from_bytes(&enc.buf[..field.len]).unwrap();
            assert_eq!(back, v);
            assert_eq!(encode(&v).unwrap().bytes(), &by_serde[..]);
        }
        // Other sequences of bytes keep serde's path, and the same bytes.
        let nested = (vec![1u8, 2, 3], [4u8; 3], vec![vec![5u8]]);
        let mut enc = encoder(&["nested"]);
        enc.typed_field(&nested).unwrap();
        assert_eq!(enc.buf, postcard::to_stdvec(&nested).unwrap());
    }
}
