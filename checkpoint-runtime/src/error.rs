//! The runtime's error type.

use serde::{Deserialize, Serialize};

/// The backend error behind an [`Error::Store`], shared (so that `Error`
/// stays `Clone`). It derefs to the error itself, which is what
/// [`source`](std::error::Error::source) returns: downcast it to the
/// backend's type.
///
/// ```
/// use std::error::Error as _;
///
/// let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "gone");
/// let err = checkpoint_runtime::Error::store_caused_by("connection lost", io);
/// let source = err.source().unwrap();
/// assert!(source.downcast_ref::<std::io::Error>().is_some());
/// ```
#[derive(Clone)]
pub struct StoreSource(std::sync::Arc<dyn std::error::Error + Send + Sync>);

impl std::ops::Deref for StoreSource {
    type Target = dyn std::error::Error + Send + Sync;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Debug for StoreSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

/// The same source (a clone of one error) is equal; two distinct errors are
/// not (`dyn Error` cannot be compared).
impl PartialEq for StoreSource {
    fn eq(&self, other: &StoreSource) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for StoreSource {}

/// Everything that can go wrong in the runtime.
///
/// Messages name the workflow, the run, the checkpoint site and the field
/// involved wherever they are known. The type is `Clone`, comparable and
/// serializable so that a run failed by the runtime (an incompatible checkpoint,
/// undecodable bytes, ...) can be stored with the run and handed back, as the
/// same error, by [`WorkflowHandle::result`](crate::WorkflowHandle::result).
///
/// The three variants with five fields keep their `detail` as a `Box<str>`,
/// so that `Error` stays under 128 bytes and `Result<_, Error>` does not trip
/// clippy's `result_large_err` in user code.
///
/// ```
/// use checkpoint_runtime::Error;
///
/// let err = Error::UnknownRun { run: "vendor-42".into() };
/// assert_eq!(err.to_string(), "unknown run `vendor-42`");
/// assert!(std::mem::size_of::<Error>() < 128);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No run with this id exists in the store.
    #[error("unknown run `{run}`")]
    UnknownRun {
        /// The run id that was asked for.
        run: String,
    },

    /// [`Runtime::retry`](crate::Runtime::retry) of a run that is neither
    /// failed nor parked.
    #[error("run `{run}` is {status}: only a failed or parked run can be retried")]
    NotRetryable {
        /// The run id.
        run: String,
        /// Its status, as text.
        status: String,
    },

    /// [`Runtime::request_cancel`](crate::Runtime::request_cancel) of a run
    /// that has ended: there is nothing left to cancel.
    #[error("run `{run}` is {status}: a finished run cannot be asked to cancel")]
    CancelRefused {
        /// The run id.
        run: String,
        /// Its status, as text.
        status: String,
    },

    /// A signal sent to a run that has ended: it would never be read.
    #[error("run `{run}` is {status}: it takes no more signals (`{signal}` was not stored)")]
    RunEnded {
        /// The run id.
        run: String,
        /// Its status, as text.
        status: String,
        /// The signal's name.
        signal: String,
    },

