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

#[cfg(test)]
pub(crate) mod fixtures;

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
        job_id: crate::ids::JobId,
        /// What is wrong.
        message: String,
    },
    /// The capsule reference is unusable (Ray needs a `.zip` URL path, hex SHA-256).
    #[error("job {job_id}: capsule {what}")]
    Capsule {
        /// Job that was being rendered.
        job_id: crate::ids::JobId,
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

/// The job environment handed to the entrypoint: the spec's env plus `TUNEPLANE_JOB_ID`,
/// `TUNEPLANE_TENANT`, `TUNEPLANE_ATTEMPT`, and for an array child `TUNEPLANE_ARRAY_INDEX` and
/// `TUNEPLANE_ARRAY_SIZE`.
pub fn job_env(job: &JobRecord) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = job
        .spec
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.push(("TUNEPLANE_JOB_ID".into(), String::from(&job.id)));
    env.push(("TUNEPLANE_TENANT".into(), job.tenant.to_string()));
    env.push(("TUNEPLANE_ATTEMPT".into(), job.attempt.to_string()));
    if let (Some(child), Some(size)) = (job.array_child(), job.array_size()) {
        env.push(("TUNEPLANE_ARRAY_INDEX".into(), child.index.to_string()));
        env.push(("TUNEPLANE_ARRAY_SIZE".into(), size.to_string()));
    }
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
    //! Tests across the renderers (naming, hardening and round trips of every pod they render);
    //! each renderer's own tests are beside it.

    use serde_json::{Value, json};

    use super::fixtures::*;
    use super::*;

    #[test]
    fn capsule_url_must_end_in_zip_and_names_are_dns_1035() {
        let bad = CapsuleRef {
            url: "https://x/capsule.tar?sig=.zip".into(),
            ..capsule()
        };
        assert!(matches!(
            render_rayjob_json(&gpu_job(), &bad, &RenderSettings::default()),
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
                let rj = render_rayjob_json(&j, &capsule(), settings).unwrap();
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
                let rj = render_rayjob_json(&j, &capsule(), settings).unwrap();
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
