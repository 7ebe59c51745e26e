//! Firing schedules: [`Runtime::schedule`] and the operations on stored
//! schedules, and the loop that turns due ticks into runs.
//!
//! Every runtime that registered a schedule fires its ticks: once a second
//! (real time, to see other workers' changes) and when the next tick is due
//! on the runtime's clock, it reads the stored record, decides what is due
//! ([`schedule::due`]), starts each tick's run `{name}@{tick}` (idempotent:
//! a run id is created once) and then moves the record's last tick with a
//! compare-and-set. Two workers firing the same tick create one run; a
//! crash between the two steps leaves a tick that the next pass finds
//! already started. The order (run first, then the record) is what makes a
//! tick never lost.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

use crate::executor::Inner;
use crate::runtime::{create_run, Runtime};
use crate::schedule::{self, Overlap, Schedule, ScheduleInfo, Tick};
use crate::schedule_registry::{Entry, Fire};
use crate::store::ScheduleRecord;
use crate::workflow::{IntoWorkflow, Workflow};
use crate::Error;

/// How often a runtime reads its schedules' records even when no tick is
/// due on its clock: pauses, deletions and other workers' ticks show up
/// within this.
const PASS: Duration = Duration::from_secs(1);

impl Runtime {
    /// Fires `workflow` on `schedule`'s ticks from now on, durably: the
    /// schedule is stored (registering it again, as every worker does at
    /// start, updates its definition and keeps its pause and place), and
    /// each tick becomes the run `{name}@{tick}` (RFC 3339, UTC) with the
    /// input `input(tick)`, exactly once across every worker and restart.
    /// Ticks missed while no worker ran follow the schedule's
    /// [`CatchUp`](crate::CatchUp); a tick while the previous run is
    /// unfinished, its [`Overlap`]. Ticks are read on the runtime's clock
    /// ([`RuntimeBuilder::clock`](crate::RuntimeBuilder::clock)); the first
    /// one due is the first after the schedule was first stored.
    ///
    /// Every runtime that calls this fires the schedule's ticks (they
    /// share the work: one run per tick); one that did not only sees it
    /// ([`Runtime::schedules`]).
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// use std::time::Duration;
    /// use checkpoint_runtime::{CatchUp, Schedule, Tick};
    ///
    /// #[workflow]
    /// async fn report(ctx: &Ctx, day: String) -> String {
    ///     format!("report for {day}")
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let clock = TestClock::manual();
    /// let rt = Runtime::builder().clock(clock.clone()).in_memory();
    /// let nightly = Schedule::cron("nightly", "0 3 * * *")?
    ///     .timezone("Europe/Berlin")?
    ///     .catch_up(CatchUp::Latest);
    /// rt.schedule(nightly, report, |tick: Tick| tick.local_date().to_string()).await?;
    ///
    /// clock.advance(Duration::from_secs(2 * 86_400)); // two nights pass
    /// let runs = rt.run_schedules().await?; // as the background loop would
    /// assert_eq!(runs.len(), 1, "the latest missed tick only");
    /// assert!(runs[0].starts_with("nightly@"));
    /// # Ok(()) }
    /// ```
    pub async fn schedule<I, F>(
        &self,
        schedule: Schedule,
        workflow: I,
        input: F,
    ) -> Result<(), Error>
    where
        I: IntoWorkflow,
        F: Fn(Tick) -> <I::Workflow as Workflow>::Input + Send + Sync + 'static,
    {
        let workflow = workflow.into_workflow();
        type W<I> = <I as IntoWorkflow>::Workflow;
        let spec = serde_json::to_string(schedule.spec()).map_err(|e| Error::InvalidSchedule {
            name: schedule.name().to_owned(),
            detail: e.to_string(),
        })?;
        let now = self.inner.env.clock.now();
        let rec = ScheduleRecord::new(schedule.name(), W::<I>::NAME, &spec, now);
        self.inner.env.store.put_schedule(rec).await?;
        self.inner.register(workflow);
        let input = Arc::new(input);
        // Weak: the runtime holds this function.
        let weak = Arc::downgrade(&**self.inner);
        let fire: Fire = Arc::new(move |tick: Tick| {
            let (input, weak) = (input.clone(), weak.clone());
            Box::pin(async move {
                let Some(inner) = weak.upgrade() else {
                    return Err(Error::store("the runtime was shut down"));
                };
                let id = tick.run_id();
                let json = serde_json::to_vec(&input(tick)).map_err(|e| Error::Encode {
                    workflow: W::<I>::NAME.to_owned(),
                    run: id.clone(),
                    site: "<input>".to_owned(),
                    field: "input".to_owned(),
                    detail: e.to_string().into(),
                })?;
                let created = create_run::<W<I>>(&inner, &id, json, Default::default()).await?;
                Ok(matches!(created, crate::store::Created::New))
            })
        });
        let name = schedule.name().to_owned();
        self.inner.schedules.insert(name, Entry { schedule, fire });
        self.start_firing();
        Ok(())
    }

