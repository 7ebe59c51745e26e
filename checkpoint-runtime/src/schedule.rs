//! Schedules: a workflow started on a cron expression, durably, exactly
//! once per tick across every worker and restart.
//!
//! What is stored ([`ScheduleRecord`](crate::store::ScheduleRecord)): the
//! schedule's definition, whether it is paused, and the last tick it
//! handled. The decision of which ticks are due is made here, from the
//! record and the runtime's clock ([`due`]); the store only keeps the record
//! and moves its last tick forward with a compare-and-set
//! ([`Store::advance_schedule`](crate::store::Store::advance_schedule)).
//! A tick becomes the run `{name}@{tick}` (RFC 3339, UTC): the run id's
//! uniqueness is the fence, so two workers firing the same tick start one
//! run. The loop that fires ticks is in `scheduler.rs`.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::Error;

/// What a tick does while the run of the previous tick is unfinished.
///
/// ```
/// use checkpoint_runtime::{Overlap, Schedule};
/// let s = Schedule::cron("sync", "*/5 * * * *")?.overlap(Overlap::Allow);
/// assert_eq!(s.overlap_policy(), Overlap::Allow);
/// # Ok::<(), checkpoint_runtime::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Overlap {
    /// The tick starts no run (the default).
    #[default]
    Skip,
    /// The tick waits until the previous run ended, then starts its run
    /// (late). Ticks that pass meanwhile follow [`CatchUp`].
    Queue,
    /// The tick starts its run anyway.
    Allow,
}

/// What happens to ticks missed while no worker ran the schedule (or it was
/// paused).
///
/// ```
/// use checkpoint_runtime::{CatchUp, Schedule};
/// let s = Schedule::cron("sync", "0 * * * *")?.catch_up(CatchUp::All { max: 24 });
/// assert_eq!(s.catch_up_policy(), CatchUp::All { max: 24 });
/// # Ok::<(), checkpoint_runtime::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CatchUp {
    /// Missed ticks start no run: a tick fires only within
    /// [`MISSED_AFTER`] of its time.
    None,
    /// Only the latest missed tick starts a run (the default).
    #[default]
    Latest,
    /// Every missed tick starts a run, oldest first, at most the latest `max`.
    All {
        /// The most missed ticks started at once.
        max: u32,
    },
}

/// How late a tick may fire under [`CatchUp::None`] before it counts as
/// missed: a worker polls its schedules at least once a second, so a tick
/// later than this was not seen by any worker while it was due.
pub const MISSED_AFTER: Duration = Duration::from_secs(60);

/// A cron schedule: its name, expression (5 fields, or 6 with seconds
/// first), time zone (UTC unless set) and policies. Register it with
/// [`Runtime::schedule`](crate::Runtime::schedule).
///
/// ```
/// use checkpoint_runtime::{CatchUp, Overlap, Schedule};
/// let s = Schedule::cron("nightly-report", "0 3 * * *")?
///     .timezone("Europe/Berlin")?
///     .overlap(Overlap::Skip)
///     .catch_up(CatchUp::Latest);
/// assert_eq!(s.name(), "nightly-report");
/// assert_eq!(s.timezone_name(), "Europe/Berlin");
/// assert!(Schedule::cron("bad", "every day").is_err());
/// # Ok::<(), checkpoint_runtime::Error>(())
/// ```
#[derive(Clone)]
pub struct Schedule {
    name: String,
    spec: ScheduleSpec,
    cron: croner::Cron,
    tz: jiff::tz::TimeZone,
}

/// What a schedule's record stores of its definition (as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ScheduleSpec {
    pub cron: String,
    pub timezone: String,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("name", &self.name)
            .field("cron", &self.spec.cron)
            .field("timezone", &self.spec.timezone)
            .field("overlap", &self.spec.overlap)
            .field("catch_up", &self.spec.catch_up)
            .finish()
    }
}

fn invalid(name: &str, detail: String) -> Error {
    Error::InvalidSchedule {
        name: name.to_owned(),
        detail,
    }
}

fn parse_cron(name: &str, expr: &str) -> Result<croner::Cron, Error> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .build()
        .parse(expr)
        .map_err(|e| invalid(name, format!("cron expression `{expr}`: {e}")))
}

fn parse_timezone(name: &str, tz: &str) -> Result<jiff::tz::TimeZone, Error> {
    jiff::tz::TimeZone::get(tz).map_err(|e| invalid(name, format!("time zone `{tz}`: {e}")))
}

