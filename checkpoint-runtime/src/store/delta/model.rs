//! A model of a run whose fields grow by appending (and change in the
//! middle, shrink, get replaced, stop growing, alternate, move to another
//! position of another shape), for the delta-storage tests of every
//! backend that stores appended fields (`sqlite::delta_tests`,
//! `postgres::delta_tests`).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use futures::executor::block_on;

use crate::store::conformance::{new_run, req};
use crate::store::{CheckpointRecord, ClaimRequest, FieldRecord, Lease, Store};

/// xorshift64*: the same sequences on every machine.
pub(in crate::store) struct Rng(pub(in crate::store) u64);

impl Rng {
    pub(in crate::store) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(in crate::store) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub(in crate::store) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A checkpoint of run `run` with these fields (name, bytes), concatenated;
/// the site names the field order, so a reordering is another shape.
pub(in crate::store) fn record(
    run: &str,
    seq: u64,
    fields: &[(&'static str, Vec<u8>)],
) -> Arc<CheckpointRecord> {
    let mut data = Vec::new();
    let mut recs = Vec::new();
    for (name, bytes) in fields {
        recs.push(FieldRecord {
            name: Cow::Borrowed(*name),
            type_name: Cow::Borrowed("alloc::vec::Vec<alloc::vec::Vec<u8>>"),
            offset: data.len(),
            len: bytes.len(),
        });
        data.extend_from_slice(bytes);
    }
    let site = fields.iter().map(|(n, _)| *n).collect::<Vec<_>>().join("+");
    Arc::new(CheckpointRecord::new(
        Arc::from(run),
        seq,
        Cow::Owned(site),
        None,
        vec![seq],
        recs,
        data,
        None,
        SystemTime::now(),
    ))
}

pub(in crate::store) fn enc<T: serde::Serialize + ?Sized>(v: &T) -> Vec<u8> {
    postcard::to_allocvec(v).unwrap()
}

/// The fields of one run, changed step by step as `rng` says.
pub(in crate::store) struct Model {
    /// Messages appended, sometimes changed in the middle, popped, replaced.
    history: Vec<Vec<u8>>,
    /// Grows by a few bytes, until it stops growing at `log_stops`.
    log: String,
    log_stops: u64,
    /// Grows on even steps, shrinks on odd ones.
    alt: Vec<u8>,
    /// Grows by huge amounts now and then.
    blob: Vec<u8>,
}

impl Model {
    pub(in crate::store) fn new(rng: &mut Rng) -> Model {
        Model {
            history: Vec::new(),
            log: String::new(),
            log_stops: 100 + rng.below(300),
            alt: Vec::new(),
            blob: rng.bytes(200),
        }
    }

    /// Step `seq`: changes the fields, returns the record's fields.
    pub(in crate::store) fn step(
        &mut self,
        rng: &mut Rng,
        seq: u64,
    ) -> Vec<(&'static str, Vec<u8>)> {
        match rng.below(100) {
            0..=69 => {
                for _ in 0..=rng.below(2) {
                    let n = 1 + rng.below(300) as usize;
                    self.history.push(rng.bytes(n));
                }
            }
            70..=74 if !self.history.is_empty() => {
                let i = rng.below(self.history.len() as u64) as usize;
                self.history[i] = rng.bytes(self.history[i].len() + 1);
            }
            75..=79 => {
                self.history.pop();
            }
            80..=81 => {
                let keep = rng.below(self.history.len() as u64 + 1) as usize;
                self.history.truncate(keep);
                self.history.push(rng.bytes(40));
            }
            82 => self.history = vec![rng.bytes(500)],
            _ => {} // unchanged
        }
        if seq < self.log_stops {
            let n = rng.below(20) as usize;
            let text: String = (0..n)
                .map(|_| (b'a' + rng.below(26) as u8) as char)
                .collect();
            self.log.push_str(&text);
        }
        if seq % 2 == 0 {
            self.alt.extend(rng.bytes(50));
        } else {
            self.alt.truncate(self.alt.len().saturating_sub(30));
        }
        if rng.below(150) == 0 {
            let n = 50_000 + rng.below(100_000) as usize;
            self.blob.extend(rng.bytes(n));
        } else if rng.below(3) == 0 {
            let n = rng.below(64) as usize;
            self.blob.extend(rng.bytes(n));
        }
        let mut fields = vec![
            ("history", enc(&self.history)),
            ("log", enc(&self.log)),
            ("n", enc(&seq)),
            ("alt", enc(&self.alt)),
            ("blob", enc(&self.blob)),
        ];
        // Now and then another shape: the fields in another order, or
        // without `alt` (which then starts over, whole, when it is back).
        match (seq / 50) % 3 {
            1 => fields.rotate_left(2),
            2 if seq % 50 < 10 => {
                fields.remove(3);
            }
            _ => {}
        }
        fields
    }
}

/// Saves `n` checkpoints of a [`Model`] for run `run` (created and claimed
/// here), with retention `keep`; returns every record saved, in order, and
/// the lease.
pub(in crate::store) fn save_model(
    store: &dyn Store,
    run: &str,
    seed: u64,
    n: u64,
    keep: Option<usize>,
) -> (Vec<Arc<CheckpointRecord>>, Lease) {
    new_run(store, run);
    // Only this run: on a slow machine another model's run may have
    // outlived its lease by now, and must not be taken over.
    let only = ClaimRequest {
        only: Some(run.to_owned()),
        ..req(run, run)
    };
    let mut claimed = block_on(store.claim(&only)).unwrap().claimed;
    assert_eq!(claimed.len(), 1, "run {run}: expected it to be claimable");
    let c = claimed.remove(0);
    let mut rng = Rng(seed);
    let mut model = Model::new(&mut rng);
    let mut saved = Vec::new();
    for seq in 1..=n {
        let cp = record(run, seq, &model.step(&mut rng, seq));
        block_on(store.save_checkpoint(&c.lease, cp.clone(), keep)).unwrap();
        saved.push(cp);
    }
    (saved, c.lease)
}

/// `cp` as every backend reads it back: a field saved without a schema
/// key is `None` whether the key list stops before it or not.
pub(in crate::store) fn norm(cp: &CheckpointRecord) -> CheckpointRecord {
    let keys: Vec<_> = (0..cp.fields.len())
        .map(|i| cp.schema_key(i).map(|k| Cow::Owned(k.to_owned())))
        .collect();
    cp.clone().with_schemas(keys)
}

/// Every version of `saved` from seq `from` on loads exactly as saved;
/// the older ones are gone; the listing is those versions.
pub(in crate::store) fn all_load(
    store: &dyn Store,
    run: &str,
    saved: &[Arc<CheckpointRecord>],
    from: u64,
) {
    for cp in saved {
        let got = block_on(store.checkpoint(run, cp.seq)).unwrap();
        if cp.seq >= from {
            assert_eq!(
                got.map(|g| norm(&g)),
                Some(norm(cp)),
                "run {run}, version #{}",
                cp.seq
            );
        } else {
            assert_eq!(got, None, "run {run}, hidden version #{}", cp.seq);
        }
    }
    let latest = block_on(store.latest_checkpoint(run)).unwrap();
    assert_eq!(
        latest.map(|g| norm(&g)),
        saved.last().map(|c| norm(c)),
        "run {run}: latest"
    );
    let listed: Vec<_> = block_on(store.list_checkpoints(run))
        .unwrap()
        .iter()
        .map(|c| norm(c))
        .collect();
    let kept: Vec<_> = saved
        .iter()
        .filter(|c| c.seq >= from)
        .map(|c| norm(c))
        .collect();
    assert_eq!(listed, kept, "run {run}: listing");
}
