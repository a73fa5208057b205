//! Orphan workloads, playground creation and TTL reclaim, and the startup error without KubeRay.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use tuneplane_core::render::{CapsuleRef, RenderSettings, render_rayjob};
use tuneplane_core::store::PlaygroundRecord;
use tuneplane_reconciler::metrics::Metrics;
use tuneplane_reconciler::rayjob::{self, RayJob};
use tuneplane_reconciler::{Error, Reconciler};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_without_a_live_job_record_is_archived_and_deleted() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    // A RayJob TunePlane created for a job whose record no longer exists (e.g. a restored table).
    let ghost = job(
        "ghost",
        vec![pool("main", Some("l40s"), 1, 4)],
        "ghcr.io/acme/train:1",
        60,
    );
    let capsule = CapsuleRef {
        sha256: SHA.into(),
        url: format!("https://x.example/c/{SHA}/capsule.zip"),
    };
    let value = render_rayjob(&ghost, &capsule, &RenderSettings::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let rj: RayJob = serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
    let api: Api<RayJob> =
        Api::namespaced_with(h.client.clone(), "tuneplane-jobs", &rayjob::resource());
    api.create(&PostParams::default(), &rj)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for(20, "ghost pods running", || async {
        let pods = Api::<Pod>::namespaced(h.client.clone(), "tuneplane-jobs")
            .list(&kube::api::ListParams::default().labels("tuneplane.io/job-id=ghost"))
            .await
            .ok()?;
        pods.items
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .then_some(())
    })
    .await;

    let (_task, ctx) = h.reconciler(test_config("r1")).await;
    wait_for(20, "orphan deleted", || async {
        api.get_opt("tp-ghost")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    let archive = h
        .blobs
        .get("logs/ghost/logs.tar.gz")
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no archive"));
    let entries = untar(&archive);
    assert!(
        entries.iter().any(|(p, _)| p.contains("-head/")),
        "{entries:?}"
    );
    assert!(
        ctx.metrics
            .render()
            .contains("tuneplane_orphans_deleted_total 1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playground_pod_is_created_and_reclaimed_when_its_ttl_expires() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let now = tuneplane_reconciler::now_ms();
    let pg = PlaygroundRecord {
        id: "pg1".into(),
        tenant: "acme".into(),
        model: "Qwen/Qwen3-0.6B".into(),
        series: "l40s".into(),
        gpus: 1,
        pod_name: None,
        created_at_ms: now,
        expires_at_ms: now + 2_500,
        version: 0,
        pod_namespace: None,
        status: None,
    };
    h.jobs
        .put_playground(&pg)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "tuneplane-jobs");
    let pod = wait_for(20, "playground pod", || async {
        pods.get_opt("pg-pg1").await.ok().flatten()
    })
    .await;
    let spec = serde_json::to_value(pod.spec.unwrap_or_default()).unwrap_or_default();
    assert_eq!(spec["nodeSelector"]["tuneplane/gpu-series"], "l40s");
    // The record learns its pod name right after the create.
    wait_for(20, "playground record with its pod", || async {
        let record = h.jobs.get_playground("pg1").await.ok().flatten()?;
        (record.pod_name.as_deref() == Some("pg-pg1")).then_some(())
    })
    .await;
    wait_for(20, "playground reclaimed", || async {
        let gone = pods.get_opt("pg-pg1").await.ok().flatten().is_none();
        let record = h.jobs.get_playground("pg1").await.ok().flatten();
        (gone && record.is_none()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_fails_clearly_when_the_rayjob_crd_is_missing() {
    kubesim_only!("the shared real cluster serves the KubeRay CRDs the other scenarios need");
    let mut config = sim_config(FLEET, Duration::from_secs(1), None);
    config.kuberay = false;
    let h = start(config).await;
    let outcome = Reconciler::new(
        test_config("r1"),
        h.client.clone(),
        h.jobs.clone(),
        h.blobs.clone(),
        std::sync::Arc::new(Metrics::default()),
    )
    .await;
    let err = outcome
        .err()
        .unwrap_or_else(|| panic!("started without the CRD"));
    assert!(matches!(err, Error::MissingCrd(_)), "{err}");
    assert!(err.to_string().contains("KubeRay operator v1.4"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_healthz_are_served() {
    let metrics = std::sync::Arc::new(Metrics::default());
    metrics.heartbeat(tuneplane_reconciler::now_ms());
    metrics.inc_admissions();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let router = tuneplane_reconciler::metrics::router(metrics);
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let client = reqwest::Client::new();
    let body = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let text = body.text().await.unwrap_or_default();
    assert!(
        text.contains("# TYPE tuneplane_admissions_total counter\ntuneplane_admissions_total 1"),
        "{text}"
    );
    assert!(text.contains("tuneplane_queue_depth 0"));
    let health = client
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(health.status().as_u16(), 200);
    server.abort();
}
