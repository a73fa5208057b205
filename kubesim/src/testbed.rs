//! A fleet on a real control plane for tests: the admin kubeconfig that `scripts/k8s-up.sh`
//! prints, a clean slate (what earlier tests left is removed), and the fleet's nodes played by the
//! [`agent`](crate::agent) in this process, with the kubelet endpoint's certificate from the
//! cluster's own `pki/` folder beside the kubeconfig (so `pods/log` works through the API server).
//!
//! Tests that use it share one cluster and so run one at a time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::{Client, ResourceExt};
use tuneplane_core::fleet::Fleet;

use crate::Scenario;
use crate::agent::{AgentConfig, AgentHandle, TlsFiles};

/// Namespaces whose workloads a clean slate removes.
pub const WORKLOAD_NAMESPACES: &[&str] = &["tuneplane-jobs", "default"];
/// Namespaces whose Leases a clean slate removes (the reconciler's).
pub const LEASE_NAMESPACES: &[&str] = &["tuneplane-system"];

/// What went wrong bringing a testbed up.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// The kubeconfig cannot be read or used.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A request failed.
    #[error("{what}: {source}")]
    Api {
        /// What was attempted.
        what: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Something did not happen in time.
    #[error("timed out after {secs}s waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// Seconds waited.
        secs: u64,
    },
    /// The agent failed to start.
    #[error("node agent: {0}")]
    Agent(#[from] crate::agent::AgentError),
}

/// A fleet on the real cluster. Dropping it stops the agent (the nodes stay until the next clean
/// slate).
pub struct Testbed {
    /// A client with the kubeconfig's admin credentials, allowed everything (tests set up and
    /// inspect the cluster with it; the reconciler gets its own narrower identity).
    pub admin: Client,
    /// The admin client's configuration.
    pub admin_config: kube::Config,
    /// The agent playing the fleet's kubelets.
    pub agent: AgentHandle,
}