    /// Fires what is due now on every schedule this runtime registered, as
    /// its background loop does, and returns the ids of the runs it
    /// started (a tick another worker started already is not counted).
    /// For tests and scripts; the loop needs no call.
    pub async fn run_schedules(&self) -> Result<Vec<String>, Error> {
        fire_due(&self.inner).await.map(|(started, _)| started)
    }

    /// Every stored schedule, by name, with its next tick.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// # use checkpoint_runtime::{Schedule, Tick};
    /// # #[workflow]
    /// # async fn sync(ctx: &Ctx) -> u8 { 0 }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// rt.schedule(Schedule::cron("sync", "*/5 * * * *")?, sync, |_: Tick| ()).await?;
    /// rt.pause_schedule("sync").await?;
    /// let list = rt.schedules().await?;
    /// assert_eq!((list[0].name.as_str(), list[0].paused), ("sync", true));
    /// assert!(list[0].next_tick.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>, Error> {
        let now = self.inner.env.clock.now();
        let records = self.inner.env.store.schedules().await?;
        Ok(records.into_iter().map(|r| info(r, now)).collect())
    }

    /// Pauses schedule `name`: no tick fires until it is unpaused (ticks
    /// that pass meanwhile are missed ones then: see
    /// [`CatchUp`](crate::CatchUp)). [`Error::UnknownSchedule`] when none is
    /// stored.
    pub async fn pause_schedule(&self, name: &str) -> Result<(), Error> {
        self.set_paused(name, true).await
    }

    /// Unpauses schedule `name` (see [`pause_schedule`](Runtime::pause_schedule)).
    pub async fn unpause_schedule(&self, name: &str) -> Result<(), Error> {
        self.set_paused(name, false).await
    }

    async fn set_paused(&self, name: &str, paused: bool) -> Result<(), Error> {
        if !self.inner.env.store.pause_schedule(name, paused).await? {
            return Err(unknown(name, false));
        }
        self.inner.schedules.wake();
        Ok(())
    }

    /// Starts a run of schedule `name` now, out of its cron rhythm: the tick
    /// is the clock's now, the run `{name}@{now}` (paused or not; its
    /// record's place does not move). Returns the run id. Only a runtime
    /// that registered the schedule has its input function
    /// ([`Error::UnknownSchedule`] otherwise).
    pub async fn trigger_schedule(&self, name: &str) -> Result<String, Error> {
        let entry = self.registered(name).await?;
        let tick = entry.schedule.tick(self.inner.env.clock.now());
        let id = tick.run_id();
        (entry.fire)(tick).await?;
        Ok(id)
    }

    /// Starts the runs of every tick of schedule `name` from `from` to `to`
    /// (both included), oldest first, whatever its overlap policy; a tick
    /// whose run exists already (fired, or backfilled before) is not
    /// started again. Returns the run ids of the range's ticks. Only a
    /// runtime that registered the schedule has its input function.
    ///
    /// ```
    /// # use checkpoint_runtime::prelude::*;
    /// # use checkpoint_runtime::{Schedule, Tick};
    /// use std::time::{Duration, UNIX_EPOCH};
    /// # #[workflow]
    /// # async fn sync(ctx: &Ctx, at: u64) -> u64 { at }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let rt = Runtime::in_memory();
    /// let secs = |t: Tick| t.at().duration_since(UNIX_EPOCH).unwrap().as_secs();
    /// rt.schedule(Schedule::cron("hourly", "0 * * * *")?, sync, secs).await?;
    /// let day = UNIX_EPOCH + Duration::from_secs(86_400);
    /// let ids = rt.backfill_schedule("hourly", day, day + Duration::from_secs(3 * 3600)).await?;
    /// assert_eq!(ids, ["hourly@1970-01-02T00:00:00Z", "hourly@1970-01-02T01:00:00Z",
    ///                  "hourly@1970-01-02T02:00:00Z", "hourly@1970-01-02T03:00:00Z"]);
    /// # Ok(()) }
    /// ```
    pub async fn backfill_schedule(
        &self,
        name: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> Result<Vec<String>, Error> {
        let entry = self.registered(name).await?;
        let mut ids = Vec::new();
        let mut at = entry.schedule.latest_at(from).filter(|t| *t == from);
        if at.is_none() {
            at = entry.schedule.next_after(from);
        }
        while let Some(t) = at.filter(|t| *t <= to) {
            let tick = entry.schedule.tick(t);
            ids.push(tick.run_id());
            (entry.fire)(tick).await?;
            at = entry.schedule.next_after(t);
        }
        Ok(ids)
    }

    /// Removes schedule `name` from the store and from this runtime: no
    /// tick fires any more (its runs stay). [`Error::UnknownSchedule`] when
    /// none is stored. Other runtimes that registered it stop firing it at
    /// their next pass (they find no record).
    pub async fn delete_schedule(&self, name: &str) -> Result<(), Error> {
        self.inner.schedules.remove(name);
        if !self.inner.env.store.delete_schedule(name).await? {
            return Err(unknown(name, false));
        }
        Ok(())
    }

    async fn registered(&self, name: &str) -> Result<Arc<Entry>, Error> {
        match self.inner.schedules.get(name) {
            Some(entry) => Ok(entry),
            None => {
                let stored = self.inner.env.store.schedules().await?;
                Err(unknown(name, stored.iter().any(|s| s.name == name)))
            }
        }
    }

    /// Spawns the firing loop once (it holds the runtime weakly and ends
    /// with it).
    fn start_firing(&self) {
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            return; // the first call inside a tokio runtime starts it
        };
        if !self.inner.schedules.start_loop_once() {
            return;
        }
        let inner: Arc<Inner> = Arc::clone(&**self.inner);
        tokio.spawn(firing_loop(Arc::downgrade(&inner)));
    }
}

