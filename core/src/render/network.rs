//! The NetworkPolicy of a job (docs/design.md §5): a RayJob's pods accept traffic only from the
//! job's own pods (Ray's head and workers talk on every port), its KubeRay submitter, and, on the
//! head's dashboard gate only, the KubeRay operator, the reconciler and the API server (whose
//! service proxy the operator reads the job's status through). Every other pod, another tenant's
//! job among them, is refused on every port. A CPU-only job is one Pod with no peer and no server
//! the platform reaches: one NetworkPolicy per namespace, shared by every such Pod, refuses all
//! ingress to them (one object per namespace instead of one create and one delete per job).
//!
//! Egress: every pod of a jobs namespace (Ray pods, submitters, CPU jobs' Pods, playgrounds) is
//! under the namespace's shared [`EGRESS_POLICY`]: the cluster's DNS, the platform's destinations
//! with the internal ranges and the metadata address carved out, and the operator's additions
//! ([`super::egress`]); a RayJob's own policy adds its own pods on every port. A playground's pod
//! accepts only the API's playground proxy on the server port ([`PLAYGROUND_POLICY`]).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::egress::{EgressSettings, baseline_rules};
use super::rayjob::{GATE_PORT, RAY_DASHBOARD_PORT};
use super::{job_labels, job_workload_name, label_value};
use crate::constants::{
    JOB_ID_LABEL, MANAGED_BY, MANAGED_BY_LABEL, PLAYGROUND_LABEL, WORKLOAD_LABEL,
};
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
    /// Addresses the API's playground proxy connects from (`TUNEPLANE_PLAYGROUND_PROXY_CIDRS`,
    /// the counterpart of the functions' `TUNEPLANE_PLAYGROUND_POD_CIDRS`): the only sources a
    /// playground's server port accepts. None by default: no pod reaches a playground.
    pub playground_proxy_cidrs: Vec<String>,
    /// Where pods may connect to besides their own job's pods.
    pub egress: EgressSettings,
}

impl Default for NetworkSettings {
    fn default() -> Self {
        NetworkSettings {
            operator_namespace: "kuberay-system".to_owned(),
            operator_name: "kuberay-operator".to_owned(),
            reconciler_namespace: "tuneplane-system".to_owned(),
            reconciler_name: "tuneplane-reconciler".to_owned(),
            api_server_cidrs: Vec::new(),
            playground_proxy_cidrs: Vec::new(),
            egress: EgressSettings::default(),
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

/// Name of the NetworkPolicy every pod of a jobs namespace shares for its egress.
pub const EGRESS_POLICY: &str = "tp-egress";

/// Label KubeRay gives a Ray pod with its role (`head`, `worker`).
const RAY_NODE_TYPE_LABEL: &str = "ray.io/node-type";

/// The NetworkPolicy every pod in `namespace` shares for its egress (a jobs namespace holds only
/// TunePlane's pods: Ray pods, KubeRay's submitters, CPU jobs' Pods, playgrounds): DNS, the
/// platform's destinations and the operator's additions ([`baseline_rules`]), and any Ray head's
/// dashboard and gate ports in the namespace, which a submitter calls (the head's own policy
/// admits only its job's submitter there). Nothing else: no other pod, no internal address.
pub fn render_egress_policy(namespace: &str, settings: &NetworkSettings) -> Value {
    let mut egress = baseline_rules(&settings.egress);
    egress.push(json!({
        "to": [{"podSelector": {"matchLabels": { RAY_NODE_TYPE_LABEL: "head" }}}],
        "ports": [
            {"protocol": "TCP", "port": RAY_DASHBOARD_PORT},
            {"protocol": "TCP", "port": GATE_PORT},
        ],
    }));
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": EGRESS_POLICY,
            "namespace": namespace,
            "labels": { MANAGED_BY_LABEL: MANAGED_BY },
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": egress,
        },
    })
}

/// Name of the NetworkPolicy the playground pods of a namespace share.
pub const PLAYGROUND_POLICY: &str = "tp-playgrounds";

/// The NetworkPolicy of every playground pod in `namespace`: its server port accepts only the
/// API's playground proxy ([`NetworkSettings::playground_proxy_cidrs`]); no pod, of any tenant,
/// reaches it on any port (vLLM checks its key only on some paths).
pub fn render_playground_policy(namespace: &str, settings: &NetworkSettings) -> Value {
    let mut ingress = Vec::new();
    if !settings.playground_proxy_cidrs.is_empty() {
        let from: Vec<Value> = settings
            .playground_proxy_cidrs
            .iter()
            .map(|cidr| json!({"ipBlock": {"cidr": cidr}}))
            .collect();
        ingress.push(json!({
            "from": from,
            "ports": [{"protocol": "TCP", "port": super::playground::PORT}],
        }));
    }
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": PLAYGROUND_POLICY,
            "namespace": namespace,
            "labels": { MANAGED_BY_LABEL: MANAGED_BY },
        },
        "spec": {
            "podSelector": {"matchExpressions": [{"key": PLAYGROUND_LABEL, "operator": "Exists"}]},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
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
            "policyTypes": ["Ingress", "Egress"],
            // Ray's head and workers talk on every port; the rest of a pod's egress is the
            // namespace's shared policy.
            "egress": [{"to": [{"podSelector": {"matchLabels": own}}]}],
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
