//! TunePlane functions: the stateless entry points that accept jobs and answer questions about
//! them (docs/design.md §7).
//!
//! - [`app::router`]: the `/v1` HTTP API, served by Lambda ([`lambda::handle`]) and by plain HTTP
//!   (`tuneplane dev`, the `api` binary with `TUNEPLANE_LISTEN`).
//! - [`webhooks`]: signed deliveries from Git hosts and other systems.
//! - [`triggers`]: EventBridge Scheduler firings, console drops under `inbox/`, and
//!   "TunePlane Job Submission" events.
//!
//! Every entry point submits through `tuneplane_core::submit::SubmitService`. The binaries in
//! `src/bin/` are thin: parse [`config::Config`] once, build clients once ([`runtime::startup`]),
//! run.

pub mod app;
pub mod config;
pub mod console;
pub mod error;
pub mod lambda;
pub mod pod_network;
pub mod random;
pub mod rate;
pub mod routes;
pub mod runtime;
pub mod secret;
pub mod state;
pub mod triggers;
pub mod webhook_sources;
pub mod webhooks;

pub use app::router;
pub use config::Config;
pub use error::ApiError;
pub use state::AppState;
