//! The payload check (`schema::check_json`) against `serde_json` itself:
//! valid values pass; mutated values it refuses are refused by
//! `serde_json` too (never a payload the site would have taken); and it
//! catches most of the wrong-kind mistakes a person makes by hand.

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::super::{check_json, trace_json};
use super::{nested, numbers, Kinds, Nested, Numbers};

/// Approval-style payloads as users write them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Approval {
    approved: bool,
    reason: Option<String>,
    #[serde(default)]
    approver: String,
    level: u8,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Decision {
    Approve,
    #[serde(alias = "deny")]
    Reject {
        reason: String,
    },
    Escalate(u32, String),
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ToolResults {
    results: HashMap<u32, Vec<String>>,
    decision: Decision,
    scores: [f32; 2],
    initial: char,
}

fn tool_results() -> ToolResults {
    ToolResults {
        results: HashMap::from([(1, vec!["ok".into()]), (7, vec![])]),
        decision: Decision::Escalate(3, "cfo".into()),
        scores: [0.5, 1.0],
        initial: 'x',
    }
}

fn approval() -> Approval {
    Approval {
        approved: true,
        reason: None,
        approver: "ana".into(),
        level: 2,
    }
}

fn doc<T: DeserializeOwned>() -> String {
    trace_json::<T>().expect("traced")
}

fn accepts<T: DeserializeOwned>(v: &Value) -> bool {
    serde_json::from_value::<T>(v.clone()).is_ok()
}

#[test]
fn valid_payloads_pass() {
    let cases: Vec<(String, Value)> = vec![
        (doc::<Approval>(), serde_json::to_value(approval()).unwrap()),
        (doc::<Approval>(), json!({"approved": false, "level": 0})),
        (
            doc::<ToolResults>(),
            serde_json::to_value(tool_results()).unwrap(),
        ),
        (doc::<Decision>(), json!("approve")),
        (doc::<Decision>(), json!({"deny": {"reason": "no"}})),
        (doc::<Decision>(), json!("something_new")),
        (doc::<Numbers>(), serde_json::to_value(numbers(-1)).unwrap()),
        (doc::<Nested>(), serde_json::to_value(nested()).unwrap()),
        (doc::<bool>(), json!(true)),
        (doc::<Option<u64>>(), json!(null)),
        (doc::<(u8, String)>(), json!([1, "a"])),
    ];
    for (doc, v) in cases {
        assert_eq!(check_json(&doc, &v), Ok(()), "{v} against {doc}");
    }
}

#[test]
fn wrong_payloads_are_named() {
    let d = doc::<Approval>();
    let err = check_json(&d, &json!(true)).unwrap_err();
    assert_eq!(err, "payload: expected an object, found a boolean");
    let err = check_json(&d, &json!({"approved": "yes", "level": 1})).unwrap_err();
    assert_eq!(err, "payload.approved: expected a boolean, found a string");
    let err = check_json(&d, &json!({"approved": true, "level": 300})).unwrap_err();
    assert_eq!(err, "payload.level: 300 is out of range (0 to 255)");
    let err = check_json(&d, &json!({"approved": true, "level": 1.5})).unwrap_err();
    assert_eq!(
        err,
        "payload.level: expected an integer, found a floating-point number"
    );
    let t = doc::<ToolResults>();
    let mut v = serde_json::to_value(tool_results()).unwrap();
    v["decision"] = json!(5);
    assert_eq!(
        check_json(&t, &v).unwrap_err(),
        "payload.decision: expected a variant of `Decision` (a string, or an object with one key), found an integer"
    );
    v["decision"] = json!({"escalate": [1]});
    assert!(
        check_json(&t, &v).is_ok(),
        "a shorter tuple variant is left to the site"
    );
    v["decision"] = json!({"escalate": "cfo"});
    assert!(check_json(&t, &v).is_err(), "content that fits no variant");
    let k = doc::<Kinds>();
    assert!(!accepts::<Kinds>(&json!({"New": "seven"})));
    assert!(!accepts::<Kinds>(&json!({"New": 1, "Unit": null})));
    assert!(!accepts::<Approval>(
        &json!({"approved": true, "level": 1.5})
    ));
    assert_eq!(
        check_json(&k, &json!({"New": "seven"})).unwrap_err(),
        "payload.New: expected an integer, found a string"
    );
    assert_eq!(
        check_json(&k, &json!({"New": 1, "Unit": null})).unwrap_err(),
        "payload: expected a variant of `Kinds` (a string, or an object with one key), found an object with 2 keys"
    );
    let mut v = serde_json::to_value(tool_results()).unwrap();
    v["results"] = json!({"one": []});
    assert!(check_json(&t, &v)
        .unwrap_err()
        .contains("the key \"one\" is not a U32"));
    v["results"] = json!({"1": "ok"});
    assert_eq!(
        check_json(&t, &v).unwrap_err(),
        "payload.results[\"1\"]: expected an array, found a string"
    );
}

/// A small deterministic generator (no dependency for a test).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn random_scalar(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(rng.below(300)),
        3 => json!(-(rng.below(300) as i64)),
        4 => json!(1.5),
        5 => json!(u64::MAX),
        6 => json!("x"),
        7 => json!("approve"),
        8 => json!([]),
        _ => json!({}),
    }
}

