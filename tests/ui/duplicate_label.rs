use checkpoint_runtime::prelude::*;

#[workflow]
async fn twice(ctx: &Ctx) -> u32 {
    checkpoint!("step");
    let x = 1;
    checkpoint!("step");
    x
}

fn main() {}
