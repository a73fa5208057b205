//! The RayJob steps: `rayjob` (a two-pool job up to Running, then deleted, the agent pretending)
//! and `rayjob_success` (a job run to SUCCEEDED by real Ray on the real tier).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};
use tuneplane_core::job::JobRecord;
use tuneplane_core::render::{CapsuleRef, RenderSettings, render_rayjob};
use tuneplane_reconciler::rayjob::{self, RayJob};
use tuneplane_reconciler::status::{self, Observed};
use tuneplane_reconciler::watched_pod::WatchedPod;

use crate::common::*;
use crate::support::*;

fn deployment(rj: &RayJob) -> Value {
    let s = rj.status.clone().unwrap_or_default();
    json!({
        "jobDeploymentStatus": s.job_deployment_status,
        "jobStatus": s.job_status,
        "rayClusterName": s.ray_cluster_name.is_some(),
        "reason": s.reason,
    })
}

fn pod_view(p: &Pod, series: &BTreeMap<String, String>) -> Value {
    let spec = p.spec.clone().unwrap_or_default();
    let containers: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| json!({"name": c.name, "image": c.image, "resources": c.resources, "ports": c.ports.as_ref().map(|p| p.iter().map(|p| json!({"name": p.name, "containerPort": p.container_port})).collect::<Vec<_>>())}))
        .collect();
    let node = spec.node_name.clone().unwrap_or_default();
    json!({
        "name": p.name_any(),
        "labels": p.labels(),
        "annotations": p.annotations().iter().filter(|(k, _)| k.contains("tuneplane")).collect::<BTreeMap<_, _>>(),
        "ownerReferences": p.owner_references().iter().map(|o| json!({"kind": o.kind, "name": o.name, "controller": o.controller, "blockOwnerDeletion": o.block_owner_deletion})).collect::<Vec<_>>(),
        "nodeSelector": spec.node_selector,
        "tolerations": spec.tolerations,
        "restartPolicy": spec.restart_policy,
        "containers": containers,
        "initContainers": spec.init_containers.iter().flatten().map(|c| json!({"name": c.name, "image": c.image, "resources": c.resources})).collect::<Vec<_>>(),
        "node_series": series.get(&node),
        "phase": phase(p),
    })
}

