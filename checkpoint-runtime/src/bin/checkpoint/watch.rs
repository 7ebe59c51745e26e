//! `watch ID`: follows a run, printing its history and status as they change
//! until it finishes.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use checkpoint_runtime::{Runtime, Status};
use serde_json::{json, Value};

use crate::commands::{entry_json, run_info, run_json, run_status_text, CliError};
use crate::format::rfc3339;

/// The exit code of a watch whose run failed or was cancelled: not 1, which
/// means the tool itself failed (an unknown run, an unreachable store).
pub const ENDED_UNSUCCESSFULLY: u8 = 3;

/// Follows run `id`, looking at the store every `interval`, and writes to
/// `out`: first the history so far, then each new history entry and each
/// change of status (text: `TIME  EVENT` and `TIME  status: ...` lines;
/// `json`: one object per line, an entry as in `history --json` or a status
/// as in `runs --json` with `at`). Returns once the run is finished: 0 if it
/// completed, [`ENDED_UNSUCCESSFULLY`] if not. A closed output (`| head`)
/// ends it quietly.
pub async fn watch(
    rt: &Runtime,
    id: &str,
    interval: Duration,
    json: bool,
    out: &mut impl Write,
) -> Result<ExitCode, CliError> {
    let mut entries_shown = 0;
    // What a status line shows except the lease's expiry, which moves on
    // every renewal and would repeat the line each period.
    let mut last: Option<(Status, Option<String>)> = None;
    loop {
        // The status first: history read after it is at least as new, so
        // the entry that finished the run is printed before the watch ends.
        let run = run_info(rt, id).await?;
        let entries = rt.history_entries(id).await?;
        let mut lines = Vec::new();
        for e in entries.iter().skip(entries_shown) {
            lines.push(if json {
                compact(&entry_json(e))
            } else {
                format!("{}  {}", rfc3339(e.at), e.event)
            });
        }
        entries_shown = entries.len();
        let holder = match run.status {
            Status::Running | Status::Queued | Status::InQueue { .. } => run.worker.clone(),
            _ => None,
        };
        let seen = (run.status.clone(), holder);
        if last.as_ref() != Some(&seen) {
            let now = rfc3339(SystemTime::now());
            lines.push(if json {
                let mut v = run_json(&run);
                v["at"] = json!(now);
                compact(&v)
            } else {
                format!("{now}  status: {}", run_status_text(&run))
            });
            last = Some(seen);
        }
        if !lines.is_empty() {
            let mut text = crate::format::terminal_safe(&lines.join("\n")).into_owned();
            text.push('\n');
            let written = out.write_all(text.as_bytes()).and_then(|()| out.flush());
            match written {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    return Ok(ExitCode::SUCCESS)
                }
                Err(e) => return Err(CliError::new("io", format!("cannot write the output: {e}"))),
            }
        }
        match run.status {
            Status::Completed => return Ok(ExitCode::SUCCESS),
            ref s if s.is_finished() => return Ok(ExitCode::from(ENDED_UNSUCCESSFULLY)),
            _ => tokio::time::sleep(interval).await,
        }
    }
}

fn compact(v: &Value) -> String {
    // A `Value` always renders; the fallback only satisfies the signature.
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_owned())
}
