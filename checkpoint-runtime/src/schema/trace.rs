//! Tracing the serde format of a type from its `Deserialize` impl.
//!
//! The tracer is a [`serde::Deserializer`] that answers every request of the
//! type's `Deserialize` impl with a placeholder value (zero-ish numbers, empty
//! strings, one element per unexplored sequence, ...) and records what was
//! asked for as a [`serde_reflection::Format`]. Formats, their unknown parts
//! ([`Format::unknown`]), unification and normalization are
//! `serde-reflection`'s; the exploration is our own, because the runtime only
//! knows the field's type `T` and never the Rust types nested inside it:
//!
//! - `serde-reflection`'s `Tracer::trace_simple_type::<T>()` discovers every
//!   variant of `T` itself if `T` is an enum, but of a nested enum only the
//!   variants it happens to reach (its docs: "each enum type must be traced
//!   separately"); an enum reached only through a later variant of another
//!   (`Result<_, MyError>`, `Step::Act(Action)`) stays incomplete;
//! - it picks variant 0 to end a recursion, so a recursive enum whose first
//!   variant recurses (`enum Tree { Node(Vec<Tree>), Leaf }`) overflows the
//!   stack, which aborts the process.
//!
//! Here the whole type is traced again and again (a *pass* per call of `T`'s
//! `Deserialize` impl) until no pass reaches a variant not seen before. At each
//! enum the tracer picks, in order: a variant never traced; a variant whose
//! payload still leads to something unknown or to an enum with untraced
//! variants; a variant that is not already being traced further up (so
//! recursions end on another variant, whichever it is). An `Option`, sequence
//! or map is explored (`Some`, one element, one entry) while its content still
//! leads to something unknown or incomplete, unless that content is a type
//! already being traced further up (which is how recursion through them ends).
//! Nesting deeper than [`MAX_DEPTH`] fails the trace instead of the stack, and
//! so does anything the format cannot express (`deserialize_any`: untagged
//! or internally tagged enums, `serde_json::Value`, ...). A failed trace means
//! "no schema" for the type, never an error for the run.
//!
//! Enum variants are identified by index, as postcard stores them: the tracer
//! hands the `Deserialize` impl the index `i` and names the variant
//! `variants[i]` (the impl's own list, declaration order for derived impls).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{self, DeserializeSeed, Visitor};
use serde::Deserialize;
use serde_reflection::{ContainerFormat, Format, FormatHolder, Named, VariantFormat};

/// The deepest nesting of values one pass may explore.
pub(crate) const MAX_DEPTH: usize = 96;

/// Passes over the type before giving up (each pass but the last traces at
/// least one new enum variant, so this bounds the number of variants).
const MAX_PASSES: usize = 4096;

/// Why a type could not be traced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceError(pub(crate) String);

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TraceError {}

impl de::Error for TraceError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        TraceError(msg.to_string())
    }
}

fn unify_err(e: serde_reflection::Error) -> TraceError {
    TraceError(format!(
        "inconsistent formats (two different types with one name, or a generic type used with different parameters?): {e}"
    ))
}

/// A traced type: its format and the named containers it refers to.
pub(crate) type Traced = (Format, BTreeMap<String, ContainerFormat>);

/// Traces `T`.
pub(crate) fn trace<'de, T: Deserialize<'de>>() -> Result<Traced, TraceError> {
    let mut st = State::default();
    let mut root = Format::unknown();
    for _ in 0..MAX_PASSES {
        st.progress = false;
        T::deserialize(Tr {
            st: &mut st,
            format: &mut root,
            depth: 0,
        })?;
        if !st.progress {
            return st.finish(root);
        }
    }
    Err(TraceError(format!(
        "more than {MAX_PASSES} passes over the type"
    )))
}

/// What a saved value's type says about its round trip through a
/// checkpoint (see `docs/exactness.md`), found by the same passes as
/// [`trace`] (so every part of the type is reached).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Facts {
    /// The first hash-ordered collection (`HashMap`, `HashSet`, or a type of
    /// another crate by those names) inside the type, and where it is:
    /// `` `HashSet<u32>` inside `Graph` ``. It iterates in another order once
    /// rebuilt from a checkpoint (a new random seed, another insertion
    /// history).
    pub(crate) hash_ordered: Option<String>,
    /// A part of the type that deserializes with `deserialize_any`
    /// (`serde_json::Value`, an untagged or internally tagged enum,
    /// `#[serde(flatten)]`): postcard writes it but can never read it back.
    pub(crate) undecodable: Option<String>,
    /// Why the type cannot be saved as the handle it is (see
    /// [`shared_handle`](crate::exactness::shared_handle)).
    pub(crate) shared: Option<String>,
}

