//! JSON + a traced format -> "could this type deserialize it with
//! `serde_json`?", without the Rust type.
//!
//! [`Runtime::signal`](crate::Runtime::signal) uses it to refuse, before
//! storing it, a signal payload that the waiting site could not decode, when
//! the process sending it never ran that site (a client elsewhere, the CLI):
//! the site stored its payload type's schema with the wait.
//!
//! The check is one-sided on purpose. It refuses only what `serde_json`
//! refuses whatever attributes the type has: a value of the wrong kind (a
//! string for a struct, `true` for a number), an integer out of range or a
//! float for an integer, a tuple of the wrong length, an enum given as an
//! object with several keys. What a schema cannot see it lets through, and
//! the site itself then decides (rejecting with a history event, as for any
//! undecodable signal):
//!
//! - a missing struct field that is not an `Option` (it may have
//!   `#[serde(default)]`), and fields the type does not name (the type may
//!   not deny them);
//! - enum variant names (the trace's names can be off when the type has
//!   `#[serde(alias)]`es, and a `#[serde(other)]` variant takes any): a
//!   variant's content is checked against every variant of the enum;
//! - map keys that are not strings or integers, and 128-bit integers'
//!   ranges;
//! - parts of the schema left unresolved, and values nested deeper than
//!   [`MAX_DEPTH`].

use std::collections::BTreeMap;

use serde_json::Value;
use serde_reflection::{ContainerFormat, Format, Named, VariantFormat};

use super::decode::MAX_DEPTH;

/// Whether `value` could be a value of format `root` (whose named
/// containers are in `types`); `Err` says where and why not.
pub(crate) fn check(
    root: &Format,
    types: &BTreeMap<String, ContainerFormat>,
    value: &Value,
) -> Result<(), String> {
    Checker { types }.value(root, value, "payload", 0)
}

struct Checker<'a> {
    types: &'a BTreeMap<String, ContainerFormat>,
}

/// What a JSON value is, in words.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a floating-point number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn mismatch(path: &str, expected: &str, v: &Value) -> String {
    format!("{path}: expected {expected}, found {}", kind(v))
}

