//! Output formatting: aligned tables and statuses in words; the JSON shapes
//! (RFC 3339 times, statuses, history events) are the library's
//! (`checkpoint_runtime::json`), which the HTTP API shares.

use std::time::SystemTime;

use checkpoint_runtime::Status;

// The JSON shapes are the library's, shared with the HTTP API.
pub use checkpoint_runtime::json::{rfc3339, status_json};

pub use checkpoint_runtime::readable_type_name as short_type;

/// A table column: its header, and the most characters a cell shows before
/// it is cut with `…` (unless `--wide`).
#[derive(Debug, Clone, Copy)]
pub struct Column {
    /// The header.
    pub header: &'static str,
    /// `None`: never cut, for what is copied or compared whole (ids, times,
    /// sequence numbers).
    pub max: Option<usize>,
}

impl Column {
    /// A column whose cells are always shown whole.
    pub const fn whole(header: &'static str) -> Column {
        Column { header, max: None }
    }

    /// A column whose cells are cut at `max` characters.
    pub const fn capped(header: &'static str, max: usize) -> Column {
        Column {
            header,
            max: Some(max),
        }
    }
}

/// `cell` on one line (a line break would split a row), cut to `max`
/// characters with a final `…` unless `wide`.
pub fn fit(cell: &str, max: Option<usize>, wide: bool) -> String {
    let one_line = if cell.contains(['\n', '\r']) {
        cell.replace("\r\n", "\\n")
            .replace('\n', "\\n")
            .replace('\r', "\\r")
    } else {
        cell.to_owned()
    };
    match max {
        Some(max) if !wide && one_line.chars().count() > max => {
            let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
            cut.push('…');
            cut
        }
        _ => one_line,
    }
}

/// Renders rows as columns separated by two spaces, each as wide as its
/// widest cell (the last column is not padded); cells of capped columns are
/// cut unless `wide`.
pub fn table(columns: &[Column], rows: &[Vec<String>], wide: bool) -> String {
    let headers: Vec<&str> = columns.iter().map(|c| c.header).collect();
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .enumerate()
                .map(|(i, cell)| fit(cell, columns.get(i).and_then(|c| c.max), wide))
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(&rows) {
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

/// Renders `key: value` lines with the values aligned.
pub fn pairs(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in rows {
        out.push_str(&format!("{:<width$}  {v}\n", format!("{k}:")));
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

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
