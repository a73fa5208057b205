//! What kube-controller-manager 1.34 does to the pods of lost nodes, as two controllers:
//!
//! - [`PodGc`], the pod garbage collector's orphan pass (`pkg/controller/podgc`): a pod bound to
//!   a node that no longer exists is, once the node has been missing for the quarantine, marked
//!   `Failed` with the condition `DisruptionTarget` (`reason: DeletionByPodGC`, `PodGC: node no
//!   longer exists`) unless it already ended, then deleted with grace period 0. Real PodGC runs
//!   every 20 s with a 40 s quarantine (so 40-60 s after the node went); kubesim checks every
//!   pass and its quarantine is [`SimConfig::pod_gc_quarantine`](crate::SimConfig), a few
//!   seconds by default, so tests do not wait a minute.
//! - [`TaintEviction`], the taint-eviction controller (`pkg/controller/tainteviction`): a pod on
//!   a node with `NoExecute` taints is evicted at once when it does not tolerate one of them,
//!   after the smallest `tolerationSeconds` of the tolerations used when it tolerates them all
//!   (counted from when the controller first saw the pod under those taints), and never when
//!   they tolerate forever. Eviction is the `TaintManagerEviction` event (`Marking for deletion
//!   Pod <ns>/<name>`, from `taint-eviction-controller`), the condition `DisruptionTarget`
//!   (`reason: DeletionByTaintManager`, `Taint manager: deleting due to NoExecute taint`) and a
//!   graceful delete: on a NotReady node nobody confirms it, so the pod stays `Terminating`
//!   (see [`Store::delete`]). Taints that go before the eviction cancel it (`Cancelling
//!   deletion of Pod <ns>/<name>`).
//!
//! Not simulated: the node lifecycle controller's grace periods (a NotReady node is tainted when
//! it turns NotReady), `MarkPodsNotReady` (the pods' Ready condition on a NotReady node), rate
//! limits of evictions per zone, and PodGC's other passes (terminated-pod threshold, terminating
//! pods on `out-of-service` nodes, unscheduled terminating pods).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::events::{NORMAL, Recorder};
use super::scheduler::set_condition;
use crate::fit::Taint;
use crate::fleet::effect::NO_EXECUTE;
use crate::json::{self, str_at};
use crate::resources::{NODES, PODS};
use crate::store::{DeleteOptions, Store};

/// The pod condition that says a pod is about to be deleted by a disruption.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// `reason` of [`DISRUPTION_TARGET`] set by the pod garbage collector.
pub const DELETION_BY_POD_GC: &str = "DeletionByPodGC";
/// `reason` of [`DISRUPTION_TARGET`] set by the taint-eviction controller.
pub const DELETION_BY_TAINT_MANAGER: &str = "DeletionByTaintManager";
/// The event reason of the taint-eviction controller.
pub const TAINT_MANAGER_EVICTION: &str = "TaintManagerEviction";
/// Component of the taint-eviction controller's events.
const TAINT_EVICTION_CONTROLLER: &str = "taint-eviction-controller";

fn node_name(pod: &Value) -> &str {
    str_at(pod, "/spec/nodeName").unwrap_or_default()
}

fn terminal(pod: &Value) -> bool {
    matches!(str_at(pod, "/status/phase"), Some("Succeeded" | "Failed"))
}

/// The pod garbage collector's orphan pass.
pub struct PodGc {
    quarantine: Duration,
    /// Nodes that pods are bound to but that do not exist, since when they were seen missing.
    missing: HashMap<String, Instant>,
}

impl PodGc {
    /// A collector that waits `quarantine` after first seeing a node missing.
    pub fn new(quarantine: Duration) -> Self {
        Self {
            quarantine,
            missing: HashMap::new(),
        }
    }

    /// One pass: deletes the pods of nodes missing for longer than the quarantine.
    pub fn step(&mut self, store: &Store) {
        let nodes: HashSet<String> = store
            .all(&NODES)
            .iter()
            .map(|n| json::name(n).to_string())
            .collect();
        let pods = store.all(&PODS);
        let orphaned: HashSet<&str> = pods
            .iter()
            .map(|p| node_name(p))
            .filter(|n| !n.is_empty() && !nodes.contains(*n))
            .collect();
        let now = Instant::now();
        self.missing.retain(|n, _| orphaned.contains(n.as_str()));
        for n in &orphaned {
            self.missing.entry((*n).to_string()).or_insert(now);
        }
        for pod in &pods {
            let due = self
                .missing
                .get(node_name(pod))
                .is_some_and(|since| now.duration_since(*since) >= self.quarantine);
            if due && let Err(e) = collect(store, pod) {
                tracing::debug!(error = %e, pod = json::name(pod), "orphaned pod not collected");
            }
        }
    }
}

