//! A frame for a claimed checkpoint, and the loads the generated code makes
//! while resuming: saved fields into their slots, the delivered signal.
//!
//! [`Frame::resume`] matches the stored site against the code before any
//! user code runs: a site that no longer exists, or holds other fields, other
//! loops or another kind of suspension, refuses the run with
//! [`Error::Incompatible`] instead of resuming it somewhere else.

use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::Frame;
use crate::abi::{FieldPlan, SiteInfo, SiteKind, Slot};
use crate::codec;
use crate::history::Event;
use crate::run::{Halt, RunShared};
use crate::store::{CheckpointRecord, Claimed, Suspend, WakeValue};
use crate::type_names::{readable_pair, readable_type_name};
use crate::Error;

/// Decodes field `field` of the checkpoint being resumed into `slot`.
pub fn load<T: DeserializeOwned>(
    slot: &mut Slot<T>,
    frame: &Frame,
    field: usize,
) -> Result<(), Error> {
    let cp = frame.checkpoint.as_deref().ok_or_else(|| {
        Error::internal(format!(
            "run `{}`: field #{field} loaded while not resuming",
            frame.run.id
        ))
    })?;
    let name = cp
        .fields
        .get(field)
        .map(|f| f.name.to_string())
        .unwrap_or_else(|| format!("#{field}"));
    let decode_err = |detail: String| Error::Decode {
        workflow: frame.run.workflow.to_owned(),
        run: frame.run.id.to_string(),
        site: cp.site_key.to_string(),
        field: name.clone(),
        detail: detail.into(),
    };
    let bytes = cp.field_bytes(field).ok_or_else(|| {
        decode_err("the checkpoint has no such field (or its record is corrupt)".to_owned())
    })?;
    // postcard bytes carry no field names or tags: a type whose definition
    // changed under the same name (two fields of one type swapped, say)
    // could decode into other values. Its serde format, stored with the
    // field, tells.
    if let (Some(stored), Some(now)) = (cp.schema_key(field), crate::schema::schema_of::<T>()) {
        if stored != now.key {
            return Err(Error::Incompatible {
                workflow: frame.run.workflow.to_owned(),
                run: frame.run.id.to_string(),
                site: cp.site_key.to_string(),
                field: name,
                detail: format!(
                    "the serde format of `{}` is not the one the checkpoint was saved with \
                     (a field of it added, removed, renamed, reordered or retyped): its \
                     bytes would not mean the same values",
                    readable_type_name(std::any::type_name::<T>())
                )
                .into(),
            });
        }
    }
    match codec::decode::<T>(bytes) {
        Ok((value, [])) => {
            slot.fill(value);
            Ok(())
        }
        Ok((_, rest)) => Err(decode_err(format!(
            "{} trailing byte(s) after a value of type `{}`",
            rest.len(),
            readable_type_name(std::any::type_name::<T>())
        ))),
        Err(e) => Err(decode_err(format!(
            "{e} (expected a value of type `{}`)",
            readable_type_name(std::any::type_name::<T>())
        ))),
    }
}

fn delivered_signal(frame: &Frame) -> Result<Option<(&str, &[u8])>, Error> {
    match &frame.wake {
        Some(WakeValue::Signal { name, payload }) => Ok(Some((name, payload))),
        Some(WakeValue::TimedOut) => Ok(None),
        None => Err(Error::internal(format!(
            "run `{}`: a signal was loaded but none was delivered to this site",
            frame.run.id
        ))),
    }
}

fn decode_signal<T: DeserializeOwned>(
    frame: &Frame,
    name: &str,
    payload: &[u8],
) -> Result<T, Error> {
    serde_json::from_slice(payload).map_err(|e| Error::SignalPayload {
        run: frame.run.id.to_string(),
        signal: name.to_owned(),
        detail: format!(
            "{e} (expected `{}`)",
            readable_type_name(std::any::type_name::<T>())
        ),
    })
}

/// Decodes the signal delivered to a resumed `wait_for` site into `slot`.
pub fn load_signal<T: DeserializeOwned>(slot: &mut Slot<T>, frame: &Frame) -> Result<(), Error> {
    if frame.run.probe {
        // No signal is delivered to a probe; the payload is checked when
        // one is sent. The slot is taken only after `resumed`, never here.
        return Ok(());
    }
    frame.note_resumed_payload_type::<T>();
    match delivered_signal(frame)? {
        Some((name, payload)) => {
            slot.fill(decode_signal(frame, name, payload)?);
            Ok(())
        }
        None => Err(Error::internal(format!(
            "run `{}`: a `wait_for` site was resumed by a timeout",
            frame.run.id
        ))),
    }
}

