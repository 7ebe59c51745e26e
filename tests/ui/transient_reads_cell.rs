use checkpoint_runtime::prelude::*;

#[workflow]
async fn offsets(ctx: &Ctx, n: u32) -> Vec<u32> {
    let base = std::cell::Cell::new(30);
    #[transient]
    let offset = base.get();
    let mut out = Vec::new();
    for i in 0..n {
        out.push(offset + i);
        base.set(base.get() + 10);
        checkpoint!("pushed");
    }
    out
}

fn main() {}
