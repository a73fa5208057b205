//! Pending reasons from Kubernetes (scheduling failures, image pulls) carried onto the job with the
//! Kubernetes message, then the pre-running deadline failing the job with its logs archived.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tuneplane_core::job::{EventSource, FailureReason, JobState, PendingReason};
use tuneplane_core::store::EventQuery;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_pods_show_no_matching_node_then_insufficient_gpu_with_the_kubernetes_message_then_fail_at_the_deadline()
 {
    let h = start(sim_config(TAINTED_H200, Duration::from_secs(600), None)).await;
    // Someone else's GPU pod waits for the same node; it is older than ours, so it is bound first.
    let other: Pod = serde_json::from_value(json!({
        "metadata": {"name": "other-team"},
        "spec": {"nodeSelector": {"tuneplane/gpu-series": "h200"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "1", "memory": "1Gi"}}}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(h.client.clone(), "default")
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    h.submit(&pre_running(gpu_job("stuck", "h200", 1, 8), 6))
        .await;

    let tainted = h
        .wait_pending(20, "stuck", PendingReason::NoMatchingNode)
        .await;
    assert_eq!(tainted.state, JobState::Admitted);
    let message = tainted.pending.map(|p| p.message).unwrap_or_default();
    assert!(
        message.starts_with("0/2 nodes are available") && message.contains("taint"),
        "{message}"
    );

    let nodes: Api<Node> = Api::all(h.client.clone());
    let keep_gpu_taint = json!({"spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}});
    nodes
        .patch(
            "h200-0",
            &PatchParams::default(),
            &Patch::Merge(&keep_gpu_taint),
        )
        .await
        .unwrap();
    let short = h
        .wait_pending(20, "stuck", PendingReason::InsufficientGpu)
        .await;
    let message = short.pending.map(|p| p.message).unwrap_or_default();
    assert!(message.contains("Insufficient nvidia.com/gpu"), "{message}");

    let failed = h.wait_state(20, "stuck", JobState::Failed).await;
    let failure = failed.failure.clone().expect("no failure");
    assert_eq!(failure.reason, FailureReason::PreRunningDeadlineExceeded);
    assert!(
        failure.message.contains("InsufficientGpu"),
        "{}",
        failure.message
    );
    assert_logs_archived(&h, &failed).await;
    h.wait_rayjob_gone(20, "tp-stuck").await;
    let events = h
        .jobs
        .list_events("stuck", &EventQuery::first(200))
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.source == EventSource::Kubernetes && e.reason == "FailedScheduling"),
        "Kubernetes warnings are copied: {:?}",
        events.items
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_image_shows_image_pull_then_fails_at_the_pre_running_deadline() {
    let mut config = sim_config(FLEET, Duration::from_secs(600), None);
    config.scenario.image_pull_failures = vec!["ghcr.io/acme/missing:1".into()];
    let h = start(config).await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    h.submit(&job(
        "badimg",
        vec![pool("main", Some("l40s"), 1, 4)],
        "ghcr.io/acme/missing:1",
        3,
    ))
    .await;
    let pulling = h.wait_pending(20, "badimg", PendingReason::ImagePull).await;
    let message = pulling.pending.map(|p| p.message).unwrap_or_default();
    assert!(
        message.contains("ErrImagePull") || message.contains("ImagePullBackOff"),
        "{message}"
    );
    let failed = h.wait_state(20, "badimg", JobState::Failed).await;
    let failure = failed.failure.clone().expect("no failure");
    assert_eq!(failure.reason, FailureReason::PreRunningDeadlineExceeded);
    assert!(failure.message.contains("ImagePull"), "{}", failure.message);
    assert_logs_archived(&h, &failed).await;
    h.wait_rayjob_gone(20, "tp-badimg").await;
}

/// A job waiting for nodes another tenant's job holds is told "another tenant's job", never that
/// job's id; a job of the holder's own tenant waiting for the same nodes sees the id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_job_never_reads_another_tenants_job_id() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    // Ids as the API mints them (`j-` + 20 hex), which is what the messages carry.
    let holder_id = "j-00000000000000000001";
    let mut holder = gpu_job(holder_id, "h200", 2, 8);
    holder.tenant = "globex".parse().unwrap();
    h.submit(&holder).await;
    h.wait_state(20, holder_id, JobState::Running).await;

    let ours = "j-00000000000000000002";
    h.submit(&gpu_job(ours, "h200", 1, 8)).await;
    let mut theirs = gpu_job("j-00000000000000000003", "h200", 1, 8);
    theirs.tenant = "globex".parse().unwrap();
    h.submit(&theirs).await;
    let waiting = |j: &tuneplane_core::job::JobRecord| {
        j.pending
            .as_ref()
            .is_some_and(|p| p.message.contains("held by"))
    };
    let acme = h
        .wait_job(20, ours, "told who holds the nodes", waiting)
        .await;
    let message = acme.pending.map(|p| p.message).unwrap_or_default();
    assert!(
        message.contains("another tenant's job") && !message.contains(holder_id),
        "{message}"
    );
    let globex = h
        .wait_job(20, &theirs.id, "told who holds the nodes", waiting)
        .await;
    let message = globex.pending.map(|p| p.message).unwrap_or_default();
    assert!(message.contains(holder_id), "{message}");
    // Nor do the events (a pending reason is also an event).
    let events = h
        .jobs
        .list_events(ours, &EventQuery::first(200))
        .await
        .unwrap();
    assert!(
        events.items.iter().all(|e| !e.message.contains(holder_id)),
        "{:?}",
        events.items
    );
}
