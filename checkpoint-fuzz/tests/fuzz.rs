//! Runs the generated sample (see `build.rs`) through both oracles: the crash
//! harness and the plain twin. A failure prints the seed, the index and the
//! program, and how to shrink it.
#![forbid(unsafe_code)]

use std::sync::Arc;

use checkpoint_fuzz::gen::{generate, Forms};

mod programs {
    include!(concat!(env!("OUT_DIR"), "/programs.rs"));
}

fn forms() -> Forms {
    Forms::parse(programs::FORMS).expect("forms")
}

/// The compiled sample is the one the generator produces today (so a
/// reported seed and index regenerate exactly the failing program).
#[test]
fn sample_is_reproducible() {
    assert_eq!(programs::SOURCES.len(), programs::COUNT);
    for (k, src) in programs::SOURCES.iter().enumerate() {
        let i = programs::START + k;
        let p = generate(programs::SEED, i, &forms(), programs::SIZE);
        assert_eq!(&p.render(&i.to_string()), src, "program {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_programs_survive_crashes_and_match_their_twins() {
    let forms = Arc::new(forms());
    let sem = Arc::new(tokio::sync::Semaphore::new(8));
    let mut set = tokio::task::JoinSet::new();
    for i in programs::START..programs::START + programs::COUNT {
        if programs::SKIPPED.contains(&i) {
            continue;
        }
        let prog = generate(programs::SEED, i, &forms, programs::SIZE);
        let permit = sem.clone().acquire_owned().await.expect("semaphore");
        set.spawn(async move {
            let r = tokio::spawn(programs::run_case(i, prog)).await;
            drop(permit);
            let r = match r {
                Ok(r) => r,
                Err(e) => Err(format!("panicked: {e}")),
            };
            (i, r)
        });
    }
    // `CHECKPOINT_FUZZ_SHOW_REFUSED=1`: print why each refused program was.
    let show_refused = std::env::var_os("CHECKPOINT_FUZZ_SHOW_REFUSED").is_some();
    let mut failures = Vec::new();
    let (mut crash_points, mut with_checkpoints, mut refused) = (0u64, 0usize, 0usize);
    while let Some(done) = set.join_next().await {
        let (i, r) = done.expect("task");
        match r {
            Ok(c) => {
                if let (Some(why), true) = (&c.refused, show_refused) {
                    eprintln!("refused as expected: index {i}: {why}");
                }
                crash_points += c.checkpoints;
                with_checkpoints += usize::from(c.checkpoints > 0);
                refused += usize::from(c.refused.is_some());
            }
            Err(e) => failures.push((i, e)),
        }
    }
    for &i in programs::SKIPPED {
        failures.push((
            i,
            "did not compile (left out by CHECKPOINT_FUZZ_SKIP)".into(),
        ));
    }
    eprintln!(
        "{} programs (seed {}, first index {}), {with_checkpoints} took checkpoints, {crash_points} crash points checked, {refused} refused as expected, {} failed ({} did not compile)",
        programs::COUNT,
        programs::SEED,
        programs::START,
        failures.len(),
        programs::SKIPPED.len()
    );
    failures.sort();
    for (i, e) in &failures {
        eprintln!(
            "=== FAILED: seed {} index {i} (forms {}) ===\n{e}\n--- program ---\n{}\n--- shrink with: cargo run -p checkpoint-fuzz --bin shrink -- --seed {} --index {i} ---\n",
            programs::SEED,
            programs::FORMS,
            programs::SOURCES[*i - programs::START],
            programs::SEED,
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {} generated programs failed (seed {}): indices {:?}",
        failures.len(),
        programs::COUNT,
        programs::SEED,
        failures.iter().map(|(i, _)| *i).collect::<Vec<_>>()
    );
    // The sample exercises the harness: most programs checkpoint (a refused
    // program was refused at a checkpoint's save).
    assert!(
        (with_checkpoints + refused) * 10 >= programs::COUNT * 7,
        "only {with_checkpoints} of {} programs took a checkpoint",
        programs::COUNT
    );
}
