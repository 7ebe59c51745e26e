use checkpoint_runtime::prelude::*;

#[workflow]
async fn membership(ctx: &Ctx, age: u32) -> String {
    let tier = if age >= 18 { "adult" } else { "junior" };
    checkpoint!("tiered");
    let fee = match tier {
        "adult" => 30,
        _ => 10,
    };
    format!("{tier} member, fee {fee}")
}

fn main() {}
