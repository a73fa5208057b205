//! The NetworkPolicies TunePlane renders, enforced for real: on the real tier
//! (`TUNEPLANE_TEST_K8S=real`) pods are network namespaces on one bridge and
//! `scripts/k8s-up.sh` runs kube-router's firewall on them, as a cluster's network plugin would.
//! Skipped on kubesim, whose pods are records.
//!
//! Tenant A runs a playground, a Ray head and a CPU job's pod, each listening on its ports;
//! tenant B runs a Ray worker. Stand-ins the test makes in a network namespace of its own on the
//! pod bridge play the metadata service (169.254.169.254), an address of the cluster's internal
//! range (10.244.250.10) and a public endpoint (198.51.100.7). Without policies B's pod reaches
//! everything (the control: the probes can see an open path); with the namespace's policies it
//! reaches only the public endpoint on 443 and the API relayed on its loopback (as pods reach the
//! API and the blob store on this tier), and what the firewall lets through agrees with the
//! independent evaluator (`TUNEPLANE_NETPOL_EVAL`) on every case a policy decides.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use tuneplane_core::constants::WORKLOAD_LABEL;
use tuneplane_core::constants::{JOB_ID_LABEL, MANAGED_BY, MANAGED_BY_LABEL, PLAYGROUND_LABEL};
use tuneplane_core::job::JobRecord;
use tuneplane_core::render::network::{
    NetworkSettings, render_egress_policy, render_network_policy, render_playground_policy,
    render_single_pod_policy,
};
use tuneplane_core::spec::{Defaults, validate};
use tuneplane_kubesim::agent::real::net::{BRIDGE, GATEWAY, netns_of};

const NS: &str = "tuneplane-jobs";
const STAND_IN_NETNS: &str = "tpx-standin";
const METADATA: &str = "169.254.169.254";
const INTERNAL: &str = "10.244.250.10";
const PUBLIC: &str = "198.51.100.7";

/// Listens on every port named in its arguments and answers `ok` to each connection.
const SERVER: &str = r#"
import socket, sys, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(64)
    while True:
        c, _ = s.accept(); c.sendall(b"ok\n"); c.close()
for p in sys.argv[1:]:
    threading.Thread(target=serve, args=(int(p),), daemon=True).start()
print("listening on", *sys.argv[1:], flush=True)
threading.Event().wait()
"#;

/// Tries each `ip:port` argument at once (2 s each) and prints one line of 1s and 0s: whether
/// the target answered `ok`.
const PROBE: &str = r#"
import socket, sys, threading
out = ["0"] * (len(sys.argv) - 1)
def probe(i, target):
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2) as c:
            c.settimeout(2)
            if c.recv(3) == b"ok\n":
                out[i] = "1"
    except OSError:
        pass
ts = [threading.Thread(target=probe, args=(i, t)) for i, t in enumerate(sys.argv[1:])]
for t in ts: t.start()
for t in ts: t.join()
print("".join(out))
"#;

fn job(id: &str, tenant: &str) -> JobRecord {
    let text = "name: t\nimage: rayproject/ray:2.60.0\nentrypoint: python train.py\npools: [{name: main, series: h200, nodes: 1, gpus_per_node: 8}]\n";
    let spec = validate(text, None, &Defaults::default()).unwrap().spec;
    JobRecord::new_queued(
        id.parse().unwrap(),
        tenant.parse().unwrap(),
        spec,
        "ab".repeat(32),
        1,
    )
}

/// A pod on `node` running [`SERVER`] on `ports` (or only sleeping when there are none), with
/// `env`.
fn server_pod(name: &str, node: &str, labels: &Value, ports: &[u16], env: &Value) -> Pod {
    let args: Vec<String> = ports.iter().map(u16::to_string).collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": "python:3.11",
                "command": ["python", "-c", SERVER],
                "args": args,
                "env": env,
            }],
        },
    }))
    .unwrap()
}

