//! Rendering of the Kubernetes objects TunePlane creates (docs/design.md §5), as pure functions.
//!
//! - [`rayjob::render_rayjob`]: a KubeRay `ray.io/v1` RayJob for any job with GPUs, typed
//!   ([`kuberay::RayJob`]: the reconciler creates that very spec, `tuneplane render` prints it);
//! - [`pod::render_pod`]: a plain Pod for a CPU-only custom job;
//! - [`playground::render_playground`]: a standalone vLLM Pod.
//!
//! Pods, Secrets and NetworkPolicies are `serde_json::Value` in the exact Kubernetes shape, so core
//! needs no kube crates; the reconciler reads them into k8s-openapi's types at the edge (core's
//! tests round-trip every one through those types, so no field is lost there).
//! Everything that varies by installation is in [`RenderSettings`], parsed once by the binaries.

pub mod bootstrap;
pub mod egress;
pub mod kuberay;
pub mod network;
pub mod playground;
pub mod pod;
pub mod rayjob;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::constants::{
    CAPSULE_ANNOTATION, JOB_ID_LABEL, MANAGED_BY, MANAGED_BY_LABEL, TENANT_LABEL,
};
use crate::job::JobRecord;

pub use playground::render_playground;
pub use pod::render_pod;
pub use rayjob::render_rayjob;

/// Longest workload name KubeRay accepts for a RayJob.
pub const MAX_WORKLOAD_NAME: usize = 47;

/// `1` (default): pods request `nvidia.com/gpu`; `0`: they do not (kind/CI), Ray keeps `num-gpus`.
/// Read by the reconciler's config and by `tuneplane render` (one name, one parser:
/// [`parse_gpu_passthrough`]).
pub const ENV_GPU_PASSTHROUGH: &str = "TUNEPLANE_K8S_GPU_PASSTHROUGH";
/// `presigned` (default) or `init-container` ([`CapsuleDelivery::parse`]).
pub const ENV_CAPSULE_DELIVERY: &str = "TUNEPLANE_CAPSULE_DELIVERY";

/// A [`ENV_GPU_PASSTHROUGH`] value: `1`/`true` or `0`/`false` (surrounding blanks ignored).
pub fn parse_gpu_passthrough(raw: &str) -> Option<bool> {
    match raw.trim() {
        "1" | "true" => Some(true),
        "0" | "false" => Some(false),
        _ => None,
    }
}

/// How workloads get the capsule (docs/design.md §4), `TUNEPLANE_CAPSULE_DELIVERY`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CapsuleDelivery {
    /// Ray downloads the presigned HTTPS URL itself (`working_dir: https://...zip`).
    #[default]
    Presigned,
    /// An init container downloads and verifies it onto a shared `emptyDir` (`file:///...`).
    InitContainer,
}

impl CapsuleDelivery {
    /// Parses `presigned` or `init-container`.
    pub fn parse(s: &str) -> Option<CapsuleDelivery> {
        match s {
            "presigned" => Some(CapsuleDelivery::Presigned),
            "init-container" => Some(CapsuleDelivery::InitContainer),
            _ => None,
        }
    }
}

/// A Kubernetes toleration, as in a Pod spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// Taint key (empty with `Exists` tolerates everything).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// `Equal` or `Exists`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operator: String,
    /// Taint value for `Equal`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Effect to tolerate; empty tolerates every effect.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub effect: String,
}

/// Installation-wide rendering settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RenderSettings {
    /// Request `nvidia.com/gpu` in container limits (`TUNEPLANE_K8S_GPU_PASSTHROUGH`, default true).
    pub gpu_passthrough: bool,
    /// How the capsule reaches the workload.
    pub delivery: CapsuleDelivery,
    /// Tolerations added to every workload (the fleet's GPU taints).
    pub tolerations: Vec<Toleration>,
    /// RayJob `ttlSecondsAfterFinished`: only a fallback, the reconciler deletes first.
    pub ttl_after_finished_seconds: u32,
    /// Image of playground pods.
    pub playground_image: String,
    /// Who may reach a job's dashboard gate besides its own pods (its NetworkPolicy).
    pub network: network::NetworkSettings,
    /// The API's base URL as the job's pods reach it, when attempts get grants to write their
    /// outputs and checkpoints (the reconciler's `TUNEPLANE_API_URL` with a grant key): the
    /// runner's `TUNEPLANE_API_URL`, with the attempt's token from its grant Secret (a RayJob)
    /// or sealed in its spec (a CPU job's Pod).
    pub api_url: Option<String>,
    /// The key attempts' grants are signed with (with `api_url`; both or neither): a CPU job's
    /// Pod carries its grant sealed ([`crate::grant::SealKey`]). Never serialized.
    #[serde(skip)]
    pub grant_key: Option<crate::grant::GrantKey>,
}

