//! The scheduler's steps: `unschedulable` (pods that cannot fit anywhere) and `pod_affinity`
//! (node affinity and pod (anti-)affinity, one pod at a time).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, LogParams};
use serde_json::{Value, json};
use tuneplane_core::render::RenderSettings;
use tuneplane_reconciler::status;

use crate::common::*;
use crate::support::*;

fn gpu_pod(name: &str, gpus: u32, selector: Option<&str>, tolerate: bool) -> Pod {
    let mut spec = json!({
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "ghcr.io/acme/train:1",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus.to_string()}}}],
    });
    if let Some(s) = selector {
        spec["nodeSelector"] = json!({tuneplane_core::constants::SERIES_LABEL: s});
    }
    if tolerate {
        spec["tolerations"] = to_json(&RenderSettings::default().tolerations);
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"diff": "unschedulable"}}, "spec": spec}),
    )
    .unwrap()
}

async fn step_unschedulable(h: &Harness) -> Value {
    let api = h.pods();
    let cases = [
        (
            "tp-u-too-big",
            gpu_pod("tp-u-too-big", 16, Some("h200"), true),
        ),
        (
            "tp-u-no-node",
            gpu_pod("tp-u-no-node", 1, Some("a100"), true),
        ),
        (
            "tp-u-no-toleration",
            gpu_pod("tp-u-no-toleration", 16, None, false),
        ),
    ];
    for (_, pod) in &cases {
        api.create(&create_params(), pod).await.expect("create");
    }
    let mut out = serde_json::Map::new();
    for (name, _) in &cases {
        let (pod, events) = wait_for(30, &format!("{name} FailedScheduling"), || async {
            let pod = api.get(name).await.ok()?;
            refused(h, name, pod).await
        })
        .await;
        let scheduled = pod_scheduled(&pod);
        let message = scheduled
            .first()
            .and_then(|c| c["message"].as_str())
            .unwrap_or_default()
            .to_owned();
        let (reason, pending) =
            status::pending_from_pods(&[&tuneplane_reconciler::watched_pod::WatchedPod::from(
                pod.clone(),
            )]);
        let log = outcome(api.logs(name, &LogParams::default()).await, |t| json!(t));
        out.insert(
            (*name).to_owned(),
            json!({
                "phase": phase(&pod),
                "PodScheduled": scheduled,
                "events": failed_scheduling(&events),
                "scheduling_reason": format!("{:?}", status::scheduling_reason(&message)),
                "pending_from_pods": {"reason": format!("{reason:?}"), "message": pending},
                "assess_pod": observed(&status::assess_pod(&tuneplane_reconciler::watched_pod::WatchedPod::from(pod.clone()))),
                "log": log,
            }),
        );
    }
    out.insert(
        "field spec.nodeName=".into(),
        names(&api, &ListParams::default().fields("spec.nodeName=")).await,
    );
    out.insert(
        "field status.phase!=Succeeded".into(),
        names(
            &api,
            &ListParams::default().fields("status.phase!=Succeeded"),
        )
        .await,
    );
    Value::Object(out)
}

const AFFINITY_JOB: &str = "a1";
const AFFINITY_POOL: &str = "workers";

/// A pod of `step_pod_affinity`: `gpus` GPUs with the GPU tolerations (a CPU-only pod without
/// them when 0), 100m of CPU, `labels`, and `affinity` as its whole `spec.affinity`.
fn affinity_pod(name: &str, labels: Value, affinity: Value, gpus: u32) -> Pod {
    let mut spec = json!({
        "restartPolicy": "Never",
        "affinity": affinity,
        "containers": [{"name": "main", "image": "ghcr.io/acme/train:1",
            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}],
    });
    if gpus > 0 {
        spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!(gpus.to_string());
        spec["tolerations"] = to_json(&RenderSettings::default().tolerations);
    }
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": spec}))
        .unwrap()
}

/// Required node affinity to the two h200 nodes by hostname (a pool's planned nodes).
fn planned_h200() -> Value {
    json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h200-0", "h200-1"]}]}]}})
}

fn required(terms: Value) -> Value {
    json!({"requiredDuringSchedulingIgnoredDuringExecution": terms})
}

/// The labels of the pool's workers: job, pool and the worker's index.
fn worker_labels(index: u32) -> Value {
    json!({
        tuneplane_core::constants::JOB_ID_LABEL: AFFINITY_JOB,
        tuneplane_core::constants::POOL_LABEL: AFFINITY_POOL,
        "diff-index": index.to_string(),
    })
}

