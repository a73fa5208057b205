//! The meaning of the NetworkPolicies TunePlane renders, judged by an independent evaluator
//! (cyclonus's policy matcher, built by `scripts/testenv-netpol.sh`; its path in
//! `TUNEPLANE_NETPOL_EVAL`, which the test command sets): fake nodes enforce no policy, so the
//! YAML alone proves nothing. The truth table: traffic to a job's pods is allowed from the job's
//! own pods and its submitter on every port, from the operator, the reconciler and the API server
//! on the dashboard gate only, and from nothing else — another tenant's job least of all. A CPU-only
//! job's Pod, under its namespace's shared policy, is reached by nothing. A playground is reached
//! only from the API's proxy addresses on its server port, and a pod of the jobs namespace reaches
//! the cluster's DNS, public HTTPS and its own job, never the metadata address, the cluster's
//! internal ranges or another tenant's pods.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use tuneplane_core::constants::PLAYGROUND_LABEL;
use tuneplane_core::constants::{JOB_ID_LABEL, MANAGED_BY, MANAGED_BY_LABEL, WORKLOAD_LABEL};
use tuneplane_core::job::JobRecord;
use tuneplane_core::render::network::{
    JOB_NAME_LABEL, NetworkSettings, render_egress_policy, render_network_policy,
    render_playground_policy, render_single_pod_policy,
};
use tuneplane_core::render::rayjob::{GATE_PORT, RAY_DASHBOARD_PORT};
use tuneplane_core::render::workload_name;
use tuneplane_core::spec::{Defaults, validate};

const JOBS: &str = "tuneplane-jobs";
const API_SERVER: &str = "192.0.2.10";

fn job(id: &str, tenant: &str) -> JobRecord {
    let text = "name: t\nimage: rayproject/ray:2.60.0\nentrypoint: python train.py\npools: [{name: main, series: h200, nodes: 2, gpus_per_node: 8}]\n";
    let spec = validate(text, None, &Defaults::default()).unwrap().spec;
    JobRecord::new_queued(
        id.parse().unwrap(),
        tenant.parse().unwrap(),
        spec,
        "ab".repeat(32),
        1,
    )
}

/// A pod of job `id` in the jobs namespace (a Ray pod carries the platform's job label).
fn ray_pod(id: &str, kind: &str) -> Value {
    json!({"namespace": JOBS, "pod_labels": {JOB_ID_LABEL: id, "ray.io/node-type": kind}, "ip": "10.244.0.9"})
}

/// KubeRay's submitter of job `id` (the Job controller's label).
fn submitter(id: &str) -> Value {
    json!({"namespace": JOBS, "pod_labels": {JOB_NAME_LABEL: workload_name(id), "job-name": workload_name(id)}, "ip": "10.244.0.10"})
}

fn named(namespace: &str, name: &str) -> Value {
    json!({"namespace": namespace, "pod_labels": {"app.kubernetes.io/name": name}, "ip": "10.244.0.11"})
}

