use checkpoint_runtime::prelude::*;

#[workflow]
async fn label(ctx: &Ctx) -> u32 {
    checkpoint!(42);
    1
}

fn main() {}
