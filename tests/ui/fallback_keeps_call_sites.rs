use checkpoint_runtime::prelude::*;

// One error (the label used twice), not a second one where the workflow is
// started and registered.
#[workflow]
async fn onboard(ctx: &Ctx, user: String) -> Vec<String> {
    let mut done = vec![user];
    checkpoint!("step");
    done.push("mailbox".into());
    checkpoint!("step");
    done
}

async fn start_it(rt: &Runtime) -> Result<Vec<String>, Error> {
    rt.register(onboard);
    rt.start(onboard, "u-1", "ada".to_owned()).await?.result().await
}

fn main() {
    let _ = start_it;
}
