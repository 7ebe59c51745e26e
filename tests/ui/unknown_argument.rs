use checkpoint_runtime::prelude::*;

#[workflow(title = "x")]
async fn named(ctx: &Ctx) -> u32 {
    1
}

fn main() {}
