//! Schemas: checkpoint fields readable as JSON without the workflow's code.
//!
//! Checkpoint fields are postcard bytes, which are not self-describing: only
//! the Rust type can read them. So when a field is saved, the runtime also
//! records the field's *schema*: the serde format of its type, traced once per
//! type and process from the type's `Deserialize` impl and
//! kept as a compact JSON document (`{"v":1,"root":FORMAT,"types":{NAME:
//! CONTAINER,...}}`, the formats being `serde-reflection`'s [`Format`] and
//! [`ContainerFormat`]). A schema is stored once per store under its *key*, a
//! hash of that document ([`Store::put_schemas`](crate::store::Store::put_schemas));
//! each saved field refers to it by key
//! ([`CheckpointRecord::schemas`](crate::store::CheckpointRecord::schemas)).
//! [`Runtime::checkpoint_fields_json`](crate::Runtime::checkpoint_fields_json)
//! then decodes any stored checkpoint field by field with nothing but the
//! store: the JSON is what `serde_json::to_value` gives for the value, except
//! that a map whose keys are not all strings becomes an array of `[key,
//! value]` pairs and that integers beyond 64 bits become decimal strings.
//!
//! The trace is the runtime's own (a `serde::Deserializer` that records what
//! the type's `Deserialize` impl asks for, building `serde-reflection`
//! formats): `serde-reflection`'s tracer needs each nested enum traced by its
//! Rust type, which the runtime never sees (only the field's type), and ends
//! recursions on an enum's first variant, which overflows the stack when that
//! variant is the recursive one. Enum variants are recorded by index (as
//! postcard stores them) and named after the impl's variant list.
//!
//! A type whose format cannot be traced (it deserializes with
//! `deserialize_any`: untagged or internally tagged enums, `serde_json::Value`;
//! a recursive type with no way out; two different types sharing a name inside
//! it) has no schema: its fields are saved and restored as usual and show a
//! note instead of a value.
//!
//! The save path stays cheap: the schema of a type is looked up in a
//! thread-local map keyed by the type's `TypeId` (behind it, a process-wide
//! one; the trace itself runs once per type and process, on a helper thread
//! with a large stack), and each execution remembers which schemas its store
//! already has, so a checkpoint only stores schemas the first time it meets
//! them.

mod check;
mod decode;
pub(crate) mod stored;
mod trace;

use std::any::TypeId;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{OnceLock, RwLock};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_reflection::{ContainerFormat, Format};

/// The version of the schema documents written.
const DOC_VERSION: u32 = 1;

/// The stack of the thread that traces a type.
const TRACE_STACK: usize = 32 << 20;

/// A stored schema document.
#[derive(Serialize, Deserialize)]
struct Doc {
    v: u32,
    root: Format,
    types: BTreeMap<String, ContainerFormat>,
}

/// A schema as the save path uses it: interned for the life of the process
/// (one per distinct schema; the number of types in a program bounds them).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SchemaRef {
    /// The key: [`key_of`] the document.
    pub(crate) key: &'static str,
    /// The JSON document.
    pub(crate) json: &'static str,
}

/// The stable key of a schema document: 16 hex digits of its 64-bit FNV-1a hash.
pub(crate) fn key_of(json: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in json.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Traces `T` and renders its schema document.
pub(crate) fn trace_json<T: DeserializeOwned>() -> Result<String, String> {
    // On a thread of its own: a deep type must not exhaust the caller's stack
    // (the trace is bounded, but the caller may be deep in a future's poll),
    // and a `Deserialize` impl that panics must not take the caller with it.
    let traced = std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name("checkpoint-schema".to_owned())
            .stack_size(TRACE_STACK)
            .spawn_scoped(s, || {
                trace::trace::<T>()
                    .map_err(|e| e.to_string())
                    .and_then(|(root, types)| {
                        serde_json::to_string(&Doc {
                            v: DOC_VERSION,
                            root,
                            types,
                        })
                        .map_err(|e| e.to_string())
                    })
            });
        match worker {
            Ok(h) => h
                .join()
                .unwrap_or_else(|_| Err("the type's Deserialize impl panicked".to_owned())),
            Err(e) => Err(format!("could not start the tracing thread: {e}")),
        }
    });
    traced.map_err(|e| {
        format!(
            "the serde format of `{}` cannot be traced: {e}",
            std::any::type_name::<T>()
        )
    })
}

/// A hasher for `TypeId`s (already well mixed).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_u128(&mut self, n: u128) {
        self.write_u64(n as u64 ^ (n >> 64) as u64);
    }
}

/// What the save path needs to know of a saved type, found once per type
/// and process: its schema, and the facts about its round trip that decide
/// what is refused at save (see [`trace::Facts`] and `crate::exactness`).
#[derive(Debug)]
pub(crate) struct TypeInfo {
    /// `None`: the type cannot be traced.
    pub(crate) schema: Option<&'static SchemaRef>,
    pub(crate) facts: trace::Facts,
}

type ByType = HashMap<TypeId, &'static TypeInfo, BuildHasherDefault<IdHasher>>;

#[derive(Default)]
struct Global {
    by_type: ByType,
    by_key: HashMap<&'static str, &'static SchemaRef>,
}

fn global() -> &'static RwLock<Global> {
    static GLOBAL: OnceLock<RwLock<Global>> = OnceLock::new();
    GLOBAL.get_or_init(Default::default)
}

thread_local! {
    static LOCAL: RefCell<ByType> = RefCell::new(ByType::default());
}