async fn step_pod_affinity(h: &Harness) -> Value {
    use tuneplane_core::constants::{JOB_ID_LABEL, POOL_LABEL, SERIES_LABEL};
    const HOST: &str = "kubernetes.io/hostname";
    let one_per_node = required(json!([{
        "labelSelector": {"matchLabels": {JOB_ID_LABEL: AFFINITY_JOB, POOL_LABEL: AFFINITY_POOL}},
        "topologyKey": HOST,
    }]));
    let worker = |name: &str, i: u32, gpus: u32| {
        affinity_pod(
            name,
            worker_labels(i),
            json!({"nodeAffinity": planned_h200(), "podAntiAffinity": one_per_node}),
            gpus,
        )
    };
    let other = json!({"diff": "affinity"});
    let cases: Vec<(&str, Pod)> = vec![
        // The pool's workers, one per planned node: the third has nowhere to go.
        ("tp-a-0", worker("tp-a-0", 0, 1)),
        ("tp-a-1", worker("tp-a-1", 1, 1)),
        ("tp-a-2", worker("tp-a-2", 2, 1)),
        // A worker too big for what its nodes have left: NodeResourcesFit speaks first.
        ("tp-a-big", worker("tp-a-big", 3, 8)),
        // A pod the workers' anti-affinity selects, with no terms of its own.
        (
            "tp-a-sym",
            affinity_pod(
                "tp-a-sym",
                worker_labels(9),
                json!({"nodeAffinity": planned_h200()}),
                1,
            ),
        ),
        // matchExpressions In + Exists: away from the workers, so not on h200.
        (
            "tp-a-expr",
            affinity_pod(
                "tp-a-expr",
                other.clone(),
                json!({"podAntiAffinity": required(json!([{"labelSelector": {"matchExpressions": [
                    {"key": JOB_ID_LABEL, "operator": "In", "values": [AFFINITY_JOB, "a9"]},
                    {"key": POOL_LABEL, "operator": "Exists"}]}, "topologyKey": HOST}]))}),
                1,
            ),
        ),
        // A series-wide domain: worker 0 sits on one h200 node, both are refused.
        (
            "tp-a-series",
            affinity_pod(
                "tp-a-series",
                other.clone(),
                json!({"nodeAffinity": planned_h200(), "podAntiAffinity": required(json!([
                    {"labelSelector": {"matchLabels": {"diff-index": "0"}}, "topologyKey": SERIES_LABEL}]))}),
                1,
            ),
        ),
        // Another namespace's pods only: the workers do not count.
        (
            "tp-a-ns",
            affinity_pod(
                "tp-a-ns",
                other.clone(),
                json!({"nodeAffinity": planned_h200(), "podAntiAffinity": required(json!([
                    {"labelSelector": {"matchLabels": {JOB_ID_LABEL: AFFINITY_JOB}}, "namespaces": ["default"], "topologyKey": HOST}]))}),
                1,
            ),
        ),
        // NotIn + DoesNotExist: selects the workers (no `diff` label), not tp-a-expr on l40s.
        (
            "tp-a-notin",
            affinity_pod(
                "tp-a-notin",
                other.clone(),
                json!({"podAntiAffinity": required(json!([{"labelSelector": {"matchExpressions": [
                    {"key": POOL_LABEL, "operator": "NotIn", "values": ["other"]},
                    {"key": "diff", "operator": "DoesNotExist"}]}, "topologyKey": HOST}]))}),
                1,
            ),
        ),
        // Pod affinity to nobody (CPU pod without tolerations: only cpu-0 gets that far).
        (
            "tp-a-near-nobody",
            affinity_pod(
                "tp-a-near-nobody",
                other.clone(),
                json!({"podAffinity": required(json!([
                    {"labelSelector": {"matchLabels": {JOB_ID_LABEL: "nobody"}}, "topologyKey": HOST}]))}),
                0,
            ),
        ),
        // Pod affinity to itself: the first of its group goes anywhere with the topology key.
        (
            "tp-a-near-self",
            affinity_pod(
                "tp-a-near-self",
                json!({JOB_ID_LABEL: "self1"}),
                json!({"podAffinity": required(json!([
                    {"labelSelector": {"matchLabels": {JOB_ID_LABEL: "self1"}}, "topologyKey": HOST}]))}),
                0,
            ),
        ),
        // Pod affinity to the workers' series: h200 (l40s has none of them).
        (
            "tp-a-near-workers",
            affinity_pod(
                "tp-a-near-workers",
                other.clone(),
                json!({"podAffinity": required(json!([{"labelSelector": {"matchExpressions": [
                    {"key": JOB_ID_LABEL, "operator": "In", "values": [AFFINITY_JOB]},
                    {"key": POOL_LABEL, "operator": "In", "values": [AFFINITY_POOL]}]}, "topologyKey": SERIES_LABEL}]))}),
                1,
            ),
        ),
    ];
    let api = h.pods();
    let series = node_series(h).await;
    let mut out = serde_json::Map::new();
    let mut nodes = BTreeMap::new();
    for (name, pod) in &cases {
        api.create(&create_params(), pod)
            .await
            .expect("create the case's pod");
        // Placed, or refused with its event and condition (one at a time, so each sees the last).
        let (pod, events) = wait_for(30, &format!("{name} placed or refused"), || async {
            let pod = api.get(name).await.ok()?;
            if pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some()
            {
                return Some((pod, Vec::new()));
            }
            refused(h, name, pod).await
        })
        .await;
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        if let Some(n) = &node {
            nodes.insert(*name, n.clone());
        }
        let scheduled = pod_scheduled(&pod);
        out.insert(
            (*name).to_owned(),
            json!({
                "node_series": node.as_ref().map(|n| series.get(n).cloned().unwrap_or_default()),
                "PodScheduled": scheduled,
                "events": failed_scheduling(&events),
            }),
        );
    }
    out.insert(
        "workers on distinct nodes".into(),
        json!(nodes.contains_key("tp-a-0") && nodes.get("tp-a-0") != nodes.get("tp-a-1")),
    );
    for (name, _) in &cases {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
    Value::Object(out)
}

/// A redactor with the fleet's nodes, as the steps before these leave it in the transcript.
async fn nodes_redacted(h: &Harness) -> Redactor {
    let mut r = Redactor::default();
    redact_nodes(&mut r, &node_series(h).await);
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_pods_match_the_real_control_plane() {
    let h = start_transcript().await;
    let r = nodes_redacted(&h).await;
    let obs = step_unschedulable(&h).await;
    TRANSCRIPT.check("unschedulable", obs, &r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_affinity_matches_the_real_control_plane() {
    let h = start_transcript().await;
    let r = nodes_redacted(&h).await;
    let obs = step_pod_affinity(&h).await;
    TRANSCRIPT.check("pod_affinity", obs, &r);
}
