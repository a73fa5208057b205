//! Scenario tests of the scheduler and kubelet simulation: placement by series, the real
//! `FailedScheduling` message, image pull failures, crashes, deadlines, NotReady nodes and logs.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use futures_util::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams, LogParams, PostParams};

async fn events_for(client: &kube::Client, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

async fn wait_phase(pods: &Api<Pod>, name: &str, want: &str) -> Pod {
    let what = format!("pod {name} in phase {want}");
    wait_for(15, &what, || async move {
        let p = pods.get(name).await.ok()?;
        (phase(&p) == want).then_some(p)
    })
    .await
}

#[tokio::test]
async fn gpu_pod_that_fits_is_scheduled_on_a_node_of_its_series_and_runs() {
    let (_sim, client) = start(fast_config()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("train", "ghcr.io/acme/train:1", 8, Some("l40s")),
    )
    .await
    .unwrap();
    let p = pods
        .create(
            &PostParams::default(),
            &pod("train-h", "ghcr.io/acme/train:1", 8, Some("h200")),
        )
        .await
        .unwrap();
    assert!(p.spec.and_then(|s| s.node_name).is_none());
    let running = wait_phase(&pods, "train-h", "Running").await;
    let node = running.spec.and_then(|s| s.node_name).unwrap_or_default();
    assert!(node.starts_with("h200-"), "scheduled on {node}");
    let statuses = running
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default();
    assert!(statuses.iter().all(|c| c.ready));
    let reasons: Vec<String> = events_for(&client, "train-h")
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for r in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(reasons.iter().any(|x| x == r), "missing {r} in {reasons:?}");
    }
}

#[tokio::test]
async fn gpu_pod_that_does_not_fit_gets_the_real_failed_scheduling_message() {
    let (_sim, client) = start(fast_config()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("too-big", "ghcr.io/acme/train:1", 16, Some("h200")),
    )
    .await
    .unwrap();
    // kube-scheduler 1.34's composition: "<count> <reason>" entries sorted as strings, then the
    // PostFilter plugins (DynamicResources, DefaultPreemption: 16 GPUs exceed every node's
    // allocatable, so preemption cannot help anywhere).
    let expected = "0/6 nodes are available: 1 node(s) were unschedulable, 2 Insufficient nvidia.com/gpu, 3 node(s) didn't match Pod's node affinity/selector. no new claims to deallocate, preemption: 0/6 nodes are available: 6 Preemption is not helpful for scheduling.";
    let event = wait_for(10, "FailedScheduling event", || {
        let client = client.clone();
        async move {
            events_for(&client, "too-big")
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
        }
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.message.as_deref(), Some(expected));
    // Like kube-scheduler (events.k8s.io/v1): reportingComponent, no core/v1 source.
    assert_eq!(
        event.reporting_component.as_deref(),
        Some("default-scheduler")
    );
    assert!(event.source.and_then(|s| s.component).is_none());
    let p = pods.get("too-big").await.unwrap();
    let cond = p
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled");
    assert_eq!(
        cond.as_ref()
            .map(|c| (c.status.as_str(), c.reason.as_deref())),
        Some(("False", Some("Unschedulable")))
    );
}

#[tokio::test]
async fn bad_image_gets_image_pull_events_and_backoff() {
    let mut config = fast_config();
    config.scenario.image_pull_failures = vec!["ghcr.io/acme/missing:1".into()];
    let (_sim, client) = start(config).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("pull", "ghcr.io/acme/missing:1", 0, None),
    )
    .await
    .unwrap();
    let p = wait_for(10, "ImagePullBackOff", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("pull").await.ok()?;
            (waiting_reason(&p)? == "ImagePullBackOff").then_some(p)
        }
    })
    .await;
    assert_eq!(phase(&p), "Pending");
    let events = events_for(&client, "pull").await;
    let has = |reason: &str, text: &str| {
        events.iter().any(|e| {
            e.reason.as_deref() == Some(reason)
                && e.message.as_deref().is_some_and(|m| m.contains(text))
        })
    };
    assert!(has("Failed", "Error: ErrImagePull"));
    assert!(has(
        "Failed",
        "Failed to pull image \"ghcr.io/acme/missing:1\""
    ));
    assert!(has(
        "BackOff",
        "Back-off pulling image \"ghcr.io/acme/missing:1\""
    ));
    assert!(has("Failed", "Error: ImagePullBackOff"));
}

