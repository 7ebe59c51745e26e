use checkpoint_runtime::prelude::*;

#[workflow]
async fn import(ctx: &Ctx, text: String) -> Vec<String> {
    #[transient]
    let mut lines = text.lines();
    let mut rows = Vec::new();
    while let Some(line) = lines.next() {
        rows.push(line.to_owned());
        checkpoint!("row");
    }
    rows
}

fn main() {}
