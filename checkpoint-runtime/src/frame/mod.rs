//! One execution of a run, as the generated code sees it (re-exported as
//! `checkpoint_runtime::__private`; not a public API).
//!
//! One [`Frame`] exists per execution of a run and is owned by the workflow
//! future. Running forward, the generated code calls [`Frame::save`] (and the
//! suspension methods) at each site; resuming, it reads [`Frame::target`],
//! checks and loads the saved fields into [`Slot`](crate::abi::Slot)s,
//! advances `for` loops, calls [`Frame::resumed`] and [`Frame::arrive`], and
//! continues after the site.
//!
//! - this file: the frame, its accessors and the checks resumed code makes;
//! - [`resume`]: a frame for a claimed checkpoint (the site-compatibility
//!   check, before any user code runs) and the loads of saved fields and
//!   delivered signals;
//! - [`commit`]: taking a checkpoint (and the suspension sites) and storing it.
//!
//! The frame reaches the runtime only through the run's [`RunEnv`](crate::run::RunEnv).

mod commit;
pub(crate) mod join;
pub(crate) mod resume;
mod retry;

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::abi::SiteInfo;
use crate::ctx::Ctx;
use crate::run::{Halt, RunShared};
use crate::schema::SchemaRef;
use crate::store::{CheckpointRecord, SchemaKeys, WakeValue};
use crate::Error;

/// One execution of a run, owned by the workflow future.
pub struct Frame {
    run: Arc<RunShared>,
    sites: &'static [SiteInfo],
    target: Option<u32>,
    checkpoint: Option<Arc<CheckpointRecord>>,
    /// The checkpoint this execution stored last, until the generated code
    /// has decoded the locals it continues with from it (see
    /// [`Frame::begin_reload`]) or the next one is prepared.
    saved: Option<Arc<CheckpointRecord>>,
    wake: Option<WakeValue>,
    resumed: bool,
    size_hint: usize,
    /// Schemas this execution knows the store has.
    stored_schemas: Vec<&'static SchemaRef>,
    /// Schemas the prepared checkpoint refers to that the store may lack.
    new_schemas: Vec<&'static SchemaRef>,
    /// The fields' schemas of the latest checkpoint prepared, and the keys
    /// stored for them (shared by the next checkpoints with the same ones).
    last_schemas: Vec<Option<&'static SchemaRef>>,
    last_keys: SchemaKeys,
    /// A spare buffer for [`Encoder`]'s schemas.
    schema_buf: Vec<Option<&'static SchemaRef>>,
    /// The workflow version executing (recorded when it resumes).
    pub(crate) version: u32,
    /// The checkpoints this execution stored lately, so that the bytes of
    /// one the store let go of are reused by the next (see
    /// [`Frame::buffer`]).
    recent: std::collections::VecDeque<Arc<CheckpointRecord>>,
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("run", &self.run.id)
            .field("workflow", &self.run.workflow)
            .field("target", &self.target)
            .field("seq", &self.run.seq.load(Ordering::Relaxed))
            .finish()
    }
}

/// The error for resumed code that did not reach its site the way it was left
/// (an `if`/`match` around the site took another branch when evaluated again).
pub fn diverged(frame: &Frame, detail: &str) -> Error {
    Error::Diverged {
        workflow: frame.run.workflow.to_owned(),
        run: frame.run.id.to_string(),
        site: frame.site_key(),
        detail: detail.to_owned(),
    }
}

/// The error for a fresh start without input (a broken invariant).
pub fn missing_input(frame: &Frame) -> Error {
    Error::internal(format!(
        "run `{}` of workflow `{}` was started without its input",
        frame.run.id, frame.run.workflow
    ))
}

impl Frame {
    /// The frame of a fresh start (or a restart before the first checkpoint).
    pub(crate) fn start(run: Arc<RunShared>, sites: &'static [SiteInfo]) -> Self {
        Frame::new(run, sites, None, None, None)
    }

    fn new(
        run: Arc<RunShared>,
        sites: &'static [SiteInfo],
        target: Option<u32>,
        checkpoint: Option<Arc<CheckpointRecord>>,
        wake: Option<WakeValue>,
    ) -> Self {
        let size_hint = checkpoint.as_ref().map_or(64, |c| c.data.len());
        Frame {
            run,
            sites,
            target,
            checkpoint,
            saved: None,
            wake,
            resumed: false,
            size_hint,
            stored_schemas: Vec::new(),
            new_schemas: Vec::new(),
            last_schemas: Vec::new(),
            last_keys: SchemaKeys::default(),
            schema_buf: Vec::new(),
            version: 1,
            recent: std::collections::VecDeque::new(),
        }
    }

