use checkpoint_runtime::prelude::*;

#[workflow]
async fn crawl(ctx: &Ctx) -> u32 {
    let each = |n: u32| async move {
        let got = ctx
            .retry("fetch", RetryPolicy::fixed(std::time::Duration::from_secs(1)), || async move {
                Ok::<u32, String>(n)
            })
            .await;
        got.unwrap_or(0)
    };
    each(1).await
}

fn main() {}
