//! The `tuneplane` command-line interface as a library: its commands, the API client and the
//! one-machine stack (`tuneplane dev` / `tuneplane demo`), so end-to-end tests can start the same
//! stack in-process that users start from the command line.

pub mod client;
pub mod cmd;
pub mod dev;
pub mod examples;
