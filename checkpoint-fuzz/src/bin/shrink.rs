//! Shrinks a failing generated program.
//!
//! ```sh
//! cargo run -p checkpoint-fuzz --bin shrink -- --seed S --index I \
//!     [--size N] [--forms SPEC] [--target-dir DIR] [--max-secs T]
//! ```
//!
//! Regenerates program `I` of sample `S` (same `--size` / `--forms` as the
//! run that found it: the test prints them; defaults are the CI sample's),
//! writes it into a scratch cargo project (depending on `checkpoint-runtime`
//! and `checkpoint-fuzz` by path, built in a persistent target directory so
//! dependencies are compiled once), and checks how it fails: a compile
//! error, an oracle failure or a panic. Then it repeatedly tries the
//! one-step reductions of `gen::shrink_candidates` (drop statements, unwrap
//! loops and branches, shrink constants), keeping any that fails the same
//! way, and prints the smallest failing body.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use checkpoint_fuzz::gen::{generate, shrink_candidates, Forms, Mode, Program};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// The normalised first error (code or message without digits).
    CompileError(String),
    /// An oracle failure; the kind of the first problem.
    Fail(String),
    Panic,
}

fn usage() -> ! {
    eprintln!(
        "usage: shrink --seed S --index I [--size N] [--forms SPEC] [--target-dir DIR] [--max-secs T]"
    );
    std::process::exit(2)
}

fn main() {
    let mut seed = None;
    let mut index = None;
    let mut size = checkpoint_fuzz::DEFAULT_SIZE;
    let mut forms = std::env::var("CHECKPOINT_FUZZ_FORMS").unwrap_or_default();
    let mut target: Option<PathBuf> = None;
    let mut max_secs = 900u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--seed" => seed = Some(parse_u64(&val())),
            "--index" => index = Some(parse_u64(&val()) as usize),
            "--size" => size = parse_u64(&val()) as usize,
            "--forms" => forms = val(),
            "--target-dir" => target = Some(PathBuf::from(val())),
            "--max-secs" => max_secs = parse_u64(&val()),
            _ => usage(),
        }
    }
    let (Some(seed), Some(index)) = (seed, index) else {
        usage()
    };
    let forms = Forms::parse(&forms).unwrap_or_else(|e| {
        eprintln!("--forms: {e}");
        std::process::exit(2)
    });
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf();
    let target = target.unwrap_or_else(|| match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t).join("fuzz-shrink"),
        None => workspace.join("target").join("fuzz-shrink"),
    });
    let scratch = Scratch::new(&workspace, &target);

    let mut best = generate(seed, index, &forms, size);
    eprintln!(
        "program {index} of seed {seed}: {} statements; checking how it fails...",
        best.size()
    );
    let want = scratch.run(&best);
    eprintln!("outcome: {want:?}");
    if want == Outcome::Ok {
        eprintln!("the program passes both oracles: nothing to shrink");
        std::process::exit(1);
    }
    let started = Instant::now();
    let deadline = Duration::from_secs(max_secs);
    let mut tries = 0;
    'outer: loop {
        for cand in shrink_candidates(&best) {
            if started.elapsed() > deadline {
                eprintln!("time is up after {tries} tries");
                break 'outer;
            }
            if cand.size() > best.size() || cand == best {
                continue;
            }
            tries += 1;
            if scratch.run(&cand) == want {
                best = cand;
                eprintln!("  smaller: {} statements ({tries} tries)", best.size());
                continue 'outer;
            }
        }
        break;
    }
    // Leave the smallest failing program in the scratch project for a look.
    scratch.write(&best);
    println!(
        "// smallest failing body ({} statements, {want:?}); input {:?}, result output: {}",
        best.size(),
        best.input,
        best.result
    );
    println!("{}", best.render_body(Mode::Workflow, 0));
    println!(
        "// full program (workflow and twin): {}",
        scratch.dir.join("src/main.rs").display()
    );
}

fn parse_u64(s: &str) -> u64 {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.unwrap_or_else(|_| usage())
}

struct Scratch {
    dir: PathBuf,
    target: PathBuf,
}

