//! The real-cluster backend of the scenario suite: a real kube-apiserver, scheduler,
//! controller manager and KubeRay operator (`scripts/k8s-up.sh --no-fleet`), the scenario's fleet
//! played by `kubesim agent` in this process (`tuneplane_kubesim::testbed`), and the reconciler
//! authenticated as its ServiceAccount with the RBAC of `infra/kustomize`.
//!
//! Chosen by `TUNEPLANE_TEST_K8S=real` with `TUNEPLANE_TEST_KUBECONFIG` naming the admin
//! kubeconfig. Scenarios share one cluster, so they run one at a time (`--test-threads=1`): each
//! starts from a clean slate (TunePlane's workloads, test pods, Leases and nodes removed).

use kube::Client;
use tuneplane_kubesim::SimConfig;
use tuneplane_kubesim::testbed::Testbed;
use tuneplane_reconciler::access::{self, TokenRefresher};

/// Setting that picks the backend: `kubesim` (default) or `real`.
pub const BACKEND_VAR: &str = "TUNEPLANE_TEST_K8S";
/// The real cluster's admin kubeconfig.
pub const KUBECONFIG_VAR: &str = "TUNEPLANE_TEST_KUBECONFIG";

/// Whether this run uses the real control plane.
pub fn is_real() -> bool {
    std::env::var(BACKEND_VAR).is_ok_and(|v| v == "real")
}

/// The admin kubeconfig of the real cluster.
pub fn kubeconfig() -> std::path::PathBuf {
    std::env::var(KUBECONFIG_VAR)
        .unwrap_or_else(|_| {
            panic!("{BACKEND_VAR}=real needs {KUBECONFIG_VAR} (the admin kubeconfig scripts/k8s-up.sh prints)")
        })
        .into()
}

/// What a real-cluster scenario holds on to.
pub struct Real {
    /// The fleet on the cluster; dropping it stops the agent.
    pub testbed: Testbed,
    _token: TokenRefresher,
}

/// Starts a scenario on the real cluster: a clean slate, the agent for `config`'s fleet and
/// scenario, and the reconciler's access granted. Returns the admin client (for the test's own
/// checks), the reconciler's client (its ServiceAccount) and the parts to keep alive.
pub async fn start(config: &SimConfig, dir: &std::path::Path) -> (Client, Client, Real) {
    let fleet = config
        .fleet
        .clone()
        .expect("a real-cluster scenario needs a fleet");
    let testbed = Testbed::start(&kubeconfig(), fleet, config.scenario.clone())
        .await
        .expect("real cluster");
    let (sa_config, token) =
        access::service_account_config(&testbed.admin_config, &dir.join("token"))
            .await
            .expect("reconciler access");
    let reconciler =
        Client::try_from(tuneplane_reconciler::kube_io::client_config(sa_config)).expect("client");
    (
        testbed.admin.clone(),
        reconciler,
        Real {
            testbed,
            _token: token,
        },
    )
}
