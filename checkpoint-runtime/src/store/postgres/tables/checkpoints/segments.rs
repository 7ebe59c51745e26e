//! The `cp_segments` table: fields that grow by appending, stored as what
//! they appended (see `store::delta` for how a field is found to extend
//! its previous version, and schema version 8).
//!
//! **The stream.** A *chain* is a lineage of versions of one field of a
//! run, each extending the one before: the field's bytes are a short
//! header, then the first bytes of the chain's *stream*. The stream is
//! append-only (a run's versions follow one another; a fork is another run,
//! whose first version is stored whole). It starts with the *base*, the
//! body of the version before the chain's first (written once, as the
//! segment `0..base`), then the tails the versions appended, as segments
//! of `store::delta`'s levels. A segment row is `(run, chain, lo, hi,
//! bytes)`: stream bytes `lo..hi`. The segments of a chain never overlap:
//! a fold (every `fan_out` segments of a level) deletes the segments it
//! folds in the statement that writes the segment holding them, which has
//! the same bytes. So every version of a chain, old or new, reads the same
//! way: the chain's segments from 0 on, in order, cut at its length. A
//! version reads at most the chain's current segments (63 small ones,
//! then 1,023 of each level above), whatever the number of versions.
//!
//! **The row.** A checkpoint row that stores fields by appending has
//! `appended` (its [`Appended`] descriptors, postcard) and `chains` (the
//! chains they name); its `data` holds the other fields' bytes, in order,
//! and its field offsets and lengths are the record's own, so the record
//! read back is byte for byte the one saved, and its seal checks it.
//!
//! **Retention.** A chain's versions are consecutive checkpoints, so a
//! chain that a deleted checkpoint names is still used exactly when the
//! oldest kept checkpoint names it: retention deletes the segments of the
//! others (see `save`'s statements).
//!
//! **The previous version.** To see what a field appended, the store
//! keeps the run's latest checkpoint as this store saved or claimed it
//! ([`Head`]), for the runs it executes. Without one (a save whose
//! previous version this store did not see) the checkpoint is stored
//! whole, and the next one appends to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::store::delta::{self, Delta};
use crate::store::{CheckpointRecord, Lease};

/// A field stored by appending: the `store::delta` descriptor (its header,
/// chain and levels) and the length of its chain's base.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub(in crate::store::postgres) struct Appended {
    pub(in crate::store::postgres) delta: Delta,
    pub(in crate::store::postgres) base: u64,
}

impl Appended {
    /// How many bytes of the stream the field holds.
    fn stream_len(&self) -> Option<u64> {
        self.base.checked_add(self.delta.total())
    }
}

/// The latest checkpoint of a run, as this store saved it under `lease`:
/// what the run's next save may append to.
pub(in crate::store::postgres) struct Head {
    epoch: u64,
    instance: Arc<str>,
    cp: Arc<CheckpointRecord>,
    appended: Vec<Appended>,
}

/// The [`Head`]s of the runs this store executes.
#[derive(Default)]
pub(in crate::store::postgres) struct Heads(Mutex<HashMap<Arc<str>, Arc<Head>>>);

impl Heads {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Arc<Head>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The head `cp` may append to: the one of the checkpoint just before
    /// it, saved under the same lease. (A save is fenced by its lease and
    /// the previous seq, so the stored previous version is that one.)
    pub(in crate::store::postgres) fn before(
        &self,
        lease: &Lease,
        cp: &CheckpointRecord,
    ) -> Option<Arc<Head>> {
        let head = self.lock().get(&cp.run)?.clone();
        (head.cp.seq.checked_add(1) == Some(cp.seq)
            && head.epoch == lease.epoch
            && head.instance == lease.instance)
            .then_some(head)
    }

    /// After a save of `cp` under `lease` (`stored`: its descriptors when it
    /// was stored as `plan` says, `None` when stored whole, `Err`: not
    /// saved): a run that goes on here keeps it as its head; a suspended
    /// one leaves this worker, a failed save may have lost the lease.
    pub(in crate::store::postgres) fn saved(
        &self,
        lease: &Lease,
        cp: &Arc<CheckpointRecord>,
        stored: Result<Option<&RowPlan>, ()>,
    ) {
        let mut heads = self.lock();
        match stored {
            Ok(plan) if cp.suspend.is_none() => {
                let head = Head {
                    epoch: lease.epoch,
                    instance: lease.instance.clone(),
                    cp: cp.clone(),
                    appended: plan.map(|p| p.appended.clone()).unwrap_or_default(),
                };
                heads.insert(cp.run.clone(), Arc::new(head));
            }
            _ => {
                heads.remove(&cp.run);
            }
        }
    }