/// Marks an orphaned pod Failed with the DisruptionTarget condition (unless it ended), then
/// deletes it with grace period 0.
fn collect(store: &Store, pod: &Arc<Value>) -> Result<(), crate::StatusError> {
    let (ns, name) = (json::namespace(pod), json::name(pod));
    tracing::info!(pod = %format!("{ns}/{name}"), node = node_name(pod), "PodGC is force deleting an orphaned pod");
    if !terminal(pod) {
        store.update_all(&PODS, ns, name, |cur| {
            let mut p = cur.clone();
            p["status"]["phase"] = Value::from("Failed");
            set_condition(
                &mut p,
                DISRUPTION_TARGET,
                "True",
                Some(DELETION_BY_POD_GC),
                Some("PodGC: node no longer exists"),
            );
            Ok(p)
        })?;
    }
    let opts = DeleteOptions {
        uid: Some(json::uid(pod).to_string()),
        grace_period_seconds: Some(0),
        ..DeleteOptions::default()
    };
    store.delete(&PODS, ns, name, &opts).map(|_| ())
}

/// An eviction the taint-eviction controller has scheduled.
struct Scheduled {
    /// When the controller first saw the pod under the node's `NoExecute` taints.
    since: Instant,
    /// When it is due.
    at: Instant,
}

/// The taint-eviction controller.
#[derive(Default)]
pub struct TaintEviction {
    /// Scheduled evictions, by pod uid.
    scheduled: HashMap<String, Scheduled>,
}

/// A toleration with its `tolerationSeconds` (`None`: for ever).
fn tolerations(pod: &Value) -> Vec<(Taint, Option<i64>)> {
    let list = json::at(pod, "/spec/tolerations");
    let seconds = list
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|t| t.get("tolerationSeconds").and_then(Value::as_i64))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    Taint::list(list).into_iter().zip(seconds).collect()
}

/// How long a pod may stay under `taints`: `None` when one of them is not tolerated (evict
/// now), `Some(None)` for ever, otherwise the smallest `tolerationSeconds` of the tolerations
/// used — the first that matches each taint, as the real controller picks them (one without
/// seconds counts as for ever; 0 or less as now).
fn toleration_time(pod: &Value, taints: &[Taint]) -> Option<Option<Duration>> {
    let tolerations = tolerations(pod);
    let mut used: Vec<Option<i64>> = Vec::new();
    for taint in taints {
        let (_, seconds) = tolerations.iter().find(|(t, _)| t.tolerates(taint))?;
        used.push(*seconds);
    }
    if used.iter().flatten().any(|s| *s <= 0) {
        return Some(Some(Duration::ZERO));
    }
    Some(
        used.iter()
            .flatten()
            .min()
            .map(|s| Duration::from_secs(u64::try_from(*s).unwrap_or(0))),
    )
}

