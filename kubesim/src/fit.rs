//! The scheduler's pure part: what a pod needs, what a node offers, which nodes pass the filters
//! (unschedulable, taints, node selector / affinity, resources, required inter-pod affinity and
//! anti-affinity) and the `FailedScheduling` message in the real scheduler's shape
//! (`0/5 nodes are available: 3 Insufficient nvidia.com/gpu, ...`).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use crate::json;
use crate::selector::{LabelSet, Requirement, Selector};

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

// ---------------------------------------------------------------------------------------------
// Inter-pod affinity: kube-scheduler's InterPodAffinity filter, required terms only.

/// The filter reason of a node where no bound pod satisfies the pod's required pod affinity
/// (`UnschedulableAndUnresolvable`: preemption is not helpful).
pub const POD_AFFINITY_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
/// The filter reason of a node whose topology domain holds a pod the incoming pod's required
/// anti-affinity rejects (`Unschedulable`: evicting that pod could help).
pub const POD_ANTI_AFFINITY_NOT_MATCH: &str = "node(s) didn't match pod anti-affinity rules";
/// The filter reason of a node whose topology domain holds a pod whose required anti-affinity
/// rejects the incoming pod (`Unschedulable`).
pub const EXISTING_ANTI_AFFINITY_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// A required pod (anti-)affinity term, as kube-scheduler processes a `PodAffinityTerm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityTerm {
    /// `labelSelector`.
    pub selector: Selector,
    /// `namespaces`, or the term's own pod's namespace when neither `namespaces` nor
    /// `namespaceSelector` is given.
    pub namespaces: Vec<String>,
    /// `namespaceSelector` (`None` when absent: selects no namespace).
    pub namespace_selector: Option<Selector>,
    /// `topologyKey`: pods are near when their nodes have the same value of this label.
    pub topology_key: String,
}

impl AffinityTerm {
    /// Reads a `PodAffinityTerm` of a pod in `pod_namespace`.
    pub fn from_json(term: &Value, pod_namespace: &str) -> Self {
        let mut namespaces: Vec<String> = json::strs(term.get("namespaces"))
            .map(str::to_string)
            .collect();
        let namespace_selector = term
            .get("namespaceSelector")
            .filter(|v| !v.is_null())
            .map(|v| Selector::from_json(Some(v)));
        if namespaces.is_empty() && namespace_selector.is_none() {
            namespaces.push(pod_namespace.to_string());
        }
        Self {
            selector: Selector::from_json(term.get("labelSelector")),
            namespaces,
            namespace_selector,
            topology_key: term
                .get("topologyKey")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        }
    }

    /// The required terms of a pod's `podAffinity` or `podAntiAffinity` (`kind`).
    pub fn required(pod: &Value, kind: &str, pod_namespace: &str) -> Vec<Self> {
        pod.pointer(&format!(
            "/spec/affinity/{kind}/requiredDuringSchedulingIgnoredDuringExecution"
        ))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| Self::from_json(t, pod_namespace))
        .collect()
    }

    /// Whether a pod in `namespace` (whose labels are `namespace_labels`) with `labels` matches
    /// the term: its namespace is listed or selected, and its labels are selected.
    pub fn matches(
        &self,
        namespace: &str,
        labels: &impl LabelSet,
        namespace_labels: &BTreeMap<String, String>,
    ) -> bool {
        let in_namespace = self.namespaces.iter().any(|n| n == namespace)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| s.matches(namespace_labels));
        in_namespace && self.selector.matches(labels)
    }
}

/// Topology domains: topology key → the values of that key.
pub type Domains = HashMap<String, HashSet<String>>;

fn holds(domains: &Domains, key: &str, value: &str) -> bool {
    domains
        .get(key)
        .is_some_and(|values| values.contains(value))
}

/// What InterPodAffinity's PreFilter found for one incoming pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterPod {
    /// The nodes (indices) that anti-affinity rejects, with the reason: a node in a topology
    /// domain holding a bound pod that one of the incoming pod's anti-affinity terms matches
    /// ([`POD_ANTI_AFFINITY_NOT_MATCH`], checked first), or holding a bound pod whose own
    /// anti-affinity matches the incoming pod ([`EXISTING_ANTI_AFFINITY_NOT_MATCH`]).
    pub anti_rejected: HashMap<usize, &'static str>,
    /// Domains (per topology key of the pod's affinity terms) holding a bound pod that matches
    /// all of those terms.
    pub affinity: Domains,
    /// Whether the pod matches all its own affinity terms.
    pub matches_own_affinity: bool,
}

