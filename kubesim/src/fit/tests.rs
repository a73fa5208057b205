//! The scheduler model's filters, scores and messages against the real scheduler's.

use serde_json::json;

use std::collections::{HashMap, HashSet};

use super::affinity::NO_LABELS;
use super::*;
use crate::selector::Selector;

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
    let listed = term(json!({"labelSelector": sel, "namespaces": ["a", "b"], "topologyKey": HOST}));
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
