//! The typed KubeRay `RayJob` (`ray.io/v1`, KubeRay v1.4): the one type [`super::render_rayjob`]
//! returns, `tuneplane render` prints and the reconciler sends to the API server (its
//! `Object<RayJobSpec, RayJobStatus>` carries this [`RayJobSpec`]), so what is rendered and what is
//! created cannot disagree.
//!
//! Partial by design: the fields TunePlane sets are typed; every partially typed level keeps the
//! rest in a flattened `extra` map, so a field the renderer adds before it is typed here (or one
//! the API server returns) is carried whole instead of dropped. Pod templates stay JSON in the
//! exact Kubernetes shape (core has no Kubernetes types; core's tests round-trip them through
//! k8s-openapi's `PodTemplateSpec`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `apiVersion` of a RayJob.
pub const API_VERSION: &str = "ray.io/v1";
/// `kind` of a RayJob.
pub const KIND: &str = "RayJob";

/// A rendered RayJob: type, the metadata TunePlane sets, and the spec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayJob {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    /// Name, namespace, labels and annotations.
    pub metadata: RenderedMeta,
    /// The spec, as sent to the API server.
    pub spec: RayJobSpec,
}

impl RayJob {
    /// The RayJob as JSON in the exact Kubernetes shape (what `tuneplane render` prints).
    pub fn to_json(&self) -> Value {
        // Cannot fail: every map in the type is keyed by strings.
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// The metadata of a rendered object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RenderedMeta {
    /// The workload's deterministic name.
    pub name: String,
    /// The job's namespace.
    pub namespace: String,
    /// The user's labels and the platform's.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The platform's annotations (the capsule).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// The RayJob spec. Every field is optional on reading (a RayJob in the cluster may lack any),
/// and fields this type does not name are kept in [`RayJobSpec::extra`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayJobSpec {
    /// Driver command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
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
    /// Fallback TTL of the cluster after the end (the reconciler deletes first).
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
    /// Ray's submission id of the job (the workload's name; the dashboard gate answers for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Submitter settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_config: Option<SubmitterConfig>,
    /// KubeRay's submitter pod (a pod template: image, the Ray token, hardening).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_pod_template: Option<Value>,
    /// The RayCluster spec (head and worker groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_spec: Option<RayClusterSpec>,
    /// Every other field: carried as it is, never dropped.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
}

/// `spec.submitterConfig`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitterConfig {
    /// Retries of the submitter Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i64>,
    /// Every other field.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
}

/// `spec.rayClusterSpec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterSpec {
    /// The head (machine zero of the primary pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_group_spec: Option<HeadGroupSpec>,
    /// One group per pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worker_group_specs: Vec<WorkerGroupSpec>,
    /// Every other field.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
}

/// `spec.rayClusterSpec.headGroupSpec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeadGroupSpec {
    /// `ray start` parameters (KubeRay pastes each value into the command line as-is).
    #[serde(default)]
    pub ray_start_params: BTreeMap<String, String>,
    /// The head pod's template (Kubernetes `PodTemplateSpec` JSON).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub template: Value,
    /// Every other field.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
}

/// One of `spec.rayClusterSpec.workerGroupSpecs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerGroupSpec {
    /// The pool's name.
    #[serde(default)]
    pub group_name: String,
    /// Workers of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// Equal to `replicas` (no autoscaling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i64>,
    /// Equal to `replicas` (no autoscaling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i64>,
    /// `ray start` parameters.
    #[serde(default)]
    pub ray_start_params: BTreeMap<String, String>,
    /// The workers' pod template (Kubernetes `PodTemplateSpec` JSON).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub template: Value,
    /// Every other field.
    #[serde(flatten, default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Fields this type does not name survive reading and writing at every partially typed level.
    #[test]
    fn unnamed_fields_are_carried_at_every_level() {
        let value = json!({
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": "tp-a", "namespace": "ns", "labels": {"a": "b"}, "annotations": {}},
            "spec": {
                "entrypoint": "python x.py",
                "suspend": false,
                "submitterConfig": {"backoffLimit": 0, "future": 1},
                "rayClusterSpec": {
                    "enableInTreeAutoscaling": false,
                    "headGroupSpec": {"rayStartParams": {"num-gpus": "8"}, "template": {"spec": {}}, "serviceType": "ClusterIP"},
                    "workerGroupSpecs": [{"groupName": "main", "replicas": 1, "rayStartParams": {}, "template": {}, "numOfHosts": 1}],
                },
            },
        });
        let typed: RayJob = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(typed.to_json(), value);
        assert_eq!(typed.spec.extra.keys().collect::<Vec<_>>(), ["suspend"]);
        let cluster = typed.spec.ray_cluster_spec.unwrap_or_default();
        assert_eq!(cluster.worker_group_specs[0].extra["numOfHosts"], json!(1));
        assert_eq!(
            cluster.head_group_spec.unwrap_or_default().extra["serviceType"],
            json!("ClusterIP")
        );
    }
}
