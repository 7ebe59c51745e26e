//! Command-line arguments (clap derive).

use checkpoint_runtime::StatusKind;
use clap::{Parser, Subcommand, ValueEnum};

/// The environment variable naming the store when `--store` is not given.
pub const STORE_ENV: &str = "CHECKPOINT_STORE";

/// Inspect and steer checkpointed workflow runs in a store, without the
/// workflows' code.
#[derive(Debug, Parser)]
#[command(name = "checkpoint", version)]
pub struct Cli {
    /// The store: an SQLite file path (or `sqlite://PATH`), `:memory:`, or
    /// `postgres://...`. Defaults to the CHECKPOINT_STORE environment variable.
    #[arg(long, global = true, value_name = "URL")]
    pub store: Option<String>,

    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,

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
        /// At most this many runs.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
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
    },
    /// Cancel a run.
    Cancel {
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
}

/// A run status, for `runs --status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// Executing, runnable or held by a worker.
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
}

impl From<StatusArg> for StatusKind {
    fn from(s: StatusArg) -> StatusKind {
        match s {
            StatusArg::Running => StatusKind::Running,
            StatusArg::Waiting => StatusKind::Waiting,
            StatusArg::Sleeping => StatusKind::Sleeping,
            StatusArg::Completed => StatusKind::Completed,
            StatusArg::Failed => StatusKind::Failed,
            StatusArg::Cancelled => StatusKind::Cancelled,
        }
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
    fn a_signal_payload_may_start_with_a_hyphen() {
        let cli = Cli::try_parse_from(["checkpoint", "signal", "r-1", "n", "-1"]).unwrap();
        match cli.command {
            Command::Signal { payload, .. } => assert_eq!(payload, "-1"),
            other => panic!("parsed as {other:?}"),
        }
    }
}