async fn run(program: &str, args: &[&str]) -> String {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The stand-ins' namespace on the pod bridge, its server, and their removal when dropped.
struct StandIns {
    server: tokio::process::Child,
}

impl StandIns {
    async fn start() -> StandIns {
        // What an interrupted run left.
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", STAND_IN_NETNS])
            .stderr(Stdio::null())
            .status();
        run("ip", &["netns", "add", STAND_IN_NETNS]).await;
        run(
            "ip",
            &[
                "link", "add", "tpxs0", "type", "veth", "peer", "name", "tpxs1",
            ],
        )
        .await;
        run("ip", &["link", "set", "tpxs1", "netns", STAND_IN_NETNS]).await;
        run("ip", &["link", "set", "tpxs0", "master", BRIDGE]).await;
        run("ip", &["link", "set", "tpxs0", "up"]).await;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", STAND_IN_NETNS, "ip"];
            all.extend_from_slice(args);
            all.into_iter().map(str::to_owned).collect::<Vec<_>>()
        };
        for args in [
            inside(&["link", "set", "tpxs1", "name", "eth0"]),
            inside(&["addr", "add", &format!("{INTERNAL}/16"), "dev", "eth0"]),
            inside(&["addr", "add", &format!("{METADATA}/16"), "dev", "eth0"]),
            inside(&["addr", "add", &format!("{PUBLIC}/32"), "dev", "eth0"]),
            inside(&["link", "set", "eth0", "up"]),
            inside(&["link", "set", "lo", "up"]),
        ] {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run("ip", &args).await;
        }
        let mut server = tokio::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                STAND_IN_NETNS,
                "python3",
                "-c",
                SERVER,
                "80",
                "443",
                "22",
            ])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("stand-in server");
        // Probes start only once every port listens: a probe that came first would be refused
        // and read as a denial (the control below would fail for the wrong reason).
        let stdout = server.stdout.take().expect("piped stdout");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the stand-in server did not start listening within 30 s");
        assert!(
            matches!(&first, Ok(Some(l)) if l.starts_with("listening")),
            "stand-in server: {first:?}"
        );
        StandIns { server }
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        let _ = self.server.start_kill();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", STAND_IN_NETNS])
            .status();
    }
}

/// Whether each of `targets` answers from inside network namespace `netns` (the host's own
/// namespace when `None`).
async fn probe(netns: Option<&str>, targets: &[String]) -> Vec<bool> {
    let mut args: Vec<&str> = Vec::new();
    if let Some(ns) = netns {
        args.extend(["netns", "exec", ns]);
    }
    args.extend(["python3", "-c", PROBE]);
    args.extend(targets.iter().map(String::as_str));
    let program = if netns.is_some() { "ip" } else { "python3" };
    let args = if netns.is_some() {
        &args[..]
    } else {
        &args[1..]
    };
    let line = run(program, args).await;
    let verdicts: Vec<bool> = line.trim().chars().map(|c| c == '1').collect();
    assert_eq!(verdicts.len(), targets.len(), "{line}");
    verdicts
}

/// Who connects: a name and the evaluator's description of the source.
type Source<'a> = (&'static str, &'a Value);

/// One traffic case: who connects, to what, as the evaluator describes the peers.
struct Case {
    name: String,
    from: &'static str,
    target: String,
    port: u16,
    source: Value,
    destination: Value,
    /// Whether a NetworkPolicy decides it (a pod's loopback relay is not the network's).
    evaluated: bool,
}

/// Runs every case's probe (grouped by source namespace); verdicts by case name.
async fn enforce(cases: &[Case], netns: &BTreeMap<&str, Option<String>>) -> Vec<(String, bool)> {
    let mut verdicts = BTreeMap::new();
    for (from, ns) in netns {
        let mine: Vec<&Case> = cases.iter().filter(|c| c.from == *from).collect();
        let targets: Vec<String> = mine.iter().map(|c| c.target.clone()).collect();
        for (case, ok) in mine.iter().zip(probe(ns.as_deref(), &targets).await) {
            verdicts.insert(case.name.clone(), ok);
        }
    }
    cases
        .iter()
        .map(|c| (c.name.clone(), verdicts[&c.name]))
        .collect()
}

/// The evaluator's verdicts for `cases` under `policies`.
fn evaluate(policies: &[Value], cases: &[Case]) -> Vec<(String, bool)> {
    let eval = std::env::var("TUNEPLANE_NETPOL_EVAL").expect(
        "TUNEPLANE_NETPOL_EVAL is not set: run scripts/test.sh, or point it at the output of scripts/testenv-netpol.sh",
    );
    let cases_json: Vec<Value> = cases
        .iter()
        .filter(|c| c.evaluated)
        .map(|c| json!({"name": c.name, "port": c.port, "protocol": "TCP", "source": c.source, "destination": c.destination}))
        .collect();
    let mut child = std::process::Command::new(&eval)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{eval}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            json!({"policies": policies, "cases": cases_json})
                .to_string()
                .as_bytes(),
        )
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