/// Decodes the outcome of a resumed `wait_for_timeout` site into `slot`:
/// `Some(payload)`, or `None` when the deadline passed.
pub fn load_signal_timeout<T: DeserializeOwned>(
    slot: &mut Slot<Option<T>>,
    frame: &Frame,
) -> Result<(), Error> {
    if frame.run.probe {
        return Ok(());
    }
    frame.note_resumed_payload_type::<T>();
    slot.fill(match delivered_signal(frame)? {
        Some((name, payload)) => Some(decode_signal(frame, name, payload)?),
        None => None,
    });
    Ok(())
}

fn incompatible(run: &RunShared, site: &str, field: &str, detail: String) -> Halt {
    Halt::Park(Error::Incompatible {
        workflow: run.workflow.to_owned(),
        run: run.id.to_string(),
        site: site.to_owned(),
        field: field.to_owned(),
        detail: detail.into(),
    })
}

/// Whether checkpoint `cp` fits `site` as the code has it now: the same
/// number of enclosing loops, the same saved fields, the same kind of site.
fn check_site(
    run: &RunShared,
    sites: &[SiteInfo],
    site: &SiteInfo,
    cp: &CheckpointRecord,
) -> Result<(), Halt> {
    let positions = cp.loop_positions().len();
    if positions != site.loops as usize {
        return Err(incompatible(
            run,
            site.key,
            "-",
            format!(
                "the checkpoint holds {positions} loop position(s), the site is now inside {} `for` loop(s)",
                site.loops
            ),
        ));
    }
    // What the code has before this site against what the run went through
    // (source order; stored by suspension sites): a wait or sleep added
    // before it would be skipped by the resumed run, and a site moved from
    // before it to after it would be run again, where the code run alone
    // would do neither. Refused. (Sites removed, or checkpoints added,
    // change nothing the run computes.)
    if let Some(passed) = cp.suspend.as_ref().and_then(Suspend::sites_before) {
        let is_passed = |code_key: &str| {
            let site = sites.iter().find(|s| s.key == code_key);
            passed.iter().any(|p| {
                p == code_key || site.is_some_and(|s| s.renamed_from.contains(&p.as_str()))
            })
        };
        let skipped = site.sites_before.iter().find(|key| {
            let suspends = sites
                .iter()
                .find(|s| s.key == **key)
                .is_some_and(|s| s.kind != SiteKind::Checkpoint);
            suspends && !is_passed(key)
        });
        if let Some(key) = skipped {
            return Err(incompatible(
                run,
                site.key,
                "-",
                format!(
                    "the code now suspends at `{key}` before this site, where the run never \
                     stopped: resumed here it would skip it"
                ),
            ));
        }
        let at = sites
            .iter()
            .position(|s| std::ptr::eq(s, site))
            .unwrap_or(0);
        let moved = sites[at + 1..].iter().find(|s| {
            passed
                .iter()
                .any(|p| *p == s.key || s.renamed_from.contains(&p.as_str()))
        });
        if let Some(moved) = moved {
            return Err(incompatible(
                run,
                site.key,
                "-",
                format!(
                    "site `{}` is now after this site, but the run went through it before \
                     stopping here: resumed here it would run it again",
                    moved.key
                ),
            ));
        }
    }
    let stored: Vec<&str> = cp.fields.iter().map(|f| &*f.name).collect();
    // With migrations the generated code matches fields by name
    // (`Frame::check_migrated_fields`).
    if !site.migrated && stored.as_slice() != site.fields {
        let field = stored
            .iter()
            .zip(site.fields)
            .find(|(a, b)| **a != **b)
            .map(|(a, _)| (*a).to_owned())
            .or_else(|| site.fields.get(stored.len()).map(|f| (*f).to_owned()))
            .or_else(|| stored.get(site.fields.len()).map(|f| (*f).to_owned()))
            .unwrap_or_else(|| "-".to_owned());
        return Err(incompatible(
            run,
            site.key,
            &field,
            format!(
                "the checkpoint saved fields [{}], the code now saves [{}]",
                stored.join(", "),
                site.fields.join(", ")
            ),
        ));
    }
    let kind_ok = matches!(
        (site.kind, &cp.suspend),
        (SiteKind::Checkpoint, None)
            | (SiteKind::WaitFor, Some(Suspend::Waiting { .. }))
            | (SiteKind::WaitForTimeout, Some(Suspend::Waiting { .. }))
            | (SiteKind::Sleep, Some(Suspend::Sleeping { retry: None, .. }))
            | (
                SiteKind::Retry,
                Some(Suspend::Sleeping { retry: Some(_), .. })
            )
            | (
                SiteKind::Join | SiteKind::JoinAll,
                Some(Suspend::Joining { .. })
            )
    );
    if !kind_ok {
        return Err(incompatible(
            run,
            site.key,
            "-",
            format!(
                "the site is now a {:?} site but the checkpoint was taken at a different kind of site",
                site.kind
            ),
        ));
    }
    // Another wait taking this position (one inserted before it, say) must
    // not be handed the signal the run waits for.
    if let (Some(code), Some(Suspend::Waiting { signal, .. })) = (site.signal, &cp.suspend) {
        if code != signal {
            return Err(incompatible(
                run,
                site.key,
                "-",
                format!(
                    "the run waits for signal `{signal}` here, the code's wait at this site is \
                     for `{code}`"
                ),
            ));
        }
    }
    Ok(())
}

