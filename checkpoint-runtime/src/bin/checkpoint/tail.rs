//! `tail ID [--from N]`: prints a run's stream, live, until the run ends.

use std::io::Write;
use std::process::ExitCode;

use checkpoint_runtime::Runtime;
use futures::StreamExt;
use serde_json::json;

use crate::commands::CliError;

/// Writes run `id`'s stream from index `from` to `out`, one item a line
/// (`INDEX<TAB>JSON`, or under `json` `{"index": .., "item": ..}`), as the
/// items come, and returns once the run ended and its last item is
/// written. A closed output (`| head`) ends it quietly.
pub async fn tail(
    rt: &Runtime,
    id: &str,
    from: u64,
    json: bool,
    out: &mut impl Write,
) -> Result<ExitCode, CliError> {
    let mut items = rt.stream(id, from);
    while let Some(item) = items.next().await {
        let (index, value) = item?;
        let line = if json {
            json!({ "index": index, "item": value }).to_string()
        } else {
            crate::format::terminal_safe(&format!("{index}\t{value}")).into_owned()
        };
        let written = writeln!(out, "{line}").and_then(|()| out.flush());
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
            Err(e) => return Err(CliError::new("io", format!("cannot write the output: {e}"))),
        }
    }
    Ok(ExitCode::SUCCESS)
}