async fn step_rayjob(h: &Harness, r: &mut Redactor) -> Value {
    let job = job(
        "g1",
        vec![
            pool("main", Some("h200"), 2, 8),
            pool("eval", Some("l40s"), 1, 4),
        ],
        "ghcr.io/acme/train:1",
        60,
    );
    let rendered = render_rayjob(&job, &capsule(), &RenderSettings::default()).expect("render");
    let typed: RayJob = rayjob::from_rendered(rendered);
    let api = h.rayjobs();
    let (statuses, watcher) = record(api.clone(), "tp-g1");
    let created = api.create(&create_params(), &typed).await.expect("create");
    r.object(&created.metadata);
    let pod_api = h.pods();
    let assessed: Mutex<Vec<Value>> = Mutex::default();
    let (assessed_ref, api_ref, pod_ref) = (&assessed, &api, &pod_api);
    let running = wait_for(60, "tp-g1 Running with its pods", || async move {
        let rj = api_ref.get("tp-g1").await.ok()?;
        let all = pod_ref
            .list(&ListParams::default().labels("tuneplane.io/job-id=g1"))
            .await
            .ok()?
            .items;
        let watched: Vec<WatchedPod> = all.iter().cloned().map(WatchedPod::from).collect();
        let refs: Vec<&WatchedPod> = watched.iter().collect();
        let events = events_of(h, "tp-g1").await;
        let warnings: Vec<&Event> = events
            .iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .collect();
        let o = status::assess_rayjob(&rj, &refs, &warnings);
        assessed_ref
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(json!({"state": observed(&o)["state"], "reason": observed(&o)["reason"]}));
        let deployed = rj
            .status
            .as_ref()
            .and_then(|s| s.job_deployment_status.as_deref())
            == Some("Running");
        let submitter = Api::<Job>::namespaced(h.client.clone(), NS)
            .get_opt("tp-g1")
            .await
            .ok()
            .flatten()
            .is_some();
        let pods_up = all.len() == 3 && all.iter().all(|p| phase(p) == "Running");
        (deployed && submitter && pods_up).then_some(rj)
    })
    .await;
    let assessed = dedup(assessed.into_inner().unwrap_or_else(|p| p.into_inner()));
    let status = running.status.clone().unwrap_or_default();
    let cluster_name = status.ray_cluster_name.clone().unwrap_or_default();
    r.generated(&cluster_name, "tp-g1-");
    // `jobId` is not in the reconciler's partial type.
    let gvk = GroupVersionKind::gvk("ray.io", "v1", "RayJob");
    let dynamic: Api<DynamicObject> =
        Api::namespaced_with(h.client.clone(), NS, &ApiResource::from_gvk(&gvk));
    let job_id = dynamic
        .get("tp-g1")
        .await
        .ok()
        .and_then(|d| d.data.pointer("/status/jobId")?.as_str().map(str::to_owned));
    if let Some(id) = &job_id {
        r.generated(id, "tp-g1-");
    }
    let series = node_series(h).await;
    redact_nodes(r, &series);

    let cluster = rayclusters(&h.client)
        .get(&cluster_name)
        .await
        .expect("the RayJob's RayCluster");
    r.object(&cluster.metadata);
    let cstatus = cluster.data.get("status").cloned().unwrap_or_default();
    let cluster_view = json!({
        "name": cluster.name_any(),
        "labels": cluster.labels(),
        "finalizers": cluster.finalizers(),
        "ownerReferences": cluster.owner_references().iter().map(|o| json!({"kind": o.kind, "name": o.name, "controller": o.controller, "blockOwnerDeletion": o.block_owner_deletion})).collect::<Vec<_>>(),
        "status": {
            "state": cstatus.get("state"),
            "desiredWorkerReplicas": cstatus.get("desiredWorkerReplicas"),
            "readyWorkerReplicas": cstatus.get("readyWorkerReplicas"),
            "availableWorkerReplicas": cstatus.get("availableWorkerReplicas"),
            "minWorkerReplicas": cstatus.get("minWorkerReplicas"),
            "maxWorkerReplicas": cstatus.get("maxWorkerReplicas"),
            "head_podName_set": cstatus.pointer("/head/podName").is_some(),
            "head_serviceName": cstatus.pointer("/head/serviceName"),
            "conditions": cstatus.get("conditions").and_then(Value::as_array).map(|a| a.iter().map(|c| json!({"type": c["type"], "status": c["status"], "reason": c["reason"]})).collect::<Vec<_>>()),
        },
    });
    let mut cluster_pods = pod_api
        .list(&ListParams::default().labels(&format!("ray.io/cluster={cluster_name}")))
        .await
        .expect("pods")
        .items;
    cluster_pods.sort_by_key(|p| {
        (
            p.labels().get("ray.io/node-type").cloned(),
            p.labels().get("ray.io/group").cloned(),
        )
    });
    for p in &cluster_pods {
        r.object(&p.metadata);
        if let Some(prefix) = p.name_any().strip_suffix(
            &p.name_any()
                .chars()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<String>(),
        ) && prefix.ends_with("-worker-")
        {
            r.generated(&p.name_any(), prefix);
        }
    }
    let nodes: BTreeSet<String> = cluster_pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    let submitter = Api::<Job>::namespaced(h.client.clone(), NS)
        .get("tp-g1")
        .await
        .expect("submitter");
    r.object(&submitter.metadata);
    let submitter_pods = wait_for(30, "the submitter's pod", || async {
        let list = pod_api
            .list(&ListParams::default().labels("job-name=tp-g1"))
            .await
            .ok()?
            .items;
        (!list.is_empty()).then_some(list)
    })
    .await;
    for p in &submitter_pods {
        r.object(&p.metadata);
    }
    let jspec = submitter.spec.clone().unwrap_or_default();
    let submitter_view = json!({
        "name": submitter.name_any(),
        "labels": submitter.labels(),
        "ownerReferences": submitter.owner_references().iter().map(|o| json!({"kind": o.kind, "name": o.name, "controller": o.controller, "blockOwnerDeletion": o.block_owner_deletion})).collect::<Vec<_>>(),
        "backoffLimit": jspec.backoff_limit,
        "template_containers": jspec.template.spec.as_ref().map(|s| s.containers.iter().map(|c| c.name.clone()).collect::<Vec<_>>()),
        "pods": submitter_pods.iter().map(|p| json!({"name": p.name_any(), "labels": p.labels(), "restartPolicy": p.spec.as_ref().and_then(|s| s.restart_policy.clone())})).collect::<Vec<_>>(),
    });

    // Deletion as the reconciler does it (background propagation).
    // The progression starts from the create response: the watcher may open after the operator
    // has already written its first status, and then it never sees the status-less object.
    let versions = seen(&statuses);
    let progression = dedup(
        std::iter::once(&created)
            .chain(versions.iter())
            .map(deployment)
            .collect(),
    );
    api.delete("tp-g1", &DeleteParams::background())
        .await
        .expect("delete");
    let gone = wait_for(
        60,
        "the RayJob and everything it owns to be gone",
        || async {
            let rj = api.get_opt("tp-g1").await.ok()?;
            let rc = rayclusters(&h.client).get_opt(&cluster_name).await.ok()?;
            let job = Api::<Job>::namespaced(h.client.clone(), NS)
                .get_opt("tp-g1")
                .await
                .ok()?;
            let left = pod_api
                .list(&ListParams::default().labels("tuneplane.io/job-id=g1"))
                .await
                .ok()?
                .items
                .len()
                + pod_api
                    .list(&ListParams::default().labels("job-name=tp-g1"))
                    .await
                    .ok()?
                    .items
                    .len();
            (rj.is_none() && rc.is_none() && job.is_none() && left == 0).then_some(true)
        },
    )
    .await;
    watcher.abort();
    json!({
        "created_finalizers": created.finalizers(),
        "running_finalizers": running.finalizers(),
        "progression": progression,
        "assess_rayjob": assessed,
        "status_at_running": {
            "jobDeploymentStatus": status.job_deployment_status,
            "rayClusterName": status.ray_cluster_name,
            "jobId": job_id,
        },
        "raycluster": cluster_view,
        "pods": cluster_pods.iter().map(|p| pod_view(p, &series)).collect::<Vec<_>>(),
        "pods_on_distinct_nodes": nodes.len() == cluster_pods.len(),
        "submitter": submitter_view,
        "deleted_everything": gone,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rayjob_matches_the_real_control_plane() {
    let h = start_transcript().await;
    let mut r = Redactor::default();
    let obs = step_rayjob(&h, &mut r).await;
    TRANSCRIPT.check("rayjob", obs, &r);
}

/// A real capsule (`main.py` printing, then sleeping `run_seconds`) served by a blob server on
/// 127.0.0.1 (the pods reach it through the agent's relay): the job and its capsule reference.
async fn served_capsule(
    dir: &std::path::Path,
    run_seconds: u32,
) -> (JobRecord, CapsuleRef, tokio::task::JoinHandle<()>) {
    let mut job = job(
        "s1",
        vec![pool("main", Some("h200"), 1, 8)],
        "rayproject/ray:2.60.0",
        120,
    );
    job.spec.entrypoint = "python3 main.py".into();
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("main.py"),
        format!(
            "import time\nprint('differential job ran', flush=True)\ntime.sleep({run_seconds})\n"
        ),
    )
    .unwrap();
    let (bytes, built) = tuneplane_core::capsule::build_from_source(
        &src,
        &job.spec,
        &tuneplane_core::capsule::Limits::default(),
        dir,
        Vec::new(),
    )
    .expect("capsule");
    job.capsule_sha256 = built.sha256.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/blobs", listener.local_addr().unwrap());
    let store =
        tuneplane_stores::FsBlobStore::open(dir.join("blobs"), b"diff".to_vec(), base).unwrap();
    let key = tuneplane_core::capsule::storage_key(&built.sha256);
    use tuneplane_core::store::BlobStore;
    store.put(&key, bytes).await.unwrap();
    let url = store
        .presign(
            tuneplane_core::store::PresignMethod::Get,
            &key,
            Duration::from_secs(3600),
        )
        .await
        .unwrap()
        .url;
    let app = axum::Router::new().nest(
        "/blobs",
        tuneplane_stores::blob_server::router(store, 1 << 20),
    );
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (
        job,
        CapsuleRef {
            sha256: built.sha256,
            url,
        },
        server,
    )
}

/// A RayJob run to its end: on the real tier real Ray runs the capsule's driver on the agent's
/// pods and the real operator follows it through its dashboard to `Complete`/`SUCCEEDED`; kubesim
/// must show the same progression, assessments and submitter end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rayjob_run_to_success_matches_the_real_control_plane() {
    let run_seconds = 4;
    let h = start_executing_run(sim_config(
        FLEET,
        Duration::from_secs(run_seconds.into()),
        None,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (job, capsule, server) = served_capsule(dir.path(), run_seconds).await;
    let mut r = Redactor::default();
    let rendered = render_rayjob(&job, &capsule, &RenderSettings::default()).expect("render");
    let typed: RayJob = rayjob::from_rendered(rendered);
    // The job's Ray token first, as the reconciler creates it: its pods read it from the Secret.
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(
        tuneplane_core::render::rayjob::render_auth_secret(&job, &"ab".repeat(32)),
    )
    .expect("secret");
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(h.client.clone(), "tuneplane-jobs")
        .create(&create_params(), &secret)
        .await
        .expect("create the token's secret");
    let api = h.rayjobs();
    let (statuses, watcher) = record(api.clone(), "tp-s1");
    let created = api.create(&create_params(), &typed).await.expect("create");
    r.object(&created.metadata);
    let pod_api = h.pods();
    let assessed: Mutex<Vec<Value>> = Mutex::default();
    let (assessed_ref, api_ref, pod_ref) = (&assessed, &api, &pod_api);
    let ended = wait_for(180, "tp-s1 to end", || async move {
        let rj = api_ref.get("tp-s1").await.ok()?;
        let all = pod_ref
            .list(&ListParams::default().labels("tuneplane.io/job-id=s1"))
            .await
            .ok()?
            .items;
        let watched: Vec<WatchedPod> = all.iter().cloned().map(WatchedPod::from).collect();
        let refs: Vec<&WatchedPod> = watched.iter().collect();
        let o = status::assess_rayjob(&rj, &refs, &[]);
        let state = observed(&o);
        assessed_ref
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(json!({"state": state["state"], "reason": state["reason"]}));
        matches!(o, Observed::Succeeded | Observed::Failed { .. }).then_some(rj)
    })
    .await;
    let status = ended.status.clone().unwrap_or_default();
    // The submitter's pod has ended too (`ray job logs --follow` returns after the job).
    let submitter_pod = wait_for(60, "the submitter's pod to end", || async {
        let list = pod_api
            .list(&ListParams::default().labels("job-name=tp-s1"))
            .await
            .ok()?
            .items;
        list.into_iter()
            .find(|p| matches!(phase(p).as_str(), "Succeeded" | "Failed"))
    })
    .await;
    let exit = submitter_pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref()?.terminated.as_ref())
        .map(|t| t.exit_code);
    let versions = seen(&statuses);
    let progression = dedup(
        std::iter::once(&created)
            .chain(versions.iter())
            .map(|rj| {
                json!(
                    rj.status
                        .as_ref()
                        .and_then(|s| s.job_deployment_status.clone())
                )
            })
            .collect(),
    );
    api.delete("tp-s1", &DeleteParams::background())
        .await
        .expect("delete");
    let gone = wait_for(60, "the RayJob and its pods to be gone", || async {
        let rj = api.get_opt("tp-s1").await.ok()?;
        let left = pod_api
            .list(&ListParams::default().labels("tuneplane.io/job-id=s1"))
            .await
            .ok()?
            .items
            .len();
        (rj.is_none() && left == 0).then_some(true)
    })
    .await;
    watcher.abort();
    server.abort();
    let obs = json!({
        // Deployment statuses only: the dashboard's intermediate job statuses depend on when the
        // operator polls (the end is compared below).
        "deployment_progression": progression,
        "assess_rayjob": dedup(assessed.into_inner().unwrap_or_else(|p| p.into_inner())),
        "end": {
            "jobDeploymentStatus": status.job_deployment_status,
            "jobStatus": status.job_status,
            "reason": status.reason,
        },
        "submitter_pod": {"phase": phase(&submitter_pod), "exit_code": exit},
        "deleted_everything": gone,
    });
    SUCCESS.check("rayjob_success", obs, &r);
}
