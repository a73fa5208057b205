//! Orphan workloads, playground creation, pending reasons and TTL reclaim (pods named by the old
//! `pg-pg-` scheme included), and the startup error without KubeRay.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use tuneplane_core::render::{CapsuleRef, RenderSettings, render_rayjob};
use tuneplane_core::store::{PlaygroundRecord, PlaygroundState};
use tuneplane_reconciler::metrics::Metrics;
use tuneplane_reconciler::rayjob;
use tuneplane_reconciler::{Error, Reconciler};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_without_a_live_job_record_is_archived_and_deleted() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    // A RayJob TunePlane created for a job whose record no longer exists (e.g. a restored table).
    let ghost = gpu_job("ghost", "l40s", 1, 4);
    let capsule = CapsuleRef {
        sha256: SHA.into(),
        url: format!("https://x.example/c/{SHA}/capsule.zip"),
    };
    let rj =
        rayjob::from_rendered(render_rayjob(&ghost, &capsule, &RenderSettings::default()).unwrap());
    let api = h.rayjobs();
    api.create(&PostParams::default(), &rj).await.unwrap();
    wait_for(20, "ghost pods running", || async {
        let pods = h
            .pods()
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
    h.wait_rayjob_gone(20, "tp-ghost").await;
    let archive = h
        .blobs
        .get("logs/ghost/logs.tar.gz")
        .await
        .ok()
        .flatten()
        .expect("no archive");
    let entries = untar(&archive);
    assert!(
        entries.iter().any(|(p, _)| p.contains("-head/")),
        "{entries:?}"
    );
    // Counted once the delete call returns, which can be just after the RayJob is seen gone.
    wait_for(10, "orphan counted", || async {
        (tuneplane_testkit::metric(&ctx.metrics.render(), "tuneplane_orphans_deleted_total")
            == Some(1.0))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playground_pod_is_created_and_reclaimed_when_its_ttl_expires() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let now = tuneplane_core::clock::now_ms();
    let pg = PlaygroundRecord {
        id: "pg1".into(),
        tenant: "acme".parse().unwrap(),
        model: "Qwen/Qwen3-0.6B".into(),
        series: "l40s".into(),
        gpus: 1,
        pod_name: None,
        created_at_ms: now,
        expires_at_ms: now + 2_500,
        version: 0,
        pod_namespace: None,
        status: None,
        node: None,
        pod_ip: None,
        server_key: None,
        admitted_at_ms: None,
        ended_at_ms: None,
    };
    h.jobs.put_playground(&pg).await.unwrap();
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    let pods = h.pods();
    let pod = wait_for(20, "playground pod", || async {
        pods.get_opt("pg-pg1").await.ok().flatten()
    })
    .await;
    let spec = serde_json::to_value(pod.spec.unwrap_or_default()).unwrap_or_default();
    assert_eq!(spec["nodeSelector"]["tuneplane/gpu-series"], "l40s");
    // The record learns its pod name right after the create, then that the pod runs.
    wait_for(20, "playground record with its pod", || async {
        let record = h.jobs.get_playground("pg1").await.ok().flatten()?;
        (record.pod_name.as_deref() == Some("pg-pg1")
            && record.pod_namespace.as_deref() == Some("tuneplane-jobs"))
        .then_some(())
    })
    .await;
    wait_for(20, "playground reclaimed", || async {
        reclaimed(&h, "pg1", "pg-pg1").await.then_some(())
    })
    .await;
    // Its retired record stays for usage: admitted before it was reclaimed, at or after its TTL.
    let retired = h
        .jobs
        .list_retired_playgrounds(&"acme".parse().unwrap())
        .await
        .unwrap();
    assert_eq!(retired.len(), 1, "{retired:?}");
    let (admitted, ended) = (
        retired[0].admitted_at_ms.unwrap(),
        retired[0].ended_at_ms.unwrap(),
    );
    assert!(admitted >= now && admitted < ended, "{admitted} .. {ended}");
    assert!(
        ended >= pg.expires_at_ms,
        "reclaimed at {ended}, TTL {}",
        pg.expires_at_ms
    );
    let slices = tuneplane_core::usage::playground_slices(&retired[0], 0, i64::MAX, ended);
    let held: f64 = slices.iter().map(|s| s.gpu_seconds).sum();
    assert!(
        (held - (ended - admitted) as f64 / 1000.0).abs() < 1e-6,
        "{slices:?}"
    );
}

/// Whether playground `id` is reclaimed: its pod `pod` and its record are gone.
async fn reclaimed(h: &Harness, id: &str, pod: &str) -> bool {
    let gone = h.pods().get_opt(pod).await.ok().flatten().is_none();
    gone && h.jobs.get_playground(id).await.ok().flatten().is_none()
}

/// A playground on `series` with `gpus`, living `ttl_ms`.
fn playground(id: &str, series: &str, gpus: u32, ttl_ms: i64) -> PlaygroundRecord {
    let now = tuneplane_core::clock::now_ms();
    PlaygroundRecord {
        id: id.into(),
        tenant: "acme".parse().unwrap(),
        model: "Qwen/Qwen3-0.6B".into(),
        series: series.into(),
        gpus,
        pod_name: None,
        created_at_ms: now,
        expires_at_ms: now + ttl_ms,
        version: 0,
        pod_namespace: None,
        status: None,
        node: None,
        pod_ip: None,
        server_key: None,
        admitted_at_ms: None,
        ended_at_ms: None,
    }
}

async fn wait_playground(
    h: &Harness,
    id: &str,
    what: &str,
    check: impl Fn(&PlaygroundRecord) -> bool,
) -> PlaygroundRecord {
    wait_for(30, &format!("playground {id} {what}"), || async {
        h.jobs
            .get_playground(id)
            .await
            .ok()
            .flatten()
            .filter(|p| check(p))
    })
    .await
}

/// Moves playground `id`'s TTL to now, as `DELETE /v1/playgrounds/{id}` does (retrying the
/// version conflicts a concurrent reconciler write causes).
async fn expire_now(h: &Harness, id: &str) {
    for _ in 0..20 {
        let mut pg = h
            .jobs
            .get_playground(id)
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("playground {id} missing"));
        pg.expires_at_ms = tuneplane_core::clock::now_ms();
        if h.jobs.put_playground(&pg).await.is_ok() {
            return;
        }
    }
    panic!("playground {id} kept changing");
}

fn state_reason(p: &PlaygroundRecord) -> (Option<PlaygroundState>, Option<String>) {
    let s = p.status.as_ref();
    (s.map(|s| s.state), s.and_then(|s| s.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_playground_that_does_not_fit_waits_queued_with_the_planners_reason_and_no_pod() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    // The one l40s node has 4 GPUs: the first playground takes them all.
    let hold = playground("pg-hold", "l40s", 4, 600_000);
    let wait = playground("pg-wait", "l40s", 1, 600_000);
    h.jobs.put_playground(&hold).await.unwrap();
    let (_task, ctx) = h.reconciler(test_config("r1")).await;
    let running = wait_playground(&h, "pg-hold", "running", |p| {
        state_reason(p).0 == Some(PlaygroundState::Running)
    })
    .await;
    // Ids carry the prefix: the pod is named like the id, not pg-pg-hold; admission planned
    // its node and the pod runs there.
    assert_eq!(running.pod_name.as_deref(), Some("pg-hold"));
    assert_eq!(running.node.as_deref(), Some("l40s-0"));
    let pod = h.pods().get("pg-hold").await.unwrap();
    assert_eq!(
        pod.spec.and_then(|s| s.node_name).as_deref(),
        Some("l40s-0")
    );
    h.jobs.put_playground(&wait).await.unwrap();
    let queued = wait_playground(&h, "pg-wait", "queued for GPUs", |p| {
        state_reason(p)
            == (
                Some(PlaygroundState::Queued),
                Some("InsufficientGpu".into()),
            )
    })
    .await;
    let status = queued.status.clone().expect("no status");
    assert_eq!(
        status.message, "needs 1 node(s) with 1 free l40s GPUs, 0 available",
        "the planner's reason, without the stand-in job's pool name"
    );
    // Queued holds nothing: no pod, no node.
    assert!(h.pods().get_opt("pg-wait").await.unwrap().is_none());
    assert_eq!(queued.node, None);
    // Passes that see the same reason write nothing.
    let passes = ctx.metrics.passes();
    wait_for(30, "three more passes", || async {
        (ctx.metrics.passes() >= passes + 3).then_some(())
    })
    .await;
    let again = h
        .jobs
        .get_playground("pg-wait")
        .await
        .ok()
        .flatten()
        .expect("pg-wait missing");
    assert_eq!(again.version, queued.version, "rewritten without a change");
    assert_eq!(again.status, queued.status);
    // Freeing the GPUs (deleting the first playground) admits it and it runs; the record follows.
    expire_now(&h, "pg-hold").await;
    wait_playground(&h, "pg-wait", "running once GPUs are free", |p| {
        state_reason(p) == (Some(PlaygroundState::Running), None)
    })
    .await;
    wait_for(30, "pg-hold reclaimed", || async {
        reclaimed(&h, "pg-hold", "pg-hold").await.then_some(())
    })
    .await;
}

/// The case: tenant acme's quota is 8 h200 GPUs. Three 8-GPU playgrounds: one runs, the
/// others wait with `QuotaExceeded`; an 8-GPU job waits too while the playground holds the
/// quota, though the second h200 node is idle; another tenant's job takes that node. Deleting the
/// running playground lets the next in line (the older playground) run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn playgrounds_count_against_the_quota_and_wait_like_jobs() {
    use tuneplane_core::job::{JobState, PendingReason};
    use tuneplane_core::quota::TenantQuota;
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let mut quota = TenantQuota::unlimited(&"acme".parse().unwrap());
    quota.set_gpu_limit("h200", 8, false);
    h.jobs.put_quota(&quota).await.unwrap();
    let ids = ["pg-q1", "pg-q2", "pg-q3"];
    for (i, id) in ids.iter().enumerate() {
        let mut pg = playground(id, "h200", 8, 600_000);
        pg.created_at_ms += i as i64; // a definite order
        h.jobs.put_playground(&pg).await.unwrap();
    }
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    wait_playground(&h, "pg-q1", "running", |p| {
        state_reason(p).0 == Some(PlaygroundState::Running)
    })
    .await;
    for id in &ids[1..] {
        let waiting = wait_playground(&h, id, "queued by the quota", |p| {
            state_reason(p) == (Some(PlaygroundState::Queued), Some("QuotaExceeded".into()))
        })
        .await;
        let message = waiting.status.map(|s| s.message).unwrap_or_default();
        assert_eq!(
            message, "tenant acme uses 8 of 8 h200 GPUs; this playground needs 8",
            "{id}"
        );
        assert!(
            h.pods().get_opt(id).await.unwrap().is_none(),
            "{id} has a pod"
        );
    }
    // A job of the same tenant waits behind the quota the playground holds ...
    let mut mine = finishing(pre_running(gpu_job("j-acme", "h200", 1, 8), 600));
    mine.tenant = "acme".parse().unwrap();
    h.submit(&mine).await;
    // ... while another tenant's job takes the idle h200 node.
    let mut theirs = finishing(pre_running(gpu_job("j-other", "h200", 1, 8), 600));
    theirs.tenant = "globex".parse().unwrap();
    h.submit(&theirs).await;
    wait_for(
        30,
        "acme's job held by its quota, globex's admitted",
        || async {
            let mine = h.job("j-acme").await;
            let theirs = h.job("j-other").await;
            let held = mine.state == JobState::Queued
                && mine
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.reason == PendingReason::QuotaExceeded);
            (held && theirs.state != JobState::Queued).then_some(())
        },
    )
    .await;
    // Deleting the running playground frees the quota: the oldest waiting one (pg-q2) is next.
    expire_now(&h, "pg-q1").await;
    wait_playground(&h, "pg-q2", "admitted once the quota frees", |p| {
        p.node.is_some()
    })
    .await;
    let q3 = h.jobs.get_playground("pg-q3").await.unwrap().unwrap();
    assert_eq!(q3.node, None, "only one 8-GPU playground fits the quota");
    assert_eq!(h.job("j-acme").await.state, JobState::Queued);
}

/// A playground's recorded address goes as soon as its pod stops serving: while the pod is being
/// deleted (held here by a finalizer) the record has no `pod_ip` and does not read Running, so
/// the API's proxy sends no prompt and no server key to an address another pod may be given.
/// Once the pod is gone a new one is created and its own address recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_playgrounds_address_is_forgotten_once_its_pod_is_being_deleted() {
    use kube::api::{DeleteParams, Patch, PatchParams};
    // Real pods on the real tier: a simulated pod has no address (nothing may dial it).
    let h = start_executing(sim_config(FLEET, Duration::from_secs(600), None)).await;
    h.jobs
        .put_playground(&playground("pg-ip", "l40s", 1, 600_000))
        .await
        .unwrap();
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    let serving = wait_playground(&h, "pg-ip", "running with its address", |p| {
        state_reason(p).0 == Some(PlaygroundState::Running) && p.pod_ip.is_some()
    })
    .await;
    let pods = h.pods();
    let name = serving.pod_name.clone().expect("pod name");
    let hold = serde_json::json!({"metadata": {"finalizers": ["tuneplane.test/hold"]}});
    pods.patch(&name, &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .unwrap();
    pods.delete(&name, &DeleteParams::default()).await.unwrap();
    let deleting =
        wait_playground(&h, "pg-ip", "without its address", |p| p.pod_ip.is_none()).await;
    assert_ne!(
        state_reason(&deleting).0,
        Some(PlaygroundState::Running),
        "{deleting:?}"
    );
    let release = serde_json::json!({"metadata": {"finalizers": null}});
    pods.patch(&name, &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    let again = wait_playground(&h, "pg-ip", "running again in a new pod", |p| {
        state_reason(p).0 == Some(PlaygroundState::Running) && p.pod_ip.is_some()
    })
    .await;
    let pod = pods.get(&name).await.unwrap();
    assert_eq!(
        again.pod_ip,
        pod.status.and_then(|s| s.pod_ip),
        "the new pod's own address"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_playground_of_the_old_naming_is_followed_and_reclaimed_not_duplicated() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let pods = h.pods();
    // Two records as the previous version left them: one whose `pg-pg-` pod it recorded, one
    // whose pod it created but never recorded (a crash between the create and the write).
    let settings = RenderSettings::default();
    let mut recorded = playground("pg-old1", "h200", 1, 600_000);
    let unrecorded = playground("pg-old2", "h200", 1, 600_000);
    for pg in [&recorded, &unrecorded] {
        let name = tuneplane_core::render::playground::legacy_playground_name(&pg.id);
        let mut as_old = pg.clone();
        as_old.pod_name = Some(name);
        let value = tuneplane_core::render::render_playground(&as_old, "tuneplane-jobs", &settings);
        let pod: Pod = serde_json::from_value(value).unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    recorded.pod_name = Some("pg-pg-old1".into());
    for pg in [&recorded, &unrecorded] {
        h.jobs.put_playground(pg).await.unwrap();
    }
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    for id in ["pg-old1", "pg-old2"] {
        let seen = wait_playground(&h, id, "running in its old pod", |p| {
            state_reason(p).0 == Some(PlaygroundState::Running)
        })
        .await;
        assert_eq!(seen.pod_name, Some(format!("pg-{id}")));
    }
    // No pod under the new naming was created beside them.
    for id in ["pg-old1", "pg-old2"] {
        assert!(
            pods.get_opt(id).await.ok().flatten().is_none(),
            "a second pod {id} was created"
        );
    }
    // Deleting (expiring) them removes the old pods and the records.
    for id in ["pg-old1", "pg-old2"] {
        expire_now(&h, id).await;
    }
    wait_for(30, "old playgrounds reclaimed", || async {
        for id in ["pg-old1", "pg-old2"] {
            if !reclaimed(&h, id, &format!("pg-{id}")).await {
                return None;
            }
        }
        Some(())
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
    let err = outcome.err().expect("started without the CRD");
    assert!(matches!(err, Error::MissingCrd(_)), "{err}");
    assert!(err.to_string().contains("KubeRay operator v1.4"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_healthz_are_served() {
    let metrics = std::sync::Arc::new(Metrics::default());
    metrics.heartbeat(tuneplane_core::clock::now_ms());
    metrics.inc_admissions();
    metrics.observe_pass(Duration::from_millis(3), true);
    metrics.observe_pass(Duration::from_secs(2), true);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = tuneplane_reconciler::metrics::router(metrics, None);
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let client = reqwest::Client::new();
    let body = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap();
    let text = body.text().await.unwrap_or_default();
    // A standard Prometheus text parser reads the exposition (counters come out untyped: it
    // does not know OpenMetrics' `_total` suffix, which Prometheus itself does).
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let value = |name: &str| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name)
            .map(|s| s.value.clone())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    let number = |name: &str| match value(name) {
        prometheus_parse::Value::Counter(n)
        | prometheus_parse::Value::Gauge(n)
        | prometheus_parse::Value::Untyped(n) => n,
        other => panic!("{name} is {other:?}"),
    };
    assert_eq!(number("tuneplane_admissions_total"), 1.0);
    assert_eq!(number("tuneplane_queue_depth"), 0.0);
    assert_eq!(number("tuneplane_step_errors_total"), 0.0);
    assert_eq!(number("tuneplane_pass_duration_seconds_count"), 2.0);
    // Two passes, one of 3 ms and one of 2 s: a histogram with cumulative buckets.
    let prometheus_parse::Value::Histogram(buckets) = value("tuneplane_pass_duration_seconds")
    else {
        panic!("tuneplane_pass_duration_seconds is not a histogram:\n{text}");
    };
    let count_le = |le: f64| buckets.iter().find(|b| b.less_than == le).map(|b| b.count);
    assert_eq!(count_le(0.001), Some(0.0));
    assert_eq!(count_le(0.005), Some(1.0));
    assert_eq!(count_le(2.5), Some(2.0));
    assert_eq!(count_le(f64::INFINITY), Some(2.0));
    let health = client
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    server.abort();
}

/// Per-tenant metrics name tenants and their usage: an unauthenticated scrape (or one with
/// another token) gets every other family but none of `tuneplane_tenant_*`; a scrape with the
/// configured token gets them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_metrics_need_the_scrape_token() {
    let metrics = std::sync::Arc::new(Metrics::default());
    metrics.heartbeat(tuneplane_core::clock::now_ms());
    let usage = tuneplane_core::quota::TenantUsage {
        queued_jobs: 3,
        ..Default::default()
    };
    metrics.set_tenants(&[("team-secret".to_owned(), usage)].into());
    let token = "0123456789abcdef0123";
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = tuneplane_reconciler::metrics::router(metrics, Some(token));
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let scrape = |auth: Option<&str>| {
        let mut req = client.get(format!("http://{addr}/metrics"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        async move { req.send().await.unwrap().text().await.unwrap() }
    };
    for auth in [None, Some("Bearer wrong-token-wrong-token")] {
        let text = scrape(auth).await;
        assert!(text.contains("tuneplane_queue_depth"), "{text}");
        assert!(!text.contains("team-secret"), "{auth:?}: {text}");
        assert!(!text.contains("tuneplane_tenant_"), "{auth:?}: {text}");
    }
    let full = scrape(Some(&format!("Bearer {token}"))).await;
    assert!(
        full.contains("tuneplane_tenant_queued_jobs{tenant=\"team-secret\"} 3"),
        "{full}"
    );
    server.abort();
}

/// Deleting a RayJob deletes its Ray cluster, but the Ray pods stop within their grace (up to an
/// hour when a job saves a checkpoint on SIGTERM) and listen on Ray's ports until then: the job's
/// NetworkPolicy stays while any of them remains (one held here by a finalizer) and goes within a
/// pass of the last one. The namespace's shared egress policy was there before the workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ray_clusters_policy_stays_until_its_last_pod_is_gone() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use kube::api::{ListParams, Patch, PatchParams};
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    let (_task, _ctx) = h.reconciler(test_config("r1")).await;
    h.submit(&gpu_job("linger", "h200", 1, 8)).await;
    h.wait_state(30, "linger", tuneplane_core::job::JobState::Running)
        .await;
    let policies: kube::Api<NetworkPolicy> =
        kube::Api::namespaced(h.client.clone(), "tuneplane-jobs");
    for name in ["tp-linger", tuneplane_core::render::network::EGRESS_POLICY] {
        assert!(
            policies.get_opt(name).await.unwrap().is_some(),
            "policy {name}"
        );
    }
    let pods = h.pods();
    let label = format!("{}=linger", tuneplane_core::constants::JOB_ID_LABEL);
    let ray_pod = wait_for(30, "a Ray pod of the job", || async {
        let list = pods
            .list(&ListParams::default().labels(&label))
            .await
            .ok()?;
        list.items.into_iter().find_map(|p| p.metadata.name)
    })
    .await;
    let hold = serde_json::json!({"metadata": {"finalizers": ["tuneplane.test/hold"]}});
    pods.patch(&ray_pod, &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .unwrap();
    h.request_stop("linger").await;
    h.wait_state(30, "linger", tuneplane_core::job::JobState::Stopped)
        .await;
    wait_for(30, "the RayJob deleted", || async {
        h.rayjobs()
            .get_opt("tp-linger")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    wait_for(30, "the held pod terminating", || async {
        let p = pods.get_opt(&ray_pod).await.ok()??;
        p.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    // Several passes later the pod still stops, and its job's policy is still there.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(pods.get_opt(&ray_pod).await.unwrap().is_some());
    assert!(
        policies.get_opt("tp-linger").await.unwrap().is_some(),
        "the policy went before the last Ray pod"
    );
    let release = serde_json::json!({"metadata": {"finalizers": null}});
    pods.patch(&ray_pod, &PatchParams::default(), &Patch::Merge(&release))
        .await
        .unwrap();
    wait_for(30, "the policy deleted after the last pod", || async {
        policies
            .get_opt("tp-linger")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}
