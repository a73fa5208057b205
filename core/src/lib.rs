//! TunePlane core: the pure domain logic shared by the CLI, the functions and the reconciler.
//!
//! Nothing in this crate talks to AWS or Kubernetes. It holds the JobSpec and its validation, the
//! fleet description, and the deterministic capsule format. Adapters at the edges call these
//! functions and do the I/O.

pub mod admission;
pub mod audit;
pub mod callback;
pub mod canonical;
pub mod capacity;
pub mod capacity_compute;
pub mod capsule;
pub mod clock;
pub mod constants;
pub mod control;
pub mod fleet;
pub mod grant;
pub mod ids;
pub mod job;
pub mod live;
pub mod notify;
pub mod outputs;
pub mod playground;
pub mod privacy;
pub mod quantity;
pub mod quota;
pub mod quota_view;
pub mod render;
pub mod spec;
pub mod storage;
pub mod store;
pub mod submit;
pub mod subscriptions;
pub mod usage;
