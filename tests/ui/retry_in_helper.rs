use std::time::Duration;

use checkpoint_runtime::prelude::*;

// A retry in a helper cannot be resumed (its backoff is a durable sleep):
// refused at compile time.
async fn fetch_with_retries(ctx: &Ctx) -> Result<u32, RetryError<String>> {
    ctx.retry("fetch", RetryPolicy::fixed(Duration::from_secs(1)), || async {
        Ok::<u32, String>(1)
    })
    .await
}

#[workflow]
async fn crawl(ctx: &Ctx) -> u32 {
    fetch_with_retries(ctx).await.unwrap_or(0)
}

fn main() {}