    /// A signal whose name no wait site of the run's workflow takes, as the
    /// workers that registered the workflow recorded them: it would never
    /// be read (a misspelt name, usually). Nothing was stored. A wait site
    /// that code not deployed yet adds is reached with
    /// [`Runtime::force_signal`](crate::Runtime::force_signal).
    #[error(
        "no wait site of workflow `{workflow}` takes signal `{signal}` (run `{run}`; its wait \
         sites take {}): it was not stored. If code not deployed yet waits for it, send it \
         anyway (`Runtime::force_signal`, `checkpoint signal --force`, `?force=true`)",
        quoted_list(known)
    )]
    UnknownSignal {
        /// The run id.
        run: String,
        /// The run's workflow.
        workflow: String,
        /// The signal's name.
        signal: String,
        /// The names its wait sites take, in order.
        known: Vec<String>,
    },

    /// A schedule's definition was rejected (its name, cron expression or
    /// time zone), or its stored definition cannot be read.
    #[error("schedule `{name}`: {detail}")]
    InvalidSchedule {
        /// The schedule's name.
        name: String,
        /// What is wrong.
        detail: String,
    },

    /// No schedule of that name is stored (or, for
    /// [`Runtime::trigger_schedule`](crate::Runtime::trigger_schedule) and
    /// [`Runtime::backfill_schedule`](crate::Runtime::backfill_schedule),
    /// none was registered by this runtime, which alone has the function that
    /// makes a tick's input).
    #[error("unknown schedule `{name}`{}", if *.stored { " in this runtime: it is stored, but only a runtime that called `Runtime::schedule` for it can start its runs (it has the function that makes a tick's input)" } else { ": no schedule of that name is stored" })]
    UnknownSchedule {
        /// The schedule's name.
        name: String,
        /// The store has it (this runtime did not register it).
        stored: bool,
    },

    /// A run id (or signal name) was rejected.
    #[error("invalid id `{id}`: {reason}")]
    InvalidId {
        /// The offending id (possibly truncated).
        id: String,
        /// Why it was rejected.
        reason: String,
    },

    /// The run exists but belongs to a different workflow.
    #[error("run `{run}` belongs to workflow `{found}`, not `{expected}`")]
    WorkflowMismatch {
        /// The run id.
        run: String,
        /// The workflow the caller used.
        expected: String,
        /// The workflow the run was started with.
        found: String,
    },

    /// A run with this id already exists (for example as the target of a fork).
    #[error("run `{run}` already exists")]
    AlreadyExists {
        /// The run id.
        run: String,
    },

    /// The workflow is not registered on this runtime.
    #[error(
        "workflow `{workflow}` is not registered on this runtime (call `rt.register({workflow})`)"
    )]
    NotRegistered {
        /// The workflow name.
        workflow: String,
    },

    /// No checkpoint with this sequence number is kept for the run.
    #[error("run `{run}` has no checkpoint #{seq} (it never existed or was pruned by the retention policy)")]
    UnknownCheckpoint {
        /// The run id.
        run: String,
        /// The sequence number asked for.
        seq: u64,
    },

    /// A stored checkpoint does not match the workflow's code any more.
    #[error("checkpoint of run `{run}` (workflow `{workflow}`) at site `{site}` is incompatible with the code: field `{field}`: {detail}")]
    Incompatible {
        /// The workflow name.
        workflow: String,
        /// The run id.
        run: String,
        /// The site key stored with the checkpoint.
        site: String,
        /// The field that differs (or `-` when the site itself is unknown).
        field: String,
        /// What differs.
        detail: Box<str>,
    },

    /// Stored bytes could not be decoded into the expected type.
    #[error("cannot decode field `{field}` of run `{run}` (workflow `{workflow}`) at site `{site}`: {detail}")]
    Decode {
        /// The workflow name.
        workflow: String,
        /// The run id.
        run: String,
        /// The site key (or `<input>` / `<output>`).
        site: String,
        /// The field name.
        field: String,
        /// The decoder's message.
        detail: Box<str>,
    },

    /// A value could not be serialized.
    #[error("cannot encode field `{field}` of run `{run}` (workflow `{workflow}`) at site `{site}`: {detail}")]
    Encode {
        /// The workflow name (empty when not known).
        workflow: String,
        /// The run id (empty when not known).
        run: String,
        /// The site key (or `<input>` / `<output>`).
        site: String,
        /// The field name or type.
        field: String,
        /// The encoder's message.
        detail: Box<str>,
    },

    /// A local could not be saved so that a resumed run computes what the
    /// uninterrupted run computes (see `docs/exactness.md`): the code after
    /// the site observes the order of a hash-ordered collection inside it, it
    /// is a handle shared with another, or it does not come back equal from
    /// its saved bytes. Refused when it is saved, before any run could resume
    /// from it.
    #[error("field `{field}` of run `{run}` (workflow `{workflow}`) cannot be saved at site `{site}` so that a resumed run computes what this one does: {detail}")]
    Inexact {
        /// The workflow name.
        workflow: String,
        /// The run id.
        run: String,
        /// The site key.
        site: String,
        /// The local's name.
        field: String,
        /// What differs after a resume, and what to write instead.
        detail: Box<str>,
    },

    /// Resumed code did not reach the checkpoint's site the way it was left:
    /// a `for` loop's iterator ended before its saved position, or an
    /// `if`/`match` around the site took another branch when evaluated again.
    #[error("run `{run}` (workflow `{workflow}`) cannot be resumed at site `{site}`: {detail}")]
    Diverged {
        /// The workflow name.
        workflow: String,
        /// The run id.
        run: String,
        /// The site key.
        site: String,
        /// What went differently.
        detail: String,
    },

    /// The run was cancelled.
    #[error("run `{run}` was cancelled")]
    Cancelled {
        /// The run id.
        run: String,
    },

    /// This worker lost its lease on the run: another worker took it over.
    #[error("worker `{worker}` lost its lease on run `{run}` (another worker took it over)")]
    LeaseLost {
        /// The run id.
        run: String,
        /// This worker's id.
        worker: String,
    },

    /// The store failed. [`source`](std::error::Error::source) is the
    /// backend's own error when there is one (a `rusqlite::Error` for a
    /// locked SQLite database, a `tokio_postgres::Error` for a lost
    /// connection, ...), so that callers can tell them apart; it is not
    /// serialized (a stored error reads back with its message alone).
    /// Build one with [`Error::store`] or [`Error::store_caused_by`].
    #[error("store error: {message}")]
    Store {
        /// The backend's message.
        message: String,
        /// The backend's error.
        #[source]
        #[serde(skip)]
        source: Option<StoreSource>,
    },

    /// A signal payload could not be encoded, or did not decode as the type the
    /// workflow waits for.
    #[error("signal `{signal}` for run `{run}` has an unusable payload: {detail}")]
    SignalPayload {
        /// The run id.
        run: String,
        /// The signal name.
        signal: String,
        /// The codec's message.
        detail: String,
    },

    /// The workflow used the API in a way the runtime cannot honour. (A
    /// suspension point awaited outside a workflow body, once reported this
    /// way, is now a compile error: see [`AwaitInWorkflowBody`](crate::AwaitInWorkflowBody).)
    #[error("run `{run}`: {detail}")]
    Misuse {
        /// The run id.
        run: String,
        /// What was wrong and how to fix it.
        detail: String,
    },

    /// Workflow code panicked more often than the retry budget allows.
    #[error("workflow `{workflow}` panicked in run `{run}`: {message}")]
    Panicked {
        /// The workflow name.
        workflow: String,
        /// The run id.
        run: String,
        /// The panic message.
        message: String,
    },

    /// The store URL names a backend this build does not provide.
    #[error("unsupported store `{url}`: {reason}")]
    UnsupportedStore {
        /// The URL given to `open`.
        url: String,
        /// Why it is not supported.
        reason: String,
    },

    /// A client-only runtime ([`RuntimeBuilder::client_only`](crate::RuntimeBuilder::client_only))
    /// was asked to execute runs.
    #[error("`{operation}` on a client-only runtime: it starts, signals and inspects runs but never executes them; build the runtime without `client_only()` to execute")]
    ClientOnly {
        /// The method called.
        operation: String,
    },

    /// A crash-resume check of the test harness failed.
    #[error("checkpoint check failed: {message}")]
    CheckFailed {
        /// Which crash point, which checkpoint, expected vs got.
        message: String,
    },

    /// A broken internal invariant (a bug in the runtime or the generated code).
    #[error("internal error: {message}")]
    Internal {
        /// What went wrong.
        message: String,
    },
}

