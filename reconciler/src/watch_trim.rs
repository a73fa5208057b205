//! What the reflectors keep. Every object is stripped as it arrives from the watch to the fields
//! a pass reads (`cluster::node_info`/`pod_info`, `status::assess_pod`/`assess_rayjob`, the
//! snapshot's indexes, `sync::copy_warnings`/`sweep_orphans`, `pass::reservations`). Pods arrive
//! as [`WatchedPod`] (no env, volumes or probes are ever read into memory); the strip trims their
//! metadata (managedFields, foreign labels), resources and statuses. A Node loses its image list.
//! Log archiving lists pods from the API itself, so it still sees whole pods.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Event, Node, NodeCondition, NodeSpec, NodeStatus, ObjectReference,
    PodCondition, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use tuneplane_core::capacity_compute::ADMITTED_GPUS_ANNOTATION;
use tuneplane_core::constants::{
    GPU_RESOURCE, JOB_ID_LABEL, MANAGED_BY_LABEL, PLAYGROUND_LABEL, POOL_LABEL, SERIES_LABEL,
    WORKLOAD_LABEL,
};
use tuneplane_core::render::GRANT_LABEL;

use crate::rayjob::{RayJob, RayJobSpec};
use crate::watched_pod::{WatchedContainer, WatchedPod, WatchedPodStatus};

/// Pod labels a pass reads (the submitter's `job-name` finds KubeRay's submitter pod, whose
/// controller [`crate::cluster::belongs_to`] then checks; the workload and grant labels tell
/// what deleting a CPU job's Pod leaves, `workload::Leftovers::of`; KubeRay's node type finds
/// the head a stopped Ray job is stopped through, `crate::ray_stop`).
const POD_LABELS: [&str; 7] = [
    JOB_ID_LABEL,
    crate::ray_stop::NODE_TYPE_LABEL,
    POOL_LABEL,
    MANAGED_BY_LABEL,
    crate::cluster::SUBMITTER_LABEL,
    WORKLOAD_LABEL,
    GRANT_LABEL,
];
/// Resource names `pod_info` and `node_info` read.
const RESOURCES: [&str; 3] = [GPU_RESOURCE, "cpu", "memory"];

fn keep_keys<V>(map: &mut Option<BTreeMap<String, V>>, keys: &[&str]) {
    if let Some(m) = map {
        m.retain(|k, _| keys.contains(&k.as_str()));
        if m.is_empty() {
            *map = None;
        }
    }
}

/// The conditions `keep` returns (reduced to what a pass reads); the others are dropped.
fn keep_conditions<C>(
    conditions: Option<Vec<C>>,
    keep: impl FnMut(C) -> Option<C>,
) -> Option<Vec<C>> {
    conditions.map(|v| v.into_iter().filter_map(keep).collect())
}

/// Object metadata reduced to name, namespace, uid, deletion and creation timestamps, the
/// controller among the owners (kind and name: who made the object), and the given labels and
/// annotations.
fn strip_meta(meta: &mut kube::core::ObjectMeta, labels: &[&str], annotations: &[&str]) {
    let controller = meta
        .owner_references
        .take()
        .into_iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| OwnerReference {
            kind: o.kind,
            name: o.name,
            controller: Some(true),
            ..OwnerReference::default()
        });
    let mut kept = kube::core::ObjectMeta {
        owner_references: controller.map(|o| vec![o]),
        name: meta.name.take(),
        namespace: meta.namespace.take(),
        uid: meta.uid.take(),
        creation_timestamp: meta.creation_timestamp.take(),
        deletion_timestamp: meta.deletion_timestamp.take(),
        labels: meta.labels.take(),
        annotations: meta.annotations.take(),
        ..kube::core::ObjectMeta::default()
    };
    keep_keys(&mut kept.labels, labels);
    keep_keys(&mut kept.annotations, annotations);
    *meta = kept;
}

