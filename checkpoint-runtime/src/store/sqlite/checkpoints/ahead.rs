//! What the caller of `save_checkpoint` and the writer thread find out
//! together about a large field: whether its bytes extend those of the
//! same field in the run's previous record.
//!
//! Planning a delta (see [`delta`](super::delta)) compares the field's old
//! body with the new bytes: about 150 us at a 2 MB history, on the writer,
//! after the 50-100 us it takes to wake up, both in every checkpoint's
//! latency. The caller has the previous record at hand (the one it saved
//! last, kept here by reference) and an idle moment: the request is sent
//! first; the caller picks the likely header lengths (a quick check of a
//! few bytes) and hands them over, then compares the bodies chunk by
//! chunk, and the writer, once awake, takes chunks too ([`Ahead::take`]).
//! The writer plans the delta without comparing again when every chunk
//! matched and its own previous record of the run is the very record the
//! caller looked at (the same allocation); otherwise (another header, its
//! cache was reset, another process wrote) it compares by itself, as
//! before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::delta::likely_extension;
use super::seal::LARGE_FIELD;
use crate::store::CheckpointRecord;

/// Field `field` is `new[..new_header] ++ old[old_header..] ++ tail`,
/// where `old` is field `old_field` of record `prev` (once every chunk of
/// the body compared equal: see [`Ahead::take`]).
#[derive(Clone, Debug)]
pub(in crate::store::sqlite) struct Extension {
    pub(in crate::store::sqlite) field: usize,
    pub(in crate::store::sqlite) old_field: usize,
    pub(in crate::store::sqlite) old_header: usize,
    pub(in crate::store::sqlite) new_header: usize,
    prev: Weak<CheckpointRecord>,
}

impl Extension {
    /// Whether this was found against `prev` itself.
    pub(in crate::store::sqlite) fn against(&self, prev: &Arc<CheckpointRecord>) -> bool {
        std::ptr::eq(self.prev.as_ptr(), Arc::as_ptr(prev))
    }

    /// Field `field`'s new bytes and `old_field`'s old ones, from the
    /// header on, as long as the old body: the bytes to compare.
    fn bodies<'a>(
        &self,
        new: &'a CheckpointRecord,
        old: &'a CheckpointRecord,
    ) -> Option<(&'a [u8], &'a [u8])> {
        let old = old.field_bytes(self.old_field)?.get(self.old_header..)?;
        let new = new.field_bytes(self.field)?.get(self.new_header..)?;
        Some((new.get(..old.len())?, old))
    }
}

/// The caller has handed over what it picked: [`Ahead::stage`].
const PICKED: u8 = 1;

/// The writer waits this long for the caller by spinning (the caller is at
/// it on its own thread, for about as long as the writer's share takes),
/// then by sleeping.
const SPIN_FOR: Duration = Duration::from_millis(1);

/// Bytes of a body compared per claim (see [`Work`]).
const CHUNK: usize = 32 << 10;

/// The comparison of the picked bodies, in chunks that the caller and the
/// writer claim in turn from one counter: the caller starts at once, the
/// writer joins once awake, and whichever is free takes the next chunk
/// (the writer's wake-up time varies too much for a fixed split).
struct Work {
    picked: Vec<Extension>,
    /// `(extension, offset in its body)` of each chunk.
    chunks: Vec<(usize, usize)>,
    next: AtomicUsize,
    done: AtomicUsize,
    differs: Vec<AtomicBool>,
    /// The caller stopped before its chunks were done (a panic).
    abandoned: AtomicBool,
}

impl Work {
    fn new(picked: Vec<Extension>, lens: &[usize]) -> Work {
        let chunks = lens
            .iter()
            .enumerate()
            .flat_map(|(e, &len)| (0..len).step_by(CHUNK).map(move |at| (e, at)))
            .collect();
        let differs = picked.iter().map(|_| AtomicBool::new(false)).collect();
        Work {
            picked,
            chunks,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            differs,
            abandoned: AtomicBool::new(false),
        }
    }

