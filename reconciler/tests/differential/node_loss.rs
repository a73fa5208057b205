//! Lost nodes on both backends, with their own golden file `tests/differential/real_node_loss.json`
//! ([`NODE_LOSS`]), one test a step:
//! 1. `taint_eviction`: l40s-0 turns NotReady (the agent reports it, then goes silent); its pod
//!    tolerating the not-ready taint for 5 s is evicted by the taint-eviction controller
//!    (`DeletionByTaintManager`) and stays Terminating while the node's kubelet is down; Ready
//!    again, it goes.
//! 2. `pod_gc`: h200-1 is deleted; its pod is marked `Failed` (`DeletionByPodGC`) and removed
//!    by the pod garbage collector (40-60 s on the real cluster).
//!
//! Where the file is not recorded (`TUNEPLANE_TEST_K8S=real TUNEPLANE_UPDATE_GOLDEN=1`, on a
//! machine whose pod bridge is free), the tests say so and pass on kubesim (kubesim's own
//! `kubesim/tests/node_loss.rs` checks the same behaviour).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use tuneplane_kubesim::annotations;

use crate::common::*;
use crate::support::*;

/// A pod that runs until deleted on node `node` (by its hostname label), tolerating the fleet's
/// GPU taint and `extra`.
fn pinned_pod(name: &str, node: &str, extra: Value) -> Pod {
    let mut tolerations = vec![json!({"key": "nvidia.com/gpu", "operator": "Exists"})];
    tolerations.extend(extra.as_array().cloned().unwrap_or_default());
    serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {annotations::RUN_SECONDS: "3600"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": tolerations,
            "containers": [{"name": "main", "image": "python:3.12-slim", "command": ["sleep", "3600"],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
        },
    }))
    .expect("pod")
}

/// What a lost node's pod shows: phase, whether it is Terminating (and its grace period) and its
/// `DisruptionTarget` condition.
fn disruption(p: &Pod) -> Value {
    let condition = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
        .map(|c| json!({"status": c.status, "reason": c.reason, "message": c.message}));
    json!({
        "phase": phase(p),
        "terminating": p.metadata.deletion_timestamp.is_some(),
        "deletionGracePeriodSeconds": p.metadata.deletion_grace_period_seconds,
        "DisruptionTarget": condition,
    })
}

/// The cluster of a lost-node test with pod `name` running on `node` (tolerating `extra`), or
/// `None` (said) where [`NODE_LOSS`] is not recorded yet.
async fn pinned(name: &str, node: &str, extra: Value) -> Option<Run> {
    if !NODE_LOSS.recorded() {
        println!(
            "skipped: {} is not recorded yet (TUNEPLANE_TEST_K8S=real {UPDATE_VAR}=1)",
            NODE_LOSS.file
        );
        return None;
    }
    let h = start_run(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let api = h.pods();
    api.create(&create_params(), &pinned_pod(name, node, extra))
        .await
        .expect("create");
    wait_for(30, &format!("{name} Running"), || async {
        let p = api.get(name).await.ok()?;
        (phase(&p) == "Running").then_some(())
    })
    .await;
    Some(h)
}

/// A NotReady node's pod, evicted after its toleration; Terminating until the node is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taint_eviction_matches_the_real_control_plane() {
    // Both taints the node lifecycle controller may put first (not-ready for a kubelet that
    // reported Ready=False, unreachable once its heartbeats are older than its grace).
    let not_ready = json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
    ]);
    let Some(h) = pinned("tp-evicted", "l40s-0", not_ready).await else {
        return;
    };
    let api = h.pods();
    h.set_node_ready("l40s-0", false).await;
    let evicted = wait_for(120, "tp-evicted evicted", || async {
        let p = api.get("tp-evicted").await.ok()?;
        p.metadata.deletion_timestamp.is_some().then_some(p)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = api
        .get_opt("tp-evicted")
        .await
        .expect("get")
        .map(|p| disruption(&p));
    h.set_node_ready("l40s-0", true).await;
    wait_for(60, "tp-evicted gone once l40s-0 is back", || async {
        api.get_opt("tp-evicted")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let obs = json!({"evicted": disruption(&evicted), "three_seconds_later": still, "gone_when_ready": true});
    NODE_LOSS.check("taint_eviction", obs, &Redactor::default());
}

/// A deleted node's pod, failed and removed by the pod garbage collector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_gc_matches_the_real_control_plane() {
    let Some(h) = pinned("tp-orphan", "h200-1", json!([])).await else {
        return;
    };
    let api = h.pods();
    let (versions, watcher) = record(h.pods(), "tp-orphan");
    match &h.cluster {
        Cluster::Sim(sim) => sim.delete_node("h200-1").expect("delete node"),
        Cluster::Real(r) => r.testbed.delete_node("h200-1").await.expect("delete node"),
    }
    // The pod garbage collector's 40 s quarantine, then its next round (every 20 s).
    wait_for(120, "tp-orphan collected", || async {
        api.get_opt("tp-orphan").await.ok()?.is_none().then_some(())
    })
    .await;
    // The watch runs behind the GET that found the pod gone: let it deliver the collector's last
    // versions (a slow machine otherwise ends the recording at the pod's Running version).
    let marked = || {
        seen(&versions)
            .last()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !marked() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    watcher.abort();
    let last = seen(&versions).last().map(disruption);
    NODE_LOSS.check(
        "pod_gc",
        json!({"last_seen": last, "gone": true}),
        &Redactor::default(),
    );
}
