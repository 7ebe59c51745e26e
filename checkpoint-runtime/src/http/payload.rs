//! A hint for the signal form: the payload type a wait site decodes, read
//! from the schema document it stored with the wait (see [`crate::schema`]),
//! in Rust syntax, and an example value of that shape to start from.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};
use serde_reflection::{ContainerFormat, Format, Named, VariantFormat};

/// A stored schema document, as far as the hint reads it.
#[derive(Deserialize)]
struct Doc {
    root: Format,
    #[serde(default)]
    types: BTreeMap<String, ContainerFormat>,
}

/// How deep an example goes into nested types (a recursive type ends in
/// `null` there).
const EXAMPLE_DEPTH: usize = 8;

/// How many values an example holds at most (a form to fill in, not data):
/// what is left ends in `null`.
const EXAMPLE_VALUES: usize = 10_000;

/// Where an example's walk is: the named types being expanded, and how many
/// values it may still produce.
struct Walk {
    names: Vec<String>,
    values_left: usize,
}

/// The hint for schema document `doc`: `{"type": "Approval", "definitions":
/// ["struct Approval { approved: bool, by: String }"], "example":
/// {"approved": false, "by": ""}}`. `None` when the document does not read
/// (a newer format).
pub(crate) fn hint(doc: &str) -> Option<Value> {
    let doc: Doc = serde_json::from_str(doc).ok()?;
    let definitions: Vec<String> = doc
        .types
        .iter()
        .map(|(name, c)| definition(name, c))
        .collect();
    let mut walk = Walk {
        names: Vec::new(),
        values_left: EXAMPLE_VALUES,
    };
    let example = example(&doc.root, &doc.types, &mut walk);
    Some(json!({
        "type": rust(&doc.root),
        "definitions": definitions,
        "example": example,
    }))
}

/// A format in Rust syntax: `Vec<Approval>`, `Option<u32>`, `(u8, String)`.
fn rust(f: &Format) -> String {
    match f {
        Format::Variable(_) => "_".to_owned(),
        Format::TypeName(name) => name.clone(),
        Format::Unit => "()".to_owned(),
        Format::Bool => "bool".to_owned(),
        Format::I8 => "i8".to_owned(),
        Format::I16 => "i16".to_owned(),
        Format::I32 => "i32".to_owned(),
        Format::I64 => "i64".to_owned(),
        Format::I128 => "i128".to_owned(),
        Format::U8 => "u8".to_owned(),
        Format::U16 => "u16".to_owned(),
        Format::U32 => "u32".to_owned(),
        Format::U64 => "u64".to_owned(),
        Format::U128 => "u128".to_owned(),
        Format::F32 => "f32".to_owned(),
        Format::F64 => "f64".to_owned(),
        Format::Char => "char".to_owned(),
        Format::Str => "String".to_owned(),
        Format::Bytes => "Vec<u8>".to_owned(),
        Format::Option(inner) => format!("Option<{}>", rust(inner)),
        Format::Seq(inner) => format!("Vec<{}>", rust(inner)),
        Format::Map { key, value } => format!("Map<{}, {}>", rust(key), rust(value)),
        Format::Tuple(items) => tuple(items),
        Format::TupleArray { content, size } => format!("[{}; {size}]", rust(content)),
    }
}

fn tuple(items: &[Format]) -> String {
    let inner: Vec<String> = items.iter().map(rust).collect();
    if inner.len() == 1 {
        format!("({},)", inner[0])
    } else {
        format!("({})", inner.join(", "))
    }
}

fn fields(fields: &[Named<Format>]) -> String {
    let inner: Vec<String> = fields
        .iter()
        .map(|f| format!("{}: {}", f.name, rust(&f.value)))
        .collect();
    format!("{{ {} }}", inner.join(", "))
}

/// A container's definition: `struct Approval { approved: bool }`,
/// `enum Decision { Approved, Rejected(String) }`.
fn definition(name: &str, c: &ContainerFormat) -> String {
    match c {
        ContainerFormat::UnitStruct => format!("struct {name};"),
        ContainerFormat::NewTypeStruct(inner) => format!("struct {name}({});", rust(inner)),
        ContainerFormat::TupleStruct(items) => {
            let inner: Vec<String> = items.iter().map(rust).collect();
            format!("struct {name}({});", inner.join(", "))
        }
        ContainerFormat::Struct(named) => format!("struct {name} {}", fields(named)),
        ContainerFormat::Enum(variants) => {
            let inner: Vec<String> = variants
                .values()
                .map(|v| match &v.value {
                    VariantFormat::Variable(_) | VariantFormat::Unit => v.name.clone(),
                    VariantFormat::NewType(inner) => format!("{}({})", v.name, rust(inner)),
                    VariantFormat::Tuple(items) => {
                        let inner: Vec<String> = items.iter().map(rust).collect();
                        format!("{}({})", v.name, inner.join(", "))
                    }
                    VariantFormat::Struct(named) => format!("{} {}", v.name, fields(named)),
                })
                .collect();
            format!("enum {name} {{ {} }}", inner.join(", "))
        }
    }
}