/// The [`Facts`] of `T`. A trace that fails part-way reports what it met
/// before the failure.
pub(crate) fn facts<'de, T: Deserialize<'de>>() -> Facts {
    let mut st = State::default();
    let mut root = Format::unknown();
    for _ in 0..MAX_PASSES {
        st.progress = false;
        let traced = T::deserialize(Tr {
            st: &mut st,
            format: &mut root,
            depth: 0,
        });
        if traced.is_err() || !st.progress {
            break;
        }
    }
    let located = |(rust, stack): (&str, Vec<String>)| {
        let rust = crate::readable_type_name(rust);
        match stack.last() {
            Some(container) => format!("`{rust}` inside `{container}`"),
            None => format!("`{rust}`"),
        }
    };
    Facts {
        hash_ordered: st.hash_ordered.map(located),
        undecodable: st.any.map(located),
        shared: crate::exactness::shared_handle(std::any::type_name::<T>()),
    }
}

/// Whether a collection of Rust type `rust` iterates in hash order: its
/// path's last segment is a hash collection's name.
fn is_hash_ordered(rust: &str) -> bool {
    let path = rust.split('<').next().unwrap_or(rust);
    let last = path.rsplit("::").next().unwrap_or(path);
    matches!(
        last,
        "HashMap" | "HashSet" | "AHashMap" | "AHashSet" | "DashMap" | "DashSet"
    )
}

