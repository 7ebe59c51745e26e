//! What a store keeps of a schedule ([`ScheduleRecord`]) and the one
//! in-memory implementation of its operations, which the memory store uses
//! ([`ScheduleTable`]). Which ticks are due is decided by the runtime
//! (`schedule.rs`); a store only keeps the record and moves its last tick
//! with a compare-and-set.

use std::collections::BTreeMap;
use std::time::SystemTime;

/// A schedule as stored: its definition, whether it is paused, and the last
/// tick it handled.
///
/// ```
/// use std::time::SystemTime;
/// use checkpoint_runtime::store::ScheduleRecord;
/// let rec = ScheduleRecord::new("nightly", "report", r#"{"cron":"0 3 * * *"}"#, SystemTime::now());
/// assert!(!rec.paused && rec.last_tick.is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleRecord {
    /// The schedule's name (its key).
    pub name: String,
    /// The workflow its ticks start.
    pub workflow: String,
    /// Its definition (cron expression, time zone, policies) as JSON, as
    /// the runtime writes it; a store keeps it as it is.
    pub spec: String,
    /// No tick fires while set.
    pub paused: bool,
    /// The last tick handled (fired or skipped); ticks after it are due.
    pub last_tick: Option<SystemTime>,
    /// The run the last fired tick started.
    pub last_run: Option<String>,
    /// When the schedule was first stored: ticks after it are due while
    /// `last_tick` is `None`.
    pub created_at: SystemTime,
}

impl ScheduleRecord {
    /// A new schedule's record: not paused, no tick handled.
    pub fn new(name: &str, workflow: &str, spec: &str, created_at: SystemTime) -> ScheduleRecord {
        ScheduleRecord {
            name: name.to_owned(),
            workflow: workflow.to_owned(),
            spec: spec.to_owned(),
            paused: false,
            last_tick: None,
            last_run: None,
            created_at,
        }
    }

    /// [`Store::put_schedule`](super::Store::put_schedule): `new`'s
    /// definition over the stored one, which keeps its pause, last tick,
    /// last run and creation time.
    pub fn redefined(mut self, new: &ScheduleRecord) -> ScheduleRecord {
        self.workflow = new.workflow.clone();
        self.spec = new.spec.clone();
        self
    }
}

/// The schedules of the memory store, by name.
#[derive(Debug, Default)]
pub(crate) struct ScheduleTable(BTreeMap<String, ScheduleRecord>);

impl ScheduleTable {
    pub fn put(&mut self, rec: ScheduleRecord) -> ScheduleRecord {
        let stored = match self.0.remove(&rec.name) {
            Some(old) => old.redefined(&rec),
            None => rec,
        };
        self.0.insert(stored.name.clone(), stored.clone());
        stored
    }

    pub fn list(&self) -> Vec<ScheduleRecord> {
        self.0.values().cloned().collect()
    }

    pub fn set_paused(&mut self, name: &str, paused: bool) -> bool {
        self.0.get_mut(name).map(|r| r.paused = paused).is_some()
    }

    pub fn delete(&mut self, name: &str) -> bool {
        self.0.remove(name).is_some()
    }

    pub fn advance(
        &mut self,
        name: &str,
        from: Option<SystemTime>,
        to: SystemTime,
        run: Option<&str>,
    ) -> bool {
        match self.0.get_mut(name) {
            Some(r) if r.last_tick == from => {
                r.last_tick = Some(to);
                if let Some(run) = run {
                    r.last_run = Some(run.to_owned());
                }
                true
            }
            _ => false,
        }
    }
}
