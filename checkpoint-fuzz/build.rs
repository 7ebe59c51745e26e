//! Generates the CI sample of programs into `$OUT_DIR/programs.rs` (included
//! by `tests/fuzz.rs`). `CHECKPOINT_FUZZ_SEED`, `CHECKPOINT_FUZZ_COUNT`,
//! `CHECKPOINT_FUZZ_SIZE` and `CHECKPOINT_FUZZ_FORMS` select the sample;
//! `CHECKPOINT_FUZZ_START` (default 0) is the index of its first program, so
//! that a long run of one seed can be compiled and run in batches
//! (`long-run.sh`); `CHECKPOINT_FUZZ_SKIP` (indices, comma-separated) leaves
//! programs that do not compile out of the crate, so that the rest of the
//! batch still runs (the test counts them as failures).
#![forbid(unsafe_code)]

#[allow(dead_code, unused_imports)]
#[path = "src/gen/mod.rs"]
mod gen;

use std::fmt::Write as _;

fn env_num(name: &str, default: u64) -> u64 {
    println!("cargo:rerun-if-env-changed={name}");
    match std::env::var(name) {
        Ok(s) if !s.trim().is_empty() => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("{name}={s}: {e}"))
        }
        _ => default,
    }
}

fn main() {
    println!("cargo:rerun-if-changed=src/gen");
    println!("cargo:rerun-if-changed=build.rs");
    // Keep in sync with DEFAULT_SEED / DEFAULT_COUNT / DEFAULT_SIZE in lib.rs.
    let seed = env_num("CHECKPOINT_FUZZ_SEED", 0x5EED_2026);
    let count = env_num("CHECKPOINT_FUZZ_COUNT", 300) as usize;
    let start = env_num("CHECKPOINT_FUZZ_START", 0) as usize;
    println!("cargo:rerun-if-env-changed=CHECKPOINT_FUZZ_SKIP");
    let skip: Vec<usize> = std::env::var("CHECKPOINT_FUZZ_SKIP")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse()
                .unwrap_or_else(|e| panic!("CHECKPOINT_FUZZ_SKIP: {s}: {e}"))
        })
        .collect();
    let size = env_num("CHECKPOINT_FUZZ_SIZE", 30) as usize;
    println!("cargo:rerun-if-env-changed=CHECKPOINT_FUZZ_FORMS");
    let spec = std::env::var("CHECKPOINT_FUZZ_FORMS").unwrap_or_default();
    let forms = gen::Forms::parse(&spec).unwrap_or_else(|e| panic!("CHECKPOINT_FUZZ_FORMS: {e}"));

    let mut out = String::new();
    writeln!(out, "pub const SEED: u64 = {seed};").unwrap();
    writeln!(out, "pub const COUNT: usize = {count};").unwrap();
    writeln!(out, "pub const START: usize = {start};").unwrap();
    writeln!(out, "pub const SKIPPED: &[usize] = &{skip:?};").unwrap();
    writeln!(out, "pub const SIZE: usize = {size};").unwrap();
    writeln!(out, "pub const FORMS: &str = {:?};", forms.spec()).unwrap();
    let mut sources = String::new();
    for i in start..start + count {
        let p = gen::generate(seed, i, &forms, size);
        let src = p.render(&i.to_string());
        writeln!(sources, "    {src:?},").unwrap();
        if skip.contains(&i) {
            continue;
        }
        writeln!(
            out,
            "#[allow(warnings, clippy::all, clippy::pedantic)]\nmod p{i} {{\nuse checkpoint_fuzz::prelude::*;\n{src}}}\n"
        )
        .unwrap();
    }
    writeln!(out, "pub const SOURCES: &[&str] = &[\n{sources}];").unwrap();
    writeln!(
        out,
        "pub fn run_case(i: usize, prog: checkpoint_fuzz::gen::Program) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<checkpoint_fuzz::Checked, String>> + Send>> {{\n    match i {{"
    )
    .unwrap();
    for i in (start..start + count).filter(|i| !skip.contains(i)) {
        writeln!(
            out,
            "        {i} => Box::pin(async move {{\n            let ctx = checkpoint_fuzz::PlainCtx::new(&prog.script());\n            let plain = p{i}::plain_{i}(&ctx, prog.input.clone()).await;\n            let plain = serde_json::to_value(&plain).expect(\"output is JSON\");\n            checkpoint_fuzz::check_case(p{i}::fz_{i}, &prog, plain, ctx.effects()).await\n        }}),"
        )
        .unwrap();
    }
    writeln!(out, "        _ => panic!(\"no case {{i}}\"),\n    }}\n}}").unwrap();
    let dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    std::fs::write(format!("{dir}/programs.rs"), out).expect("write programs.rs");
}
