//! The scheduler's pure part: what a pod needs, what a node offers, which nodes pass the filters
//! (unschedulable, taints, node selector / affinity, resources, required inter-pod affinity and
//! anti-affinity) and the `FailedScheduling` message in the real scheduler's shape
//! (`0/5 nodes are available: 3 Insufficient nvidia.com/gpu, ...`).
//!
//! Inter-pod affinity is in [`affinity`]; the tests in `tests.rs`.

mod affinity;
#[cfg(test)]
mod tests;

use affinity::holds;
pub use affinity::{
    AffinityTerm, BoundPods, Domains, EXISTING_ANTI_AFFINITY_NOT_MATCH, InterPod,
    POD_AFFINITY_NOT_MATCH, POD_ANTI_AFFINITY_NOT_MATCH, index_keys,
};

use std::collections::BTreeMap;

use serde_json::Value;

use crate::json;
use crate::selector::Requirement;

use crate::fleet::UNSCHEDULABLE_TAINT;
use crate::quantity::{self, Milli};

/// Resource amounts by name (`cpu`, `memory`, `nvidia.com/gpu`, `pods`), in milli-units.
pub type Resources = BTreeMap<String, Milli>;

/// A toleration or taint (key, operator, value, effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// Label-like key the taint or toleration matches on.
    pub key: String,
    /// Value compared under `Equal` (empty for `Exists`).
    pub value: String,
    /// Effect (`NoSchedule`, `PreferNoSchedule`, `NoExecute`; empty for "any" in tolerations).
    pub effect: String,
    /// Operator for tolerations (`Equal` or `Exists`).
    pub operator: String,
}

impl Taint {
    /// The taints (or tolerations) of a `spec.taints` / `spec.tolerations` list.
    pub fn list(v: Option<&Value>) -> Vec<Taint> {
        taints(v)
    }

    /// Whether this toleration tolerates `taint`: same effect (or none named), same key (or an
    /// empty key with `Exists`), and equal values unless `Exists`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        let effect_ok = self.effect.is_empty() || self.effect == taint.effect;
        let key_ok = if self.key.is_empty() {
            self.operator == "Exists"
        } else {
            self.key == taint.key
        };
        let value_ok = self.operator == "Exists" || self.value == taint.value;
        effect_ok && key_ok && value_ok
    }
}

/// What the filters look at on a node.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The node's `metadata.name`, which a placement names.
    pub name: String,
    /// The node's labels, matched by node selectors, node affinity and topology keys.
    pub labels: BTreeMap<String, String>,
    /// Taints a pod must tolerate to be placed here.
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` (cordoned): only pods tolerating the `unschedulable` taint fit.
    pub unschedulable: bool,
    /// `status.allocatable`, in milli-units; what is free is this minus `used`.
    pub allocatable: Resources,
    /// Requests of the non-terminal pods bound to the node (`pods` counts them).
    pub used: Resources,
}

/// What the filters look at on a pod.
#[derive(Debug, Clone, Default)]
pub struct PodNeeds {
    /// Effective requests (`max(sum(containers), max(initContainers))`), plus `pods: 1`.
    pub requests: Resources,
    /// `spec.nodeSelector`: every label must be on the node with exactly that value.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: any term must match, all expressions of a term.
    pub affinity: Vec<Vec<Requirement>>,
    /// Tolerations of the pod (each node taint must be tolerated).
    pub tolerations: Vec<Taint>,
    /// The pod's namespace (what other pods' affinity terms match it by).
    pub namespace: String,
    /// The pod's labels, which other pods' (anti-)affinity terms select it by.
    pub labels: BTreeMap<String, String>,
    /// `spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub pod_affinity: Vec<AffinityTerm>,
    /// `spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub pod_anti_affinity: Vec<AffinityTerm>,
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn taints(v: Option<&Value>) -> Vec<Taint> {
    let s = |t: &Value, k: &str| {
        t.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|t| Taint {
                    key: s(t, "key"),
                    value: s(t, "value"),
                    effect: s(t, "effect"),
                    operator: s(t, "operator"),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn resources(v: Option<&Value>) -> Resources {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, q)| (k.clone(), quantity::from_json(Some(q))))
                .collect()
        })
        .unwrap_or_default()
}

impl NodeInfo {
    /// Reads a Node object (with nothing used yet).
    pub fn from_node(node: &Value) -> Self {
        Self {
            name: crate::json::name(node).to_string(),
            labels: string_map(json::at(node, "/metadata/labels")),
            taints: taints(json::at(node, "/spec/taints")),
            unschedulable: json::at(node, "/spec/unschedulable") == Some(&Value::Bool(true)),
            allocatable: resources(json::at(node, "/status/allocatable")),
            used: Resources::new(),
        }
    }

