//! Sets `cfg(checkpoint_test_postgres)` when `CHECKPOINT_TEST_POSTGRES_URL`
//! is set, so that end-to-end tests that need PostgreSQL (`tests/postgres.rs`,
//! `load.rs`, `restart.rs`, one in `faults.rs`) are ignored, not passed,
//! without it. Nothing else depends on it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(checkpoint_test_postgres)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CHECKPOINT_TEST_POSTGRES_URL");
    if std::env::var_os("CHECKPOINT_TEST_POSTGRES_URL").is_some() {
        println!("cargo::rustc-cfg=checkpoint_test_postgres");
    }
}
