//! A consistent view of the cluster for one pass, read from the reflector stores, and the
//! conversions of typed Kubernetes objects into core's plain inputs (`NodeInfo`, `PodInfo`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node};

use crate::watched_pod::{WatchedContainer, WatchedPod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use tuneplane_core::capacity::{CapacitySnapshot, GpuShare};
use tuneplane_core::capacity_compute::{
    ADMITTED_GPUS_ANNOTATION, NodeInfo, PodInfo, compute_capacity_with_share, parse_count,
    parse_cpu, parse_memory_gb,
};
use tuneplane_core::constants::{
    GPU_RESOURCE, JOB_ID_LABEL, MANAGED_BY, MANAGED_BY_LABEL, SERIES_LABEL,
};

use crate::rayjob::RayJob;

/// How long a workload this process created is taken to exist though the cluster cache does not
/// show it yet: the watch that brings it lags the create, most under load (a 1,000-node comparison
/// run at 200 requests/s re-created 91 of 200 RayJobs a pass later: four refused creates each).
pub const TRUST_OWN_CREATE: Duration = Duration::from_secs(30);

/// Label KubeRay (and the Job controller) put on the submitter's pods.
pub const SUBMITTER_LABEL: &str = "job-name";

/// Whether the pod with metadata `pod` is a pod of the job `job_id` whose workload is `workload`, judged by who made
/// it, not by labels alone (a label is only as good as whoever wrote it):
/// - the CPU job's own pod: named `workload`, made by TunePlane (no controller), carrying the
///   platform's job label;
/// - a Ray pod: controlled by the RayCluster KubeRay made for the RayJob (`<workload>-…`), with the
///   platform's job label (copied from the rendered template);
/// - KubeRay's submitter: controlled by the Job named `workload`.
pub fn belongs_to(pod: &kube::core::ObjectMeta, job_id: &str, workload: &str) -> bool {
    let controller = pod
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let labelled = pod
        .labels
        .as_ref()
        .and_then(|l| l.get(JOB_ID_LABEL))
        .map(String::as_str)
        == Some(tuneplane_core::render::label_value(job_id).as_str());
    match controller {
        None => labelled && pod.name.as_deref() == Some(workload),
        Some(o) if o.kind == "RayCluster" => {
            labelled
                && o.name
                    .strip_prefix(workload)
                    .and_then(|rest| rest.strip_prefix('-'))
                    // KubeRay's random suffix has no '-': `tp-j-a2-x1y2z` is attempt 2's
                    // cluster, not attempt 1's.
                    .is_some_and(|suffix| !suffix.is_empty() && !suffix.contains('-'))
        }
        Some(o) => o.kind == "Job" && o.name == workload,
    }
}

/// What the reflectors held at the start of a pass, with lookup indexes built once so a pass
/// costs O(objects + jobs), not O(objects × jobs).
#[derive(Debug, Clone, Default)]
pub struct Cluster {
    /// Every node.
    pub nodes: Vec<Arc<Node>>,
    /// Every pod.
    pub pods: Vec<Arc<WatchedPod>>,
    /// TunePlane's RayJobs.
    pub rayjobs: Vec<Arc<RayJob>>,
    /// Warning events, sorted by (namespace, involved object name).
    pub events: Vec<Arc<Event>>,
    // Indexes into `pods`/`rayjobs`, sorted by (namespace, name) or (namespace, job-id label):
    // lookups are binary searches over the objects' own strings, so building them copies no key.
    pods_by_name: Vec<u32>,
    pods_by_job: Vec<u32>,
    rayjobs_by_name: Vec<u32>,
    // Nodes by name (the loss rules look up every running job's nodes each pass).
    nodes_by_name: Vec<u32>,
}

pub(crate) fn ns_name(meta: &kube::core::ObjectMeta) -> (&str, &str) {
    (
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

fn ns_job(pod: &WatchedPod) -> Option<(&str, &str)> {
    let job = pod.metadata.labels.as_ref()?.get(JOB_ID_LABEL)?;
    Some((
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        job.as_str(),
    ))
}

/// Indexes `0..len` whose key is `Some`, sorted by it (each key computed once).
fn sorted_index<'a>(len: usize, key: impl Fn(usize) -> Option<(&'a str, &'a str)>) -> Vec<u32> {
    let mut keyed: Vec<((&str, &str), u32)> = (0..len)
        .filter_map(|i| Some((key(i)?, u32::try_from(i).ok()?)))
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// The entries of a sorted index whose key equals `want`.
fn lookup<'i, 'a>(
    index: &'i [u32],
    want: (&str, &str),
    key: impl Fn(usize) -> Option<(&'a str, &'a str)>,
) -> &'i [u32] {
    let start = index.partition_point(|&i| key(i as usize) < Some(want));
    let len = index[start..]
        .iter()
        .take_while(|&&i| key(i as usize) == Some(want))
        .count();
    &index[start..start + len]
}

pub(crate) fn event_key(e: &Event) -> (&str, &str) {
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

/// Whether `node` carries a taint with one of `keys`.
pub fn has_taint(node: &Node, keys: &[String]) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(|t| keys.contains(&t.key)))
}

/// The capacity inputs of a pod: requests (limits when no request) summed over containers,
/// the larger of that and any single init container.
pub fn pod_info(pod: &WatchedPod) -> PodInfo {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let spec = pod.spec.as_ref();
    let request = |c: &WatchedContainer, key: &str| -> Option<String> {
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
        job_id: pod.labels().get(JOB_ID_LABEL).cloned(),
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
        pods: Vec<Arc<WatchedPod>>,
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
        c.pods_by_name = sorted_index(c.pods.len(), |i| Some(ns_name(&c.pods[i].metadata)));
        c.nodes_by_name = sorted_index(c.nodes.len(), |i| Some(ns_name(&c.nodes[i].metadata)));
        c.pods_by_job = sorted_index(c.pods.len(), |i| ns_job(&c.pods[i]));
        c.rayjobs_by_name =
            sorted_index(c.rayjobs.len(), |i| Some(ns_name(&c.rayjobs[i].metadata)));
        c
    }

    /// The capacity snapshot at `now_ms`, CPU-only room computed with `share`. A node carrying
    /// one of the `interruption_taints` (a spot reclaim or scale-down notice, such as
    /// `karpenter.sh/disrupted`) takes no new pod of TunePlane's: it counts as blocked, like a
    /// cordoned one (other taints are the scheduler's to judge).
    pub fn capacity(
        &self,
        now_ms: i64,
        share: GpuShare,
        interruption_taints: &[String],
    ) -> CapacitySnapshot {
        let nodes: Vec<NodeInfo> = self
            .nodes
            .iter()
            .map(|n| {
                let mut info = node_info(n);
                info.cordoned |= has_taint(n, interruption_taints);
                info
            })
            .collect();
        let pods: Vec<PodInfo> = self.pods.iter().map(|p| pod_info(p)).collect();
        compute_capacity_with_share(u64::try_from(now_ms).unwrap_or(0), &nodes, &pods, share)
    }

    /// The node named `name`, if the reflector holds it.
    pub fn node(&self, name: &str) -> Option<&Node> {
        // Nodes have no namespace: their key is ("", name).
        let found = lookup(&self.nodes_by_name, ("", name), |i| {
            Some(ns_name(&self.nodes[i].metadata))
        });
        found.first().map(|&i| self.nodes[i as usize].as_ref())
    }

    /// Why node `name` cannot take new pods (`cordoned`, `NotReady`, `gone`), or `None` if it can.
    pub fn node_unusable(&self, name: &str) -> Option<&'static str> {
        match self.node(name) {
            None => Some("gone"),
            Some(n) => {
                let info = node_info(n);
                if info.cordoned {
                    Some("cordoned")
                } else if !info.ready {
                    Some("NotReady")
                } else {
                    None
                }
            }
        }
    }

    /// The RayJob `namespace/name`, if the reflector holds it.
    pub fn rayjob(&self, namespace: &str, name: &str) -> Option<&RayJob> {
        let found = lookup(&self.rayjobs_by_name, (namespace, name), |i| {
            Some(ns_name(&self.rayjobs[i].metadata))
        });
        found.first().map(|&i| self.rayjobs[i as usize].as_ref())
    }

    /// The pod `namespace/name`, if the reflector holds it.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<&WatchedPod> {
        let found = lookup(&self.pods_by_name, (namespace, name), |i| {
            Some(ns_name(&self.pods[i].metadata))
        });
        found.first().map(|&i| self.pods[i as usize].as_ref())
    }

    /// The pods of `job`: those with its label that [`belongs_to`] its workload.
    pub fn pods_of(&self, job: &tuneplane_core::job::JobRecord) -> Vec<&WatchedPod> {
        // Every pass asks this of every active job: name the workload without a copy when the
        // record has it.
        let computed;
        let workload = match job.workload_name.as_deref() {
            Some(w) => w,
            None => {
                computed = tuneplane_core::render::job_workload_name(job);
                computed.as_str()
            }
        };
        let label = tuneplane_core::render::label_value(&job.id);
        self.job_pods(&job.spec.namespace, &label)
            .into_iter()
            .filter(|p| belongs_to(&p.metadata, &job.id, workload))
            .collect()
    }

    /// Pods carrying the job-id label value `label` in `namespace` (candidates: see
    /// [`Cluster::pods_of`]).
    pub fn job_pods(&self, namespace: &str, label: &str) -> Vec<&WatchedPod> {
        lookup(&self.pods_by_job, (namespace, label), |i| {
            ns_job(&self.pods[i])
        })
        .iter()
        .map(|&i| self.pods[i as usize].as_ref())
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
    use serde_json::{Value, json};

    use super::*;

    fn pod_made_by(name: &str, labels: Value, controller: Option<(&str, &str)>) -> WatchedPod {
        let owners: Vec<Value> = controller
            .into_iter()
            .map(|(kind, name)| json!({"apiVersion": "v1", "kind": kind, "name": name, "uid": "u", "controller": true}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": labels, "ownerReferences": owners},
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_belongs_to_a_job_by_who_made_it_not_by_its_labels_alone() {
        let own = json!({JOB_ID_LABEL: "j-1"});
        let cases = [
            // TunePlane's CPU pod, a Ray pod of the job's cluster, the job's submitter.
            (pod_made_by("tp-j-1", own.clone(), None), true),
            (
                pod_made_by(
                    "tp-j-1-head",
                    own.clone(),
                    Some(("RayCluster", "tp-j-1-x7k2p")),
                ),
                true,
            ),
            (
                pod_made_by(
                    "tp-j-1-abcde",
                    json!({SUBMITTER_LABEL: "tp-j-1"}),
                    Some(("Job", "tp-j-1")),
                ),
                true,
            ),
            // The job's labels on pods somebody else made.
            (
                pod_made_by("tp-j-1", own.clone(), Some(("ReplicaSet", "tp-j-1"))),
                false,
            ),
            (pod_made_by("other", own.clone(), None), false),
            (
                pod_made_by(
                    "tp-j-1-head",
                    own.clone(),
                    Some(("RayCluster", "tp-j-10-x7k2p")),
                ),
                false,
            ),
            (
                pod_made_by(
                    "spoof",
                    json!({SUBMITTER_LABEL: "tp-j-1"}),
                    Some(("Job", "tp-j-2")),
                ),
                false,
            ),
            (
                pod_made_by(
                    "tp-j-1-head",
                    json!({}),
                    Some(("RayCluster", "tp-j-1-x7k2p")),
                ),
                false,
            ),
        ];
        for (pod, want) in &cases {
            assert_eq!(
                belongs_to(&pod.metadata, "j-1", "tp-j-1"),
                *want,
                "{:?}",
                pod.metadata
            );
        }
    }

    fn event(ns: &str, name: &str, kind: &str) -> Arc<Event> {
        let e: Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{name}.{kind}")},
            "involvedObject": {"namespace": ns, "name": name}, "type": kind, "reason": "R"
        }))
        .unwrap();
        Arc::new(e)
    }

    fn pod(ns: &str, name: &str, job: &str, node: &str, gpus: &str) -> Arc<WatchedPod> {
        let p: WatchedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": {JOB_ID_LABEL: job}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {GPU_RESOURCE: gpus}}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
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
        .unwrap();
        let c = Cluster::new(
            vec![Arc::new(node)],
            vec![
                pod("ns", "p3", "j1", "", "0"),
                pod("ns", "p1", "j1", "h-0", "4"),
                pod("ns", "p2", "j2", "h-0", "2"),
                pod("a", "p2", "j1", "", "0"),
                pod("z", "p1", "j1", "", "0"),
            ],
            vec![],
            vec![],
        );
        let names = |pods: Vec<&WatchedPod>| -> Vec<String> {
            pods.iter()
                .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
                .collect()
        };
        // A job's pods come in snapshot order, as before the index.
        assert_eq!(names(c.job_pods("ns", "j1")), ["ns/p3", "ns/p1"]);
        assert_eq!(names(c.job_pods("z", "j1")), ["z/p1"]);
        assert!(c.job_pods("ns", "j3").is_empty() && c.job_pods("b", "j1").is_empty());
        assert!(c.pod("ns", "p2").is_some() && c.pod("other", "p2").is_none());
        assert_eq!(
            c.pod("a", "p2").map(|p| p.labels()[JOB_ID_LABEL].as_str()),
            Some("j1")
        );
        assert!(c.pod("ns", "p4").is_none() && c.pod("", "").is_none());
        let cap = c.capacity(1, GpuShare::default(), &[]);
        assert_eq!(cap.series["h200"].free_gpus, 2);
        assert_eq!(cap.nodes[0].memory_gb, 1024.0);
    }
}