impl Schedule {
    /// A schedule named `name` firing on the cron expression `expr`: five
    /// fields (minute, hour, day of month, month, day of week), or six with
    /// seconds first; parsed by the `croner` crate (ranges, steps, names,
    /// `L`, `#`, `W`). In UTC until [`timezone`](Schedule::timezone).
    /// A name is non-empty, at most 200 bytes, without `@` (the run ids
    /// are `{name}@{tick}`). [`Error::InvalidSchedule`] otherwise.
    pub fn cron(name: &str, expr: &str) -> Result<Schedule, Error> {
        if name.is_empty() || name.len() > 200 || name.contains('@') {
            return Err(invalid(
                name,
                "a schedule name is 1 to 200 bytes without `@` (its runs are `{name}@{tick}`)"
                    .to_owned(),
            ));
        }
        Ok(Schedule {
            name: name.to_owned(),
            cron: parse_cron(name, expr)?,
            spec: ScheduleSpec {
                cron: expr.to_owned(),
                timezone: "UTC".to_owned(),
                overlap: Overlap::default(),
                catch_up: CatchUp::default(),
            },
            tz: jiff::tz::TimeZone::UTC,
        })
    }

    /// The IANA time zone the expression is read in (`"Europe/Berlin"`):
    /// `0 3 * * *` fires at 03:00 local time, across daylight-saving
    /// changes (a local time skipped by a change fires once, after it; one
    /// that occurs twice, once). The zone database is bundled.
    pub fn timezone(mut self, tz: &str) -> Result<Schedule, Error> {
        self.tz = parse_timezone(&self.name, tz)?;
        self.spec.timezone = tz.to_owned();
        Ok(self)
    }

    /// What a tick does while the previous run is unfinished.
    pub fn overlap(mut self, overlap: Overlap) -> Schedule {
        self.spec.overlap = overlap;
        self
    }

    /// What happens to ticks missed while no worker ran.
    pub fn catch_up(mut self, catch_up: CatchUp) -> Schedule {
        self.spec.catch_up = catch_up;
        self
    }

    /// The schedule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cron expression.
    pub fn expression(&self) -> &str {
        &self.spec.cron
    }

    /// The time zone's name (`"UTC"` unless set).
    pub fn timezone_name(&self) -> &str {
        &self.spec.timezone
    }

    /// The overlap policy.
    pub fn overlap_policy(&self) -> Overlap {
        self.spec.overlap
    }

    /// The catch-up policy.
    pub fn catch_up_policy(&self) -> CatchUp {
        self.spec.catch_up
    }

    /// The first tick strictly after `t`, if the expression has one.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use checkpoint_runtime::Schedule;
    /// let s = Schedule::cron("every-5", "*/5 * * * *")?;
    /// let t = UNIX_EPOCH + Duration::from_secs(60);
    /// assert_eq!(s.next_after(t), Some(UNIX_EPOCH + Duration::from_secs(300)));
    /// # Ok::<(), checkpoint_runtime::Error>(())
    /// ```
    pub fn next_after(&self, t: SystemTime) -> Option<SystemTime> {
        let zoned = self.zoned(t)?;
        let next = self.cron.find_next_occurrence(&zoned, false).ok()?;
        Some(SystemTime::from(next.timestamp()))
    }

    /// The latest tick at or before `t`.
    pub(crate) fn latest_at(&self, t: SystemTime) -> Option<SystemTime> {
        let zoned = self.zoned(t)?;
        let prev = self.cron.find_previous_occurrence(&zoned, true).ok()?;
        Some(SystemTime::from(prev.timestamp()))
    }

    fn zoned(&self, t: SystemTime) -> Option<jiff::Zoned> {
        let ts = jiff::Timestamp::try_from(t).ok()?;
        Some(ts.to_zoned(self.tz.clone()))
    }

    /// This schedule's tick at `at`, as the runtime hands it to the input
    /// function (to test that function, or to name a tick's run with
    /// [`Tick::run_id`]).
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use checkpoint_runtime::Schedule;
    /// let s = Schedule::cron("hourly", "0 * * * *")?;
    /// let tick = s.tick(UNIX_EPOCH + Duration::from_secs(3600));
    /// assert_eq!(tick.run_id(), "hourly@1970-01-01T01:00:00Z");
    /// # Ok::<(), checkpoint_runtime::Error>(())
    /// ```
    pub fn tick(&self, at: SystemTime) -> Tick {
        Tick {
            schedule: self.name.clone(),
            at,
            local: self.zoned(at),
        }
    }

