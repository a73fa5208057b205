//! Rendering of the Kubernetes objects TunePlane creates (docs/design.md §5), as pure functions.
//!
//! - [`rayjob::render_rayjob`]: a KubeRay `ray.io/v1` RayJob for any job with GPUs;
//! - [`pod::render_pod`]: a plain Pod for a CPU-only custom job;
//! - [`playground::render_playground`]: a standalone vLLM Pod.
//!
//! Output is `serde_json::Value` in the exact Kubernetes shape, so core needs no kube crates; the
//! reconciler turns it into typed objects at the edge and `tuneplane render` prints it as YAML.
//! Everything that varies by installation is in [`RenderSettings`], parsed once by the binaries.

pub mod bootstrap;
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
            playground_image: "vllm/vllm-openai:v0.11.0".to_owned(),
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
    env.push(("TUNEPLANE_TENANT".into(), job.tenant.clone()));
    env
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
mod tests;
