//! [`StartOptions`]: what a run is started with besides its input (tags,
//! a queue, a priority, a start time), stored with the run.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::Error;

/// Options of a new run, for [`Runtime::start_with`](crate::Runtime::start_with)
/// and [`Ctx::spawn_with`](crate::Ctx::spawn_with). Stored with the run when
/// it is created (a start of an id that exists changes nothing, its options
/// included).
///
/// - **Tags**: key/value strings, searchable with
///   [`RunFilter::tag`](crate::RunFilter::tag) and shown in
///   [`RunInfo::tags`](crate::RunInfo::tags). A key holds one value: tagging a
///   key again replaces its value.
/// - **Queue** and **priority**: the queue the run belongs to and its
///   priority in it (higher first; 0 by default), stored with the run and
///   shown in [`RunInfo`](crate::RunInfo).
/// - **Start time**: the run is not executed before `start_at`, read on the
///   runtime's [`Clock`](crate::Clock). Until then it is
///   [`Status::Sleeping`](crate::Status::Sleeping) and holds no worker; any
///   worker of the store starts it once the time has come. A start time
///   that has passed starts it at once.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use checkpoint_runtime::StartOptions;
///
/// let when = SystemTime::now() + Duration::from_secs(3600);
/// let opts = StartOptions::new()
///     .tag("tenant", "acme")
///     .tag("plan", "pro")
///     .queue("llm")
///     .priority(2)
///     .start_at(when);
/// assert_eq!(opts.tags.get("tenant").map(String::as_str), Some("acme"));
/// assert_eq!(opts.queue.as_deref(), Some("llm"));
/// assert_eq!(opts.priority, 2);
/// assert_eq!(opts.start_at, Some(when));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StartOptions {
    /// The run's tags, by key.
    pub tags: BTreeMap<String, String>,
    /// The queue the run belongs to.
    pub queue: Option<String>,
    /// Its priority within its queue: higher first.
    pub priority: i32,
    /// Not executed before this time, on the runtime's clock.
    pub start_at: Option<SystemTime>,
}

impl StartOptions {
    /// No tags, no queue, priority 0, start at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tags the run with `key` = `value` (replacing a value given to `key`
    /// before).
    pub fn tag(mut self, key: &str, value: &str) -> Self {
        self.tags.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Puts the run in queue `name`.
    pub fn queue(mut self, name: &str) -> Self {
        self.queue = Some(name.to_owned());
        self
    }

    /// The run's priority within its queue (higher first; 0 by default).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Starts the run no earlier than `when`, on the runtime's clock.
    pub fn start_at(mut self, when: SystemTime) -> Self {
        self.start_at = Some(when);
        self
    }

    /// Checks the options of run `run`: tag keys and queue names are not
    /// empty, and no key, value or queue name holds control characters or
    /// NUL bytes (which a store cannot keep as they are).
    pub(crate) fn validate(&self, run: &str) -> Result<(), Error> {
        let bad = |what: String| Error::Misuse {
            run: run.to_owned(),
            detail: what,
        };
        let clean = |s: &str| !s.chars().any(char::is_control);
        for (key, value) in &self.tags {
            if key.is_empty() {
                return Err(bad("a tag key must not be empty".to_owned()));
            }
            if !clean(key) || !clean(value) {
                return Err(bad(format!(
                    "tag `{}` must not contain control characters",
                    key.escape_debug()
                )));
            }
        }
        if let Some(queue) = &self.queue {
            if queue.is_empty() || !clean(queue) {
                return Err(bad(format!(
                    "queue name `{}` must be non-empty, without control characters",
                    queue.escape_debug()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_one_value() {
        let opts = StartOptions::new().tag("k", "a").tag("k", "b");
        assert_eq!(opts.tags.len(), 1);
        assert_eq!(opts.tags["k"], "b");
    }

    #[test]
    fn bad_tags_and_queues_are_refused() {
        for opts in [
            StartOptions::new().tag("", "x"),
            StartOptions::new().tag("k", "a\u{0}b"),
            StartOptions::new().queue(""),
            StartOptions::new().queue("q\n"),
        ] {
            let err = opts.validate("r-1").expect_err("refused");
            assert!(
                matches!(&err, Error::Misuse { run, .. } if run == "r-1"),
                "{err}"
            );
        }
        assert!(StartOptions::new()
            .tag("tenant", "acme")
            .queue("llm")
            .validate("r")
            .is_ok());
    }
}
