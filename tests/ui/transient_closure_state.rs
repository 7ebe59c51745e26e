use checkpoint_runtime::prelude::*;

// A closure that owns a counter: built once, it would count on across
// checkpoints uninterrupted and start over when a resumed run builds it.
#[workflow]
async fn ids(ctx: &Ctx, n: u32) -> Vec<u32> {
    #[transient]
    let mut next_id = {
        let mut last = 0;
        move || {
            last += 1;
            last
        }
    };
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(next_id());
        checkpoint!("issued");
    }
    out
}

fn main() {}
