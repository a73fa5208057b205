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
    /// The RayCluster spec (head and worker groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_spec: Option<serde_json::Value>,
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
