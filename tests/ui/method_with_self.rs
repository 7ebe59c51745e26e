use checkpoint_runtime::prelude::*;

struct Service;

impl Service {
    #[workflow]
    async fn run(&self, ctx: &Ctx) -> u32 {
        1
    }
}

fn main() {}
