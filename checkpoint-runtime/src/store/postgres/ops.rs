//! The writes of [`PostgresStore`], generic: each opens a transaction,
//! loads the run's row (locked, `FOR NO KEY UPDATE`, and fenced by its
//! lease where the write presents one), calls one rule of [`rules`], and
//! applies the change it returns with [`apply`](super::apply) (the only
//! place this backend writes a transition). The frequent writes (a
//! checkpoint save, the start of a top-level run, an end) go through the
//! fused statements of [`fused`](super::fused) first, which write what
//! these write in one round trip, and fall back to the generic save and
//! end ([`locked`](super::locked)) to be refused with the errors of a
//! fenced write, or for the cases they leave to them (a join, a child's
//! end). The claim is in [`claim`](super::claim), the reads in
//! [`reads`](super::reads).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use super::apply::{self, apply, Row};
use super::fused::create_batch::{self, NewTop};
use super::fused::finish::{self, Ending};
use super::locked::save_joining;
use super::tables::checkpoints::{self, load_seq, segments};
use super::tables::history;
use super::tables::runs::{fenced, load, lock_run, must_exist};
use super::tables::signals;
use super::{children, notify, PostgresStore};
use crate::history::Event;
use crate::store::rules::{self, check_lease};
use crate::store::{
    CheckpointRecord, Created, Lease, NewRun, Outcome, Release, SignalRecord, Suspend,
};
use crate::Error;

impl PostgresStore {
    /// A top-level run goes through the batched starts
    /// ([`create_batch`]: one statement with the starts made at the same
    /// time); a child through `rules::create` applied here, its parent's
    /// row locked and its running children counted first when it is
    /// created with a bound (`rules::counts_siblings`).
    pub(super) async fn do_create(&self, run: NewRun) -> Result<Created, Error> {
        if run.parent.is_none() {
            let at = SystemTime::now();
            let (rec, change) = rules::create(run, 0, at);
            let new = NewTop { rec, change, at };
            let pool = &self.pool;
            let created = self
                .creates
                .run(new, |new| async move {
                    let mut conn = pool.get().await?;
                    create_batch::create_alone(&mut conn, &new).await
                })
                .await?;
            if matches!(created, Created::New) {
                self.bump();
            }
            return Ok(created);
        }
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let running = match &run.parent {
            Some(parent) if rules::counts_siblings(&run) => {
                children::lock_parent_and_count(&mut cx, parent).await?
            }
            _ => 0,
        };
        let now = SystemTime::now();
        let (rec, change) = rules::create(run, running, now);
        if !apply(&mut cx, Row::Insert(&rec), change, now).await? {
            let existing = load(&mut cx, &rec.id)
                .await?
                .ok_or_else(|| Error::internal(format!("run `{}` vanished", rec.id)))?;
            return Ok(Created::Existing(Box::new(existing)));
        }
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(Created::New)
    }

