//! kube-rs typed clients against kubesim: CRUD, patches (merge, JSON, apply), status subresource,
//! selectors, errors as Status objects, finalizers and cascading deletion.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn api_code(e: kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn pods_are_created_read_replaced_and_deleted_with_server_metadata() {
    let (_sim, client) = start(fast_config()).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let created = pods
        .create(&PostParams::default(), &idle_pod("p1"))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| !u.is_empty()));
    assert!(meta.creation_timestamp.is_some());
    let rv1: u64 = meta
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    assert!(rv1 > 0);

    let mut got = pods.get("p1").await.unwrap();
    got.metadata.labels = Some([("team".to_string(), "nlp".to_string())].into());
    let replaced = pods
        .replace("p1", &PostParams::default(), &got)
        .await
        .unwrap();
    let rv2: u64 = replaced
        .metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    assert!(rv2 > rv1, "resourceVersion must increase");
    assert_eq!(replaced.metadata.uid, meta.uid);

    // A write carrying the old resourceVersion is a conflict.
    assert_eq!(
        pods.replace("p1", &PostParams::default(), &got)
            .await
            .map_err(api_code)
            .err(),
        Some(409)
    );
    pods.delete("p1", &DeleteParams::default()).await.unwrap();
    assert_eq!(pods.get("p1").await.map_err(api_code).err(), Some(404));
}

#[tokio::test]
async fn errors_come_back_as_status_objects_with_the_right_codes() {
    let (_sim, client) = start(fast_config()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("dup", "busybox", 0, None))
        .await
        .unwrap();
    let again = pods
        .create(&PostParams::default(), &pod("dup", "busybox", 0, None))
        .await;
    match again {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
            assert_eq!(s.message, "pods \"dup\" already exists");
        }
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    let bad = pods
        .create(&PostParams::default(), &pod("Bad_Name", "busybox", 0, None))
        .await;
    assert_eq!(bad.map_err(api_code).err(), Some(422));
    let dry = pods
        .create(
            &PostParams {
                dry_run: true,
                ..PostParams::default()
            },
            &pod("dry", "busybox", 0, None),
        )
        .await;
    assert_eq!(
        dry.map_err(api_code).err(),
        Some(400),
        "dryRun is refused, never written"
    );
    let elsewhere: Api<Pod> = Api::namespaced(client, "no-such-namespace");
    assert_eq!(
        elsewhere
            .create(&PostParams::default(), &pod("x", "busybox", 0, None))
            .await
            .map_err(api_code)
            .err(),
        Some(404)
    );
}

#[tokio::test]
async fn merge_json_and_apply_patches_update_and_apply_creates_when_missing() {
    let (_sim, client) = start(fast_config()).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let applied = pods
        .patch(
            "ap",
            &PatchParams::apply("tuneplane"),
            &Patch::Apply(idle_pod("ap")),
        )
        .await
        .expect("apply create");
    assert!(applied.metadata.uid.is_some());
    let merged = pods
        .patch(
            "ap",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        merged
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("a"))
            .map(String::as_str),
        Some("1")
    );
    let ops: json_patch::Patch = serde_json::from_value(
        json!([{"op": "add", "path": "/metadata/annotations", "value": {"b": "2"}}]),
    )
    .unwrap();
    let patched = pods
        .patch("ap", &PatchParams::default(), &Patch::<()>::Json(ops))
        .await
        .unwrap();
    assert_eq!(
        patched
            .metadata
            .annotations
            .as_ref()
            .and_then(|l| l.get("b"))
            .map(String::as_str),
        Some("2")
    );
    // Re-applying the same intent changes nothing, so the resourceVersion stays.
    let mut intent = idle_pod("ap");
    intent.metadata.labels = Some([("a".to_string(), "1".to_string())].into());
    let before = pods.get("ap").await.unwrap().metadata.resource_version;
    let after = pods
        .patch(
            "ap",
            &PatchParams::apply("tuneplane"),
            &Patch::Apply(intent),
        )
        .await
        .unwrap();
    assert_eq!(after.metadata.resource_version, before);
}

#[tokio::test]
async fn status_writes_touch_only_status_and_main_writes_keep_it() {
    let (_sim, client) = start(fast_config()).await;
    let leases_ok: Api<Lease> = Api::namespaced(client.clone(), "default");
    leases_ok
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": {}})).unwrap(),
        )
        .await
        .unwrap();
    let rayjobs: Api<RayJob> = Api::namespaced_with(client, "default", &rayjob_resource());
    // Status in a create body is dropped, as for any CRD with a status subresource.
    let mut rj = rayjob("status-check", "h200", 8, 0);
    rj.spec.ray_cluster_spec = None; // invalid for KubeRay, so the operator leaves it alone
    rj.status = Some(RayJobStatus {
        job_status: Some("SUCCEEDED".into()),
        ..RayJobStatus::default()
    });
    let created = rayjobs.create(&PostParams::default(), &rj).await.unwrap();
    assert!(
        created
            .status
            .as_ref()
            .and_then(|s| s.job_status.clone())
            .is_none()
    );
    let status = json!({"status": {"jobStatus": "RUNNING"}, "spec": {"entrypoint": "ignored"}});
    let after = rayjobs
        .patch_status(
            "status-check",
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await
        .unwrap();
    assert_eq!(
        after.status.as_ref().and_then(|s| s.job_status.as_deref()),
        Some("RUNNING")
    );
    assert_eq!(after.spec.entrypoint, "python .tuneplane/runner.pex");
    let main = rayjobs
        .patch(
            "status-check",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"jobStatus": "X"}, "metadata": {"labels": {"k": "v"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        main.status.as_ref().and_then(|s| s.job_status.as_deref()),
        Some("RUNNING")
    );
    assert_eq!(
        main.metadata.generation,
        Some(1),
        "a metadata-only change keeps the generation"
    );
    let spec_change = rayjobs
        .patch(
            "status-check",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"entrypoint": "python b.py"}})),
        )
        .await
        .unwrap();
    assert_eq!(spec_change.metadata.generation, Some(2));
}