/// A container's resources reduced to its request or (when it has none) its limit per resource
/// `pod_info` reads, kept as the request: the one map `pod_info` then finds it in.
fn strip_resources(c: &mut WatchedContainer) {
    c.resources = c.resources.take().and_then(|r| {
        let mut requests = r.requests.unwrap_or_default();
        requests.retain(|k, _| RESOURCES.contains(&k.as_str()));
        for (k, v) in r.limits.into_iter().flatten() {
            if RESOURCES.contains(&k.as_str()) {
                requests.entry(k).or_insert(v);
            }
        }
        (!requests.is_empty()).then(|| ResourceRequirements {
            requests: Some(requests),
            ..ResourceRequirements::default()
        })
    });
}

fn strip_container_status(cs: &mut ContainerStatus) {
    let terminated = |t: ContainerStateTerminated| ContainerStateTerminated {
        exit_code: t.exit_code,
        reason: t.reason,
        ..ContainerStateTerminated::default()
    };
    let state = cs.state.take().map(|s| ContainerState {
        waiting: s.waiting.map(|w| ContainerStateWaiting {
            reason: w.reason,
            message: w.message,
        }),
        running: s.running.map(|_| ContainerStateRunning::default()),
        terminated: s.terminated.map(terminated),
    });
    // The exit before a restart: a capsule refused by an init container that now backs off.
    let last_state = cs
        .last_state
        .take()
        .and_then(|s| s.terminated)
        .map(|t| ContainerState {
            terminated: Some(terminated(t)),
            ..ContainerState::default()
        });
    *cs = ContainerStatus {
        name: std::mem::take(&mut cs.name),
        state,
        last_state,
        restart_count: cs.restart_count,
        ..ContainerStatus::default()
    };
}

/// Reduces a pod to what a pass reads: name, namespace, the job, pool and managed-by labels,
/// the admitted-GPUs annotation, deletion timestamp; node name and the cpu/memory/GPU requests
/// (or limits) of its (init) containers; phase, reason, the `PodScheduled` condition, and the
/// waiting reason/message and exit code of its container statuses.
pub fn strip_pod(pod: &mut WatchedPod) {
    // A playground's pod keeps its IP: the API's proxy reaches the server there (the reconciler
    // records it). Job pods, the many, do not need theirs.
    let playground = pod
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(PLAYGROUND_LABEL));
    strip_meta(&mut pod.metadata, &POD_LABELS, &[ADMITTED_GPUS_ANNOTATION]);
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers.iter_mut().for_each(strip_resources);
        spec.init_containers
            .iter_mut()
            .flatten()
            .for_each(strip_resources);
    }
    if let Some(status) = pod.status.take() {
        let conditions = keep_conditions(status.conditions, |c| match c.type_.as_str() {
            "PodScheduled" => Some(PodCondition {
                type_: c.type_,
                status: c.status,
                message: c.message,
                ..PodCondition::default()
            }),
            // Kubernetes took the pod away (eviction, preemption, garbage collection).
            "DisruptionTarget" => Some(PodCondition {
                type_: c.type_,
                status: c.status,
                reason: c.reason,
                message: c.message,
                ..PodCondition::default()
            }),
            _ => None,
        });
        // Statuses are read for a waiting reason or an exit code only: a list in which every
        // container runs (the steady state) is dropped whole, so `first()` is never shifted.
        let statuses = |v: Option<Vec<ContainerStatus>>| {
            let mut v = v?;
            // A restart count is read too: a Ray node restarted under a job.
            let read = |cs: &ContainerStatus| {
                cs.restart_count > 0
                    || cs
                        .state
                        .as_ref()
                        .is_some_and(|s| s.waiting.is_some() || s.terminated.is_some())
            };
            if !v.iter().any(read) {
                return None;
            }
            v.iter_mut().for_each(strip_container_status);
            Some(v)
        };
        // A kubelet eviction's words ("The node was low on resource: memory.").
        let message = status.message.filter(|_| status.reason.is_some());
        pod.status = Some(WatchedPodStatus {
            phase: status.phase,
            reason: status.reason,
            message,
            pod_ip: status.pod_ip.filter(|_| playground),
            conditions,
            container_statuses: statuses(status.container_statuses),
            init_container_statuses: statuses(status.init_container_statuses),
        });
    }
}

