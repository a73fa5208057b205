//! TunePlane functions: the stateless entry points (HTTP API, scheduled and inbox triggers).
//!
//! This crate is a placeholder until the functions issue lands; it compiles so the workspace is whole.
