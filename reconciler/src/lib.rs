//! TunePlane reconciler: the in-cluster controller that admits queued jobs against live GPU capacity
//! and sees every job through to an archived, terminal, cleaned-up state (docs/design.md §8).
//!
//! Shape: reflectors keep Nodes, Pods, TunePlane's RayJobs and Warning Events in memory; a single
//! leader (Lease) runs a [`pass`] every few seconds and after watch events. Decisions are pure
//! functions (core's `compute_capacity`, `plan_admissions`, renderers; [`decide`], [`status`]);
//! this crate fetches, calls them and writes.

pub mod access;
pub mod admit;
pub mod archives;
pub mod arrays;
pub mod attempt_loss;
pub mod callback;
pub mod checkpoint_cache;
pub mod cluster;
pub mod config;
pub mod creates;
mod ctx;
pub mod decide;
pub mod dependencies;
pub mod error;
pub mod kube_io;
pub mod leader;
pub mod live_logs;
pub mod logs;
pub mod metrics;
pub mod pass;
pub mod playground;
pub mod policies;
pub mod preempt;
pub mod preempting;
pub mod ray_stop;
pub mod rayjob;
mod run;
pub mod status;
pub mod sync;
pub mod watch_trim;
pub mod watched_pod;
pub mod workload;

pub use config::Config;
pub use ctx::Ctx;
pub use error::{Error, Result};
pub use run::Reconciler;
/// The wall clock, Unix milliseconds: core's one clock, named here for the reconciler's modules.
pub use tuneplane_core::clock::now_ms;