impl Default for RenderSettings {
    fn default() -> Self {
        RenderSettings {
            gpu_passthrough: true,
            delivery: CapsuleDelivery::Presigned,
            tolerations: vec![Toleration {
                key: crate::constants::GPU_RESOURCE.to_owned(),
                operator: "Exists".to_owned(),
                effect: "NoSchedule".to_owned(),
                ..Toleration::default()
            }],
            ttl_after_finished_seconds: 3600,
            playground_image: "vllm/vllm-openai:v0.14.1".to_owned(),
            network: network::NetworkSettings::default(),
            api_url: None,
            grant_key: None,
        }
    }
}

/// Where the workload downloads the capsule from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapsuleRef {
    /// SHA-256 (hex) of the capsule zip.
    pub sha256: String,
    /// A URL that serves the zip (presigned; its path ends in `.zip`).
    pub url: String,
}

/// A job that cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// The job has no pools, or its shape does not match the workload kind.
    #[error("job {job_id}: {message}")]
    Shape {
        /// Job that was being rendered.
        job_id: String,
        /// What is wrong.
        message: String,
    },
    /// The capsule reference is unusable (Ray needs a `.zip` URL path, hex SHA-256).
    #[error("job {job_id}: capsule {what}")]
    Capsule {
        /// Job that was being rendered.
        job_id: String,
        /// What is wrong.
        what: String,
    },
}

/// The deterministic workload name of a job: `tp-<job id>` when the id is already a short
/// lower-case DNS label, else `tp-` and 16 hex digits of its SHA-256. DNS-1035, at most 47 chars.
pub fn workload_name(job_id: &str) -> String {
    let plain = job_id.len() <= MAX_WORKLOAD_NAME - 3
        && job_id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !job_id.ends_with('-')
        && !job_id.is_empty();
    if plain {
        format!("tp-{job_id}")
    } else {
        let digest = hex::encode(Sha256::digest(job_id.as_bytes()));
        format!("tp-{}", &digest[..16])
    }
}

/// The workload name of attempt `attempt` of a job: [`workload_name`] for the first, with
/// `-a<N>` after it for a later one (`tp-abc-a2`), so each attempt has a workload (and pods,
/// Secrets, Ray job id) of its own. Still DNS-1035 and at most 47 characters: an id too long for
/// the suffix uses the digest form.
pub fn attempt_workload_name(job_id: &str, attempt: u32) -> String {
    let base = workload_name(job_id);
    if attempt <= 1 {
        return base;
    }
    let name = format!("{base}-a{attempt}");
    if name.len() <= MAX_WORKLOAD_NAME {
        return name;
    }
    let digest = hex::encode(Sha256::digest(job_id.as_bytes()));
    format!("tp-{}-a{attempt}", &digest[..16])
}

/// The workload name of `job`'s current attempt.
pub fn job_workload_name(job: &JobRecord) -> String {
    attempt_workload_name(&job.id, job.attempt)
}

/// The attempt a workload named `name` belongs to for job `job_id`, when it is one of the
/// job's workloads.
pub fn attempt_of_workload(job_id: &str, name: &str) -> Option<u32> {
    if name == workload_name(job_id) {
        return Some(1);
    }
    let (_, n) = name.rsplit_once("-a")?;
    let attempt: u32 = n.parse().ok()?;
    (attempt >= 2 && attempt_workload_name(job_id, attempt) == name).then_some(attempt)
}

/// Labels every workload of `job` carries: the user's labels, then the platform's (which win).
pub fn job_labels(job: &JobRecord) -> serde_json::Map<String, Value> {
    let mut labels: serde_json::Map<String, Value> = job
        .spec
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    labels.insert(JOB_ID_LABEL.into(), json!(label_value(&job.id)));
    labels.insert(TENANT_LABEL.into(), json!(label_value(&job.tenant)));
    labels.insert(MANAGED_BY_LABEL.into(), json!(MANAGED_BY));
    labels
}

/// Annotations of a job's workload.
pub fn job_annotations(job: &JobRecord) -> Value {
    json!({ CAPSULE_ANNOTATION: job.capsule_sha256 })
}

