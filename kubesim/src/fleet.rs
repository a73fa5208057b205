//! Node objects from a fleet file: one Node per member of each node group, named `<group>-<index>`,
//! with the series label, `nvidia.com/gpu` capacity, taints, and cordoned / NotReady states.

use serde_json::{Value, json};
use tuneplane_core::constants::{GPU_RESOURCE, SERIES_LABEL};
use tuneplane_core::fleet::{Fleet, NodeGroup};

/// Label naming the fleet group a simulated node belongs to.
pub const NODE_GROUP_LABEL: &str = "kubesim.tuneplane.io/node-group";

/// Kubelet version the simulated nodes report.
pub const KUBELET_VERSION: &str = "v1.33.0";

/// Taint the node lifecycle controller puts on NotReady nodes (`Ready` False), with both effects:
/// `NoSchedule` (kube-controller-manager's TaintNodesByCondition) and `NoExecute` (taint-based
/// eviction, with `timeAdded`).
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// Taint the node lifecycle controller puts on unreachable nodes (`Ready` Unknown: the kubelet
/// stopped posting status), with both effects like [`NOT_READY_TAINT`].
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// Interruption notices real tools put on nodes as taints, for tests of how a workload reacts to
/// a node about to go (see [`interruption_taint`]):
///
/// - AWS Node Termination Handler (with `TAINT_NODE=true`) taints a node on a spot interruption
///   notice with `aws-node-termination-handler/spot-itn` (value: the event id), effect
///   `NoSchedule` (its `pkg/node` package: `SpotInterruptionTaint`; likewise
///   `aws-node-termination-handler/scheduled-maintenance`, `.../rebalance-recommendation` and
///   `.../asg-lifecycle-termination`), then cordons and drains it.
/// - Karpenter v1 taints every node it disrupts (interruption, drift, consolidation) with
///   `karpenter.sh/disrupted:NoSchedule` before draining it (v0.3x used
///   `karpenter.sh/disruption=disrupting:NoSchedule`; karpenter.sh, "Disruption").
/// - GKE puts `cloud.google.com/impending-node-termination:NoSchedule` on a preemptible or spot
///   node being shut down.
///
/// None of them is `NoExecute`: the pods are removed by the tool's drain (evictions), not by the
/// taint-eviction controller. A test that wants the controller to evict may taint `NoExecute`.
pub mod interruption {
    /// AWS Node Termination Handler's spot interruption notice.
    pub const AWS_SPOT_ITN: &str = "aws-node-termination-handler/spot-itn";
    /// AWS Node Termination Handler's scheduled maintenance notice.
    pub const AWS_SCHEDULED_MAINTENANCE: &str =
        "aws-node-termination-handler/scheduled-maintenance";
    /// Karpenter v1's taint on a node it is disrupting.
    pub const KARPENTER_DISRUPTED: &str = "karpenter.sh/disrupted";
    /// GKE's taint on a preemptible or spot node about to shut down.
    pub const GKE_IMPENDING_TERMINATION: &str = "cloud.google.com/impending-node-termination";
}

/// The taint effects.
pub mod effect {
    /// New pods that do not tolerate it are not scheduled onto the node.
    pub const NO_SCHEDULE: &str = "NoSchedule";
    /// Pods that do not tolerate it are evicted (after their `tolerationSeconds`).
    pub const NO_EXECUTE: &str = "NoExecute";
    /// The scheduler avoids the node for pods that do not tolerate it.
    pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
}

/// Taint on cordoned nodes.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Every Node object of a fleet.
pub fn nodes(fleet: &Fleet) -> Vec<Value> {
    let mut out = Vec::new();
    for (gi, group) in fleet.node_groups.iter().enumerate() {
        for i in 0..group.count {
            let cordoned = i >= group.count - group.cordoned;
            let not_ready = !cordoned && i >= group.count - group.cordoned - group.not_ready;
            out.push(node(group, gi, i, cordoned, not_ready));
        }
    }
    out
}

fn node(group: &NodeGroup, group_index: usize, i: u32, cordoned: bool, not_ready: bool) -> Value {
    let name = format!("{}-{i}", group.name);
    let mut labels = json!({
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        // The node lifecycle controller mirrors the OS and architecture into the beta labels.
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        NODE_GROUP_LABEL: group.name,
    });
    let mut capacity = json!({
        "cpu": group.cpus.to_string(),
        // Stored in the API server's canonical form (`1024Gi` is `1Ti`).
        "memory": crate::quantity::canonical(&format!("{}Gi", group.memory_gb)),
        "pods": "110",
        "ephemeral-storage": "500Gi",
    });
    if let Some(series) = &group.series {
        labels[SERIES_LABEL] = json!(series);
        capacity[GPU_RESOURCE] = json!(group.gpus.to_string());
    }
    let mut taints: Vec<Value> = group
        .taints
        .iter()
        .map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect}))
        .collect();
    if cordoned {
        taints.push(json!({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}));
    }
    let mut spec = json!({"taints": taints});
    if cordoned {
        spec["unschedulable"] = json!(true);
    }
    let mut node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "addresses": [
                {"type": "InternalIP", "address": format!("10.0.{}.{}", group_index, i + 1)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": KUBELET_VERSION,
                "containerRuntimeVersion": "containerd://2.0.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "kubesim",
                "kernelVersion": "6.1.0",
                "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": "",
            },
        },
    });
    set_ready(&mut node, !not_ready);
    node
}