    /// After a claim of `cp`'s run under `lease`: its latest checkpoint,
    /// stored with `appended`, is what its next save may append to.
    pub(in crate::store::postgres) fn claimed(
        &self,
        lease: &Lease,
        cp: Arc<CheckpointRecord>,
        appended: Vec<Appended>,
    ) {
        let head = Head {
            epoch: lease.epoch,
            instance: lease.instance.clone(),
            cp: cp.clone(),
            appended,
        };
        self.lock().insert(cp.run.clone(), Arc::new(head));
    }

    /// Forgets run `id` (it ended, or left this worker).
    pub(in crate::store::postgres) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// The segment writes of a save, as the columns its statement unnests.
#[derive(Default)]
pub(in crate::store::postgres) struct Writes {
    pub(in crate::store::postgres) chain: Vec<i64>,
    pub(in crate::store::postgres) lo: Vec<i64>,
    pub(in crate::store::postgres) hi: Vec<i64>,
    pub(in crate::store::postgres) bytes: Vec<Vec<u8>>,
}

/// The stream ranges a save folded: each chain's segments from `lo` on
/// that end before `hi` are deleted (the fold's own segment ends at `hi`).
#[derive(Default)]
pub(in crate::store::postgres) struct Folds {
    pub(in crate::store::postgres) chain: Vec<i64>,
    pub(in crate::store::postgres) lo: Vec<i64>,
    pub(in crate::store::postgres) hi: Vec<i64>,
}

/// How a checkpoint is stored when some of its fields append to the
/// previous version: the row's own columns and the segment writes.
pub(in crate::store::postgres) struct RowPlan {
    pub(in crate::store::postgres) appended: Vec<Appended>,
    /// `appended` as the row's `appended` column.
    pub(in crate::store::postgres) encoded: Vec<u8>,
    pub(in crate::store::postgres) chains: Vec<i64>,
    /// The bytes of the fields stored whole, in order.
    pub(in crate::store::postgres) data: Vec<u8>,
    pub(in crate::store::postgres) writes: Writes,
    pub(in crate::store::postgres) folds: Folds,
}

impl RowPlan {
    /// The bytes of fields this plan writes: the row's own and the
    /// segments' (see `PostgresStore::bytes_written`).
    pub(in crate::store::postgres) fn bytes(&self) -> usize {
        self.data.len() + self.writes.bytes.iter().map(Vec::len).sum::<usize>()
    }
}

/// How `cp` can be stored after `head`: `None` when no field appends
/// (store it whole).
pub(in crate::store::postgres) fn plan(cp: &CheckpointRecord, head: &Head) -> Option<RowPlan> {
    if !delta::is_tiled(cp) {
        return None;
    }
    let prev = &head.cp;
    let mut out = RowPlan {
        appended: Vec::new(),
        encoded: Vec::new(),
        chains: Vec::new(),
        data: Vec::new(),
        writes: Writes::default(),
        folds: Folds::default(),
    };
    let mut whole = Vec::new();
    for (i, f) in cp.fields.iter().enumerate() {
        let new = cp.field_bytes(i)?;
        let found = match prev.fields.get(i) {
            Some(pf) if pf.name == f.name => Some(i),
            _ => prev.fields.iter().position(|pf| pf.name == f.name),
        };
        let before = found.and_then(|j| {
            let was = head.appended.iter().find(|a| a.delta.field as usize == j);
            Some((prev.field_bytes(j)?, was))
        });
        let planned = match before {
            Some((old, Some(was))) if old == new => Some(Appended {
                delta: Delta {
                    field: u32::try_from(i).ok()?,
                    ..was.delta.clone()
                },
                base: was.base,
            }),
            Some((old, was)) if !new.is_empty() => append(&mut out, new, old, was, i, cp.seq)?,
            _ => None,
        };
        match planned {
            Some(a) => {
                let chain = i64::try_from(a.delta.chain).ok()?;
                if !out.chains.contains(&chain) {
                    out.chains.push(chain);
                }
                out.appended.push(a);
            }
            None => whole.push(i),
        }
    }
    if out.appended.is_empty() {
        return None;
    }
    for i in whole {
        out.data.extend_from_slice(cp.field_bytes(i)?);
    }
    out.encoded = postcard::to_allocvec(&out.appended).ok()?;
    Some(out)
}

/// Field `index` with bytes `new`, whose previous version had bytes `old`
/// (stored by appending as `was`, if so): its descriptor when it appends
/// to them, with its segment writes and folds added to `out`. `Some(None)`:
/// it does not append; `None`: a value out of range (store it whole).
fn append(
    out: &mut RowPlan,
    new: &[u8],
    old: &[u8],
    was: Option<&Appended>,
    index: usize,
    seq: u64,
) -> Option<Option<Appended>> {
    // `delta::plan` sees the base as a slice `(_, offset, len)` of the old
    // bytes (a new chain) or of the stream (one that goes on).
    let old_loc = match was {
        Some(a) => (0, 0, a.base),
        None => (0, 0, old.len() as u64),
    };
    let Some(p) = delta::plan(new, old, old_loc, was.map(|a| &a.delta), (index, seq), None) else {
        return Some(None);
    };
    let chain = i64::try_from(p.delta.chain).ok()?;
    let base = p.base.2;
    let at = |offset: u64| i64::try_from(base.checked_add(offset)?).ok();
    if was.is_none() {
        let body = old.get(usize::try_from(p.base.1).ok()?..)?;
        out.writes.chain.push(chain);
        out.writes.lo.push(0);
        out.writes.hi.push(i64::try_from(base).ok()?);
        out.writes.bytes.push(body.to_vec());
    }
    if let Some(seg) = &p.segment {
        let bytes = new.get(seg.at..)?;
        out.writes.chain.push(chain);
        out.writes.lo.push(at(seg.start)?);
        out.writes.hi.push(at(seg.start + bytes.len() as u64)?);
        out.writes.bytes.push(bytes.to_vec());
    }
    for fold in &p.folded {
        out.folds.chain.push(chain);
        out.folds.lo.push(at(fold.start)?);
        out.folds.hi.push(at(fold.end)?);
    }
    Some(Some(Appended {
        delta: p.delta,
        base,
    }))
}

/// What is damaged in a row that stores fields by appending: the field (by
/// index) when one is, and what.
pub(in crate::store::postgres) type Damage = (Option<usize>, String);

/// The segments a row read along (the chains its `chains` names, in chain
/// and stream order), as the three arrays of `checkpoints::cp_cols`.
pub(in crate::store::postgres) struct Segments {
    pub(in crate::store::postgres) chain: Vec<i64>,
    pub(in crate::store::postgres) lo: Vec<i64>,
    pub(in crate::store::postgres) bytes: Vec<Vec<u8>>,
}

/// The record's bytes of a row that stores fields by appending, and its
/// descriptors: each field, in order, from `own` (the row's `data`, the
/// fields stored whole) or from its chain's stream in `segments`. `lens`:
/// the fields' lengths (the record's fields tile its bytes). The error
/// says what is damaged, and in which field (by index) when one is.
pub(in crate::store::postgres) fn rebuild(
    appended: &[u8],
    lens: &[usize],
    own: &[u8],
    segments: &Segments,
) -> Result<(Vec<u8>, Vec<Appended>), Damage> {
    let appended: Vec<Appended> = postcard::from_bytes(appended).map_err(|e| {
        (
            None,
            format!("its appended-field descriptors do not decode: {e}"),
        )
    })?;
    let deltas: Vec<Delta> = appended.iter().map(|a| a.delta.clone()).collect();
    delta::check(&deltas, lens.len()).map_err(|e| (None, e))?;
    let n = segments.chain.len();
    if segments.lo.len() != n || segments.bytes.len() != n {
        return Err((None, "its segment arrays are of different lengths".into()));
    }
    let total: usize = lens.iter().sum();
    let mut data = Vec::with_capacity(total);
    let mut cursor = 0usize;
    for (i, &len) in lens.iter().enumerate() {
        let Some(a) = appended.iter().find(|a| a.delta.field as usize == i) else {
            let bytes = cursor
                .checked_add(len)
                .and_then(|end| own.get(cursor..end))
                .ok_or((Some(i), "its bytes are missing from the row".to_owned()))?;
            data.extend_from_slice(bytes);
            cursor += len;
            continue;
        };
        let bad = |what: String| (Some(i), what);
        let want = a
            .stream_len()
            .filter(|w| (a.delta.header.len() as u64).checked_add(*w) == Some(len as u64))
            .ok_or_else(|| bad("its appended length does not match the field's".into()))?;
        data.extend_from_slice(&a.delta.header);
        let start = data.len();
        let mut next = 0i64;
        let chain = i64::try_from(a.delta.chain).map_err(|_| bad("chain out of range".into()))?;
        for k in (0..n).filter(|&k| segments.chain[k] == chain) {
            if data.len() - start >= want as usize {
                break;
            }
            if segments.lo[k] != next {
                return Err(bad(format!(
                    "a segment of its stream is missing at byte {next}"
                )));
            }
            let bytes = &segments.bytes[k];
            let room = want as usize - (data.len() - start);
            data.extend_from_slice(&bytes[..bytes.len().min(room)]);
            next += bytes.len() as i64;
        }
        if data.len() - start != want as usize {
            return Err(bad(format!(
                "its stream holds {} of its {want} bytes",
                data.len() - start
            )));
        }
    }
    if cursor != own.len() {
        return Err((None, "the row holds more bytes than its fields".into()));
    }
    Ok((data, appended))
}
