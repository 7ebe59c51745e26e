//! The stream row of the bench table (`BENCH_ONLY=streams`): the cost of one
//! `ctx.emit` of a short item (a token), stored with the checkpoint after
//! it (and by the background flush), beside the same run without emits, on
//! the same SQLite file, in alternating rounds. The cost per item is the
//! difference of the two runs divided by the items.

use std::path::Path;
use std::time::Instant;

use checkpoint_runtime::prelude::*;

use super::stats::{median_of, scaled, us};
use super::BoxError;

/// `n` checkpoints, each after `per` emitted tokens when `emit`.
#[workflow]
async fn tokens(ctx: &Ctx, n: u32, per: u32, emit: bool) -> u32 {
    let mut count = 0u32;
    for i in 0..n {
        for j in 0..per {
            if emit {
                ctx.emit(&format!("token {i}.{j}"));
            }
            count = count.wrapping_add(1);
        }
        checkpoint!();
    }
    count
}

pub(crate) async fn rows(d: &Path, scale: f64) -> Result<Vec<String>, BoxError> {
    let (rounds, n, per) = (6usize, scaled(200, scale) as u32, 10u32);
    eprintln!("streams: {rounds} rounds of {n} checkpoints with and without {per} emits each ...");
    let rt = Runtime::open(&d.join("streams.db").display().to_string()).await?;
    rt.register(tokens);
    let (mut plain, mut emitting) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for (emit, into) in [(false, &mut plain), (true, &mut emitting)] {
            let id = format!("tokens-{emit}-{round}");
            let began = Instant::now();
            rt.start(tokens, &id, (n, per, emit))
                .await?
                .result()
                .await?;
            into.push(began.elapsed());
        }
        let stored = rt.stream(&format!("tokens-true-{round}"), 0);
        let count = futures::StreamExt::count(stored).await as u32;
        if count != n * per {
            return Err(format!("the stream holds {count} items, not {}", n * per).into());
        }
    }
    let (plain_med, emit_med) = (median_of(&mut plain), median_of(&mut emitting));
    let items = n * per;
    let per_item = emit_med.saturating_sub(plain_med) / items;
    let per_checkpoint = plain_med / n;
    Ok(vec![format!(
        "| one `ctx.emit` of a short item, stored with its checkpoint (SQLite file, {rounds} runs x {n} checkpoints x {per} items; the difference to the same run without emits) | median per item {:.1} us | plain `checkpoint!()` of the same run: median per checkpoint {:.0} us | {:.3}x of a checkpoint | - | - |",
        us(per_item),
        us(per_checkpoint),
        per_item.as_secs_f64() / per_checkpoint.as_secs_f64().max(1e-12),
    )])
}