    /// Free amount of a resource.
    pub fn free(&self, r: &str) -> Milli {
        self.allocatable.get(r).copied().unwrap_or(0) - self.used.get(r).copied().unwrap_or(0)
    }

    /// Adds a pod's requests to the node's usage.
    pub fn add(&mut self, requests: &Resources) {
        for (k, v) in requests {
            *self.used.entry(k.clone()).or_insert(0) += v;
        }
    }
}

/// A pod's effective requests (`max(sum(containers), max(initContainers))`, limits standing in
/// for missing requests), plus `pods: 1`.
pub fn pod_requests(pod: &Value) -> Resources {
    let sum_of = |list: &str| {
        let mut total = Resources::new();
        for c in pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let mut req = resources(json::at(c, "/resources/limits"));
            req.extend(resources(json::at(c, "/resources/requests")));
            for (k, v) in req {
                let e = total.entry(k).or_insert(0);
                *e = if list == "initContainers" {
                    (*e).max(v)
                } else {
                    *e + v
                };
            }
        }
        total
    };
    let mut requests = sum_of("containers");
    for (k, v) in sum_of("initContainers") {
        let e = requests.entry(k).or_insert(0);
        *e = (*e).max(v);
    }
    requests.insert("pods".into(), 1000);
    requests
}

impl PodNeeds {
    /// Reads a Pod object.
    pub fn from_pod(pod: &Value) -> Self {
        let requests = pod_requests(pod);
        let terms = pod
            .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
            .and_then(Value::as_array);
        let affinity = terms
            .into_iter()
            .flatten()
            .map(|t| {
                t.get("matchExpressions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(Requirement::from_json)
                    .collect()
            })
            .collect();
        let namespace = json::namespace(pod).to_string();
        Self {
            requests,
            node_selector: string_map(json::at(pod, "/spec/nodeSelector")),
            affinity,
            tolerations: taints(json::at(pod, "/spec/tolerations")),
            labels: string_map(json::at(pod, "/metadata/labels")),
            pod_affinity: AffinityTerm::required(pod, "podAffinity", &namespace),
            pod_anti_affinity: AffinityTerm::required(pod, "podAntiAffinity", &namespace),
            namespace,
        }
    }

    fn tolerates(&self, taint: &Taint) -> bool {
        self.tolerations.iter().any(|t| t.tolerates(taint))
    }

    fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        let selector_ok = self
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v));
        let term_ok = |term: &Vec<Requirement>| term.iter().all(|r| r.matches(labels));
        selector_ok && (self.affinity.is_empty() || self.affinity.iter().any(term_ok))
    }

    /// The scheduler's filters on one node, in kube-scheduler's plugin order (NodeUnschedulable,
    /// TaintToleration, NodeAffinity, NodeResourcesFit, InterPodAffinity), stopping at the first
    /// plugin that fails. `at` is the node's index in the node list `inter` was computed over
    /// ([`BoundPods::prefilter`] for this pod).
    pub fn filter(&self, node: &NodeInfo, at: usize, inter: &InterPod) -> Filtered {
        let unresolvable = |reason: &str| Filtered {
            reasons: vec![reason.to_string()],
            unresolvable: true,
        };
        let unschedulable_taint = || Taint {
            key: UNSCHEDULABLE_TAINT.into(),
            value: String::new(),
            effect: "NoSchedule".into(),
            operator: String::new(),
        };
        if node.unschedulable && !self.tolerates(&unschedulable_taint()) {
            return unresolvable("node(s) were unschedulable");
        }
        let untolerated = node
            .taints
            .iter()
            .filter(|t| {
                t.key != UNSCHEDULABLE_TAINT
                    && (t.effect == "NoSchedule" || t.effect == "NoExecute")
            })
            .any(|t| !self.tolerates(t));
        if untolerated {
            // kube-scheduler ≥ 1.33 no longer names the taint.
            return unresolvable("node(s) had untolerated taint(s)");
        }
        if !self.matches_labels(&node.labels) {
            return unresolvable("node(s) didn't match Pod's node affinity/selector");
        }
        let mut out = Filtered::default();
        for (r, want) in self.requests.iter().filter(|(_, v)| **v > 0) {
            if node.free(r) < *want {
                out.reasons.push(if r == "pods" {
                    "Too many pods".to_string()
                } else {
                    format!("Insufficient {r}")
                });
                // More than the node has at all: preempting other pods cannot help.
                out.unresolvable |= node.allocatable.get(r).copied().unwrap_or(0) < *want;
            }
        }
        if !out.reasons.is_empty() {
            return out;
        }
        // InterPodAffinity: the pod's affinity (preemption cannot create pods to be near), then
        // its anti-affinity and the existing pods' anti-affinity (evicting pods could help).
        if !self.pod_affinity.is_empty() && !self.satisfies_pod_affinity(node, inter) {
            return unresolvable(POD_AFFINITY_NOT_MATCH);
        }
        match inter.anti_rejected.get(&at) {
            Some(reason) => Filtered {
                reasons: vec![reason.to_string()],
                unresolvable: false,
            },
            None => Filtered::default(),
        }
    }

    /// kube-scheduler's `satisfyPodAffinity`: the node must carry every term's topology key, and
    /// in each term's topology domain there must be a bound pod matching all the terms; unless no
    /// bound pod anywhere matches them and the pod matches its own terms (the first of a group).
    fn satisfies_pod_affinity(&self, node: &NodeInfo, inter: &InterPod) -> bool {
        let mut pods_exist = true;
        for t in &self.pod_affinity {
            let Some(v) = node.labels.get(&t.topology_key) else {
                return false;
            };
            if !holds(&inter.affinity, &t.topology_key, v) {
                pods_exist = false;
            }
        }
        pods_exist || (inter.affinity.is_empty() && inter.matches_own_affinity)
    }
}