/// The admin configuration of the kubeconfig at `path`.
pub async fn admin_config(path: &Path) -> Result<kube::Config, TestbedError> {
    let fail = |message: String| TestbedError::Kubeconfig {
        path: path.display().to_string(),
        message,
    };
    let file = kube::config::Kubeconfig::read_from(path).map_err(|e| fail(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| fail(e.to_string()))
}

fn rayjobs(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("ray.io", "v1", "RayJob");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

async fn wait<F, Fut>(secs: u64, what: &str, mut done: F) -> Result<(), TestbedError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !done().await {
        if tokio::time::Instant::now() > deadline {
            return Err(TestbedError::Timeout {
                what: what.into(),
                secs,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Removes what earlier tests left: RayJobs (KubeRay then deletes their clusters), every pod of
/// [`WORKLOAD_NAMESPACES`] (at once: no kubelet may be left to finish a graceful deletion), the
/// reconciler's Leases, the NetworkPolicies of [`WORKLOAD_NAMESPACES`] (the real tier enforces
/// them: one scenario's policies must not wall in the next one's pods) and every Node; waits
/// until they are gone.
pub async fn clean_slate(admin: &Client) -> Result<(), TestbedError> {
    let api_err = |what: &str| {
        let what = what.to_string();
        move |source| TestbedError::Api { what, source }
    };
    for ns in WORKLOAD_NAMESPACES {
        let _ = rayjobs(admin, ns)
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
    }
    wait(90, "earlier RayJobs to be gone", || async {
        let mut left = 0;
        for ns in WORKLOAD_NAMESPACES {
            left += rayjobs(admin, ns)
                .list(&ListParams::default())
                .await
                .map_or(1, |l| l.items.len());
        }
        left == 0
    })
    .await?;
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    wait(90, "earlier pods to be gone", || async {
        let mut left = 0;
        for ns in WORKLOAD_NAMESPACES {
            let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
            for p in pods
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                left += 1;
                let _ = pods.delete(&p.name_any(), &now).await;
            }
        }
        left == 0
    })
    .await?;
    for ns in WORKLOAD_NAMESPACES {
        let policies: Api<NetworkPolicy> = Api::namespaced(admin.clone(), ns);
        let _ = policies
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
    }
    for ns in LEASE_NAMESPACES {
        let leases: Api<Lease> = Api::namespaced(admin.clone(), ns);
        let _ = leases
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await;
    }
    let nodes: Api<Node> = Api::all(admin.clone());
    nodes
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .map_err(api_err("deleting earlier nodes"))?;
    wait(60, "earlier nodes to be gone", || async {
        nodes
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await
}

/// The kubelet certificate `scripts/k8s-up.sh` made for the agent: `pki/` beside the kubeconfig.
pub fn kubelet_tls(kubeconfig: &Path) -> Option<TlsFiles> {
    let pki: PathBuf = kubeconfig.parent()?.join("pki");
    let tls = TlsFiles {
        cert: pki.join("kubelet.crt"),
        key: pki.join("kubelet.key"),
    };
    (tls.cert.is_file() && tls.key.is_file()).then_some(tls)
}

impl Testbed {
    /// Puts the taint `key` with `effect` on a node of the fleet (an interruption notice is
    /// `NoSchedule`: see [`crate::fleet::interruption`]; a `NoExecute` taint makes the cluster's
    /// taint-eviction controller evict the pods that do not tolerate it).
    pub async fn taint_node(
        &self,
        node: &str,
        key: &str,
        effect: &str,
    ) -> Result<(), TestbedError> {
        Ok(self.agent.taint_node(node, key, effect).await?)
    }

    /// Removes a node's taints with key `key`.
    pub async fn untaint_node(&self, node: &str, key: &str) -> Result<(), TestbedError> {
        Ok(self.agent.untaint_node(node, key).await?)
    }

    /// Loses a node: its Node and Lease are deleted and its pods' processes killed; the
    /// cluster's pod garbage collector deletes its pods (after its 40 s quarantine).
    pub async fn delete_node(&self, node: &str) -> Result<(), TestbedError> {
        Ok(self.agent.delete_node(node).await?)
    }

    /// Turns a node NotReady (its kubelet reports it, then goes silent: Lease and heartbeats
    /// stop, its pods are left alone) or Ready again; see [`AgentHandle::set_node_ready`].
    pub async fn set_node_ready(&self, node: &str, ready: bool) -> Result<(), TestbedError> {
        Ok(self.agent.set_node_ready(node, ready).await?)
    }

    /// Cleans the cluster of `kubeconfig` and starts the agent for `fleet` with `scenario`; returns
    /// once every node is registered and Ready in the API server.
    pub async fn start(
        kubeconfig: &Path,
        fleet: Fleet,
        scenario: Scenario,
    ) -> Result<Testbed, TestbedError> {
        Self::start_with(kubeconfig, fleet, scenario, None).await
    }

    /// [`Testbed::start`] with the agent running pods for real when `execution` says how
    /// (needs root; see [`crate::agent::real`]).
    pub async fn start_with(
        kubeconfig: &Path,
        fleet: Fleet,
        scenario: Scenario,
        execution: Option<crate::agent::RealConfig>,
    ) -> Result<Testbed, TestbedError> {
        let admin_config = admin_config(kubeconfig).await?;
        let admin = Client::try_from(admin_config.clone()).map_err(|source| TestbedError::Api {
            what: "building a client".into(),
            source,
        })?;
        clean_slate(&admin).await?;
        let want = crate::fleet::nodes(&fleet).len();
        let mut config = AgentConfig::new(fleet);
        config.scenario = scenario;
        config.tls = kubelet_tls(kubeconfig);
        config.execution = execution;
        let agent = crate::agent::start(admin.clone(), config).await?;
        let nodes: Api<Node> = Api::all(admin.clone());
        wait(60, "the fleet's nodes", || async {
            nodes
                .list(&ListParams::default())
                .await
                .is_ok_and(|l| l.items.len() == want)
        })
        .await?;
        // The scheduler's cache sees new nodes a moment after the API server does.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(Testbed {
            admin,
            admin_config,
            agent,
        })
    }
}