impl Checker<'_> {
    fn value(&self, f: &Format, v: &Value, path: &str, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Ok(());
        }
        match f {
            Format::Variable(_) => Ok(()),
            Format::TypeName(name) => match self.types.get(name) {
                Some(c) => self.container(name, c, v, path, depth),
                None => Ok(()),
            },
            Format::Unit => match v {
                Value::Null => Ok(()),
                _ => Err(mismatch(path, "null", v)),
            },
            Format::Bool => match v {
                Value::Bool(_) => Ok(()),
                _ => Err(mismatch(path, "a boolean", v)),
            },
            Format::I8 => int(v, path, i8::MIN.into(), i8::MAX.into()),
            Format::I16 => int(v, path, i16::MIN.into(), i16::MAX.into()),
            Format::I32 => int(v, path, i32::MIN.into(), i32::MAX.into()),
            Format::I64 => int(v, path, i64::MIN.into(), i64::MAX.into()),
            Format::U8 => int(v, path, 0, u8::MAX.into()),
            Format::U16 => int(v, path, 0, u16::MAX.into()),
            Format::U32 => int(v, path, 0, u32::MAX.into()),
            Format::U64 => int(v, path, 0, u64::MAX.into()),
            Format::I128 | Format::U128 => match v {
                Value::Number(n) if !n.is_f64() => Ok(()),
                _ => Err(mismatch(path, "an integer", v)),
            },
            Format::F32 | Format::F64 => match v {
                Value::Number(_) => Ok(()),
                _ => Err(mismatch(path, "a number", v)),
            },
            Format::Char => match v {
                Value::String(s) if s.chars().count() == 1 => Ok(()),
                Value::String(s) => Err(format!("{path}: expected one character, found {s:?}")),
                _ => Err(mismatch(path, "a one-character string", v)),
            },
            Format::Str => match v {
                Value::String(_) => Ok(()),
                _ => Err(mismatch(path, "a string", v)),
            },
            Format::Bytes => match v {
                Value::String(_) => Ok(()),
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        int(item, &format!("{path}[{i}]"), 0, u8::MAX.into())?;
                    }
                    Ok(())
                }
                _ => Err(mismatch(
                    path,
                    "bytes (an array of integers or a string)",
                    v,
                )),
            },
            Format::Option(inner) => match v {
                Value::Null => Ok(()),
                some => self.value(inner, some, path, depth + 1),
            },
            Format::Seq(item) => match v {
                Value::Array(items) => self.items(item, items, path, depth),
                _ => Err(mismatch(path, "an array", v)),
            },
            Format::TupleArray { content, size } => match v {
                Value::Array(items) if items.len() == *size => {
                    self.items(content, items, path, depth)
                }
                Value::Array(items) => Err(format!(
                    "{path}: expected an array of {size} element(s), found {}",
                    items.len()
                )),
                _ => Err(mismatch(path, &format!("an array of {size} element(s)"), v)),
            },
            Format::Tuple(formats) => self.tuple(formats, v, path, depth, true),
            Format::Map { key, value } => match v {
                Value::Object(m) => {
                    for (k, item) in m {
                        let at = format!("{path}[{k:?}]");
                        map_key(key, k, &at)?;
                        self.value(value, item, &at, depth + 1)?;
                    }
                    Ok(())
                }
                _ => Err(mismatch(path, "an object", v)),
            },
        }
    }

    fn items(
        &self,
        item: &Format,
        items: &[Value],
        path: &str,
        depth: usize,
    ) -> Result<(), String> {
        for (i, v) in items.iter().enumerate() {
            self.value(item, v, &format!("{path}[{i}]"), depth + 1)?;
        }
        Ok(())
    }

    /// A tuple (or tuple struct, or tuple variant): an array of as many
    /// elements, or fewer where the type may default the rest (`exact`:
    /// it may not, a plain tuple).
    fn tuple(
        &self,
        formats: &[Format],
        v: &Value,
        path: &str,
        depth: usize,
        exact: bool,
    ) -> Result<(), String> {
        let n = formats.len();
        let Value::Array(items) = v else {
            return Err(mismatch(path, &format!("an array of {n} element(s)"), v));
        };
        if items.len() > n || (exact && items.len() < n) {
            return Err(format!(
                "{path}: expected an array of {n} element(s), found {}",
                items.len()
            ));
        }
        for (i, (f, item)) in formats.iter().zip(items).enumerate() {
            self.value(f, item, &format!("{path}[{i}]"), depth + 1)?;
        }
        Ok(())
    }

    /// A struct (or struct variant): an object, or an array of its fields
    /// in order (both are what `serde_json` accepts for a derived struct).
    fn fields(
        &self,
        fields: &[Named<Format>],
        v: &Value,
        path: &str,
        depth: usize,
    ) -> Result<(), String> {
        match v {
            Value::Object(m) => {
                for f in fields {
                    if let Some(item) = m.get(&f.name) {
                        self.value(&f.value, item, &format!("{path}.{}", f.name), depth + 1)?;
                    }
                }
                Ok(())
            }
            Value::Array(items) => {
                if items.len() > fields.len() {
                    return Err(format!(
                        "{path}: expected at most {} field(s), found an array of {}",
                        fields.len(),
                        items.len()
                    ));
                }
                for (f, item) in fields.iter().zip(items) {
                    self.value(&f.value, item, &format!("{path}.{}", f.name), depth + 1)?;
                }
                Ok(())
            }
            _ => Err(mismatch(path, "an object", v)),
        }
    }

    fn container(
        &self,
        name: &str,
        c: &ContainerFormat,
        v: &Value,
        path: &str,
        depth: usize,
    ) -> Result<(), String> {
        match c {
            ContainerFormat::UnitStruct => match v {
                Value::Null => Ok(()),
                _ => Err(mismatch(path, &format!("null (unit struct `{name}`)"), v)),
            },
            ContainerFormat::NewTypeStruct(inner) => self.value(inner, v, path, depth + 1),
            ContainerFormat::TupleStruct(formats) => self.tuple(formats, v, path, depth, false),
            ContainerFormat::Struct(fields) => self.fields(fields, v, path, depth),
            ContainerFormat::Enum(variants) => self.variant(name, variants, v, path, depth),
        }
    }

    /// An enum value: a variant's name (a string), or an object with one
    /// key, the name, whose value is the variant's content.
    ///
    /// Names are not trusted to find the variant: the trace names variants
    /// after the `Deserialize` impl's list, which also holds aliases (so a
    /// name can sit at another variant's index), and a `#[serde(other)]`
    /// variant takes names the list lacks. So a string always passes, and
    /// an object's content passes if it fits any variant; only when it fits
    /// none is it refused, with what the variant of that name (if any)
    /// expected.
    fn variant(
        &self,
        name: &str,
        variants: &BTreeMap<u32, Named<VariantFormat>>,
        v: &Value,
        path: &str,
        depth: usize,
    ) -> Result<(), String> {
        let expected = || format!("a variant of `{name}` (a string, or an object with one key)");
        match v {
            Value::String(_) => Ok(()),
            Value::Object(m) if m.len() == 1 => {
                let (s, content) = m.iter().next().expect("one entry");
                let at = format!("{path}.{s}");
                let mut named_error = None;
                for var in variants.values() {
                    match self.variant_content(&var.value, content, &at, depth) {
                        Ok(()) => return Ok(()),
                        Err(e) if var.name == *s => named_error = Some(e),
                        Err(_) => {}
                    }
                }
                Err(named_error
                    .unwrap_or_else(|| format!("{at}: the content fits no variant of `{name}`")))
            }
            Value::Object(m) => Err(format!(
                "{path}: expected {}, found an object with {} keys",
                expected(),
                m.len()
            )),
            _ => Err(mismatch(path, &expected(), v)),
        }
    }

    fn variant_content(
        &self,
        f: &VariantFormat,
        content: &Value,
        at: &str,
        depth: usize,
    ) -> Result<(), String> {
        match f {
            VariantFormat::Variable(_) => Ok(()),
            VariantFormat::Unit => match content {
                Value::Null => Ok(()),
                _ => Err(mismatch(at, "null (a unit variant)", content)),
            },
            VariantFormat::NewType(inner) => self.value(inner, content, at, depth + 1),
            VariantFormat::Tuple(formats) => self.tuple(formats, content, at, depth, false),
            VariantFormat::Struct(fields) => self.fields(fields, content, at, depth),
        }
    }
}

/// An integer in `min..=max` (`serde_json` refuses floats for integers).
fn int(v: &Value, path: &str, min: i128, max: i128) -> Result<(), String> {
    let n = match v {
        Value::Number(n) => n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)),
        _ => None,
    };
    match n {
        Some(n) if (min..=max).contains(&n) => Ok(()),
        Some(n) => Err(format!("{path}: {n} is out of range ({min} to {max})")),
        None => Err(mismatch(path, "an integer", v)),
    }
}

/// A map key (always a JSON string): `serde_json` parses integer and
/// boolean keys from it; other key types are left to the site.
fn map_key(f: &Format, key: &str, path: &str) -> Result<(), String> {
    let parsed = match f {
        Format::I8 | Format::I16 | Format::I32 | Format::I64 | Format::I128 => {
            key.parse::<i128>().map(drop).is_ok()
        }
        Format::U8 | Format::U16 | Format::U32 | Format::U64 | Format::U128 => {
            key.parse::<u128>().map(drop).is_ok()
        }
        Format::Bool => key == "true" || key == "false",
        _ => true,
    };
    if parsed {
        Ok(())
    } else {
        Err(format!("{path}: the key {key:?} is not a {f:?}"))
    }
}
