//! The API suite against DynamoDB and S3 on the local endpoint (moto_server on 127.0.0.1, started
//! by `scripts/with-moto.sh`).

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

api_suite!(common::Harness::aws);
