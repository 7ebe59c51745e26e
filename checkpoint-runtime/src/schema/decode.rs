//! Postcard bytes + a traced format -> JSON, without the Rust type.
//!
//! Postcard's wire format (postcard 1.x, "wire format" in its docs), as read
//! here:
//!
//! - `bool`: one byte, 0 or 1; `u8`/`i8`: one raw byte;
//! - `u16`..`u128`: varint (LEB128, 7 bits a byte, least significant first,
//!   at most 3/5/10/19 bytes, the last one without excess bits); `i16`..`i128`:
//!   the zigzag encoding of the value (`0, -1, 1, -2, ...` as `0, 1, 2, 3, ...`)
//!   as a varint of the same width;
//! - `f32`/`f64`: 4/8 bytes, little-endian IEEE 754;
//! - `char`, `str`: a varint byte length, then UTF-8; bytes: length, bytes;
//! - `Option`: a tag byte (0 `None`, 1 `Some`), then the value;
//! - unit, unit struct: nothing; newtype struct: its content;
//! - sequence and map: a varint element count, then the elements (a map's as
//!   key, value, key, value, ...); tuple, tuple struct, struct: the fields in
//!   order, no count;
//! - enum: the variant index as a varint `u32`, then the variant's content.
//!
//! The JSON is what `serde_json::to_value` gives for the value, except:
//!
//! - a map whose keys are not all JSON strings (integers, tuples, ...) becomes an
//!   array of `[key, value]` pairs (an empty map is `{}`);
//! - integers beyond the range of `i64`/`u64` (only `i128`/`u128` can be) become
//!   strings of their decimal digits.

use serde_json::{Map, Number, Value};
use serde_reflection::{ContainerFormat, Format, Named, VariantFormat};

use std::collections::BTreeMap;

/// The deepest nesting of values decoded (deeper data is reported, not
/// decoded: the decoder recurses, and a corrupt byte string must not be able
/// to exhaust the stack).
pub(crate) const MAX_DEPTH: usize = 256;

/// Values produced beyond one per input byte (a sequence of units takes no
/// bytes per element): a corrupt count must not be able to exhaust memory.
const EXTRA_VALUES: usize = 1 << 20;

/// Decodes `bytes` (one postcard value of format `root`, whose named
/// containers are in `types`) as JSON. All of `bytes` must be used.
pub(crate) fn decode(
    root: &Format,
    types: &BTreeMap<String, ContainerFormat>,
    bytes: &[u8],
) -> Result<Value, String> {
    let mut d = Decoder {
        bytes,
        pos: 0,
        types,
        budget: bytes.len().saturating_add(EXTRA_VALUES),
    };
    let v = d
        .value(root, 0)
        .map_err(|e| format!("at byte {}: {e}", d.pos))?;
    if d.pos != bytes.len() {
        return Err(format!(
            "{} trailing byte(s) after the value",
            bytes.len() - d.pos
        ));
    }
    Ok(v)
}

struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    types: &'a BTreeMap<String, ContainerFormat>,
    budget: usize,
}

