//! A consistent view of the cluster for one pass, read from the reflector stores, and the
//! conversions of typed Kubernetes objects into core's plain inputs (`NodeInfo`, `PodInfo`).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use tuneplane_core::capacity::CapacitySnapshot;
use tuneplane_core::capacity_compute::{
    ADMITTED_GPUS_ANNOTATION, NodeInfo, PodInfo, compute_capacity, parse_count, parse_cpu,
    parse_memory_gb,
};
use tuneplane_core::constants::{
    GPU_RESOURCE, JOB_ID_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SERIES_LABEL,
};

use crate::rayjob::RayJob;

/// Label KubeRay (and the Job controller) put on the submitter's pods.
pub const SUBMITTER_LABEL: &str = "job-name";

/// What the reflectors held at the start of a pass.
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Every node.
    pub nodes: Vec<Arc<Node>>,
    /// Every pod.
    pub pods: Vec<Arc<Pod>>,
    /// TunePlane's RayJobs.
    pub rayjobs: Vec<Arc<RayJob>>,
    /// Warning events.
    pub events: Vec<Arc<Event>>,
}

fn quantity<'a>(map: Option<&'a BTreeMap<String, Quantity>>, key: &str) -> Option<&'a str> {
    map.and_then(|m| m.get(key)).map(|q| q.0.as_str())
}

/// The capacity inputs of a node.
pub fn node_info(node: &Node) -> NodeInfo {
    let status = node.status.as_ref();
    let capacity = status.and_then(|s| s.capacity.as_ref());
    let allocatable = status.and_then(|s| s.allocatable.as_ref()).or(capacity);
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    NodeInfo {
        name: node.name_any(),
        series: node.labels().get(SERIES_LABEL).cloned(),
        gpus_capacity: quantity(capacity, GPU_RESOURCE)
            .and_then(parse_count)
            .unwrap_or(0),
        gpus_allocatable: quantity(allocatable, GPU_RESOURCE).and_then(parse_count),
        cpus: quantity(allocatable, "cpu")
            .and_then(parse_cpu)
            .unwrap_or(0.0),
        memory_gb: quantity(allocatable, "memory")
            .and_then(parse_memory_gb)
            .unwrap_or(0.0),
        cordoned: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        ready,
    }
}

/// The capacity inputs of a pod: requests (limits when no request) summed over containers,
/// the larger of that and any single init container.
pub fn pod_info(pod: &Pod) -> PodInfo {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let spec = pod.spec.as_ref();
    let request = |c: &k8s_openapi::api::core::v1::Container, key: &str| -> Option<String> {
        let r = c.resources.as_ref()?;
        quantity(r.requests.as_ref(), key)
            .or_else(|| quantity(r.limits.as_ref(), key))
            .map(str::to_owned)
    };
    let (mut gpus, mut cpus, mut mem) = (0u32, 0.0f64, 0.0f64);
    for c in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
        gpus += request(c, GPU_RESOURCE)
            .as_deref()
            .and_then(parse_count)
            .unwrap_or(0);
        cpus += request(c, "cpu")
            .as_deref()
            .and_then(parse_cpu)
            .unwrap_or(0.0);
        mem += request(c, "memory")
            .as_deref()
            .and_then(parse_memory_gb)
            .unwrap_or(0.0);
    }
    for c in spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
    {
        gpus = gpus.max(
            request(c, GPU_RESOURCE)
                .as_deref()
                .and_then(parse_count)
                .unwrap_or(0),
        );
        cpus = cpus.max(
            request(c, "cpu")
                .as_deref()
                .and_then(parse_cpu)
                .unwrap_or(0.0),
        );
        mem = mem.max(
            request(c, "memory")
                .as_deref()
                .and_then(parse_memory_gb)
                .unwrap_or(0.0),
        );
    }
    PodInfo {
        node_name: spec.and_then(|s| s.node_name.clone()),
        terminal: matches!(phase, Some("Succeeded" | "Failed")),
        gpus_requested: gpus,
        gpus_admitted: pod
            .annotations()
            .get(ADMITTED_GPUS_ANNOTATION)
            .and_then(|v| parse_count(v)),
        cpus,
        memory_gb: mem,
    }
}

/// True for objects TunePlane created.
pub fn managed(meta: &kube::core::ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .is_some_and(|v| v == MANAGED_BY)
}

impl Cluster {
    /// The capacity snapshot at `now_ms`.
    pub fn capacity(&self, now_ms: i64) -> CapacitySnapshot {
        let nodes: Vec<NodeInfo> = self.nodes.iter().map(|n| node_info(n)).collect();
        let pods: Vec<PodInfo> = self.pods.iter().map(|p| pod_info(p)).collect();
        compute_capacity(u64::try_from(now_ms).unwrap_or(0), &nodes, &pods)
    }

    /// The RayJob `namespace/name`, if the reflector holds it.
    pub fn rayjob(&self, namespace: &str, name: &str) -> Option<&RayJob> {
        self.rayjobs
            .iter()
            .find(|r| {
                r.metadata.name.as_deref() == Some(name)
                    && r.namespace().as_deref() == Some(namespace)
            })
            .map(|r| r.as_ref())
    }

    /// The pod `namespace/name`, if the reflector holds it.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        self.pods
            .iter()
            .find(|p| {
                p.metadata.name.as_deref() == Some(name)
                    && p.namespace().as_deref() == Some(namespace)
            })
            .map(|p| p.as_ref())
    }

    /// Pods carrying the job-id label value `label` in `namespace` (Ray pods, the CPU pod).
    pub fn job_pods(&self, namespace: &str, label: &str) -> Vec<&Pod> {
        self.pods
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(namespace))
            .filter(|p| p.labels().get(JOB_ID_LABEL).is_some_and(|v| v == label))
            .map(|p| p.as_ref())
            .collect()
    }

    /// Warning events about `workload` or any object named after it (its pods, cluster, submitter).
    pub fn warnings_for(&self, namespace: &str, workload: &str) -> Vec<&Event> {
        let prefix = format!("{workload}-");
        self.events
            .iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .filter(|e| e.involved_object.namespace.as_deref() == Some(namespace))
            .filter(|e| {
                e.involved_object
                    .name
                    .as_deref()
                    .is_some_and(|n| n == workload || n.starts_with(&prefix))
            })
            .map(|e| e.as_ref())
            .collect()
    }
}
