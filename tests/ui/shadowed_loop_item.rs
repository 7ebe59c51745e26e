use checkpoint_runtime::prelude::*;

// The loop writes through its items, so `*x` is saved at the checkpoint; an
// inner `x` hides the item there (saving it would write its value back into
// the element on resume): refused.
#[workflow]
async fn peek(ctx: &Ctx, mut v: Vec<u32>) -> Vec<u32> {
    for x in v.iter_mut() {
        let x = *x + 1;
        checkpoint!("peeked");
        let _ = x;
    }
    v
}

fn main() {}
