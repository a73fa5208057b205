//! The reconciler against kubesim with the AWS stores (DynamoDB + S3 on the local moto endpoint that
//! `scripts/with-moto.sh` starts). Fails, rather than skips, without `AWS_ENDPOINT_URL`; refuses any
//! endpoint that is not on the loopback address. Credentials and region are explicit, so the SDK
//! never probes the instance metadata service.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use tuneplane_core::job::{FailureReason, JobState};
use tuneplane_stores::aws::{dynamodb_client, s3_client};
use tuneplane_stores::{DynamoJobStore, S3BlobStore};

fn local_endpoint() -> String {
    let url = std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| {
        panic!("AWS_ENDPOINT_URL is not set: run `scripts/with-moto.sh cargo test -p tuneplane-reconciler` (scripts/test.sh does)")
    });
    let host = url.split("://").nth(1).unwrap_or_default();
    assert!(
        host.starts_with("127.0.0.1:") || host.starts_with("[::1]:"),
        "refusing non-local AWS_ENDPOINT_URL={url}"
    );
    url
}

fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        tuneplane_core::clock::now_ms()
    )
}

async fn aws_harness(config: tuneplane_kubesim::SimConfig) -> Harness {
    let sdk = moto_sdk(&local_endpoint()).load().await;
    let dynamo = dynamodb_client(&sdk, None);
    let table = unique("tp-recon");
    tuneplane_stores::dynamo::table::create_table(&dynamo, &table)
        .await
        .expect("table");
    let s3 = s3_client(&sdk, true);
    let bucket = unique("tp-recon");
    s3.create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("bucket");
    let jobs = Arc::new(DynamoJobStore::new(dynamo, table));
    let blobs = Arc::new(S3BlobStore::new(s3, bucket));
    with_stores(config, jobs, blobs, tempfile::tempdir().unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_to_the_end_with_dynamodb_records_and_s3_log_archives() {
    let h = aws_harness(running_for(Duration::from_millis(500))).await;
    let (_task, _ctx) = h.reconciler(test_config("aws")).await;
    let multi = vec![
        pool("main", Some("h200"), 2, 8),
        pool("eval", Some("l40s"), 1, 4),
    ];
    h.submit(&job("multi", multi, "ghcr.io/acme/train:1", 60))
        .await;
    h.submit(&cpu_job("cpu")).await;
    let mut stop = gpu_job("stopme", "h200", 1, 8);
    stop.spec.priority = -1;
    h.submit(&stop).await;

    for id in ["multi", "cpu"] {
        let done = h.wait_state(30, id, JobState::Succeeded).await;
        assert_logs_archived(&h, &done).await;
    }
    // The low-priority job waited for the gang job; stop it wherever it is now.
    h.request_stop("stopme").await;
    let stopped = h
        .wait_job(30, "stopme", "terminal", |j| j.is_terminal())
        .await;
    if stopped.state == JobState::Stopped {
        assert_eq!(
            stopped.failure.clone().map(|f| f.reason),
            Some(FailureReason::StopRequested)
        );
    }
    assert_logs_archived(&h, &stopped).await;
    let capacity = h.capacity().await;
    assert_eq!(capacity["series"]["h200"]["nodes"], 2);
    assert!(h.jobs.list_active().await.unwrap().is_empty());
}