    /// Compares chunks until none is left; `bodies` gives an extension's
    /// bodies (new, old) as this thread sees them.
    fn run<'a>(&self, bodies: impl Fn(&Extension) -> Option<(&'a [u8], &'a [u8])>) {
        loop {
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(&(e, at)) = self.chunks.get(k) else {
                return;
            };
            let same = bodies(&self.picked[e]).is_some_and(|(new, old)| {
                let end = old.len().min(at + CHUNK);
                new.get(at..end) == old.get(at..end)
            });
            if !same {
                self.differs[e].store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// The hand-over between the caller and the writer for one request.
#[derive(Default)]
pub(in crate::store::sqlite) struct Ahead {
    stage: AtomicU8,
    work: Mutex<Option<Arc<Work>>>,
    ready: Condvar,
}

/// Waits for `done` by spinning, then by sleeping a little at a time.
fn wait_until(done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        if start.elapsed() < SPIN_FOR {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl Ahead {
    /// A hand-over, and what fills it.
    pub(in crate::store::sqlite) fn new() -> (Arc<Ahead>, Filler) {
        let ahead = Arc::new(Ahead::default());
        (ahead.clone(), Filler(Some(ahead)))
    }

    fn publish(&self, work: Option<Arc<Work>>) {
        let mut slot = self.work.lock().unwrap_or_else(|e| e.into_inner());
        *slot = work;
        self.stage.store(PICKED, Ordering::Release);
        self.ready.notify_all();
    }

    /// The writer's part, for new record `cp` whose run's previous record
    /// is `prev`: compares chunks of the bodies of the likely extensions
    /// the caller picked, alongside the caller, and keeps those whose every
    /// chunk matched.
    pub(in crate::store::sqlite) fn take(
        &self,
        cp: &CheckpointRecord,
        prev: Option<&Arc<CheckpointRecord>>,
    ) -> Vec<Extension> {
        wait_until(|| self.stage.load(Ordering::Acquire) >= PICKED);
        let work = self.work.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(work) = work else {
            return Vec::new();
        };
        work.run(|e| prev.filter(|p| e.against(p)).and_then(|p| e.bodies(cp, p)));
        let total = work.chunks.len();
        wait_until(|| {
            work.done.load(Ordering::Acquire) >= total || work.abandoned.load(Ordering::Acquire)
        });
        if work.done.load(Ordering::Acquire) < total {
            return Vec::new();
        }
        work.picked
            .iter()
            .zip(&work.differs)
            .filter(|(e, d)| !d.load(Ordering::Relaxed) && prev.is_some_and(|p| e.against(p)))
            .map(|(e, _)| e.clone())
            .collect()
    }
}

/// The caller's side of an [`Ahead`]; if dropped before it is done (a
/// panic while comparing), it hands over that nothing matched, so that
/// the writer never waits for good.
pub(in crate::store::sqlite) struct Filler(Option<Arc<Ahead>>);

impl Filler {
    /// The caller's part: picks the likely extensions of `cp`'s large
    /// fields over those of `prev`, hands them over, then compares their
    /// bodies alongside the writer.
    pub(in crate::store::sqlite) fn fill(
        mut self,
        cp: &CheckpointRecord,
        prev: &Arc<CheckpointRecord>,
    ) {
        let Some(ahead) = self.0.clone() else { return };
        let picked = pick(cp, prev);
        let lens: Vec<usize> = picked
            .iter()
            .map(|e| e.bodies(cp, prev).map_or(0, |(_, old)| old.len()))
            .collect();
        let work = Arc::new(Work::new(picked, &lens));
        ahead.publish(Some(work.clone()));
        let guard = Abandon(&work);
        work.run(|e| e.bodies(cp, prev));
        std::mem::forget(guard);
        self.0 = None;
    }
}

/// Marks its work abandoned when dropped (a panic while comparing).
struct Abandon<'a>(&'a Work);

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        self.0.abandoned.store(true, Ordering::Release);
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        if let Some(a) = self.0.take() {
            if a.stage.load(Ordering::Acquire) < PICKED {
                a.publish(None);
            }
        }
    }
}

/// The likely extensions of `cp`'s large fields over the same fields of
/// `prev` (not compared yet).
fn pick(cp: &CheckpointRecord, prev: &Arc<CheckpointRecord>) -> Vec<Extension> {
    let mut picked = Vec::new();
    for (i, f) in cp.fields.iter().enumerate() {
        if f.len < LARGE_FIELD {
            continue;
        }
        let Some(j) = prev.fields.iter().position(|pf| pf.name == f.name) else {
            continue;
        };
        let (Some(new), Some(old)) = (cp.field_bytes(i), prev.field_bytes(j)) else {
            continue;
        };
        if let Some((old_header, new_header)) = likely_extension(new, old) {
            picked.push(Extension {
                field: i,
                old_field: j,
                old_header,
                new_header,
                prev: Arc::downgrade(prev),
            });
        }
    }
    picked
}

/// The latest record with a large field saved through this store, per run.
#[derive(Default)]
pub(in crate::store::sqlite) struct Recent(Mutex<HashMap<Arc<str>, Weak<CheckpointRecord>>>);

/// Runs whose record is gone are forgotten once the map holds this many.
const PRUNE_AT: usize = 256;

fn large(cp: &CheckpointRecord) -> bool {
    cp.fields.iter().any(|f| f.len >= LARGE_FIELD)
}

impl Recent {
    /// For a record with a large field: notes it as its run's latest, and
    /// returns the run's previous one, if it is the version before.
    pub(in crate::store::sqlite) fn note(
        &self,
        cp: &Arc<CheckpointRecord>,
    ) -> Option<Arc<CheckpointRecord>> {
        if !large(cp) {
            return None;
        }
        let prev = {
            let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if map.len() >= PRUNE_AT {
                map.retain(|_, w| w.strong_count() > 0);
            }
            map.insert(cp.run.clone(), Arc::downgrade(cp))
        };
        prev.and_then(|w| w.upgrade())
            .filter(|p| p.seq.checked_add(1) == Some(cp.seq))
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::SystemTime;

    use super::*;
    use crate::store::FieldRecord;

    fn record(seq: u64, field: Vec<u8>) -> Arc<CheckpointRecord> {
        let len = field.len();
        let f = FieldRecord {
            name: Cow::Borrowed("history"),
            type_name: Cow::Borrowed("Vec<Vec<u8>>"),
            offset: 0,
            len,
        };
        Arc::new(CheckpointRecord::new(
            Arc::from("r"),
            seq,
            Cow::Borrowed("s"),
            None,
            vec![],
            vec![f],
            field,
            None,
            SystemTime::now(),
        ))
    }

    fn enc(v: &[Vec<u8>]) -> Vec<u8> {
        postcard::to_allocvec(v).unwrap()
    }

    /// What the writer takes for `cp` after `prev`, the caller comparing
    /// on another thread.
    fn found(cp: &Arc<CheckpointRecord>, prev: &Arc<CheckpointRecord>) -> Vec<Extension> {
        let (ahead, filler) = Ahead::new();
        let (c, p) = (cp.clone(), prev.clone());
        let caller = std::thread::spawn(move || filler.fill(&c, &p));
        let got = ahead.take(cp, Some(prev));
        caller.join().unwrap();
        got
    }

    #[test]
    fn an_extension_counts_once_every_chunk_matched() {
        let mut v: Vec<Vec<u8>> = (0..LARGE_FIELD / 100).map(|i| vec![i as u8; 100]).collect();
        let prev = record(1, enc(&v));
        v.push(vec![7; 300]);
        let grown = record(2, enc(&v));
        let got = found(&grown, &prev);
        assert_eq!(got.len(), 1);
        assert!(got[0].against(&prev));
        // A change anywhere in the body, keeping its first and last bytes
        // (which the quick check looks at): not an extension.
        for at in [10, v.len() / 2, v.len() - 10] {
            let mut changed = v.clone();
            changed[at][50] ^= 1;
            assert!(found(&record(2, enc(&changed)), &prev).is_empty(), "{at}");
        }
        // Against another record than the writer's previous one: nothing.
        let other = record(1, enc(&v[..v.len() - 1]));
        let (ahead, filler) = Ahead::new();
        filler.fill(&grown, &prev);
        assert!(ahead.take(&grown, Some(&other)).is_empty());
    }

    #[test]
    fn a_caller_gone_before_comparing_leaves_nothing_to_wait_for() {
        let prev = record(1, vec![1; LARGE_FIELD]);
        let (ahead, filler) = Ahead::new();
        drop(filler);
        assert!(ahead.take(&prev, Some(&prev)).is_empty());
    }
}
