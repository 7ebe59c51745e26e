//! Sets two cfgs for this package's tests, so that a test needing something
//! beyond the Rust toolchain is ignored (reported as such, never passed)
//! where that thing is missing:
//!
//! - `checkpoint_test_postgres` when `CHECKPOINT_TEST_POSTGRES_URL` is set:
//!   the PostgreSQL instances of the store's conformance tests and the other
//!   tests of `store/postgres/tests.rs` that need a server;
//! - `checkpoint_test_chromium` when a Chromium is found (`$CHROMIUM`, or
//!   `chromium` / `chromium-browser` on `PATH`) or `CI=true`: the page's
//!   test in headless Chromium (`tests/http/browser.rs`). Under CI it runs,
//!   and fails saying so when Chromium is missing.
//!
//! Nothing else depends on them.

fn chromium_found() -> bool {
    if std::env::var_os("CHROMIUM").is_some_and(|p| !p.is_empty()) {
        return true;
    }
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        ["chromium", "chromium-browser"]
            .iter()
            .any(|n| dir.join(n).is_file())
    })
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(checkpoint_test_postgres)");
    println!("cargo::rustc-check-cfg=cfg(checkpoint_test_chromium)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CHECKPOINT_TEST_POSTGRES_URL");
    println!("cargo::rerun-if-env-changed=CHROMIUM");
    println!("cargo::rerun-if-env-changed=PATH");
    println!("cargo::rerun-if-env-changed=CI");
    if std::env::var_os("CHECKPOINT_TEST_POSTGRES_URL").is_some() {
        println!("cargo::rustc-cfg=checkpoint_test_postgres");
    }
    if chromium_found() || std::env::var("CI").as_deref() == Ok("true") {
        println!("cargo::rustc-cfg=checkpoint_test_chromium");
    }
}