#[derive(Default)]
struct State {
    /// The named containers seen so far (with unknown parts while tracing).
    registry: BTreeMap<String, ContainerFormat>,
    /// The variant names of each enum, as its `Deserialize` impl lists them.
    enums: BTreeMap<String, &'static [&'static str]>,
    /// The registry key of each container: its serde name, with `#2`, `#3`,
    /// ... for the second, third, ... Rust type seen with that serde name
    /// (`Result<A, B>` and `Result<C, D>` are both named `Result`).
    keys: BTreeMap<(&'static str, &'static str), String>,
    /// Rust types seen so far per serde name.
    per_name: BTreeMap<&'static str, usize>,
    /// Containers being deserialized (registry keys), outermost first.
    stack: Vec<String>,
    /// Enum variants being deserialized, outermost first.
    variants_in_progress: Vec<(String, u32)>,
    /// Whether this pass traced a variant for the first time.
    progress: bool,
    /// The first hash-ordered collection met (see [`hash_ordered`]): its
    /// Rust type, and the containers it was met in, outermost first.
    hash_ordered: Option<(&'static str, Vec<String>)>,
    /// The first part met that deserializes with `deserialize_any`, as
    /// `hash_ordered`.
    any: Option<(&'static str, Vec<String>)>,
}

impl State {
    fn finish(self, mut root: Format) -> Result<Traced, TraceError> {
        let mut registry = self.registry;
        for (name, variants) in &self.enums {
            let traced = match registry.get(name) {
                Some(ContainerFormat::Enum(v)) => v.len(),
                _ => 0,
            };
            if traced < variants.len() {
                return Err(TraceError(format!(
                    "could reach only {traced} of the {} variants of enum `{name}`",
                    variants.len()
                )));
            }
        }
        root.normalize()
            .map_err(|_| TraceError("a part of the type was never reached".to_owned()))?;
        for (name, c) in registry.iter_mut() {
            c.normalize()
                .map_err(|_| TraceError(format!("a part of `{name}` was never reached")))?;
        }
        Ok((root, registry))
    }

    fn variant_traced(&self, name: &str, i: u32) -> bool {
        matches!(self.registry.get(name), Some(ContainerFormat::Enum(v)) if v.contains_key(&i))
    }

    /// Whether exploring a value of format `f` may still teach something: it
    /// has unknown parts or leads to an enum with untraced variants.
    fn needs(&self, f: &Format, seen: &mut BTreeSet<String>) -> bool {
        match f {
            Format::Variable(v) => match &*v.borrow() {
                None => true,
                Some(inner) => self.needs(inner, seen),
            },
            Format::TypeName(name) => {
                if !seen.insert(name.clone()) {
                    return false;
                }
                if let Some(variants) = self.enums.get(name) {
                    let traced = match self.registry.get(name) {
                        Some(ContainerFormat::Enum(v)) => v.len(),
                        _ => 0,
                    };
                    if traced < variants.len() {
                        return true;
                    }
                }
                match self.registry.get(name) {
                    None => true,
                    Some(c) => self.container_needs(c, seen),
                }
            }
            Format::Option(inner) | Format::Seq(inner) => self.needs(inner, seen),
            Format::Map { key, value } => self.needs(key, seen) || self.needs(value, seen),
            Format::Tuple(items) => items.iter().any(|x| self.needs(x, seen)),
            Format::TupleArray { content, .. } => self.needs(content, seen),
            _ => false,
        }
    }

    fn container_needs(&self, c: &ContainerFormat, seen: &mut BTreeSet<String>) -> bool {
        match c {
            ContainerFormat::UnitStruct => false,
            ContainerFormat::NewTypeStruct(f) => self.needs(f, seen),
            ContainerFormat::TupleStruct(fs) => fs.iter().any(|f| self.needs(f, seen)),
            ContainerFormat::Struct(fs) => fs.iter().any(|f| self.needs(&f.value, seen)),
            ContainerFormat::Enum(vs) => vs.values().any(|v| self.variant_needs(&v.value, seen)),
        }
    }

    fn variant_needs(&self, v: &VariantFormat, seen: &mut BTreeSet<String>) -> bool {
        match v {
            VariantFormat::Variable(var) => match &*var.borrow() {
                None => true,
                Some(inner) => self.variant_needs(inner, seen),
            },
            VariantFormat::Unit => false,
            VariantFormat::NewType(f) => self.needs(f, seen),
            VariantFormat::Tuple(fs) => fs.iter().any(|f| self.needs(f, seen)),
            VariantFormat::Struct(fs) => fs.iter().any(|f| self.needs(&f.value, seen)),
        }
    }

    /// Whether a value of format `f` would enter a container that is being
    /// deserialized further up (without going through another container).
    fn recursive(&self, f: &Format) -> bool {
        match f {
            Format::Variable(v) => match &*v.borrow() {
                None => false,
                Some(inner) => self.recursive(inner),
            },
            Format::TypeName(name) => self.stack.iter().any(|s| s == name),
            Format::Option(inner) | Format::Seq(inner) => self.recursive(inner),
            Format::Map { key, value } => self.recursive(key) || self.recursive(value),
            Format::Tuple(items) => items.iter().any(|x| self.recursive(x)),
            Format::TupleArray { content, .. } => self.recursive(content),
            _ => false,
        }
    }

    fn variant_recursive(&self, v: &VariantFormat) -> bool {
        match v {
            VariantFormat::Variable(var) => match &*var.borrow() {
                None => false,
                Some(inner) => self.variant_recursive(inner),
            },
            VariantFormat::Unit => false,
            VariantFormat::NewType(f) => self.recursive(f),
            VariantFormat::Tuple(fs) => fs.iter().any(|f| self.recursive(f)),
            VariantFormat::Struct(fs) => fs.iter().any(|f| self.recursive(&f.value)),
        }
    }

    /// Whether to explore the content (of format `f`) of an `Option`,
    /// sequence or map.
    fn explore(&self, f: &Format) -> bool {
        self.needs(f, &mut BTreeSet::new()) && !self.recursive(f)
    }

    /// The registry key of the container with serde name `name` whose
    /// `Deserialize` impl produces a `rust` (see [`State::keys`]).
    fn key(&mut self, name: &'static str, rust: &'static str) -> String {
        if let Some(k) = self.keys.get(&(name, rust)) {
            return k.clone();
        }
        let n = self.per_name.entry(name).or_insert(0);
        *n += 1;
        let key = if *n == 1 {
            name.to_owned()
        } else {
            format!("{name}#{n}")
        };
        self.keys.insert((name, rust), key.clone());
        key
    }

    /// Picks the variant of enum `key` to trace now.
    fn pick(&self, key: &str, count: u32) -> Result<u32, TraceError> {
        if let Some(i) = (0..count).find(|&i| !self.variant_traced(key, i)) {
            return Ok(i);
        }
        let Some(ContainerFormat::Enum(known)) = self.registry.get(key) else {
            return Err(TraceError(format!("enum `{key}` has no traced variant")));
        };
        let busy = |i: u32| {
            self.variants_in_progress
                .iter()
                .any(|(k, j)| k == key && *j == i)
        };
        let traced = || known.iter().filter(|(i, _)| **i < count);
        let free = || traced().filter(|(i, _)| !busy(**i));
        let pick = free()
            // Something to learn, without recursing.
            .find(|(_, v)| {
                self.variant_needs(&v.value, &mut BTreeSet::new())
                    && !self.variant_recursive(&v.value)
            })
            // A way out.
            .or_else(|| free().find(|(_, v)| !self.variant_recursive(&v.value)))
            .or_else(|| free().next())
            // Every variant is being traced further up: one more level (its
            // optional parts are cut now that their formats are known); the
            // depth limit stops an enum that has no way out at all.
            .or_else(|| traced().find(|(_, v)| !self.variant_recursive(&v.value)))
            .or_else(|| traced().next());
        pick.map(|(i, _)| *i)
            .ok_or_else(|| TraceError(format!("enum `{key}` has no traced variant")))
    }

    /// Notes a sequence or map whose `Deserialize` impl builds a `rust`.
    fn collection(&mut self, rust: &'static str) {
        if self.hash_ordered.is_none() && is_hash_ordered(rust) {
            self.hash_ordered = Some((rust, self.stack.clone()));
        }
    }

    fn unify_container(&mut self, name: &str, c: ContainerFormat) -> Result<(), TraceError> {
        match self.registry.get_mut(name) {
            Some(existing) => existing.unify(c).map_err(unify_err),
            None => {
                self.registry.insert(name.to_owned(), c);
                Ok(())
            }
        }
    }
}

/// The tracing deserializer: one value at one format position.
struct Tr<'a> {
    st: &'a mut State,
    format: &'a mut Format,
    depth: usize,
}

