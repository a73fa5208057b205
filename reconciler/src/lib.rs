//! TunePlane reconciler: the in-cluster controller that admits queued jobs and follows their workloads.
//!
//! This crate is a placeholder until the reconciler issue lands; it compiles so the workspace is whole.
