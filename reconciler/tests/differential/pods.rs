//! The steps of one pod at a time: `cpu_pod` (a CPU job's pod run to its end), `api_errors` and
//! `watch` (on that pod, run to its end first) and `image_pull`.

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams, Preconditions,
    WatchEvent, WatchParams,
};
use serde_json::{Value, json};
use tuneplane_reconciler::status;

use crate::common::*;
use crate::support::*;

/// What `api_errors` and `watch` start from: the pod of `cpu_pod` (`tp-c1`) run to its end, its
/// uid and the nodes redacted as `cpu_pod` leaves them. Returns the resourceVersion of its
/// creation.
async fn cpu_pod_ran(h: &Harness, r: &mut Redactor) -> String {
    let api = h.pods();
    let created = api
        .create(
            &create_params(),
            &cpu_pod("c1", "python:3.12-slim", Some("2")),
        )
        .await
        .expect("create");
    r.object(&created.metadata);
    wait_for(30, "tp-c1 to succeed", || async {
        let p = api.get("tp-c1").await.ok()?;
        (phase(&p) == "Succeeded").then_some(())
    })
    .await;
    redact_nodes(r, &node_series(h).await);
    created.resource_version().unwrap_or_default()
}

async fn step_cpu_pod(h: &Harness, r: &mut Redactor, created_rv: &mut String) -> Value {
    let api = h.pods();
    let (versions, watcher) = record(h.pods(), "tp-c1");
    let created = api
        .create(
            &create_params(),
            &cpu_pod("c1", "python:3.12-slim", Some("2")),
        )
        .await
        .expect("create");
    r.object(&created.metadata);
    *created_rv = created.resource_version().unwrap_or_default();
    let mut spec = to_json(&created.spec);
    for c in spec["containers"].as_array_mut().into_iter().flatten() {
        if let Some(c) = c.as_object_mut() {
            c.remove("command");
            c.remove("env");
        }
    }
    for v in spec["volumes"].as_array_mut().into_iter().flatten() {
        if let Some(name) = v["name"].as_str() {
            r.generated(name, "kube-api-access-");
        }
    }
    let done = wait_for(30, "tp-c1 to succeed", || async {
        seen(&versions)
            .iter()
            .any(|p| phase(p) == "Succeeded")
            .then_some(())
    })
    .await;
    let () = done;
    watcher.abort();
    let versions = seen(&versions);
    let phases = dedup(versions.iter().map(|p| json!(phase(p))).collect());
    let assessed = dedup(
        versions
            .iter()
            .map(|p| {
                observed(&status::assess_pod(
                    &tuneplane_reconciler::watched_pod::WatchedPod::from(p.clone()),
                ))
            })
            .collect(),
    );
    let last = api.get("tp-c1").await.expect("get");
    let cs = last
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let containers: Vec<Value> = cs
        .iter()
        .map(|c| {
            let t = c.state.as_ref().and_then(|s| s.terminated.as_ref());
            json!({
                "name": c.name, "image": c.image, "ready": c.ready, "started": c.started,
                "restartCount": c.restart_count,
                "terminated": t.map(|t| json!({"reason": t.reason, "exitCode": t.exit_code, "message": t.message})),
            })
        })
        .collect();
    let series = node_series(h).await;
    redact_nodes(r, &series);
    let node = last
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let events = settled_events(h, "tp-c1").await;
    json!({
        "created": {"metadata": {"labels": created.labels(), "annotations": created.annotations(),
                                 "generation": created.metadata.generation},
                    "spec": spec, "status": created.status},
        "phases": phases,
        "assess_pod": assessed,
        "final": {"phase": phase(&last), "reason": last.status.as_ref().and_then(|s| s.reason.clone()),
                  "conditions": conditions(&last), "containerStatuses": containers,
                  "node": node, "qosClass": last.status.as_ref().and_then(|s| s.qos_class.clone())},
        "events": sorted_events(&events, |_| true),
    })
}