    /// A clone of the run's [`Ctx`].
    pub fn ctx(&self) -> Ctx {
        Ctx::new(self.run.clone())
    }

    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run.id
    }

    /// The workflow name.
    pub fn workflow(&self) -> &'static str {
        self.run.workflow
    }

    /// The number of the site being resumed (from 1, as the generated code
    /// numbers sites: [`SiteInfo::numbered`], the `#n` of an unlabelled
    /// site's older key); `None` when running forward (fresh start, or after
    /// [`Frame::arrive`]).
    pub fn target(&self) -> Option<u32> {
        self.target
    }

    /// The site numbered `number` (from 1) of this workflow.
    fn site(&self, number: u32) -> Option<&'static SiteInfo> {
        SiteInfo::numbered(self.sites, number)
    }

    fn site_key(&self) -> String {
        self.checkpoint
            .as_ref()
            .map(|c| c.site_key.to_string())
            .or_else(|| Some(self.site(self.target?)?.key.to_owned()))
            .unwrap_or_else(|| "-".to_owned())
    }

    /// The saved position (items already taken) of the `depth`-th enclosing
    /// `for` loop (0 = outermost) of the target site; 0 if there is none.
    pub fn loop_position(&self, depth: usize) -> u64 {
        self.checkpoint
            .as_ref()
            .and_then(|c| c.loop_positions().get(depth).copied())
            .unwrap_or(0)
    }

    /// Checks that the item a resumed `for` loop (the `depth`-th around the
    /// target site, written `described`) now stands at has the fingerprint
    /// of the one it left: refused otherwise, before its body runs. Items
    /// without a fingerprint (not serializable, or an older checkpoint) are
    /// not checked.
    pub fn check_item(&self, depth: usize, fingerprint: u64, described: &str) -> Result<(), Error> {
        let stored = self.checkpoint.as_ref().map_or(0, |c| c.loop_item(depth));
        if stored == 0 || fingerprint == 0 || stored == fingerprint {
            return Ok(());
        }
        Err(self.loop_error(format!(
            "the loop `{described}` resumed at another item (#{}) than the one it left: its iterable yields other items, or another order, when evaluated again (a HashSet or HashMap returned by a function, an iterator over data the body changed); iterate a Vec or BTreeMap, or collect the items into a local before the loop",
            self.loop_position(depth)
        )))
    }

    /// Skips `n` items of `iter`; an error naming the workflow, run and site
    /// if it ends early.
    pub fn advance<I: Iterator>(&self, iter: &mut I, n: u64) -> Result<(), Error> {
        let mut left = n;
        while left > 0 {
            let step = usize::try_from(left).unwrap_or(usize::MAX);
            if iter.nth(step - 1).is_none() {
                return Err(Error::Diverged {
                    workflow: self.run.workflow.to_owned(),
                    run: self.run.id.to_string(),
                    site: self.site_key(),
                    detail: format!(
                        "the loop's iterator ended before reaching the saved position {n}"
                    ),
                });
            }
            left -= step as u64;
        }
        Ok(())
    }

    /// The error for a resumed `for` loop that cannot stand where it was left.
    pub(crate) fn loop_error(&self, detail: String) -> Error {
        Error::Diverged {
            workflow: self.run.workflow.to_owned(),
            run: self.run.id.to_string(),
            site: self.site_key(),
            detail,
        }
    }

    /// The resumed run reached its site: from now on it runs forward.
    pub fn arrive(&mut self) {
        self.target = None;
    }

    /// After a checkpoint was stored, on the uninterrupted path: the
    /// generated code is about to decode the locals it continues with from
    /// that checkpoint's bytes, with the loads a resumed run makes
    /// ([`load`](resume::load) through [`SaveOps`](crate::save::SaveOps)), so
    /// that both paths go on from the same decoded state (docs/exactness.md).
    /// Until [`Frame::end_reload`], the stored checkpoint is the one loads
    /// read.
    pub fn begin_reload(&mut self) {
        self.checkpoint = self.saved.take();
    }

    /// The locals are decoded: running forward again.
    pub fn end_reload(&mut self) {
        self.checkpoint = None;
    }

    /// Stops this execution for good: records why (see the runtime docs) and
    /// never returns; the executor drops the future.
    pub async fn halt(&mut self, err: Error) -> Infallible {
        let with_signal = matches!(self.wake, Some(WakeValue::Signal { .. }));
        self.run.halt(Halt::from_error(err, with_signal));
        std::future::pending().await
    }

    async fn stop(&self, h: Halt) -> Infallible {
        self.run.halt(h);
        std::future::pending().await
    }

    /// Ends, in the store, the wait or sleep this execution's latest
    /// checkpoint stored and that is already due (a deadline passed, a
    /// backoff over, a retry's outcome), so that the run goes on in this
    /// execution rather than being released and claimed again.
    async fn wake_here(&mut self) {
        let woke = self
            .run
            .env
            .store
            .time_out(&self.run.id, &self.run.lease)
            .await;
        if let Err(e) = woke {
            match self.halt(e).await {}
        }
    }
}