#[tokio::test]
async fn crashing_pods_fail_or_loop_by_restart_policy() {
    let mut config = fast_config();
    config.scenario.crash_images = vec!["crash:1".into()];
    let (_sim, client) = start(config).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("once", "crash:1", 0, None))
        .await
        .unwrap();
    let failed = wait_phase(&pods, "once", "Failed").await;
    assert_eq!(exit_code(&failed), Some(1));

    let mut looping = pod("loop", "crash:1", 0, None);
    if let Some(s) = looping.spec.as_mut() {
        s.restart_policy = Some("Always".into());
    }
    pods.create(&PostParams::default(), &looping).await.unwrap();
    wait_for(10, "a restart", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("loop").await.ok()?;
            let c = p.status?.container_statuses?.into_iter().next()?;
            (c.restart_count >= 1).then_some(())
        }
    })
    .await;
    let events = events_for(&client, "loop").await;
    assert!(events.iter().any(|e| {
        e.reason.as_deref() == Some("BackOff")
            && e.message
                .as_deref()
                .is_some_and(|m| m.starts_with("Back-off restarting failed container main"))
    }));
}

#[tokio::test]
async fn annotated_pod_runs_writes_logs_and_succeeds() {
    let (_sim, client) = start(fast_config()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut p = pod("short", "busybox", 0, None);
    p.metadata.annotations = Some(
        [
            (
                tuneplane_kubesim::annotations::RUN_SECONDS.to_string(),
                "0.5".to_string(),
            ),
            (
                tuneplane_kubesim::annotations::LOG.to_string(),
                "line one\nline two".to_string(),
            ),
        ]
        .into(),
    );
    pods.create(&PostParams::default(), &p).await.unwrap();
    wait_phase(&pods, "short", "Running").await;
    // Follow the log while the container runs; the stream ends when it terminates.
    let stream = pods
        .log_stream(
            "short",
            &LogParams {
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    let lines: Vec<String> = tokio::time::timeout(
        Duration::from_secs(10),
        stream
            .lines()
            .filter_map(|l| async move { l.ok() })
            .collect(),
    )
    .await
    .unwrap_or_else(|_| panic!("log follow did not end with the container"));
    assert_eq!(lines, ["line one", "line two"]);
    wait_phase(&pods, "short", "Succeeded").await;
    let tail = pods
        .logs(
            "short",
            &LogParams {
                tail_lines: Some(1),
                ..LogParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(tail, "line two\n");
    let missing = pods
        .logs(
            "short",
            &LogParams {
                container: Some("nope".into()),
                ..LogParams::default()
            },
        )
        .await;
    assert!(matches!(missing, Err(kube::Error::Api(s)) if s.code == 400));
}

#[tokio::test]
async fn pod_past_its_active_deadline_fails() {
    let (_sim, client) = start(fast_config()).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut p = pod("slow", "busybox", 0, None);
    if let Some(s) = p.spec.as_mut() {
        s.active_deadline_seconds = Some(1);
    }
    pods.create(&PostParams::default(), &p).await.unwrap();
    let failed = wait_phase(&pods, "slow", "Failed").await;
    assert_eq!(
        failed.status.and_then(|s| s.reason).as_deref(),
        Some("DeadlineExceeded")
    );
}

#[tokio::test]
async fn not_ready_node_is_avoided_and_named_in_the_message() {
    let (sim, client) = start(fast_config()).await;
    sim.set_node_ready("h200-0", false).unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("a", "img", 8, Some("h200")))
        .await
        .unwrap();
    let running = wait_phase(&pods, "a", "Running").await;
    assert_eq!(
        running.spec.and_then(|s| s.node_name).as_deref(),
        Some("h200-1")
    );
    pods.create(&PostParams::default(), &pod("b", "img", 8, Some("h200")))
        .await
        .unwrap();
    let event = wait_for(10, "FailedScheduling for b", || {
        let client = client.clone();
        async move {
            events_for(&client, "b")
                .await
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
        }
    })
    .await;
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("1 node(s) had untolerated taint(s)"),
        "{message}"
    );
    assert!(
        message.contains("1 Insufficient nvidia.com/gpu"),
        "{message}"
    );
    // h200-1 could take b if a were preempted, but nothing has a lower priority.
    assert!(
        message.contains("1 No preemption victims found for incoming pod"),
        "{message}"
    );
    let node_events = events_for(&client, "h200-0").await;
    assert!(
        node_events
            .iter()
            .any(|e| e.reason.as_deref() == Some("NodeNotReady")
                && e.message.as_deref() == Some("Node h200-0 status is now: NodeNotReady"))
    );
}

#[tokio::test]
async fn events_older_than_the_event_ttl_are_deleted() {
    let config = tuneplane_kubesim::SimConfig {
        event_ttl: Duration::from_millis(200),
        ..fast_config()
    };
    let (_sim, client) = start(config).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("ev", "img", 0, None))
        .await
        .unwrap();
    wait_for(10, "events recorded", || {
        let client = client.clone();
        async move { (!events_for(&client, "ev").await.is_empty()).then_some(()) }
    })
    .await;
    wait_for(15, "events expired", || {
        let client = client.clone();
        async move { events_for(&client, "ev").await.is_empty().then_some(()) }
    })
    .await;
}
