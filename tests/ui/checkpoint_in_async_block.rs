use checkpoint_runtime::prelude::*;

#[workflow]
async fn in_async_block(ctx: &Ctx) -> u32 {
    let fut = async {
        checkpoint!();
        1
    };
    fut.await
}

fn main() {}
