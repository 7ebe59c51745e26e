//! Compile-time errors of `#[workflow]` and `checkpoint!()`, pinned with
//! trybuild: each `tests/ui/*.rs` must fail to compile with exactly the
//! message in the `.stderr` file beside it.

#[test]
fn compile_errors() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
