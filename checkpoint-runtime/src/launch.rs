//! From a claimed run to a workflow future: a [`Launcher`] per registered
//! workflow, type-erased so the executor can hold them by name. A launch
//! decodes the input (fresh start) or asks the frame to resume from the
//! claimed checkpoint, and encodes the workflow's output when it returns.

use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::frame::Frame;
use crate::run::{Halt, RunEnv, RunShared};
use crate::store::{CheckpointRecord, Claimed, Lease, RunRecord};
use crate::workflow::Workflow;
use crate::Error;

/// What a launcher makes of a claimed run.
pub(crate) enum Launch {
    Run(BoxFuture<'static, Result<Finished, Error>>),
    Refuse(Halt),
}

/// A finished execution's output, encoded as JSON, and for a `Result::Err`
/// output the error as text (the run is then `Failed` with it).
pub(crate) struct Finished {
    pub(crate) output: Arc<[u8]>,
    pub(crate) error: Option<String>,
}

/// Type-erased constructor of workflow executions, registered by name.
pub(crate) trait Launcher: Send + Sync {
    fn launch(&self, run: Arc<RunShared>, claimed: &Claimed) -> Launch;

    /// The workflow's type: two registrations of one name with the same
    /// type are the same code.
    fn workflow_type(&self) -> std::any::TypeId;

    /// The workflow's version (see [`Workflow::VERSION`]).
    fn version(&self) -> u32;

    /// Whether this code resumes `run` from `checkpoint` (its latest), as a
    /// claim would: every resume check and field load, stopped before any
    /// user code runs, writing nothing (see [`RunShared::probe`]). A run
    /// without a checkpoint is checked for its input. `Err` is the refusal.
    fn probe(
        &self,
        env: Arc<RunEnv>,
        run: &RunRecord,
        checkpoint: Option<Arc<CheckpointRecord>>,
    ) -> BoxFuture<'static, Result<(), Error>>;
}

pub(crate) struct WorkflowLauncher<W: Workflow>(W, PhantomData<fn() -> W>);

impl<W: Workflow> WorkflowLauncher<W> {
    pub(crate) fn new(wf: W) -> Self {
        WorkflowLauncher(wf, PhantomData)
    }
}

impl<W: Workflow> Launcher for WorkflowLauncher<W> {
    fn workflow_type(&self) -> std::any::TypeId {
        std::any::TypeId::of::<W>()
    }

    fn version(&self) -> u32 {
        W::VERSION
    }

    fn probe(
        &self,
        env: Arc<RunEnv>,
        rec: &RunRecord,
        checkpoint: Option<Arc<CheckpointRecord>>,
    ) -> BoxFuture<'static, Result<(), Error>> {
        let Some(cp) = checkpoint else {
            // A fresh start runs user code at once: only the input is checked.
            let input = serde_json::from_slice::<W::Input>(&rec.input)
                .map(drop)
                .map_err(|e| input_error::<W>(&rec.id, e));
            return Box::pin(std::future::ready(input));
        };
        let lease = Lease {
            worker: env.worker.clone(),
            instance: Arc::from("compatibility-probe"),
            epoch: rec.epoch,
        };
        let mut shared = RunShared::new(&rec.id, W::NAME, env, lease, rec.attempt, rec.latest_seq);
        shared.probe = true;
        let run = Arc::new(shared);
        let claimed = Claimed {
            run: rec.clone(),
            lease: run.lease.clone(),
            checkpoint: Some(cp.clone()),
        };
        let launch = match Frame::resume(run.clone(), W::SITES, cp, &claimed) {
            Ok(frame) => Ok(self.0.run(frame, None)),
            Err(halt) => Err(halt),
        };
        Box::pin(async move {
            let halt = match launch {
                Err(halt) => halt,
                Ok(fut) => {
                    let mut fut = std::panic::AssertUnwindSafe(fut).catch_unwind();
                    tokio::select! {
                        biased;
                        _ = run.halted() => run.take_halt().unwrap_or(Halt::Fits),
                        // A resumed body halts (`Fits`) before its user code;
                        // one that ends or panics first is not a resume.
                        _ = &mut fut => Halt::Failed(Error::internal(format!(
                            "run `{}`: the compatibility probe ran past the resume checks",
                            run.id
                        ))),
                    }
                }
            };
            match halt {
                // A wait site with nothing delivered would wait again.
                Halt::Fits | Halt::RejectSignal(_) => Ok(()),
                Halt::Park(e) | Halt::Failed(e) | Halt::Retry(e) => Err(e),
                other => Err(Error::internal(format!(
                    "run `{}`: the compatibility probe stopped with {other:?}",
                    run.id
                ))),
            }
        })
    }

    fn launch(&self, run: Arc<RunShared>, claimed: &Claimed) -> Launch {
        let wf = self.0;
        let Some(cp) = claimed.checkpoint.clone() else {
            // Fresh start (or a restart before the first checkpoint).
            let input: W::Input = match serde_json::from_slice(&claimed.run.input) {
                Ok(i) => i,
                Err(e) => return Launch::Refuse(Halt::Park(input_error::<W>(&run.id, e))),
            };
            crate::observe::started();
            let fut = wf.run(Frame::start(run.clone(), W::SITES), Some(input));
            return Launch::Run(finish_future::<W>(run, fut));
        };
        match Frame::resume(run.clone(), W::SITES, cp, claimed) {
            Ok(mut frame) => {
                frame.version = W::VERSION;
                Launch::Run(finish_future::<W>(run, wf.run(frame, None)))
            }
            Err(halt) => Launch::Refuse(halt),
        }
    }
}

/// The error for an input that does not decode as `W::Input`.
fn input_error<W: Workflow>(run: &str, e: serde_json::Error) -> Error {
    Error::Decode {
        workflow: W::NAME.to_owned(),
        run: run.to_owned(),
        site: "<input>".to_owned(),
        field: "input".to_owned(),
        detail: e.to_string().into(),
    }
}

fn finish_future<W: Workflow>(
    run: Arc<RunShared>,
    fut: BoxFuture<'static, W::Output>,
) -> BoxFuture<'static, Result<Finished, Error>> {
    Box::pin(async move {
        let out = fut.await;
        encode_output::<W>(&out, &run.id)
    })
}

/// Encodes an output as JSON; for a `Result::Err` output (the workflow says,
/// see [`Workflow::output_error`]) also renders the error.
fn encode_output<W: Workflow>(out: &W::Output, run: &str) -> Result<Finished, Error> {
    let bytes = serde_json::to_vec(out).map_err(|e| Error::Encode {
        workflow: W::NAME.to_owned(),
        run: run.to_owned(),
        site: "<output>".to_owned(),
        field: "output".to_owned(),
        detail: e.to_string().into(),
    })?;
    Ok(Finished {
        output: bytes.into(),
        error: W::output_error(out),
    })
}
