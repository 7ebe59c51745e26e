use checkpoint_runtime::prelude::*;

#[workflow]
async fn sum(ctx: &Ctx) -> u32 {
    let total = 1 + ctx.wait_for::<u32>("amount").await;
    total
}

fn main() {}
