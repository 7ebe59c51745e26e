//! Command-line arguments (clap derive).

use std::time::Duration;

use checkpoint_runtime::StatusKind;
use clap::{Parser, Subcommand, ValueEnum};

/// The environment variable naming the store when `--store` is not given.
pub const STORE_ENV: &str = "CHECKPOINT_STORE";

/// Where `serve` listens unless `--listen` says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

/// Inspect and steer checkpointed workflow runs in a store, without the
/// workflows' code.
#[derive(Debug, Parser)]
#[command(name = "checkpoint", version)]
pub struct Cli {
    /// The store: an SQLite file path (or `sqlite://PATH`), `:memory:`, or
    /// `postgres://...`.
    // The value is never shown in `--help`: a PostgreSQL URL may hold a
    // password.
    #[arg(long, global = true, value_name = "URL", env = STORE_ENV, hide_env_values = true)]
    pub store: Option<String>,

    /// Print machine-readable JSON instead of text; errors too, as one JSON
    /// object on standard error.
    #[arg(long, global = true)]
    pub json: bool,

    /// Show wide table cells whole instead of cutting them with `…`.
    #[arg(long, global = true)]
    pub wide: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List runs, oldest first.
    Runs {
        /// Only runs in this status.
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        /// Only runs of this workflow (the name it is stored under).
        #[arg(long, value_name = "NAME")]
        workflow: Option<String>,
        /// Only runs whose id starts with this prefix.
        #[arg(long)]
        prefix: Option<String>,
        /// Only the children of this run (the runs it spawned).
        #[arg(long, value_name = "ID")]
        parent: Option<String>,
        /// Only runs tagged KEY=VALUE (repeat it: runs with every tag).
        #[arg(long = "tag", value_name = "KEY=VALUE", value_parser = parse_tag)]
        tags: Vec<(String, String)>,
        /// At most this many runs.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// Show a run and the runs it spawned, theirs, ..., as a tree.
    Tree {
        /// The run id.
        id: String,
    },
    /// Show a run's status and its latest checkpoint's fields as JSON.
    Show {
        /// The run id.
        id: String,
    },
    /// List a run's checkpoint versions, or show one version's fields as JSON.
    Checkpoints {
        /// The run id.
        id: String,
        /// Show the fields of this version (implies --fields).
        seq: Option<u64>,
        /// Show the fields of a version (the latest unless SEQ is given).
        #[arg(long)]
        fields: bool,
    },
    /// Show a run's history (its event log), oldest first.
    History {
        /// The run id.
        id: String,
    },
    /// Send a signal with a JSON payload to a run.
    Signal {
        /// The run id.
        id: String,
        /// The signal name (what the workflow waits for).
        name: String,
        /// The payload, as JSON (`-` reads it from standard input).
        #[arg(value_name = "JSON", allow_hyphen_values = true)]
        payload: String,
        /// Store it even though no wait site of the run's workflow takes
        /// that name (for one that code not deployed yet adds).
        #[arg(long)]
        force: bool,
    },
    /// Cancel a run: at once (the default, or --now), or by asking it to
    /// (--reason, --grace): the workflow sees the request
    /// (`ctx.cancel_requested()`), its sleeps and timed waits return at
    /// once so it can clean up, and it ends cancelled; past the grace
    /// period it is cancelled at once.
    Cancel {
        /// The run id.
        id: String,
        /// Ask the run to cancel, with this reason (the workflow reads it).
        #[arg(long, value_name = "TEXT", conflicts_with = "now")]
        reason: Option<String>,
        /// Ask the run to cancel, giving it this long to clean up before it
        /// is cancelled at once (`500ms`, `30s`, `5m`; 30s by default with
        /// --reason).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "now")]
        grace: Option<Duration>,
        /// With a request: leave the run's children running (by default
        /// they are asked to cancel too).
        #[arg(long, conflicts_with = "now")]
        abandon_children: bool,
        /// Cancel at once, where the run stands (the default without
        /// --reason and --grace): its children are cancelled too.
        #[arg(long)]
        now: bool,
    },
    /// Retry a failed or parked run from its latest checkpoint (after a fix).
    Retry {
        /// The run id.
        id: String,
    },
    /// Create a new run from a checkpoint of another.
    Fork {
        /// The source run id.
        id: String,
        /// The source checkpoint's sequence number.
        seq: u64,
        /// The new run's id.
        new_id: String,
    },
    /// Reclaim storage freed by checkpoint retention.
    Gc,
    /// List the stored schedules, or pause, unpause or delete one.
    ///
    /// Triggering a tick or backfilling a range needs the function that
    /// makes a tick's input, which only the workflows' program has
    /// (`Runtime::trigger_schedule`, `Runtime::backfill_schedule`).
    Schedules {
        /// What to do (list them when absent).
        #[command(subcommand)]
        action: Option<ScheduleAction>,
    },
    /// Follow a run: print its status and history as they change, until it
    /// completes, fails or is cancelled (or the tool is interrupted).
    ///
    /// Exits with 0 when the run completed and 3 when it failed or was
    /// cancelled. With --json, prints one JSON object per line.
    Watch {
        /// The run id.
        id: String,
        /// How often to look at the store: `500ms`, `2s`, `1m`.
        #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_interval)]
        interval: Duration,
    },
    /// Print a run's stream (what its workflow emitted with `ctx.emit`),
    /// from index --from on, live as it comes, until the run ends.
    ///
    /// One item a line: `INDEX<TAB>JSON`, or with --json
    /// `{"index": .., "item": ..}`. After a crash a reader that starts again
    /// with --from its next index sees each index once.
    Tail {
        /// The run id.
        id: String,
        /// The first index to print.
        #[arg(long, value_name = "N", default_value_t = 0)]
        from: u64,
    },
    /// Serve a JSON API and a web page on the store, behind a bearer token.
    ///
    /// The token is CHECKPOINT_TOKEN, or a random one printed at start.
    /// Listens on loopback unless --allow-remote is given; stop it with
    /// Ctrl-C. Needs a build with the `http` feature.
    Serve {
        /// The address to listen on, HOST:PORT (port 0: any free port).
        #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
        listen: String,
        /// Allow an address other than loopback (127.0.0.0/8, ::1): anyone
        /// who can reach it may try the token, which plain HTTP carries in
        /// clear (put TLS in front).
        #[arg(long)]
        allow_remote: bool,
    },
    /// Print a completion script for a shell on standard output.
    ///
    /// For example `checkpoint completions bash > /etc/bash_completion.d/checkpoint`;
    /// no store is needed.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The shortest `watch --interval`: polling faster only loads the store.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// Parses `250ms`, `2s`, `1.5s`, `1m`, or a bare number of seconds, at
/// least 10ms.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "`{}` is below the shortest interval, 10ms",
            s.trim()
        ));
    }
    Ok(d)
}