/// A bound pod as InterPodAffinity sees it.
#[derive(Debug, Clone, Copy)]
struct Bound<'a> {
    node: usize,
    namespace: &'a str,
    labels: Option<&'a serde_json::Map<String, Value>>,
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// The pods bound to nodes (non-terminal; their node an index into the scheduler's node list)
/// as InterPodAffinity needs them, indexed so that one incoming pod costs about the pods its
/// terms can match, the terms that can match it and the nodes they reject, not every bound pod
/// or node:
/// - pods by the label keys the pending pods' terms pin (`matchLabels`, `In`), with a full scan
///   only for terms that pin no label;
/// - the bound pods' required anti-affinity terms by a label they pin, so an incoming pod only
///   checks the terms its own labels can satisfy (plus the few that pin none);
/// - nodes by label, so a topology domain's nodes are found without looking at the others.
///
/// The scheduler adds the pods it binds during a pass, so later pods of the pass see them.
#[derive(Debug, Default)]
pub struct BoundPods<'a> {
    namespace_labels: HashMap<String, BTreeMap<String, String>>,
    node_domains: HashMap<String, HashMap<String, Vec<usize>>>,
    pods: Vec<Bound<'a>>,
    indexed_keys: HashSet<String>,
    by_label: HashMap<&'a str, HashMap<&'a str, Vec<usize>>>,
    anti_terms: Vec<(usize, AffinityTerm)>,
    anti_by_label: HashMap<String, HashMap<String, Vec<usize>>>,
    anti_unpinned: Vec<usize>,
}

/// The label keys the terms of `pending` pods pin, i.e. what [`BoundPods`] indexes bound pods by.
pub fn index_keys<'p>(pending: impl IntoIterator<Item = &'p PodNeeds>) -> HashSet<String> {
    let mut keys = HashSet::new();
    for needs in pending {
        for t in needs.pod_affinity.iter().chain(&needs.pod_anti_affinity) {
            keys.extend(t.selector.pinned().map(|r| r.key.clone()));
        }
    }
    keys
}