    pub(crate) fn spec(&self) -> &ScheduleSpec {
        &self.spec
    }

    /// The schedule a record stores (its definition as written by
    /// [`ScheduleSpec`]'s JSON).
    pub(crate) fn from_stored(name: &str, spec_json: &str) -> Result<Schedule, Error> {
        let spec: ScheduleSpec = serde_json::from_str(spec_json)
            .map_err(|e| invalid(name, format!("its stored definition is not readable: {e}")))?;
        Schedule::cron(name, &spec.cron)?
            .timezone(&spec.timezone)
            .map(|s| s.overlap(spec.overlap).catch_up(spec.catch_up))
    }
}

/// One tick of a schedule: when it was due, in UTC and in the schedule's
/// time zone. The function given to
/// [`Runtime::schedule`](crate::Runtime::schedule) turns it into the run's
/// input.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// # use checkpoint_runtime::Schedule;
/// # let s = Schedule::cron("nightly", "0 3 * * *")?.timezone("Europe/Berlin")?;
/// // A tick's run id and its local date (what `|tick: Tick| ..` reads).
/// let tick = s.tick(UNIX_EPOCH + Duration::from_secs(86_400 + 2 * 3600));
/// assert_eq!(tick.run_id(), "nightly@1970-01-02T02:00:00Z");
/// assert_eq!(tick.local_date().to_string(), "1970-01-02");
/// # Ok::<(), checkpoint_runtime::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Tick {
    schedule: String,
    at: SystemTime,
    local: Option<jiff::Zoned>,
}

impl Tick {
    /// The schedule's name.
    pub fn schedule(&self) -> &str {
        &self.schedule
    }

    /// When the tick was due.
    pub fn at(&self) -> SystemTime {
        self.at
    }

    /// When the tick was due, in the schedule's time zone.
    pub fn local(&self) -> jiff::Zoned {
        self.local
            .clone()
            .unwrap_or_else(|| jiff::Timestamp::UNIX_EPOCH.to_zoned(jiff::tz::TimeZone::UTC))
    }

    /// The tick's date in the schedule's time zone (a nightly report's day).
    pub fn local_date(&self) -> jiff::civil::Date {
        self.local().date()
    }

    /// The id of the run this tick starts: `{schedule}@{tick, RFC 3339 UTC}`.
    pub fn run_id(&self) -> String {
        run_id(&self.schedule, self.at)
    }
}

/// The run id of `schedule`'s tick at `at`.
pub(crate) fn run_id(schedule: &str, at: SystemTime) -> String {
    let ts = jiff::Timestamp::try_from(at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    format!("{schedule}@{}", ts.strftime("%Y-%m-%dT%H:%M:%SZ"))
}

/// A schedule as [`Runtime::schedules`](crate::Runtime::schedules) lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// Its name.
    pub name: String,
    /// The workflow its ticks start.
    pub workflow: String,
    /// The cron expression.
    pub cron: String,
    /// The time zone.
    pub timezone: String,
    /// The overlap policy.
    pub overlap: Overlap,
    /// The catch-up policy.
    pub catch_up: CatchUp,
    /// Paused: no tick fires until it is unpaused.
    pub paused: bool,
    /// The last tick handled (fired, or skipped by a policy).
    pub last_tick: Option<SystemTime>,
    /// The run the last fired tick started.
    pub last_run: Option<String>,
    /// The next tick after the last one handled (or after now, when none
    /// was).
    pub next_tick: Option<SystemTime>,
}

