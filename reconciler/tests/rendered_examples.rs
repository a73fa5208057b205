//! Render and create cannot disagree: every example under `examples/` that becomes a RayJob is
//! rendered as the reconciler renders it, created as the reconciler creates it, and the RayJob
//! the API server stored is read back raw (no TunePlane type in between) and compared with the
//! rendered one. Runs on kubesim, and on the real control plane (the KubeRay v1.4 CRD's schema:
//! pruning of unknown fields, its defaults) with `TUNEPLANE_TEST_K8S=real`.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};
use tuneplane_core::admission::PoolPlacement;
use tuneplane_core::fleet::Fleet;
use tuneplane_core::job::JobRecord;
use tuneplane_core::spec::{Defaults, WorkloadKind, validate};
use tuneplane_reconciler::metrics::Metrics;
use tuneplane_reconciler::workload::{self, Rendered};
use tuneplane_reconciler::{Reconciler, rayjob};

/// The examples: `(folder name, tuneplane.yaml)`, sorted by name.
fn examples() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut found: Vec<(String, String)> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| {
            let dir = e.ok()?.path();
            let text = std::fs::read_to_string(dir.join("tuneplane.yaml")).ok()?;
            Some((dir.file_name()?.to_string_lossy().into_owned(), text))
        })
        .collect();
    found.sort();
    found
}

/// The fields the API server adds to a RayJob from the KubeRay v1.4 CRD's `default:`s where the
/// rendered object leaves them out: `numOfHosts: 1` on a worker group and `protocol: TCP` on a
/// container port. kubesim adds neither; the real API server adds both. Removed from `stored`
/// only where `rendered` lacks the field and the stored value is that default, so a field the
/// renderer sets is still compared.
fn drop_server_defaults(stored: &mut Value, rendered: &Value) {
    let groups = "/rayClusterSpec/workerGroupSpecs";
    let count = rendered
        .pointer(groups)
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    for g in 0..count {
        drop_default(
            stored,
            rendered,
            &format!("{groups}/{g}"),
            "numOfHosts",
            &json!(1),
        );
    }
    let mut templates = vec!["/rayClusterSpec/headGroupSpec/template/spec".to_owned()];
    templates.extend((0..count).map(|g| format!("{groups}/{g}/template/spec")));
    templates.push("/submitterPodTemplate/spec".to_owned());
    for t in templates {
        for list in ["initContainers", "containers"] {
            let path = format!("{t}/{list}");
            let n = rendered
                .pointer(&path)
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            for c in 0..n {
                let ports = format!("{path}/{c}/ports");
                let m = rendered
                    .pointer(&ports)
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                for p in 0..m {
                    drop_default(
                        stored,
                        rendered,
                        &format!("{ports}/{p}"),
                        "protocol",
                        &json!("TCP"),
                    );
                }
            }
        }
    }
}

/// Removes, anywhere in `stored`, an empty object (`{}`) under a key `rendered` lacks at the same
/// place. On the real tier the KubeRay operator writes a RayJob back whole (it adds its
/// finalizer with an update), and Go encodes a struct field that is not a pointer even when it is
/// empty, `omitempty` or not: a container's `resources`, a worker group's `scaleStrategy`, the
/// submitter template's `metadata`. Whether the read sees the object before or after that write
/// is a race, so both are accepted; an empty object says nothing, and any field with content is
/// still compared.
fn drop_go_empty_structs(stored: &mut Value, rendered: &Value) {
    match (stored, rendered) {
        (Value::Object(s), Value::Object(r)) => {
            s.retain(|k, v| r.contains_key(k) || *v != json!({}));
            for (k, v) in s.iter_mut() {
                if let Some(rv) = r.get(k) {
                    drop_go_empty_structs(v, rv);
                }
            }
        }
        (Value::Array(s), Value::Array(r)) => {
            for (sv, rv) in s.iter_mut().zip(r) {
                drop_go_empty_structs(sv, rv);
            }
        }
        _ => {}
    }
}

#[test]
fn only_empty_objects_the_rendered_spec_lacks_are_dropped() {
    let rendered = json!({"a": {"keep": {}}, "list": [{"x": 1}]});
    let mut stored = json!({
        "a": {"keep": {}, "go": {}, "content": {"y": 1}},
        "list": [{"x": 1, "resources": {}}],
        "top": {}
    });
    drop_go_empty_structs(&mut stored, &rendered);
    assert_eq!(
        stored,
        json!({"a": {"keep": {}, "content": {"y": 1}}, "list": [{"x": 1}]})
    );
}

/// Removes `key` from the object at `path` of `stored` when `rendered` has no such key there and
/// the stored value is `default`.
fn drop_default(stored: &mut Value, rendered: &Value, path: &str, key: &str, default: &Value) {
    let rendered_has = rendered.pointer(path).and_then(|o| o.get(key)).is_some();
    if rendered_has {
        return;
    }
    if let Some(object) = stored.pointer_mut(path).and_then(Value::as_object_mut)
        && object.get(key) == Some(default)
    {
        object.remove(key);
    }
}