/// What the filters say about one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filtered {
    /// Why the node cannot take the pod (empty when it can).
    pub reasons: Vec<String>,
    /// Whether preemption cannot help (kube-scheduler's `UnschedulableAndUnresolvable`).
    pub unresolvable: bool,
}

/// Least-allocated score of a node after placing the pod (higher spreads better).
fn score(needs: &PodNeeds, node: &NodeInfo) -> f64 {
    let mut total = 0.0;
    let mut n = 0.0;
    for r in ["cpu", "memory", tuneplane_core::constants::GPU_RESOURCE] {
        let alloc = node.allocatable.get(r).copied().unwrap_or(0);
        if alloc > 0 {
            let want = needs.requests.get(r).copied().unwrap_or(0);
            total += (node.free(r) - want) as f64 / alloc as f64;
            n += 1.0;
        }
    }
    if n > 0.0 { total / n } else { 0.0 }
}

/// Picks a node for the pod (index into `nodes`), or the `FailedScheduling` message. `inter` is
/// [`BoundPods::prefilter`]'s answer for the pod; `preempts` whether it may preempt
/// (`preemptionPolicy` other than `Never`).
pub fn place(
    needs: &PodNeeds,
    nodes: &[NodeInfo],
    inter: &InterPod,
    preempts: bool,
) -> Result<usize, String> {
    let mut best: Option<(usize, f64)> = None;
    let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
    let mut preemption: BTreeMap<String, usize> = BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let filtered = needs.filter(node, i, inter);
        if filtered.reasons.is_empty() {
            let s = score(needs, node);
            if best.is_none_or(|(_, b)| s > b) {
                best = Some((i, s));
            }
        } else {
            for r in filtered.reasons {
                *histogram.entry(r).or_insert(0) += 1;
            }
            // No pod has a lower priority than another here (TunePlane sets none), so where
            // preemption might help the dry run finds no victims.
            let why = if filtered.unresolvable {
                PREEMPTION_NOT_HELPFUL
            } else {
                NO_VICTIMS
            };
            *preemption.entry(why.to_string()).or_insert(0) += 1;
        }
    }
    if let Some((i, _)) = best {
        return Ok(i);
    }
    let preemption = preempts.then_some(&preemption);
    Err(failed_message(nodes.len(), &histogram, preemption))
}

/// The preemption verdict of a node that fails a filter preemption cannot fix.
pub const PREEMPTION_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// The preemption verdict of a node where evicting lower-priority pods could help, when none has.
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// `"<count> <reason>"` entries sorted as strings and joined, as kube-scheduler's `FitError` does.
fn histogram_text(histogram: &BTreeMap<String, usize>) -> String {
    let mut parts: Vec<String> = histogram.iter().map(|(r, c)| format!("{c} {r}")).collect();
    parts.sort();
    parts.join(", ")
}

/// kube-scheduler's `FitError` message: `0/N nodes are available: <count> <reason>, ....`, the
/// entries sorted as strings, then the PostFilter plugins' messages (DynamicResources' `no new
/// claims to deallocate`, DefaultPreemption's verdict per node, or that the pod may not preempt
/// when `preemption` is `None`).
pub fn failed_message(
    total: usize,
    histogram: &BTreeMap<String, usize>,
    preemption: Option<&BTreeMap<String, usize>>,
) -> String {
    if total == 0 {
        return "no nodes available to schedule pods".to_string();
    }
    let mut message = format!("0/{total} nodes are available:");
    if !histogram.is_empty() {
        message.push_str(&format!(" {}.", histogram_text(histogram)));
    }
    let verdict = match preemption {
        None => "not eligible due to preemptionPolicy=Never".to_string(),
        Some(p) => format!("0/{total} nodes are available: {}", histogram_text(p)),
    };
    message.push_str(&format!(
        " no new claims to deallocate, preemption: {verdict}."
    ));
    message
}
