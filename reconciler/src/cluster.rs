//! A consistent view of the cluster for one pass, read from the reflector stores, and the
//! conversions of typed Kubernetes objects into core's plain inputs (`NodeInfo`, `PodInfo`).

use std::collections::{BTreeMap, HashMap};
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

/// What the reflectors held at the start of a pass, with lookup indexes built once so a pass
/// costs O(objects + jobs), not O(objects × jobs).
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Every node.
    pub nodes: Vec<Arc<Node>>,
    /// Every pod.
    pub pods: Vec<Arc<Pod>>,
    /// TunePlane's RayJobs.
    pub rayjobs: Vec<Arc<RayJob>>,
    /// Warning events, sorted by (namespace, involved object name).
    pub events: Vec<Arc<Event>>,
    pod_by_name: HashMap<(String, String), usize>,
    pods_by_job: HashMap<(String, String), Vec<usize>>,
    rayjob_by_name: HashMap<(String, String), usize>,
}

fn event_key(e: &Event) -> (&str, &str) {
    (
        e.involved_object.namespace.as_deref().unwrap_or_default(),
        e.involved_object.name.as_deref().unwrap_or_default(),
    )
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
    /// Indexes a snapshot of the reflector stores.
    pub fn new(
        nodes: Vec<Arc<Node>>,
        pods: Vec<Arc<Pod>>,
        rayjobs: Vec<Arc<RayJob>>,
        events: Vec<Arc<Event>>,
    ) -> Cluster {
        let mut events: Vec<Arc<Event>> = events
            .into_iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .collect();
        events.sort_by(|a, b| event_key(a).cmp(&event_key(b)));
        let mut c = Cluster {
            nodes,
            pods,
            rayjobs,
            events,
            ..Cluster::default()
        };
        for (i, p) in c.pods.iter().enumerate() {
            let ns = p.namespace().unwrap_or_default();
            if let Some(job) = p.labels().get(JOB_ID_LABEL) {
                c.pods_by_job
                    .entry((ns.clone(), job.clone()))
                    .or_default()
                    .push(i);
            }
            c.pod_by_name.insert((ns, p.name_any()), i);
        }
        for (i, r) in c.rayjobs.iter().enumerate() {
            c.rayjob_by_name
                .insert((r.namespace().unwrap_or_default(), r.name_any()), i);
        }
        c
    }

    /// The capacity snapshot at `now_ms`.
    pub fn capacity(&self, now_ms: i64) -> CapacitySnapshot {
        let nodes: Vec<NodeInfo> = self.nodes.iter().map(|n| node_info(n)).collect();
        let pods: Vec<PodInfo> = self.pods.iter().map(|p| pod_info(p)).collect();
        compute_capacity(u64::try_from(now_ms).unwrap_or(0), &nodes, &pods)
    }

    fn key(namespace: &str, name: &str) -> (String, String) {
        (namespace.to_owned(), name.to_owned())
    }

    /// The RayJob `namespace/name`, if the reflector holds it.
    pub fn rayjob(&self, namespace: &str, name: &str) -> Option<&RayJob> {
        let i = *self.rayjob_by_name.get(&Self::key(namespace, name))?;
        self.rayjobs.get(i).map(|r| r.as_ref())
    }

    /// The pod `namespace/name`, if the reflector holds it.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&Pod> {
        let i = *self.pod_by_name.get(&Self::key(namespace, name))?;
        self.pods.get(i).map(|p| p.as_ref())
    }

    /// Pods carrying the job-id label value `label` in `namespace` (Ray pods, the CPU pod).
    pub fn job_pods(&self, namespace: &str, label: &str) -> Vec<&Pod> {
        self.pods_by_job
            .get(&Self::key(namespace, label))
            .into_iter()
            .flatten()
            .filter_map(|i| self.pods.get(*i).map(|p| p.as_ref()))
            .collect()
    }

    /// Warning events about `workload` or any object named after it (its pods, cluster, submitter).
    pub fn warnings_for(&self, namespace: &str, workload: &str) -> Vec<&Event> {
        // Names starting with `workload` are contiguous in the sorted list.
        let start = self
            .events
            .partition_point(|e| event_key(e) < (namespace, workload));
        self.events[start..]
            .iter()
            .take_while(|e| {
                let (ns, name) = event_key(e);
                ns == namespace && name.starts_with(workload)
            })
            .filter(|e| {
                let name = event_key(e).1;
                name.len() == workload.len() || name[workload.len()..].starts_with('-')
            })
            .map(|e| e.as_ref())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(ns: &str, name: &str, kind: &str) -> Arc<Event> {
        let e: Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{name}.{kind}")},
            "involvedObject": {"namespace": ns, "name": name}, "type": kind, "reason": "R"
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Arc::new(e)
    }

    fn pod(ns: &str, name: &str, job: &str, node: &str, gpus: &str) -> Arc<Pod> {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": {JOB_ID_LABEL: job}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {GPU_RESOURCE: gpus}}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        Arc::new(p)
    }

    #[test]
    fn warnings_match_the_workload_and_objects_named_after_it_only() {
        let c = Cluster::new(
            vec![],
            vec![],
            vec![],
            vec![
                event("ns", "tp-a", "Warning"),
                event("ns", "tp-a-head-x", "Warning"),
                event("ns", "tp-ab", "Warning"),
                event("ns", "tp-a-head-y", "Normal"),
                event("other", "tp-a", "Warning"),
            ],
        );
        let names: Vec<&str> = c
            .warnings_for("ns", "tp-a")
            .iter()
            .filter_map(|e| e.involved_object.name.as_deref())
            .collect();
        assert_eq!(names, ["tp-a", "tp-a-head-x"]);
    }

    #[test]
    fn pods_are_indexed_by_job_and_name_and_counted_in_capacity() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "h-0", "labels": {SERIES_LABEL: "h200"}},
            "status": {"capacity": {GPU_RESOURCE: "8", "cpu": "96", "memory": "1Ti"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let c = Cluster::new(
            vec![Arc::new(node)],
            vec![
                pod("ns", "p1", "j1", "h-0", "4"),
                pod("ns", "p2", "j2", "h-0", "2"),
            ],
            vec![],
            vec![],
        );
        assert_eq!(c.job_pods("ns", "j1").len(), 1);
        assert!(c.pod("ns", "p2").is_some() && c.pod("other", "p2").is_none());
        let cap = c.capacity(1);
        assert_eq!(cap.series["h200"].free_gpus, 2);
        assert_eq!(cap.nodes[0].memory_gb, 1024.0);
    }
}