/// `job` with every pool planned onto nodes of the test fleet ([`FLEET`]: `h200-0`, `h200-1`,
/// `l40s-0`), as admission leaves a job the reconciler renders.
fn placed(mut job: JobRecord) -> JobRecord {
    job.placements = job
        .spec
        .pools
        .iter()
        .map(|p| PoolPlacement {
            pool: p.name.clone(),
            nodes: (0..p.nodes)
                .map(|k| format!("{}-{k}", p.series.as_deref().unwrap_or("cpu")))
                .collect(),
        })
        .collect();
    job
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_rayjob_is_stored_as_it_was_rendered() {
    let h = start(sim_config(FLEET, Duration::from_secs(600), None)).await;
    // A reconciler that is never run: its context creates workloads exactly as a pass does, and
    // no pass deletes them as orphans (they have no job records) before they are read back.
    let reconciler = Reconciler::new(
        test_config("r1"),
        h.reconciler_client.clone(),
        h.jobs.clone(),
        h.blobs.clone(),
        Arc::new(Metrics::default()),
    )
    .await
    .expect("reconciler");
    let ctx = reconciler.ctx();
    let fleet_text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fleet.yaml"),
    )
    .unwrap();
    let fleet = Fleet::from_yaml(&fleet_text)
        .expect("examples/fleet.yaml")
        .shape();

    let (mut compared, mut refused, mut pods) = (Vec::new(), Vec::new(), Vec::new());
    for (name, text) in examples() {
        // What submit accepts for the examples' fleet (too-big is refused there, never rendered).
        let Ok(valid) = validate(&text, Some(&fleet), &Defaults::default()) else {
            refused.push(name);
            continue;
        };
        let job = placed(JobRecord::new_queued(
            format!("ex-{name}").parse().unwrap(),
            "acme".parse().unwrap(),
            valid.spec,
            SHA,
            tuneplane_core::clock::now_ms(),
        ));
        if job.spec.kind() != WorkloadKind::RayJob {
            pods.push(name);
            continue;
        }
        let rendered = workload::render(&ctx, &job).await.expect("render");
        let Rendered::RayJob(rayjob) = &rendered else {
            panic!("{name}: a GPU job rendered as a Pod");
        };
        let expected = rayjob.to_json();
        let workload = workload::create_rendered(&ctx, &job, rendered.clone())
            .await
            .expect("create");
        let ns = &job.spec.namespace;
        let api: Api<DynamicObject> =
            Api::namespaced_with(h.client.clone(), ns, &rayjob::resource());
        let stored = api.get(&workload).await.expect("stored RayJob");
        let mut spec = stored.data["spec"].clone();
        drop_server_defaults(&mut spec, &expected["spec"]);
        drop_go_empty_structs(&mut spec, &expected["spec"]);
        assert_eq!(
            spec, expected["spec"],
            "{name}: the stored RayJob spec is not the rendered one"
        );
        let labels = stored.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            json!(labels),
            expected["metadata"]["labels"],
            "{name}: labels"
        );
        workload::delete(
            &ctx,
            WorkloadKind::RayJob,
            ns,
            &workload,
            workload::Leftovers::all(&ctx),
        )
        .await
        .expect("delete");
        h.wait_rayjob_gone(30, &workload).await;
        compared.push(name);
    }
    // The examples as they stand: a change to them shows here instead of shrinking the test.
    assert_eq!(
        compared,
        ["queued-behind", "ray-multipool"],
        "RayJob examples"
    );
    assert_eq!(refused, ["too-big"], "examples refused at submit");
    assert_eq!(
        pods,
        ["bad-image", "hello-cpu", "resume", "sweep"],
        "CPU-only examples"
    );
}

/// The normalisation is not vacuous: a stored default the renderer did not ask for is dropped,
/// one that differs from what was rendered is kept.
#[test]
fn only_defaults_the_renderer_left_out_are_ignored() {
    let rendered = json!({"rayClusterSpec": {"workerGroupSpecs": [{"groupName": "a"}, {"groupName": "b", "numOfHosts": 1}]}});
    let mut stored = json!({"rayClusterSpec": {"workerGroupSpecs": [{"groupName": "a", "numOfHosts": 1}, {"groupName": "b", "numOfHosts": 1}]}});
    drop_server_defaults(&mut stored, &rendered);
    assert_eq!(stored, rendered);
    let mut changed = json!({"rayClusterSpec": {"workerGroupSpecs": [{"groupName": "a", "numOfHosts": 2}, {"groupName": "b", "numOfHosts": 1}]}});
    drop_server_defaults(&mut changed, &rendered);
    assert_ne!(changed, rendered);
}
