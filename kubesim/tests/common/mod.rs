//! Shared fixtures of the kube-rs test suite: a simulator with a small fleet on 127.0.0.1:0, a
//! client for it, a partial typed RayJob, and a bounded wait helper.

#![allow(dead_code)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};
use kube::core::{ApiResource, GroupVersionKind, Object};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tuneplane_core::fleet::Fleet;
use tuneplane_kubesim::{KubeSim, SimConfig};

/// A fleet of 6 nodes: 2 h200 (8 GPUs), 3 l40s (4 GPUs, the last cordoned), 1 CPU node.
pub fn small_fleet() -> Fleet {
    let yaml = "\
node_groups:
  - {name: h200, series: h200, count: 2, gpus: 8, cpus: 96, memory_gb: 1024}
  - {name: l40s, series: l40s, count: 3, gpus: 4, cpus: 48, memory_gb: 256, cordoned: 1}
  - {name: cpu, count: 1, cpus: 16, memory_gb: 64}
";
    Fleet::from_yaml(yaml).expect("test fleet")
}

/// A fast-ticking configuration with the small fleet.
pub fn fast_config() -> SimConfig {
    let mut config = SimConfig {
        fleet: Some(small_fleet()),
        tick: Duration::from_millis(20),
        ..SimConfig::default()
    };
    config.scenario.start_delay = Duration::from_millis(50);
    config.scenario.rayjob_run = Duration::from_millis(300);
    config
}

/// Starts a simulator and a kube-rs client for it.
pub async fn start(config: SimConfig) -> (KubeSim, kube::Client) {
    let sim = KubeSim::start(config).await.expect("kubesim start");
    let url = sim.url().parse().expect("url");
    let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
    (sim, client)
}

// Not every test binary that includes this module polls.
#[allow(unused_imports)]
pub use tuneplane_testkit::{poll_every, wait_for};

/// A pod with one container and optional GPU limit, node selector and annotations.
pub fn pod(name: &str, image: &str, gpus: u32, series: Option<&str>) -> Pod {
    let mut limits = json!({"cpu": "1", "memory": "1Gi"});
    if gpus > 0 {
        limits["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    let mut spec = json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": image, "command": ["bash", "-c", "echo hi"], "resources": {"limits": limits}}]});
    if let Some(s) = series {
        spec["nodeSelector"] = json!({"tuneplane/gpu-series": s});
    }
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}),
    )
    .expect("pod fixture")
}

/// A pod no scheduler picks up (`schedulerName` is not the default), so nothing but the test
/// writes to it.
pub fn idle_pod(name: &str) -> Pod {
    let mut p = pod(name, "busybox", 0, None);
    if let Some(spec) = p.spec.as_mut() {
        spec.scheduler_name = Some("none".into());
    }
    p
}

/// The pod's phase (empty before its first status).
pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// Why the pod's first container waits (`ImagePullBackOff`, ...), if it does.
pub fn waiting_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

/// The exit code of the pod's first container, once it terminated.
pub fn exit_code(p: &Pod) -> Option<i32> {
    let status = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
    Some(status.state.as_ref()?.terminated.as_ref()?.exit_code)
}

/// The part of the RayJob spec the tests use.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayJobSpec {
    /// Entrypoint.
    pub entrypoint: String,
    /// Runtime env YAML.
    #[serde(rename = "runtimeEnvYAML", skip_serializing_if = "Option::is_none")]
    pub runtime_env_yaml: Option<String>,
    /// Delete the cluster when finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_after_job_finishes: Option<bool>,
    /// TTL after finishing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Run deadline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i32>,
    /// Retries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// Submission mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submission_mode: Option<String>,
    /// Cluster spec (kept untyped here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ray_cluster_spec: Option<serde_json::Value>,
}

/// The part of the RayJob status the tests read.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayJobStatus {
    /// Ray job status.
    #[serde(default)]
    pub job_status: Option<String>,
    /// Deployment status.
    #[serde(default)]
    pub job_deployment_status: Option<String>,
    /// Cluster name.
    #[serde(default)]
    pub ray_cluster_name: Option<String>,
    /// Reason of a failure.
    #[serde(default)]
    pub reason: Option<String>,
    /// Message.
    #[serde(default)]
    pub message: Option<String>,
    /// End time.
    #[serde(default)]
    pub end_time: Option<String>,
}

/// A partial typed RayJob.
pub type RayJob = Object<RayJobSpec, RayJobStatus>;

/// The RayJob API resource.
pub fn rayjob_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ray.io", "v1", "RayJob"), "rayjobs")
}

/// The RayJobs of the `default` namespace.
pub fn rayjobs(client: &kube::Client) -> Api<RayJob> {
    Api::namespaced_with(client.clone(), "default", &rayjob_resource())
}

/// The RayJob's `jobDeploymentStatus` (empty before the first status).
pub fn deployment(rj: &RayJob) -> String {
    rj.status
        .as_ref()
        .and_then(|s| s.job_deployment_status.clone())
        .unwrap_or_default()
}

/// The pods of RayJob `name`'s submitter Job.
pub async fn submitter_pods(pods: &Api<Pod>, name: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}")))
        .await
        .expect("list submitter pods")
        .items
}

/// The log of the first pod of RayJob `name`'s submitter Job.
pub async fn submitter_log(pods: &Api<Pod>, name: &str) -> String {
    let pod = submitter_pods(pods, name)
        .await
        .first()
        .and_then(|p| p.metadata.name.clone())
        .unwrap_or_default();
    pods.logs(&pod, &LogParams::default())
        .await
        .expect("submitter log")
}

/// A RayJob like TunePlane renders: head + one worker group on `series` with `gpus` per node.
pub fn rayjob(name: &str, series: &str, gpus: u32, workers: u32) -> RayJob {
    let group = |replicas: Option<u32>| {
        let mut g = json!({
            "rayStartParams": {"num-gpus": gpus.to_string(), "resources": "'{\"tuneplane.pool.main\": 1}'"},
            "template": {"spec": {
                "nodeSelector": {"tuneplane/gpu-series": series},
                "containers": [{"name": "ray", "image": "ghcr.io/acme/train:1", "resources": {"limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": gpus.to_string()}}}],
            }},
        });
        if let Some(r) = replicas {
            g["groupName"] = json!("main");
            g["replicas"] = json!(r);
            g["minReplicas"] = json!(r);
            g["maxReplicas"] = json!(r);
        }
        g
    };
    let spec = RayJobSpec {
        entrypoint: "python .tuneplane/runner.pex".into(),
        runtime_env_yaml: Some("working_dir: https://example.invalid/capsule.zip\n".into()),
        shutdown_after_job_finishes: Some(true),
        ttl_seconds_after_finished: Some(1),
        backoff_limit: Some(0),
        submission_mode: Some("K8sJobMode".into()),
        ray_cluster_spec: Some(
            json!({"headGroupSpec": group(None), "workerGroupSpecs": [group(Some(workers))]}),
        ),
        ..RayJobSpec::default()
    };
    RayJob::new(name, &rayjob_resource(), spec)
}