/// `v` with one random change somewhere: a part replaced by a value of
/// another kind, a key dropped or added, an element added or dropped.
fn mutate(v: &mut Value, rng: &mut Rng) {
    let descend = rng.below(3) != 0;
    match v {
        Value::Object(m) if descend && !m.is_empty() => {
            let k = m.keys().nth(rng.below(m.len())).cloned().expect("a key");
            match rng.below(6) {
                0 => {
                    m.remove(&k);
                }
                1 => {
                    m.insert(format!("extra{}", rng.below(3)), random_scalar(rng));
                }
                _ => mutate(m.get_mut(&k).expect("the key"), rng),
            }
        }
        Value::Array(items) if descend && !items.is_empty() => match rng.below(6) {
            0 => {
                items.pop();
            }
            1 => items.push(random_scalar(rng)),
            _ => {
                let i = rng.below(items.len());
                mutate(&mut items[i], rng);
            }
        },
        other => *other = random_scalar(rng),
    }
}

/// Returns (refused by the check, refused by serde_json) over `n` mutants.
fn fuzz<T: Serialize + DeserializeOwned>(valid: &T, n: usize, seed: u64) -> (usize, usize) {
    let d = doc::<T>();
    let base = serde_json::to_value(valid).unwrap();
    let mut rng = Rng(seed);
    let (mut refused, mut serde_refused) = (0, 0);
    for _ in 0..n {
        let mut v = base.clone();
        for _ in 0..=rng.below(3) {
            mutate(&mut v, &mut rng);
        }
        let ours = check_json(&d, &v);
        let serde_ok = accepts::<T>(&v);
        if let Err(e) = &ours {
            assert!(
                !serde_ok,
                "refused a payload serde_json takes as `{}`: {v}\n{e}",
                std::any::type_name::<T>()
            );
            refused += 1;
        }
        if !serde_ok {
            serde_refused += 1;
        }
    }
    (refused, serde_refused)
}

#[test]
fn never_refuses_what_serde_json_takes_and_catches_most_of_what_it_does_not() {
    let mut totals = (0, 0);
    let mut add = |(a, b): (usize, usize)| {
        totals.0 += a;
        totals.1 += b;
    };
    add(fuzz(&approval(), 3000, 0x9E37_79B9_7F4A_7C15));
    add(fuzz(&tool_results(), 3000, 0xD1B5_4A32_D192_ED03));
    add(fuzz(&nested(), 3000, 0x94D0_49BB_1331_11EB));
    add(fuzz(&numbers(1), 3000, 0xBF58_476D_1CE4_E5B9));
    add(fuzz(
        &Kinds::Struct {
            x: 1,
            y: Some(true),
        },
        2000,
        7,
    ));
    let (refused, serde_refused) = totals;
    assert!(
        serde_refused > 1000,
        "the mutants are mostly invalid: {serde_refused}"
    );
    // What the check cannot see (missing fields, unknown names) it leaves
    // to the site; the rest it catches.
    assert!(
        refused * 10 >= serde_refused * 7,
        "caught {refused} of {serde_refused} payloads serde_json refuses"
    );
}

#[test]
fn a_document_this_build_cannot_read_checks_nothing() {
    assert_eq!(check_json("not json", &json!(1)), Ok(()));
    let mut m = Map::new();
    m.insert("v".into(), json!(99));
    assert_eq!(check_json(&Value::Object(m).to_string(), &json!(1)), Ok(()));
}