async fn step_api_errors(h: &Harness, r: &mut Redactor) -> Value {
    let api = h.pods();
    let again = outcome(
        api.create(&create_params(), &cpu_pod("c1", "python:3.12-slim", None))
            .await,
        |p: Pod| json!(p.name_any()),
    );
    let missing = outcome(api.get("tp-missing").await, |p: Pod| json!(p.name_any()));
    let invalid: Pod = serde_json::from_value(json!({
        "metadata": {"name": "Bad_Name"},
        "spec": {"containers": []},
    }))
    .unwrap();
    let invalid = outcome(api.create(&PostParams::default(), &invalid).await, |p| {
        json!(p.name_any())
    });
    let wrong_uid = "00000000-0000-0000-0000-000000000000";
    r.add(wrong_uid, "<wrong uid>");
    let precondition = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(wrong_uid.into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let bad_delete = outcome(api.delete("tp-c1", &precondition).await, |_| {
        json!("deleted")
    });

    let leases: Api<Lease> = Api::namespaced(
        h.client.clone(),
        tuneplane_reconciler::access::SYSTEM_NAMESPACE,
    );
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "diff-lease"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 10},
    }))
    .unwrap();
    let first = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("lease");
    let mut newer = first.clone();
    newer.spec.get_or_insert_default().holder_identity = Some("b".into());
    let updated = outcome(
        leases
            .replace("diff-lease", &PostParams::default(), &newer)
            .await,
        |l: Lease| json!(l.spec.and_then(|s| s.holder_identity)),
    );
    let mut stale = first.clone();
    stale.spec.get_or_insert_default().holder_identity = Some("c".into());
    let stale = outcome(
        leases
            .replace("diff-lease", &PostParams::default(), &stale)
            .await,
        |l: Lease| json!(l.spec.and_then(|s| s.holder_identity)),
    );

    let labels = |p: Pod| json!(p.labels());
    let merge = outcome(
        api.patch(
            "tp-c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"diff": "merge", "team": null}}})),
        )
        .await,
        labels,
    );
    let ops = serde_json::from_value(json!([
        {"op": "replace", "path": "/metadata/labels/diff", "value": "json"},
        {"op": "add", "path": "/metadata/labels/extra", "value": "x"},
    ]))
    .unwrap();
    let json_patch = outcome(
        api.patch("tp-c1", &PatchParams::default(), &Patch::Json::<()>(ops))
            .await,
        labels,
    );
    let failing_ops = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/labels/diff", "value": "merge"},
    ]))
    .unwrap();
    let failed_test = outcome(
        api.patch(
            "tp-c1",
            &PatchParams::default(),
            &Patch::Json::<()>(failing_ops),
        )
        .await,
        labels,
    );
    let node = api
        .get("tp-c1")
        .await
        .ok()
        .and_then(|p| p.spec.and_then(|s| s.node_name))
        .unwrap_or_default();
    json!({
        "create_existing": again,
        "get_missing": missing,
        "create_invalid": invalid,
        "delete_wrong_uid": bad_delete,
        "lease_update": updated,
        "lease_update_stale": stale,
        "merge_patch": merge,
        "json_patch": json_patch,
        "json_patch_failed_test": failed_test,
        "select": {
            "label diff=json": names(&api, &ListParams::default().labels("diff=json")).await,
            "label diff in (merge,json),extra": names(&api, &ListParams::default().labels("diff in (merge,json),extra")).await,
            "label !diff": names(&api, &ListParams::default().labels("!diff")).await,
            "field spec.nodeName=<its node>": names(&api, &ListParams::default().fields(&format!("spec.nodeName={node}"))).await,
            "field spec.nodeName=": names(&api, &ListParams::default().fields("spec.nodeName=")).await,
            "field status.phase!=Succeeded": names(&api, &ListParams::default().fields("status.phase!=Succeeded")).await,
            "field status.phase=Succeeded,metadata.name=tp-c1": names(&api, &ListParams::default().fields("status.phase=Succeeded,metadata.name=tp-c1")).await,
            "field spec.restartPolicy=Never": names(&api, &ListParams::default().fields("spec.restartPolicy=Never")).await,
            "field unsupported": names(&api, &ListParams::default().fields("spec.image=x")).await,
        },
    })
}

