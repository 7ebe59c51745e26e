//! Child runs in a [`MemoryStore`]: the runs a join waits for, waking a
//! joining run, a held sibling started when a slot frees, and cancelling a
//! run's children, each through the rules and [`MemoryStore::apply`].

use std::sync::Arc;
use std::time::SystemTime;

use super::{MemoryStore, State};
use crate::store::{rules, Suspend};

impl MemoryStore {
    /// Records that run `waiter` waits for `children` (see
    /// [`rules::join_pending`]), or wakes it when they all ended already.
    pub(super) fn join(st: &mut State, waiter: Arc<str>, children: &[String]) {
        let ended = |c: &str| st.runs.get(c).is_none_or(|e| e.rec.state.is_terminal());
        let pending: Vec<Arc<str>> = rules::join_pending(children, ended)
            .into_iter()
            .map(Arc::from)
            .collect();
        if pending.is_empty() {
            Self::joined(st, &waiter, SystemTime::now());
            return;
        }
        if let Some(e) = st.runs.get_mut(&waiter) {
            e.join_pending = pending.len();
        }
        for child in pending {
            st.joins.entry(child).or_default().push(waiter.clone());
        }
    }

    /// Wakes run `waiter`, whose children all ended (see [`rules::joined`]).
    pub(super) fn joined(st: &mut State, waiter: &str, now: SystemTime) {
        let Some(e) = st.runs.get(waiter) else { return };
        let Some(Suspend::Joining {
            children, token, ..
        }) = e.checkpoints.back().and_then(|c| c.suspend.as_ref())
        else {
            return;
        };
        let change = rules::joined(children, token, |c| st.runs.get(c).map(|e| &e.rec), now);
        Self::apply(st, waiter, change, now);
    }

    /// What the end of run `child` changes elsewhere, in the same critical
    /// section: each run joining it counts it, and the last one it waited
    /// for delivers its signal.
    pub(super) fn child_ended(st: &mut State, child: &str, freed_slot: bool, now: SystemTime) {
        let parent = st.runs.get(child).and_then(|e| e.rec.parent.clone());
        if let (true, Some(parent)) = (freed_slot, parent) {
            Self::promote_sibling(st, &parent, now);
        }
        for waiter in st.joins.remove(child).unwrap_or_default() {
            let Some(e) = st.runs.get_mut(&waiter) else {
                continue;
            };
            e.join_pending = e.join_pending.saturating_sub(1);
            if e.join_pending == 0 && !e.rec.state.is_terminal() {
                Self::joined(st, &waiter, now);
            }
        }
    }

    /// Starts the oldest held child of `parent`, if any (a running one ended).
    pub(super) fn promote_sibling(st: &mut State, parent: &str, now: SystemTime) {
        let next = st
            .runs
            .values_mut()
            .filter(|e| e.rec.parent.as_deref() == Some(parent) && rules::is_held(&e.rec))
            .min_by_key(|e| e.order);
        if let Some(e) = next {
            let change = rules::promote(&mut e.rec, now);
            let id = e.rec.id.clone();
            Self::apply(st, &id, change, now);
        }
    }

    /// Cancels the unfinished descendants of run `id` (its children, theirs,
    /// ...): each child's cancel is applied (which cancels its own
    /// descendants); the walk goes on only through children that had ended.
    pub(super) fn cancel_children(st: &mut State, id: &str, now: SystemTime) {
        let mut parents = vec![id.to_owned()];
        while let Some(parent) = parents.pop() {
            let children: Vec<Arc<str>> = st
                .runs
                .iter()
                .filter(|(_, e)| e.rec.parent.as_deref() == Some(parent.as_str()))
                .map(|(id, _)| id.clone())
                .collect();
            for child in children {
                let Some(e) = st.runs.get_mut(&child) else {
                    continue;
                };
                match rules::cancel(&mut e.rec, now) {
                    Some(change) => Self::apply(st, &child, change, now),
                    None => parents.push(child.to_string()),
                }
            }
        }
    }
}
