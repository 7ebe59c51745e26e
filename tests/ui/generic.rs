use checkpoint_runtime::prelude::*;

#[workflow]
async fn generic<T: Clone>(ctx: &Ctx, x: T) -> u32 {
    1
}

fn main() {}
