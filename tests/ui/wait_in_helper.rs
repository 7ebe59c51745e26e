use checkpoint_runtime::prelude::*;

// A suspension point in a helper cannot be resumed: refused at compile time.
async fn ask_manager(ctx: &Ctx) -> bool {
    ctx.wait_for::<bool>("manager_ok").await
}

#[workflow]
async fn expense(ctx: &Ctx, amount: u32) -> bool {
    if amount > 100 {
        return ask_manager(ctx).await;
    }
    true
}

fn main() {}