/// Reduces a node to what `node_info` and the loss rules (`crate::loss`) read: name, the series
/// label, `unschedulable`, its taints (interruption notices), the cpu/memory/GPU capacity and
/// allocatable, and the `Ready` condition with its transition time, reason and message.
pub fn strip_node(node: &mut Node) {
    strip_meta(&mut node.metadata, &[SERIES_LABEL], &[]);
    let spec = node.spec.take().unwrap_or_default();
    node.spec = Some(NodeSpec {
        unschedulable: spec.unschedulable,
        taints: spec.taints.filter(|t| !t.is_empty()),
        ..NodeSpec::default()
    });
    if let Some(mut status) = node.status.take() {
        keep_keys(&mut status.capacity, &RESOURCES);
        keep_keys(&mut status.allocatable, &RESOURCES);
        let conditions = keep_conditions(status.conditions, |c| {
            (c.type_ == "Ready").then(|| NodeCondition {
                type_: c.type_,
                status: c.status,
                // How long a node has been NotReady decides when its jobs are lost.
                last_transition_time: c.last_transition_time,
                reason: c.reason,
                message: c.message,
                ..NodeCondition::default()
            })
        });
        node.status = Some(NodeStatus {
            capacity: status.capacity,
            allocatable: status.allocatable,
            conditions,
            ..NodeStatus::default()
        });
    }
}

/// Reduces an event to what `copy_warnings` reads: uid, name and timestamps, the involved
/// object's kind, namespace and name, type, reason and message.
pub fn strip_event(event: &mut Event) {
    // The resourceVersion orders events of the same second.
    let version = event.metadata.resource_version.take();
    strip_meta(&mut event.metadata, &[], &[]);
    event.metadata.resource_version = version;
    let o = std::mem::take(&mut event.involved_object);
    *event = Event {
        metadata: std::mem::take(&mut event.metadata),
        involved_object: ObjectReference {
            kind: o.kind,
            namespace: o.namespace,
            name: o.name,
            ..ObjectReference::default()
        },
        type_: event.type_.take(),
        reason: event.reason.take(),
        message: event.message.take(),
        first_timestamp: event.first_timestamp.take(),
        last_timestamp: event.last_timestamp.take(),
        event_time: event.event_time.take(),
        ..Event::default()
    };
}

/// Reduces a RayJob to its name, namespace, job-id and managed-by labels, deletion timestamp and
/// status (`assess_rayjob` reads the status only; the spec is core's rendering, never read back).
pub fn strip_rayjob(rj: &mut RayJob) {
    strip_meta(&mut rj.metadata, &[JOB_ID_LABEL, MANAGED_BY_LABEL], &[]);
    rj.spec = RayJobSpec::default();
}

#[cfg(test)]
mod tests {
    use kube::ResourceExt;
    use tuneplane_core::constants::MANAGED_BY;

    use super::*;
    use crate::cluster::{event_key, managed, node_info, ns_name, pod_info};
    use crate::status::{assess_pod, assess_rayjob, pending_from_pods};
    use tuneplane_core::render::bootstrap::{FETCH_CONTAINER, MISMATCH_EXIT};

