use checkpoint_runtime::prelude::*;

#[workflow(name = "approval", version = 0)]
async fn approval(ctx: &Ctx) -> bool {
    ctx.wait_for("ok").await
}

fn main() {}