fn table(verdicts: &[(String, bool)]) -> String {
    verdicts
        .iter()
        .map(|(n, a)| format!("{n}: {}\n", if *a { "allowed" } else { "denied" }))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_pod_reaches_no_playground_ray_cluster_cpu_pod_metadata_or_internal_address()
 {
    if !real::is_real() {
        eprintln!("skipped: policies are enforced on the real tier only (TUNEPLANE_TEST_K8S=real)");
        return;
    }
    let fleet = "node_groups:\n  - {name: cpu, count: 1, cpus: 16, memory_gb: 64}\n";
    let h = start_executing(sim_config(fleet, Duration::from_secs(60), None)).await;
    let nodes: Api<Node> = Api::all(h.client.clone());
    let node = nodes.list(&ListParams::default()).await.unwrap().items[0]
        .metadata
        .name
        .clone()
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), NS);
    // A stand-in for the TunePlane API on the host's loopback: B's pod names it in its spec, as
    // the runner's pods name the API and the blob store, so the agent relays it into the pod.
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_port = api.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut conn, _)) = api.accept().await {
            let _ = conn.write_all(b"ok\n").await;
        }
    });
    let api_env =
        json!([{"name": "TUNEPLANE_API_URL", "value": format!("http://127.0.0.1:{api_port}/v1")}]);

    let a_head_labels = json!({JOB_ID_LABEL: "j-a", "ray.io/node-type": "head"});
    let a_worker_labels = json!({JOB_ID_LABEL: "j-a", "ray.io/node-type": "worker"});
    let b_worker_labels = json!({JOB_ID_LABEL: "j-b", "ray.io/node-type": "worker"});
    let playground_labels = json!({PLAYGROUND_LABEL: "pg-a", MANAGED_BY_LABEL: MANAGED_BY});
    let cpu_labels =
        json!({JOB_ID_LABEL: "j-c", MANAGED_BY_LABEL: MANAGED_BY, WORKLOAD_LABEL: "pod"});
    let none = json!([]);
    let wanted = [
        (
            "a-head",
            &a_head_labels,
            vec![6379, 10001, 8265, 8270],
            &none,
        ),
        ("a-worker", &a_worker_labels, vec![], &none),
        ("b-worker", &b_worker_labels, vec![], &api_env),
        ("a-playground", &playground_labels, vec![8000], &none),
        ("a-cpu", &cpu_labels, vec![8080], &none),
    ];
    for (name, labels, ports, env) in &wanted {
        wait_for(30, "pod creation", || async {
            match pods
                .create(
                    &PostParams::default(),
                    &server_pod(name, &node, labels, ports, env),
                )
                .await
            {
                Ok(_) => Some(()),
                Err(e) if e.to_string().contains("serviceaccount") => None,
                Err(e) => panic!("creating pod {name}: {e}"),
            }
        })
        .await;
    }
    let mut ip = BTreeMap::new();
    let mut netns = BTreeMap::new();
    for (name, _, _, _) in &wanted {
        let pod = wait_for(60, &format!("pod {name} Running"), || async {
            let p = pods.get(name).await.ok()?;
            let st = p.status.clone()?;
            (st.phase.as_deref() == Some("Running") && st.pod_ip.is_some()).then_some(p)
        })
        .await;
        ip.insert(*name, pod.status.unwrap().pod_ip.unwrap());
        netns.insert(*name, netns_of(pod.metadata.uid.as_deref().unwrap()));
    }
    let _stand_ins = StandIns::start().await;
    // The public stand-in is not on the pod network: B's pod gets a route to it on the link.
    run(
        "ip",
        &[
            "netns",
            "exec",
            &netns["b-worker"],
            "ip",
            "route",
            "add",
            &format!("{PUBLIC}/32"),
            "dev",
            "eth0",
        ],
    )
    .await;

    let peer =
        |name: &str, labels: &Value| json!({"namespace": NS, "pod_labels": labels, "ip": ip[name]});
    let outside = |addr: &str| json!({"ip": addr});
    let b = peer("b-worker", &b_worker_labels);
    let a = peer("a-worker", &a_worker_labels);
    let head = peer("a-head", &a_head_labels);
    let playground = peer("a-playground", &playground_labels);
    let cpu = peer("a-cpu", &cpu_labels);
    let proxy = outside(&GATEWAY.to_string());
    let (b_from, a_from) = (("B's worker", &b), ("A's worker", &a));
    #[rustfmt::skip]
    let paths: Vec<(Source, &str, &str, u16, Value)> = vec![
        (b_from, "A's head", ip["a-head"].as_str(), 6379, head.clone()),
        (b_from, "A's head", ip["a-head"].as_str(), 10001, head.clone()),
        (b_from, "A's head", ip["a-head"].as_str(), 8265, head.clone()),
        (b_from, "A's head", ip["a-head"].as_str(), 8270, head.clone()),
        (b_from, "A's playground", ip["a-playground"].as_str(), 8000, playground.clone()),
        (b_from, "A's CPU pod", ip["a-cpu"].as_str(), 8080, cpu.clone()),
        (b_from, "metadata", METADATA, 80, outside(METADATA)),
        (b_from, "an internal address", INTERNAL, 443, outside(INTERNAL)),
        (b_from, "a public endpoint", PUBLIC, 443, outside(PUBLIC)),
        (b_from, "a public endpoint", PUBLIC, 22, outside(PUBLIC)),
        (b_from, "the API through its loopback relay", "127.0.0.1", api_port, outside("127.0.0.1")),
        (a_from, "A's head", ip["a-head"].as_str(), 6379, head.clone()),
        (a_from, "A's head", ip["a-head"].as_str(), 8265, head.clone()),
        (a_from, "A's playground", ip["a-playground"].as_str(), 8000, playground.clone()),
        (a_from, "metadata", METADATA, 80, outside(METADATA)),
        (("the API's proxy", &proxy), "A's playground", ip["a-playground"].as_str(), 8000, playground.clone()),
    ];
    let cases: Vec<Case> = paths
        .into_iter()
        .map(|((from, source), what, addr, port, destination)| Case {
            name: format!("{from} -> {what}:{port}"),
            from,
            target: format!("{addr}:{port}"),
            port,
            source: source.clone(),
            destination,
            evaluated: addr != "127.0.0.1",
        })
        .collect();
    let sources: BTreeMap<&str, Option<String>> = [
        ("B's worker", Some(netns["b-worker"].clone())),
        ("A's worker", Some(netns["a-worker"].clone())),
        ("the API's proxy", None),
    ]
    .into_iter()
    .collect();

    // The control: with no policy every path is open, so a denial below is the policies' doing.
    // The pods' servers start after their pods are Running, so the control is retried (bounded)
    // until every path answers; one still closed after that fails the test.
    let mut open = Vec::new();
    for _ in 0..15 {
        open = enforce(&cases, &sources).await;
        if open.iter().all(|(_, ok)| *ok) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(
        open.iter().all(|(_, ok)| *ok),
        "without policies:\n{}",
        table(&open)
    );

    let settings = NetworkSettings {
        playground_proxy_cidrs: vec![format!("{GATEWAY}/32")],
        ..NetworkSettings::default()
    };
    let policies = vec![
        render_single_pod_policy(NS),
        render_egress_policy(NS, &settings),
        render_playground_policy(NS, &settings),
        render_network_policy(&job("j-a", "acme"), &settings),
        render_network_policy(&job("j-b", "globex"), &settings),
    ];
    let api: Api<NetworkPolicy> = Api::namespaced(h.client.clone(), NS);
    for p in &policies {
        let policy: NetworkPolicy = serde_json::from_value(p.clone()).unwrap();
        api.create(&PostParams::default(), &policy).await.unwrap();
    }
    // The firewall syncs within seconds of a change: wait until B's pod is refused A's GCS.
    let gcs = vec![format!("{}:6379", ip["a-head"])];
    let b_ns = netns["b-worker"].clone();
    wait_for(60, "the policies to be enforced", || async {
        (!probe(Some(&b_ns), &gcs).await[0]).then_some(())
    })
    .await;

    let enforced = enforce(&cases, &sources).await;
    println!("enforced by kube-router:\n{}", table(&enforced));
    let expected: Vec<(String, bool)> = cases
        .iter()
        .map(|c| {
            let allowed = c.name == "B's worker -> a public endpoint:443"
                || !c.evaluated
                || c.name.starts_with("A's worker -> A's head")
                || c.name == "the API's proxy -> A's playground:8000";
            (c.name.clone(), allowed)
        })
        .collect();
    assert_eq!(enforced, expected, "enforced:\n{}", table(&enforced));
    let evaluated = evaluate(&policies, &cases);
    let disagreements: Vec<String> = enforced
        .iter()
        .zip(cases.iter())
        .filter(|(_, c)| c.evaluated)
        .map(|(e, _)| e)
        .zip(&evaluated)
        .filter(|(e, v)| e != v)
        .map(|(e, v)| format!("{}: enforced {}, evaluated {}", e.0, e.1, v.1))
        .collect();
    assert!(disagreements.is_empty(), "{disagreements:#?}");
}
