//! Round trips: value -> postcard -> (traced schema) -> JSON, compared with
//! `serde_json::to_value` of the value.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{decode_json, key_of, schema_of, trace_json};

fn decode<T: Serialize + DeserializeOwned>(v: &T) -> Value {
    let doc = trace_json::<T>().expect("traced");
    let bytes = postcard::to_stdvec(v).expect("encoded");
    decode_json(&doc, &bytes).expect("decoded")
}

#[track_caller]
fn round_trip<T: Serialize + DeserializeOwned>(v: &T) {
    let expected = serde_json::to_value(v).expect("serde_json");
    assert_eq!(decode(v), expected, "{}", std::any::type_name::<T>());
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Numbers {
    a: u8,
    b: i8,
    c: u16,
    d: i16,
    e: u32,
    f: i32,
    g: u64,
    h: i64,
    i: u128,
    j: i128,
    k: f32,
    l: f64,
    m: bool,
    n: char,
    o: String,
    p: (),
}

fn numbers(sign: i64) -> Numbers {
    Numbers {
        a: 255,
        b: if sign < 0 { i8::MIN } else { i8::MAX },
        c: u16::MAX,
        d: (i16::MIN as i64 * sign.abs()) as i16,
        e: u32::MAX,
        f: (i32::MIN as i64 * sign) as i32,
        g: u64::MAX,
        h: i64::MIN * sign.abs(),
        i: u64::MAX as u128,
        j: i64::MIN as i128 * sign.abs() as i128,
        k: -1.5,
        l: -0.1 * sign as f64,
        m: true,
        n: 'é',
        o: "héllo \"world\"\n".to_owned(),
        p: (),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Kinds {
    Unit,
    New(u32),
    Tuple(i8, String),
    Struct { x: i64, y: Option<bool> },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UnitS;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct NewT(String);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TupleS(u8, i16);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Nested {
    kinds: Vec<Option<Kinds>>,
    by_name: HashMap<String, Vec<u8>>,
    tuple: (u8, String, f64),
    array: [u16; 3],
    set: BTreeSet<i32>,
    deque: VecDeque<Kinds>,
    boxed: Box<Numbers>,
    unit: UnitS,
    newtype: NewT,
    tuple_struct: TupleS,
    keyed: BTreeMap<NewT, Kinds>,
    nested_maps: HashMap<String, HashMap<String, Option<Vec<Kinds>>>>,
    time: SystemTime,
    took: Duration,
    bytes: Vec<u8>,
}

fn nested() -> Nested {
    Nested {
        kinds: vec![
            Some(Kinds::Unit),
            None,
            Some(Kinds::New(7)),
            Some(Kinds::Tuple(-3, "t".into())),
            Some(Kinds::Struct { x: -9, y: None }),
            Some(Kinds::Struct {
                x: i64::MAX,
                y: Some(false),
            }),
        ],
        by_name: HashMap::from([("a".into(), vec![1, 2]), ("b".into(), vec![])]),
        tuple: (1, "two".into(), 3.5),
        array: [1, 300, 65535],
        set: BTreeSet::from([-5, 0, 5]),
        deque: VecDeque::from([Kinds::New(1), Kinds::Unit]),
        boxed: Box::new(numbers(1)),
        unit: UnitS,
        newtype: NewT("n".into()),
        tuple_struct: TupleS(9, -9),
        keyed: BTreeMap::from([(NewT("k".into()), Kinds::Unit)]),
        nested_maps: HashMap::from([(
            "outer".into(),
            HashMap::from([("x".into(), Some(vec![Kinds::New(2)])), ("y".into(), None)]),
        )]),
        time: SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 5),
        took: Duration::from_millis(1500),
        bytes: vec![0, 127, 128, 255],
    }
}

#[test]
fn primitives_round_trip() {
    round_trip(&0u8);
    round_trip(&-1i8);
    round_trip(&300u16);
    round_trip(&-300i16);
    round_trip(&u32::MAX);
    round_trip(&i32::MIN);
    round_trip(&u64::MAX);
    round_trip(&i64::MIN);
    round_trip(&i64::MAX);
    round_trip(&(u64::MAX as u128));
    round_trip(&(i64::MIN as i128));
    round_trip(&1.25f32);
    round_trip(&f64::MIN_POSITIVE);
    round_trip(&-0.0f64);
    round_trip(&f64::NAN); // null, like serde_json
    round_trip(&true);
    round_trip(&'\u{1F600}');
    round_trip(&String::new());
    round_trip(&"ünïcödé".to_owned());
    round_trip(&());
    round_trip(&numbers(1));
    round_trip(&numbers(-1));
    round_trip(&numbers(0));
}

#[test]
fn wide_integers_beyond_64_bits_are_strings() {
    assert_eq!(decode(&u128::MAX), json!(u128::MAX.to_string()));
    assert_eq!(decode(&i128::MIN), json!(i128::MIN.to_string()));
    assert_eq!(
        decode(&(-(u64::MAX as i128) - 5)),
        json!((-(u64::MAX as i128) - 5).to_string())
    );
    // Within u64: a number, even from an i128.
    assert_eq!(decode(&(u64::MAX as i128)), json!(u64::MAX));
}

#[test]
fn every_variant_kind_round_trips() {
    for k in [
        Kinds::Unit,
        Kinds::New(u32::MAX),
        Kinds::Tuple(i8::MIN, "x".into()),
        Kinds::Struct {
            x: -1,
            y: Some(true),
        },
    ] {
        round_trip(&k);
        round_trip(&Some(k.clone()));
        round_trip(&vec![k.clone(), k]);
    }
}

#[test]
fn nested_collections_round_trip() {
    round_trip(&nested());
    round_trip(&vec![nested(), nested()]);
    round_trip(&(Some(nested()), None::<Nested>, 5u8));
    round_trip(&Vec::<Nested>::new());
    round_trip(&HashMap::<String, Nested>::new());
    round_trip(&[[1u8, 2], [3, 4]]);
}

/// `serde_json` renders integer keys as strings; the decoder keeps them as
/// numbers, in `[key, value]` pairs.
#[test]
fn maps_with_non_string_keys_are_pairs() {
    let m = BTreeMap::from([(1u32, "one".to_owned()), (2, "two".to_owned())]);
    assert_eq!(decode(&m), json!([[1, "one"], [2, "two"]]));
    let t = BTreeMap::from([((1u8, 'a'), vec![true])]);
    assert_eq!(decode(&t), json!([[[1, "a"], [true]]]));
    // Empty: an object.
    assert_eq!(decode(&BTreeMap::<u32, u8>::new()), json!({}));
    // Keys that decode to strings (unit variants, newtypes of String): an object.
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
    enum Color {
        Red,
        Green,
    }
    let c = BTreeMap::from([(Color::Red, 1u8), (Color::Green, 2)]);
    round_trip(&c);
}

// Enums nested inside later variants of other enums: serde-reflection's
// tracer would leave these incomplete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Action {
    Search(String),
    Book { id: u32, seats: Vec<Seat> },
    Cancel,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Seat {
    Window,
    Aisle(u8),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Step {
    Plan,
    Act(Action),
    Observe { result: Result<String, ToolError> },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum ToolError {
    Timeout,
    Http(u16),
    Other {
        message: String,
        retry: Option<Box<ToolError>>,
    },
}

#[test]
fn enums_nested_in_later_variants_are_complete() {
    let steps = vec![
        Step::Plan,
        Step::Act(Action::Search("q".into())),
        Step::Act(Action::Book {
            id: 4,
            seats: vec![Seat::Aisle(3), Seat::Window],
        }),
        Step::Act(Action::Cancel),
        Step::Observe {
            result: Ok("fine".into()),
        },
        Step::Observe {
            result: Err(ToolError::Timeout),
        },
        Step::Observe {
            result: Err(ToolError::Http(503)),
        },
        Step::Observe {
            result: Err(ToolError::Other {
                message: "m".into(),
                retry: Some(Box::new(ToolError::Http(429))),
            }),
        },
    ];
    round_trip(&steps);
    let r: Result<Vec<Step>, ToolError> = Err(ToolError::Other {
        message: "x".into(),
        retry: None,
    });
    round_trip(&r);
    round_trip(&Ok::<_, ToolError>(steps));
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Tree {
    Node(Vec<Tree>),
    Leaf(u32),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum List {
    Cons(u32, Box<List>),
    Nil,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Chain {
    value: u8,
    next: Option<Box<Chain>>,
    kids: Vec<Chain>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Expr {
    Neg(Box<Expr>),
    Add(Box<Expr>, Box<Expr>),
    Let {
        name: String,
        value: Box<Expr>,
        body: Vec<Stmt>,
    },
    Num(i64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Stmt {
    Eval(Expr),
    Print(Option<Box<Stmt>>),
}

fn list(n: u32) -> List {
    (0..n).fold(List::Nil, |l, i| List::Cons(i, Box::new(l)))
}

/// Serde names are not unique: generic containers, same-named types of two
/// modules, and types that share a `Deserialize` visitor.
#[test]
fn containers_sharing_a_serde_name_stay_apart() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Wrap<T>(T);
    mod other {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        pub enum Kinds {
            Only { flag: bool },
        }
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Mixed {
        a: Wrap<u32>,
        b: Wrap<String>,
        c: Wrap<Wrap<Option<u8>>>,
        r1: Result<u8, String>,
        r2: Vec<Result<Kinds, other::Kinds>>,
        k: Kinds,
        time: SystemTime,
        took: Duration,
    }
    round_trip(&Mixed {
        a: Wrap(1),
        b: Wrap("b".into()),
        c: Wrap(Wrap(Some(3))),
        r1: Err("e".into()),
        r2: vec![Ok(Kinds::New(1)), Err(other::Kinds::Only { flag: true })],
        k: Kinds::Tuple(1, "k".into()),
        time: SystemTime::UNIX_EPOCH + Duration::from_secs(9),
        took: Duration::from_nanos(7),
    });
}

#[test]
fn recursive_types_round_trip() {
    // The recursive variant comes first: serde-reflection overflows the stack here.
    round_trip(&Tree::Node(vec![
        Tree::Leaf(1),
        Tree::Node(vec![Tree::Node(vec![]), Tree::Leaf(2)]),
    ]));
    round_trip(&list(20));
    round_trip(&Chain {
        value: 1,
        next: Some(Box::new(Chain {
            value: 2,
            next: None,
            kids: vec![],
        })),
        kids: vec![Chain {
            value: 3,
            next: None,
            kids: vec![],
        }],
    });
    round_trip(&Stmt::Eval(Expr::Let {
        name: "x".into(),
        value: Box::new(Expr::Add(
            Box::new(Expr::Num(-1)),
            Box::new(Expr::Neg(Box::new(Expr::Num(2)))),
        )),
        body: vec![
            Stmt::Print(Some(Box::new(Stmt::Eval(Expr::Num(3))))),
            Stmt::Print(None),
        ],
    }));
}

#[test]
fn untraceable_types_have_no_schema() {
    #[derive(Debug, Serialize, Deserialize)]
    #[serde(untagged)]
    enum Untagged {
        A(u32),
        B(String),
    }
    #[derive(Debug, Serialize, Deserialize)]
    #[serde(tag = "type")]
    enum Internally {
        A { x: u32 },
    }
    #[derive(Debug, Serialize, Deserialize)]
    enum Endless {
        Again(Box<Endless>),
    }
    #[derive(Debug, Serialize, Deserialize)]
    struct Forever(Box<Forever>);
    #[derive(Debug, Serialize, Deserialize)]
    struct HasValue {
        v: serde_json::Value,
    }
    assert!(trace_json::<Untagged>().is_err());
    assert!(trace_json::<Internally>().is_err());
    assert!(trace_json::<Endless>().is_err());
    assert!(trace_json::<Forever>().is_err());
    assert!(trace_json::<HasValue>().is_err());
    assert!(schema_of::<HasValue>().is_none());
    let err = trace_json::<serde_json::Value>().unwrap_err();
    assert!(err.contains("serde_json::Value"), "{err}");
    assert!(err.contains("deserialize_any"), "{err}");
}

#[test]
fn schemas_are_cached_and_shared() {
    let a = schema_of::<Nested>().expect("schema");
    let b = schema_of::<Nested>().expect("schema");
    assert!(std::ptr::eq(a, b));
    let other = std::thread::spawn(|| schema_of::<Nested>().map(|s| s as *const _ as usize))
        .join()
        .unwrap();
    assert_eq!(other, Some(a as *const _ as usize));
    assert_eq!(a.key, key_of(a.json));
    assert_eq!(a.key.len(), 16);
    // Types with the same format share one schema.
    #[derive(Serialize, Deserialize)]
    struct Pair(u32, u32);
    let p = schema_of::<(u32, u32)>().expect("schema");
    let q = schema_of::<[u32; 2]>().expect("schema");
    assert!(std::ptr::eq(p, q));
    assert_ne!(schema_of::<Pair>().expect("schema").key, p.key);
    // The key is stable: a hash of the document, not of the process.
    assert_eq!(key_of(""), "cbf29ce484222325");
    assert_eq!(
        schema_of::<u32>().unwrap().json,
        r#"{"v":1,"root":"U32","types":{}}"#
    );
}

/// Every truncation and every one-byte change of valid bytes gives a value or
/// an error, never a panic.
#[test]
fn corrupt_bytes_never_panic() {
    let docs = [
        (
            trace_json::<Nested>().unwrap(),
            postcard::to_stdvec(&nested()).unwrap(),
        ),
        (
            trace_json::<Vec<Step>>().unwrap(),
            postcard::to_stdvec(&vec![
                Step::Act(Action::Book {
                    id: 1,
                    seats: vec![Seat::Aisle(2)],
                }),
                Step::Observe {
                    result: Err(ToolError::Http(1)),
                },
            ])
            .unwrap(),
        ),
        (
            trace_json::<Tree>().unwrap(),
            postcard::to_stdvec(&Tree::Node(vec![Tree::Leaf(1)])).unwrap(),
        ),
    ];
    for (doc, bytes) in &docs {
        assert!(decode_json(doc, bytes).is_ok());
        for n in 0..bytes.len() {
            assert!(
                decode_json(doc, &bytes[..n]).is_err(),
                "prefix of {n} bytes decoded"
            );
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode_json(doc, &extra).unwrap_err().contains("trailing"));
        for i in 0..bytes.len() {
            for b in [0u8, 1, 2, 0x7F, 0x80, 0xFF] {
                let mut m = bytes.clone();
                m[i] = b;
                let _ = decode_json(doc, &m);
            }
        }
    }
}

#[test]
fn hostile_lengths_and_depths_are_errors() {
    let doc = trace_json::<Vec<()>>().unwrap();
    // A count of 2^63 units: no bytes per element, refused by the value budget.
    let mut bytes = vec![0xFF; 8];
    bytes.push(0x7F);
    let err = decode_json(&doc, &bytes).unwrap_err();
    assert!(err.contains("too many values"), "{err}");
    // A string announcing more bytes than there are.
    let doc = trace_json::<String>().unwrap();
    assert!(decode_json(&doc, &[0xFF, 0xFF, 0x03, b'a']).is_err());
    // Invalid UTF-8, bool, option tag, varint overflow.
    assert!(decode_json(&doc, &[1, 0xFF]).unwrap_err().contains("UTF-8"));
    assert!(decode_json(&trace_json::<bool>().unwrap(), &[2]).is_err());
    assert!(decode_json(&trace_json::<Option<u8>>().unwrap(), &[2, 0]).is_err());
    assert!(decode_json(&trace_json::<u16>().unwrap(), &[0xFF, 0xFF, 0x04]).is_err());
    assert!(decode_json(&trace_json::<u16>().unwrap(), &[0xFF, 0xFF, 0x03]).is_ok());
    assert!(decode_json(&trace_json::<u32>().unwrap(), &[0x80; 6]).is_err());
    // Unknown variant index.
    let err = decode_json(&trace_json::<Seat>().unwrap(), &[7]).unwrap_err();
    assert!(err.contains("variant index 7"), "{err}");
    // Data nested deeper than the decoder goes: an error, not a stack overflow.
    let deep = postcard::to_stdvec(&list(400)).unwrap();
    let err = decode_json(&trace_json::<List>().unwrap(), &deep).unwrap_err();
    assert!(err.contains("nested"), "{err}");
    // A corrupt schema document.
    assert!(decode_json("{", &[]).is_err());
    assert!(decode_json(r#"{"v":99,"root":"U8","types":{}}"#, &[1])
        .unwrap_err()
        .contains("version"));
    assert!(
        decode_json(r#"{"v":1,"root":{"TYPENAME":"Nope"},"types":{}}"#, &[1])
            .unwrap_err()
            .contains("Nope")
    );
}

mod payload_check;
