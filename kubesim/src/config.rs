//! What a simulator is started with ([`SimConfig`]), the faults and timings it plays
//! ([`Scenario`]) and the annotations that steer one pod or RayJob: read by the controllers and
//! the simulation loop alike.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tuneplane_core::fleet::Fleet;

use crate::error::{Error, Result};

/// Annotations that steer the simulation of one pod or RayJob when execution mode is off.
pub mod annotations {
    /// Seconds a pod's containers (or a RayJob's entrypoint) run before exiting.
    pub const RUN_SECONDS: &str = "kubesim.tuneplane.io/run-seconds";
    /// Exit code when the run ends (default 0); non-zero fails the pod or RayJob.
    pub const EXIT_CODE: &str = "kubesim.tuneplane.io/exit-code";
    /// Text written to the container log (or RayJob driver log) when it starts.
    pub const LOG: &str = "kubesim.tuneplane.io/log";
}

/// Faults and timings of the simulation when execution mode is off.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Delay between a pod being bound and its containers running.
    pub start_delay: Duration,
    /// Images whose pull fails (`ErrImagePull`, then `ImagePullBackOff`).
    pub image_pull_failures: Vec<String>,
    /// Images whose containers exit with code 1 right after starting.
    pub crash_images: Vec<String>,
    /// How long pods meant to end (`restartPolicy` `Never`/`OnFailure`) run before exiting 0 when no
    /// annotation says; `None` runs them until deleted. `Always` pods run until deleted.
    pub pod_run: Option<Duration>,
    /// How long a RayJob's entrypoint runs when no annotation says.
    pub rayjob_run: Duration,
    /// Whether RayJob entrypoints fail (exit 1) when no annotation says.
    pub rayjob_fails: bool,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            start_delay: Duration::from_millis(200),
            image_pull_failures: Vec::new(),
            crash_images: Vec::new(),
            pod_run: None,
            rayjob_run: Duration::from_secs(2),
            rayjob_fails: false,
        }
    }
}

/// Configuration of a simulator.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Address to listen on; port 0 picks a free port.
    pub addr: SocketAddr,
    /// The fleet whose nodes exist from the start.
    pub fleet: Option<Fleet>,
    /// Namespaces that exist from the start.
    pub namespaces: Vec<String>,
    /// Whether ray.io types are served and the KubeRay operator runs.
    pub kuberay: bool,
    /// Interval of the controller loop.
    pub tick: Duration,
    /// Watch events kept for watches that resume from a resourceVersion.
    pub watch_history: usize,
    /// Faults and timings.
    pub scenario: Scenario,
    /// Execution mode: the data directory under which pods and RayJob entrypoints really run.
    pub exec_dir: Option<PathBuf>,
    /// Events not seen again for this long are deleted (the API server's `--event-ttl`).
    pub event_ttl: Duration,
    /// Interval of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// How long a node must have been missing before the pod garbage collector deletes the pods
    /// bound to it (real kube-controller-manager: 40 s, checked every 20 s).
    pub pod_gc_quarantine: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            fleet: None,
            namespaces: [
                "default",
                "kube-system",
                "kube-public",
                "kube-node-lease",
                tuneplane_core::constants::DEFAULT_NAMESPACE,
            ]
            .map(String::from)
            .to_vec(),
            kuberay: true,
            tick: Duration::from_millis(100),
            watch_history: 20_000,
            scenario: Scenario::default(),
            exec_dir: None,
            event_ttl: Duration::from_secs(3600),
            bookmark_interval: Duration::from_secs(5),
            pod_gc_quarantine: Duration::from_secs(2),
        }
    }
}

impl SimConfig {
    /// Loads the fleet from a fleet file.
    pub fn with_fleet_file(mut self, path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadFleet {
            path: path.display().to_string(),
            source,
        })?;
        self.fleet = Some(Fleet::from_yaml(&text)?);
        Ok(self)
    }
}