impl<'a> Tr<'a> {
    fn set(&mut self, f: Format) -> Result<(), TraceError> {
        self.format.unify(f).map_err(unify_err)
    }

    fn check_depth(&self) -> Result<(), TraceError> {
        if self.depth > MAX_DEPTH {
            return Err(TraceError(format!(
                "values nested more than {MAX_DEPTH} levels deep (a recursive type without a way out?)"
            )));
        }
        Ok(())
    }

    /// Enters the container with registry key `key`.
    fn enter(&mut self, key: &str) -> Result<(), TraceError> {
        self.check_depth()?;
        self.set(Format::TypeName(key.to_owned()))?;
        self.st.stack.push(key.to_owned());
        Ok(())
    }

    fn leave(st: &mut State) {
        st.stack.pop();
    }
}

macro_rules! primitive {
    ($method:ident, $format:ident, $visit:ident, $value:expr) => {
        fn $method<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, TraceError> {
            self.set(Format::$format)?;
            visitor.$visit($value)
        }
    };
}

impl<'de> de::Deserializer<'de> for Tr<'_> {
    type Error = TraceError;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, TraceError> {
        if self.st.any.is_none() {
            self.st.any = Some((std::any::type_name::<V::Value>(), self.st.stack.clone()));
        }
        Err(TraceError(
            "the type is not self-describing in serde's binary model (deserialize_any: an untagged or internally tagged enum, serde_json::Value, ...)".to_owned(),
        ))
    }

    primitive!(deserialize_bool, Bool, visit_bool, false);
    primitive!(deserialize_i8, I8, visit_i8, 1);
    primitive!(deserialize_i16, I16, visit_i16, 1);
    primitive!(deserialize_i32, I32, visit_i32, 1);
    primitive!(deserialize_i64, I64, visit_i64, 1);
    primitive!(deserialize_i128, I128, visit_i128, 1);
    primitive!(deserialize_u8, U8, visit_u8, 1);
    primitive!(deserialize_u16, U16, visit_u16, 1);
    primitive!(deserialize_u32, U32, visit_u32, 1);
    primitive!(deserialize_u64, U64, visit_u64, 1);
    primitive!(deserialize_u128, U128, visit_u128, 1);
    primitive!(deserialize_f32, F32, visit_f32, 0.0);
    primitive!(deserialize_f64, F64, visit_f64, 0.0);
    primitive!(deserialize_char, Char, visit_char, 'A');
    primitive!(deserialize_str, Str, visit_borrowed_str, "");
    primitive!(deserialize_string, Str, visit_string, String::new());
    // Sixteen bytes: what fixed-size binary types (UUIDs) insist on.
    primitive!(deserialize_bytes, Bytes, visit_borrowed_bytes, &[0; 16]);
    primitive!(deserialize_byte_buf, Bytes, visit_byte_buf, vec![0; 16]);

    fn deserialize_unit<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, TraceError> {
        self.set(Format::Unit)?;
        visitor.visit_unit()
    }

    fn deserialize_option<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, TraceError> {
        let mut inner = Format::unknown();
        self.set(Format::Option(Box::new(inner.clone())))?;
        if self.st.explore(&inner) {
            self.check_depth()?;
            visitor.visit_some(Tr {
                st: self.st,
                format: &mut inner,
                depth: self.depth + 1,
            })
        } else {
            visitor.visit_none()
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        mut self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        let key = self.st.key(name, std::any::type_name::<V::Value>());
        self.set(Format::TypeName(key.clone()))?;
        self.st.unify_container(&key, ContainerFormat::UnitStruct)?;
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        mut self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        let key = self.st.key(name, std::any::type_name::<V::Value>());
        self.enter(&key)?;
        let mut inner = Format::unknown();
        let r = self
            .st
            .unify_container(
                &key,
                ContainerFormat::NewTypeStruct(Box::new(inner.clone())),
            )
            .and_then(|()| {
                visitor.visit_newtype_struct(Tr {
                    st: &mut *self.st,
                    format: &mut inner,
                    depth: self.depth + 1,
                })
            });
        Tr::leave(self.st);
        r
    }

    fn deserialize_seq<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, TraceError> {
        self.st.collection(std::any::type_name::<V::Value>());
        let mut inner = Format::unknown();
        self.set(Format::Seq(Box::new(inner.clone())))?;
        if self.st.explore(&inner) {
            self.check_depth()?;
            visitor.visit_seq(Items::new(self.st, vec![&mut inner], self.depth + 1))
        } else {
            visitor.visit_seq(Items::new(self.st, Vec::new(), self.depth + 1))
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        mut self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        self.check_depth()?;
        let mut items: Vec<Format> = (0..len).map(|_| Format::unknown()).collect();
        self.set(Format::Tuple(items.clone()))?;
        visitor.visit_seq(Items::new(
            self.st,
            items.iter_mut().collect(),
            self.depth + 1,
        ))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        mut self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        let key = self.st.key(name, std::any::type_name::<V::Value>());
        self.enter(&key)?;
        let mut items: Vec<Format> = (0..len).map(|_| Format::unknown()).collect();
        let r = self
            .st
            .unify_container(&key, ContainerFormat::TupleStruct(items.clone()))
            .and_then(|()| {
                visitor.visit_seq(Items::new(
                    &mut *self.st,
                    items.iter_mut().collect(),
                    self.depth + 1,
                ))
            });
        Tr::leave(self.st);
        r
    }

    fn deserialize_map<V: Visitor<'de>>(mut self, visitor: V) -> Result<V::Value, TraceError> {
        self.st.collection(std::any::type_name::<V::Value>());
        let mut key = Format::unknown();
        let mut value = Format::unknown();
        self.set(Format::Map {
            key: Box::new(key.clone()),
            value: Box::new(value.clone()),
        })?;
        if self.st.explore(&key) || self.st.explore(&value) {
            self.check_depth()?;
            visitor.visit_map(Items::new(
                self.st,
                vec![&mut key, &mut value],
                self.depth + 1,
            ))
        } else {
            visitor.visit_map(Items::new(self.st, Vec::new(), self.depth + 1))
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        mut self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        let key = self.st.key(name, std::any::type_name::<V::Value>());
        self.enter(&key)?;
        let mut items: Vec<Named<Format>> = fields
            .iter()
            .map(|f| Named {
                name: (*f).to_owned(),
                value: Format::unknown(),
            })
            .collect();
        let r = self
            .st
            .unify_container(&key, ContainerFormat::Struct(items.clone()))
            .and_then(|()| {
                visitor.visit_seq(Items::new(
                    &mut *self.st,
                    items.iter_mut().map(|n| &mut n.value).collect(),
                    self.depth + 1,
                ))
            });
        Tr::leave(self.st);
        r
    }

    fn deserialize_enum<V: Visitor<'de>>(
        mut self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        let count = u32::try_from(variants.len())
            .map_err(|_| TraceError(format!("enum `{name}` has too many variants")))?;
        if count == 0 {
            return Err(TraceError(format!("enum `{name}` has no variants")));
        }
        let key = self.st.key(name, std::any::type_name::<V::Value>());
        match self.st.enums.insert(key.clone(), variants) {
            Some(before) if before != variants => {
                return Err(TraceError(format!(
                    "enum `{name}` lists different variants at different times"
                )))
            }
            _ => {}
        }
        // Pick before entering: the enum itself is not "further up" yet.
        let index = self.st.pick(&key, count)?;
        self.enter(&key)?;
        let entry = self
            .st
            .registry
            .entry(key.clone())
            .or_insert_with(|| ContainerFormat::Enum(BTreeMap::new()));
        let ContainerFormat::Enum(known) = entry else {
            Tr::leave(self.st);
            return Err(TraceError(format!("`{name}` is both an enum and a struct")));
        };
        let mut format = match known.get(&index) {
            Some(v) => v.value.clone(),
            None => {
                let v = VariantFormat::unknown();
                let variant = variants.get(index as usize).copied().unwrap_or("?");
                known.insert(
                    index,
                    Named {
                        name: variant.to_owned(),
                        value: v.clone(),
                    },
                );
                self.st.progress = true;
                v
            }
        };
        self.st.variants_in_progress.push((key, index));
        let r = visitor.visit_enum(Variant {
            st: &mut *self.st,
            index,
            format: &mut format,
            depth: self.depth + 1,
        });
        self.st.variants_in_progress.pop();
        Tr::leave(self.st);
        r
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, TraceError> {
        Err(TraceError(
            "deserialize_identifier outside an enum is not supported".to_owned(),
        ))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, TraceError> {
        Err(TraceError(
            "deserialize_ignored_any is not supported".to_owned(),
        ))
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The elements of a sequence, tuple or struct, or the key and value of a
/// one-entry map.
struct Items<'a> {
    st: &'a mut State,
    formats: std::vec::IntoIter<&'a mut Format>,
    depth: usize,
}

impl<'a> Items<'a> {
    fn new(st: &'a mut State, formats: Vec<&'a mut Format>, depth: usize) -> Self {
        Items {
            st,
            formats: formats.into_iter(),
            depth,
        }
    }

    fn next<'de, S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, TraceError> {
        match self.formats.next() {
            None => Ok(None),
            Some(format) => seed
                .deserialize(Tr {
                    st: &mut *self.st,
                    format,
                    depth: self.depth,
                })
                .map(Some),
        }
    }
}

impl<'de> de::SeqAccess<'de> for Items<'_> {
    type Error = TraceError;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, TraceError> {
        self.next(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.formats.len())
    }
}

impl<'de> de::MapAccess<'de> for Items<'_> {
    type Error = TraceError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, TraceError> {
        self.next(seed)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, TraceError> {
        self.next(seed)?
            .ok_or_else(|| TraceError("a map value was asked for without its key".to_owned()))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.formats.len() / 2)
    }
}

