//! Whether the infrastructure lost a job's attempt, with the Kubernetes evidence (pure).
//!
//! An attempt is lost to the infrastructure (docs/design.md §6, "Failures and attempts") when
//! - a node it runs on (or was planned on, once it runs) was deleted, or has been NotReady longer
//!   than the grace period (`TUNEPLANE_NODE_LOST_GRACE_SECONDS`);
//! - a node it runs on carries an interruption taint (a spot reclaim, a scale-down;
//!   `TUNEPLANE_INTERRUPTION_TAINTS`): the attempt is stopped with its grace while it still can
//!   save;
//! - one of its pods was evicted, preempted or deleted by Kubernetes (a `DisruptionTarget`
//!   condition, a kubelet eviction or node shutdown, a deletion TunePlane did not make);
//! - or, for a Ray job that ended badly, a Ray head or worker pod was replaced or restarted while
//!   it ran (the user's process failed because its node went, not on its own).
//!
//! Infrastructure evidence wins over the workload's own failure: a driver that exits 1 because
//! its worker's node vanished did not fail by itself. Success always stands.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use tuneplane_core::job::{Failure, FailureReason, JobRecord, JobState};

use crate::cluster::Cluster;
use crate::watched_pod::WatchedPod;

/// What decides a loss besides the cluster: the NotReady grace and the interruption taints.
#[derive(Debug, Clone, Copy)]
pub struct LossRules<'a> {
    /// How long a node may be NotReady before its jobs' attempts are lost.
    pub not_ready_grace_ms: i64,
    /// Taint keys that announce a node's interruption.
    pub interruption_taints: &'a [String],
}

/// Pod `status.reason` values the kubelet writes when it ends a pod for the node's sake.
const KUBELET_EVICTIONS: [&str; 5] = [
    "Evicted",
    "Preempting",
    "NodeShutdown",
    "Terminated",
    "UnexpectedAdmissionError",
];

fn failure(reason: FailureReason, message: String, evidence: Vec<String>) -> Failure {
    let mut f = Failure::new(reason, message);
    f.evidence = evidence;
    f
}

fn ready_condition(node: &Node) -> Option<&k8s_openapi::api::core::v1::NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// The evidence that `node` is lost at `now_ms` (NotReady past the grace), if it is.
fn not_ready_too_long(node: &Node, now_ms: i64, grace_ms: i64) -> Option<String> {
    let ready = ready_condition(node);
    if ready.is_some_and(|c| c.status == "True") {
        return None;
    }
    let since = ready
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_millisecond());
    // Without a transition time the node never reported Ready: wait for the grace from now on
    // (a later pass sees the time the node controller writes).
    let since = since?;
    if now_ms - since < grace_ms {
        return None;
    }
    let (status, why) = ready.map_or(("Unknown", String::new()), |c| {
        let why = match (c.reason.as_deref(), c.message.as_deref()) {
            (Some(r), Some(m)) => format!(" ({r}: {m})"),
            (Some(r), None) => format!(" ({r})"),
            _ => String::new(),
        };
        (c.status.as_str(), why)
    });
    Some(format!(
        "node/{}: Ready={status} for {}s{why}",
        node.name_any(),
        (now_ms - since) / 1000
    ))
}

fn interruption(node: &Node, rules: &LossRules<'_>) -> Option<String> {
    let taints = node.spec.as_ref()?.taints.as_ref()?;
    taints
        .iter()
        .find(|t| rules.interruption_taints.contains(&t.key))
        .map(|t| {
            format!(
                "node/{}: taint {}{}:{} (an interruption notice)",
                node.name_any(),
                t.key,
                t.value
                    .as_deref()
                    .map(|v| format!("={v}"))
                    .unwrap_or_default(),
                t.effect
            )
        })
}

/// Evidence that Kubernetes took `pod` away: a `DisruptionTarget` condition, a kubelet
/// eviction, or (when `deletion_counts`) a deletion TunePlane did not make.
fn pod_disrupted(pod: &WatchedPod, deletion_counts: bool) -> Option<String> {
    let name = pod.name_any();
    let status = pod.status.as_ref();
    if let Some(c) = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    {
        return Some(format!(
            "pod/{name}: DisruptionTarget {}: {}",
            c.reason.as_deref().unwrap_or("(no reason)"),
            c.message.as_deref().unwrap_or("(no message)")
        ));
    }
    if status.and_then(|s| s.phase.as_deref()) == Some("Failed")
        && let Some(reason) = status
            .and_then(|s| s.reason.as_deref())
            .filter(|r| KUBELET_EVICTIONS.contains(r))
    {
        return Some(format!(
            "pod/{name}: {reason}: {}",
            status
                .and_then(|s| s.message.as_deref())
                .unwrap_or("(no message)")
        ));
    }
    if deletion_counts && let Some(at) = &pod.metadata.deletion_timestamp {
        return Some(format!(
            "pod/{name}: deleted at {} by someone other than TunePlane while the job ran",
            at.0
        ));
    }
    None
}

