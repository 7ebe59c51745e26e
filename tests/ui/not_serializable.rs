use checkpoint_runtime::prelude::*;

struct Client;
impl Client {
    fn get(&self) -> u32 { 7 }
}

#[workflow]
async fn fetch(ctx: &Ctx) -> u32 {
    let client = Client;
    checkpoint!("fetched");
    client.get()
}

fn main() {}
