//! kubesim: a simulated Kubernetes API server and GPU fleet for tests and the one-machine stack.
//!
//! This crate is a placeholder until the kubesim issue lands; it compiles so the workspace is whole.
