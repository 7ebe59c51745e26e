use checkpoint_runtime::prelude::*;

fn describe(old: u32) -> String {
    format!("{old} documents")
}

#[workflow]
async fn review(ctx: &Ctx, documents: Vec<String>) -> u64 {
    #[migrate(from = u32, with = describe)]
    let mut checked: u64 = 0;
    for _doc in &documents {
        checked += 1;
        checkpoint!("document");
    }
    let _ok: bool = ctx.wait_for("approval").await;
    checked
}

fn main() {}
