use checkpoint_runtime::prelude::*;

#[workflow]
async fn shadow(ctx: &Ctx) -> u32 {
    let x = 1u32;
    {
        let x = "inner";
        checkpoint!("inner");
        let _ = x;
    }
    x
}

fn main() {}