/// An example value of format `f` as JSON (what `serde_json` reads back
/// into the type): `false`, `0`, `""`, `null` for an option, empty
/// sequences and maps, an enum's first variant. `walk`: the named types
/// being expanded (a recursive type ends in `null`).
fn example(f: &Format, types: &BTreeMap<String, ContainerFormat>, walk: &mut Walk) -> Value {
    if walk.values_left == 0 {
        return Value::Null;
    }
    walk.values_left -= 1;
    match f {
        Format::Variable(_) | Format::Unit | Format::Option(_) => Value::Null,
        Format::Bool => json!(false),
        Format::I8
        | Format::I16
        | Format::I32
        | Format::I64
        | Format::I128
        | Format::U8
        | Format::U16
        | Format::U32
        | Format::U64
        | Format::U128 => json!(0),
        Format::F32 | Format::F64 => json!(0.0),
        Format::Char => json!("a"),
        Format::Str => json!(""),
        Format::Bytes | Format::Seq(_) => json!([]),
        Format::Map { .. } => json!({}),
        Format::Tuple(items) => items.iter().map(|i| example(i, types, walk)).collect(),
        // The size comes from a stored document: a tampered one asked for
        // 128 GB here once. Past the budget the example is cut short.
        Format::TupleArray { content, size } if *size <= walk.values_left => {
            (0..*size).map(|_| example(content, types, walk)).collect()
        }
        Format::TupleArray { .. } => {
            walk.values_left = 0;
            Value::Null
        }
        Format::TypeName(name) => {
            let Some(c) = types.get(name) else {
                return Value::Null;
            };
            if walk.names.len() >= EXAMPLE_DEPTH || walk.names.contains(name) {
                return Value::Null;
            }
            walk.names.push(name.clone());
            let v = container_example(c, types, walk);
            walk.names.pop();
            v
        }
    }
}

fn container_example(
    c: &ContainerFormat,
    types: &BTreeMap<String, ContainerFormat>,
    walk: &mut Walk,
) -> Value {
    let object = |named: &[Named<Format>], walk: &mut Walk| {
        let mut m = Map::new();
        for f in named {
            m.insert(f.name.clone(), example(&f.value, types, walk));
        }
        Value::Object(m)
    };
    match c {
        ContainerFormat::UnitStruct => Value::Null,
        ContainerFormat::NewTypeStruct(inner) => example(inner, types, walk),
        ContainerFormat::TupleStruct(items) => {
            items.iter().map(|i| example(i, types, walk)).collect()
        }
        ContainerFormat::Struct(named) => object(named, walk),
        ContainerFormat::Enum(variants) => {
            let Some(first) = variants.values().next() else {
                return Value::Null;
            };
            let inner = match &first.value {
                VariantFormat::Variable(_) | VariantFormat::Unit => {
                    return json!(first.name);
                }
                VariantFormat::NewType(inner) => example(inner, types, walk),
                VariantFormat::Tuple(items) => {
                    items.iter().map(|i| example(i, types, walk)).collect()
                }
                VariantFormat::Struct(named) => object(named, walk),
            };
            json!({ first.name.clone(): inner })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Approval {
        approved: bool,
        by: String,
        note: Option<String>,
        level: Level,
        tags: Vec<u8>,
    }

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    enum Level {
        Low,
        High(u32),
    }

    #[derive(Serialize, Deserialize)]
    struct Tree {
        children: Vec<Tree>,
        next: Option<Box<Tree>>,
    }

    #[test]
    fn a_struct_reads_as_rust_and_its_example_decodes() {
        let doc = crate::schema::trace_json::<Approval>().unwrap();
        let hint = hint(&doc).unwrap();
        assert_eq!(hint["type"], "Approval");
        let defs: Vec<&str> = hint["definitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap())
            .collect();
        assert!(
            defs.contains(
                &"struct Approval { approved: bool, by: String, note: Option<String>, level: Level, tags: Vec<u8> }"
            ),
            "{defs:?}"
        );
        assert!(defs.contains(&"enum Level { Low, High(u32) }"), "{defs:?}");
        // The example is a value of the type.
        let back: Approval = serde_json::from_value(hint["example"].clone()).unwrap();
        assert_eq!(back.level, Level::Low);
    }

    #[test]
    fn a_recursive_type_ends_and_primitives_have_examples() {
        let doc = crate::schema::trace_json::<Tree>().unwrap();
        let tree = hint(&doc).unwrap();
        assert_eq!(tree["example"], json!({"children": [], "next": null}));
        let doc = crate::schema::trace_json::<(u8, String, bool)>().unwrap();
        let tuple = hint(&doc).unwrap();
        assert_eq!(tuple["type"], "(u8, String, bool)");
        assert_eq!(tuple["example"], json!([0, "", false]));
        assert!(super::hint("{\"v\": 99}").is_none());
    }

    #[test]
    fn a_tampered_array_size_gives_a_short_example_not_an_allocation() {
        // `[u64; 2^37]`, as a tampered stored document may say: 128 GB of
        // example values if taken at its word.
        let doc = r#"{"root": {"TUPLEARRAY": {"CONTENT": "U64", "SIZE": 137438953472}}}"#;
        let huge = hint(doc).unwrap();
        assert_eq!(huge["type"], "[u64; 137438953472]");
        assert_eq!(huge["example"], Value::Null);
        // Nested arrays within the budget are shown whole; past it, cut.
        let doc = r#"{"root": {"TUPLEARRAY": {"CONTENT": {"TUPLEARRAY": {"CONTENT": "U8", "SIZE": 1000}}, "SIZE": 1000}}}"#;
        let example = &hint(doc).unwrap()["example"];
        let values: usize = example
            .as_array()
            .unwrap()
            .iter()
            .map(|inner| inner.as_array().map_or(1, Vec::len))
            .sum();
        assert!(values <= EXAMPLE_VALUES, "{values} values");
        let doc = r#"{"root": {"TUPLEARRAY": {"CONTENT": "U8", "SIZE": 3}}}"#;
        assert_eq!(hint(doc).unwrap()["example"], json!([0, 0, 0]));
    }
}
