//! The simulated default scheduler: binds pending pods (oldest first) to the least-allocated node
//! that passes every filter, or marks them unschedulable with a `FailedScheduling` event.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::events::{Recorder, WARNING};
use crate::fit::{self, BoundPods, NodeInfo, PodNeeds};
use crate::json;
use crate::resources::{NAMESPACES, NODES, PODS};
use crate::store::Store;

/// The scheduler's name (`schedulerName`, the events' `reportingComponent`).
pub const SCHEDULER: &str = "default-scheduler";

/// Most pods bound per tick, like a real scheduler's throughput bound.
const MAX_BINDS_PER_TICK: usize = 2000;

/// The scheduler's memory between ticks.
#[derive(Default)]
pub struct Scheduler {
    /// Last FailedScheduling message per pod uid (an event is written when it changes).
    last_failure: HashMap<String, String>,
}

/// Whether a pod still holds resources on its node.
pub fn holds_resources(pod: &Value) -> bool {
    !matches!(
        json::str_at(pod, "/status/phase"),
        Some("Succeeded" | "Failed")
    )
}

impl Scheduler {
    /// One scheduling pass.
    pub fn step(&mut self, store: &Arc<Store>, recorder: &mut Recorder) {
        let pods = store.all(&PODS);
        let mut pending: Vec<&Arc<Value>> = pods
            .iter()
            .filter(|p| {
                json::str_at(p, "/spec/nodeName")
                    .unwrap_or_default()
                    .is_empty()
                    && json::str_at(p, "/status/phase") == Some("Pending")
                    && json::at(p, "/metadata/deletionTimestamp").is_none()
                    && json::str_at(p, "/spec/schedulerName")
                        .is_none_or(|s| s == "default-scheduler")
            })
            .collect();
        if pending.is_empty() {
            self.last_failure.clear();
            return;
        }
        let mut nodes: Vec<NodeInfo> = store
            .all(&NODES)
            .iter()
            .map(|n| NodeInfo::from_node(n))
            .collect();
        let index: HashMap<String, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        pending.sort_by(|a, b| {
            let t = |p: &Value| {
                json::str_at(p, "/metadata/creationTimestamp")
                    .unwrap_or_default()
                    .to_string()
            };
            t(a).cmp(&t(b))
                .then_with(|| json::name(a).cmp(json::name(b)))
        });
        let batch: Vec<(&Arc<Value>, PodNeeds)> = pending
            .into_iter()
            .take(MAX_BINDS_PER_TICK)
            .map(|p| (p, PodNeeds::from_pod(p)))
            .collect();
        let namespaces = store
            .all(&NAMESPACES)
            .iter()
            .map(|n| {
                let labels = json::at(n, "/metadata/labels")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                            .collect()
                    })
                    .unwrap_or_default();
                (json::name(n).to_string(), labels)
            })
            .collect();
        // What InterPodAffinity sees: the bound pods, indexed by what the batch's terms select.
        let mut bound = BoundPods::new(
            &nodes,
            namespaces,
            fit::index_keys(batch.iter().map(|(_, n)| n)),
        );
        for pod in pods.iter().filter(|p| holds_resources(p)) {
            if let Some(&i) = json::str_at(pod, "/spec/nodeName").and_then(|n| index.get(n)) {
                nodes[i].add(&fit::pod_requests(pod));
                bound.add(i, pod);
            }
        }
        for (pod, needs) in &batch {
            let (ns, name, uid) = (
                json::namespace(pod),
                json::name(pod),
                json::uid(pod).to_string(),
            );
            let preempts = json::str_at(pod, "/spec/preemptionPolicy") != Some("Never");
            let inter = bound.prefilter(needs, &nodes);
            match fit::place(needs, &nodes, &inter, preempts) {
                Ok(i) => {
                    let node = nodes[i].name.clone();
                    if bind(store, ns, name, &node).is_ok() {
                        nodes[i].add(&needs.requests);
                        bound.add(i, pod);
                        self.last_failure.remove(&uid);
                        let message = format!("Successfully assigned {ns}/{name} to {node}");
                        recorder.record_new(
                            pod,
                            super::events::NORMAL,
                            "Scheduled",
                            &message,
                            SCHEDULER,
                            "Binding",
                        );
                    }
                }
                Err(message) => {
                    if self.last_failure.get(&uid) != Some(&message) {
                        mark_unschedulable(store, ns, name, &message);
                        recorder.record_new(
                            pod,
                            WARNING,
                            "FailedScheduling",
                            &message,
                            SCHEDULER,
                            "Scheduling",
                        );
                        self.last_failure.insert(uid, message);
                    }
                }
            }
        }
    }
}

