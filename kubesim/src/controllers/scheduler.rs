//! The simulated default scheduler: binds pending pods (oldest first) to the least-allocated node
//! that passes every filter, or marks them unschedulable with a `FailedScheduling` event.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::events::{Recorder, WARNING};
use super::fit::{self, NodeInfo, PodNeeds};
use crate::json;
use crate::resources::{NODES, PODS};
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
        for pod in pods.iter().filter(|p| holds_resources(p)) {
            if let Some(&i) = json::str_at(pod, "/spec/nodeName").and_then(|n| index.get(n)) {
                nodes[i].add(&PodNeeds::from_pod(pod).requests);
            }
        }
        pending.sort_by(|a, b| {
            let t = |p: &Value| {
                json::str_at(p, "/metadata/creationTimestamp")
                    .unwrap_or_default()
                    .to_string()
            };
            t(a).cmp(&t(b))
                .then_with(|| json::name(a).cmp(json::name(b)))
        });
        for pod in pending.into_iter().take(MAX_BINDS_PER_TICK) {
            let needs = PodNeeds::from_pod(pod);
            let (ns, name, uid) = (
                json::namespace(pod),
                json::name(pod),
                json::uid(pod).to_string(),
            );
            let preempts = json::str_at(pod, "/spec/preemptionPolicy") != Some("Never");
            match fit::place_with(&needs, &nodes, preempts) {
                Ok(i) => {
                    let node = nodes[i].name.clone();
                    if bind(store, ns, name, &node).is_ok() {
                        nodes[i].add(&needs.requests);
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

fn bind(store: &Store, ns: &str, name: &str, node: &str) -> Result<(), crate::ApiError> {
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
