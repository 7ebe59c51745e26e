use checkpoint_runtime::prelude::*;

#[workflow]
async fn review(ctx: &Ctx, vendor: String) -> String {
    #[migrate(value = "none")]
    let reviewers: Vec<String> = vec!["legal".to_owned()];
    let _ok: bool = ctx.wait_for("approval").await;
    format!("{vendor}: {}", reviewers.join("+"))
}

fn main() {}