fn bind(store: &Store, ns: &str, name: &str, node: &str) -> Result<(), crate::StatusError> {
    store
        .update_all(&PODS, ns, name, |cur| {
            let mut p = cur.clone();
            p["spec"]["nodeName"] = json!(node);
            set_condition(&mut p, "PodScheduled", "True", None, None);
            Ok(p)
        })
        .map(|_| ())
}

fn mark_unschedulable(store: &Store, ns: &str, name: &str, message: &str) {
    let result = store.update_all(&PODS, ns, name, |cur| {
        let mut p = cur.clone();
        set_condition(
            &mut p,
            "PodScheduled",
            "False",
            Some("Unschedulable"),
            Some(message),
        );
        Ok(p)
    });
    if let Err(e) = result {
        tracing::debug!(error = %e, pod = name, "could not mark pod unschedulable");
    }
}

/// Sets (or replaces) a pod condition, keeping `lastTransitionTime` when the status is unchanged.
pub fn set_condition(
    pod: &mut Value,
    ty: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
) {
    let now = json::now_rfc3339();
    let conditions = json::obj_mut(pod, "status")
        .entry("conditions")
        .or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    let previous = list
        .iter()
        .position(|c| c.get("type").and_then(Value::as_str) == Some(ty));
    let transition = previous
        .and_then(|i| {
            (list[i].get("status").and_then(Value::as_str) == Some(status))
                .then(|| list[i].get("lastTransitionTime").cloned())
        })
        .flatten()
        .unwrap_or_else(|| json!(now));
    let mut cond = json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": transition});
    if let Some(r) = reason {
        cond["reason"] = json!(r);
    }
    if let Some(m) = message {
        cond["message"] = json!(m);
    }
    match previous {
        Some(i) => list[i] = cond,
        None => list.push(cond),
    }
}

#[cfg(test)]
mod tests {
    use tuneplane_core::constants::{JOB_ID_LABEL, POOL_LABEL};
    use tuneplane_core::fleet::Fleet;

    use super::*;
    use crate::resources::EVENTS;

    const NS: &str = "jobs";

    /// A store with the namespace and the fleet's nodes.
    fn cluster(fleet: &str) -> Arc<Store> {
        let store = Arc::new(Store::new(1000));
        store
            .create(&NAMESPACES, "", json!({"metadata": {"name": NS}}))
            .unwrap();
        let fleet = Fleet::from_yaml(fleet).unwrap();
        for node in crate::fleet::nodes(&fleet) {
            store.create(&NODES, "", node).unwrap();
        }
        store
    }

    /// A pod of job j1's pool p0 as TunePlane renders it: planned onto `hosts`, one per node.
    fn worker(name: &str, hosts: &[&str]) -> Value {
        json!({
            "metadata": {"name": name, "namespace": NS,
                         "labels": {JOB_ID_LABEL: "j1", POOL_LABEL: "p0"}},
            "spec": {
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}]}]}},
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {JOB_ID_LABEL: "j1", POOL_LABEL: "p0"}},
                         "topologyKey": "kubernetes.io/hostname"}]},
                },
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "image": "ghcr.io/acme/train:1",
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}],
            },
        })
    }

    fn pod_of(store: &Store, name: &str) -> Arc<Value> {
        store
            .all(&PODS)
            .into_iter()
            .find(|p| json::name(p) == name)
            .unwrap_or_else(|| panic!("no pod {name}"))
    }

    fn node_of(store: &Store, name: &str) -> String {
        json::str_at(&pod_of(store, name), "/spec/nodeName")
            .unwrap_or_default()
            .to_string()
    }

    const FLEET: &str = "\
node_groups:
  - {name: h200, series: h200, count: 3, gpus: 8, cpus: 96, memory_gb: 1024, taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]}
  - {name: cpu, count: 1, cpus: 16, memory_gb: 64}