impl Decoder<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| "unexpected end of the bytes".to_owned())?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "{n} byte(s) announced, {} left",
                    self.bytes.len() - self.pos
                )
            })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// A varint of an unsigned integer `bits` wide.
    fn varint(&mut self, bits: u32) -> Result<u128, String> {
        let max_bytes = bits.div_ceil(7);
        let max_last: u8 = (1u8 << (bits % 7)) - 1;
        let mut out: u128 = 0;
        for i in 0..max_bytes {
            let b = self.byte()?;
            out |= u128::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                if i == max_bytes - 1 && b > max_last {
                    return Err(format!("varint overflows {bits} bits"));
                }
                return Ok(out);
            }
        }
        Err(format!("varint longer than {max_bytes} bytes"))
    }

    fn len(&mut self) -> Result<usize, String> {
        let n = self.varint(64)?;
        usize::try_from(n).map_err(|_| format!("length {n} does not fit in memory"))
    }

    fn spend(&mut self) -> Result<(), String> {
        self.budget = self
            .budget
            .checked_sub(1)
            .ok_or_else(|| "too many values for the size of the bytes".to_owned())?;
        Ok(())
    }

    fn value(&mut self, f: &Format, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("values nested more than {MAX_DEPTH} levels deep"));
        }
        self.spend()?;
        Ok(match f {
            Format::Variable(_) => return Err("the schema has an unresolved part".to_owned()),
            Format::TypeName(name) => {
                let c = self
                    .types
                    .get(name)
                    .ok_or_else(|| format!("the schema does not describe type `{name}`"))?;
                self.container(name, c, depth)?
            }
            Format::Option(inner) => match self.byte()? {
                0 => Value::Null,
                1 => self.value(inner, depth + 1)?,
                b => return Err(format!("{b} is not an Option tag")),
            },
            Format::Seq(inner) => {
                let n = self.len()?;
                self.array(inner, n, depth)?
            }
            Format::Map { key, value } => self.map(key, value, depth)?,
            Format::Tuple(items) => self.tuple(items, depth)?,
            Format::TupleArray { content, size } => self.array(content, *size, depth)?,
            scalar => self.scalar(scalar)?,
        })
    }

    /// A value of a format without parts (numbers, strings, bytes).
    fn scalar(&mut self, f: &Format) -> Result<Value, String> {
        Ok(match f {
            Format::Unit => Value::Null,
            Format::Bool => match self.byte()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(format!("{b} is not a bool")),
            },
            Format::I8 => Value::from(self.byte()? as i8),
            Format::U8 => Value::from(self.byte()?),
            Format::I16 => signed(self.varint(16)?),
            Format::I32 => signed(self.varint(32)?),
            Format::I64 => signed(self.varint(64)?),
            Format::I128 => signed(self.varint(128)?),
            Format::U16 | Format::U32 | Format::U64 | Format::U128 => {
                let bits = match f {
                    Format::U16 => 16,
                    Format::U32 => 32,
                    Format::U64 => 64,
                    _ => 128,
                };
                let n = self.varint(bits)?;
                match u64::try_from(n) {
                    Ok(n) => Value::from(n),
                    Err(_) => Value::String(n.to_string()),
                }
            }
            Format::F32 => {
                let b: [u8; 4] = self
                    .take(4)?
                    .try_into()
                    .map_err(|_| "short f32".to_owned())?;
                float(f64::from(f32::from_le_bytes(b)))
            }
            Format::F64 => {
                let b: [u8; 8] = self
                    .take(8)?
                    .try_into()
                    .map_err(|_| "short f64".to_owned())?;
                float(f64::from_le_bytes(b))
            }
            Format::Char => {
                let s = self.str()?;
                let mut chars = s.chars();
                match (chars.next(), chars.next()) {
                    (Some(_), None) => Value::String(s),
                    _ => return Err(format!("{s:?} is not one char")),
                }
            }
            Format::Str => Value::String(self.str()?),
            Format::Bytes => {
                let n = self.len()?;
                let b = self.take(n)?;
                Value::Array(b.iter().map(|x| Value::from(*x)).collect())
            }
            other => return Err(format!("{other:?} is not a scalar format")),
        })
    }

    /// `n` values of format `item`, as an array.
    fn array(&mut self, item: &Format, n: usize, depth: usize) -> Result<Value, String> {
        let mut out = Vec::with_capacity(n.min(self.bytes.len() - self.pos));
        for _ in 0..n {
            out.push(self.value(item, depth + 1)?);
        }
        Ok(Value::Array(out))
    }

    /// A map: an object when every key is a string, else an array of pairs.
    fn map(&mut self, key: &Format, value: &Format, depth: usize) -> Result<Value, String> {
        let n = self.len()?;
        let mut pairs = Vec::with_capacity(n.min(self.bytes.len() - self.pos));
        for _ in 0..n {
            let k = self.value(key, depth + 1)?;
            let v = self.value(value, depth + 1)?;
            pairs.push((k, v));
        }
        if pairs.iter().all(|(k, _)| k.is_string()) {
            let mut m = Map::new();
            for (k, v) in pairs {
                if let Value::String(k) = k {
                    m.insert(k, v);
                }
            }
            Ok(Value::Object(m))
        } else {
            Ok(Value::Array(
                pairs
                    .into_iter()
                    .map(|(k, v)| Value::Array(vec![k, v]))
                    .collect(),
            ))
        }
    }

    fn str(&mut self) -> Result<String, String> {
        let n = self.len()?;
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|e| format!("invalid UTF-8 in a string: {e}"))
    }

    fn tuple(&mut self, items: &[Format], depth: usize) -> Result<Value, String> {
        let mut out = Vec::with_capacity(items.len());
        for f in items {
            out.push(self.value(f, depth + 1)?);
        }
        Ok(Value::Array(out))
    }

    fn fields(&mut self, fields: &[Named<Format>], depth: usize) -> Result<Value, String> {
        let mut m = Map::new();
        for f in fields {
            let v = self.value(&f.value, depth + 1)?;
            m.insert(f.name.clone(), v);
        }
        Ok(Value::Object(m))
    }

    fn container(
        &mut self,
        name: &str,
        c: &ContainerFormat,
        depth: usize,
    ) -> Result<Value, String> {
        Ok(match c {
            ContainerFormat::UnitStruct => Value::Null,
            ContainerFormat::NewTypeStruct(inner) => self.value(inner, depth + 1)?,
            ContainerFormat::TupleStruct(items) => self.tuple(items, depth)?,
            ContainerFormat::Struct(fields) => self.fields(fields, depth)?,
            ContainerFormat::Enum(variants) => {
                let at = self.pos;
                let index = self.varint(32)?;
                let variant = u32::try_from(index)
                    .ok()
                    .and_then(|i| variants.get(&i))
                    .ok_or_else(|| {
                        format!("variant index {index} (at byte {at}) is not a variant of `{name}`")
                    })?;
                let content = match &variant.value {
                    VariantFormat::Variable(_) => {
                        return Err("the schema has an unresolved part".to_owned())
                    }
                    VariantFormat::Unit => return Ok(Value::String(variant.name.clone())),
                    VariantFormat::NewType(inner) => self.value(inner, depth + 1)?,
                    VariantFormat::Tuple(items) => self.tuple(items, depth)?,
                    VariantFormat::Struct(fields) => self.fields(fields, depth)?,
                };
                let mut m = Map::new();
                m.insert(variant.name.clone(), content);
                Value::Object(m)
            }
        })
    }
}

/// A zigzag-encoded signed integer as JSON.
fn signed(zz: u128) -> Value {
    // zigzag: 0, -1, 1, -2, ... <- 0, 1, 2, 3, ...
    let magnitude = zz >> 1;
    let v: i128 = if zz & 1 == 0 {
        magnitude as i128
    } else {
        -(magnitude as i128) - 1
    };
    if let Ok(n) = i64::try_from(v) {
        Value::from(n)
    } else if let Ok(n) = u64::try_from(v) {
        Value::from(n)
    } else {
        Value::String(v.to_string())
    }
}

fn float(x: f64) -> Value {
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}
