//! TunePlane core: the pure domain logic shared by the CLI, the functions and the reconciler.
//!
//! Nothing in this crate talks to AWS or Kubernetes. Adapters at the edges call these functions
//! and do the I/O. `core/README.md` tells where to start; the modules, by what they are about:

// What a user asks for, and how it becomes a job.
pub mod array;
pub mod capsule;
pub mod depends;
pub mod job;
pub mod playground;
pub mod spec;
pub mod submit;

// The fleet, its capacity, and how tenants share it.
pub mod admission;
pub mod capacity;
pub mod capacity_compute;
pub mod claimant;
pub mod fleet;
pub mod preemption;
pub mod quota;
pub mod quota_view;
pub mod usage;

// What the reconciler creates in the cluster.
pub mod render;

// What jobs write and read while they run, and what limits it.
pub mod grant;
pub mod live;
pub mod outputs;
pub mod storage;

// Telling people what happened: callbacks (what a job's `notify` may name is `spec::notify`,
// managing subscriptions is `control::subscriptions`) and the audit trail.
pub mod audit;
pub mod callback;

// Operations on existing jobs, and what one tenant may see of another.
pub mod control;
pub mod privacy;

// The storage traits every adapter implements.
pub mod store;

// Small shared pieces: names and ids, constants, quantities, canonical JSON, the clock.
pub mod canonical;
pub mod clock;
pub mod constants;
pub mod ids;
pub mod quantity;
