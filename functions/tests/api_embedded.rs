//! The API suite against the embedded job store and the filesystem blob store.

mod common;

api_suite!(common::Harness::embedded);
