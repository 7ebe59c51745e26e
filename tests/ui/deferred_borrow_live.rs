use checkpoint_runtime::prelude::*;

// `let tier;` assigned string literals in branches is a `&str`: a reference.
#[workflow]
async fn tiering(ctx: &Ctx, years: u32) -> String {
    let tier;
    if years > 5 {
        tier = "senior";
    } else {
        tier = "junior";
    }
    checkpoint!("tiered");
    format!("{tier}")
}

fn main() {}
