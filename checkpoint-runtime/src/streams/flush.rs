//! Storing what an execution emitted: before each checkpoint (with the
//! progress, so both are durable with it), in the background soon after
//! an emit (items only), and before the run's end; and, before a resumed
//! execution runs, discarding what the interrupted one stored since the
//! checkpoint it resumes from.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::run::RunShared;
use crate::store::{Claimed, StreamWrite, STREAM_PAGE_MAX};
use crate::Error;

/// Stores the pending items of `run` (and, with `progress`, its progress),
/// in order, in batches of at most [`STREAM_PAGE_MAX`]. Fenced by the
/// run's lease.
pub(crate) async fn flush(run: &RunShared, progress: bool) -> Result<(), Error> {
    let emitted = &run.emitted;
    let _writing = emitted.flush_lock.lock().await;
    let mut progress = if progress {
        emitted.take_progress()
    } else {
        None
    };
    loop {
        let items = emitted.batch(STREAM_PAGE_MAX);
        if items.is_empty() && progress.is_none() {
            return Ok(());
        }
        let n = items.len();
        let write = StreamWrite {
            items,
            progress: progress.clone(),
        };
        if let Err(e) = run.env.store.write_stream(&run.id, &run.lease, write).await {
            if let Some(p) = progress {
                emitted.restore_progress(p);
            }
            return Err(e);
        }
        progress = None;
        emitted.stored(n);
    }
}

/// How long a background flush waits after the emit that started it.
const GATHER: Duration = Duration::from_millis(10);

/// After an emit: stores the pending items soon, in a task of its own,
/// unless one is under way (it stores them too). Without a tokio runtime
/// the items wait for the next checkpoint.
pub(crate) fn kick(run: &Arc<RunShared>) {
    if run.probe || run.emitted.flushing.swap(true, Ordering::AcqRel) {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        run.emitted.flushing.store(false, Ordering::Release);
        return;
    };
    let run = run.clone();
    handle.spawn(async move {
        // A moment for more items (and perhaps the checkpoint, which stores
        // them itself): one write for many instead of one per item.
        tokio::time::sleep(GATHER).await;
        loop {
            // A halted execution (a crash, a lost lease) stores no more.
            if run.is_halted() || run.env.crashed() {
                break;
            }
            if flush(&run, false).await.is_err() {
                // The next checkpoint tries again, and halts on failure.
                break;
            }
            run.emitted.flushing.store(false, Ordering::Release);
            // An item emitted after the last batch and before the flag
            // was cleared found it set: take it on.
            if !run.emitted.has_pending() || run.emitted.flushing.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        run.emitted.flushing.store(false, Ordering::Release);
    });
}

/// Before an execution of a claimed run: registers it with the runtime's
/// readers and, for a resume or a repeated start, discards the items
/// emitted since the checkpoint it resumes from (its segment emits them
/// again, under the same indexes) and continues after the kept ones.
pub(crate) async fn begin(run: &RunShared, claimed: &Claimed) -> Result<(), Error> {
    let from_seq = claimed.checkpoint.as_ref().map_or(0, |cp| cp.seq);
    if from_seq > 0 || claimed.run.attempt > 1 {
        let next = run
            .env
            .store
            .discard_stream(&run.id, &run.lease, from_seq)
            .await?;
        run.emitted.start_at(next);
    }
    Ok(())
}