/// Verdicts of the evaluator for `cases` under `policies`, by case name.
fn evaluate(policies: &[Value], cases: &[Value]) -> Vec<(String, bool)> {
    let Ok(eval) = std::env::var("TUNEPLANE_NETPOL_EVAL") else {
        panic!(
            "TUNEPLANE_NETPOL_EVAL is not set: run scripts/test.sh, or point it at the output of scripts/testenv-netpol.sh"
        );
    };
    let mut child = Command::new(&eval)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{eval}: {e}"));
    let input = json!({"policies": policies, "cases": cases});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let verdicts: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    verdicts
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap().to_owned(),
                v["allowed"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Asserts the evaluator's verdicts on `cases` under `policies` (printing the table), and that
/// the evaluator is not vacuous: without the policies, everything is allowed.
fn assert_truth_table(policies: &[Value], cases: &[Value], expected: &[(String, bool)]) {
    let verdicts = evaluate(policies, cases);
    let table: String = verdicts
        .iter()
        .map(|(n, a)| format!("{n}: {}\n", if *a { "allowed" } else { "denied" }))
        .collect();
    println!("{table}");
    assert_eq!(verdicts, expected, "truth table:\n{table}");
    let open = evaluate(&[], cases);
    assert!(open.iter().all(|(_, allowed)| *allowed), "{open:?}");
}

#[test]
fn only_the_jobs_own_pods_and_the_platform_reach_a_jobs_pods() {
    let settings = NetworkSettings {
        api_server_cidrs: vec![format!("{API_SERVER}/32")],
        ..NetworkSettings::default()
    };
    let (a, b) = (job("j-a", "acme"), job("j-b", "globex"));
    let policies = [
        render_network_policy(&a, &settings),
        render_network_policy(&b, &settings),
    ];
    let sources = [
        ("A's worker", ray_pod("j-a", "worker")),
        ("A's submitter", submitter("j-a")),
        ("B's head", ray_pod("j-b", "head")),
        ("B's submitter", submitter("j-b")),
        (
            "the operator",
            named(&settings.operator_namespace, "kuberay-operator"),
        ),
        (
            "the reconciler",
            named("tuneplane-system", "tuneplane-reconciler"),
        ),
        ("the API server", json!({"ip": API_SERVER})),
        ("an outside address", json!({"ip": "198.51.100.7"})),
        (
            "another pod of the jobs namespace",
            json!({"namespace": JOBS, "pod_labels": {"app": "x"}, "ip": "10.244.0.12"}),
        ),
        (
            "a pod labelled like the operator elsewhere",
            named("default", "kuberay-operator"),
        ),
    ];
    let ports = [
        ("gate", GATE_PORT),
        ("dashboard", RAY_DASHBOARD_PORT),
        ("gcs", 6379),
        ("client", 10001),
    ];
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for (source, peer) in &sources {
        for (port_name, port) in ports {
            let name = format!("{source} -> A's head:{port_name}");
            cases.push(json!({"name": name, "port": port, "protocol": "TCP", "source": peer, "destination": ray_pod("j-a", "head")}));
            let allowed = match *source {
                "A's worker" | "A's submitter" => true,
                "the operator" | "the reconciler" | "the API server" => port == GATE_PORT,
                _ => false,
            };
            expected.push((name, allowed));
        }
    }
    assert_truth_table(&policies, &cases, &expected);
}

/// The Pod of CPU-only job `id`, labelled as `render_pod` labels it.
fn cpu_pod(id: &str, ip: &str) -> Value {
    json!({"namespace": JOBS, "pod_labels": {JOB_ID_LABEL: id, MANAGED_BY_LABEL: MANAGED_BY, WORKLOAD_LABEL: "pod", "tuneplane.io/pool": "main"}, "ip": ip})
}

#[test]
fn a_cpu_jobs_pod_is_reached_by_nothing_and_the_shared_policy_leaves_ray_jobs_as_they_were() {
    let settings = NetworkSettings {
        api_server_cidrs: vec![format!("{API_SERVER}/32")],
        ..NetworkSettings::default()
    };
    let a = job("j-a", "acme");
    let policies = [
        render_single_pod_policy(JOBS),
        render_network_policy(&a, &settings),
    ];
    // A Ray pod as the operator makes it: the platform's labels too, but not the Pod's.
    let head = json!({"namespace": JOBS, "pod_labels": {JOB_ID_LABEL: "j-a", MANAGED_BY_LABEL: MANAGED_BY, "ray.io/node-type": "head"}, "ip": "10.244.0.9"});
    let sources = [
        ("A's head", head.clone()),
        ("A's worker", ray_pod("j-a", "worker")),
        ("another CPU job's pod", cpu_pod("j-d", "10.244.0.21")),
        (
            "the operator",
            named(&settings.operator_namespace, "kuberay-operator"),
        ),
        (
            "the reconciler",
            named("tuneplane-system", "tuneplane-reconciler"),
        ),
        ("the API server", json!({"ip": API_SERVER})),
        ("an outside address", json!({"ip": "198.51.100.7"})),
    ];
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for (source, peer) in &sources {
        for (port_name, port) in [("gate", GATE_PORT), ("http", 8080), ("ssh", 22)] {
            let name = format!("{source} -> C's pod:{port_name}");
            cases.push(json!({"name": name, "port": port, "protocol": "TCP", "source": peer, "destination": cpu_pod("j-c", "10.244.0.20")}));
            expected.push((name, false));
        }
    }
    // The Ray job keeps its own table with the shared policy beside it.
    for (source, peer, allowed) in [
        ("A's worker", ray_pod("j-a", "worker"), true),
        ("C's pod", cpu_pod("j-c", "10.244.0.20"), false),
    ] {
        let name = format!("{source} -> A's head:gcs");
        cases.push(json!({"name": name, "port": 6379, "protocol": "TCP", "source": peer, "destination": head}));
        expected.push((name, allowed));
    }
    assert_truth_table(&policies, &cases, &expected);
}

/// A playground's pod, labelled as `render_playground_pod` labels it.
fn playground_pod(id: &str, ip: &str) -> Value {
    json!({"namespace": JOBS, "pod_labels": {PLAYGROUND_LABEL: id, MANAGED_BY_LABEL: MANAGED_BY}, "ip": ip})
}

const PROXY: &str = "198.18.0.0/24";

/// Every policy a jobs namespace holds with jobs A (acme) and B (globex), a CPU job and a
/// playground running.
fn namespace_policies(settings: &NetworkSettings) -> Vec<Value> {
    vec![
        render_single_pod_policy(JOBS),
        render_egress_policy(JOBS, settings),
        render_playground_policy(JOBS, settings),
        render_network_policy(&job("j-a", "acme"), settings),
        render_network_policy(&job("j-b", "globex"), settings),
    ]
}

fn settings() -> NetworkSettings {
    NetworkSettings {
        api_server_cidrs: vec![format!("{API_SERVER}/32")],
        playground_proxy_cidrs: vec![PROXY.to_owned()],
        ..NetworkSettings::default()
    }
}

#[test]
fn a_playground_is_reached_only_from_the_apis_proxy_on_its_server_port() {
    let settings = settings();
    let sources = [
        ("the API's proxy", json!({"ip": "198.18.0.7"}), true),
        ("B's worker", ray_pod("j-b", "worker"), false),
        ("B's submitter", submitter("j-b"), false),
        ("a CPU job's pod", cpu_pod("j-c", "10.244.0.20"), false),
        (
            "another playground",
            playground_pod("pg-2", "10.244.0.31"),
            false,
        ),
        (
            "the operator",
            named(&settings.operator_namespace, "kuberay-operator"),
            false,
        ),
        ("the API server", json!({"ip": API_SERVER}), false),
        ("an outside address", json!({"ip": "198.51.100.7"}), false),
    ];
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for (source, peer, proxy) in &sources {
        // vLLM serves /invocations, /metrics and /tokenize on the same port: the port is the wall.
        for (port_name, port) in [("server", 8000), ("ssh", 22), ("gcs", 6379)] {
            let name = format!("{source} -> the playground:{port_name}");
            cases.push(json!({"name": name, "port": port, "protocol": "TCP", "source": peer, "destination": playground_pod("pg-1", "10.244.0.30")}));
            expected.push((name, *proxy && port == 8000));
        }
    }
    assert_truth_table(&namespace_policies(&settings), &cases, &expected);
}

#[test]
fn pods_reach_dns_public_https_and_their_own_job_but_not_metadata_internal_ranges_or_other_tenants()
{
    let settings = settings();
    let dns = json!({"namespace": "kube-system", "pod_labels": {"k8s-app": "kube-dns"}, "ip": "10.96.0.10"});
    let sources = [
        ("A's worker", ray_pod("j-a", "worker")),
        ("A's submitter", submitter("j-a")),
        ("a CPU job's pod", cpu_pod("j-c", "10.244.0.20")),
        ("a playground", playground_pod("pg-1", "10.244.0.30")),
    ];
    let destinations: [(&str, Value, u16, &str); 12] = [
        ("dns/udp", dns.clone(), 53, "UDP"),
        ("dns/tcp", dns, 53, "TCP"),
        ("public https", json!({"ip": "198.51.100.7"}), 443, "TCP"),
        ("public ssh", json!({"ip": "198.51.100.7"}), 22, "TCP"),
        ("metadata", json!({"ip": "169.254.169.254"}), 80, "TCP"),
        (
            "metadata on 443",
            json!({"ip": "169.254.169.254"}),
            443,
            "TCP",
        ),
        (
            "an internal address on 443",
            json!({"ip": "10.0.5.5"}),
            443,
            "TCP",
        ),
        (
            "a CGNAT address on 443",
            json!({"ip": "100.64.3.3"}),
            443,
            "TCP",
        ),
        ("A's head:gcs", ray_pod("j-a", "head"), 6379, "TCP"),
        ("B's head:gcs", ray_pod("j-b", "head"), 6379, "TCP"),
        (
            "B's head:dashboard",
            ray_pod("j-b", "head"),
            RAY_DASHBOARD_PORT,
            "TCP",
        ),
        (
            "another playground:server",
            playground_pod("pg-2", "10.244.0.31"),
            8000,
            "TCP",
        ),
    ];
    let mut cases = Vec::new();
    let mut expected = Vec::new();
    for (source, peer) in &sources {
        for (dest, to, port, protocol) in &destinations {
            let name = format!("{source} -> {dest}");
            cases.push(json!({"name": name, "port": port, "protocol": protocol, "source": peer, "destination": to}));
            let allowed = match *dest {
                "dns/udp" | "dns/tcp" | "public https" => true,
                // Its own job's pods on every port; the submitter reaches its head's dashboard
                // (and gate) only, through the namespace's rule for heads.
                "A's head:gcs" => *source == "A's worker",
                _ => false,
            };
            expected.push((name, allowed));
        }
    }
    assert_truth_table(&namespace_policies(&settings), &cases, &expected);
}