#[tokio::test]
async fn leases_reject_stale_resource_versions() {
    let (_sim, client) = start(fast_config()).await;
    let leases: Api<Lease> = Api::namespaced(client, "default");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})).unwrap();
    let first = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut a = first.clone();
    let mut b = first;
    if let Some(s) = a.spec.as_mut() {
        s.holder_identity = Some("a2".into());
    }
    if let Some(s) = b.spec.as_mut() {
        s.holder_identity = Some("b".into());
    }
    leases
        .replace("leader", &PostParams::default(), &a)
        .await
        .unwrap();
    assert_eq!(
        leases
            .replace("leader", &PostParams::default(), &b)
            .await
            .map_err(api_code)
            .err(),
        Some(409)
    );
}

#[tokio::test]
async fn label_and_field_selectors_filter_lists() {
    let (_sim, client) = start(fast_config()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    for (selector, count) in [
        ("tuneplane/gpu-series=h200", 2),
        ("tuneplane/gpu-series in (h200,l40s),kubernetes.io/os", 5),
        ("!tuneplane/gpu-series", 1),
        ("tuneplane/gpu-series notin (l40s)", 3),
    ] {
        let listed = nodes
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap();
        assert_eq!(listed.items.len(), count, "{selector}");
    }
    let paged = nodes.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(paged.items.len(), 2);
    assert!(paged.metadata.continue_.is_some());

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("gpu-a", "busybox", 8, Some("h200")),
    )
    .await
    .unwrap();
    let node = wait_for(10, "pod bound", || {
        let pods = pods.clone();
        async move {
            pods.get("gpu-a")
                .await
                .ok()
                .and_then(|p| p.spec.and_then(|s| s.node_name))
        }
    })
    .await;
    let on_node = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .unwrap();
    assert_eq!(on_node.items.len(), 1);
    let events: Api<Event> = Api::namespaced(client, "default");
    let about = events
        .list(&ListParams::default().fields("involvedObject.name=gpu-a,involvedObject.kind=Pod"))
        .await
        .unwrap();
    assert!(
        about
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Scheduled"))
    );
    let bad = pods
        .list(&ListParams::default().fields("spec.image=x"))
        .await;
    assert_eq!(bad.map_err(api_code).err(), Some(400));
}

#[tokio::test]
async fn finalizers_hold_deletion_and_owners_cascade_to_dependents() {
    let (_sim, client) = start(fast_config()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut held = pod("held", "busybox", 0, None);
    held.metadata.finalizers = Some(vec!["example.com/keep".into()]);
    pods.create(&PostParams::default(), &held).await.unwrap();
    pods.delete("held", &DeleteParams::default()).await.unwrap();
    let marked = pods.get("held").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(pods.get("held").await.map_err(api_code).err(), Some(404));

    let owner = pods
        .create(&PostParams::default(), &pod("owner", "busybox", 0, None))
        .await
        .unwrap();
    let mut child = pod("child", "busybox", 0, None);
    child.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": owner.metadata.uid,
        }))
        .unwrap(),
    ]);
    pods.create(&PostParams::default(), &child).await.unwrap();
    pods.delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(pods.get("child").await.map_err(api_code).err(), Some(404));
}

#[tokio::test]
async fn injected_failures_answer_the_next_requests_then_stop() {
    let (sim, client) = start(fast_config()).await;
    // kube-rs retries 429/503/504 by itself (server-aware backoff): two 503s are absorbed.
    let nodes: Api<Node> = Api::all(client);
    sim.fail_next_requests(2, 503);
    assert!(nodes.get("h200-0").await.is_ok());
    // A 500 is not retried by the client and surfaces.
    sim.fail_next_requests(1, 500);
    assert_eq!(nodes.get("h200-0").await.map_err(api_code).err(), Some(500));
    assert!(nodes.get("h200-0").await.is_ok());
    // Without the client's retry layer, the injected 429s are seen one by one.
    let mut config = kube::Config::new(sim.url().parse().unwrap());
    config.default_retry = false;
    let bare: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());
    sim.fail_next_requests(2, 429);
    assert_eq!(bare.get("h200-0").await.map_err(api_code).err(), Some(429));
    assert_eq!(
        bare.list(&ListParams::default())
            .await
            .map_err(api_code)
            .err(),
        Some(429)
    );
    assert!(bare.get("h200-0").await.is_ok());
}
