use std::collections::HashMap;

use checkpoint_runtime::prelude::*;

/// A handle that cannot be saved.
#[derive(Clone)]
struct Session {
    token: u64,
}

// A hash-ordered loop is made exact by iterating its items in the order of
// their serialized bytes: items that do not serialize are refused.
#[workflow]
async fn ping_all(ctx: &Ctx, n: u64) -> u64 {
    #[transient]
    let sessions: HashMap<String, Session> = (0..n)
        .map(|i| (format!("s{i}"), Session { token: i }))
        .collect();
    let mut total = 0;
    for (_, session) in &sessions {
        total += session.token;
        checkpoint!("pinged");
    }
    total
}

fn main() {}
