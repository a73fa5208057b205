//! The API suite against the embedded job store and the filesystem blob store.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

api_suite!(common::Harness::embedded);
