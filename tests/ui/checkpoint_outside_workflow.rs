use checkpoint_runtime::prelude::*;

async fn not_a_workflow() {
    checkpoint!("nope");
}

fn main() {}
