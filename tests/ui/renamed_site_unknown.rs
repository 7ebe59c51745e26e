use checkpoint_runtime::prelude::*;

#[workflow(renamed_site(from = "#2", to = "aproval"), renamed_site(from = "checkpoint 1", to = "wait_for(\"approval\")"))]
async fn review(ctx: &Ctx, vendor: String) -> String {
    checkpoint!();
    let ok: bool = ctx.wait_for("approval").await;
    format!("{vendor}: {ok}")
}

fn main() {}