fn unknown(name: &str, stored: bool) -> Error {
    Error::UnknownSchedule {
        name: name.to_owned(),
        stored,
    }
}

fn info(r: ScheduleRecord, now: SystemTime) -> ScheduleInfo {
    let parsed = Schedule::from_stored(&r.name, &r.spec).ok();
    let after = r.last_tick.unwrap_or(now).max(now);
    let spec = parsed.as_ref().map(|s| s.spec().clone());
    ScheduleInfo {
        next_tick: parsed.as_ref().and_then(|s| s.next_after(after)),
        cron: spec.as_ref().map(|s| s.cron.clone()).unwrap_or_default(),
        timezone: spec
            .as_ref()
            .map(|s| s.timezone.clone())
            .unwrap_or_default(),
        overlap: spec.as_ref().map(|s| s.overlap).unwrap_or_default(),
        catch_up: spec.as_ref().map(|s| s.catch_up).unwrap_or_default(),
        name: r.name,
        workflow: r.workflow,
        paused: r.paused,
        last_tick: r.last_tick,
        last_run: r.last_run,
    }
}

async fn firing_loop(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.stopped() {
            return;
        }
        let next = match fire_due(&inner).await {
            Ok((_, next)) => next,
            Err(e) => {
                tracing::warn!(error = %e, "firing schedules failed; trying again");
                None
            }
        };
        let clock = inner.env.clock.clone();
        let mut stop = inner.shutdown_signal();
        let changed = inner.schedules.changed();
        // Not kept while waiting: the loop must not keep the runtime alive.
        drop(inner);
        let woken = changed.notified();
        let due: BoxFuture<'static, ()> = match next {
            Some(at) => clock.wait_until(at),
            None => Box::pin(std::future::pending()),
        };
        tokio::select! {
            _ = due => {}
            _ = tokio::time::sleep(PASS) => {}
            _ = stop.changed() => {}
            _ = woken => {}
        }
    }
}

