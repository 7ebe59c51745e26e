//! Schedules: what a store keeps of them, and the compare-and-set that
//! makes each tick handled once.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::executor::block_on;

use crate::store::{ScheduleRecord, Store};

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// A schedule is stored as given; storing it again (every worker does at
/// start) changes its workflow and definition only: its pause, last tick,
/// last run and creation time stay. Listed by name; paused, unpaused and
/// deleted by name (`false` for an unknown one).
pub fn schedules_are_kept_and_redefined_without_losing_their_place(store: &dyn Store) {
    assert!(block_on(store.schedules()).unwrap().is_empty());
    let nightly = ScheduleRecord::new("nightly", "report", r#"{"cron":"0 3 * * *"}"#, at(1_000));
    let stored = block_on(store.put_schedule(nightly.clone())).unwrap();
    assert_eq!(stored, nightly);
    block_on(store.put_schedule(ScheduleRecord::new("hourly", "sync", "{}", at(2_000)))).unwrap();

    assert!(block_on(store.pause_schedule("nightly", true)).unwrap());
    assert!(
        block_on(store.advance_schedule("nightly", None, at(5_000), Some("nightly@x"))).unwrap()
    );
    let again = ScheduleRecord::new("nightly", "report-v2", r#"{"cron":"0 4 * * *"}"#, at(9_000));
    let stored = block_on(store.put_schedule(again)).unwrap();
    let mut want = nightly.clone();
    want.workflow = "report-v2".to_owned();
    want.spec = r#"{"cron":"0 4 * * *"}"#.to_owned();
    want.paused = true;
    want.last_tick = Some(at(5_000));
    want.last_run = Some("nightly@x".to_owned());
    assert_eq!(
        stored, want,
        "pause, last tick, last run and creation time stay"
    );

    let names: Vec<String> = block_on(store.schedules())
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["hourly", "nightly"]);
    assert_eq!(block_on(store.schedules()).unwrap()[1], want);

    assert!(block_on(store.pause_schedule("nightly", false)).unwrap());
    assert!(!block_on(store.schedules()).unwrap()[1].paused);
    assert!(!block_on(store.pause_schedule("nope", true)).unwrap());
    assert!(block_on(store.delete_schedule("hourly")).unwrap());
    assert!(!block_on(store.delete_schedule("hourly")).unwrap());
    assert_eq!(block_on(store.schedules()).unwrap().len(), 1);
}

/// The last tick moves only from the value the caller read: of two workers
/// that read the same record, one moves it; the other's move is refused
/// and changes nothing. A move without a run keeps the last run.
pub fn a_schedule_tick_is_handled_once(store: &dyn Store) {
    block_on(store.put_schedule(ScheduleRecord::new("s", "wf", "{}", at(0)))).unwrap();
    assert!(block_on(store.advance_schedule("s", None, at(60), Some("s@1"))).unwrap());
    // A second worker that read `None` too.
    assert!(!block_on(store.advance_schedule("s", None, at(60), Some("s@1"))).unwrap());
    assert!(!block_on(store.advance_schedule("s", Some(at(30)), at(120), None)).unwrap());
    let rec = &block_on(store.schedules()).unwrap()[0];
    assert_eq!(
        (rec.last_tick, rec.last_run.as_deref()),
        (Some(at(60)), Some("s@1"))
    );
    // A tick skipped by a policy: the last tick moves, the last run stays.
    assert!(block_on(store.advance_schedule("s", Some(at(60)), at(120), None)).unwrap());
    let rec = &block_on(store.schedules()).unwrap()[0];
    assert_eq!(
        (rec.last_tick, rec.last_run.as_deref()),
        (Some(at(120)), Some("s@1"))
    );
    // Nanosecond times come back as they were stored.
    let odd = at(180) + Duration::from_nanos(123_456_789);
    assert!(block_on(store.advance_schedule("s", Some(at(120)), odd, Some("s@2"))).unwrap());
    assert_eq!(block_on(store.schedules()).unwrap()[0].last_tick, Some(odd));
    assert!(!block_on(store.advance_schedule("unknown", None, at(60), None)).unwrap());
}
