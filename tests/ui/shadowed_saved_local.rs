use checkpoint_runtime::prelude::*;

fn compute() -> u32 {
    1
}

#[workflow]
async fn shadow(ctx: &Ctx) -> u32 {
    let x = compute();
    {
        let x = format!("{}", compute());
        checkpoint!("inner");
        let _ = x;
    }
    x
}

fn main() {}