    /// A pod as the API server returns it: managedFields, env, volumes, probes, statuses.
    fn full_pod(phase: &str, status: serde_json::Value) -> WatchedPod {
        let mut status = status;
        status["phase"] = phase.into();
        status["hostIP"] = "10.0.0.1".into();
        status["podIP"] = "10.1.0.7".into();
        status["qosClass"] = "Burstable".into();
        status["startTime"] = "2026-01-01T00:00:00Z".into();
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "tp-j1", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "generateName": "tp-", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {JOB_ID_LABEL: "j1", POOL_LABEL: "main", MANAGED_BY_LABEL: MANAGED_BY,
                           "job-name": "tp-j1", "team": "a"},
                "annotations": {ADMITTED_GPUS_ANNOTATION: "4", "kubectl.kubernetes.io/x": "y"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}],
                "managedFields": [{"manager": "kubelet", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]
            },
            "spec": {
                "nodeName": "h-0", "restartPolicy": "Never", "serviceAccountName": "sa",
                "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists"}],
                "volumes": [{"name": "code", "emptyDir": {}}],
                "initContainers": [{"name": "fetch", "image": "busybox", "command": ["sh"],
                    "resources": {"requests": {"cpu": "8", "memory": "1Gi", "ephemeral-storage": "1Gi"}}}],
                "containers": [
                    {"name": "main", "image": "python:3.12", "command": ["python", "train.py"],
                     "env": [{"name": "EPOCHS", "value": "1"}],
                     "volumeMounts": [{"name": "code", "mountPath": "/code"}],
                     "readinessProbe": {"exec": {"command": ["true"]}},
                     "resources": {"requests": {"cpu": "2", "memory": "16Gi"},
                                   "limits": {GPU_RESOURCE: "4", "memory": "32Gi"}}},
                    {"name": "sidecar", "image": "x",
                     "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}}
                ]
            },
            "status": status
        }))
        .unwrap()
    }

    fn stripped(pod: &WatchedPod) -> WatchedPod {
        let mut p = pod.clone();
        strip_pod(&mut p);
        p
    }

    #[test]
    fn only_a_playgrounds_pod_keeps_its_ip() {
        let mut pod = WatchedPod {
            status: Some(WatchedPodStatus {
                pod_ip: Some("10.244.1.9".into()),
                ..WatchedPodStatus::default()
            }),
            ..WatchedPod::default()
        };
        let ip = |p: &WatchedPod| p.status.as_ref().and_then(|s| s.pod_ip.clone());
        assert_eq!(ip(&stripped(&pod)), None);
        pod.metadata.labels = Some([(PLAYGROUND_LABEL.to_owned(), "pg-1".to_owned())].into());
        assert_eq!(ip(&stripped(&pod)).as_deref(), Some("10.244.1.9"));
    }

    #[test]
    fn a_stripped_pod_gives_the_same_capacity_inputs_and_assessment() {
        let waiting = |reason: &str| {
            serde_json::json!({"state": {"waiting": {"reason": reason, "message": "back-off"}},
                "name": "main", "image": "python:3.12", "imageID": "", "ready": false,
                "restartCount": 3, "lastState": {"terminated": {"exitCode": 1}}})
        };
        let cases = [
            full_pod(
                "Running",
                serde_json::json!({
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "main", "image": "i", "imageID": "sha", "ready": true,
                    "restartCount": 0, "started": true,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}),
            ),
            full_pod(
                "Pending",
                serde_json::json!({
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
            ),
            full_pod(
                "Pending",
                serde_json::json!({
                "initContainerStatuses": [waiting("ImagePullBackOff")],
                "containerStatuses": [waiting("PodInitializing")]}),
            ),
            full_pod("Pending", serde_json::json!({})),
            full_pod("Failed", serde_json::json!({"reason": "DeadlineExceeded"})),
            full_pod(
                "Failed",
                serde_json::json!({"containerStatuses": [{"name": "main",
                "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 3, "reason": "Error",
                    "message": "a long termination message", "finishedAt": "2026-01-01T00:00:00Z"}}}]}),
            ),
            full_pod("Succeeded", serde_json::json!({})),
            // A capsule refused before a restart: only the last state has the exit.
            full_pod(
                "Pending",
                serde_json::json!({"initContainerStatuses": [{"name": FETCH_CONTAINER,
                "image": "i", "imageID": "", "ready": false, "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                "lastState": {"terminated": {"exitCode": MISMATCH_EXIT, "reason": "Error",
                    "finishedAt": "2026-01-01T00:00:00Z"}}}]}),
            ),
        ];
        let rayjob = crate::rayjob::RayJob::new(
            "tp-j",
            &crate::rayjob::resource(),
            crate::rayjob::RayJobSpec::default(),
        );
        for full in &cases {
            let small = stripped(full);
            assert_eq!(
                assess_rayjob(&rayjob, &[&small], &[]),
                assess_rayjob(&rayjob, &[full], &[])
            );
            assert_eq!(pod_info(&small), pod_info(full));
            assert_eq!(assess_pod(&small), assess_pod(full));
            assert_eq!(pending_from_pods(&[&small]), pending_from_pods(&[full]));
            assert_eq!(managed(&small.metadata), managed(&full.metadata));
            assert_eq!(
                small.labels().get(JOB_ID_LABEL),
                full.labels().get(JOB_ID_LABEL)
            );
            assert_eq!(
                small.labels().get(POOL_LABEL),
                full.labels().get(POOL_LABEL)
            );
            assert_eq!(ns_name(&small.metadata), ns_name(&full.metadata));
            assert!(small.metadata.managed_fields.is_none());
            let spec = small.spec.as_ref().expect("spec");
            // Resources a pass does not read are gone (the init container's ephemeral storage).
            let init = &spec.init_containers.as_ref().expect("init containers")[0];
            let requests = init.resources.as_ref().and_then(|r| r.requests.as_ref());
            assert!(requests.is_some_and(|r| !r.contains_key("ephemeral-storage")));
            assert!(small.labels().get("team").is_none());
            for (job, workload) in [("j1", "tp-j1"), ("j2", "tp-j1"), ("j1", "tp-j2")] {
                assert_eq!(
                    crate::cluster::belongs_to(&small.metadata, job, workload),
                    crate::cluster::belongs_to(&full.metadata, job, workload)
                );
            }
        }
        let running = stripped(&cases[0]);
        let status = running.status.as_ref().expect("status");
        assert!(status.container_statuses.is_none());
        let c = &running.spec.as_ref().expect("spec").containers[0];
        assert!(c.resources.as_ref().is_some_and(|r| r.limits.is_none()));
        let info = pod_info(&running);
        assert_eq!((info.gpus_requested, info.gpus_admitted), (4, Some(4)));
        assert_eq!(info.cpus, 8.0); // the init container's request, larger than the sum
        // A deleted pod keeps its deletion timestamp (the orphan sweep skips it).
        let mut deleting = cases[0].clone();
        deleting.metadata.deletion_timestamp = cases[0].metadata.creation_timestamp.clone();
        assert!(stripped(&deleting).metadata.deletion_timestamp.is_some());
    }

    #[test]
    fn a_stripped_node_gives_the_same_capacity_inputs() {
        let full: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "h-0", "labels": {SERIES_LABEL: "h200", "kubernetes.io/os": "linux"},
                "managedFields": [{"manager": "kubelet"}]},
            "spec": {"unschedulable": true, "podCIDR": "10.0.0.0/24",
                "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {GPU_RESOURCE: "8", "cpu": "96", "memory": "1Ti", "pods": "110"},
                "allocatable": {GPU_RESOURCE: "7", "cpu": "95500m", "memory": "1000Gi", "pods": "110"},
                "conditions": [{"type": "MemoryPressure", "status": "False"},
                               {"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status"}],
                "images": [{"names": ["python:3.12"], "sizeBytes": 1000}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]
            }
        }))
        .unwrap();
        let mut small = full.clone();
        strip_node(&mut small);
        assert_eq!(node_info(&small), node_info(&full));
        let status = small.status.as_ref().expect("status");
        assert!(status.images.is_none() && status.addresses.is_none());
        assert!(small.labels().get("kubernetes.io/os").is_none());
    }

    #[test]
    fn stripped_nodes_and_pods_give_the_same_infrastructure_losses() {
        use crate::attempt_loss::{LossRules, infrastructure_loss};
        use crate::cluster::Cluster;
        use std::sync::Arc;
        let node = |ready: &str, taint: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1", "managedFields": [{"manager": "kubelet"}]},
                "spec": {"taints": [{"key": taint, "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": ready,
                    "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status."}]}
            }))
            .unwrap()
        };
        let pod = |extra: serde_json::Value| -> WatchedPod {
            let mut p = serde_json::json!({
                "metadata": {"name": "tp-j", "namespace": "ns", "labels": {"tuneplane.io/job-id": "j"},
                    "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"nodeName": "n1", "containers": [{"name": "job"}]},
                "status": {"phase": "Running", "containerStatuses": [{"name": "job", "image": "i",
                    "imageID": "", "ready": true, "restartCount": 2, "state": {"running": {}}}]}
            });
            if let (Some(status), Some(more)) = (p["status"].as_object_mut(), extra.as_object()) {
                for (k, v) in more {
                    status.insert(k.clone(), v.clone());
                }
            }
            serde_json::from_value(p).unwrap()
        };
        let spec: tuneplane_core::spec::JobSpec = serde_json::from_value(serde_json::json!({
            "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true", "env": {},
            "pools": [{"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0, "cpus": 1.0, "memory_gb": 1.0}],
            "deadlines": {"pre_running_seconds": 10, "run_seconds": 100}, "priority": 0, "labels": {},
            "namespace": "ns", "platform_version": "0"
        }))
        .unwrap();
        let mut job = tuneplane_core::job::JobRecord::new_queued(
            "j".parse().unwrap(),
            "t".parse().unwrap(),
            spec,
            "ab",
            0,
        );
        job.state = tuneplane_core::job::JobState::Running;
        job.running_at_ms = Some(1);
        let keys = vec!["karpenter.sh/disrupted".to_owned()];
        let rules = LossRules {
            not_ready_grace_ms: 40_000,
            interruption_taints: &keys,
        };
        let now = 1_767_225_700_000; // 100 s after the transition
        let cases = [
            (node("Unknown", "x"), pod(serde_json::json!({}))),
            (
                node("True", "karpenter.sh/disrupted"),
                pod(serde_json::json!({})),
            ),
            (
                node("True", "x"),
                pod(
                    serde_json::json!({"conditions": [{"type": "DisruptionTarget", "status": "True",
                    "reason": "PreemptionByScheduler", "message": "preempted"}]}),
                ),
            ),
            (
                node("True", "x"),
                pod(
                    serde_json::json!({"phase": "Failed", "reason": "Evicted", "message": "low on memory"}),
                ),
            ),
        ];
        for (n, p) in cases {
            let loss = |n: Node, p: WatchedPod| {
                let c = Cluster::new(vec![Arc::new(n)], vec![Arc::new(p)], Vec::new(), Vec::new());
                infrastructure_loss(&c, &job, now, &rules, false)
            };
            let (mut small_n, mut small_p) = (n.clone(), p.clone());
            strip_node(&mut small_n);
            strip_pod(&mut small_p);
            let full = loss(n, p);
            assert!(full.is_some());
            assert_eq!(loss(small_n, small_p), full);
        }
    }

    #[test]
    fn a_stripped_event_and_rayjob_keep_what_a_pass_reads() {
        let full: Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "tp-a.1", "namespace": "ns", "uid": "e-1",
                "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [{"manager": "x"}]},
            "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "tp-a", "uid": "p",
                "fieldPath": "spec.containers{main}", "resourceVersion": "9"},
            "type": "Warning", "reason": "BackOff", "message": "Back-off restarting",
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
            "count": 7, "source": {"component": "kubelet"}, "reportingComponent": "kubelet"
        }))
        .unwrap();
        let mut small = full.clone();
        strip_event(&mut small);
        assert_eq!(small.uid(), full.uid());
        assert_eq!(small.name_any(), full.name_any());
        assert_eq!(event_key(&small), event_key(&full));
        assert_eq!(small.involved_object.kind, full.involved_object.kind);
        assert_eq!(
            (&small.type_, &small.reason, &small.message),
            (&full.type_, &full.reason, &full.message)
        );
        assert_eq!(small.last_timestamp, full.last_timestamp);
        assert_eq!(small.first_timestamp, full.first_timestamp);
        assert_eq!(small.creation_timestamp(), full.creation_timestamp());
        assert!(small.source.is_none() && small.count.is_none());

        let full: RayJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "tp-a", "namespace": "ns",
                "labels": {JOB_ID_LABEL: "a", MANAGED_BY_LABEL: MANAGED_BY}},
            "spec": {"entrypoint": "python train.py", "rayClusterSpec": {"headGroupSpec": {}}},
            "status": {"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded", "message": "m"}
        }))
        .unwrap();
        let mut small = full.clone();
        strip_rayjob(&mut small);
        assert_eq!(
            crate::status::assess_rayjob(&small, &[], &[]),
            crate::status::assess_rayjob(&full, &[], &[])
        );
        assert_eq!(
            small.labels().get(JOB_ID_LABEL),
            full.labels().get(JOB_ID_LABEL)
        );
        assert!(managed(&small.metadata));
        assert!(small.spec.ray_cluster_spec.is_none());
    }
}
