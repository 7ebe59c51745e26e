//! Workspace root package: it owns the runnable `examples/` and the end-to-end
//! `tests/`. The library itself is `checkpoint-runtime` (with the macros from
//! `checkpoint-macros`).
#![forbid(unsafe_code)]