/// One pass over the runtime's schedules: fires what is due and returns
/// the runs started and the earliest next tick. When it returns, every tick
/// due at its start is handled (by this runtime or another).
async fn fire_due(inner: &Arc<Inner>) -> Result<(Vec<String>, Option<SystemTime>), Error> {
    let entries = inner.schedules.all();
    let mut started = Vec::new();
    let mut next: Option<SystemTime> = None;
    if entries.is_empty() {
        return Ok((started, next));
    }
    let mut stored = read_records(inner).await?;
    for entry in entries {
        let name = entry.schedule.name();
        // Another worker moving the record first sends this round again,
        // from what it wrote; each round handles at least one tick, or
        // finds none due.
        for _ in 0..MAX_ROUNDS {
            let Some(rec) = stored.get_mut(name) else {
                // Deleted by another runtime.
                inner.schedules.remove(name);
                break;
            };
            if rec.paused || fire_one(inner, &entry, rec, &mut started).await? == Round::Done {
                break;
            }
            stored = read_records(inner).await?;
        }
        if let Some(rec) = stored.get(name) {
            let now = inner.env.clock.now();
            let after = rec.last_tick.unwrap_or(rec.created_at).max(now);
            if let Some(t) = entry.schedule.next_after(after) {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
    }
    Ok((started, next))
}

/// How many times one pass reads a schedule's record again after another
/// worker moved it first (each time, that worker handled a tick).
const MAX_ROUNDS: usize = 1_000;

async fn read_records(inner: &Arc<Inner>) -> Result<BTreeMap<String, ScheduleRecord>, Error> {
    Ok(inner
        .env
        .store
        .schedules()
        .await?
        .into_iter()
        .map(|r| (r.name.clone(), r))
        .collect())
}

/// How a round of [`fire_one`] ended.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    /// Nothing more is due now (all handled, or a queued tick waits).
    Done,
    /// Another worker moved the record first: read it again.
    Moved,
}

/// Fires what is due of one schedule whose record `rec` was read, moving
/// the record (and `rec`) on as it goes.
async fn fire_one(
    inner: &Arc<Inner>,
    entry: &Entry,
    rec: &mut ScheduleRecord,
    started: &mut Vec<String>,
) -> Result<Round, Error> {
    let store = &inner.env.store;
    let now = inner.env.clock.now();
    let after = rec.last_tick.unwrap_or(rec.created_at);
    let (fire, through) = schedule::due(&entry.schedule, after, now);
    let Some(through) = through else {
        return Ok(Round::Done);
    };
    let moved = |ok: bool| if ok { None } else { Some(Round::Moved) };
    for tick_at in fire {
        if let Some(prev) = &rec.last_run {
            let unfinished = match store.load_run(prev).await? {
                Some(run) => !run.state.is_terminal(),
                None => false,
            };
            if unfinished {
                match entry.schedule.overlap_policy() {
                    Overlap::Allow => {}
                    // Handled, with no run.
                    Overlap::Skip => {
                        if let Some(round) = moved(advance(inner, rec, tick_at, None).await?) {
                            return Ok(round);
                        }
                        continue;
                    }
                    // Waits (the record stays): a later pass tries again.
                    _ => return Ok(Round::Done),
                }
            }
        }
        let tick = entry.schedule.tick(tick_at);
        let id = tick.run_id();
        if (entry.fire)(tick).await? {
            started.push(id.clone());
        }
        if let Some(round) = moved(advance(inner, rec, tick_at, Some(&id)).await?) {
            return Ok(round);
        }
    }
    // Ticks the catch-up policy passed over are handled too.
    if rec.last_tick.is_none_or(|t| t < through) {
        if let Some(round) = moved(advance(inner, rec, through, None).await?) {
            return Ok(round);
        }
    }
    Ok(Round::Done)
}

/// Moves the record's last tick to `to` if no other worker moved it since
/// `rec` was read; `rec` follows.
async fn advance(
    inner: &Arc<Inner>,
    rec: &mut ScheduleRecord,
    to: SystemTime,
    run: Option<&str>,
) -> Result<bool, Error> {
    let moved = inner
        .env
        .store
        .advance_schedule(&rec.name, rec.last_tick, to, run)
        .await?;
    if moved {
        rec.last_tick = Some(to);
        if let Some(run) = run {
            rec.last_run = Some(run.to_owned());
        }
    }
    Ok(moved)
}
