//! The KubeRay `RayJob` of a GPU job (docs/design.md §5).
//!
//! The head is machine zero of the primary pool (same image, series, GPUs); the primary pool's
//! worker group has `nodes - 1` replicas and every further pool gets a group with `nodes`
//! replicas. Each group is pinned with a Ray custom resource `tuneplane.pool.<name>` written in the
//! single-quoted JSON form KubeRay pastes into `ray start`, and `num-gpus` is always explicit.
//! Every group's pods are pinned to the nodes admission planned for the pool (the head shares the
//! primary pool's nodes with its workers), one pod per node.
//!
//! Ray runs with token authentication: every Ray container, KubeRay's submitter and the head's
//! dashboard gate get `RAY_AUTH_MODE=token` and the job's token from the Secret the reconciler
//! creates beside the RayJob ([`auth_secret_name`]); the head Service's `dashboard` port is the
//! gate (`ray_gate.py`), which lets the operator read the job's status and nothing else without
//! the token (KubeRay v1.4 cannot send one).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::bootstrap::{FETCH_CONTAINER, RAY_CAPSULE_DIR, SHA_ENV, URL_ENV, ray_fetch_script};
use super::kuberay::{
    self, HeadGroupSpec, RayClusterSpec, RayJob, RayJobSpec, RenderedMeta, SubmitterConfig,
    WorkerGroupSpec,
};
use super::{
    CapsuleDelivery, CapsuleRef, RenderError, RenderSettings, check_capsule, cpu_quantity,
    grant_env, harden, job_annotations, job_env, job_labels, job_workload_name, memory_quantity,
    placement_affinity, termination_grace_seconds, tolerations,
};
use crate::capacity_compute::ADMITTED_GPUS_ANNOTATION;
use crate::constants::{GPU_RESOURCE, POOL_LABEL, SERIES_LABEL};
use crate::job::JobRecord;
use crate::spec::{Pool, WorkloadKind};

/// The entrypoint every RayJob runs (in the capsule root, which Ray makes the working directory).
pub const ENTRYPOINT: &str = "python .tuneplane/runner.pex";

/// Key of the token in the job's Ray auth Secret.
pub const AUTH_SECRET_KEY: &str = "token";
/// Port of the dashboard gate: the head Service's `dashboard` port.
pub const GATE_PORT: u16 = 8270;
/// Port of Ray's own dashboard (token required; KubeRay's probes read its exempt health paths).
pub const RAY_DASHBOARD_PORT: u16 = 8265;
/// Name of the head pod's gate container.
pub const GATE_CONTAINER: &str = "ray-auth-gate";
/// The gate's program (Python standard library only).
pub const GATE_SCRIPT: &str = include_str!("ray_gate.py");

/// Name of the Secret holding the Ray token of the job whose workload is `workload`.
pub fn auth_secret_name(workload: &str) -> String {
    format!("{workload}-ray-auth")
}

/// The Secret holding `token`, the Ray token of `job` (the reconciler creates it before the
/// RayJob and deletes it with the workload).
pub fn render_auth_secret(job: &JobRecord, token: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": auth_secret_name(&job_workload_name(job)),
            "namespace": job.spec.namespace,
            "labels": job_labels(job),
        },
        "type": "Opaque",
        // `data`, base64: what the API server stores (it turns `stringData` into this).
        "data": { AUTH_SECRET_KEY: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, token) },
    })
}

/// The environment that puts Ray in token mode with the job's token.
fn auth_env(job: &JobRecord) -> Vec<Value> {
    let secret = auth_secret_name(&job_workload_name(job));
    vec![
        json!({"name": "RAY_AUTH_MODE", "value": "token"}),
        json!({"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": AUTH_SECRET_KEY}}}),
    ]
}

/// The head pod's gate in front of Ray's dashboard (see the module docs). It requests nothing:
/// the pod's requests stay those admission planned.
fn gate_container(job: &JobRecord) -> Value {
    let mut env = auth_env(job);
    env.extend([
        json!({"name": "TUNEPLANE_GATE_SUBMISSION_ID", "value": job_workload_name(job)}),
        json!({"name": "TUNEPLANE_GATE_PORT", "value": GATE_PORT.to_string()}),
        json!({"name": "TUNEPLANE_GATE_UPSTREAM_PORT", "value": RAY_DASHBOARD_PORT.to_string()}),
        json!({"name": "PYTHONUNBUFFERED", "value": "1"}),
    ]);
    json!({
        "name": GATE_CONTAINER,
        "image": job.spec.image,
        "command": ["python", "-c", GATE_SCRIPT],
        "env": env,
        "ports": [{"name": "gate", "containerPort": GATE_PORT}],
    })
}

