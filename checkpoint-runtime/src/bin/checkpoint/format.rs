//! Output formatting: tables (laid out by `comfy-table`) and statuses in
//! words; the JSON shapes (RFC 3339 times, statuses, history events) are the
//! library's (`checkpoint_runtime::json`), which the HTTP API shares.

use std::time::SystemTime;

use checkpoint_runtime::Status;
use comfy_table::{ColumnConstraint, ContentArrangement, Row, Table, Width};

// The JSON shapes are the library's, shared with the HTTP API.
pub use checkpoint_runtime::json::{rfc3339, status_json};

pub use checkpoint_runtime::readable_type_name as short_type;

/// A table column: its header, and the most terminal columns a cell takes
/// before it is cut with `…` (unless `--wide`).
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// The header.
    pub header: &'static str,
    /// `None`: never cut, for what is copied or compared whole (ids, times,
    /// sequence numbers).
    pub max: Option<u16>,
}

impl Column {
    /// A column whose cells are always shown whole.
    pub const fn whole(header: &'static str) -> Column {
        Column { header, max: None }
    }

    /// A column whose cells are cut at `max` terminal columns.
    pub const fn capped(header: &'static str, max: u16) -> Column {
        Column {
            header,
            max: Some(max),
        }
    }
}

/// `cell` on one line (a line break would split a row), cut to `max`
/// characters with a final `…` unless `wide`: for a value shown outside a
/// table (`show`'s input and output, a line of `tree`).
pub fn fit(cell: &str, max: Option<usize>, wide: bool) -> String {
    let one_line = one_line(cell);
    match max {
        Some(max) if !wide && one_line.chars().count() > max => {
            let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
            cut.push('…');
            cut
        }
        _ => one_line,
    }
}

/// `cell` as one line of a table: line breaks and tabs written as `\n`,
/// `\r`, `\t` (a break would split the row, a tab would move the columns
/// after it), other control characters as [`terminal_safe`] writes them.
/// Escaped before the layout, so that widths count what is printed.
fn one_line(cell: &str) -> String {
    let cell = terminal_safe(cell);
    if !cell.contains(['\n', '\r', '\t']) {
        return cell.into_owned();
    }
    cell.replace("\r\n", "\\n")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
        .replace('\t', "\\t")
}

/// Spaces between two columns: a run of two or more spaces ends a cell, so
/// a script splits rows on it (statuses and events hold single spaces).
const GAP: u16 = 2;

