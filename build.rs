//! Sets cfgs for the end-to-end tests, so that a test needing something
//! beyond the Rust toolchain is ignored (reported as such, never passed)
//! where it is missing:
//!
//! - `checkpoint_test_postgres` when `CHECKPOINT_TEST_POSTGRES_URL` is set:
//!   the tests that need PostgreSQL (`tests/postgres.rs`, `load.rs`,
//!   `restart.rs`, one in `faults.rs`, ...);
//! - `checkpoint_test_root` when the tests are built as root (uid 0, read
//!   from `/proc/self/status`) or `CI=true`: the test that mounts a small
//!   tmpfs to fill the disk (`tests/background.rs`). Under CI it runs, and
//!   fails saying so when it cannot mount.
//!
//! Nothing else depends on them.

/// Whether this process runs as root, as far as Linux's `/proc` tells.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(checkpoint_test_postgres)");
    println!("cargo::rustc-check-cfg=cfg(checkpoint_test_root)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CHECKPOINT_TEST_POSTGRES_URL");
    println!("cargo::rerun-if-env-changed=CI");
    if std::env::var_os("CHECKPOINT_TEST_POSTGRES_URL").is_some() {
        println!("cargo::rustc-cfg=checkpoint_test_postgres");
    }
    if is_root() || std::env::var("CI").as_deref() == Ok("true") {
        println!("cargo::rustc-cfg=checkpoint_test_root");
    }
}