/// Sets a node's Ready condition and the matching not-ready taints, as the kubelet and the node
/// lifecycle controller do: `node.kubernetes.io/not-ready` `NoSchedule` and `NoExecute` (the
/// latter with `timeAdded`) while NotReady, neither when Ready (an `unreachable` taint goes too).
pub fn set_ready(node: &mut Value, ready: bool) {
    let now = crate::json::now_rfc3339();
    node["status"]["conditions"] = node_conditions(ready, &now, &now);
    let mut taints: Vec<Value> = node_taints(node)
        .into_iter()
        .filter(|t| {
            let key = t.get("key").and_then(Value::as_str);
            key != Some(NOT_READY_TAINT) && key != Some(UNREACHABLE_TAINT)
        })
        .collect();
    if !ready {
        taints.push(json!({"key": NOT_READY_TAINT, "effect": effect::NO_SCHEDULE}));
        taints
            .push(json!({"key": NOT_READY_TAINT, "effect": effect::NO_EXECUTE, "timeAdded": now}));
    }
    store_taints(node, taints);
}

/// The node's taints (`spec.taints`), empty when it has none.
pub fn node_taints(node: &Value) -> Vec<Value> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn store_taints(node: &mut Value, taints: Vec<Value>) {
    let spec = crate::json::obj_mut(node, "spec");
    // An empty list is not stored (the API server omits it).
    if taints.is_empty() {
        spec.remove("taints");
    } else {
        spec.insert("taints".into(), Value::Array(taints));
    }
}

/// A taint object: `key`, `value` (when given), `effect`, and `timeAdded` (now) for `NoExecute`
/// taints, whose age the taint-eviction controller's tolerations count from.
pub fn taint(key: &str, value: Option<&str>, effect: &str) -> Value {
    let mut t = json!({"key": key, "effect": effect});
    if let Some(v) = value {
        t["value"] = json!(v);
    }
    if effect == effect::NO_EXECUTE {
        t["timeAdded"] = json!(crate::json::now_rfc3339());
    }
    t
}

/// The interruption notice `key` (one of [`interruption`]) as its tool puts it on a node, effect
/// `NoSchedule`; `value` is what the tool writes (AWS NTH: the event id), if anything.
pub fn interruption_taint(key: &str, value: Option<&str>) -> Value {
    taint(key, value, effect::NO_SCHEDULE)
}

/// Adds `taint` to the node, replacing one with the same key and effect (as `kubectl taint
/// --overwrite` does). Returns whether the node changed.
pub fn add_taint(node: &mut Value, taint: Value) -> bool {
    let same =
        |t: &Value| t.get("key") == taint.get("key") && t.get("effect") == taint.get("effect");
    let mut taints = node_taints(node);
    if let Some(existing) = taints.iter().find(|t| same(t)) {
        let strip = |t: &Value| {
            let mut t = t.clone();
            if let Some(m) = t.as_object_mut() {
                m.remove("timeAdded");
            }
            t
        };
        if strip(existing) == strip(&taint) {
            return false;
        }
    }
    taints.retain(|t| !same(t));
    taints.push(taint);
    store_taints(node, taints);
    true
}

/// Removes the node's taints with key `key` (and effect `effect`, when given). Returns whether
/// the node changed.
pub fn remove_taint(node: &mut Value, key: &str, effect: Option<&str>) -> bool {
    let taints = node_taints(node);
    let before = taints.len();
    let kept: Vec<Value> = taints
        .into_iter()
        .filter(|t| {
            t.get("key").and_then(Value::as_str) != Some(key)
                || effect.is_some_and(|e| t.get("effect").and_then(Value::as_str) != Some(e))
        })
        .collect();
    let changed = kept.len() != before;
    store_taints(node, kept);
    changed
}

/// A kubelet's node conditions: no memory, disk or PID pressure, and Ready (or NotReady), each
/// last heard at `heartbeat` and last changed at `transition` (RFC 3339).
pub fn node_conditions(ready: bool, heartbeat: &str, transition: &str) -> Value {
    let (status, reason, message) = if ready {
        ("True", "KubeletReady", "kubelet is posting ready status")
    } else {
        (
            "False",
            "KubeletNotReady",
            "container runtime network not ready",
        )
    };
    let pressure = |t: &str, r: &str| json!({"type": t, "status": "False", "reason": r, "lastHeartbeatTime": heartbeat, "lastTransitionTime": transition, "message": ""});
    json!([
        pressure("MemoryPressure", "KubeletHasSufficientMemory"),
        pressure("DiskPressure", "KubeletHasNoDiskPressure"),
        pressure("PIDPressure", "KubeletHasSufficientPID"),
        {"type": "Ready", "status": status, "reason": reason, "message": message, "lastHeartbeatTime": heartbeat, "lastTransitionTime": transition},
    ])
}

/// Whether a node object reports Ready.
pub fn is_ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
        .and_then(|c| c.get("status").and_then(Value::as_str))
        == Some("True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_nodes_of_a_group_are_cordoned_then_not_ready() {
        let fleet = Fleet::from_yaml(
            "node_groups:\n- {name: h200, series: h200, count: 4, gpus: 8, cpus: 96, memory_gb: 1024, cordoned: 1, not_ready: 1}\n",
        );
        let nodes = nodes(&fleet.unwrap());
        let names: Vec<&str> = nodes.iter().map(crate::json::name).collect();
        assert_eq!(names, ["h200-0", "h200-1", "h200-2", "h200-3"]);
        assert!(is_ready(&nodes[1]));
        assert!(!is_ready(&nodes[2]));
        assert_eq!(nodes[3]["spec"]["unschedulable"], true);
        assert_eq!(nodes[0]["status"]["capacity"][GPU_RESOURCE], "8");
        assert_eq!(nodes[0]["metadata"]["labels"][SERIES_LABEL], "h200");
    }
}