/// Parses `250ms`, `2s`, `1.5s`, `1m`, or a bare number of seconds (0 too).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (examples: 500ms, 2s, 1m)"))?;
    let scale = match unit.trim() {
        "ms" => 0.001,
        "s" => 1.0,
        "m" | "min" => 60.0,
        other => return Err(format!("unknown unit `{other}` in `{s}` (use ms, s or m)")),
    };
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("`{s}` is out of range"))
}

/// A run status, for `runs --status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// Runnable, no worker holds it.
    Queued,
    /// Executing: a worker holds its lease.
    Running,
    /// Waiting for a signal.
    Waiting,
    /// Sleeping on a durable timer.
    Sleeping,
    /// Finished with its output.
    Completed,
    /// Failed.
    Failed,
    /// Cancelled.
    Cancelled,
    /// Parked: no registered code can resume its latest checkpoint.
    Incompatible,
    /// A child waiting for a free slot among its parent's running children.
    Held,
    /// Waiting for the children it joins to end.
    Joining,
}

impl From<StatusArg> for StatusKind {
    fn from(s: StatusArg) -> StatusKind {
        match s {
            StatusArg::Queued => StatusKind::Queued,
            StatusArg::Running => StatusKind::Running,
            StatusArg::Waiting => StatusKind::Waiting,
            StatusArg::Sleeping => StatusKind::Sleeping,
            StatusArg::Completed => StatusKind::Completed,
            StatusArg::Failed => StatusKind::Failed,
            StatusArg::Cancelled => StatusKind::Cancelled,
            StatusArg::Incompatible => StatusKind::Incompatible,
            StatusArg::Held => StatusKind::Held,
            StatusArg::Joining => StatusKind::Joining,
        }
    }
}

/// A `--tag KEY=VALUE` argument (split at the first `=`).
fn parse_tag(arg: &str) -> Result<(String, String), String> {
    match arg.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{arg}`: give KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn checkpoints_takes_an_optional_seq() {
        let cli = Cli::try_parse_from(["checkpoint", "checkpoints", "r-1", "2", "--json"]).unwrap();
        assert!(cli.json);
        match cli.command {
            Command::Checkpoints { id, seq, fields } => {
                assert_eq!((id.as_str(), seq, fields), ("r-1", Some(2), false));
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(Cli::try_parse_from(["checkpoint", "checkpoints", "r-1", "two"]).is_err());
    }

    #[test]
    fn intervals_parse_with_units() {
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_interval("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_interval("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_interval("3"), Ok(Duration::from_secs(3)));
        assert!(parse_interval("1ms").is_err(), "below the shortest");
        assert!(parse_interval("soon").is_err());
        assert!(parse_interval("2h").is_err());
    }

    #[test]
    fn serve_listens_on_loopback_by_default() {
        let cli = Cli::try_parse_from(["checkpoint", "serve"]).unwrap();
        match cli.command {
            Command::Serve {
                listen,
                allow_remote,
            } => assert_eq!((listen.as_str(), allow_remote), (DEFAULT_LISTEN, false)),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn a_signal_payload_may_start_with_a_hyphen() {
        let cli = Cli::try_parse_from(["checkpoint", "signal", "r-1", "n", "-1"]).unwrap();
        match cli.command {
            Command::Signal { payload, .. } => assert_eq!(payload, "-1"),
            other => panic!("parsed as {other:?}"),
        }
    }
}

/// What `schedules` does to one schedule.
#[derive(Debug, Subcommand)]
pub enum ScheduleAction {
    /// List every schedule (the default).
    List,
    /// No tick fires until it is unpaused (missed ticks follow its catch-up
    /// policy then).
    Pause {
        /// The schedule's name.
        name: String,
    },
    /// Ticks fire again.
    Unpause {
        /// The schedule's name.
        name: String,
    },
    /// Remove the schedule (its runs stay).
    Delete {
        /// The schedule's name.
        name: String,
    },
}
