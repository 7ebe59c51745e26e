//! `ctx.join(child)` and `ctx.join_all(children)` (see [`crate::child`]):
//! suspension points whose checkpoint names the children joined
//! ([`Suspend::Joining`]). The store wakes the run with the signal the
//! checkpoint names once they have all ended, its payload their outcomes;
//! a resume at the site decodes them from the run's wake value, so every
//! resume of the join reads the same outcomes.

use std::future::Future;
use std::sync::atomic::Ordering;

use serde::de::DeserializeOwned;

use super::Frame;
use crate::abi::{Encoder, Slot};
use crate::child::{Child, ChildError};
use crate::run::Halt;
use crate::store::JOIN_SIGNAL_PREFIX;
use crate::store::{Suspend, WakeValue};
use crate::type_names::readable_type_name;
use crate::workflow::Workflow;
use crate::Error;

type Outcome<W> = Result<<W as Workflow>::Output, ChildError>;

impl Frame {
    /// `ctx.join(child)`: waits for one child (see [`Frame::join_all`]).
    pub fn join<W: Workflow, F>(
        &mut self,
        site: u32,
        loops: &[u64],
        fields: F,
        child: Child<W>,
    ) -> impl Future<Output = Outcome<W>> + Send + '_
    where
        F: FnOnce(&mut Encoder) -> Result<(), Error>,
    {
        let all = self.join_all(site, loops, fields, [child]);
        async move {
            let mut outcomes = all.await;
            outcomes
                .pop()
                .unwrap_or_else(|| Err(ChildError::Missing { run: String::new() }))
        }
    }

    /// `ctx.join_all(children)`: an implicit checkpoint naming the
    /// children; returns their outcomes, in order, at once if they all
    /// ended already, otherwise ends the execution (the run is resumed at
    /// this site when the last of them ends).
    pub fn join_all<W: Workflow, F>(
        &mut self,
        site: u32,
        loops: &[u64],
        fields: F,
        children: impl IntoIterator<Item = Child<W>>,
    ) -> impl Future<Output = Vec<Outcome<W>>> + Send + '_
    where
        F: FnOnce(&mut Encoder) -> Result<(), Error>,
    {
        let children: Vec<String> = children.into_iter().map(|c| c.id().to_owned()).collect();
        let seq = self.run.seq.load(Ordering::Acquire) + 1;
        let token = format!("{JOIN_SIGNAL_PREFIX}{seq}");
        let suspend = Suspend::Joining {
            children,
            token: token.clone(),
            sites_before: self.sites_before(site),
        };
        let prepared = self.prepare(site, loops, fields, Some(suspend));
        async move {
            self.commit(prepared).await;
            let taken = self
                .run
                .env
                .store
                .take_signal(&self.run.id, &self.run.lease, &token)
                .await;
            match taken {
                Ok(Some(sig)) => match decode_outcomes(self, &token, &sig.payload) {
                    Ok(outcomes) => outcomes,
                    Err(e) => match self.halt(e).await {},
                },
                Ok(None) => match self.stop(Halt::Suspended).await {},
                Err(e) => match self.halt(e).await {},
            }
        }
    }
}

fn decode_outcomes<T: DeserializeOwned>(
    frame: &Frame,
    token: &str,
    payload: &[u8],
) -> Result<T, Error> {
    serde_json::from_slice(payload).map_err(|e| Error::Decode {
        workflow: frame.run.workflow.to_owned(),
        run: frame.run.id.to_string(),
        site: token.to_owned(),
        field: "<children's outputs>".to_owned(),
        detail: format!(
            "{e} (expected `{}`)",
            readable_type_name(std::any::type_name::<T>())
        )
        .into(),
    })
}

/// The outcomes delivered to a resumed join site.
fn delivered<T: DeserializeOwned>(frame: &Frame) -> Result<T, Error> {
    match &frame.wake {
        Some(WakeValue::Signal { name, payload }) => decode_outcomes(frame, name, payload),
        _ => Err(Error::internal(format!(
            "run `{}`: a join was resumed but its children's outcomes were not delivered",
            frame.run.id
        ))),
    }
}

/// Decodes the outcomes delivered to a resumed `join_all` site into `slot`.
pub fn load_join_all<T: DeserializeOwned>(
    slot: &mut Slot<Vec<Result<T, ChildError>>>,
    frame: &Frame,
) -> Result<(), Error> {
    if frame.run.probe {
        return Ok(());
    }
    slot.fill(delivered(frame)?);
    Ok(())
}

/// Decodes the outcome delivered to a resumed `join` site into `slot`.
pub fn load_join<T: DeserializeOwned>(
    slot: &mut Slot<Result<T, ChildError>>,
    frame: &Frame,
) -> Result<(), Error> {
    if frame.run.probe {
        return Ok(());
    }
    let mut all: Vec<Result<T, ChildError>> = delivered(frame)?;
    if all.len() != 1 {
        return Err(Error::internal(format!(
            "run `{}`: a join of one child was resumed with {} outcomes",
            frame.run.id,
            all.len()
        )));
    }
    slot.fill(all.remove(0));
    Ok(())
}