impl Error {
    /// The site, field and detail a refusal to resume names
    /// ([`Error::Incompatible`], [`Error::Decode`]); `-` for what another
    /// error does not name, its text as the detail.
    pub(crate) fn refused_at(&self) -> (String, String, String) {
        match self {
            Error::Incompatible {
                site,
                field,
                detail,
                ..
            }
            | Error::Decode {
                site,
                field,
                detail,
                ..
            } => (site.clone(), field.clone(), detail.to_string()),
            other => ("-".to_owned(), "-".to_owned(), other.to_string()),
        }
    }

    /// An [`Error::Store`] without a backend error behind it.
    pub fn store(message: impl Into<String>) -> Error {
        Error::Store {
            message: message.into(),
            source: None,
        }
    }

    /// An [`Error::Store`] caused by the backend's error `source` (see
    /// [`StoreSource`](crate::store::StoreSource)).
    pub fn store_caused_by(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::Store {
            message: message.into(),
            source: Some(StoreSource(std::sync::Arc::new(source))),
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Error::Internal {
            message: message.into(),
        }
    }

    pub(crate) fn unknown_run(run: &str) -> Self {
        Error::UnknownRun {
            run: run.to_owned(),
        }
    }
}

/// Checks a run id (or signal/workflow name): non-empty, at most 255 bytes, no
/// control characters.
pub(crate) fn validate_id(id: &str) -> Result<(), Error> {
    let reason = if id.is_empty() {
        "must not be empty"
    } else if id.len() > 255 {
        "must be at most 255 bytes long"
    } else if id.chars().any(char::is_control) {
        "must not contain control characters"
    } else {
        return Ok(());
    };
    let mut shown: String = id.chars().take(64).collect();
    if shown.len() < id.len() {
        shown.push('…');
    }
    Err(Error::InvalidId {
        id: shown,
        reason: reason.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated() {
        assert!(validate_id("vendor-42").is_ok());
        assert!(matches!(validate_id(""), Err(Error::InvalidId { .. })));
        assert!(matches!(
            validate_id(&"x".repeat(256)),
            Err(Error::InvalidId { .. })
        ));
        assert!(validate_id(&"x".repeat(255)).is_ok());
        assert!(matches!(validate_id("a\nb"), Err(Error::InvalidId { .. })));
    }

    #[test]
    fn errors_name_their_context() {
        let e = Error::Incompatible {
            workflow: "wf".into(),
            run: "r1".into(),
            site: "task_done".into(),
            field: "done".into(),
            detail: "type changed".into(),
        };
        let s = e.to_string();
        assert!(
            s.contains("wf") && s.contains("r1") && s.contains("task_done") && s.contains("done")
        );
    }
}

/// `a`, `b` and `c` as "`a`, `b`, `c`" ("none" when empty).
fn quoted_list(names: &[String]) -> String {
    if names.is_empty() {
        return "none".to_owned();
    }
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    quoted.join(", ")
}

#[cfg(test)]
mod store_source_tests {
    use std::error::Error as _;

    use super::Error;

    #[test]
    fn store_errors_keep_their_source_but_serialize_without_it() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let err = Error::store_caused_by("postgres: connection lost", io);
        let source = err.source().expect("a source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("the io error");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
        // The stored form is the message alone, and reads back as an equal error.
        let json = serde_json::to_string(&err).unwrap();
        assert!(!json.contains("reset"), "{json}");
        let back: Error = serde_json::from_str(&json).unwrap();
        assert_eq!(back, Error::store("postgres: connection lost"));
        assert_eq!(err.clone(), err);
        assert!(Error::store("plain").source().is_none());
    }
}
