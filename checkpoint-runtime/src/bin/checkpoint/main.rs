//! `checkpoint`: inspect and steer the runs in a checkpoint store from the
//! command line, without the workflows' code.
//!
//! Every command takes the store as `--store URL` (an SQLite file path or
//! `sqlite://PATH`, `:memory:`, or `postgres://...`), or from the
//! `CHECKPOINT_STORE` environment variable (`--store` wins; `--help` never
//! shows the variable's value, which may hold a password). The store must
//! exist, at this build's schema version: the tool never creates a store or
//! its tables and never upgrades them (workers do), so an empty file,
//! another program's database or an older store is refused ("not a
//! checkpoint store", or the versions), left as it was. `--json` prints
//! machine-readable JSON instead of aligned text, for every command. Times
//! are RFC 3339 in UTC.
//!
//! Tables cut cells of their wide columns (workflow names, statuses, field
//! values and types, labels, history events) with `…` to keep rows readable;
//! `--wide` shows them whole. Ids, times and sequence numbers are never cut.
//!
//! Commands:
//!
//! - `runs` lists runs, oldest first, with their workflow, status, latest
//!   checkpoint, tags and last change; `--status waiting` (`queued`, `running`,
//!   `sleeping`, `completed`, `failed`, `cancelled`), `--workflow NAME`,
//!   `--prefix ID`, `--tag KEY=VALUE` (repeatable: every tag) and
//!   `--limit N` filter. The status says what the run is
//!   doing: "queued" (runnable, no live lease; naming the worker whose lease
//!   expired, if one did), "running on W (lease until T)", "waiting for
//!   signal S" (with "until T" for a deadline, or that it passed), "sleeping
//!   until T" (or "due since T"), "completed", "failed: ...", "cancelled".
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
//! - `watch ID` follows a run: its history so far, then each new history
//!   entry and each change of status, until the run completes, fails or is
//!   cancelled (or the tool is interrupted). `--interval 500ms` (default 1s)
//!   sets how often it looks. It exits with 0 when the run completed and 3
//!   when it failed or was cancelled. With `--json` it prints one JSON
//!   object per line: history entries as in `history --json`, statuses as in
//!   `runs --json` with an `at` time.
//!
//!   ```text
//!   checkpoint --store workflows.db watch vendor-42 --interval 2s
//!   ```
//!
//! - `serve` serves a JSON API and a web page on the store (built with the
//!   `http` feature, off by default: from a clone of the repository,
//!   `cargo install --path checkpoint-runtime --features http`; without it
//!   `serve` says so): the run list with
//!   filters, each run's status, checkpoint timeline with what changed
//!   between versions, history, and forms to signal, cancel, retry and fork.
//!   `--listen HOST:PORT` (default `127.0.0.1:7070`) sets the address; one
//!   that is not loopback is refused unless `--allow-remote` is given. Every
//!   API request needs `Authorization: Bearer TOKEN`: the token is
//!   `CHECKPOINT_TOKEN`, or a random one printed at start with a link that
//!   logs the page in (`#token=`, a fragment the browser keeps to itself). It
//!   runs until interrupted (Ctrl-C, SIGTERM). Under `--json` it prints one
//!   line, `{"listening": .., "url": .., "token": .., "token_source":
//!   "generated" | "env"}` (`token` is `null` when it came from the
//!   environment). See `checkpoint_runtime::http` for the routes.
//!
//!   ```text
//!   checkpoint --store workflows.db serve --listen 127.0.0.1:7070
//!   ```
//!
//! - `completions SHELL` prints a completion script for `bash`, `zsh`,
//!   `fish`, `elvish` or `powershell`; it needs no store.
//!
//!   ```text
//!   checkpoint completions bash > ~/.local/share/bash-completion/completions/checkpoint
//!   ```
//!
//! Errors (no store, an unopenable store, an unknown run or checkpoint, an
//! invalid JSON payload, a fork onto an existing run) print `error: ...` on
//! standard error and exit with code 1; usage errors exit with code 2. Under
//! `--json` an error is instead one line of JSON on standard error, with the
//! same exit codes, and nothing on standard output:
//!
//! ```text
//! {"kind":"unknown_run","message":"unknown run `nope`","details":{"run":"nope"}}
//! ```
//!
//! `kind` is a stable snake_case word: the runtime error's variant
//! (`unknown_run`, `unknown_checkpoint`, `already_exists`, `store`, ...), or
//! `no_store`, `cannot_open_store`, `invalid_payload`, `no_checkpoints`,
//! `io`, `usage`, and for `serve` `invalid_listen`, `remote_listen_refused`,
//! `invalid_token`, `cannot_listen`, `serve_not_built`. `details` holds what
//! the error names (a run, a signal, a sequence number, ...).
#![forbid(unsafe_code)]