/// A plain `comfy-table` layout: no borders and no header line, columns
/// `GAP` apart and as wide as their widest cell, each line without trailing
/// spaces. No colour: the crate is built without its `tty` feature.
fn plain(header: Option<&[Column]>, rows: Vec<Row>, caps: &[Option<u16>]) -> String {
    let mut table = Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_truncation_indicator("…")
        // Split only at a character no cell holds (`one_line` escapes every
        // control character): a cut cell then ends at its column's bound,
        // not at the last space before it.
        .set_delimiter('\0');
    if let Some(columns) = header {
        table.set_header(columns.iter().map(|c| c.header));
    }
    table.add_rows(rows);
    let widest = table.column_max_content_widths();
    let last = widest.len().saturating_sub(1);
    for (i, column) in table.column_iter_mut().enumerate() {
        let gap = if i < last { GAP } else { 0 };
        column.set_padding((0, gap));
        // A cap as an `Absolute` width set only on a column that exceeds
        // it: with the layout's arrangement `Disabled`, comfy-table 7.2
        // compares an `UpperBoundary` (padding included) with the widest
        // content (padding excluded), so a cell up to `GAP` wider than its
        // cap would be shown whole.
        if let Some(max) = caps.get(i).copied().flatten() {
            if widest[i] > max {
                column.set_constraint(ColumnConstraint::Absolute(Width::Fixed(max + gap)));
            }
        }
    }
    let mut out = String::new();
    for line in table.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Renders rows under `columns`' headers, each column as wide as its widest
/// cell in terminal columns (a CJK character takes two), two spaces apart;
/// cells are on one line, and those of capped columns cut with `…` unless
/// `wide`.
pub fn table(columns: &[Column], rows: &[Vec<String>], wide: bool) -> String {
    let rows = rows
        .iter()
        .map(|cells| {
            let mut row = Row::from(cells.iter().map(|c| one_line(c)));
            if !wide {
                // One line per row: the cut of a capped cell. Not under
                // `--wide`, which shows every cell whole: comfy-table
                // measures widths in `u16`, so a cell wider than 65,535
                // columns (a large field's JSON) goes on over a further line
                // there instead of being cut.
                row.max_height(1);
            }
            row
        })
        .collect();
    let caps: Vec<Option<u16>> = if wide {
        Vec::new()
    } else {
        columns.iter().map(|c| c.max).collect()
    };
    plain(Some(columns), rows, &caps)
}

/// `text` as a terminal shows it without obeying it: every control
/// character but line breaks and tabs (an escape sequence copied into an
/// error from a signal payload, say) written as its Rust escape (`\u{1b}`),
/// so that stored strings cannot move the cursor, retitle the window or
/// hide lines. Applied to all text output; JSON output escapes them itself.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let shown = |c: char| !c.is_control() || c == '\n' || c == '\t';
    if text.chars().all(shown) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if shown(c) {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Renders `key: value` lines with the values aligned; a value's further
/// lines (an error's message, say) are indented to its column.
pub fn pairs(rows: &[(&str, String)]) -> String {
    let rows = rows
        .iter()
        .map(|(k, v)| Row::from([format!("{k}:"), terminal_safe(v).into_owned()]))
        .collect();
    plain(None, rows, &[])
}

/// A status in words, with absolute times (a listing is read later than it
/// is printed, so "3s left" would be wrong by then).
pub fn status_text(s: &Status) -> String {
    run_status_text(s, None, None, SystemTime::now())
}

/// A run's status in words as of `now`: for a running run the lease holder
/// and its expiry; for a queued run left by a worker whose lease expired,
/// that worker; a deadline or a timer that is already due says so, since the
/// run is then about to move on.
pub fn run_status_text(
    s: &Status,
    worker: Option<&str>,
    lease_expires_at: Option<SystemTime>,
    now: SystemTime,
) -> String {
    match s {
        Status::Queued => match (worker, lease_expires_at) {
            (Some(w), Some(t)) => format!("queued (lease of `{w}` expired {})", rfc3339(t)),
            _ => "queued".to_owned(),
        },
        Status::Running => match (worker, lease_expires_at) {
            (Some(w), Some(t)) => format!("running on `{w}` (lease until {})", rfc3339(t)),
            (Some(w), None) => format!("running on `{w}`"),
            _ => "running".to_owned(),
        },
        Status::Waiting {
            signal,
            deadline: None,
        } => format!("waiting for signal `{signal}`"),
        Status::Waiting {
            signal,
            deadline: Some(d),
        } if *d > now => format!("waiting for signal `{signal}` until {}", rfc3339(*d)),
        Status::Waiting {
            signal,
            deadline: Some(d),
        } => format!(
            "waiting for signal `{signal}`, deadline {} passed",
            rfc3339(*d)
        ),
        Status::Sleeping { until } if *until > now => {
            format!("sleeping until {}", rfc3339(*until))
        }
        Status::Sleeping { until } => format!("sleeping, due since {}", rfc3339(*until)),
        other => other.to_string(),
    }
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

/// A run's tags as one cell: `key=value` pairs, by key, or `-` for none.
pub fn tags_text(tags: &std::collections::BTreeMap<String, String>) -> String {
    if tags.is_empty() {
        return "-".to_owned();
    }
    let pairs: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn tags_read_as_pairs_by_key() {
        let tags = [("b", "2"), ("a", "1")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        assert_eq!(tags_text(&tags), "a=1 b=2");
        assert_eq!(tags_text(&Default::default()), "-");
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
            &[Column::whole("ID"), Column::whole("STATUS")],
            &[
                vec!["a".into(), "completed".into()],
                vec!["long-id".into(), "x".into()],
            ],
            false,
        );
        assert_eq!(t, "ID       STATUS\na        completed\nlong-id  x\n");
    }

    #[test]
    fn wide_cells_are_cut_unless_wide() {
        let columns = [Column::capped("NAME", 8), Column::whole("ID")];
        let rows = [vec!["abcdefghijkl".to_owned(), "id-1".to_owned()]];
        assert_eq!(
            table(&columns, &rows, false),
            "NAME      ID\nabcdefg…  id-1\n"
        );
        assert_eq!(
            table(&columns, &rows, true),
            "NAME          ID\nabcdefghijkl  id-1\n"
        );
        assert_eq!(fit("exactly8", Some(8), false), "exactly8");
        assert_eq!(fit("two\nlines", None, false), "two\\nlines");
        // Characters, not bytes: a cut never splits one.
        assert_eq!(fit("ééééé", Some(3), false), "éé…");
        // A cap at the widest cell cuts nothing; one column wider cuts.
        let columns = [Column::capped("NAME", 8), Column::whole("ID")];
        let rows = [
            vec!["exactly8".to_owned(), "a".to_owned()],
            vec!["ninechars".to_owned(), "b".to_owned()],
        ];
        assert_eq!(
            table(&columns, &rows, false),
            "NAME      ID\nexactly8  a\nninecha…  b\n"
        );
    }

    #[test]
    fn widths_are_terminal_columns() {
        // A CJK character takes two columns: the next column still lines up.
        let t = table(
            &[Column::whole("NAME"), Column::whole("ID")],
            &[
                vec!["日本".into(), "1".into()],
                vec!["abcde".into(), "2".into()],
            ],
            false,
        );
        assert_eq!(t, "NAME   ID\n日本   1\nabcde  2\n");
        // And a cut never splits one.
        let t = table(
            &[Column::capped("NAME", 4)],
            &[vec!["日本語".into()]],
            false,
        );
        assert_eq!(t, "NAME\n日…\n");
    }

    #[test]
    fn cells_stay_on_one_line_and_escaped() {
        let t = table(
            &[Column::whole("A"), Column::whole("B")],
            &[vec!["x\ny\tz".into(), "\u{1b}[2J".into()]],
            false,
        );
        assert_eq!(t, "A        B\nx\\ny\\tz  \\u{1b}[2J\n");
    }

    #[test]
    fn pairs_align_values_and_indent_their_further_lines() {
        let text = pairs(&[
            ("run", "r-1".to_owned()),
            ("status", "failed: two\nlines".to_owned()),
        ]);
        assert_eq!(text, "run:     r-1\nstatus:  failed: two\n         lines\n");
    }

    #[test]
    fn statuses_say_who_holds_a_run_and_what_it_waits_for() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let later = now + Duration::from_secs(30);
        let earlier = now - Duration::from_secs(30);
        let text =
            |s: &Status, w: Option<&str>, t: Option<SystemTime>| run_status_text(s, w, t, now);
        assert_eq!(text(&Status::Queued, None, None), "queued");
        assert_eq!(
            text(&Status::Queued, Some("w-1"), Some(earlier)),
            "queued (lease of `w-1` expired 1970-01-01T00:16:10.000Z)"
        );
        assert_eq!(
            text(&Status::Running, Some("w-1"), Some(later)),
            "running on `w-1` (lease until 1970-01-01T00:17:10.000Z)"
        );
        let waiting = |deadline| Status::Waiting {
            signal: "ok".into(),
            deadline,
        };
        assert_eq!(text(&waiting(None), None, None), "waiting for signal `ok`");
        assert_eq!(
            text(&waiting(Some(later)), None, None),
            "waiting for signal `ok` until 1970-01-01T00:17:10.000Z"
        );
        assert_eq!(
            text(&waiting(Some(earlier)), None, None),
            "waiting for signal `ok`, deadline 1970-01-01T00:16:10.000Z passed"
        );
        assert_eq!(
            text(&Status::Sleeping { until: later }, None, None),
            "sleeping until 1970-01-01T00:17:10.000Z"
        );
        assert_eq!(
            text(&Status::Sleeping { until: earlier }, None, None),
            "sleeping, due since 1970-01-01T00:16:10.000Z"
        );
        // A finished run's last worker is not news.
        assert_eq!(text(&Status::Completed, Some("w-1"), None), "completed");
    }

    #[test]
    fn control_characters_are_shown_not_obeyed() {
        let hostile = "boom\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{9b}31m\tok\nnext";
        let shown = terminal_safe(hostile);
        assert!(
            !shown
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{shown}"
        );
        assert_eq!(
            shown,
            "boom\\u{1b}]0;pwned\\u{7}\\u{1b}[2J\\r\\u{9b}31m\tok\nnext"
        );
        assert!(matches!(
            terminal_safe("plain\ttext\n"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn byte_counts() {
        assert_eq!(bytes(12), "12 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
    }
}