/// Which ticks of `schedule` to fire, and up to which tick the record moves,
/// given the last tick handled (`after`: ticks strictly later count) and the
/// clock's `now`: `(fire, through)`. `fire` is in time order; `through` is
/// the latest tick at or before `now` (every tick up to it is handled once
/// `fire` is), `None` when no tick is due.
pub(crate) fn due(
    schedule: &Schedule,
    after: SystemTime,
    now: SystemTime,
) -> (Vec<SystemTime>, Option<SystemTime>) {
    let Some(latest) = schedule.latest_at(now).filter(|t| *t > after) else {
        return (Vec::new(), None);
    };
    let fire = match schedule.spec.catch_up {
        CatchUp::None => {
            let fresh = now.duration_since(latest).unwrap_or_default() <= MISSED_AFTER;
            if fresh {
                vec![latest]
            } else {
                Vec::new()
            }
        }
        CatchUp::Latest => vec![latest],
        CatchUp::All { max } => {
            // Walk back from the latest: a missed year of a per-second
            // expression costs `max` steps, not every tick.
            let mut ticks = vec![latest];
            while ticks.len() < max.max(1) as usize {
                let last = ticks[ticks.len() - 1];
                match schedule
                    .latest_at(last - Duration::from_nanos(1))
                    .filter(|t| *t > after)
                {
                    Some(t) => ticks.push(t),
                    None => break,
                }
            }
            ticks.reverse();
            ticks
        }
    };
    (fire, Some(latest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(rfc3339: &str) -> SystemTime {
        let ts: jiff::Timestamp = rfc3339.parse().unwrap();
        SystemTime::from(ts)
    }

    fn ids(s: &Schedule, ticks: &[SystemTime]) -> Vec<String> {
        ticks.iter().map(|t| run_id(s.name(), *t)).collect()
    }

    #[test]
    fn ticks_are_read_in_the_time_zone_across_daylight_saving() {
        let s = Schedule::cron("nightly", "0 3 * * *")
            .unwrap()
            .timezone("Europe/Berlin")
            .unwrap();
        // 03:00 in Berlin is 02:00 UTC in winter, 01:00 UTC in summer.
        assert_eq!(
            s.next_after(at("2026-12-06T12:00:00Z")),
            Some(at("2026-12-07T02:00:00Z"))
        );
        assert_eq!(
            s.next_after(at("2026-07-01T12:00:00Z")),
            Some(at("2026-07-02T01:00:00Z"))
        );
        let tick = s.tick(at("2026-07-02T01:00:00Z"));
        assert_eq!(tick.local_date().to_string(), "2026-07-02");
        assert_eq!(tick.run_id(), "nightly@2026-07-02T01:00:00Z");
    }

    #[test]
    fn six_fields_have_seconds_first() {
        let s = Schedule::cron("fast", "*/10 * * * * *").unwrap();
        assert_eq!(
            s.next_after(UNIX_EPOCH + Duration::from_secs(1)),
            Some(UNIX_EPOCH + Duration::from_secs(10))
        );
    }

    #[test]
    fn bad_definitions_are_errors_naming_the_schedule() {
        for err in [
            Schedule::cron("x", "61 * * * *").unwrap_err(),
            Schedule::cron("x", "* * *").unwrap_err(),
            Schedule::cron("x", "* * * * *")
                .unwrap()
                .timezone("Mars/Olympus")
                .unwrap_err(),
        ] {
            assert!(
                matches!(&err, Error::InvalidSchedule { name, .. } if name == "x"),
                "{err}"
            );
        }
        assert!(Schedule::cron("a@b", "* * * * *").is_err());
        assert!(Schedule::cron("", "* * * * *").is_err());
    }

    #[test]
    fn catch_up_decides_which_missed_ticks_fire() {
        let hourly = |c| Schedule::cron("h", "0 * * * *").unwrap().catch_up(c);
        let after = at("2026-12-06T00:00:00Z");
        let now = at("2026-12-06T05:00:30Z");
        let (fire, through) = due(&hourly(CatchUp::Latest), after, now);
        assert_eq!(
            ids(&hourly(CatchUp::Latest), &fire),
            ["h@2026-12-06T05:00:00Z"]
        );
        assert_eq!(through, Some(at("2026-12-06T05:00:00Z")));
        let (fire, _) = due(&hourly(CatchUp::All { max: 3 }), after, now);
        assert_eq!(
            ids(&hourly(CatchUp::All { max: 3 }), &fire),
            [
                "h@2026-12-06T03:00:00Z",
                "h@2026-12-06T04:00:00Z",
                "h@2026-12-06T05:00:00Z"
            ]
        );
        let (fire, _) = due(&hourly(CatchUp::All { max: 100 }), after, now);
        assert_eq!(fire.len(), 5, "01:00 to 05:00, not 00:00 (handled)");
        // None: a tick 30 s old fires; one 2 minutes old is missed.
        let (fire, _) = due(&hourly(CatchUp::None), after, now);
        assert_eq!(fire.len(), 1);
        let (fire, through) = due(&hourly(CatchUp::None), after, at("2026-12-06T05:02:00Z"));
        assert!(fire.is_empty());
        assert_eq!(through, Some(at("2026-12-06T05:00:00Z")), "still handled");
        // Nothing due after the last tick handled.
        let (fire, through) = due(&hourly(CatchUp::Latest), at("2026-12-06T05:00:00Z"), now);
        assert!(fire.is_empty() && through.is_none());
    }
}
