//! A worker process for `tests/streams.rs`: runs a workflow that emits
//! tokens slowly (a checkpoint after every three), so that the test can
//! read its stream from another process and SIGKILL it mid-segment.
//!
//! `checkpoint-stream-worker start|resume STORE ID CHUNKS`
//!
//! - `start` starts run `ID` (`CHUNKS` chunks of three tokens,
//!   `token-<i>`), `resume` only works on what the store holds; both then
//!   wait for the run's result and print `RESULT <json>`.
//! - Every emitted token prints `EMITTED <i>`.
//! - Exit status 0 with a result, 1 on an error (printed on stderr).

#![forbid(unsafe_code)]

use std::time::Duration;

use checkpoint_runtime::prelude::*;

/// Three tokens per chunk, 20 ms apart, a checkpoint after each chunk.
#[workflow]
async fn tokens(ctx: &Ctx, chunks: u64) -> u64 {
    for chunk in 0..chunks {
        for j in 0..3 {
            let i = chunk * 3 + j;
            ctx.emit(&format!("token-{i}"));
            println!("EMITTED {i}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        ctx.set_progress(&(chunk + 1));
        checkpoint!("chunk");
    }
    chunks * 3
}

async fn main_async() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [command, store, id, chunks] = args.as_slice() else {
        eprintln!("usage: checkpoint-stream-worker start|resume STORE ID CHUNKS");
        std::process::exit(64);
    };
    let chunks: u64 = chunks.parse().unwrap_or_else(|_| {
        eprintln!("checkpoint-stream-worker: bad CHUNKS `{chunks}`");
        std::process::exit(64);
    });
    let rt = Runtime::builder()
        .lease_ttl(Duration::from_millis(500))
        .open(store)
        .await?;
    rt.register(tokens);
    let h = match command.as_str() {
        "start" => rt.start(tokens, id, chunks).await?,
        "resume" => rt.handle(tokens, id),
        other => {
            eprintln!("checkpoint-stream-worker: unknown command `{other}`");
            std::process::exit(64);
        }
    };
    let result = h.result().await?;
    println!(
        "RESULT {}",
        serde_json::to_string(&result).expect("a result is JSON")
    );
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(e) = main_async().await {
        eprintln!("checkpoint-stream-worker: {e}");
        std::process::exit(1);
    }
}
