use checkpoint_runtime::prelude::*;

#[workflow]
fn sync_fn(ctx: &Ctx) -> u32 {
    1
}

fn main() {}
