//! The whole flow, end to end: HTTP API → capsule in the blob store → record in the job store →
//! reconciler → kubesim in execution mode (pods really run here) → archived logs → terminal record →
//! workload deleted. Once on the embedded stores and once on DynamoDB + S3 through the local AWS
//! endpoint (`scripts/with-moto.sh` sets `AWS_ENDPOINT_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure with its location

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api as KubeApi, ListParams};
mod stack_support;

use stack_support::{archived_logs, events, stop, submit_dir, submit_example, wait_until};
use tuneplane::client::Api;
use tuneplane::dev::{Backend, Stack};
use tuneplane_core::job::{JobRecord, JobState};

/// Waits (120 s at most) for job `id` to end.
async fn terminal(api: &Api, id: &str) -> JobRecord {
    wait_until(api, id, 120, "terminal", |j| j.state.is_terminal()).await
}

/// Pods of the job left in the cluster (the workload is deleted after the terminal record).
async fn pods_left(stack: &Stack, id: &str) -> usize {
    let client = kube::Client::try_from(kube::Config::new(
        stack.sim.as_ref().unwrap().url().parse().unwrap(),
    ))
    .unwrap();
    let pods: KubeApi<Pod> = KubeApi::all(client);
    // Deletion follows the terminal record within a pass or two.
    for _ in 0..50 {
        let left = pods
            .list(&ListParams::default().labels(&format!("tuneplane.io/job-id={id}")))
            .await
            .unwrap()
            .items
            .len();
        if left == 0 {
            return 0;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pods.list(&ListParams::default().labels(&format!("tuneplane.io/job-id={id}")))
        .await
        .unwrap()
        .items
        .len()
}

async fn whole_flow(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (stack, api) = stack_support::start(backend, dir.path()).await;

    let hello = submit_example(&api, "hello-cpu").await;
    let ray = submit_example(&api, "ray-multipool").await;
    let bad = submit_example(&api, "bad-image").await;
    let sleeper_dir = dir.path().join("sleeper");
    std::fs::create_dir_all(&sleeper_dir).unwrap();
    std::fs::write(sleeper_dir.join("sleep.sh"), "echo sleeping; sleep 300\n").unwrap();
    let sleeper = submit_dir(&api, &sleeper_dir, "name: sleeper\nimage: python:3.12-slim\nentrypoint: bash sleep.sh\npools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 1, memory_gb: 1}]\n").await;

    // hello-cpu really ran; its output is in the archive, and its pod is gone.
    let job = terminal(&api, &hello.id).await;
    assert_eq!(job.state, JobState::Succeeded, "{job:?}");
    assert_eq!(
        job.logs_key.as_deref(),
        Some(format!("logs/{}/logs.tar.gz", hello.id).as_str())
    );
    let files = archived_logs(&api, &hello.id).await;
    assert!(
        files
            .iter()
            .any(|(_, t)| t.contains("*** hello from TunePlane ***")),
        "{files:?}"
    );
    assert_eq!(pods_left(&stack, &hello.id).await, 0);

    // ray-multipool: a head, a worker of the primary pool, a worker of the eval pool and the
    // submitter; the entrypoint's sibling import worked.
    let job = terminal(&api, &ray.id).await;
    assert_eq!(job.state, JobState::Succeeded, "{job:?}");
    let files = archived_logs(&api, &ray.id).await;
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        files
            .iter()
            .any(|(_, t)| t.contains("sibling import ok: model")),
        "{names:?}"
    );
    for part in ["head", "main", "eval", "submitter"] {
        assert!(
            names.iter().any(|n| n.contains(part)),
            "no {part} log in {names:?}"
        );
    }
    assert_eq!(pods_left(&stack, &ray.id).await, 0);

    // stop: the sleeper runs, is asked to stop, ends STOPPED.
    wait_until(&api, &sleeper.id, 120, "RUNNING", |j| {
        j.state == JobState::Running
    })
    .await;
    stop(&api, &sleeper.id).await;
    let job = terminal(&api, &sleeper.id).await;
    assert_eq!(job.state, JobState::Stopped, "{job:?}");
    assert!(
        archived_logs(&api, &sleeper.id)
            .await
            .iter()
            .any(|(_, t)| t.contains("sleeping"))
    );
    assert_eq!(pods_left(&stack, &sleeper.id).await, 0);

    // bad-image: pending on the image pull, then the pre-running deadline.
    let job = terminal(&api, &bad.id).await;
    assert_eq!(job.state, JobState::Failed, "{job:?}");
    assert_eq!(
        format!("{:?}", job.failure.as_ref().unwrap().reason),
        "PreRunningDeadlineExceeded"
    );
    let evs = events(&api, &bad.id).await;
    assert!(
        evs.iter()
            .any(|e| e.kind == "Warning" && e.message.contains("registry.invalid")),
        "{evs:#?}"
    );
    // In the order they happened: nothing about the workload before it was admitted, even
    // where Kubernetes dates an event by the whole second.
    let at = |reason: &str| evs.iter().position(|e| e.reason == reason);
    assert_eq!(at("Submitted"), Some(0), "{evs:#?}");
    let admitted = at("Admitted").expect("an Admitted event");
    assert!(
        evs.iter()
            .enumerate()
            .filter(|(_, e)| e.source == tuneplane_core::job::EventSource::Kubernetes)
            .all(|(i, _)| i > admitted),
        "{evs:#?}"
    );
    assert!(evs.windows(2).all(|w| w[0].at_ms <= w[1].at_ms), "{evs:#?}");
    // The platform's image-pull and failure events are warnings, the image pull told once.
    let platform = |reason: &str| {
        evs.iter()
            .filter(|e| {
                e.source == tuneplane_core::job::EventSource::Platform && e.reason == reason
            })
            .collect::<Vec<_>>()
    };
    let pulls = platform("ImagePull");
    assert_eq!(pulls.len(), 1, "{evs:#?}");
    assert_eq!(pulls[0].kind, "Warning");
    assert!(!pulls[0].message.contains("rpc error"), "{:?}", pulls[0]);
    assert!(
        platform("FAILED").iter().all(|e| e.kind == "Warning"),
        "{evs:#?}"
    );
    assert_eq!(platform("FAILED").len(), 1, "{evs:#?}");
    assert_eq!(pods_left(&stack, &bad.id).await, 0);

    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_flow_on_embedded_stores() {
    whole_flow(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_flow_on_the_local_aws_endpoint() {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect(
        "AWS_ENDPOINT_URL is not set: run through scripts/with-moto.sh (or scripts/test.sh)",
    );
    assert!(
        endpoint.starts_with("http://127.0.0.1:"),
        "refusing a non-loopback endpoint {endpoint}"
    );
    assert_eq!(
        std::env::var("AWS_EC2_METADATA_DISABLED").as_deref(),
        Ok("true")
    );
    let unique = format!("{}", std::process::id());
    whole_flow(Backend::Aws {
        table: format!("e2e-{unique}"),
        bucket: format!("e2e-{unique}"),
    })
    .await;
}

/// The dev stack holds the API and the reconciler in one process: every change the API accepts
/// wakes the pass loop, so a submission is decided at once, not at the next pass interval (a
/// minute here; no pod exists before the decision, so no watch event wakes the pass instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_accepted_change_wakes_the_dev_stacks_reconciler() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = stack_support::options(Backend::Embedded, &dir.path().join("data"));
    options.pass_interval = Duration::from_secs(60);
    let (stack, api) = stack_support::start_with(options).await;
    // The passes that the start's watch events woke are over before the submission.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let job = submit_example(&api, "hello-cpu").await;
    let id = job.id.to_string();
    wait_until(&api, &id, 20, "decided", |j| j.admitted_at_ms.is_some()).await;
    stack.shutdown().await;
}