/// A valid label value from an arbitrary string: at most 63 chars of `[A-Za-z0-9._-]`, alphanumeric ends.
pub fn label_value(s: &str) -> String {
    let cleaned: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    cleaned
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// A CPU quantity in millicores (`"500m"`) or whole cores (`"8"`).
pub fn cpu_quantity(cores: f64) -> String {
    let milli = (cores * 1000.0).round().max(0.0) as u64;
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// A memory quantity in MiB (`"65536Mi"`) or GiB when whole (`"64Gi"`).
pub fn memory_quantity(gb: f64) -> String {
    let mib = (gb * 1024.0).round().max(0.0) as u64;
    if mib.is_multiple_of(1024) {
        format!("{}Gi", mib / 1024)
    } else {
        format!("{mib}Mi")
    }
}

/// The job environment handed to the entrypoint: the spec's env plus `TUNEPLANE_JOB_ID`.
pub fn job_env(job: &JobRecord) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = job
        .spec
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.push(("TUNEPLANE_JOB_ID".into(), job.id.clone()));
    env.push(("TUNEPLANE_TENANT".into(), job.tenant.to_string()));
    env.push(("TUNEPLANE_ATTEMPT".into(), job.attempt.to_string()));
    env
}

/// Key of the token in an attempt's grant Secret.
pub const GRANT_SECRET_KEY: &str = "token";

/// Name of the Secret holding the grant of the attempt whose workload is `workload`.
pub fn grant_secret_name(workload: &str) -> String {
    format!("{workload}-grant")
}

/// The Secret holding `token`, the grant of `job`'s current attempt (created before the
/// workload, deleted with it).
pub fn render_grant_secret(job: &JobRecord, token: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": grant_secret_name(&job_workload_name(job)),
            "namespace": job.spec.namespace,
            "labels": job_labels(job),
        },
        "type": "Opaque",
        "data": { GRANT_SECRET_KEY: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, token) },
    })
}

/// The environment that lets the runner write the attempt's outputs and checkpoints: the API's
/// URL and the grant token from the attempt's Secret. Empty when grants are off.
pub fn grant_env(job: &JobRecord, settings: &RenderSettings) -> Vec<Value> {
    let Some(url) = &settings.api_url else {
        return Vec::new();
    };
    let secret = grant_secret_name(&job_workload_name(job));
    vec![
        json!({"name": "TUNEPLANE_API_URL", "value": url}),
        json!({"name": "TUNEPLANE_GRANT", "valueFrom": {"secretKeyRef": {"name": secret, "key": GRANT_SECRET_KEY}}}),
    ]
}

/// Key of the seal key in a tenant's seal Secret.
pub const SEAL_SECRET_KEY: &str = "key";
/// Environment variable of a CPU job's Pod carrying its grant, sealed.
pub const GRANT_SEALED_ENV: &str = "TUNEPLANE_GRANT_SEALED";
/// Environment variable of a CPU job's Pod carrying its tenant's seal key (from the Secret).
pub const GRANT_SEAL_KEY_ENV: &str = "TUNEPLANE_GRANT_SEAL_KEY";
/// Label of a CPU job's Pod whose grant is sealed in its spec (no grant Secret of its own to
/// delete with it), value `sealed`.
pub const GRANT_LABEL: &str = "tuneplane.io/grant";

/// The Secret holding `tenant`'s seal key in `namespace` (made once, shared by the tenant's CPU
/// jobs there; never deleted by a job).
pub fn render_seal_secret(namespace: &str, tenant: &str, seal: &crate::grant::SealKey) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": seal.secret_name(tenant),
            "namespace": namespace,
            "labels": { crate::constants::MANAGED_BY_LABEL: crate::constants::MANAGED_BY },
        },
        "type": "Opaque",
        "data": { SEAL_SECRET_KEY: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, seal.to_hex()) },
    })
}

