//! 50 checkpoints in nested loops: a compile-time and expansion-size probe
//! (`cargo build --example fifty_checkpoints`), and a run that passes them all.

use checkpoint_runtime::prelude::*;

#[workflow]
async fn fifty(ctx: &Ctx, n: u64) -> u64 {
    let mut total = 0u64;
    for i in 0..n {
        let mut j = 0u64;
        while j < i {
            j += 1;
            total += j;
            checkpoint!("g0_c0");
            checkpoint!("g0_c1");
            checkpoint!("g0_c2");
            if total % 7 == 0 {
                total += 1;
            }
            checkpoint!("g0_c3");
            checkpoint!("g0_c4");
        }
    }
    for i in 0..n {
        let mut j = 0u64;
        while j < i {
            j += 1;
            total += j * 2;
            checkpoint!("g1_c0");
            checkpoint!("g1_c1");
            checkpoint!("g1_c2");
            if total % 7 == 0 {
                total += 1;
            }
            checkpoint!("g1_c3");
            checkpoint!("g1_c4");
        }
    }
    for i in 0..n {
        let mut j = 0u64;
        while j < i {
            j += 1;
            total += j * 3;
            checkpoint!("g2_c0");
            checkpoint!("g2_c1");
            checkpoint!("g2_c2");
            if total % 7 == 0 {
                total += 1;
            }
            checkpoint!("g2_c3");
            checkpoint!("g2_c4");
        }
    }
    for i in 0..n {
        let mut j = 0u64;
        while j < i {
            j += 1;
            total += j * 4;
            checkpoint!("g3_c0");
            checkpoint!("g3_c1");
            checkpoint!("g3_c2");
            if total % 7 == 0 {
                total += 1;
            }
            checkpoint!("g3_c3");
            checkpoint!("g3_c4");
        }
    }
    for i in 0..n {
        let mut j = 0u64;
        while j < i {
            j += 1;
            total += j * 5;
            checkpoint!("g4_c0");
            checkpoint!("g4_c1");
            checkpoint!("g4_c2");
            if total % 7 == 0 {
                total += 1;
            }
            checkpoint!("g4_c3");
            checkpoint!("g4_c4");
        }
    }
    for i in 0..n {
        let mut j = 0u64;
        while j < i {
            j += 1;
            total += j * 6;
            checkpoint!("g5_c0");
            checkpoint!("g5_c1");
            checkpoint!("g5_c2");
            if total % 7 == 0 {
                total += 1;
            }
            checkpoint!("g5_c3");
            checkpoint!("g5_c4");
        }
    }
    for i in 0..n {
        let mut j = 0u64;
        while j < i {
            j += 1;
            total += j * 7;
            checkpoint!("g6_c0");
            checkpoint!("g6_c1");
            checkpoint!("g6_c2");
            if total % 7 == 0 {
                total += 1;
            }
            checkpoint!("g6_c3");
            checkpoint!("g6_c4");
        }
    }
    for i in 0..n {
        let mut j = 0u64;
        while j < i {
            j += 1;
            total += j * 8;
            checkpoint!("g7_c0");
            checkpoint!("g7_c1");
            checkpoint!("g7_c2");
            if total % 7 == 0 {
                total += 1;
            }
            checkpoint!("g7_c3");
            checkpoint!("g7_c4");
        }
    }
    for i in 0..n {
        let mut j = 0u64;
        while j < i {
            j += 1;
            total += j * 9;
            checkpoint!("g8_c0");
            checkpoint!("g8_c1");
            checkpoint!("g8_c2");
            if total % 7 == 0 {
                total += 1;
            }
            checkpoint!("g8_c3");
            checkpoint!("g8_c4");
        }
    }
    for i in 0..n {
        let mut j = 0u64;
        while j < i {
            j += 1;
            total += j * 10;
            checkpoint!("g9_c0");
            checkpoint!("g9_c1");
            checkpoint!("g9_c2");
            if total % 7 == 0 {
                total += 1;
            }
            checkpoint!("g9_c3");
            checkpoint!("g9_c4");
        }
    }
    total
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), checkpoint_runtime::Error> {
    let rt = Runtime::in_memory();
    let h = rt.start(fifty, "fifty", 4).await?;
    let total = h.result().await?;
    let taken = rt.checkpoints("fifty").await?.len();
    println!("total = {total}, checkpoints kept = {taken}");
    Ok(())
}
