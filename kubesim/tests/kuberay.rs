//! Scenario tests of the KubeRay simulation through a partial typed RayJob: the deployment status
//! sequence, the RayCluster and its pods, the submitter Job, TTL shutdown, deadlines, failures,
//! invalid RayJobs and deletion.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use futures_util::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use tuneplane_kubesim::annotations;

fn raycluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ray.io", "v1", "RayCluster"),
        "rayclusters",
    )
}

fn with_annotations(mut rj: RayJob, pairs: &[(&str, &str)]) -> RayJob {
    rj.metadata.annotations = Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    rj
}

async fn wait_deployment(api: &Api<RayJob>, name: &str, want: &str) -> RayJob {
    let what = format!("RayJob {name} {want}");
    wait_for(20, &what, || {
        let api = api.clone();
        let (name, want) = (name.to_string(), want.to_string());
        async move {
            api.get(&name)
                .await
                .ok()
                .filter(|rj| deployment(rj) == want)
        }
    })
    .await
}

/// Creates `rj` to run for a minute and waits until it is Running.
async fn create_running(api: &Api<RayJob>, rj: RayJob) -> RayJob {
    let name = rj.metadata.name.clone().unwrap_or_default();
    let rj = with_annotations(rj, &[(annotations::RUN_SECONDS, "60")]);
    api.create(&PostParams::default(), &rj).await.unwrap();
    wait_deployment(api, &name, "Running").await
}

#[tokio::test]
async fn rayjob_goes_initializing_running_complete_and_its_cluster_is_deleted_after_ttl() {
    let (_sim, client) = start(fast_config()).await;
    let rayjobs = rayjobs(&client);
    let mut stream = rayjobs
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();
    let rj = with_annotations(
        rayjob("tp-abc123", "h200", 8, 1),
        &[
            (annotations::RUN_SECONDS, "0.3"),
            (annotations::LOG, "epoch 1 done"),
        ],
    );
    rayjobs.create(&PostParams::default(), &rj).await.unwrap();

    let mut sequence: Vec<String> = Vec::new();
    let mut cluster_name = String::new();
    let watched = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(Ok(ev)) = stream.next().await {
            if let WatchEvent::Added(rj) | WatchEvent::Modified(rj) = ev {
                let d = deployment(&rj);
                if sequence.last() != Some(&d) {
                    sequence.push(d.clone());
                }
                if let Some(name) = rj.status.as_ref().and_then(|s| s.ray_cluster_name.clone()) {
                    cluster_name = name;
                }
                if d == "Complete" {
                    return rj;
                }
            }
        }
        panic!("watch ended before Complete: {sequence:?}");
    })
    .await
    .unwrap_or_else(|_| panic!("no Complete within 20s: {sequence:?}"));
    sequence.retain(|s| !s.is_empty());
    assert_eq!(sequence, ["Initializing", "Running", "Complete"]);
    assert_eq!(
        watched
            .status
            .as_ref()
            .and_then(|s| s.job_status.as_deref()),
        Some("SUCCEEDED")
    );
    assert!(cluster_name.starts_with("tp-abc123-"));

    // The submitter Job is named like the RayJob and carries the driver's log.
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let job = jobs.get("tp-abc123").await.unwrap();
    assert_eq!(
        job.metadata
            .owner_references
            .unwrap_or_default()
            .first()
            .map(|o| o.kind.as_str()),
        Some("RayJob")
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert_eq!(submitter_log(&pods, "tp-abc123").await, "epoch 1 done\n");

    // TTL 1s: the RayCluster and its pods go, the RayJob stays.
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &raycluster_resource());
    wait_for(10, "RayCluster deleted after TTL", || {
        let clusters = clusters.clone();
        let name = cluster_name.clone();
        async move { clusters.get(&name).await.is_err().then_some(()) }
    })
    .await;
    let ray_pods = pods
        .list(&ListParams::default().labels(&format!("ray.io/cluster={cluster_name}")))
        .await
        .unwrap();
    assert!(ray_pods.items.is_empty());
    assert!(rayjobs.get("tp-abc123").await.is_ok());
    let events: Api<Event> = Api::namespaced(client, "default");
    let about = events
        .list(
            &ListParams::default()
                .fields("involvedObject.name=tp-abc123,involvedObject.kind=RayJob"),
        )
        .await
        .unwrap();
    let reasons: Vec<String> = about.items.into_iter().filter_map(|e| e.reason).collect();
    for want in [
        "CreatedRayCluster",
        "CreatedRayJobSubmitter",
        "DeletedRayCluster",
    ] {
        assert!(
            reasons.iter().any(|r| r == want),
            "missing {want} in {reasons:?}"
        );
    }
}

#[tokio::test]
async fn raycluster_pods_carry_ray_labels_owner_selector_and_resources() {
    let (_sim, client) = start(fast_config()).await;
    let rayjobs = rayjobs(&client);
    let running = create_running(&rayjobs, rayjob("tp-pods", "l40s", 4, 1)).await;
    let cluster = running
        .status
        .and_then(|s| s.ray_cluster_name)
        .unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let ray_pods = pods
        .list(&ListParams::default().labels(&format!("ray.io/cluster={cluster}")))
        .await
        .unwrap()
        .items;
    assert_eq!(ray_pods.len(), 2);
    let mut types: Vec<String> = ray_pods
        .iter()
        .filter_map(|p| p.metadata.labels.as_ref()?.get("ray.io/node-type").cloned())
        .collect();
    types.sort();
    assert_eq!(types, ["head", "worker"]);
    for p in &ray_pods {
        let spec = p.spec.clone().unwrap_or_default();
        assert!(
            spec.node_name
                .as_deref()
                .is_some_and(|n| n.starts_with("l40s-"))
        );
        assert_eq!(
            spec.node_selector
                .and_then(|s| s.get("tuneplane/gpu-series").cloned())
                .as_deref(),
            Some("l40s")
        );
        let limits = spec.containers[0]
            .resources
            .clone()
            .and_then(|r| r.limits)
            .unwrap_or_default();
        assert_eq!(
            limits.get("nvidia.com/gpu").map(|q| q.0.as_str()),
            Some("4")
        );
        let owner = p.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(
            owner.first().map(|o| (o.kind.as_str(), o.name.as_str())),
            Some(("RayCluster", cluster.as_str()))
        );
        assert_eq!(phase(p), "Running");
    }
}