/// A CPU job's grant environment: the API's URL, the attempt's token sealed under its tenant's
/// seal key, and that key from the tenant's seal Secret; the Pod's bootstrap unseals it into
/// `TUNEPLANE_GRANT` for the runner. Empty when grants are off.
pub fn sealed_grant_env(job: &JobRecord, settings: &RenderSettings) -> Vec<Value> {
    let (Some(url), Some(key)) = (&settings.api_url, &settings.grant_key) else {
        return Vec::new();
    };
    let seal = key.seal_key(&job.spec.namespace, &job.tenant);
    let sealed = seal.seal(&job.id, job.attempt, &key.token(&job.id, job.attempt));
    vec![
        json!({"name": "TUNEPLANE_API_URL", "value": url}),
        json!({"name": GRANT_SEALED_ENV, "value": sealed}),
        json!({"name": GRANT_SEAL_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": seal.secret_name(&job.tenant), "key": SEAL_SECRET_KEY}}}),
    ]
}

/// Checks a capsule reference for `job`.
pub fn check_capsule(job: &JobRecord, capsule: &CapsuleRef) -> Result<(), RenderError> {
    let bad = |what: &str| RenderError::Capsule {
        job_id: job.id.clone(),
        what: what.to_owned(),
    };
    if capsule.sha256.len() != 64 || !capsule.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad("sha256 must be 64 hex digits"));
    }
    let path = capsule.url.split(['?', '#']).next().unwrap_or_default();
    if !path.ends_with(".zip") {
        return Err(bad("URL path must end in .zip (Ray checks the path)"));
    }
    if !(capsule.url.starts_with("https://") || capsule.url.starts_with("http://")) {
        return Err(bad("URL must be http(s)"));
    }
    Ok(())
}

fn tolerations(settings: &RenderSettings) -> Value {
    json!(settings.tolerations)
}

/// Hardens a pod spec the platform renders (docs/design.md §5): no ServiceAccount token in the
/// pod, the runtime's default seccomp profile, and in every container and init container no
/// privilege escalation and no Linux capabilities. Within Pod Security `baseline` (the jobs
/// namespace enforces it) and, but for running as root, `restricted`.
pub fn harden(pod_spec: &mut Value) {
    pod_spec["automountServiceAccountToken"] = json!(false);
    pod_spec["securityContext"] = json!({"seccompProfile": {"type": "RuntimeDefault"}});
    for list in ["initContainers", "containers"] {
        if let Some(containers) = pod_spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in containers {
                c["securityContext"] = container_security();
            }
        }
    }
}

/// Seconds beyond `deadlines.grace_seconds` a stopped pod keeps before it is killed: the
/// runner's upload of the outputs and complete checkpoints after the entrypoint stopped.
pub const UPLOAD_GRACE_SECONDS: u64 = 30;

/// The `terminationGracePeriodSeconds` of `job`'s pods: the entrypoint's grace to save after
/// SIGTERM, then [`UPLOAD_GRACE_SECONDS`] for the runner's uploads.
pub fn termination_grace_seconds(job: &JobRecord) -> u64 {
    job.spec
        .deadlines
        .grace_seconds
        .saturating_add(UPLOAD_GRACE_SECONDS)
}

/// The securityContext of every container the platform renders.
pub fn container_security() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "privileged": false,
        "capabilities": {"drop": ["ALL"]},
    })
}

/// Node label the planned nodes are matched by.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The affinity that pins the pods of `pool` to the nodes admission planned for it: required
/// node affinity on their hostnames and, for a pool of several machines, required pod
/// anti-affinity between the pool's pods, so each machine gets its own planned node. `None` when
/// the job carries no plan for the pool (rendered before admission, e.g. by `tuneplane render`
/// without a fleet).
pub fn placement_affinity(job: &JobRecord, pool: &crate::spec::Pool) -> Option<Value> {
    let planned = job.placements.iter().find(|p| p.pool == pool.name)?;
    if planned.nodes.is_empty() {
        return None;
    }
    let mut affinity = json!({
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": planned.nodes}]}
        ]}},
    });
    if pool.nodes > 1 {
        affinity["podAntiAffinity"] = json!({"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {
                JOB_ID_LABEL: label_value(&job.id),
                crate::constants::POOL_LABEL: pool.name,
            }},
            "topologyKey": HOSTNAME_LABEL,
        }]});
    }
    Some(affinity)
}

#[cfg(test)]
mod tests {
    //! Unit tests of every renderer, and validation of rendered RayJobs against the KubeRay v1.4 CRD
    //! schema (folder from `TUNEPLANE_KUBERAY_SCHEMAS`, which the test command sets).

    use serde_json::{Value, json};

    use super::*;

    /// The rendered RayJob as JSON, as these tests read it (with JSON pointers).
    fn render_rayjob(
        job: &JobRecord,
        capsule: &CapsuleRef,
        settings: &RenderSettings,
    ) -> Result<Value, RenderError> {
        super::render_rayjob(job, capsule, settings).map(|rj| rj.to_json())
    }
    use crate::capacity_compute::ADMITTED_GPUS_ANNOTATION;
    use crate::spec::JobSpec;
    use crate::store::PlaygroundRecord;

