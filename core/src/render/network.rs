//! The NetworkPolicy of a job (docs/design.md §5): a RayJob's pods accept traffic only from the
//! job's own pods (Ray's head and workers talk on every port), its KubeRay submitter, and, on the
//! head's dashboard gate only, the KubeRay operator, the reconciler and the API server (whose
//! service proxy the operator reads the job's status through). Every other pod, another tenant's
//! job among them, is refused on every port. A CPU-only job is one Pod with no peer and no server
//! the platform reaches: one NetworkPolicy per namespace, shared by every such Pod, refuses all
//! ingress to them (one object per namespace instead of one create and one delete per job).
//! Egress is not restricted (capsule downloads, package indexes, the user's own services).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::rayjob::GATE_PORT;
use super::{job_labels, job_workload_name, label_value};
use crate::constants::{JOB_ID_LABEL, MANAGED_BY, MANAGED_BY_LABEL, WORKLOAD_LABEL};
use crate::job::JobRecord;

/// Label the Job controller puts on its pods (KubeRay's submitter among them).
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
/// Label every namespace carries with its own name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Who besides a job's own pods may reach its dashboard gate (installation-wide).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkSettings {
    /// Namespace of the KubeRay operator (`TUNEPLANE_OPERATOR_NAMESPACE`).
    pub operator_namespace: String,
    /// `app.kubernetes.io/name` of the operator's pods.
    pub operator_name: String,
    /// Namespace of the reconciler (`tuneplane-system`).
    pub reconciler_namespace: String,
    /// `app.kubernetes.io/name` of the reconciler's pods.
    pub reconciler_name: String,
    /// Addresses the API server's proxy traffic comes from (`TUNEPLANE_API_SERVER_CIDRS`); none by
    /// default, then only a CNI that admits the node's own traffic lets the proxy through.
    pub api_server_cidrs: Vec<String>,
}

impl Default for NetworkSettings {
    fn default() -> Self {
        NetworkSettings {
            operator_namespace: "kuberay-system".to_owned(),
            operator_name: "kuberay-operator".to_owned(),
            reconciler_namespace: "tuneplane-system".to_owned(),
            reconciler_name: "tuneplane-reconciler".to_owned(),
            api_server_cidrs: Vec::new(),
        }
    }
}

/// Name of the shared NetworkPolicy of a namespace's CPU-only job Pods.
pub const SINGLE_POD_POLICY: &str = "tp-single-pod-jobs";

/// The NetworkPolicy every CPU-only job's Pod in `namespace` shares: it selects TunePlane's Pods
/// labelled `tuneplane.io/workload: pod` and admits no ingress at all (such a Pod has no peer;
/// its logs come through the kubelet, not its network).
pub fn render_single_pod_policy(namespace: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": SINGLE_POD_POLICY,
            "namespace": namespace,
            "labels": { MANAGED_BY_LABEL: MANAGED_BY },
        },
        "spec": {
            "podSelector": {"matchLabels": { MANAGED_BY_LABEL: MANAGED_BY, WORKLOAD_LABEL: "pod" }},
            "policyTypes": ["Ingress"],
            "ingress": [],
        },
    })
}

/// Name of the NetworkPolicy of `job`'s current attempt (its workload's name).
pub fn network_policy_name(job: &JobRecord) -> String {
    job_workload_name(job)
}

/// The NetworkPolicy of `job`.
pub fn render_network_policy(job: &JobRecord, settings: &NetworkSettings) -> Value {
    let own = json!({ JOB_ID_LABEL: label_value(&job.id) });
    let named_pod = |namespace: &str, name: &str| {
        json!({
            "namespaceSelector": {"matchLabels": { NAMESPACE_NAME_LABEL: namespace }},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": name}},
        })
    };
    let mut gate_peers = vec![
        named_pod(&settings.operator_namespace, &settings.operator_name),
        named_pod(&settings.reconciler_namespace, &settings.reconciler_name),
    ];
    gate_peers.extend(
        settings
            .api_server_cidrs
            .iter()
            .map(|cidr| json!({"ipBlock": {"cidr": cidr}})),
    );
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": network_policy_name(job),
            "namespace": job.spec.namespace,
            "labels": job_labels(job),
        },
        "spec": {
            "podSelector": {"matchLabels": own},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [
                    {"podSelector": {"matchLabels": own}},
                    {"podSelector": {"matchLabels": { JOB_NAME_LABEL: job_workload_name(job) }}},
                ]},
                {"from": gate_peers, "ports": [{"protocol": "TCP", "port": GATE_PORT}]},
            ],
        },
    })
}
