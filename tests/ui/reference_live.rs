use checkpoint_runtime::prelude::*;

#[workflow]
async fn borrow(ctx: &Ctx, data: Vec<u32>) -> usize {
    let first = &data;
    checkpoint!("borrowed");
    first.len()
}

fn main() {}