impl TaintEviction {
    /// One pass over the pods of nodes with `NoExecute` taints.
    pub fn step(&mut self, store: &Store, rec: &mut Recorder) {
        let tainted: HashMap<String, Vec<Taint>> = store
            .all(&NODES)
            .iter()
            .filter_map(|n| {
                let taints: Vec<Taint> = Taint::list(json::at(n, "/spec/taints"))
                    .into_iter()
                    .filter(|t| t.effect == NO_EXECUTE)
                    .collect();
                (!taints.is_empty()).then(|| (json::name(n).to_string(), taints))
            })
            .collect();
        let pods = store.all(&PODS);
        let now = Instant::now();
        let mut still: HashSet<String> = HashSet::new();
        for pod in &pods {
            let uid = json::uid(pod).to_string();
            // Pods already being deleted are the kubelet's (or PodGC's) to finish.
            if json::at(pod, "/metadata/deletionTimestamp").is_some() {
                continue;
            }
            let Some(taints) = tainted.get(node_name(pod)) else {
                continue;
            };
            let due = match toleration_time(pod, taints) {
                None => true,
                Some(None) => false,
                Some(Some(wait)) => {
                    let s = self.scheduled.entry(uid.clone()).or_insert(Scheduled {
                        since: now,
                        at: now + wait,
                    });
                    // Counted from when the pod was first seen under the taints, whichever
                    // tolerations apply now.
                    s.at = s.since + wait;
                    still.insert(uid.clone());
                    now >= s.at
                }
            };
            if due {
                still.remove(&uid);
                self.scheduled.remove(&uid);
                if let Err(e) = evict(store, rec, pod) {
                    tracing::debug!(error = %e, pod = json::name(pod), "pod not evicted");
                }
            }
        }
        // Evictions whose pod left the taints (or went) are cancelled.
        let cancelled: Vec<String> = self
            .scheduled
            .keys()
            .filter(|u| !still.contains(*u))
            .cloned()
            .collect();
        for uid in cancelled {
            self.scheduled.remove(&uid);
            if let Some(pod) = pods.iter().find(|p| json::uid(p) == uid) {
                let message = format!(
                    "Cancelling deletion of Pod {}/{}",
                    json::namespace(pod),
                    json::name(pod)
                );
                rec.record(
                    pod,
                    NORMAL,
                    TAINT_MANAGER_EVICTION,
                    &message,
                    TAINT_EVICTION_CONTROLLER,
                );
            }
        }
    }
}

/// The taint manager's eviction: event, DisruptionTarget condition, graceful delete.
fn evict(store: &Store, rec: &mut Recorder, pod: &Arc<Value>) -> Result<(), crate::StatusError> {
    let (ns, name) = (json::namespace(pod), json::name(pod));
    tracing::info!(pod = %format!("{ns}/{name}"), node = node_name(pod), "taint eviction");
    let message = format!("Marking for deletion Pod {ns}/{name}");
    rec.record(
        pod,
        NORMAL,
        TAINT_MANAGER_EVICTION,
        &message,
        TAINT_EVICTION_CONTROLLER,
    );
    store.update(&PODS, ns, name, crate::store::Part::Status, |cur| {
        let mut p = cur.clone();
        set_condition(
            &mut p,
            DISRUPTION_TARGET,
            "True",
            Some(DELETION_BY_TAINT_MANAGER),
            Some("Taint manager: deleting due to NoExecute taint"),
        );
        Ok(p)
    })?;
    let opts = DeleteOptions {
        uid: Some(json::uid(pod).to_string()),
        ..DeleteOptions::default()
    };
    store.delete(&PODS, ns, name, &opts).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taint(key: &str) -> Taint {
        Taint {
            key: key.into(),
            value: String::new(),
            effect: NO_EXECUTE.into(),
            operator: String::new(),
        }
    }

    fn pod(tolerations: Value) -> Value {
        json!({"spec": {"tolerations": tolerations}})
    }

    #[test]
    fn toleration_time_takes_the_smallest_seconds_of_the_first_matches() {
        let not_ready = [taint("node.kubernetes.io/not-ready")];
        let p = pod(json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "other", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1},
            {"key": "spot", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
        ]));
        assert_eq!(
            toleration_time(&p, &not_ready),
            Some(Some(Duration::from_secs(5)))
        );
        // The first match of each taint counts, the smallest of those wins.
        let both = [taint("spot"), taint("node.kubernetes.io/not-ready")];
        assert_eq!(
            toleration_time(&p, &both),
            Some(Some(Duration::from_secs(5)))
        );
        assert_eq!(
            toleration_time(&p, &[taint("spot")]),
            Some(Some(Duration::from_secs(60)))
        );
        // An untolerated taint: now.
        assert_eq!(toleration_time(&p, &[taint("maintenance")]), None);
        // For ever.
        let forever = pod(json!([{"operator": "Exists"}]));
        assert_eq!(toleration_time(&forever, &not_ready), Some(None));
        // Zero or less: now, though tolerated.
        let zero = pod(
            json!([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 0}]),
        );
        assert_eq!(
            toleration_time(&zero, &not_ready),
            Some(Some(Duration::ZERO))
        );
        // No tolerations at all.
        assert_eq!(toleration_time(&json!({"spec": {}}), &not_ready), None);
    }
}