    const SHA: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";

    fn job(pools: Value) -> JobRecord {
        let spec: JobSpec = serde_json::from_value(json!({
            "name": "llama-sft", "plugin": "custom/custom", "image": "ghcr.io/acme/train:1.2",
            "entrypoint": "python train.py", "env": {"WANDB_MODE": "offline"}, "pools": pools,
            "deadlines": {"pre_running_seconds": 1800, "run_seconds": 86400}, "priority": 0,
            "labels": {"team": "nlp"}, "namespace": "tuneplane-jobs", "platform_version": "0.1.0"
        }))
        .expect("spec");
        JobRecord::new_queued("j-01abc", "acme".parse().unwrap(), spec, SHA, 1)
    }

    fn gpu_job() -> JobRecord {
        job(json!([
            {"name": "main", "series": "h200", "nodes": 2, "gpus_per_node": 8, "cpus": 96.0, "memory_gb": 1024.0},
            {"name": "eval", "series": "l40s", "nodes": 1, "gpus_per_node": 4, "cpus": 16.5, "memory_gb": 64.0}
        ]))
    }

    fn cpu_job() -> JobRecord {
        job(
            json!([{"name": "main", "series": null, "nodes": 1, "gpus_per_node": 0, "cpus": 2.0, "memory_gb": 4.0}]),
        )
    }

    fn capsule() -> CapsuleRef {
        CapsuleRef {
            sha256: SHA.into(),
            url: format!(
                "https://bucket.s3.amazonaws.com/capsules/sha256/{SHA}/capsule.zip?X-Amz-Signature=abc"
            ),
        }
    }

