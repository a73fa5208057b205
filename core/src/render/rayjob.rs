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
/// Name of the head pod's container whose log is the driver's (`ray_driver_log.py`).
pub const DRIVER_LOG_CONTAINER: &str = "ray-driver-log";
/// The driver log follower's program (Python standard library only).
pub const DRIVER_LOG_SCRIPT: &str = include_str!("ray_driver_log.py");
/// Where Ray keeps its sessions and logs: an emptyDir shared by the head and the follower.
const RAY_DIR: &str = "/tmp/ray";
/// Name of that volume.
const RAY_DIR_VOLUME: &str = "ray-dir";

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

/// The head pod's driver log follower (see `ray_driver_log.py`): the driver's output, grace-time
/// lines included, as a container log. It requests nothing, as the gate.
fn driver_log_container(job: &JobRecord) -> Value {
    json!({
        "name": DRIVER_LOG_CONTAINER,
        "image": job.spec.image,
        "command": ["python", "-c", DRIVER_LOG_SCRIPT],
        "env": [
            {"name": "TUNEPLANE_DRIVER_SUBMISSION_ID", "value": job_workload_name(job)},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ],
        "volumeMounts": [{"name": RAY_DIR_VOLUME, "mountPath": RAY_DIR}],
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
    let mut mounts = Vec::new();
    if settings.delivery == CapsuleDelivery::InitContainer {
        mounts.push(json!({"name": "tuneplane-capsule", "mountPath": RAY_CAPSULE_DIR}));
    }
    if head {
        mounts.push(json!({"name": RAY_DIR_VOLUME, "mountPath": RAY_DIR}));
    }
    if !mounts.is_empty() {
        c["volumeMounts"] = Value::Array(mounts);
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
    let mut volumes = Vec::new();
    if head {
        containers.push(gate_container(job));
        containers.push(driver_log_container(job));
        volumes.push(json!({"name": RAY_DIR_VOLUME, "emptyDir": {}}));
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
        volumes.push(json!({"name": "tuneplane-capsule", "emptyDir": {}}));
        spec["initContainers"] = json!([{
            "name": FETCH_CONTAINER,
            "image": job.spec.image,
            "command": ["bash", "-c", ray_fetch_script(&capsule.sha256)],
            "env": [{"name": URL_ENV, "value": capsule.url}, {"name": SHA_ENV, "value": capsule.sha256}],
            "volumeMounts": [{"name": "tuneplane-capsule", "mountPath": RAY_CAPSULE_DIR}],
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        }]);
    }
    if !volumes.is_empty() {
        spec["volumes"] = Value::Array(volumes);
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::render::fixtures::*;
    use crate::render::*;

    #[test]
    fn rayjob_head_is_machine_zero_of_the_primary_pool_with_a_worker_group_per_pool() {
        let rj = render_rayjob_json(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
        assert_eq!(at(&rj, "/metadata/name"), "tp-j-01abc");
        assert_eq!(at(&rj, "/metadata/labels/tuneplane.io~1job-id"), "j-01abc");
        assert_eq!(
            at(&rj, "/metadata/labels/app.kubernetes.io~1managed-by"),
            "tuneplane"
        );
        assert_eq!(at(&rj, "/metadata/labels/team"), "nlp");
        let spec = at(&rj, "/spec");
        assert_eq!(spec["entrypoint"], "python .tuneplane/runner.pex");
        assert_eq!(
            (
                spec["shutdownAfterJobFinishes"].clone(),
                spec["backoffLimit"].clone()
            ),
            (json!(true), json!(0))
        );
        assert_eq!(spec["activeDeadlineSeconds"], 86400);
        assert_eq!(spec["submissionMode"], "K8sJobMode");
        assert_eq!(spec["submitterConfig"]["backoffLimit"], 0);
        assert!(spec["ttlSecondsAfterFinished"].as_u64().unwrap_or(0) > 0);

        let head = at(spec, "/rayClusterSpec/headGroupSpec");
        assert_eq!(
            at(head, "/template/spec/nodeSelector/tuneplane~1gpu-series"),
            "h200"
        );
        assert_eq!(
            at(
                head,
                "/template/spec/containers/0/resources/limits/nvidia.com~1gpu"
            ),
            "8"
        );
        assert_eq!(at(head, "/rayStartParams/num-gpus"), "8");
        assert_eq!(
            at(head, "/rayStartParams/resources"),
            "'{\"tuneplane.pool.main\": 1}'"
        );
        // The head Service's `dashboard` port is the gate's; Ray's own dashboard stays on 8265.
        let ports = at(head, "/template/spec/containers/0/ports");
        let dashboard = ports
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == "dashboard");
        assert_eq!(
            dashboard.map(|p| p["containerPort"].clone()),
            Some(json!(rayjob::GATE_PORT))
        );
        assert_eq!(at(head, "/rayStartParams/dashboard-port"), "8265");
        assert_eq!(
            at(head, "/template/spec/containers/1/name"),
            rayjob::GATE_CONTAINER
        );
        // Every Ray container, the gate and the submitter take the job's token from its Secret.
        let secret = rayjob::auth_secret_name("tp-j-01abc");
        let token_refs = |c: &Value| -> Vec<String> {
            c["env"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| {
                    e.pointer("/valueFrom/secretKeyRef/name")?
                        .as_str()
                        .map(str::to_owned)
                })
                .collect()
        };
        let mut containers = vec![
            at(head, "/template/spec/containers/0").clone(),
            at(head, "/template/spec/containers/1").clone(),
            at(spec, "/submitterPodTemplate/spec/containers/0").clone(),
        ];
        for w in at(spec, "/rayClusterSpec/workerGroupSpecs")
            .as_array()
            .into_iter()
            .flatten()
        {
            containers.push(w["template"]["spec"]["containers"][0].clone());
        }
        for c in &containers {
            assert_eq!(token_refs(c), std::slice::from_ref(&secret), "{c}");
            let mode = c["env"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|e| e["name"] == "RAY_AUTH_MODE");
            assert_eq!(
                mode.map(|e| e["value"].clone()),
                Some(json!("token")),
                "{c}"
            );
        }
        assert_eq!(at(spec, "/jobId"), "tp-j-01abc");
        let secret_object = rayjob::render_auth_secret(&gpu_job(), "t0k3n");
        assert_eq!(secret_object["metadata"]["name"], json!(secret));
        assert_eq!(secret_object["data"][rayjob::AUTH_SECRET_KEY], "dDBrM24=");

        let workers = at(spec, "/rayClusterSpec/workerGroupSpecs")
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(workers.len(), 2);
        assert_eq!(
            (
                workers[0]["groupName"].clone(),
                workers[0]["replicas"].clone()
            ),
            (json!("main"), json!(1))
        );
        assert_eq!(
            (
                workers[1]["groupName"].clone(),
                workers[1]["replicas"].clone()
            ),
            (json!("eval"), json!(1))
        );
        assert_eq!(
            at(
                &workers[1],
                "/template/spec/nodeSelector/tuneplane~1gpu-series"
            ),
            "l40s"
        );
        assert_eq!(
            at(
                &workers[1],
                "/template/spec/containers/0/resources/requests/cpu"
            ),
            "16500m"
        );
        assert_eq!(
            at(&workers[1], "/rayStartParams/resources"),
            "'{\"tuneplane.pool.eval\": 1}'"
        );
        assert_eq!(
            at(&workers[1], "/template/metadata/annotations").get(ADMITTED_GPUS_ANNOTATION),
            Some(&json!("4"))
        );

        let env: Value = yaml_serde::from_str(spec["runtimeEnvYAML"].as_str().unwrap_or_default())
            .unwrap_or_default();
        assert_eq!(env["working_dir"], json!(capsule().url));
        assert_eq!(env["env_vars"]["WANDB_MODE"], "offline");
        assert_eq!(env["env_vars"]["TUNEPLANE_JOB_ID"], "j-01abc");
    }

    #[test]
    fn without_gpu_passthrough_pods_request_no_gpus_but_ray_keeps_num_gpus() {
        let settings = RenderSettings {
            gpu_passthrough: false,
            ..RenderSettings::default()
        };
        let rj = render_rayjob_json(&gpu_job(), &capsule(), &settings).unwrap();
        assert!(
            !rj.to_string().contains("nvidia.com/gpu\":\""),
            "no GPU quantity anywhere"
        );
        assert_eq!(
            at(
                &rj,
                "/spec/rayClusterSpec/headGroupSpec/rayStartParams/num-gpus"
            ),
            "8"
        );
        let head = at(&rj, "/spec/rayClusterSpec/headGroupSpec/template");
        assert_eq!(
            at(head, "/metadata/annotations").get(ADMITTED_GPUS_ANNOTATION),
            Some(&json!("8"))
        );
    }

    #[test]
    fn init_container_delivery_fetches_into_a_shared_volume_and_uses_a_three_slash_file_url() {
        let settings = RenderSettings {
            delivery: CapsuleDelivery::InitContainer,
            ..RenderSettings::default()
        };
        let rj = render_rayjob_json(&gpu_job(), &capsule(), &settings).unwrap();
        let env: Value =
            yaml_serde::from_str(at(&rj, "/spec/runtimeEnvYAML").as_str().unwrap_or_default())
                .unwrap_or_default();
        assert_eq!(
            env["working_dir"],
            json!(format!("file:///tuneplane/capsule/{SHA}/capsule.zip"))
        );
        for group in [
            "/spec/rayClusterSpec/headGroupSpec",
            "/spec/rayClusterSpec/workerGroupSpecs/1",
        ] {
            let t = at(&rj, group);
            assert_eq!(
                at(t, "/template/spec/initContainers/0/name"),
                "fetch-capsule",
                "{group}"
            );
            assert_eq!(at(t, "/template/spec/volumes/0/emptyDir"), &json!({}));
            assert_eq!(
                at(t, "/template/spec/containers/0/volumeMounts/0/mountPath"),
                "/tuneplane/capsule"
            );
        }
    }

    #[test]
    fn every_rendered_rayjob_validates_against_the_kuberay_crd_schema() {
        let validator = jsonschema::validator_for(&rayjob_schema()).expect("schema");
        let variants = settings_variants();
        let single = job(
            json!([{"name": "main", "series": "h200", "nodes": 1, "gpus_per_node": 8, "cpus": 8.0, "memory_gb": 64.0}]),
        );
        for settings in &variants {
            for j in [gpu_job(), single.clone(), placed(gpu_job())] {
                let rj = render_rayjob_json(&j, &capsule(), settings).unwrap();
                let errors: Vec<String> = validator
                    .iter_errors(&rj)
                    .map(|e| format!("{} at {}", e, e.instance_path))
                    .collect();
                assert!(errors.is_empty(), "{settings:?}: {errors:#?}");
            }
        }
        // The validator is not vacuous: a wrong type is refused.
        let mut broken =
            render_rayjob_json(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
        broken["spec"]["backoffLimit"] = json!("zero");
        assert!(!validator.is_valid(&broken));
    }

    /// The paths of `value` the API server would prune under the structural `schema` (fields the
    /// CRD does not declare, where it neither preserves unknown fields nor takes any key).
    fn pruned_paths(value: &Value, schema: &Value, path: &str) -> Vec<String> {
        if schema["x-kubernetes-preserve-unknown-fields"] == json!(true) {
            return Vec::new();
        }
        match value {
            Value::Object(map) => map
                .iter()
                .flat_map(|(k, v)| {
                    let here = format!("{path}/{k}");
                    match (
                        schema["properties"].get(k),
                        schema.get("additionalProperties"),
                    ) {
                        (Some(field), _) => pruned_paths(v, field, &here),
                        (None, Some(any)) if any.is_object() => pruned_paths(v, any, &here),
                        _ => vec![here],
                    }
                })
                .collect(),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .flat_map(|(i, v)| pruned_paths(v, &schema["items"], &format!("{path}/{i}")))
                .collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn the_api_server_prunes_nothing_of_a_rendered_rayjob_spec() {
        let schema = rayjob_schema();
        let spec_schema = &schema["properties"]["spec"];
        for settings in &settings_variants() {
            let mut with_grants = settings.clone();
            with_grants.api_url = Some("https://api.example".into());
            for s in [settings, &with_grants] {
                for j in [gpu_job(), placed(gpu_job())] {
                    let rj = render_rayjob_json(&j, &capsule(), s).unwrap();
                    let pruned = pruned_paths(&rj["spec"], spec_schema, "/spec");
                    assert_eq!(pruned, Vec::<String>::new(), "{s:?}");
                }
            }
        }
        // The check is not vacuous: a field the CRD does not know is found, nested or not.
        let mut extra =
            render_rayjob_json(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
        extra["spec"]["someFutureField"] = json!(1);
        extra["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["bogus"] =
            json!(2);
        assert_eq!(
            pruned_paths(&extra["spec"], spec_schema, "/spec"),
            [
                "/spec/rayClusterSpec/headGroupSpec/template/spec/containers/0/bogus",
                "/spec/someFutureField"
            ]
        );
    }

    #[test]
    fn every_group_is_pinned_to_its_planned_nodes_one_pod_per_node() {
        let rj =
            render_rayjob_json(&placed(gpu_job()), &capsule(), &RenderSettings::default()).unwrap();
        let terms = "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0";
        let head = at(&rj, "/spec/rayClusterSpec/headGroupSpec/template/spec");
        let main = at(&rj, "/spec/rayClusterSpec/workerGroupSpecs/0/template/spec");
        let eval = at(&rj, "/spec/rayClusterSpec/workerGroupSpecs/1/template/spec");
        for spec in [head, main] {
            assert_eq!(at(spec, &format!("{terms}/key")), HOSTNAME_LABEL);
            assert_eq!(at(spec, &format!("{terms}/operator")), "In");
            assert_eq!(
                at(spec, &format!("{terms}/values")),
                &json!(["main-0", "main-1"])
            );
            // The head and the main workers share the pool's nodes, one pod on each.
            let anti = at(
                spec,
                "/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution/0",
            );
            assert_eq!(at(anti, "/topologyKey"), HOSTNAME_LABEL);
            assert_eq!(
                at(anti, "/labelSelector/matchLabels"),
                &json!({"tuneplane.io/job-id": "j-01abc", "tuneplane.io/pool": "main"})
            );
        }
        assert_eq!(at(eval, &format!("{terms}/values")), &json!(["eval-0"]));
        assert!(
            at(eval, "/affinity/podAntiAffinity").is_null(),
            "a one-machine pool needs no anti-affinity"
        );
        // Without a plan (rendered before admission) nothing is pinned.
        let unplanned =
            render_rayjob_json(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
        assert!(
            at(
                &unplanned,
                "/spec/rayClusterSpec/headGroupSpec/template/spec/affinity"
            )
            .is_null()
        );

        let pod = render_pod(&placed(cpu_job()), &capsule(), &RenderSettings::default()).unwrap();
        assert_eq!(
            at(&pod, &format!("/spec{terms}/values")),
            &json!(["main-0"])
        );
    }
}