/// The infrastructure loss of `job`'s current attempt at `now_ms`, if any. `workload_ended` is
/// true when the workload itself reports an end (a RayJob KubeRay tears down afterwards, so its
/// pods' deletion is not evidence then).
pub fn infrastructure_loss(
    cluster: &Cluster,
    job: &JobRecord,
    now_ms: i64,
    rules: &LossRules<'_>,
    workload_ended: bool,
) -> Option<Failure> {
    if !matches!(job.state, JobState::Admitted | JobState::Running) {
        return None;
    }
    let pods = cluster.pods_of(job);
    // Nodes the attempt stands on: where its pods are bound, and once it runs every planned
    // node (a pod whose node was deleted is garbage-collected and no longer names it).
    let mut nodes: Vec<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    let planned = job.placements.iter().flat_map(|p| p.nodes.iter());
    if job.state == JobState::Running {
        nodes.extend(planned.cloned());
    } else {
        // Before it runs a deleted planned node is a loss too: it will not come back, and the
        // pod pinned to it would wait out the pre-running deadline.
        nodes.extend(planned.filter(|n| cluster.node(n).is_none()).cloned());
    }
    nodes.sort();
    nodes.dedup();
    let mut lost = Vec::new();
    let mut interrupted = Vec::new();
    for name in &nodes {
        match cluster.node(name) {
            None => lost.push(format!("node/{name}: deleted")),
            Some(node) => {
                if let Some(e) = not_ready_too_long(node, now_ms, rules.not_ready_grace_ms) {
                    lost.push(e);
                } else if let Some(e) = interruption(node, rules) {
                    interrupted.push(e);
                }
            }
        }
    }
    if !lost.is_empty() {
        let message = format!(
            "lost {} node{} it ran on: {}",
            lost.len(),
            if lost.len() == 1 { "" } else { "s" },
            lost.join("; ")
        );
        return Some(failure(FailureReason::NodeLost, message, lost));
    }
    if !interrupted.is_empty() {
        let message = format!(
            "a node it runs on is being reclaimed: {}; the attempt was stopped with its grace to save",
            interrupted.join("; ")
        );
        return Some(failure(FailureReason::Interrupted, message, interrupted));
    }
    // Pods TunePlane's own teardown never touches while the job is active: a CPU job's pod is
    // deleted only after its terminal record; a Ray pod by KubeRay once the job ended.
    let evicted: Vec<String> = pods
        .iter()
        .filter_map(|p| pod_disrupted(p, !workload_ended))
        .collect();
    if !evicted.is_empty() {
        let message = format!("Kubernetes took its pods away: {}", evicted.join("; "));
        return Some(failure(FailureReason::Evicted, message, evicted));
    }
    None
}