/// The submitter's environment: the Ray token, and the grant too (kubesim's one-node stand-in
/// runs the driver in the submitter pod; on a real cluster the driver runs on the head).
fn submitter_env(job: &JobRecord, settings: &RenderSettings) -> Vec<Value> {
    let mut env = auth_env(job);
    env.extend(grant_env(job, settings));
    env
}

/// KubeRay's submitter pod: the job's image (which has Ray's CLI), the token, and KubeRay's
/// default command (`ray job submit` through the gate, with the token).
fn submitter_template(job: &JobRecord, settings: &RenderSettings) -> Value {
    let mut spec = json!({
        "restartPolicy": "Never",
        "tolerations": tolerations(settings),
        "containers": [{
            "name": "ray-job-submitter",
            "image": job.spec.image,
            "env": submitter_env(job, settings),
            "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        }],
    });
    harden(&mut spec);
    // No platform labels: the submitter is found through its Job (`job-name`, its controller),
    // as with KubeRay's default template, and is not one of the job's Ray pods.
    json!({"spec": spec})
}

/// Name of the Ray custom resource that pins work to a pool.
pub fn pool_resource(pool: &str) -> String {
    format!("tuneplane.pool.{pool}")
}

/// `working_dir` of the runtime env for this delivery mode.
pub fn working_dir(capsule: &CapsuleRef, delivery: CapsuleDelivery) -> String {
    match delivery {
        CapsuleDelivery::Presigned => capsule.url.clone(),
        // Exactly three slashes: an absolute path that exists on every Ray pod.
        CapsuleDelivery::InitContainer => {
            format!("file://{RAY_CAPSULE_DIR}/{}/capsule.zip", capsule.sha256)
        }
    }
}

fn runtime_env_yaml(job: &JobRecord, capsule: &CapsuleRef, settings: &RenderSettings) -> String {
    let env: serde_json::Map<String, Value> = job_env(job)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let doc = json!({"working_dir": working_dir(capsule, settings.delivery), "env_vars": env});
    // A JSON document of strings always serialises to YAML.
    yaml_serde::to_string(&doc).unwrap_or_default()
}

fn container(job: &JobRecord, pool: &Pool, head: bool, settings: &RenderSettings) -> Value {
    let (cpu, mem) = (cpu_quantity(pool.cpus), memory_quantity(pool.memory_gb));
    let mut limits = json!({"cpu": cpu, "memory": mem});
    if settings.gpu_passthrough && pool.gpus_per_node > 0 {
        limits[GPU_RESOURCE] = json!(pool.gpus_per_node.to_string());
    }
    let mut env = auth_env(job);
    if head {
        // The driver (the runner) runs on the head: it inherits the head's environment, so the
        // grant reaches it without appearing in the RayJob's runtime env. Ray's own job stop
        // (SIGTERM, then SIGKILL after this many seconds) leaves the entrypoint its grace.
        env.extend(grant_env(job, settings));
        env.push(json!({"name": "RAY_JOB_STOP_WAIT_TIME_S", "value": job.spec.deadlines.grace_seconds.to_string()}));
    }
    let mut c = json!({
        "name": if head { "ray-head" } else { "ray-worker" },
        "image": job.spec.image,
        "env": env,
        "resources": {"requests": {"cpu": cpu, "memory": mem}, "limits": limits},
    });
    if head {
        // KubeRay makes the head Service's ports from these: `dashboard` is the gate's.
        c["ports"] = json!([
            {"name": "gcs-server", "containerPort": 6379},
            {"name": "dashboard", "containerPort": GATE_PORT},
            {"name": "client", "containerPort": 10001},
        ]);
    }
    if settings.delivery == CapsuleDelivery::InitContainer {
        c["volumeMounts"] = json!([{"name": "tuneplane-capsule", "mountPath": RAY_CAPSULE_DIR}]);
    }
    c
}

fn group_template(
    job: &JobRecord,
    pool: &Pool,
    head: bool,
    capsule: &CapsuleRef,
    settings: &RenderSettings,
) -> Value {
    let mut labels = job_labels(job);
    labels.insert(POOL_LABEL.into(), json!(pool.name));
    let mut containers = vec![container(job, pool, head, settings)];
    if head {
        containers.push(gate_container(job));
    }
    let mut spec = json!({
        "containers": containers,
        "tolerations": tolerations(settings),
    });
    if let Some(series) = &pool.series {
        spec["nodeSelector"] = json!({ SERIES_LABEL: series });
    }
    if let Some(affinity) = placement_affinity(job, pool) {
        spec["affinity"] = affinity;
    }
    if settings.delivery == CapsuleDelivery::InitContainer {
        spec["volumes"] = json!([{"name": "tuneplane-capsule", "emptyDir": {}}]);
        spec["initContainers"] = json!([{
            "name": FETCH_CONTAINER,
            "image": job.spec.image,
            "command": ["bash", "-c", ray_fetch_script(&capsule.sha256)],
            "env": [{"name": URL_ENV, "value": capsule.url}, {"name": SHA_ENV, "value": capsule.sha256}],
            "volumeMounts": [{"name": "tuneplane-capsule", "mountPath": RAY_CAPSULE_DIR}],
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        }]);
    }
    spec["terminationGracePeriodSeconds"] = json!(termination_grace_seconds(job));
    harden(&mut spec);
    json!({
        "metadata": {
            "labels": labels,
            "annotations": { ADMITTED_GPUS_ANNOTATION: pool.gpus_per_node.to_string() },
        },
        "spec": spec,
    })
}

fn start_params(pool: &Pool, head: bool) -> BTreeMap<String, String> {
    // Single-quoted JSON: KubeRay pastes the value into a bash command line as-is.
    let resources = format!("'{{\"{}\": 1}}'", pool_resource(&pool.name));
    let mut p = BTreeMap::from([
        ("num-gpus".to_owned(), pool.gpus_per_node.to_string()),
        ("resources".to_owned(), resources),
    ]);
    if head {
        p.insert("dashboard-host".to_owned(), "0.0.0.0".to_owned());
        p.insert("dashboard-port".to_owned(), RAY_DASHBOARD_PORT.to_string());
    }
    p
}

fn worker_group(
    job: &JobRecord,
    pool: &Pool,
    replicas: u32,
    capsule: &CapsuleRef,
    settings: &RenderSettings,
) -> WorkerGroupSpec {
    let replicas = Some(i64::from(replicas));
    WorkerGroupSpec {
        group_name: pool.name.clone(),
        replicas,
        min_replicas: replicas,
        max_replicas: replicas,
        ray_start_params: start_params(pool, false),
        template: group_template(job, pool, false, capsule, settings),
        extra: BTreeMap::new(),
    }
}

/// Renders the RayJob of `job` (a GPU job) that downloads `capsule`: the typed object the
/// reconciler creates and `tuneplane render` prints ([`RayJob::to_json`]).
pub fn render_rayjob(
    job: &JobRecord,
    capsule: &CapsuleRef,
    settings: &RenderSettings,
) -> Result<RayJob, RenderError> {
    let shape = |message: &str| RenderError::Shape {
        job_id: job.id.clone(),
        message: message.to_owned(),
    };
    if job.spec.kind() != WorkloadKind::RayJob {
        return Err(shape("a CPU-only job becomes a Pod, not a RayJob"));
    }
    let primary = job
        .spec
        .pools
        .first()
        .ok_or_else(|| shape("job has no pools"))?;
    check_capsule(job, capsule)?;
    let mut workers = vec![worker_group(
        job,
        primary,
        primary.nodes.saturating_sub(1),
        capsule,
        settings,
    )];
    for pool in &job.spec.pools[1..] {
        workers.push(worker_group(job, pool, pool.nodes, capsule, settings));
    }
    let strings = |map: serde_json::Map<String, Value>| -> BTreeMap<String, String> {
        map.into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect()
    };
    let annotations = match job_annotations(job) {
        Value::Object(map) => strings(map),
        _ => BTreeMap::new(),
    };
    Ok(RayJob {
        api_version: kuberay::API_VERSION.to_owned(),
        kind: kuberay::KIND.to_owned(),
        metadata: RenderedMeta {
            name: job_workload_name(job),
            namespace: job.spec.namespace.clone(),
            labels: strings(job_labels(job)),
            annotations,
        },
        spec: RayJobSpec {
            entrypoint: Some(ENTRYPOINT.to_owned()),
            runtime_env_yaml: Some(runtime_env_yaml(job, capsule, settings)),
            shutdown_after_job_finishes: Some(true),
            ttl_seconds_after_finished: Some(i64::from(settings.ttl_after_finished_seconds.max(1))),
            active_deadline_seconds: Some(
                i64::try_from(job.spec.deadlines.run_seconds.min(i32::MAX as u64))
                    .unwrap_or(i64::from(i32::MAX)),
            ),
            backoff_limit: Some(0),
            submission_mode: Some("K8sJobMode".to_owned()),
            // The gate answers the operator for this submission id only.
            job_id: Some(job_workload_name(job)),
            submitter_config: Some(SubmitterConfig {
                backoff_limit: Some(0),
                extra: BTreeMap::new(),
            }),
            submitter_pod_template: Some(submitter_template(job, settings)),
            ray_cluster_spec: Some(RayClusterSpec {
                head_group_spec: Some(HeadGroupSpec {
                    ray_start_params: start_params(primary, true),
                    template: group_template(job, primary, true, capsule, settings),
                    extra: BTreeMap::new(),
                }),
                worker_group_specs: workers,
                extra: BTreeMap::new(),
            }),
            extra: BTreeMap::new(),
        },
    })
}
