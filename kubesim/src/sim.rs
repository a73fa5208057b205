//! The simulator as a whole: start-up (namespaces, fleet nodes, HTTP server, controller loop) and
//! the handle tests and `tuneplane dev` hold; its configuration is in [`crate::config`].

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use tokio::task::JoinHandle;

use crate::config::SimConfig;
use crate::controllers::Controllers;
use crate::error::{Error, Result};
use crate::resources::{NAMESPACES, NODES};
use crate::store::Store;

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

    /// A kubeconfig (YAML text) for this server, with no credentials (kubesim checks none) and
    /// `namespace` as its context's default namespace.
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
