//! The resource types the simulated API server serves, with what discovery and selectors need.

/// One served resource type (`pods`, `rayjobs.ray.io`, ...).
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group.
    pub group: &'static str,
    /// API version within the group.
    pub version: &'static str,
    /// Plural resource name used in paths.
    pub plural: &'static str,
    /// Singular name (`pod`), listed by discovery for `kubectl get pod`.
    pub singular: &'static str,
    /// `kind` of the objects (`Pod`): every write sets it, whatever the client sent.
    pub kind: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Whether the type has a `/status` subresource (main writes keep status).
    pub status: bool,
    /// Short names listed by discovery (`po`), so that `kubectl get po` works.
    pub short_names: &'static [&'static str],
    /// Field selector labels accepted besides `metadata.name` and `metadata.namespace`.
    pub fields: &'static [&'static str],
    /// Whether the type belongs to KubeRay (served only when the KubeRay simulation is on).
    pub kuberay: bool,
}

impl ResourceType {
    /// `apiVersion` of the objects (`v1`, `ray.io/v1`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether `field` may be used in a field selector on this type.
    pub fn supports_field(&self, field: &str) -> bool {
        field == "metadata.name"
            || (self.namespaced && field == "metadata.namespace")
            || self.fields.contains(&field)
    }
}

const fn rt(
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    status: bool,
) -> ResourceType {
    ResourceType {
        group,
        version: "v1",
        plural,
        singular,
        kind,
        namespaced,
        status,
        short_names: &[],
        fields: &[],
        kuberay: false,
    }
}

/// Namespaces (cluster-scoped); the simulator creates [`SimConfig::namespaces`](crate::SimConfig)
/// at start.
pub static NAMESPACES: ResourceType = ResourceType {
    short_names: &["ns"],
    fields: &["status.phase"],
    ..rt("", "namespaces", "namespace", "Namespace", false, true)
};
/// Nodes (cluster-scoped): the fleet's nodes, cordoned through `spec.unschedulable`.
pub static NODES: ResourceType = ResourceType {
    short_names: &["no"],
    fields: &["spec.unschedulable"],
    ..rt("", "nodes", "node", "Node", false, true)
};
/// Pods, bound by the simulated scheduler (or `spec.nodeName`) and run by the simulated kubelet;
/// `pods/log` serves what their containers wrote.
pub static PODS: ResourceType = ResourceType {
    short_names: &["po"],
    fields: &[
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ],
    ..rt("", "pods", "pod", "Pod", true, true)
};
/// Core Events.
pub static EVENTS: ResourceType = ResourceType {
    short_names: &["ev"],
    fields: &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ],
    ..rt("", "events", "event", "Event", true, false)
};
/// ConfigMaps.
pub static CONFIGMAPS: ResourceType = ResourceType {
    short_names: &["cm"],
    ..rt("", "configmaps", "configmap", "ConfigMap", true, false)
};
/// Secrets.
pub static SECRETS: ResourceType = ResourceType {
    fields: &["type"],
    ..rt("", "secrets", "secret", "Secret", true, false)
};
/// Services (the simulated KubeRay operator creates each RayCluster's head Service).
pub static SERVICES: ResourceType = ResourceType {
    short_names: &["svc"],
    ..rt("", "services", "service", "Service", true, true)
};
/// Leases (`coordination.k8s.io/v1`, no status subresource): the reconciler's leader election.
pub static LEASES: ResourceType = rt(
    "coordination.k8s.io",
    "leases",
    "lease",
    "Lease",
    true,
    false,
);
/// NetworkPolicies (`networking.k8s.io/v1`): stored and served; nothing enforces them, as on
/// a cluster whose network plugin does not.
pub static NETWORK_POLICIES: ResourceType = ResourceType {
    short_names: &["netpol"],
    ..rt(
        "networking.k8s.io",
        "networkpolicies",
        "networkpolicy",
        "NetworkPolicy",
        true,
        false,
    )
};
/// batch/v1 Jobs.
pub static JOBS: ResourceType = ResourceType {
    fields: &["status.successful"],
    ..rt("batch", "jobs", "job", "Job", true, true)
};
/// KubeRay RayJobs.
pub static RAYJOBS: ResourceType = ResourceType {
    kuberay: true,
    ..rt("ray.io", "rayjobs", "rayjob", "RayJob", true, true)
};
/// KubeRay RayClusters.
pub static RAYCLUSTERS: ResourceType = ResourceType {
    kuberay: true,
    ..rt(
        "ray.io",
        "rayclusters",
        "raycluster",
        "RayCluster",
        true,
        true,
    )
};

/// CustomResourceDefinitions (the KubeRay CRDs exist while the KubeRay simulation is on).
pub static CRDS: ResourceType = ResourceType {
    version: "v1",
    short_names: &["crd", "crds"],
    ..rt(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        false,
        true,
    )
};

/// Every served type, in discovery order.
pub static ALL: &[&ResourceType] = &[
    &CRDS,
    &NAMESPACES,
    &NODES,
    &PODS,
    &EVENTS,
    &CONFIGMAPS,
    &SECRETS,
    &SERVICES,
    &LEASES,
    &NETWORK_POLICIES,
    &JOBS,
    &RAYJOBS,
    &RAYCLUSTERS,
];

/// Looks a type up by group, version and plural.
pub fn find(
    group: &str,
    version: &str,
    plural: &str,
    kuberay: bool,
) -> Option<&'static ResourceType> {
    ALL.iter().copied().find(|r| {
        r.group == group && r.version == version && r.plural == plural && (kuberay || !r.kuberay)
    })
}

/// Groups other than core, each with its version, in discovery order.
pub fn groups(kuberay: bool) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in ALL
        .iter()
        .filter(|r| !r.group.is_empty() && (kuberay || !r.kuberay))
    {
        if !out.iter().any(|(g, _)| *g == r.group) {
            out.push((r.group, r.version));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kuberay_types_are_hidden_when_kuberay_is_off() {
        assert!(find("ray.io", "v1", "rayjobs", true).is_some());
        assert!(find("ray.io", "v1", "rayjobs", false).is_none());
        assert!(!groups(false).iter().any(|(g, _)| *g == "ray.io"));
    }

    #[test]
    fn pods_accept_node_name_field_selector_but_not_arbitrary_fields() {
        assert!(PODS.supports_field("spec.nodeName"));
        assert!(PODS.supports_field("metadata.namespace"));
        assert!(!PODS.supports_field("spec.containers"));
        assert!(!NODES.supports_field("metadata.namespace"));
    }
}
