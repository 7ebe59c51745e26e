use checkpoint_runtime::prelude::*;

#[workflow]
async fn in_closure(ctx: &Ctx) -> u32 {
    let f = || {
        checkpoint!("inside");
        1
    };
    f()
}

fn main() {}