mod args;
mod commands;
mod format;
mod schedules;
#[cfg(feature = "http")]
mod serve;
mod tail;
mod watch;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use args::{Cli, Command};
use commands::{CliError, Output};

fn main() -> ExitCode {
    // Read before parsing, so that a usage error is JSON too under --json.
    let json = json_requested(std::env::args_os().skip(1));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e, json),
    };
    if let Command::Completions { shell } = &cli.command {
        return match completions(*shell) {
            Ok(code) => code,
            Err(e) => report(&e, json),
        };
    }
    // `serve` answers many clients at once: every core. The other commands
    // do one thing and exit: one thread.
    let mut runtime = if matches!(cli.command, Command::Serve { .. }) {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let outcome = runtime
        .enable_all()
        .build()
        .map_err(|e| CliError::new("io", format!("cannot start the async runtime: {e}")))
        .and_then(|runtime| runtime.block_on(execute(cli)));
    match outcome {
        Ok(code) => code,
        Err(e) => report(&e, json),
    }
}

/// Whether `--json` is among the arguments (before a `--`).
fn json_requested(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.take_while(|a| a != "--").any(|a| a == "--json")
}

async fn execute(cli: Cli) -> Result<ExitCode, CliError> {
    if let Command::Serve {
        listen,
        allow_remote,
    } = &cli.command
    {
        #[cfg(feature = "http")]
        {
            let url = commands::store_url(cli.store.clone())?;
            return serve::serve(&url, listen, *allow_remote, cli.json).await;
        }
        #[cfg(not(feature = "http"))]
        {
            let _ = (listen, allow_remote);
            return Err(CliError::new(
                "serve_not_built",
                "this `checkpoint` was built without the `http` feature, which `serve` needs: \
                 from a clone of the repository, install it with `cargo install --path \
                 checkpoint-runtime --features http` (add `postgres` for PostgreSQL stores)",
            ));
        }
    }
    let url = commands::store_url(cli.store)?;
    let rt = commands::open(&url).await?;
    // The runtime (and its store's threads) is dropped before returning.
    match cli.command {
        Command::Tail { id, from } => {
            tail::tail(&rt, &id, from, cli.json, &mut std::io::stdout().lock()).await
        }
        Command::Watch { id, interval } => {
            watch::watch(&rt, &id, interval, cli.json, &mut std::io::stdout().lock()).await
        }
        command => {
            let out = commands::run(&rt, command, cli.wide).await?;
            print(&out, cli.json)
        }
    }
}

/// Prints an error on standard error: `error: ...`, or under `--json` one
/// line of JSON (`{"kind": .., "message": .., "details": {..}}`).
fn report(e: &CliError, json: bool) -> ExitCode {
    let line = if json {
        e.json_line()
    } else {
        format!("error: {}", format::terminal_safe(&e.message))
    };
    let _ = writeln!(std::io::stderr(), "{line}");
    ExitCode::from(1)
}

/// A usage error (exit code 2); `--help` and `--version` come here too and
/// print as clap prints them.
fn usage_error(e: &clap::Error, json: bool) -> ExitCode {
    let code = u8::try_from(e.exit_code()).unwrap_or(2);
    if json && e.use_stderr() {
        let rendered = e.render().to_string();
        let message = rendered
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned();
        let details = serde_json::json!({ "usage": rendered.trim_end() });
        let line = commands::json_error_line("usage", &message, &details);
        let _ = writeln!(std::io::stderr(), "{line}");
    } else {
        let _ = e.print();
    }
    ExitCode::from(code)
}

/// Writes the completion script for `shell` on standard output.
fn completions(shell: clap_complete::Shell) -> Result<ExitCode, CliError> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "checkpoint", &mut script);
    write_stdout(&script)
}

/// Prints `out` on standard output.
fn print(out: &Output, json: bool) -> Result<ExitCode, CliError> {
    let text = if json {
        serde_json::to_string_pretty(&out.json)
            .map_err(|e| CliError::new("io", format!("cannot render JSON: {e}")))?
            + "\n"
    } else {
        format::terminal_safe(&out.text).into_owned()
    };
    write_stdout(text.as_bytes())
}

/// Writes `bytes` on standard output; a closed pipe (`| head`) is not an error.
fn write_stdout(bytes: &[u8]) -> Result<ExitCode, CliError> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => Err(CliError::new("io", format!("cannot write the output: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::json_requested;

    #[test]
    fn json_is_requested_before_a_double_dash_only() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert!(json_requested(args(&["runs", "--json"]).into_iter()));
        assert!(!json_requested(args(&["runs"]).into_iter()));
        assert!(!json_requested(
            args(&["signal", "r", "n", "--", "--json"]).into_iter()
        ));
    }
}