    fn at<'a>(v: &'a Value, ptr: &str) -> &'a Value {
        v.pointer(ptr).unwrap_or(&Value::Null)
    }

    #[test]
    fn rayjob_head_is_machine_zero_of_the_primary_pool_with_a_worker_group_per_pool() {
        let rj = render_rayjob(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
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
        let rj = render_rayjob(&gpu_job(), &capsule(), &settings).unwrap();
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
        let rj = render_rayjob(&gpu_job(), &capsule(), &settings).unwrap();
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
    fn cpu_job_becomes_a_pod_with_requests_equal_to_limits_and_no_accelerator() {
        let pod = render_pod(&cpu_job(), &capsule(), &RenderSettings::default()).unwrap();
        assert_eq!(at(&pod, "/kind"), "Pod");
        assert_eq!(at(&pod, "/spec/restartPolicy"), "Never");
        assert_eq!(at(&pod, "/spec/activeDeadlineSeconds"), 86400);
        let c = at(&pod, "/spec/containers/0");
        assert_eq!(c["resources"]["requests"], c["resources"]["limits"]);
        assert_eq!(
            c["resources"]["limits"],
            json!({"cpu": "2", "memory": "4Gi"})
        );
        assert!(!pod.to_string().contains("nvidia.com/gpu\":\""));
        assert_eq!(at(&pod, "/spec/tolerations/0/key"), "nvidia.com/gpu");
        assert!(
            at(c, "/command/2")
                .as_str()
                .unwrap_or_default()
                .contains("runner.pex")
        );
        assert!(c["env"].to_string().contains("TUNEPLANE_CAPSULE_SHA256"));
        assert!(render_rayjob(&cpu_job(), &capsule(), &RenderSettings::default()).is_err());
        assert!(render_pod(&gpu_job(), &capsule(), &RenderSettings::default()).is_err());
    }

    #[test]
    fn a_cpu_pods_grant_is_sealed_in_its_spec_and_never_there_in_plain() {
        let key = crate::grant::GrantKey::parse(&"ab".repeat(32)).unwrap();
        let settings = RenderSettings {
            api_url: Some("https://api.example".into()),
            grant_key: Some(key.clone()),
            ..RenderSettings::default()
        };
        let job = cpu_job();
        let pod = render_pod(&job, &capsule(), &settings).unwrap();
        let token = key.token(&job.id, job.attempt);
        assert!(
            !pod.to_string().contains(&token),
            "the plain grant is in the Pod"
        );
        let env = at(&pod, "/spec/containers/0/env")
            .as_array()
            .unwrap()
            .clone();
        let var = |name: &str| {
            env.iter()
                .find(|e| e["name"] == name)
                .cloned()
                .unwrap_or_default()
        };
        let seal = key.seal_key(&job.spec.namespace, &job.tenant);
        let sealed = var(GRANT_SEALED_ENV)["value"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(seal.unseal(&job.id, job.attempt, &sealed), Some(token));
        assert_eq!(
            var(GRANT_SEAL_KEY_ENV)["valueFrom"]["secretKeyRef"],
            json!({"name": seal.secret_name(&job.tenant), "key": SEAL_SECRET_KEY})
        );
        assert_eq!(
            var("TUNEPLANE_GRANT"),
            Value::Null,
            "no grant Secret of its own"
        );
        assert_eq!(
            at(
                &pod,
                &format!("/metadata/labels/{}", GRANT_LABEL.replace('/', "~1"))
            ),
            "sealed"
        );
        assert!(
            at(&pod, "/spec/containers/0/command/2")
                .as_str()
                .unwrap_or_default()
                .contains("TUNEPLANE_GRANT=$(")
        );
        let secret = render_seal_secret(&job.spec.namespace, &job.tenant, &seal);
        assert_eq!(secret["metadata"]["name"], seal.secret_name(&job.tenant));
        // Grants off: nothing of it.
        let off = render_pod(&job, &capsule(), &RenderSettings::default()).unwrap();
        assert!(!off.to_string().contains("TUNEPLANE_GRANT"));
        assert!(!off.to_string().contains(GRANT_LABEL));
        // A RayJob keeps its grant Secret (created with its Ray token Secret).
        let rj = render_rayjob(&gpu_job(), &capsule(), &settings).unwrap();
        assert!(
            rj.to_string()
                .contains(&grant_secret_name(&job_workload_name(&gpu_job())))
        );
    }

    #[test]
    fn capsule_url_must_end_in_zip_and_names_are_dns_1035() {
        let bad = CapsuleRef {
            url: "https://x/capsule.tar?sig=.zip".into(),
            ..capsule()
        };
        assert!(matches!(
            render_rayjob(&gpu_job(), &bad, &RenderSettings::default()),
            Err(RenderError::Capsule { .. })
        ));
        let long = workload_name(&"A_very_Long_ID".repeat(5));
        assert!(long.len() <= MAX_WORKLOAD_NAME && long.starts_with("tp-"));
        assert_eq!(
            long,
            workload_name(&"A_very_Long_ID".repeat(5)),
            "deterministic"
        );
        assert_eq!(cpu_quantity(0.25), "250m");
        assert_eq!(memory_quantity(1.5), "1536Mi");
    }

    /// A one-GPU l40s playground of an hour, created at 0.
    fn playground() -> PlaygroundRecord {
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

    #[test]
    fn playground_is_a_vllm_pod_on_its_series_reached_through_the_api_proxy() {
        let pg = playground();
        let pod = render_playground(&pg, "tuneplane-jobs", &RenderSettings::default());
        assert_eq!(at(&pod, "/metadata/name"), "pg-1");
        assert_eq!(at(&pod, "/spec/nodeSelector/tuneplane~1gpu-series"), "l40s");
        assert_eq!(
            at(&pod, "/spec/containers/0/resources/limits/nvidia.com~1gpu"),
            "1"
        );
        assert_eq!(at(&pod, "/spec/containers/0/resources/requests/cpu"), "4");
        assert_eq!(
            at(&pod, "/spec/containers/0/resources/requests/memory"),
            "32Gi"
        );
        assert_eq!(at(&pod, "/spec/containers/0/ports/0/name"), "http");
        assert_eq!(at(&pod, "/spec/activeDeadlineSeconds"), 3600);
        // Without a plan or a key (an older version's record): neither affinity nor key.
        assert!(pod["spec"].get("affinity").is_none());
        assert!(pod["spec"]["containers"][0].get("env").is_none());
        assert!(playground::render_key_secret(&pg, "tuneplane-jobs").is_none());
        let mut planned = pg.clone();
        planned.node = Some("l40s-3".into());
        planned.server_key = Some("k3y".into());
        let pod = render_playground(&planned, "tuneplane-jobs", &RenderSettings::default());
        let terms = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0/matchExpressions/0";
        assert_eq!(at(&pod, &format!("{terms}/key")), HOSTNAME_LABEL);
        assert_eq!(
            pod.pointer(&format!("{terms}/values")),
            Some(&json!(["l40s-3"]))
        );
        let env = "/spec/containers/0/env/0";
        assert_eq!(at(&pod, &format!("{env}/name")), "VLLM_API_KEY");
        assert_eq!(
            at(&pod, &format!("{env}/valueFrom/secretKeyRef/name")),
            "pg-1-api-key"
        );
        let secret = playground::render_key_secret(&planned, "tuneplane-jobs").unwrap_or_default();
        assert_eq!(at(&secret, "/metadata/name"), "pg-1-api-key");
        assert_eq!(at(&secret, "/data/api-key"), "azN5");
        // A record of an older version keeps the pod name it recorded.
        let old = PlaygroundRecord {
            pod_name: Some("pg-pg-1".into()),
            ..pg
        };
        let pod = render_playground(&old, "tuneplane-jobs", &RenderSettings::default());
        assert_eq!(at(&pod, "/metadata/name"), "pg-pg-1");
    }

    #[test]
    fn playground_pod_names_carry_the_prefix_once() {
        use playground::{legacy_playground_name, playground_name};
        // Ids as the API makes them (`pg-` + 20 hex): the pod is named like the id.
        assert_eq!(
            playground_name("pg-0123456789abcdef0123"),
            "pg-0123456789abcdef0123"
        );
        assert_eq!(
            legacy_playground_name("pg-0123456789abcdef0123"),
            "pg-pg-0123456789abcdef0123"
        );
        // Ids without the prefix get it; odd characters become dashes; no trailing dash.
        assert_eq!(playground_name("pg1"), "pg-pg1");
        assert_eq!(playground_name("My_Playground--"), "pg-my-playground");
        assert_eq!(playground_name("pg-"), "pg-pg");
        let long = playground_name(&format!("pg-{}", "a".repeat(100)));
        assert!(long.len() <= 63 && long.starts_with("pg-a"), "{long}");
        assert!(!long.starts_with("pg-pg-"));
    }

    fn rayjob_schema() -> Value {
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
    fn settings_variants() -> [RenderSettings; 3] {
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

    #[test]
    fn every_rendered_rayjob_validates_against_the_kuberay_crd_schema() {
        let validator = jsonschema::validator_for(&rayjob_schema()).expect("schema");
        let variants = settings_variants();
        let single = job(
            json!([{"name": "main", "series": "h200", "nodes": 1, "gpus_per_node": 8, "cpus": 8.0, "memory_gb": 64.0}]),
        );
        for settings in &variants {
            for j in [gpu_job(), single.clone(), placed(gpu_job())] {
                let rj = render_rayjob(&j, &capsule(), settings).unwrap();
                let errors: Vec<String> = validator
                    .iter_errors(&rj)
                    .map(|e| format!("{} at {}", e, e.instance_path))
                    .collect();
                assert!(errors.is_empty(), "{settings:?}: {errors:#?}");
            }
        }
        // The validator is not vacuous: a wrong type is refused.
        let mut broken = render_rayjob(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
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
                    let rj = render_rayjob(&j, &capsule(), s).unwrap();
                    let pruned = pruned_paths(&rj["spec"], spec_schema, "/spec");
                    assert_eq!(pruned, Vec::<String>::new(), "{s:?}");
                }
            }
        }
        // The check is not vacuous: a field the CRD does not know is found, nested or not.
        let mut extra = render_rayjob(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
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

    /// `job` as admission leaves it: every pool with its planned nodes.
    fn placed(mut job: JobRecord) -> JobRecord {
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

    #[test]
    fn every_group_is_pinned_to_its_planned_nodes_one_pod_per_node() {
        let rj = render_rayjob(&placed(gpu_job()), &capsule(), &RenderSettings::default()).unwrap();
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
        let unplanned = render_rayjob(&gpu_job(), &capsule(), &RenderSettings::default()).unwrap();
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

    /// `value` read into the typed Kubernetes object `T` and written back to JSON is `value` again:
    /// a misspelt or misplaced key inside `json!` (which the typed object drops) fails here.
    fn assert_round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(
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

    /// Every pod spec the renderers produce, with what it is.
    fn every_rendered_pod_spec() -> Vec<(String, Value)> {
        let mut specs = Vec::new();
        for settings in &settings_variants() {
            for j in [cpu_job(), placed(cpu_job())] {
                let pod = render_pod(&j, &capsule(), settings).unwrap();
                specs.push(("a job pod".to_owned(), pod["spec"].clone()));
            }
            let pod = render_playground(&playground(), "tuneplane-jobs", settings);
            specs.push(("a playground pod".to_owned(), pod["spec"].clone()));
            for j in [gpu_job(), placed(gpu_job())] {
                let rj = render_rayjob(&j, &capsule(), settings).unwrap();
                let cluster = &rj["spec"]["rayClusterSpec"];
                specs.push((
                    "a RayJob head".to_owned(),
                    cluster["headGroupSpec"]["template"]["spec"].clone(),
                ));
                for w in cluster["workerGroupSpecs"].as_array().into_iter().flatten() {
                    specs.push((
                        format!("RayJob group {}", w["groupName"]),
                        w["template"]["spec"].clone(),
                    ));
                }
            }
        }
        specs
    }

    /// What keeps `spec` from being hardened as [`harden`] promises.
    fn hardening_gaps(spec: &Value) -> Vec<String> {
        let mut gaps = Vec::new();
        if spec["automountServiceAccountToken"] != json!(false) {
            gaps.push("the ServiceAccount token is mounted".to_owned());
        }
        if spec.pointer("/securityContext/seccompProfile/type") != Some(&json!("RuntimeDefault")) {
            gaps.push("no RuntimeDefault seccomp profile".to_owned());
        }
        let containers = ["initContainers", "containers"]
            .iter()
            .flat_map(|list| spec[*list].as_array().cloned().unwrap_or_default());
        for c in containers {
            let sc = &c["securityContext"];
            if sc["allowPrivilegeEscalation"] != json!(false) {
                gaps.push(format!("{} may escalate privileges", c["name"]));
            }
            if sc.pointer("/capabilities/drop") != Some(&json!(["ALL"])) {
                gaps.push(format!("{} keeps capabilities", c["name"]));
            }
            if sc.pointer("/capabilities/add").is_some() || sc["privileged"] == json!(true) {
                gaps.push(format!("{} is privileged", c["name"]));
            }
        }
        gaps
    }

    #[test]
    fn every_rendered_pod_is_hardened() {
        let specs = every_rendered_pod_spec();
        assert!(specs.len() >= 15, "{} pod specs", specs.len());
        for (what, spec) in &specs {
            assert_eq!(hardening_gaps(spec), Vec::<String>::new(), "{what}: {spec}");
        }
        // The check is not vacuous: a mounted token and a container that keeps its
        // capabilities are both caught.
        let mut soft = specs[0].1.clone();
        soft["automountServiceAccountToken"] = json!(true);
        soft["containers"][0]["securityContext"] = json!({});
        assert_eq!(hardening_gaps(&soft).len(), 3, "{soft}");
    }

    #[test]
    fn every_rendered_pod_round_trips_through_the_kubernetes_types() {
        use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
        let variants = settings_variants();
        let pg = playground();
        let mut checked = 0;
        for settings in &variants {
            for j in [cpu_job(), placed(cpu_job())] {
                let pod = render_pod(&j, &capsule(), settings).unwrap();
                assert_round_trips::<Pod>("a job pod", &pod);
                checked += 1;
            }
            let pod = render_playground(&pg, "tuneplane-jobs", settings);
            assert_round_trips::<Pod>("a playground pod", &pod);
            checked += 1;
            // The pods of a RayJob: its head and worker group templates.
            for j in [gpu_job(), placed(gpu_job())] {
                let rj = render_rayjob(&j, &capsule(), settings).unwrap();
                let cluster = &rj["spec"]["rayClusterSpec"];
                let mut templates = vec![&cluster["headGroupSpec"]["template"]];
                let workers = cluster["workerGroupSpecs"].as_array().map(Vec::as_slice);
                templates.extend(workers.unwrap_or_default().iter().map(|w| &w["template"]));
                for template in templates {
                    assert!(template.is_object(), "{rj}");
                    assert_round_trips::<PodTemplateSpec>("a RayJob pod template", template);
                    checked += 1;
                }
            }
        }
        assert!(checked >= 15, "{checked} pods checked");
        // The check is not vacuous: a misspelt key is caught.
        let mut misspelt = render_pod(&cpu_job(), &capsule(), &RenderSettings::default()).unwrap();
        misspelt["spec"]["restartPolicyy"] = json!("Never");
        let typed: Pod = serde_json::from_value(misspelt.clone()).unwrap();
        assert_ne!(serde_json::to_value(&typed).ok(), Some(misspelt));
    }
}