    pub(super) async fn do_release(
        &self,
        id: &str,
        lease: &Lease,
        how: Release,
    ) -> Result<(), Error> {
        self.heads.forget(id);
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = lock_run(&mut cx, id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let (change, wakes) = match check_lease(id, &rec, lease) {
            Ok(()) => (rules::release(&mut rec, how, now), true),
            Err(Error::Cancelled { .. }) => (rules::release_cancelled(&mut rec), false),
            Err(e) => return Err(e),
        };
        apply(&mut cx, Row::Update(&rec), change, now).await?;
        if wakes {
            notify::notify(&mut cx, &self.schema).await?;
        }
        cx.commit().await?;
        if wakes {
            self.bump();
        }
        Ok(())
    }

    /// The fused save first ([`fused::save`](super::fused::save): one
    /// statement in autocommit, one round trip and one WAL flush; saves of
    /// several runs waiting at the same time share one, see
    /// `fused::group_commit`). A save it refuses (no row back) is done
    /// again as one transaction around the locked row (`locked::save_locked`),
    /// which tells why with the errors of every fenced write (lost lease,
    /// cancelled, unknown run, wrong seq, damaged row), or saves a row
    /// that the statement leaves to it. So are values the statement cannot
    /// bind (too large for a `bigint`, a NUL in the lease's worker id) and
    /// a statement the server refuses for its data (SQLSTATE class 22,
    /// e.g. a NUL in a text): the error is then the one the fenced save
    /// gives, after its checks. A join's checkpoint is saved by
    /// [`save_joining`] alone.
    pub(super) async fn do_save(
        &self,
        lease: &Lease,
        cp: Arc<CheckpointRecord>,
        keep: Option<usize>,
    ) -> Result<(), Error> {
        if let Some(Suspend::Joining {
            children, token, ..
        }) = &cp.suspend
        {
            // Not batched: the join locks its children first (see `children`).
            self.heads.forget(&cp.run);
            let mut conn = self.pool.get().await?;
            return save_joining(&mut conn, lease, &cp, keep, children, token).await;
        }
        // Fields that extend their previous version are stored as what
        // they appended (see `segments`).
        let plan = self
            .heads
            .before(lease, &cp)
            .and_then(|head| segments::plan(&cp, &head))
            .map(Arc::new);
        let saved = self.group.save(lease, cp.clone(), keep, plan.clone()).await;
        let stored = match &saved {
            Ok(true) => Ok(plan.as_deref()),
            Ok(false) => Ok(None),
            Err(_) => Err(()),
        };
        if let Ok(plan) = stored {
            let bytes = plan.map_or(cp.data.len(), segments::RowPlan::bytes);
            self.written.fetch_add(bytes as u64, Ordering::Relaxed);
        }
        self.heads.saved(lease, &cp, stored);
        saved.map(|_| ())
    }

    pub(super) async fn do_take_signal(
        &self,
        id: &str,
        lease: &Lease,
        name: &str,
    ) -> Result<Option<SignalRecord>, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = fenced(&mut cx, id, lease).await?;
        let Some(sig) = signals::consume(&mut cx, id, name).await? else {
            return Ok(None);
        };
        let now = SystemTime::now();
        let change = rules::consume_signal(&mut rec, &sig, now);
        apply(&mut cx, Row::Update(&rec), change, now).await?;
        cx.commit().await?;
        Ok(Some(sig))
    }