";

    #[test]
    fn workers_of_one_pool_spread_over_their_planned_nodes_within_one_pass() {
        let store = cluster(FLEET);
        let mut recorder = Recorder::new(store.clone());
        let planned = ["h200-0", "h200-1"];
        for name in ["w0", "w1", "w2"] {
            store.create(&PODS, NS, worker(name, &planned)).unwrap();
        }
        // One pass: the first two bind, and the third already sees them.
        Scheduler::default().step(&store, &mut recorder);
        let (n0, n1) = (node_of(&store, "w0"), node_of(&store, "w1"));
        assert!(planned.contains(&n0.as_str()) && planned.contains(&n1.as_str()));
        assert_ne!(n0, n1);
        assert_eq!(node_of(&store, "w2"), "");
        let message = "0/4 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, \
            2 node(s) didn't match pod anti-affinity rules. no new claims to deallocate, preemption: \
            0/4 nodes are available: 2 No preemption victims found for incoming pod, 2 Preemption is \
            not helpful for scheduling.";
        let w2 = pod_of(&store, "w2");
        let condition = json::at(&w2, "/status/conditions/0")
            .cloned()
            .unwrap_or_default();
        assert_eq!(condition["type"], "PodScheduled");
        assert_eq!(condition["reason"], "Unschedulable");
        assert_eq!(condition["message"], message);
        let failed: Vec<Arc<Value>> = store
            .all(&EVENTS)
            .into_iter()
            .filter(|e| json::str_at(e, "/reason") == Some("FailedScheduling"))
            .collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(json::str_at(&failed[0], "/involvedObject/name"), Some("w2"));
        assert_eq!(json::str_at(&failed[0], "/message"), Some(message));

        // A later pass sees the bound pods in the store: same verdict. Once w0 has ended, its
        // node is free again for w2 (terminal pods are not existing pods).
        let mut scheduler = Scheduler::default();
        scheduler.step(&store, &mut recorder);
        assert_eq!(node_of(&store, "w2"), "");
        store
            .update_all(&PODS, NS, "w0", |cur| {
                let mut p = cur.clone();
                p["status"]["phase"] = json!("Succeeded");
                Ok(p)
            })
            .unwrap();
        scheduler.step(&store, &mut recorder);
        assert_eq!(node_of(&store, "w2"), n0);
    }

    #[test]
    fn a_pod_without_terms_keeps_out_of_the_nodes_guarded_by_bound_pods() {
        let store = cluster(FLEET);
        let mut recorder = Recorder::new(store.clone());
        store.create(&PODS, NS, worker("w0", &["h200-0"])).unwrap();
        // Created in the same second: scheduled after w0 by name.
        let mut plain = worker("w1", &["h200-0"]);
        if let Some(a) = plain["spec"]["affinity"].as_object_mut() {
            a.remove("podAntiAffinity");
        }
        store.create(&PODS, NS, plain).unwrap();
        Scheduler::default().step(&store, &mut recorder);
        assert_eq!(node_of(&store, "w0"), "h200-0");
        let plain = pod_of(&store, "w1");
        assert_eq!(
            json::str_at(&plain, "/status/conditions/0/message"),
            Some(
                "0/4 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity \
                 rules, 3 node(s) didn't match Pod's node affinity/selector. no new claims to \
                 deallocate, preemption: 0/4 nodes are available: 1 No preemption victims found \
                 for incoming pod, 3 Preemption is not helpful for scheduling."
            )
        );
    }
}
