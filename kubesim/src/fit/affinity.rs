//! Inter-pod affinity: kube-scheduler's InterPodAffinity filter, required terms only.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::{NodeInfo, PodNeeds};
use crate::json;
use crate::selector::{LabelSet, Selector};

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

pub(super) fn holds(domains: &Domains, key: &str, value: &str) -> bool {
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
pub(super) struct Bound<'a> {
    pub(super) node: usize,
    namespace: &'a str,
    labels: Option<&'a serde_json::Map<String, Value>>,
}

pub(super) static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

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
    pub(super) pods: Vec<Bound<'a>>,
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
