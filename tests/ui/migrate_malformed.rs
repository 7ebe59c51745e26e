use checkpoint_runtime::prelude::*;

#[workflow]
async fn review(ctx: &Ctx, vendor: String) -> String {
    #[migrate(with = String::from)]
    let owner: String = vendor.clone();
    #[migrate(default, value = 3)]
    let round: u32 = 1;
    #[transient]
    #[migrate(default)]
    let label = format!("{vendor}!");
    #[migrate(value = 3)]
    let untyped = vendor.len();
    #[migrate(default)]
    let constant: u32 = 7;
    #[migrate(rename = "old")]
    let (a, b) = (1u8, 2u8);
    let _ok: bool = ctx.wait_for("approval").await;
    format!("{owner} {round} {label} {untyped} {constant} {a} {b}")
}

fn main() {}
