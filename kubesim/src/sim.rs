//! The simulator as a whole: configuration, start-up (namespaces, fleet nodes, HTTP server,
//! controller loop) and the handle tests and `tuneplane dev` hold.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::task::JoinHandle;
use tuneplane_core::fleet::Fleet;

use crate::controllers::Controllers;
use crate::error::{Error, Result};
use crate::resources::{NAMESPACES, NODES};
use crate::store::Store;

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

/// A running simulator. Dropping it stops the server and the controllers.
pub struct KubeSim {
    addr: SocketAddr,
    store: Arc<Store>,
    faults: Arc<crate::api::faults::Faults>,
    tasks: Vec<JoinHandle<()>>,
}

impl KubeSim {
    /// Seeds the store, binds the server and starts the controllers.
    pub async fn start(config: SimConfig) -> Result<Self> {
        let store = Arc::new(Store::new(config.watch_history));
        let seed = |what: String, source| Error::Seed { what, source };
        for ns in &config.namespaces {
            store
                .create(&NAMESPACES, "", json!({"metadata": {"name": ns}}))
                .map_err(|e| seed(format!("namespace {ns}"), e))?;
        }
        if config.kuberay {
            for (kind, plural) in [("RayJob", "rayjobs"), ("RayCluster", "rayclusters")] {
                seed_crd(&store, kind, plural)
                    .map_err(|e| seed(format!("CRD {plural}.ray.io"), e))?;
            }
        }
        if let Some(fleet) = &config.fleet {
            for node in crate::fleet::nodes(fleet) {
                let name = crate::json::name(&node).to_string();
                store
                    .create(&NODES, "", node)
                    .map_err(|e| seed(format!("node {name}"), e))?;
            }
        }
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| Error::Bind {
                addr: config.addr.to_string(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.addr.to_string(),
            source,
        })?;
        let faults = Arc::new(crate::api::faults::Faults::default());
        let router = crate::api::router(crate::api::ApiState {
            store: store.clone(),
            kuberay: config.kuberay,
            bookmark_interval: config.bookmark_interval,
            faults: faults.clone(),
        });
        // Connections carry a handle that the fault plan uses to drop them mid-request.
        let listener = crate::api::faults::FaultListener::new(listener);
        let service =
            router.into_make_service_with_connect_info::<crate::api::faults::ConnHandle>();
        let server = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, service).await {
                tracing::error!(error = %e, "kubesim server stopped");
            }
        });
        let mut controllers = Controllers::new(store.clone(), &config);
        let tick = config.tick;
        let loop_task = tokio::spawn(async move {
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                controllers.tick().await;
            }
        });
        tracing::info!(%addr, "kubesim listening");
        Ok(Self {
            addr,
            store,
            faults,
            tasks: vec![server, loop_task],
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The object store (for assertions and fault injection in tests).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// A kubeconfig for this server.
    pub fn kubeconfig(&self, namespace: &str) -> String {
        crate::kubeconfig::render(&self.url(), namespace)
    }

    /// Writes a kubeconfig for this server to `path`.
    pub fn write_kubeconfig(&self, path: &Path, namespace: &str) -> Result<()> {
        crate::kubeconfig::write(path, &self.url(), namespace)
    }

    /// Drops the watch history: watches from any earlier resourceVersion get 410 Gone.
    pub fn compact(&self) {
        self.store.compact();
    }

    /// Turns a node Ready or NotReady (fault injection).
    pub fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), crate::ApiError> {
        let updated = self.store.update_all(&NODES, "", node, |current| {
            let mut n = current.clone();
            crate::fleet::set_ready(&mut n, ready);
            Ok(n)
        })?;
        let (reason, component) = if ready {
            ("NodeReady", "kubelet")
        } else {
            ("NodeNotReady", "node-controller")
        };
        let message = format!("Node {node} status is now: {reason}");
        crate::controllers::events::create(
            &self.store,
            &updated,
            "Normal",
            reason,
            &message,
            component,
        )?;
        Ok(())
    }

    /// Makes the next `count` API requests on resources fail with `code` (429 carries
    /// `Retry-After: 1`); discovery and health paths are not affected.
    pub fn fail_next_requests(&self, count: u32, code: u16) {
        self.faults.fail_next(count, code);
    }

    /// Installs a seeded fault plan for resource requests (replacing any), or clears it with
    /// `None`; takes effect from the next request. A pending `fail_next_requests` goes first.
    pub fn set_fault_plan(&self, plan: Option<crate::api::faults::FaultPlan>) {
        self.faults.set_plan(plan);
    }

    /// Resource requests received so far and the faults injected into them, by kind.
    pub fn fault_counts(&self) -> crate::api::faults::FaultCounts {
        self.faults.counts()
    }

    /// Stops the server and the controllers.
    pub fn shutdown(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for KubeSim {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A minimal CustomResourceDefinition for a KubeRay kind, Established, with an open schema.
fn seed_crd(store: &Store, kind: &str, plural: &str) -> Result<(), crate::ApiError> {
    let name = format!("{plural}.ray.io");
    let names = json!({
        "kind": kind,
        "listKind": format!("{kind}List"),
        "plural": plural,
        "singular": kind.to_lowercase(),
    });
    let crd = json!({
        "metadata": {"name": name},
        "spec": {
            "group": "ray.io",
            "names": names,
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    });
    store.create(&crate::resources::CRDS, "", crd)?;
    let now = crate::json::now_rfc3339();
    store.update_all(&crate::resources::CRDS, "", &name, |cur| {
        let mut c = cur.clone();
        c["status"] = json!({
            "acceptedNames": names,
            "storedVersions": ["v1"],
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
            ],
        });
        Ok(c)
    })?;
    Ok(())
}
