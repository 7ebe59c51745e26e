use checkpoint_runtime::prelude::*;

struct Client(u32);

// `client` is built again after the checkpoint (a transient keeps no state
// across one), from `region`; inside the loop, `region` is another local.
#[workflow]
async fn fetch_all(ctx: &Ctx, regions: Vec<u32>) -> u32 {
    let region = 7;
    #[transient]
    let client = Client(region);
    let mut sum = 0;
    for region in regions {
        sum += region;
        checkpoint!("fetched");
        sum += client.0;
    }
    sum
}

fn main() {}
