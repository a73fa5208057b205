//! Lost nodes, as kube-controller-manager 1.34 handles them: a deleted Node's pods are marked
//! `Failed` with `DisruptionTarget`/`DeletionByPodGC` and force-deleted after the PodGC
//! quarantine (pods of other nodes untouched, executed processes killed at once); a NotReady
//! node's pods are evicted by the taint-eviction controller once their toleration of the
//! `NoExecute` not-ready taint runs out (`DisruptionTarget`/`DeletionByTaintManager`) and stay
//! `Terminating` while the node's kubelet is down; any `NoExecute` taint evicts the pods that do
//! not tolerate it; interruption notices (`NoSchedule`) evict nobody; KubeRay recreates deleted
//! head and worker pods.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod, PodCondition};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use tuneplane_kubesim::annotations;
use tuneplane_kubesim::fleet::{self, effect, interruption};

const NOT_READY: &str = "node.kubernetes.io/not-ready";

fn config() -> tuneplane_kubesim::SimConfig {
    tuneplane_kubesim::SimConfig {
        pod_gc_quarantine: Duration::from_secs(1),
        ..fast_config()
    }
}

/// A pod that runs until deleted, on node `node` (by its hostname label), with extra
/// `tolerations`.
fn pinned(name: &str, node: &str, tolerations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": tolerations,
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "infinity"],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
        },
    }))
    .unwrap()
}

async fn running(pods: &Api<Pod>, name: &str) -> Pod {
    let what = format!("pod {name} Running");
    wait_for(15, &what, || async move {
        let p = pods.get(name).await.ok()?;
        (phase(&p) == "Running").then_some(p)
    })
    .await
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

fn condition(p: &Pod, ty: &str) -> Option<PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ty)
        .cloned()
}

fn terminating(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

/// Every watch event of pod `name` from now on: (type, pod).
fn record(pods: &Api<Pod>, name: &str) -> Arc<Mutex<Vec<(&'static str, Pod)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (pods, out) = (pods.clone(), seen.clone());
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut stream = pods.watch(&params, "0").await.unwrap().boxed();
        while let Some(Ok(e)) = stream.next().await {
            let item = match e {
                WatchEvent::Added(p) => ("ADDED", p),
                WatchEvent::Modified(p) => ("MODIFIED", p),
                WatchEvent::Deleted(p) => ("DELETED", p),
                _ => continue,
            };
            out.lock().unwrap().push(item);
        }
    });
    seen
}