impl Frame {
    /// Notes the payload type of the wait site being resumed (see
    /// [`crate::signal_types`]).
    fn note_resumed_payload_type<T: DeserializeOwned>(&self) {
        if let Some(info) = self.target.and_then(|t| self.site(t)) {
            crate::signal_types::note::<T>(self.run.workflow, info.key);
        }
    }

    /// The frame of a run resumed from its claimed checkpoint `cp`, or why
    /// it cannot be: the stored site is matched against the code (`sites`)
    /// before any user code runs. A site that no longer exists, or one that
    /// now saves other fields, sits inside another number of loops or is
    /// another kind of site refuses the run ([`Error::Incompatible`]); a wait
    /// site resumed without a delivered signal goes back to waiting.
    pub(crate) fn resume(
        run: Arc<RunShared>,
        sites: &'static [SiteInfo],
        cp: Arc<CheckpointRecord>,
        claimed: &Claimed,
    ) -> Result<Frame, Halt> {
        let number = SiteInfo::number_taking(sites, &cp.site_key);
        let Some(site) = number.and_then(|n| SiteInfo::numbered(sites, n)) else {
            let known: Vec<&str> = sites.iter().map(|s| s.key).collect();
            return Err(incompatible(
                &run,
                &cp.site_key,
                "-",
                format!(
                    "no checkpoint site with this key exists in the code any more (sites now: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        };
        check_site(&run, sites, site, &cp)?;
        let wake = match site.kind {
            SiteKind::WaitFor | SiteKind::WaitForTimeout | SiteKind::Join | SiteKind::JoinAll => {
                let wake = claimed
                    .run
                    .wake
                    .as_ref()
                    .filter(|w| w.seq == cp.seq)
                    .map(|w| w.value.clone());
                match (site.kind, wake) {
                    // A probe checks the saved fields of a run still waiting.
                    (_, None) if run.probe => None,
                    (
                        SiteKind::WaitFor | SiteKind::Join | SiteKind::JoinAll,
                        Some(WakeValue::TimedOut),
                    )
                    | (_, None) => {
                        // Nothing to resume with: go back to waiting.
                        return Err(Halt::RejectSignal(
                            "no signal was delivered to this wait site".to_owned(),
                        ));
                    }
                    (_, wake) => wake,
                }
            }
            _ => None,
        };
        Ok(Frame::new(run, sites, number, Some(cp), wake))
    }

    /// Checks the names and types (`std::any::type_name`) of the fields the
    /// code restores at the target site against the loaded checkpoint's.
    pub fn check_fields(&self, expected: &[(&'static str, &'static str)]) -> Result<(), Error> {
        let cp = self.resuming("check_fields")?;
        let mismatch = |field: &str, detail: String| self.field_mismatch(cp, field, detail);
        for (i, (name, ty)) in expected.iter().enumerate() {
            let Some(stored) = cp.fields.get(i) else {
                return Err(mismatch(
                    name,
                    format!(
                        "the code restores `{name}: {}` but the checkpoint has no field #{i}",
                        readable_type_name(ty)
                    ),
                ));
            };
            if stored.name != *name {
                return Err(mismatch(
                    name,
                    format!(
                        "field #{i} is `{}` in the checkpoint but `{name}` in the code",
                        stored.name
                    ),
                ));
            }
            if stored.type_name != *ty {
                let (was, now) = readable_pair(&stored.type_name, ty);
                return Err(mismatch(
                    name,
                    format!("stored as `{was}`, the code now has `{now}`"),
                ));
            }
        }
        match cp.fields.get(expected.len()) {
            Some(extra) => Err(self.dropped_field(cp, extra)),
            None => Ok(()),
        }
    }

    /// A field of `cp` that does not fit the code: the run is parked.
    fn field_mismatch(&self, cp: &CheckpointRecord, field: &str, detail: String) -> Error {
        Error::Incompatible {
            workflow: self.run.workflow.to_owned(),
            run: self.run.id.to_string(),
            site: cp.site_key.to_string(),
            field: field.to_owned(),
            detail: detail.into(),
        }
    }

    /// A stored field that no local of the code takes.
    fn dropped_field(&self, cp: &CheckpointRecord, extra: &crate::store::FieldRecord) -> Error {
        self.field_mismatch(
            cp,
            &extra.name,
            format!(
                "the checkpoint holds field `{}: {}` that the code no longer restores",
                extra.name,
                readable_type_name(&extra.type_name)
            ),
        )
    }

    /// The checkpoint being resumed; an internal error when not resuming.
    fn resuming(&self, what: &str) -> Result<&CheckpointRecord, Error> {
        self.checkpoint.as_deref().ok_or_else(|| {
            Error::internal(format!(
                "run `{}`: {what} called while not resuming",
                self.run.id
            ))
        })
    }

    /// The position of the stored field the code's field `name` is loaded
    /// from: the one of that name, else the one of its old name
    /// (`renamed_from`), if the checkpoint has one.
    pub fn stored_field(&self, name: &str, renamed_from: Option<&str>) -> Option<usize> {
        let cp = self.checkpoint.as_deref()?;
        let at = |n: &str| cp.fields.iter().position(|f| f.name == n);
        at(name).or_else(|| renamed_from.and_then(at))
    }

    /// The stored type (`std::any::type_name`) of stored field `at`.
    pub fn stored_type(&self, at: usize) -> Option<&str> {
        let cp = self.checkpoint.as_deref()?;
        cp.fields.get(at).map(|f| &*f.type_name)
    }

    /// The error for a field a checked plan said was there (not expected:
    /// [`Frame::check_migrated_fields`] refuses such a checkpoint first).
    pub fn field_missing(&self, name: &str) -> Error {
        Error::internal(format!(
            "run `{}`: field `{name}` is not in the checkpoint being resumed",
            self.run.id
        ))
    }

    /// Checks the fields of a site with migrations against the loaded
    /// checkpoint, by name: each field of the code is stored under its name
    /// or old name, as its type or its `from` type, or may be missing; and
    /// every stored field is taken by one of them.
    pub fn check_migrated_fields(&self, plans: &[FieldPlan]) -> Result<(), Error> {
        let cp = self.resuming("check_migrated_fields")?;
        let mismatch = |field: &str, detail: String| self.field_mismatch(cp, field, detail);
        let mut taken = vec![false; cp.fields.len()];
        for plan in plans {
            let Some(at) = self.stored_field(plan.name, plan.renamed_from) else {
                if plan.may_be_missing {
                    continue;
                }
                let also = plan
                    .renamed_from
                    .map(|old| format!(" (nor `{old}`)"))
                    .unwrap_or_default();
                return Err(mismatch(
                    plan.name,
                    format!(
                        "the code restores `{}: {}` but the checkpoint has no such field{also}; \
                         `#[migrate(default)]` or `#[migrate(value = ..)]` on its `let` gives one",
                        plan.name,
                        readable_type_name(plan.type_name)
                    ),
                ));
            };
            if std::mem::replace(&mut taken[at], true) {
                return Err(mismatch(
                    plan.name,
                    format!(
                        "stored field `{}` would be loaded into two locals",
                        cp.fields[at].name
                    ),
                ));
            }
            let stored = &*cp.fields[at].type_name;
            if stored != plan.type_name && plan.from_type != Some(stored) {
                let (was, now) = readable_pair(stored, plan.type_name);
                let hint = match plan.from_type {
                    Some(from) => format!(
                        " (its migration converts from `{}`)",
                        readable_type_name(from)
                    ),
                    None => {
                        format!("; `#[migrate(from = {was}, with = ..)]` on its `let` converts it")
                    }
                };
                return Err(mismatch(
                    plan.name,
                    format!("stored as `{was}`, the code now has `{now}`{hint}"),
                ));
            }
        }
        match taken.iter().position(|t| !t) {
            Some(at) => Err(self.dropped_field(cp, &cp.fields[at])),
            None => Ok(()),
        }
    }

    /// Called once after all loads succeeded and before any user code runs:
    /// records that the run was resumed. A no-op on a fresh start.
    pub async fn resumed(&mut self) {
        if self.run.probe {
            // Every load and check passed: the code fits. Nothing runs.
            self.run.halt(Halt::Fits);
            std::future::pending::<()>().await;
        }
        if self.resumed {
            return;
        }
        self.resumed = true;
        let Some(cp) = &self.checkpoint else { return };
        crate::observe::resumed(cp.seq);
        let event = Event::Resumed {
            worker: self.run.env.worker.to_string(),
            from_seq: cp.seq,
            version: self.version,
        };
        // History is informational: a failure to record it must not stop the run.
        let _ = self.run.env.store.append_event(&self.run.id, event).await;
        if let Some(WakeValue::Signal { name, .. }) = &self.wake {
            let event = Event::SignalConsumed { name: name.clone() };
            let _ = self.run.env.store.append_event(&self.run.id, event).await;
        }
    }
}
