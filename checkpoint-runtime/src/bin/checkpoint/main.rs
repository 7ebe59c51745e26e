//! `checkpoint`: inspect and steer the runs in a checkpoint store from the
//! command line, without the workflows' code.
//!
//! Every command takes the store as `--store URL` (an SQLite file path or
//! `sqlite://PATH`, `:memory:`, or `postgres://...`), or from the
//! `CHECKPOINT_STORE` environment variable. An SQLite file must exist: the
//! tool never creates a store. `--json` prints machine-readable JSON instead
//! of aligned text, for every command. Times are RFC 3339 in UTC.
//!
//! Commands:
//!
//! - `runs` lists runs, oldest first, with their workflow, status, latest
//!   checkpoint and last change; `--status waiting` (`running`, `sleeping`,
//!   `completed`, `failed`, `cancelled`), `--workflow NAME`, `--prefix ID`
//!   and `--limit N` filter.
//!
//!   ```text
//!   checkpoint --store workflows.db runs --status waiting
//!   ```
//!
//! - `show ID` prints the run's status and its latest checkpoint, each saved
//!   field's value as JSON (decoded with the schema stored beside it).
//!
//!   ```text
//!   checkpoint --store workflows.db show vendor-42
//!   ```
//!
//! - `checkpoints ID` lists the kept checkpoint versions (sequence number,
//!   label, time, size, fields and their types); `checkpoints ID SEQ` or
//!   `checkpoints ID --fields` (the latest) prints one version's fields as JSON.
//!
//!   ```text
//!   checkpoint --store workflows.db checkpoints vendor-42 2 --json
//!   ```
//!
//! - `history ID` prints the run's event log: started, checkpoint saved,
//!   suspended, signal received, resumed, retried, failed, completed, ...
//!
//!   ```text
//!   checkpoint --store workflows.db history vendor-42
//!   ```
//!
//! - `signal ID NAME JSON` stores a signal with a JSON payload (`-` reads it
//!   from standard input); a worker resumes the run if it waits for `NAME`.
//!
//!   ```text
//!   checkpoint --store workflows.db signal vendor-42 finance_approval '{"approved": true}'
//!   ```
//!
//! - `cancel ID` cancels a run that has not finished.
//!
//!   ```text
//!   checkpoint --store workflows.db cancel vendor-42
//!   ```
//!
//! - `fork ID SEQ NEW_ID` creates run `NEW_ID` from checkpoint `SEQ` of `ID`;
//!   a worker with the workflow registered resumes it from there.
//!
//!   ```text
//!   checkpoint --store workflows.db fork vendor-42 2 vendor-42-retry
//!   ```
//!
//! - `gc` reclaims storage that checkpoint retention freed and reports it.
//!
//!   ```text
//!   CHECKPOINT_STORE=workflows.db checkpoint gc
//!   ```
//!
//! Errors (no store, an unopenable store, an unknown run or checkpoint, an
//! invalid JSON payload, a fork onto an existing run) print `error: ...` on
//! standard error and exit with code 1; usage errors exit with code 2.
#![forbid(unsafe_code)]

mod args;
mod commands;
mod format;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use args::Cli;
use commands::{CliError, Output};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError(format!("cannot start the async runtime: {e}")))
        .and_then(|runtime| runtime.block_on(execute(cli)));
    match outcome {
        Ok(out) => print(&out, json),
        Err(CliError(message)) => {
            let _ = writeln!(std::io::stderr(), "error: {message}");
            ExitCode::from(1)
        }
    }
}

async fn execute(cli: Cli) -> Result<Output, CliError> {
    let url = commands::store_url(cli.store)?;
    let rt = commands::open(&url).await?;
    // The runtime (and its store's threads) is dropped before returning.
    commands::run(&rt, cli.command).await
}

/// Prints `out` on standard output; a closed pipe (`| head`) is not an error.
fn print(out: &Output, json: bool) -> ExitCode {
    let text = if json {
        match serde_json::to_string_pretty(&out.json) {
            Ok(s) => s + "\n",
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "error: cannot render JSON: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        out.text.clone()
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: cannot write the output: {e}");
            ExitCode::from(1)
        }
    }
}
