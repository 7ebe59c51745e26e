use checkpoint_runtime::prelude::*;

// Writes through the items of a mutable loop are saved and written back on
// resume: an item shape that cannot be written back is refused.
#[workflow]
async fn fill(ctx: &Ctx, mut slots: Vec<Option<u32>>) -> Vec<Option<u32>> {
    for slot in slots.iter_mut().map(|s| s.as_mut()) {
        if let Some(v) = slot {
            *v += 1;
        }
        checkpoint!("filled");
    }
    slots
}

fn main() {}
