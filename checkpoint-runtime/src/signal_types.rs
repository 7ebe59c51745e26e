//! The payload types of the wait sites this process has executed, so that
//! [`Runtime::signal`](crate::Runtime::signal) can refuse a payload the
//! waiting run could not decode before storing it, with the decoder the
//! site itself uses (exact: no schema in between).
//!
//! A wait site notes its type when it first runs in the process. A process
//! that never ran the site (a client elsewhere, the CLI) checks the payload
//! against the payload type's schema, which the site stores with the wait
//! ([`Suspend::Waiting::payload_schema`](crate::store::Suspend)): a
//! one-sided check that refuses only what the type cannot take whatever its
//! serde attributes; the site decides the rest, rejecting an undecodable
//! signal with a history event.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock};

use serde::de::DeserializeOwned;

/// Decodes a JSON payload as a wait site's type; `Err` with the decoder's message.
pub(crate) type PayloadCheck = fn(&[u8]) -> Result<(), String>;

type Sites = HashMap<(&'static str, &'static str), PayloadCheck>;

fn sites() -> &'static RwLock<Sites> {
    static SITES: OnceLock<RwLock<Sites>> = OnceLock::new();
    SITES.get_or_init(|| RwLock::new(HashMap::new()))
}

fn check<T: DeserializeOwned>(payload: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<T>(payload)
        .map(drop)
        .map_err(|e| format!("{e} (expected `{}`)", std::any::type_name::<T>()))
}

/// Notes that site `site` of workflow `workflow` waits for a `T`.
pub(crate) fn note<T: DeserializeOwned>(workflow: &'static str, site: &'static str) {
    let known = sites()
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .contains_key(&(workflow, site));
    if !known {
        sites()
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((workflow, site), check::<T>);
    }
}

/// The check of site `site` of workflow `workflow`, if this process ran it.
pub(crate) fn check_for(workflow: &str, site: &str) -> Option<PayloadCheck> {
    let sites = sites().read().unwrap_or_else(|e| e.into_inner());
    let sites: &HashMap<(&str, &str), PayloadCheck> = &sites;
    sites.get(&(workflow, site)).copied()
}