#[tokio::test]
async fn rayjob_waits_in_initializing_while_a_pod_cannot_be_scheduled() {
    let (_sim, client) = start(fast_config()).await;
    let rayjobs = rayjobs(&client);
    // Two workers + head need 3 free h200 nodes; the fleet has 2.
    rayjobs
        .create(&PostParams::default(), &rayjob("tp-wait", "h200", 8, 2))
        .await
        .unwrap();
    wait_deployment(&rayjobs, "tp-wait", "Initializing").await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    wait_for(10, "FailedScheduling on a ray pod", || {
        let events = events.clone();
        async move {
            let list = events
                .list(&ListParams::default().fields("reason=FailedScheduling"))
                .await
                .ok()?;
            list.items.into_iter().find(|e| {
                e.message
                    .as_deref()
                    .is_some_and(|m| m.contains("Insufficient nvidia.com/gpu"))
            })
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let still = rayjobs.get("tp-wait").await.unwrap();
    assert_eq!(deployment(&still), "Initializing");
}

#[tokio::test]
async fn failing_entrypoint_fails_the_rayjob_with_failed_job_status() {
    let (_sim, client) = start(fast_config()).await;
    let rayjobs = rayjobs(&client);
    let rj = with_annotations(
        rayjob("tp-fail", "h200", 8, 0),
        &[
            (annotations::RUN_SECONDS, "0.2"),
            (annotations::EXIT_CODE, "1"),
        ],
    );
    rayjobs.create(&PostParams::default(), &rj).await.unwrap();
    let failed = wait_deployment(&rayjobs, "tp-fail", "Failed").await;
    let status = failed.status.unwrap_or_default();
    assert_eq!(status.job_status.as_deref(), Some("FAILED"));
    assert_eq!(status.reason.as_deref(), Some("AppFailed"));
    assert!(status.end_time.is_some());
}

#[tokio::test]
async fn active_deadline_fails_the_rayjob_with_deadline_exceeded() {
    let (_sim, client) = start(fast_config()).await;
    let rayjobs = rayjobs(&client);
    let mut rj = with_annotations(
        rayjob("tp-late", "h200", 8, 0),
        &[(annotations::RUN_SECONDS, "60")],
    );
    rj.spec.active_deadline_seconds = Some(1);
    rayjobs.create(&PostParams::default(), &rj).await.unwrap();
    let failed = wait_deployment(&rayjobs, "tp-late", "Failed").await;
    let status = failed.status.unwrap_or_default();
    assert_eq!(status.reason.as_deref(), Some("DeadlineExceeded"));
    assert!(
        status
            .message
            .unwrap_or_default()
            .contains("ActiveDeadlineSeconds: 1")
    );
}

#[tokio::test]
async fn invalid_rayjob_gets_only_a_warning_event_and_an_empty_status() {
    let (_sim, client) = start(fast_config()).await;
    let rayjobs = rayjobs(&client);
    let mut rj = rayjob("tp-invalid", "h200", 8, 0);
    rj.spec.active_deadline_seconds = Some(0);
    rayjobs.create(&PostParams::default(), &rj).await.unwrap();
    let events: Api<Event> = Api::namespaced(client, "default");
    let warning = wait_for(10, "InvalidRayJobSpec event", || {
        let events = events.clone();
        async move {
            let list = events
                .list(
                    &ListParams::default()
                        .fields("involvedObject.name=tp-invalid,involvedObject.kind=RayJob"),
                )
                .await
                .ok()?;
            list.items.into_iter().next()
        }
    })
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(warning.reason.as_deref(), Some("InvalidRayJobSpec"));
    assert!(
        warning
            .message
            .unwrap_or_default()
            .contains("activeDeadlineSeconds must be a positive integer")
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let still = rayjobs.get("tp-invalid").await.unwrap();
    assert!(still.status.is_none() || deployment(&still).is_empty());
}

#[tokio::test]
async fn deleting_a_rayjob_removes_its_finalizer_cluster_job_and_pods() {
    let (_sim, client) = start(fast_config()).await;
    let rayjobs = rayjobs(&client);
    let running = create_running(&rayjobs, rayjob("tp-del", "h200", 8, 0)).await;
    assert!(
        running
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == "ray.io/rayjob-finalizer")
    );
    rayjobs
        .delete("tp-del", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(10, "RayJob gone", || {
        let rayjobs = rayjobs.clone();
        async move { rayjobs.get("tp-del").await.is_err().then_some(()) }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let left = pods.list(&ListParams::default()).await.unwrap();
    assert!(
        left.items.is_empty(),
        "pods left: {:?}",
        left.items
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let jobs: Api<Job> = Api::namespaced(client, "default");
    assert!(jobs.get("tp-del").await.is_err());
}