impl<'a> BoundPods<'a> {
    /// No pods yet on `nodes` (the list every node index refers to). `namespace_labels`: each
    /// namespace's labels (for `namespaceSelector`); `indexed_keys`: see [`index_keys`].
    pub fn new(
        nodes: &[NodeInfo],
        namespace_labels: HashMap<String, BTreeMap<String, String>>,
        indexed_keys: HashSet<String>,
    ) -> Self {
        let mut node_domains: HashMap<String, HashMap<String, Vec<usize>>> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for (k, v) in &n.labels {
                node_domains
                    .entry(k.clone())
                    .or_default()
                    .entry(v.clone())
                    .or_default()
                    .push(i);
            }
        }
        Self {
            namespace_labels,
            node_domains,
            indexed_keys,
            ..Self::default()
        }
    }

    /// Adds a pod bound to `nodes[node]`.
    pub fn add(&mut self, node: usize, pod: &'a Value) {
        let labels = json::at(pod, "/metadata/labels").and_then(Value::as_object);
        let at = self.pods.len();
        let namespace = json::namespace(pod);
        self.pods.push(Bound {
            node,
            namespace,
            labels,
        });
        if !self.indexed_keys.is_empty() {
            for (k, v) in labels.into_iter().flatten() {
                if let Some(v) = v.as_str()
                    && self.indexed_keys.contains(k.as_str())
                {
                    self.by_label
                        .entry(k.as_str())
                        .or_default()
                        .entry(v)
                        .or_default()
                        .push(at);
                }
            }
        }
        let has_anti = pod
            .pointer(
                "/spec/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution",
            )
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if has_anti {
            for term in AffinityTerm::required(pod, "podAntiAffinity", namespace) {
                if term.selector == Selector::Nothing {
                    continue;
                }
                let i = self.anti_terms.len();
                match term.selector.pinned().next() {
                    Some(r) => {
                        let by_value = self.anti_by_label.entry(r.key.clone()).or_default();
                        let mut values: Vec<&String> = r.values.iter().collect();
                        values.sort();
                        values.dedup();
                        for v in values {
                            by_value.entry(v.clone()).or_default().push(i);
                        }
                    }
                    None => self.anti_unpinned.push(i),
                }
                self.anti_terms.push((node, term));
            }
        }
    }

    fn labels_of_namespace(&self, namespace: &str) -> &BTreeMap<String, String> {
        self.namespace_labels.get(namespace).unwrap_or(&NO_LABELS)
    }

    /// Calls `f` with every bound pod `selector` could match (a superset of those it does).
    fn for_each_candidate(&self, selector: &Selector, mut f: impl FnMut(&Bound<'a>)) {
        if *selector == Selector::Nothing {
            return;
        }
        // The pinned requirement with the fewest candidates.
        let best = selector
            .pinned()
            .filter(|r| self.indexed_keys.contains(&r.key))
            .map(|r| {
                let by_value = self.by_label.get(r.key.as_str());
                let mut values: Vec<&str> = r.values.iter().map(String::as_str).collect();
                values.sort_unstable();
                values.dedup();
                let lists: Vec<&Vec<usize>> = values
                    .iter()
                    .filter_map(|v| by_value.and_then(|m| m.get(v)))
                    .collect();
                (lists.iter().map(|l| l.len()).sum::<usize>(), lists)
            })
            .min_by_key(|(n, _)| *n);
        match best {
            Some((_, lists)) => {
                for i in lists.into_iter().flatten() {
                    f(&self.pods[*i]);
                }
            }
            None => self.pods.iter().for_each(f),
        }
    }

    /// The nodes in the topology domain `key` = the value on `nodes[node]` (none when that node
    /// lacks the key).
    fn domain_nodes(&self, nodes: &[NodeInfo], node: usize, key: &str) -> &[usize] {
        nodes
            .get(node)
            .and_then(|n| n.labels.get(key))
            .and_then(|v| self.node_domains.get(key)?.get(v))
            .map_or(&[], Vec::as_slice)
    }

    /// InterPodAffinity's PreFilter for `needs` over the bound pods (`nodes`: the node list the
    /// indices refer to, as given to [`BoundPods::new`]).
    pub fn prefilter(&self, needs: &PodNeeds, nodes: &[NodeInfo]) -> InterPod {
        let mut out = InterPod::default();
        // Domains already applied, by topology key and the node that stands for them.
        let mut seen: HashSet<(&str, &String)> = HashSet::new();
        let reject = |out: &mut InterPod, node: usize, key: &'_ str, reason: &'static str| {
            for &i in self.domain_nodes(nodes, node, key) {
                out.anti_rejected.entry(i).or_insert(reason);
            }
        };
        // The incoming pod's anti-affinity (reported first): each term against the bound pods it
        // can match.
        for term in &needs.pod_anti_affinity {
            self.for_each_candidate(&term.selector, |b| {
                let Some(value) = nodes
                    .get(b.node)
                    .and_then(|n| n.labels.get(&term.topology_key))
                else {
                    return;
                };
                if seen.contains(&(term.topology_key.as_str(), value)) {
                    return;
                }
                if term.matches(
                    b.namespace,
                    &b.labels,
                    self.labels_of_namespace(b.namespace),
                ) {
                    seen.insert((term.topology_key.as_str(), value));
                    reject(
                        &mut out,
                        b.node,
                        &term.topology_key,
                        POD_ANTI_AFFINITY_NOT_MATCH,
                    );
                }
            });
        }
        // Bound pods' anti-affinity terms that the incoming pod's labels can satisfy.
        let own_ns_labels = self.labels_of_namespace(&needs.namespace);
        let mut check = |i: usize| {
            let (node, term) = &self.anti_terms[i];
            if term.matches(&needs.namespace, &needs.labels, own_ns_labels) {
                reject(
                    &mut out,
                    *node,
                    &term.topology_key,
                    EXISTING_ANTI_AFFINITY_NOT_MATCH,
                );
            }
        };
        for (k, v) in &needs.labels {
            if let Some(terms) = self.anti_by_label.get(k).and_then(|m| m.get(v)) {
                terms.iter().copied().for_each(&mut check);
            }
        }
        self.anti_unpinned.iter().copied().for_each(&mut check);
        // Its affinity: bound pods matching every term count in each term's domain.
        if let Some(first) = needs.pod_affinity.first() {
            self.for_each_candidate(&first.selector, |b| {
                let ns_labels = self.labels_of_namespace(b.namespace);
                if needs
                    .pod_affinity
                    .iter()
                    .all(|t| t.matches(b.namespace, &b.labels, ns_labels))
                {
                    for t in &needs.pod_affinity {
                        let Some(v) = nodes
                            .get(b.node)
                            .and_then(|n| n.labels.get(&t.topology_key))
                        else {
                            continue;
                        };
                        if !holds(&out.affinity, &t.topology_key, v) {
                            out.affinity
                                .entry(t.topology_key.clone())
                                .or_default()
                                .insert(v.clone());
                        }
                    }
                }
            });
            out.matches_own_affinity = needs
                .pod_affinity
                .iter()
                .all(|t| t.matches(&needs.namespace, &needs.labels, own_ns_labels));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const HOST: &str = "kubernetes.io/hostname";
    const ZONE: &str = "topology.kubernetes.io/zone";
    const JOB: &str = tuneplane_core::constants::JOB_ID_LABEL;
    const POOL: &str = tuneplane_core::constants::POOL_LABEL;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A node with 8 GPUs, 16 CPUs, its hostname label and `extra` labels.
    fn node(name: &str, extra: &[(&str, &str)]) -> NodeInfo {
        let mut l = labels(extra);
        l.insert(HOST.into(), name.into());
        NodeInfo {
            name: name.into(),
            labels: l,
            taints: Vec::new(),
            unschedulable: false,
            allocatable: [
                ("cpu", 16_000),
                ("memory", 64_000),
                ("nvidia.com/gpu", 8_000),
                ("pods", 110_000),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            used: Resources::new(),
        }
    }

    /// A pod in `ns` with `labels` and `affinity` (the whole `spec.affinity`), asking 1 GPU.
    fn pod(name: &str, ns: &str, labels: Value, affinity: Value) -> Value {
        json!({
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"affinity": affinity, "containers": [{"name": "main",
                "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}}]},
        })
    }

    fn anti(terms: Value) -> Value {
        json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}})
    }

    fn affinity(terms: Value) -> Value {
        json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}})
    }

    /// TunePlane's term: one pod of a job's pool per node.
    fn one_per_node(job: &str, pool: &str) -> Value {
        json!([{"labelSelector": {"matchLabels": {JOB: job, POOL: pool}}, "topologyKey": HOST}])
    }

    fn worker(name: &str, job: &str, pool: &str) -> Value {
        pod(
            name,
            "jobs",
            json!({JOB: job, POOL: pool}),
            anti(one_per_node(job, pool)),
        )
    }

    /// The filter's verdict on every node for `incoming`, with `bound` pods at their node indices.
    fn verdicts(
        nodes: &[NodeInfo],
        bound: &[(usize, &Value)],
        incoming: &Value,
        namespaces: &[(&str, &[(&str, &str)])],
    ) -> Vec<Filtered> {
        let needs = PodNeeds::from_pod(incoming);
        let ns: HashMap<String, BTreeMap<String, String>> = namespaces
            .iter()
            .map(|(n, l)| (n.to_string(), labels(l)))
            .collect();
        // Every variant of the index must give the same answer.
        let mut answers = Vec::new();
        for keys in [index_keys([&needs]), HashSet::new()] {
            let mut b = BoundPods::new(nodes, ns.clone(), keys);
            for (i, p) in bound {
                b.add(*i, p);
            }
            let inter = b.prefilter(&needs, nodes);
            answers.push(
                nodes
                    .iter()
                    .enumerate()
                    .map(|(i, n)| needs.filter(n, i, &inter))
                    .collect::<Vec<_>>(),
            );
        }
        assert_eq!(
            answers[0], answers[1],
            "indexed and full-scan answers differ"
        );
        answers.swap_remove(0)
    }

    fn ok() -> Filtered {
        Filtered::default()
    }

    fn fails(reason: &str, unresolvable: bool) -> Filtered {
        Filtered {
            reasons: vec![reason.to_string()],
            unresolvable,
        }
    }

    #[test]
    fn selectors_read_like_metav1_label_selectors() {
        let l = labels(&[("a", "1"), ("b", "2")]);
        let sel = |v: Value| Selector::from_json(Some(&v));
        assert!(
            !Selector::from_json(None).matches(&l),
            "null selects nothing"
        );
        assert!(!Selector::from_json(Some(&Value::Null)).matches(&l));
        assert!(sel(json!({})).matches(&l), "{{}} selects everything");
        assert!(sel(json!({"matchLabels": {}})).matches(&l));
        assert!(sel(json!({"matchLabels": {"a": "1", "b": "2"}})).matches(&l));
        assert!(!sel(json!({"matchLabels": {"a": "1", "b": "3"}})).matches(&l));
        let expr = |op: &str, key: &str, values: Value| {
            sel(json!({"matchExpressions": [{"key": key, "operator": op, "values": values}]}))
                .matches(&l)
        };
        assert!(expr("In", "a", json!(["0", "1"])));
        assert!(!expr("In", "a", json!(["0"])));
        assert!(!expr("In", "z", json!(["1"])), "In needs the label");
        assert!(expr("NotIn", "a", json!(["0"])));
        assert!(!expr("NotIn", "a", json!(["1"])));
        assert!(
            expr("NotIn", "z", json!(["1"])),
            "NotIn holds without the label"
        );
        assert!(expr("Exists", "a", Value::Null));
        assert!(!expr("Exists", "z", Value::Null));
        assert!(expr("DoesNotExist", "z", Value::Null));
        assert!(!expr("DoesNotExist", "a", Value::Null));
        assert!(
            !expr("Gt", "a", json!(["0"])),
            "unknown operators match nothing"
        );
        // matchLabels and matchExpressions are ANDed.
        assert!(
            !sel(json!({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "DoesNotExist"}]}))
                .matches(&l)
        );
    }

    #[test]
    fn terms_default_to_their_pods_namespace_unless_namespaces_or_a_selector_is_given() {
        let l = labels(&[("app", "x")]);
        let prod = labels(&[("env", "prod")]);
        let term = |t: Value| AffinityTerm::from_json(&t, "home");
        let sel = json!({"matchLabels": {"app": "x"}});
        let own = term(json!({"labelSelector": sel, "topologyKey": HOST}));
        assert!(own.matches("home", &l, &NO_LABELS));
        assert!(!own.matches("other", &l, &prod));
        let listed =
            term(json!({"labelSelector": sel, "namespaces": ["a", "b"], "topologyKey": HOST}));
        assert!(listed.matches("b", &l, &NO_LABELS));
        assert!(
            !listed.matches("home", &l, &NO_LABELS),
            "listing replaces the default"
        );
        let all = term(json!({"labelSelector": sel, "namespaceSelector": {}, "topologyKey": HOST}));
        assert!(all.matches("anywhere", &l, &NO_LABELS));
        let by_label = term(json!({"labelSelector": sel, "namespaces": ["a"],
            "namespaceSelector": {"matchLabels": {"env": "prod"}}, "topologyKey": HOST}));
        assert!(by_label.matches("p", &l, &prod));
        assert!(
            by_label.matches("a", &l, &NO_LABELS),
            "namespaces or selector"
        );
        assert!(!by_label.matches("home", &l, &NO_LABELS));
        assert!(!by_label.matches("p", &labels(&[("app", "y")]), &prod));
        let null_selector = term(json!({"topologyKey": HOST}));
        assert!(!null_selector.matches("home", &l, &NO_LABELS));
    }

    #[test]
    fn incoming_anti_affinity_rejects_the_nodes_of_matching_pods_and_preemption_could_help() {
        let nodes = [node("n0", &[]), node("n1", &[]), node("n2", &[])];
        let a = worker("a", "j1", "p0");
        let other_pool = worker("b", "j1", "p1");
        let other_ns = pod(
            "c",
            "elsewhere",
            json!({JOB: "j1", POOL: "p0"}),
            Value::Null,
        );
        let got = verdicts(
            &nodes,
            &[(0, &a), (1, &other_pool), (2, &other_ns)],
            &worker("new", "j1", "p0"),
            &[],
        );
        assert_eq!(got, [fails(POD_ANTI_AFFINITY_NOT_MATCH, false), ok(), ok()]);
    }

    #[test]
    fn topology_domains_span_nodes_and_nodes_without_the_key_are_not_matched() {
        let nodes = [
            node("n0", &[(ZONE, "z1")]),
            node("n1", &[(ZONE, "z1")]),
            node("n2", &[(ZONE, "z2")]),
            node("n3", &[]),
        ];
        let zone_term = |job: &str| {
            anti(json!([{"labelSelector": {"matchLabels": {JOB: job}}, "topologyKey": ZONE}]))
        };
        let a = pod("a", "jobs", json!({JOB: "j1"}), Value::Null);
        let by_zone = pod("new", "jobs", json!({JOB: "j2"}), zone_term("j1"));
        assert_eq!(
            verdicts(&nodes, &[(0, &a)], &by_zone, &[]),
            [
                fails(POD_ANTI_AFFINITY_NOT_MATCH, false),
                fails(POD_ANTI_AFFINITY_NOT_MATCH, false),
                ok(),
                ok()
            ]
        );
        // A matching pod on a node without the key constrains no domain.
        assert_eq!(
            verdicts(&nodes, &[(3, &a)], &by_zone, &[]),
            [ok(), ok(), ok(), ok()]
        );
        // The same, seen from the other side: the bound pod's term rejects the incoming pod.
        let guard = pod("g", "jobs", json!({JOB: "j2"}), zone_term("j1"));
        let incoming = pod("new", "jobs", json!({JOB: "j1"}), Value::Null);
        assert_eq!(
            verdicts(&nodes, &[(1, &guard)], &incoming, &[]),
            [
                fails(EXISTING_ANTI_AFFINITY_NOT_MATCH, false),
                fails(EXISTING_ANTI_AFFINITY_NOT_MATCH, false),
                ok(),
                ok()
            ]
        );
        assert_eq!(
            verdicts(&nodes, &[(3, &guard)], &incoming, &[]),
            [ok(), ok(), ok(), ok()]
        );
    }

    #[test]
    fn existing_pods_anti_affinity_is_symmetric_and_reads_the_incoming_pods_namespace_labels() {
        let nodes = [node("n0", &[]), node("n1", &[])];
        // Bound pods whose terms select the incoming pod; the incoming pod has no terms at all.
        let guard = pod(
            "g",
            "team-a",
            json!({}),
            anti(json!([{"labelSelector": {"matchExpressions": [
                {"key": JOB, "operator": "In", "values": ["j1", "j2"]},
                {"key": POOL, "operator": "Exists"}]},
                "namespaceSelector": {"matchLabels": {"env": "prod"}}, "topologyKey": HOST}])),
        );
        let everything = pod(
            "e",
            "team-a",
            json!({}),
            anti(json!([{"labelSelector": {"matchExpressions": [
                {"key": "debug", "operator": "DoesNotExist"}]}, "topologyKey": HOST}])),
        );
        let incoming = pod("new", "jobs", json!({JOB: "j2", POOL: "p"}), Value::Null);
        let prod: &[(&str, &str)] = &[("env", "prod")];
        assert_eq!(
            verdicts(&nodes, &[(1, &guard)], &incoming, &[("jobs", prod)]),
            [ok(), fails(EXISTING_ANTI_AFFINITY_NOT_MATCH, false)]
        );
        assert_eq!(
            verdicts(&nodes, &[(1, &guard)], &incoming, &[("jobs", &[])]),
            [ok(), ok()],
            "namespace not selected"
        );
        // A term in team-a without namespaces only guards team-a.
        assert_eq!(
            verdicts(&nodes, &[(0, &everything)], &incoming, &[]),
            [ok(), ok()]
        );
        let neighbour = pod("new", "team-a", json!({}), Value::Null);
        assert_eq!(
            verdicts(&nodes, &[(0, &everything)], &neighbour, &[]),
            [fails(EXISTING_ANTI_AFFINITY_NOT_MATCH, false), ok()]
        );
    }

    #[test]
    fn pod_affinity_needs_a_matching_pod_in_the_domain_unless_it_is_the_first_of_its_group() {
        let nodes = [
            node("n0", &[(ZONE, "z1")]),
            node("n1", &[(ZONE, "z1")]),
            node("n2", &[(ZONE, "z2")]),
            node("n3", &[]),
        ];
        let near = |sel: Value| affinity(json!([{"labelSelector": sel, "topologyKey": ZONE}]));
        let no = fails(POD_AFFINITY_NOT_MATCH, true);
        // Nobody matches, and the pod does not match its own term: nowhere.
        let lonely = pod(
            "new",
            "jobs",
            json!({}),
            near(json!({"matchLabels": {JOB: "j1"}})),
        );
        assert_eq!(
            verdicts(&nodes, &[], &lonely, &[]),
            [no.clone(), no.clone(), no.clone(), no.clone()]
        );
        // Nobody matches but the pod matches itself: any node with the topology key.
        let first = pod(
            "new",
            "jobs",
            json!({JOB: "j1"}),
            near(json!({"matchLabels": {JOB: "j1"}})),
        );
        assert_eq!(
            verdicts(&nodes, &[], &first, &[]),
            [ok(), ok(), ok(), no.clone()]
        );
        // A matching pod in z1: only z1 (the self match no longer counts).
        let peer = pod("peer", "jobs", json!({JOB: "j1"}), Value::Null);
        assert_eq!(
            verdicts(&nodes, &[(1, &peer)], &first, &[]),
            [ok(), ok(), no.clone(), no.clone()]
        );
        // One pod must match every term.
        let two_terms = pod(
            "new",
            "jobs",
            json!({}),
            affinity(json!([
                {"labelSelector": {"matchLabels": {JOB: "j1"}}, "topologyKey": ZONE},
                {"labelSelector": {"matchLabels": {POOL: "p"}}, "topologyKey": HOST},
            ])),
        );
        let pool = pod("pool", "jobs", json!({POOL: "p"}), Value::Null);
        assert_eq!(
            verdicts(&nodes, &[(1, &peer), (1, &pool)], &two_terms, &[]),
            [no.clone(), no.clone(), no.clone(), no.clone()]
        );
        let both = pod("both", "jobs", json!({JOB: "j1", POOL: "p"}), Value::Null);
        assert_eq!(
            verdicts(&nodes, &[(1, &both)], &two_terms, &[]),
            [no.clone(), ok(), no.clone(), no]
        );
    }

    #[test]
    fn filters_stop_at_the_first_failing_plugin_with_affinity_before_anti_affinity() {
        let mut nodes = [node("n0", &[]), node("n1", &[]), node("n2", &[])];
        nodes[1].used.insert("nvidia.com/gpu".into(), 8_000);
        let a = worker("a", "j1", "p0");
        let mut incoming = worker("new", "j1", "p0");
        incoming["spec"]["affinity"]["nodeAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [{"matchExpressions": [{"key": HOST, "operator": "In", "values": ["n0", "n1"]}]}]}});
        assert_eq!(
            verdicts(&nodes, &[(0, &a), (1, &a), (2, &a)], &incoming, &[]),
            [
                fails(POD_ANTI_AFFINITY_NOT_MATCH, false),
                fails("Insufficient nvidia.com/gpu", false),
                fails("node(s) didn't match Pod's node affinity/selector", true),
            ]
        );
        // Affinity is checked first, then the pod's anti-affinity, then the existing pods'.
        incoming["spec"]["affinity"]["podAffinity"] = affinity(json!([
            {"labelSelector": {"matchLabels": {"app": "nobody"}}, "topologyKey": HOST}]))["podAffinity"]
            .clone();
        assert_eq!(
            verdicts(&nodes, &[(0, &a)], &incoming, &[])[0],
            fails(POD_AFFINITY_NOT_MATCH, true)
        );
        let plain = pod(
            "new",
            "jobs",
            json!({JOB: "j1", POOL: "p0"}),
            anti(one_per_node("j9", "x")),
        );
        let guard_and_match = worker("a", "j1", "p0");
        assert_eq!(
            verdicts(&nodes, &[(0, &guard_and_match)], &plain, &[])[0],
            fails(EXISTING_ANTI_AFFINITY_NOT_MATCH, false)
        );
    }

    #[test]
    fn an_unplaceable_worker_gets_the_schedulers_message() {
        let nodes = [
            node("cpu-0", &[]),
            node("h200-0", &[]),
            node("h200-1", &[]),
            node("l40s-0", &[]),
        ];
        let planned = |name: &str| {
            let mut p = worker(name, "j1", "p0");
            p["spec"]["affinity"]["nodeAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [{"key": HOST, "operator": "In", "values": ["h200-0", "h200-1"]}]}]}});
            p
        };
        let (a, b, c) = (planned("a"), planned("b"), planned("c"));
        let mut nodes = nodes.to_vec();
        let mut bound = BoundPods::new(
            &nodes,
            HashMap::new(),
            index_keys(&[PodNeeds::from_pod(&a)]),
        );
        for p in [&a, &b] {
            let needs = PodNeeds::from_pod(p);
            let inter = bound.prefilter(&needs, &nodes);
            let i = place(&needs, &nodes, &inter, true).unwrap_or_else(|m| panic!("{m}"));
            nodes[i].add(&needs.requests);
            bound.add(i, p);
        }
        assert_eq!(bound.pods.len(), 2);
        assert_ne!(bound.pods[0].node, bound.pods[1].node);
        let needs = PodNeeds::from_pod(&c);
        let inter = bound.prefilter(&needs, &nodes);
        assert_eq!(
            place(&needs, &nodes, &inter, true),
            Err(
                "0/4 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, \
                 2 node(s) didn't match pod anti-affinity rules. no new claims to deallocate, \
                 preemption: 0/4 nodes are available: 2 No preemption victims found for incoming \
                 pod, 2 Preemption is not helpful for scheduling."
                    .to_string()
            )
        );
        assert_eq!(
            place(&needs, &nodes, &inter, false),
            Err(
                "0/4 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, \
                 2 node(s) didn't match pod anti-affinity rules. no new claims to deallocate, \
                 preemption: not eligible due to preemptionPolicy=Never."
                    .to_string()
            )
        );
    }

    #[test]
    fn the_index_finds_every_pod_a_term_can_match() {
        let nodes = [
            node("n0", &[]),
            node("n1", &[]),
            node("n2", &[]),
            node("n3", &[]),
        ];
        let p = |name: &str, l: Value| pod(name, "jobs", l, Value::Null);
        let (x, y, z) = (
            p("x", json!({JOB: "j1", POOL: "a"})),
            p("y", json!({JOB: "j2", POOL: "b"})),
            p("z", json!({"other": "1"})),
        );
        let bound = [(0, &x), (1, &y), (2, &z)];
        let with = |terms: Value| pod("new", "jobs", json!({}), anti(terms));
        let hit = fails(POD_ANTI_AFFINITY_NOT_MATCH, false);
        let cases = [
            // In with several values, NotIn, Exists and an empty selector.
            (
                json!({"matchExpressions": [{"key": JOB, "operator": "In", "values": ["j2", "j1", "j2"]}]}),
                [true, true, false, false],
            ),
            (
                json!({"matchExpressions": [{"key": JOB, "operator": "NotIn", "values": ["j1"]}]}),
                [false, true, true, false],
            ),
            (
                json!({"matchExpressions": [{"key": POOL, "operator": "Exists"}]}),
                [true, true, false, false],
            ),
            (json!({}), [true, true, true, false]),
            (
                json!({"matchLabels": {JOB: "j1"}, "matchExpressions": [{"key": POOL, "operator": "In", "values": ["a", "b"]}]}),
                [true, false, false, false],
            ),
            (
                json!({"matchLabels": {JOB: "missing"}}),
                [false, false, false, false],
            ),
        ];
        for (sel, want) in cases {
            let incoming = with(json!([{"labelSelector": sel, "topologyKey": HOST}]));
            let got = verdicts(&nodes, &bound, &incoming, &[]);
            let want: Vec<Filtered> = want
                .iter()
                .map(|h| if *h { hit.clone() } else { ok() })
                .collect();
            assert_eq!(got, want, "selector {sel}");
        }
        // Bound pods' terms indexed by an In with several values, and unpinned ones.
        let guards = [
            pod(
                "g1",
                "jobs",
                json!({}),
                anti(
                    json!([{"labelSelector": {"matchExpressions": [{"key": JOB, "operator": "In", "values": ["j1", "j3"]}]}, "topologyKey": HOST}]),
                ),
            ),
            pod(
                "g2",
                "jobs",
                json!({}),
                anti(
                    json!([{"labelSelector": {"matchExpressions": [{"key": POOL, "operator": "NotIn", "values": ["b"]}]}, "topologyKey": HOST}]),
                ),
            ),
            pod(
                "g3",
                "jobs",
                json!({}),
                anti(json!([{"topologyKey": HOST}])),
            ),
        ];
        let bound: Vec<(usize, &Value)> = guards.iter().enumerate().collect();
        let existing = fails(EXISTING_ANTI_AFFINITY_NOT_MATCH, false);
        assert_eq!(
            verdicts(
                &nodes,
                &bound,
                &p("new", json!({JOB: "j3", POOL: "b"})),
                &[]
            ),
            [existing.clone(), ok(), ok(), ok()]
        );
        assert_eq!(
            verdicts(&nodes, &bound, &p("new", json!({JOB: "j2"})), &[]),
            [ok(), existing, ok(), ok()]
        );
    }
}