async fn step_image_pull(h: &Harness, r: &mut Redactor) -> Value {
    let api = h.pods();
    let (versions, watcher) = record(h.pods(), "tp-i1");
    let created = api
        .create(&create_params(), &cpu_pod("i1", BAD_IMAGE, None))
        .await
        .expect("create");
    r.object(&created.metadata);
    let backoff = wait_for(30, "tp-i1 ImagePullBackOff", || async {
        seen(&versions)
            .into_iter()
            .find(|p| waiting(p).is_some_and(|(r, _)| r == "ImagePullBackOff"))
    })
    .await;
    let log = outcome(api.logs("tp-i1", &LogParams::default()).await, |t| json!(t));
    watcher.abort();
    let versions = seen(&versions);
    let waits = dedup(
        versions
            .iter()
            .filter_map(waiting)
            .map(|(r, m)| json!({"reason": r, "message": m}))
            .collect(),
    );
    let assessed = dedup(
        versions
            .iter()
            .map(|p| {
                observed(&status::assess_pod(
                    &tuneplane_reconciler::watched_pod::WatchedPod::from(p.clone()),
                ))
            })
            .collect(),
    );
    let (reason, message) =
        status::pending_from_pods(&[&tuneplane_reconciler::watched_pod::WatchedPod::from(
            backoff.clone(),
        )]);
    let series = node_series(h).await;
    redact_nodes(r, &series);
    let events = settled_events(h, "tp-i1").await;
    json!({
        "phases": dedup(versions.iter().map(|p| json!(phase(p))).collect()),
        "waiting": waits,
        "assess_pod": assessed,
        "pending_from_pods": {"reason": format!("{reason:?}"), "message": message},
        "conditions": conditions(&backoff),
        "log": log,
        "events": sorted_events(&events, |e| e.reason.as_deref() != Some("Scheduled")),
    })
}

async fn step_watch(h: &Harness, created_rv: &str) -> Value {
    let api = h.pods();
    let mut out = serde_json::Map::new();
    // From "0": the current objects as ADDED (served from the watch cache), then live changes.
    // From the pod's creation: its history after that revision, replayed. (The 410 Gone of a
    // compacted revision depends on etcd's compaction clock on the real tier: not compared.)
    for (label, from) in [("0", "0"), ("the creation of tp-c1", created_rv)] {
        let wp = WatchParams::default()
            .labels("tuneplane.io/job-id=c1")
            .timeout(2);
        let mut events = Vec::new();
        match api.watch(&wp, from).await {
            Ok(stream) => {
                let mut stream = stream.boxed();
                while let Ok(Some(item)) =
                    tokio::time::timeout(Duration::from_secs(5), stream.next()).await
                {
                    events.push(match item {
                        Ok(WatchEvent::Added(p)) => json!(["ADDED", p.name_any()]),
                        Ok(WatchEvent::Modified(p)) => json!(["MODIFIED", p.name_any()]),
                        Ok(WatchEvent::Deleted(p)) => json!(["DELETED", p.name_any()]),
                        Ok(WatchEvent::Bookmark(_)) => continue,
                        Ok(WatchEvent::Error(e)) => json!(["ERROR", to_json(&e)]),
                        Err(e) => json!(["client_error", e.to_string()]),
                    });
                }
            }
            Err(e) => events.push(json!(["client_error", e.to_string()])),
        }
        // Repeated MODIFIED events count status writes, which differ between kubelets.
        out.insert(format!("from {label}"), json!(dedup(events)));
    }
    Value::Object(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_pod_matches_the_real_control_plane() {
    let h = start_transcript().await;
    let mut r = Redactor::default();
    let mut created_rv = String::new();
    let obs = step_cpu_pod(&h, &mut r, &mut created_rv).await;
    TRANSCRIPT.check("cpu_pod", obs, &r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_match_the_real_control_plane() {
    let h = start_transcript().await;
    let mut r = Redactor::default();
    cpu_pod_ran(&h, &mut r).await;
    let obs = step_api_errors(&h, &mut r).await;
    TRANSCRIPT.check("api_errors", obs, &r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_pull_matches_the_real_control_plane() {
    let h = start_transcript().await;
    let mut r = Redactor::default();
    let obs = step_image_pull(&h, &mut r).await;
    TRANSCRIPT.check("image_pull", obs, &r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_matches_the_real_control_plane() {
    let h = start_transcript().await;
    let mut r = Redactor::default();
    let created_rv = cpu_pod_ran(&h, &mut r).await;
    let obs = step_watch(&h, &created_rv).await;
    TRANSCRIPT.check("watch", obs, &r);
}
