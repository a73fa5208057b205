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
use tuneplane_kubesim::agent::RealConfig;
use tuneplane_kubesim::agent::real::ImageMap;
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
    start_with(config, dir, None).await
}

/// [`start`] with the agent running pods for real (`execution`) instead of pretending.
pub async fn start_with(
    config: &SimConfig,
    dir: &std::path::Path,
    execution: Option<RealConfig>,
) -> (Client, Client, Real) {
    let fleet = config
        .fleet
        .clone()
        .expect("a real-cluster scenario needs a fleet");
    let testbed = Testbed::start_with(&kubeconfig(), fleet, config.scenario.clone(), execution)
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

/// The agent's real execution for a test: the repository's image map with the runtimes
/// `scripts/testenv-runtimes.sh` built (`TUNEPLANE_RUNTIMES`, set by `scripts/test.sh`), pod
/// folders under `data`.
pub fn execution(data: &std::path::Path) -> RealConfig {
    assert!(
        std::env::var_os("TUNEPLANE_RUNTIMES").is_some(),
        "TUNEPLANE_RUNTIMES is not set: scripts/testenv-runtimes.sh prints the runtimes folder (scripts/test.sh sets it)"
    );
    let map = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testenv/images.yaml");
    RealConfig {
        data_dir: data.to_path_buf(),
        images: ImageMap::load(&map).expect("testenv/images.yaml"),
        trust_ca: None,
    }
}