impl Scratch {
    fn new(workspace: &Path, target: &Path) -> Self {
        let dir = target.join("scratch");
        std::fs::create_dir_all(dir.join("src")).expect("scratch dir");
        let manifest = format!(
            "[package]\nname = \"fuzz-scratch\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
             [workspace]\n\n[dependencies]\n\
             checkpoint-runtime = {{ path = {:?} }}\n\
             checkpoint-fuzz = {{ path = {:?} }}\n\
             serde_json = \"1\"\n\
             tokio = {{ version = \"1\", features = [\"rt\", \"rt-multi-thread\", \"macros\", \"sync\", \"time\"] }}\n",
            workspace.join("checkpoint-runtime"),
            workspace.join("checkpoint-fuzz"),
        );
        std::fs::write(dir.join("Cargo.toml"), manifest).expect("scratch manifest");
        if !dir.join("Cargo.lock").exists() {
            // Same dependency versions as the workspace, no resolution online.
            let _ = std::fs::copy(workspace.join("Cargo.lock"), dir.join("Cargo.lock"));
        }
        Scratch {
            dir,
            target: target.to_path_buf(),
        }
    }

    fn write(&self, p: &Program) {
        let script = p.script();
        let src = format!(
            "#![allow(warnings, clippy::all)]\nuse checkpoint_fuzz::prelude::*;\n\n{}\n\
             #[tokio::main(flavor = \"multi_thread\", worker_threads = 2)]\n\
             async fn main() {{\n    let input: Vec<u64> = vec!{:?};\n    \
             let script: Vec<(String, Vec<u64>)> = {};\n    \
             let ctx = PlainCtx::new(&script);\n    \
             let plain = plain_x(&ctx, input.clone()).await;\n    \
             let plain = serde_json::to_value(&plain).unwrap();\n    \
             match checkpoint_fuzz::check_parts(fz_x, input, &script, {}, {}, plain, ctx.effects()).await {{\n        \
             Ok(c) => println!(\"FUZZ-OK {{}} checkpoints{{}}\", c.checkpoints, if c.refused.is_some() {{ \" (refused)\" }} else {{ \"\" }}),\n        \
             Err(e) => {{ println!(\"FUZZ-FAIL\\n{{e}}\"); std::process::exit(3) }}\n    }}\n}}\n",
            p.render("x"),
            p.input,
            format_script(&script),
            p.iterates_hash(),
            p.expects_refusal(),
        );
        std::fs::write(self.dir.join("src/main.rs"), src).expect("scratch main.rs");
    }

    fn run(&self, p: &Program) -> Outcome {
        self.write(p);
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .arg("run")
            .arg("--quiet")
            .arg("--manifest-path")
            .arg(self.dir.join("Cargo.toml"))
            .env("CARGO_TARGET_DIR", &self.target)
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("run cargo");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stdout.contains("FUZZ-OK") {
            return Outcome::Ok;
        }
        if let Some(rest) = stdout.split("FUZZ-FAIL\n").nth(1) {
            return Outcome::Fail(failure_kind(rest));
        }
        if let Some(line) = stderr.lines().find(|l| l.starts_with("error")) {
            if !stderr.contains("Running `") {
                return Outcome::CompileError(normalise(line));
            }
        }
        Outcome::Panic
    }
}

fn format_script(script: &[(String, Vec<u64>)]) -> String {
    let items: Vec<String> = script
        .iter()
        .map(|(n, p)| format!("({n:?}.to_string(), vec!{p:?})"))
        .collect();
    format!("vec![{}]", items.join(", "))
}

/// What kind of oracle failure: resumed output, effects, or twin mismatch.
fn failure_kind(report: &str) -> String {
    let first = report.lines().next().unwrap_or("");
    for k in [
        "resumed run returned",
        "did not complete",
        "before the crash",
        "after resuming",
        "ran ",
        "differs from the plain twin",
        "differ from the plain twin",
    ] {
        if first.contains(k) {
            return k.to_owned();
        }
    }
    normalise(first)
}

fn normalise(line: &str) -> String {
    // An error code is enough; otherwise the message without names/numbers.
    if let Some(code) = line.strip_prefix("error[") {
        return code.split(']').next().unwrap_or("").to_owned();
    }
    line.split('`')
        .step_by(2)
        .collect::<String>()
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .collect()
}
