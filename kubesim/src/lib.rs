//! kubesim: a simulated Kubernetes API server and GPU fleet for tests and the one-machine stack.
//!
//! [`KubeSim::start`] binds an HTTP server (tests use `127.0.0.1:0`) that speaks enough of the
//! Kubernetes API for kube-rs and kubectl: core/v1 Nodes, Pods (+ status, log), Events, Namespaces,
//! ConfigMaps, Secrets, Services; Leases; batch/v1 Jobs; ray.io/v1 RayJobs and RayClusters. Objects
//! live in memory ([`store`]) with real write semantics and watch streams. Simulated controllers run
//! beside it: a scheduler that binds pods to the fleet's nodes and writes `FailedScheduling` events,
//! a kubelet that moves pods through their phases (with injected faults), a Job controller, and a
//! KubeRay operator. In execution mode ([`exec`]) CPU pods and RayJob entrypoints really run.
//!
//! The [`agent`] plays the same kubelet for fake nodes of a *real* API server (`kubesim agent`).
//!
//! ```no_run
//! # async fn demo() -> tuneplane_kubesim::Result<()> {
//! let sim = tuneplane_kubesim::KubeSim::start(tuneplane_kubesim::SimConfig::default()).await?;
//! println!("API server at {}", sim.url());
//! # Ok(()) }
//! ```

pub mod agent;
pub mod api;
mod config;
pub mod controllers;
pub mod error;
pub mod exec;
pub mod fit;
pub mod fleet;
pub mod json;
pub mod kubeconfig;
pub mod logs;
pub mod patch;
pub mod resources;
pub mod selector;
mod sim;
pub mod store;
pub mod testbed;

pub use api::faults::{FaultCounts, FaultPlan, FaultScope, SplitMix64};
pub use config::{Scenario, SimConfig, annotations};
pub use error::{Error, Result, StatusError};
pub use sim::KubeSim;
pub use tuneplane_core::quantity;
