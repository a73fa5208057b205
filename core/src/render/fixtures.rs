//! What the renderers' tests share: a GPU and a CPU job, a capsule, a playground, the KubeRay
//! CRD schema (from `TUNEPLANE_KUBERAY_SCHEMAS`, which the test command sets) and the render
//! settings that change what is rendered.

use serde_json::{Value, json};

use super::*;
use crate::spec::JobSpec;
use crate::store::PlaygroundRecord;

/// The rendered RayJob as JSON, as the tests read it (with JSON pointers).
pub(crate) fn render_rayjob_json(
    job: &JobRecord,
    capsule: &CapsuleRef,
    settings: &RenderSettings,
) -> Result<Value, RenderError> {
    render_rayjob(job, capsule, settings).map(|rj| rj.to_json())
}

pub(crate) const SHA: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

pub(crate) fn job(pools: Value) -> JobRecord {
    let spec: JobSpec = serde_json::from_value(json!({
        "name": "llama-sft", "plugin": "custom/custom", "image": "ghcr.io/acme/train:1.2",
        "entrypoint": "python train.py", "env": {"WANDB_MODE": "offline"}, "pools": pools,
        "deadlines": {"pre_running_seconds": 1800, "run_seconds": 86400}, "priority": 0,
        "labels": {"team": "nlp"}, "namespace": "tuneplane-jobs", "platform_version": "0.1.0"
    }))
    .expect("spec");
    JobRecord::new_queued(
        "j-01abc".parse().unwrap(),
        "acme".parse().unwrap(),
        spec,
        SHA,
        1,
    )
}

pub(crate) fn gpu_job() -> JobRecord {
    job(json!([
        {"name": "main", "series": "h200", "nodes": 2, "gpus_per_node": 8, "cpus": 96.0, "memory_gb": 1024.0},
        {"name": "eval", "series": "l40s", "nodes": 1, "gpus_per_node": 4, "cpus": 16.5, "memory_gb": 64.0}
    ]))
}

pub(crate) fn cpu_job() -> JobRecord {
    job(
        json!([{"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0, "cpus": 2.0, "memory_gb": 4.0}]),
    )
}

pub(crate) fn capsule() -> CapsuleRef {
    CapsuleRef {
        sha256: SHA.into(),
        url: format!(
            "https://bucket.s3.amazonaws.com/capsules/sha256/{SHA}/capsule.zip?X-Amz-Signature=abc"
        ),
    }
}

pub(crate) fn at<'a>(v: &'a Value, ptr: &str) -> &'a Value {
    v.pointer(ptr).unwrap_or(&Value::Null)
}

/// A one-GPU l40s playground of an hour, created at 0.
pub(crate) fn playground() -> PlaygroundRecord {
    PlaygroundRecord::requested(
        "PG_1",
        "acme".parse().unwrap(),
        "Qwen/Qwen3-0.6B",
        "l40s",
        1,
        0,
        3_600_000,
    )
}

pub(crate) fn rayjob_schema() -> Value {
    let dir = std::env::var("TUNEPLANE_KUBERAY_SCHEMAS").unwrap_or_else(|_| {
        panic!("TUNEPLANE_KUBERAY_SCHEMAS is not set: point it at the KubeRay v1.4 CRD folder (scripts/test.sh does)")
    });
    let path = std::path::Path::new(&dir).join("ray.io_rayjobs.yaml");
    let text = std::fs::read_to_string(&path).expect("ray.io_rayjobs.yaml");
    let crd: Value = yaml_serde::from_str(&text).expect("CRD");
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let v1 = versions
        .into_iter()
        .find(|v| v["name"] == "v1")
        .expect("no v1 in CRD");
    v1.pointer("/schema/openAPIV3Schema")
        .cloned()
        .expect("no schema")
}

/// The render settings that change what is rendered: the defaults, no GPU passthrough, and the
/// capsule delivered by an init container.
pub(crate) fn settings_variants() -> [RenderSettings; 3] {
    [
        RenderSettings::default(),
        RenderSettings {
            gpu_passthrough: false,
            ..RenderSettings::default()
        },
        RenderSettings {
            delivery: CapsuleDelivery::InitContainer,
            ..RenderSettings::default()
        },
    ]
}

/// `job` as admission leaves it: every pool with its planned nodes.
pub(crate) fn placed(mut job: JobRecord) -> JobRecord {
    job.placements = job
        .spec
        .pools
        .iter()
        .map(|p| crate::admission::PoolPlacement {
            pool: p.name.clone(),
            nodes: (0..p.nodes).map(|k| format!("{}-{k}", p.name)).collect(),
        })
        .collect();
    job
}

/// `value` read into the typed Kubernetes object `T` and written back to JSON is `value` again:
/// a misspelt or misplaced key inside `json!` (which the typed object drops) fails here.
pub(crate) fn assert_round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(
    what: &str,
    value: &Value,
) {
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{what} does not read as its Kubernetes type: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        &back, value,
        "{what} lost or changed fields in a round trip"
    );
}
