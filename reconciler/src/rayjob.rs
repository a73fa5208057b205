//! A partial typed KubeRay `RayJob` (`ray.io/v1`): the spec fields TunePlane sets, typed, with the
//! cluster spec kept as JSON (it is produced by core's renderer), and the status fields it reads.

use kube::core::{ApiResource, GroupVersionKind, Object};
use serde::{Deserialize, Serialize};

/// The RayJob spec as rendered by `tuneplane_core::render::render_rayjob`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayJobSpec {
    /// Driver command.
    pub entrypoint: String,
    /// Runtime env (working_dir, env_vars) as YAML.
    #[serde(
        rename = "runtimeEnvYAML",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub runtime_env_yaml: Option<String>,
    /// Delete the RayCluster when the job ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_after_job_finishes: Option<bool>,
    /// Fallback TTL of the cluster after the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i64>,
    /// Run deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Retries of the whole job (0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i64>,
    /// `K8sJobMode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission_mode: Option<String>,
    /// Submitter settings (its `backoffLimit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_config: Option<serde_json::Value>,
    /// Ray's submission id of the job (the workload's name; the dashboard gate answers for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// KubeRay's submitter pod (image, the Ray token, hardening).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_pod_template: Option<serde_json::Value>,
    /// The RayCluster spec (head and worker groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_spec: Option<serde_json::Value>,
    /// Any other field core renders: carried to the API server as rendered, so a field added to
    /// the renderer is never dropped here.
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// The RayJob status fields the reconciler reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayJobStatus {
    /// Ray's job status (`PENDING`, `RUNNING`, `SUCCEEDED`, `FAILED`, `STOPPED`).
    #[serde(default)]
    pub job_status: Option<String>,
    /// KubeRay's view (`Initializing`, `Running`, `Complete`, `Failed`, ...).
    #[serde(default)]
    pub job_deployment_status: Option<String>,
    /// Name of the RayCluster.
    #[serde(default)]
    pub ray_cluster_name: Option<String>,
    /// Failure reason (`DeadlineExceeded`, `AppFailed`, ...).
    #[serde(default)]
    pub reason: Option<String>,
    /// KubeRay's message with the reason.
    #[serde(default)]
    pub message: Option<String>,
}

/// The partial typed RayJob.
pub type RayJob = Object<RayJobSpec, RayJobStatus>;

/// The `ray.io/v1` `RayJob` API resource.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ray.io", "v1", "RayJob"), "rayjobs")
}

#[cfg(test)]
mod round_trip {
    use super::*;
    use tuneplane_core::render::{CapsuleRef, RenderSettings, render_rayjob};

    /// What core renders reaches the API server whole: every field survives the typed RayJob,
    /// including ones this type does not name (a field added to the renderer later).
    #[test]
    fn every_rendered_field_survives_the_typed_rayjob() {
        let text = "name: t\nimage: rayproject/ray:2.60.0\nentrypoint: python train.py\npools: [{name: main, series: h200, nodes: 2, gpus_per_node: 8}]\n";
        let spec = tuneplane_core::spec::validate(text, None, &Default::default())
            .expect("spec")
            .spec;
        let sha = "ab".repeat(32);
        let job = tuneplane_core::job::JobRecord::new_queued("j-1", "acme", spec, &sha, 1);
        let capsule = CapsuleRef {
            sha256: sha.clone(),
            url: "http://127.0.0.1:9/c.zip".into(),
        };
        let mut rendered =
            render_rayjob(&job, &capsule, &RenderSettings::default()).expect("render");
        rendered["spec"]["someFutureField"] = serde_json::json!({"on": true});
        let typed: RayJob = serde_json::from_value(rendered.clone()).expect("typed");
        let back = serde_json::to_value(&typed).expect("json");
        assert_eq!(back["spec"], rendered["spec"]);
        assert!(typed.spec.job_id.is_some() && typed.spec.submitter_pod_template.is_some());
        assert_eq!(typed.spec.other.len(), 1, "{:?}", typed.spec.other);
    }
}