    pub(super) async fn do_time_out(&self, id: &str, lease: &Lease) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = fenced(&mut cx, id, lease).await?;
        let now = SystemTime::now();
        let change = rules::time_out(&mut rec, now);
        apply(&mut cx, Row::Update(&rec), change, now).await?;
        cx.commit().await
    }

    pub(super) async fn do_reject(
        &self,
        id: &str,
        lease: &Lease,
        reason: String,
    ) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = fenced(&mut cx, id, lease).await?;
        let now = SystemTime::now();
        let latest = load_seq(&mut cx, id, &rec.workflow, rec.latest_seq).await?;
        let change = rules::reject_signal(&mut rec, reason, latest.as_deref(), now)?;
        apply(&mut cx, Row::Update(&rec), change, now).await?;
        cx.commit().await
    }

    /// Through the batched ends ([`finish`]: a top-level run's end in one
    /// round trip, or with others that end at the same time), which leave
    /// the rest to `locked::finish_locked`.
    pub(super) async fn do_finish(
        &self,
        id: &str,
        lease: &Lease,
        outcome: Outcome,
    ) -> Result<(), Error> {
        self.heads.forget(id);
        let end = Ending {
            id: id.to_owned(),
            lease: lease.clone(),
            outcome,
            at: SystemTime::now(),
        };
        let pool = &self.pool;
        self.finishes
            .run(end, |end| async move {
                let mut conn = pool.get().await?;
                finish::finish_alone(&mut conn, &end).await
            })
            .await?;
        self.bump();
        Ok(())
    }

    /// Cancels run `id`; applying the cancel cancels its unfinished
    /// descendants, whose rows are locked first (see [`children`] for the
    /// lock order). A run that has ended is left as it is, and so are its
    /// descendants: `false`.
    pub(super) async fn do_cancel(&self, id: &str) -> Result<bool, Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        children::lock_descendants(&mut cx, id).await?;
        let mut rec = lock_run(&mut cx, id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let Some(change) = rules::cancel(&mut rec, now) else {
            return Ok(false);
        };
        apply(&mut cx, Row::Update(&rec), change, now).await?;
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(true)
    }

    pub(super) async fn do_retry(&self, id: &str) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = lock_run(&mut cx, id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let change = rules::retry(&mut rec, now)?;
        apply(&mut cx, Row::Update(&rec), change, now).await?;
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(())
    }

    /// `rules::request_cancel` on the locked row, and the request itself in
    /// its column (the one write of it: no other write touches
    /// `cancel_request`).
    pub(super) async fn do_request_cancel(
        &self,
        id: &str,
        req: crate::store::CancelRequest,
    ) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let mut rec = lock_run(&mut cx, id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let change = rules::request_cancel(&mut rec, req, now)?;
        let text = rec
            .cancel
            .as_ref()
            .map(crate::store::CancelRequest::to_json);
        cx.execute(
            "UPDATE cp_runs SET cancel_request = $2 WHERE id = $1",
            &[&id, &text],
        )
        .await?;
        apply(&mut cx, Row::Update(&rec), change, now).await?;
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(())
    }

    /// The run's row is locked against an end that would otherwise come
    /// between the rule's check and the signal's insert.
    pub(super) async fn do_put_signal(
        &self,
        id: &str,
        name: &str,
        payload: &[u8],
    ) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        let rec = lock_run(&mut cx, id)
            .await?
            .ok_or_else(|| Error::unknown_run(id))?;
        let now = SystemTime::now();
        let change = rules::accept_signal(&rec, name, payload.to_vec(), now)?;
        apply(&mut cx, Row::Update(&rec), change, now).await?;
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(())
    }

    /// An event the caller built (`Store::append_event`), not a transition.
    pub(super) async fn do_append_event(&self, id: &str, event: &Event) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        must_exist(&mut cx, id).await?;
        history::insert(&mut cx, id, SystemTime::now(), event).await?;
        cx.commit().await
    }

    pub(super) async fn do_fork(&self, from: &str, seq: u64, new_id: &str) -> Result<(), Error> {
        let mut conn = self.pool.get().await?;
        let mut cx = conn.begin().await?;
        if cx
            .query_opt("SELECT 1 FROM cp_runs WHERE id = $1", &[&new_id])
            .await?
            .is_some()
        {
            return Err(Error::AlreadyExists {
                run: new_id.to_owned(),
            });
        }
        let src = load(&mut cx, from)
            .await?
            .ok_or_else(|| Error::unknown_run(from))?;
        let unknown = || Error::UnknownCheckpoint {
            run: from.to_owned(),
            seq,
        };
        let cp = load_seq(&mut cx, from, &src.workflow, seq)
            .await?
            .ok_or_else(unknown)?;
        let now = SystemTime::now();
        let (rec, copy, change) = rules::fork(from, &cp, new_id, src.workflow, src.input, now);
        if !apply(&mut cx, Row::Insert(&rec), change, now).await? {
            return Err(Error::AlreadyExists {
                run: new_id.to_owned(),
            });
        }
        checkpoints::insert(&mut cx, &copy).await?;
        // The fork joins the same children (they are not run again).
        if let Some(Suspend::Joining {
            children, token, ..
        }) = &copy.suspend
        {
            let live = children::lock_children(&mut cx, children).await?;
            apply::join(&mut cx, new_id, children, token, &live, now).await?;
        }
        notify::notify(&mut cx, &self.schema).await?;
        cx.commit().await?;
        self.bump();
        Ok(())
    }
}
