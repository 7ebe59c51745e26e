use checkpoint_runtime::prelude::*;

#[workflow]
async fn offsets(ctx: &Ctx, n: u32) -> Vec<u32> {
    let mut base = 30;
    #[transient]
    let offset = base;
    let mut out = Vec::new();
    for i in 0..n {
        out.push(offset + i);
        base += 10;
        checkpoint!("pushed");
    }
    out
}

fn main() {}