async fn events_for(client: &kube::Client, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

#[tokio::test]
async fn a_deleted_nodes_pods_are_failed_with_deletion_by_pod_gc_then_removed_others_untouched() {
    let (sim, client) = start(config()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, node) in [("lost", "h200-0"), ("kept", "h200-1")] {
        pods.create(&PostParams::default(), &pinned(name, node, json!([])))
            .await
            .unwrap();
    }
    running(&pods, "lost").await;
    let kept = running(&pods, "kept").await;
    let log = record(&pods, "lost");
    tokio::time::sleep(Duration::from_millis(200)).await;

    sim.delete_node("h200-0").unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    assert!(nodes.get_opt("h200-0").await.unwrap().is_none());
    let removing = events_for(&client, "h200-0").await;
    assert!(
        removing
            .iter()
            .any(|e| e.reason.as_deref() == Some("RemovingNode")),
        "{removing:?}"
    );
    // Quarantine: the pod is still there, still Running, a moment after its node went.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let p = pods.get("lost").await.unwrap();
    assert_eq!(phase(&p), "Running");
    assert!(condition(&p, "DisruptionTarget").is_none());

    wait_for(10, "the orphaned pod to be collected", || async {
        pods.get_opt("lost").await.unwrap().is_none().then_some(())
    })
    .await;
    // Its last states: Failed with the PodGC condition, then deleted.
    let seen = log.lock().unwrap().clone();
    let last = seen.last().expect("watch events");
    assert_eq!(last.0, "DELETED");
    let before = seen
        .iter()
        .rev()
        .find(|(ty, _)| *ty == "MODIFIED")
        .map(|(_, p)| p.clone())
        .expect("a MODIFIED event before the deletion");
    assert_eq!(phase(&before), "Failed");
    let c = condition(&before, "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(c.status, "True");
    assert_eq!(c.reason.as_deref(), Some("DeletionByPodGC"));
    assert_eq!(c.message.as_deref(), Some("PodGC: node no longer exists"));

    // The other node's pod is untouched.
    let after = pods.get("kept").await.unwrap();
    assert_eq!(phase(&after), "Running");
    assert_eq!(
        after.metadata.resource_version, kept.metadata.resource_version,
        "the pod of a node still there changed"
    );
    assert!(!terminating(&after));
}

#[tokio::test]
async fn a_not_ready_nodes_pod_is_evicted_after_its_toleration_and_stays_terminating() {
    let (sim, client) = start(config()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let five = json!([{"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]);
    let forever = json!([{"key": NOT_READY, "operator": "Exists", "effect": "NoExecute"}]);
    for (name, node, tolerations) in [
        ("five", "h200-0", five),
        ("forever", "h200-0", forever),
        ("elsewhere", "h200-1", json!([])),
    ] {
        pods.create(&PostParams::default(), &pinned(name, node, tolerations))
            .await
            .unwrap();
    }
    // A pod with only the defaulted tolerations (300 s).
    pods.create(
        &PostParams::default(),
        &pinned("default", "h200-0", json!([])),
    )
    .await
    .unwrap();
    for name in ["five", "forever", "elsewhere", "default"] {
        running(&pods, name).await;
    }

    let went = Instant::now();
    sim.set_node_ready("h200-0", false).unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let taints = nodes
        .get("h200-0")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default();
    let effects: Vec<&str> = taints
        .iter()
        .filter(|t| t.key == NOT_READY)
        .map(|t| t.effect.as_str())
        .collect();
    assert_eq!(effects, ["NoSchedule", "NoExecute"]);
    assert!(
        taints
            .iter()
            .any(|t| t.effect == "NoExecute" && t.time_added.is_some())
    );

    // Not before its 5 s.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let p = pods.get("five").await.unwrap();
    assert!(!terminating(&p), "evicted after {:?}", went.elapsed());
    assert!(condition(&p, "DisruptionTarget").is_none());

    let evicted = wait_for(6, "pod five to be evicted", || async {
        let p = pods.get("five").await.ok()?;
        terminating(&p).then_some(p)
    })
    .await;
    let after = went.elapsed();
    assert!(after >= Duration::from_secs(5), "evicted after {after:?}");
    let c = condition(&evicted, "DisruptionTarget").expect("DisruptionTarget");
    assert_eq!(c.status, "True");
    assert_eq!(c.reason.as_deref(), Some("DeletionByTaintManager"));
    assert_eq!(
        c.message.as_deref(),
        Some("Taint manager: deleting due to NoExecute taint")
    );
    // Graceful: the default 30 s grace period, and the kubelet of a NotReady node never
    // confirms, so it stays Terminating (and Running) past its grace period's first second.
    assert_eq!(evicted.metadata.deletion_grace_period_seconds, Some(30));
    assert_eq!(phase(&evicted), "Running");
    let events = events_for(&client, "five").await;
    let eviction = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("TaintManagerEviction"))
        .expect("TaintManagerEviction event");
    assert_eq!(
        eviction.message.as_deref(),
        Some("Marking for deletion Pod default/five")
    );
    assert_eq!(
        eviction
            .source
            .as_ref()
            .and_then(|s| s.component.as_deref()),
        Some("taint-eviction-controller")
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let still = pods.get("five").await.unwrap();
    assert!(terminating(&still));

    // Tolerating for ever, or for 300 s, or on a Ready node: untouched.
    for name in ["forever", "default", "elsewhere"] {
        let p = pods.get(name).await.unwrap();
        assert!(!terminating(&p), "{name} was evicted");
        assert!(condition(&p, "DisruptionTarget").is_none(), "{name}");
        assert_eq!(phase(&p), "Running", "{name}");
    }

    // Ready again: its kubelet finishes the deletion; the others stay.
    sim.set_node_ready("h200-0", true).unwrap();
    wait_for(5, "the kubelet to finish the deletion", || async {
        pods.get_opt("five").await.unwrap().is_none().then_some(())
    })
    .await;
    for name in ["forever", "default"] {
        assert_eq!(phase(&pods.get(name).await.unwrap()), "Running");
    }
}

#[tokio::test]
async fn deleting_a_pod_of_a_not_ready_node_leaves_it_terminating_until_forced() {
    let (sim, client) = start(config()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pinned("stuck", "h200-0", json!([])),
    )
    .await
    .unwrap();
    pods.create(&PostParams::default(), &pinned("fine", "h200-1", json!([])))
        .await
        .unwrap();
    running(&pods, "stuck").await;
    running(&pods, "fine").await;
    sim.set_node_ready("h200-0", false).unwrap();

    let grace = DeleteParams {
        grace_period_seconds: Some(7),
        ..DeleteParams::default()
    };
    pods.delete("stuck", &grace).await.unwrap();
    let p = pods.get("stuck").await.unwrap();
    assert!(terminating(&p));
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(7));
    // deletionTimestamp is when the grace period ends.
    let at = p.metadata.deletion_timestamp.unwrap().0;
    let ahead = at.as_second() - jiff::Timestamp::now().as_second();
    assert!(
        (5..=8).contains(&ahead),
        "deletionTimestamp {ahead} s ahead"
    );
    // A later status write (e.g. a controller's) does not remove it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pods.get_opt("stuck").await.unwrap().is_some());

    // A Ready node's kubelet confirms at once.
    pods.delete("fine", &DeleteParams::default()).await.unwrap();
    wait_for(5, "pod fine to go", || async {
        pods.get_opt("fine").await.unwrap().is_none().then_some(())
    })
    .await;

    // Forced: gone.
    pods.delete("stuck", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(pods.get_opt("stuck").await.unwrap().is_none());
}

#[tokio::test]
async fn a_no_execute_interruption_taint_evicts_pods_that_do_not_tolerate_it() {
    let (sim, client) = start(config()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let tolerant = json!([{"key": interruption::AWS_SPOT_ITN, "operator": "Exists"}]);
    let for_a_minute = json!([{"key": interruption::AWS_SPOT_ITN, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]);
    for (name, node, tolerations) in [
        ("plain", "h200-0", json!([])),
        ("tolerant", "h200-0", tolerant),
        ("minute", "h200-0", for_a_minute),
        ("noticed", "h200-1", json!([])),
    ] {
        pods.create(&PostParams::default(), &pinned(name, node, tolerations))
            .await
            .unwrap();
    }
    for name in ["plain", "tolerant", "minute", "noticed"] {
        running(&pods, name).await;
    }
    let log = record(&pods, "plain");
    tokio::time::sleep(Duration::from_millis(200)).await;

    // An interruption notice as its tool puts it (NoSchedule) evicts nobody.
    sim.taint_node(
        "h200-1",
        fleet::interruption_taint(interruption::KARPENTER_DISRUPTED, None),
    )
    .unwrap();
    // A NoExecute one evicts, at once, the pods that do not tolerate it.
    sim.taint_node(
        "h200-0",
        fleet::taint(
            interruption::AWS_SPOT_ITN,
            Some("evt-1"),
            effect::NO_EXECUTE,
        ),
    )
    .unwrap();
    wait_for(5, "pod plain to be evicted", || async {
        pods.get_opt("plain").await.unwrap().is_none().then_some(())
    })
    .await;
    let seen = log.lock().unwrap().clone();
    let marked = seen
        .iter()
        .filter(|(ty, _)| *ty == "MODIFIED")
        .filter_map(|(_, p)| condition(p, "DisruptionTarget"))
        .next_back()
        .expect("the DisruptionTarget condition before the deletion");
    assert_eq!(marked.reason.as_deref(), Some("DeletionByTaintManager"));
    assert_eq!(seen.last().map(|(ty, _)| *ty), Some("DELETED"));

    tokio::time::sleep(Duration::from_millis(500)).await;
    for name in ["tolerant", "minute", "noticed"] {
        let p = pods.get(name).await.unwrap();
        assert!(!terminating(&p), "{name} was evicted");
        assert_eq!(phase(&p), "Running", "{name}");
    }
    // New pods keep away from the noticed node.
    pods.create(&PostParams::default(), &pinned("new", "h200-1", json!([])))
        .await
        .unwrap();
    let failed = wait_for(5, "FailedScheduling for new", || {
        let client = client.clone();
        async move {
            events_for(&client, "new")
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
        }
    })
    .await;
    // h200-1 by its notice, h200-0 by the NoExecute taint; the others by the selector.
    let message = failed.message.unwrap_or_default();
    assert!(
        message.contains("2 node(s) had untolerated taint(s)"),
        "{message}"
    );

    // The taint goes before the minute is up: the scheduled eviction is cancelled.
    sim.untaint_node("h200-0", interruption::AWS_SPOT_ITN, None)
        .unwrap();
    let cancelled = wait_for(5, "the cancelled eviction", || {
        let client = client.clone();
        async move {
            events_for(&client, "minute")
                .await
                .into_iter()
                .find(|e| e.message.as_deref() == Some("Cancelling deletion of Pod default/minute"))
        }
    })
    .await;
    assert_eq!(cancelled.reason.as_deref(), Some("TaintManagerEviction"));
    assert!(!terminating(&pods.get("minute").await.unwrap()));
}

#[tokio::test]
async fn deleting_a_node_kills_its_executed_processes_at_once() {
    let data = tempfile::tempdir().unwrap();
    let (sim, client) = start(tuneplane_kubesim::SimConfig {
        exec_dir: Some(data.path().to_path_buf()),
        pod_gc_quarantine: Duration::from_secs(3),
        ..fast_config()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    // Counts ticks into a file; a SIGTERM would leave a marker (a lost machine sends none).
    let script = "trap 'echo term > /work/term.txt; exit 0' TERM; i=0; while true; do i=$((i+1)); echo $i > /work/ticks; sleep 0.05; done";
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "busy"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": "cpu-0"},
            "volumes": [{"name": "work", "emptyDir": {}}],
            "containers": [{
                "name": "main", "image": "bash", "command": ["bash", "-c", script],
                "volumeMounts": [{"name": "work", "mountPath": "/work"}],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            }],
        },
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let uid8: String = created
        .metadata
        .uid
        .unwrap_or_default()
        .chars()
        .take(8)
        .collect();
    let work = data
        .path()
        .join(format!("pods/default/busy-{uid8}/volumes/work"));
    let ticks = work.join("ticks");
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    wait_for(20, "the process to tick", || async {
        (read(&ticks).trim().parse::<u64>().unwrap_or(0) > 3).then_some(())
    })
    .await;

    sim.delete_node("cpu-0").unwrap();
    // Within a moment the ticks stop, long before the pod is collected.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let stopped_at = read(&ticks);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(read(&ticks), stopped_at, "the process still runs");
    assert!(!work.join("term.txt").exists(), "the process got SIGTERM");
    assert!(pods.get_opt("busy").await.unwrap().is_some());
    wait_for(10, "the pod to be collected", || async {
        pods.get_opt("busy").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn kuberay_recreates_deleted_head_and_worker_pods_and_a_pinned_worker_stays_pending() {
    let (sim, client) = start(config()).await;
    let rayjobs = rayjobs(&client);
    // The worker pinned to h200-1 by required node affinity, as TunePlane pins a pool's nodes.
    let mut rj = rayjob("tp-lost", "h200", 8, 1);
    if let Some(spec) = rj.spec.ray_cluster_spec.as_mut() {
        spec["workerGroupSpecs"][0]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h200-1"]}]}]}}});
    }
    rj.metadata.annotations = Some(
        [(annotations::RUN_SECONDS.to_string(), "120".to_string())]
            .into_iter()
            .collect(),
    );
    rayjobs.create(&PostParams::default(), &rj).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let ray_pod = |role: &'static str| {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default().labels(&format!("ray.io/node-type={role}")))
                .await
                .unwrap()
                .items
                .into_iter()
                .next()
        }
    };
    let worker = wait_for(15, "the worker Running", || async {
        ray_pod("worker").await.filter(|p| phase(p) == "Running")
    })
    .await;
    let head = wait_for(15, "the head Running", || async {
        ray_pod("head").await.filter(|p| phase(p) == "Running")
    })
    .await;
    assert_eq!(node_of(&worker), "h200-1");

    // A deleted worker is replaced by a new one (a new generated name), Running again.
    let old = worker.metadata.name.clone().unwrap();
    pods.delete(&old, &DeleteParams::default()).await.unwrap();
    let replaced = wait_for(10, "a new worker Running", || async {
        ray_pod("worker")
            .await
            .filter(|p| phase(p) == "Running" && p.metadata.name.as_deref() != Some(&old))
    })
    .await;
    assert_eq!(node_of(&replaced), "h200-1");

    // A deleted head comes back under the same name with a new uid.
    let head_name = head.metadata.name.clone().unwrap();
    pods.delete(&head_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for(10, "the head recreated", || async {
        ray_pod("head")
            .await
            .filter(|p| p.metadata.uid != head.metadata.uid)
            .filter(|p| p.metadata.name.as_deref() == Some(&head_name))
    })
    .await;

    // The worker's node goes: PodGC removes the worker, KubeRay recreates it, and pinned to the
    // lost node it cannot be scheduled.
    sim.delete_node("h200-1").unwrap();
    let gone = replaced.metadata.name.clone().unwrap();
    let pending = wait_for(10, "a recreated worker", || async {
        ray_pod("worker")
            .await
            .filter(|p| p.metadata.name.as_deref() != Some(&gone))
            .filter(|p| {
                condition(p, "PodScheduled")
                    .and_then(|c| c.reason)
                    .as_deref()
                    == Some("Unschedulable")
            })
    })
    .await;
    assert_eq!(phase(&pending), "Pending");
    assert!(node_of(&pending).is_empty());
    let message = condition(&pending, "PodScheduled")
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(
        message.contains("didn't match Pod's node affinity/selector"),
        "{message}"
    );
}

/// The node agent's node-loss helpers, against kubesim as the API server (no root, no real
/// cluster): taints, a node whose kubelet goes silent, and a deleted node with its Lease.
#[tokio::test]
async fn agent_taints_silences_and_deletes_single_nodes() {
    use k8s_openapi::api::coordination::v1::Lease;
    use tuneplane_kubesim::agent::{self, AgentConfig, AgentError};

    let (_sim, client) = start(tuneplane_kubesim::SimConfig {
        fleet: None,
        ..config()
    })
    .await;
    let fleet = tuneplane_core::fleet::Fleet::from_yaml(
        "node_groups:\n- {name: g, series: h200, count: 2, gpus: 8, cpus: 8, memory_gb: 64}\n",
    )
    .unwrap();
    let mut cfg = AgentConfig::new(fleet);
    cfg.kubelet_port = None;
    cfg.lease_interval = Duration::from_millis(200);
    cfg.heartbeat_interval = Duration::from_millis(200);
    let handle = agent::start(client.clone(), cfg).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let renewed = |name: &'static str| {
        let leases = leases.clone();
        async move {
            leases
                .get(name)
                .await
                .unwrap()
                .spec
                .and_then(|s| s.renew_time)
                .map(|t| t.0)
        }
    };
    let ready = |n: Node| {
        n.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status)
    };

    // An interruption notice, put twice (replaced, not doubled), then removed.
    for _ in 0..2 {
        handle
            .taint_node("g-0", interruption::AWS_SPOT_ITN, effect::NO_SCHEDULE)
            .await
            .unwrap();
    }
    let taints = nodes
        .get("g-0")
        .await
        .unwrap()
        .spec
        .unwrap()
        .taints
        .unwrap();
    assert_eq!(taints.len(), 1, "{taints:?}");
    assert_eq!(taints[0].key, interruption::AWS_SPOT_ITN);
    assert_eq!(taints[0].effect, "NoSchedule");
    assert!(taints[0].time_added.is_none());
    handle
        .taint_node("g-0", "maintenance", effect::NO_EXECUTE)
        .await
        .unwrap();
    let taints = nodes
        .get("g-0")
        .await
        .unwrap()
        .spec
        .unwrap()
        .taints
        .unwrap();
    assert!(
        taints
            .iter()
            .any(|t| t.key == "maintenance" && t.time_added.is_some())
    );
    handle
        .untaint_node("g-0", interruption::AWS_SPOT_ITN)
        .await
        .unwrap();
    handle.untaint_node("g-0", "maintenance").await.unwrap();
    let taints = nodes.get("g-0").await.unwrap().spec.unwrap().taints;
    assert!(taints.unwrap_or_default().is_empty());

    // NotReady: reported once, then the Lease and the heartbeat go stale.
    handle.set_node_ready("g-1", false).await.unwrap();
    assert_eq!(
        ready(nodes.get("g-1").await.unwrap()).as_deref(),
        Some("False")
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (silent, beating) = (renewed("g-1").await, renewed("g-0").await);
    let heartbeat = |n: Node| {
        n.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .and_then(|c| c.last_heartbeat_time)
            .map(|t| t.0)
    };
    let beat = heartbeat(nodes.get("g-1").await.unwrap());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        renewed("g-1").await,
        silent,
        "a silent node's Lease was renewed"
    );
    assert_ne!(
        renewed("g-0").await,
        beating,
        "a live node's Lease was not renewed"
    );
    assert_eq!(heartbeat(nodes.get("g-1").await.unwrap()), beat);
    // Ready again: renewed at once.
    handle.set_node_ready("g-1", true).await.unwrap();
    assert_ne!(renewed("g-1").await, silent);
    assert_eq!(
        ready(nodes.get("g-1").await.unwrap()).as_deref(),
        Some("True")
    );

    // One node deleted with its Lease, for good; the other stays.
    handle.delete_node("g-0").await.unwrap();
    assert!(nodes.get_opt("g-0").await.unwrap().is_none());
    assert!(leases.get_opt("g-0").await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        leases.get_opt("g-0").await.unwrap().is_none(),
        "Lease re-created"
    );
    assert!(nodes.get_opt("g-1").await.unwrap().is_some());
    assert!(matches!(
        handle.set_node_ready("g-0", true).await,
        Err(AgentError::UnknownNode(_))
    ));
    assert!(matches!(
        handle.delete_node("nope").await,
        Err(AgentError::UnknownNode(_))
    ));
    handle.shutdown().await;
}