/// The [`TypeInfo`] of `T`, traced on first use in this process (on a thread
/// of its own, see [`trace_json`]).
pub(crate) fn type_info<T: DeserializeOwned>() -> &'static TypeInfo {
    let id = typeid::of::<T>();
    if let Some(hit) = LOCAL.with(|m| m.borrow().get(&id).copied()) {
        return hit;
    }
    let found = global()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .by_type
        .get(&id)
        .copied();
    let info = match found {
        Some(info) => info,
        None => {
            let traced = trace_json::<T>().ok();
            let facts = std::thread::scope(|s| {
                std::thread::Builder::new()
                    .name("checkpoint-schema".to_owned())
                    .stack_size(TRACE_STACK)
                    .spawn_scoped(s, trace::facts::<T>)
                    .ok()
                    .and_then(|h| h.join().ok())
                    .unwrap_or_default()
            });
            let mut g = global().write().unwrap_or_else(|e| e.into_inner());
            let schema = traced.map(|json| {
                let key = key_of(&json);
                match g.by_key.get(key.as_str()) {
                    Some(s) => *s,
                    None => {
                        let s: &'static SchemaRef = Box::leak(Box::new(SchemaRef {
                            key: Box::leak(key.into_boxed_str()),
                            json: Box::leak(json.into_boxed_str()),
                        }));
                        g.by_key.insert(s.key, s);
                        s
                    }
                }
            });
            *g.by_type
                .entry(id)
                .or_insert_with(|| Box::leak(Box::new(TypeInfo { schema, facts })))
        }
    };
    LOCAL.with(|m| m.borrow_mut().insert(id, info));
    info
}

/// The schema of `T`, traced on first use in this process; `None` if `T`
/// cannot be traced.
pub(crate) fn schema_of<T: DeserializeOwned>() -> Option<&'static SchemaRef> {
    type_info::<T>().schema
}

/// Parses a stored schema document of the version this build reads.
fn parse_doc(json: &str) -> Result<Doc, String> {
    let doc: Doc =
        serde_json::from_str(json).map_err(|e| format!("the stored schema does not parse: {e}"))?;
    if doc.v != DOC_VERSION {
        return Err(format!(
            "the stored schema has version {}, this build reads version {DOC_VERSION}",
            doc.v
        ));
    }
    Ok(doc)
}

/// Decodes one field's postcard `bytes` with the schema document `json`.
pub(crate) fn decode_json(json: &str, bytes: &[u8]) -> Result<serde_json::Value, String> {
    let doc = parse_doc(json)?;
    decode::decode(&doc.root, &doc.types, bytes)
}

/// Whether `value` could be deserialized (by `serde_json`) as the type of
/// the schema document `json`: `Err` names the first part that could not
/// (see [`check`] for what the check can and cannot see). A document this
/// build cannot read checks nothing.
pub(crate) fn check_json(json: &str, value: &serde_json::Value) -> Result<(), String> {
    match parse_doc(json) {
        Ok(doc) => check::check(&doc.root, &doc.types, value),
        Err(_) => Ok(()),
    }
}

/// One field of a stored checkpoint, decoded as JSON
/// ([`Runtime::checkpoint_fields_json`](crate::Runtime::checkpoint_fields_json)).
///
/// `value` is the field's value as `serde_json::to_value` would render it (see
/// the module docs for the two differences: maps with non-string keys are
/// arrays of `[key, value]` pairs, integers beyond 64 bits are strings). When
/// it is `None`, `note` says why: the type had no traceable schema when it was
/// saved, the store lacks the schema, or the bytes do not decode with it.
///
/// ```
/// use checkpoint_runtime::FieldJson;
/// let f = FieldJson::new("done", "alloc::vec::Vec<u32>", Some(serde_json::json!([1, 2])));
/// assert_eq!(f.value, Some(serde_json::json!([1, 2])));
/// assert_eq!(f.note, None);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FieldJson {
    /// The local's name.
    pub name: String,
    /// Its Rust type (`std::any::type_name`), as stored.
    pub type_name: String,
    /// The key of its schema in the store, if one was recorded.
    pub schema: Option<String>,
    /// The value, if it could be decoded.
    pub value: Option<serde_json::Value>,
    /// Why there is no value.
    pub note: Option<String>,
}

impl FieldJson {
    /// A decoded field (no schema key, no note).
    pub fn new(name: &str, type_name: &str, value: Option<serde_json::Value>) -> Self {
        FieldJson {
            name: name.to_owned(),
            type_name: type_name.to_owned(),
            schema: None,
            value,
            note: None,
        }
    }
}

/// The note of a field saved without a schema.
const NO_SCHEMA: &str = "no schema was recorded for this field: its type's serde format cannot be traced (it deserializes with `deserialize_any`: untagged or internally tagged enums, `serde_json::Value`, ...), or it was saved without one (the snapshot of a `for` loop's iterable, a version without schemas)";

/// Decodes the fields of `cp` with the stored schema documents `docs` (by key).
pub(crate) fn fields_json(
    cp: &crate::store::CheckpointRecord,
    docs: &HashMap<String, String>,
) -> Vec<FieldJson> {
    cp.fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let key = cp.schema_key(i);
            let mut out = FieldJson {
                name: f.name.to_string(),
                type_name: f.type_name.to_string(),
                schema: key.map(str::to_owned),
                value: None,
                note: None,
            };
            let decoded = match (key, cp.field_bytes(i)) {
                (_, None) => Err("the checkpoint record has no bytes for this field".to_owned()),
                (None, _) => Err(NO_SCHEMA.to_owned()),
                (Some(key), Some(bytes)) => match docs.get(key) {
                    None => Err(format!("schema `{key}` is not in the store")),
                    Some(json) => decode_json(json, bytes),
                },
            };
            match decoded {
                Ok(v) => out.value = Some(v),
                Err(e) => out.note = Some(e),
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests;
