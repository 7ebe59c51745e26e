//! Output formatting: RFC 3339 times, aligned tables, and the JSON shapes of
//! statuses and history events.

use std::time::{SystemTime, UNIX_EPOCH};

use checkpoint_runtime::{Event, Status};
use serde_json::{json, Map, Value};

/// `t` as an RFC 3339 UTC timestamp with milliseconds:
/// `2024-05-01T12:30:05.250Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let nanos: i128 = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    };
    let secs = nanos.div_euclid(1_000_000_000);
    let millis = nanos.rem_euclid(1_000_000_000) / 1_000_000;
    let days = secs.div_euclid(86_400) as i64;
    let of_day = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March first
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A Rust type name without module paths:
/// `alloc::vec::Vec<alloc::string::String>` becomes `Vec<String>`.
pub fn short_type(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut segment_start = 0;
    let mut chars = full.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            out.truncate(segment_start);
        } else {
            out.push(c);
            if !(c.is_alphanumeric() || c == '_') {
                segment_start = out.len();
            }
        }
    }
    out
}

/// Renders rows as columns separated by two spaces, each as wide as its
/// widest cell (the last column is not padded).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Renders `key: value` lines with the values aligned.
pub fn pairs(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("{:<width$}  {v}\n", format!("{k}:")));
    }
    out
}

/// A status in words.
pub fn status_text(s: &Status) -> String {
    match s {
        Status::Waiting { signal } => format!("waiting for signal `{signal}`"),
        Status::Sleeping { until } => format!("sleeping until {}", rfc3339(*until)),
        other => other.to_string(),
    }
}

/// A status as JSON: `{"state": "waiting", "signal": "approval"}`,
/// `{"state": "sleeping", "until": "2024-..Z"}`, `{"state": "failed",
/// "error": "..."}`, `{"state": "completed"}`, ...
pub fn status_json(s: &Status) -> Value {
    match s {
        Status::Sleeping { until } => json!({"state": "sleeping", "until": rfc3339(*until)}),
        other => tagged("state", serde_json::to_value(other).unwrap_or(Value::Null)),
    }
}

/// A history event as JSON: `{"event": "checkpoint_saved", "seq": 1,
/// "label": "step"}`, `{"event": "completed"}`, ...
pub fn event_json(e: &Event) -> Value {
    tagged("event", serde_json::to_value(e).unwrap_or(Value::Null))
}

/// Flattens serde's externally tagged enum representation (`"Unit"` or
/// `{"Variant": {fields}}`) into one object whose `tag` key holds the
/// variant's name in snake case.
fn tagged(tag: &str, v: Value) -> Value {
    let mut out = Map::new();
    match v {
        Value::String(name) => {
            out.insert(tag.to_owned(), Value::String(snake_case(&name)));
        }
        Value::Object(map) if map.len() == 1 => {
            for (name, inner) in map {
                out.insert(tag.to_owned(), Value::String(snake_case(&name)));
                match inner {
                    Value::Object(fields) => out.extend(fields),
                    other => {
                        out.insert("value".to_owned(), other);
                    }
                }
            }
        }
        other => {
            out.insert("value".to_owned(), other);
        }
    }
    Value::Object(out)
}

/// `CheckpointSaved` -> `checkpoint_saved`.
fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A byte count in words: `512 B`, `1.5 KiB`, `3.2 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_210_096_789); // a leap day
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56.789Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_868_800); // 2000-03-01
        assert_eq!(rfc3339(t), "2000-03-01T00:00:00.000Z");
        let t = UNIX_EPOCH - Duration::from_millis(1);
        assert_eq!(rfc3339(t), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn type_names_lose_their_paths() {
        assert_eq!(
            short_type("alloc::vec::Vec<alloc::string::String>"),
            "Vec<String>"
        );
        assert_eq!(
            short_type("(u32, core::option::Option<cli::Approval>)"),
            "(u32, Option<Approval>)"
        );
        assert_eq!(short_type("[u8; 4]"), "[u8; 4]");
    }

    #[test]
    fn tables_align_columns() {
        let t = table(
            &["ID", "STATUS"],
            &[
                vec!["a".into(), "completed".into()],
                vec!["long-id".into(), "x".into()],
            ],
        );
        assert_eq!(t, "ID       STATUS\na        completed\nlong-id  x\n");
    }

    #[test]
    fn statuses_and_events_flatten() {
        assert_eq!(
            status_json(&Status::Completed),
            json!({"state": "completed"})
        );
        assert_eq!(
            status_json(&Status::Waiting {
                signal: "ok".into()
            }),
            json!({"state": "waiting", "signal": "ok"})
        );
        assert_eq!(
            event_json(&Event::CheckpointSaved {
                seq: 2,
                label: None
            }),
            json!({"event": "checkpoint_saved", "seq": 2, "label": null})
        );
    }

    #[test]
    fn byte_counts() {
        assert_eq!(bytes(12), "12 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
    }
}