/// For a Ray job that ended badly: the Ray pods that were replaced (created after the job ran)
/// or whose Ray container restarted, as evidence that the failure followed a lost Ray node.
pub fn ray_nodes_replaced(cluster: &Cluster, job: &JobRecord) -> Vec<String> {
    let Some(running_at) = job.running_at_ms else {
        return Vec::new();
    };
    cluster
        .pods_of(job)
        .into_iter()
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|o| o.kind == "RayCluster" && o.controller == Some(true))
        })
        .filter_map(|p| {
            let created = p.creation_timestamp().map(|t| t.0.as_millisecond());
            if created.is_some_and(|c| c > running_at) {
                return Some(format!(
                    "pod/{}: created after the job started running (a Ray node was replaced)",
                    p.name_any()
                ));
            }
            let restarts: i32 = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .filter(|c| c.name.starts_with("ray-"))
                .map(|c| c.restart_count)
                .sum();
            (restarts > 0).then(|| {
                format!(
                    "pod/{}: its Ray container restarted {restarts} time{}",
                    p.name_any(),
                    if restarts == 1 { "" } else { "s" }
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use tuneplane_core::admission::PoolPlacement;
    use tuneplane_testkit::records;

    fn job(state: JobState) -> JobRecord {
        let mut j = records::queued("j").build();
        j.state = state;
        j.admitted_at_ms = Some(1_000);
        j.running_at_ms = (state == JobState::Running).then_some(2_000);
        j.placements = vec![PoolPlacement {
            pool: "main".into(),
            nodes: vec!["n1".into()],
        }];
        j
    }

    fn node(name: &str, ready: &str, since: &str, taints: serde_json::Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": ready,
                    "lastTransitionTime": since, "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status."}]}
            }))
            .unwrap(),
        )
    }

    fn pod(extra: serde_json::Value) -> Arc<WatchedPod> {
        let mut p = serde_json::json!({
            "metadata": {"name": "tp-j", "namespace": "ns", "labels": {"tuneplane.io/job-id": "j"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
            "status": {"phase": "Running"}
        });
        json_merge(&mut p, extra);
        Arc::new(serde_json::from_value(p).unwrap())
    }

    fn json_merge(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    json_merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    fn rules(taints: &[String]) -> LossRules<'_> {
        LossRules {
            not_ready_grace_ms: 40_000,
            interruption_taints: taints,
        }
    }

    // 2026-01-01T00:00:00Z in Unix ms.
    const T0: i64 = 1_767_225_600_000;

    fn cluster(nodes: Vec<Arc<Node>>, pods: Vec<Arc<WatchedPod>>) -> Cluster {
        Cluster::new(nodes, pods, Vec::new(), Vec::new())
    }

    #[test]
    fn a_deleted_node_loses_a_running_job_with_the_evidence() {
        let c = cluster(Vec::new(), Vec::new());
        let f =
            infrastructure_loss(&c, &job(JobState::Running), T0, &rules(&[]), false).expect("lost");
        assert_eq!(f.reason, FailureReason::NodeLost);
        assert_eq!(f.evidence, vec!["node/n1: deleted".to_owned()]);
        assert_eq!(f.cause, tuneplane_core::job::FailureCause::Infrastructure);
    }

    #[test]
    fn not_ready_counts_only_after_the_grace() {
        let n = node(
            "n1",
            "Unknown",
            "2026-01-01T00:00:00Z",
            serde_json::json!([]),
        );
        let c = cluster(vec![n], vec![pod(serde_json::json!({}))]);
        let j = job(JobState::Running);
        assert!(infrastructure_loss(&c, &j, T0 + 39_000, &rules(&[]), false).is_none());
        let f = infrastructure_loss(&c, &j, T0 + 41_000, &rules(&[]), false).expect("lost");
        assert_eq!(f.reason, FailureReason::NodeLost);
        assert!(
            f.evidence[0].starts_with("node/n1: Ready=Unknown for 41s (NodeStatusUnknown"),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn an_interruption_taint_stops_the_attempt() {
        let keys = vec!["karpenter.sh/disrupted".to_owned()];
        let n = node(
            "n1",
            "True",
            "2026-01-01T00:00:00Z",
            serde_json::json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]),
        );
        let c = cluster(vec![n], vec![pod(serde_json::json!({}))]);
        let f = infrastructure_loss(&c, &job(JobState::Running), T0, &rules(&keys), false)
            .expect("interrupted");
        assert_eq!(f.reason, FailureReason::Interrupted);
        assert!(f.evidence[0].contains("taint karpenter.sh/disrupted:NoSchedule"));
        // Another taint is not a notice.
        assert!(infrastructure_loss(&c, &job(JobState::Running), T0, &rules(&[]), false).is_none());
    }

    #[test]
    fn evictions_and_foreign_deletions_are_evidence_but_not_after_the_workload_ended() {
        let healthy = node("n1", "True", "2026-01-01T00:00:00Z", serde_json::json!([]));
        let evicted = pod(
            serde_json::json!({"status": {"conditions": [{"type": "DisruptionTarget",
            "status": "True", "reason": "DeletionByTaintManager", "message": "Taint manager: deleting due to NoExecute taint"}]}}),
        );
        let c = cluster(vec![healthy.clone()], vec![evicted]);
        let f = infrastructure_loss(&c, &job(JobState::Running), T0, &rules(&[]), false)
            .expect("evicted");
        assert_eq!(f.reason, FailureReason::Evicted);
        assert!(f.evidence[0].contains("DeletionByTaintManager"));
        let deleted =
            pod(serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        let c = cluster(vec![healthy.clone()], vec![deleted]);
        assert!(infrastructure_loss(&c, &job(JobState::Running), T0, &rules(&[]), false).is_some());
        assert!(infrastructure_loss(&c, &job(JobState::Running), T0, &rules(&[]), true).is_none());
        let kubelet = pod(
            serde_json::json!({"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}}),
        );
        let c = cluster(vec![healthy], vec![kubelet]);
        let f = infrastructure_loss(&c, &job(JobState::Running), T0, &rules(&[]), true)
            .expect("kubelet eviction");
        assert!(f.evidence[0].contains("Evicted: The node was low on resource"));
    }

    #[test]
    fn an_admitted_job_is_lost_only_to_deleted_or_bound_nodes_and_queued_jobs_never() {
        // Planned on a cordoned-then-NotReady node it never reached: the pending reason tells
        // (NoMatchingNode), not a loss.
        let n = node("n1", "False", "2025-12-31T00:00:00Z", serde_json::json!([]));
        let c = cluster(vec![n], Vec::new());
        assert!(
            infrastructure_loss(&c, &job(JobState::Admitted), T0, &rules(&[]), false).is_none()
        );
        let c = cluster(Vec::new(), Vec::new());
        assert!(
            infrastructure_loss(&c, &job(JobState::Admitted), T0, &rules(&[]), false).is_some()
        );
        assert!(infrastructure_loss(&c, &job(JobState::Queued), T0, &rules(&[]), false).is_none());
    }
}