/// The variant picked for an enum.
struct Variant<'a> {
    st: &'a mut State,
    index: u32,
    format: &'a mut VariantFormat,
    depth: usize,
}

impl<'de, 'a> de::EnumAccess<'de> for Variant<'a> {
    type Error = TraceError;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self), TraceError> {
        let value = seed.deserialize(de::value::U32Deserializer::<TraceError>::new(self.index))?;
        Ok((value, self))
    }
}

impl<'de> de::VariantAccess<'de> for Variant<'_> {
    type Error = TraceError;

    fn unit_variant(self) -> Result<(), TraceError> {
        self.format.unify(VariantFormat::Unit).map_err(unify_err)
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<S::Value, TraceError> {
        let mut inner = Format::unknown();
        self.format
            .unify(VariantFormat::NewType(Box::new(inner.clone())))
            .map_err(unify_err)?;
        seed.deserialize(Tr {
            st: self.st,
            format: &mut inner,
            depth: self.depth,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        let mut items: Vec<Format> = (0..len).map(|_| Format::unknown()).collect();
        self.format
            .unify(VariantFormat::Tuple(items.clone()))
            .map_err(unify_err)?;
        visitor.visit_seq(Items::new(self.st, items.iter_mut().collect(), self.depth))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        let mut items: Vec<Named<Format>> = fields
            .iter()
            .map(|f| Named {
                name: (*f).to_owned(),
                value: Format::unknown(),
            })
            .collect();
        self.format
            .unify(VariantFormat::Struct(items.clone()))
            .map_err(unify_err)?;
        visitor.visit_seq(Items::new(
            self.st,
            items.iter_mut().map(|n| &mut n.value).collect(),
            self.depth,
        ))
    }
}
