use checkpoint_runtime::prelude::*;
use std::time::Duration;

// A workflow: an ordinary async fn. Each step stands for real work (a model
// call, an API request, a file to process); `checkpoint!()` stores the loop's
// position and the live locals (`total`) before the next step begins.
#[workflow]
async fn add_up(ctx: &Ctx, steps: u32) -> u64 {
    let mut total = 0;
    for step in 1..=steps {
        tokio::time::sleep(Duration::from_secs(1)).await;
        total += u64::from(step);
        println!("run {}: step {step} of {steps}, total {total}", ctx.id());
        checkpoint!("step_done");
    }
    total
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    // An SQLite file in the current directory: the store survives the process.
    let rt = Runtime::open("getting-started.db").await?;
    // Resumes this store's unfinished runs of `add_up`, in the background.
    rt.register(add_up);
    // Idempotent per id: after a restart this finds the run already there.
    let run = rt.start(add_up, "add-up-1", 10).await?;
    println!("result: {}", run.result().await?);
    Ok(())
}
