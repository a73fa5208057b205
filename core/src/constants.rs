//! Names shared across the platform: label keys, reserved paths, defaults.

/// Node label that names a node's GPU series (`h200`, `l40s`, ...).
pub const SERIES_LABEL: &str = "tuneplane/gpu-series";

/// Extended resource name of NVIDIA GPUs on Kubernetes nodes and containers.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// CPUs per GPU when a GPU pool names no `cpus` (and what each free GPU keeps from CPU-only
/// jobs by default).
pub const DEFAULT_CPUS_PER_GPU: f64 = 4.0;

/// Memory (GiB) per GPU when a GPU pool names no `memory_gb`.
pub const DEFAULT_MEMORY_GB_PER_GPU: f64 = 32.0;

/// Label holding the job id on every workload TunePlane creates.
pub const JOB_ID_LABEL: &str = "tuneplane.io/job-id";

/// Label holding the tenant on every workload TunePlane creates.
pub const TENANT_LABEL: &str = "tuneplane.io/tenant";

/// Label prefix reserved for the platform; user labels may not use it.
pub const RESERVED_LABEL_PREFIX: &str = "tuneplane.io/";

/// Why a user label key is reserved (the platform, Kubernetes or KubeRay select pods by it, so a
/// job that set it could pass for another's pods), or `None` when a job may set it.
pub fn reserved_label(key: &str) -> Option<String> {
    // Unprefixed keys Kubernetes' controllers set on the pods they make.
    const CONTROLLER_KEYS: [&str; 3] = ["job-name", "controller-uid", "pod-template-hash"];
    if CONTROLLER_KEYS.contains(&key) {
        return Some(format!(
            "{key:?} is reserved: Kubernetes' controllers set it on the pods they make; use a key of your own (e.g. example.com/{key})"
        ));
    }
    let (prefix, _) = key.split_once('/')?;
    let owner = |domain: &str| prefix == domain || prefix.ends_with(&format!(".{domain}"));
    let who = if owner("tuneplane.io") {
        "TunePlane"
    } else if owner("ray.io") {
        "Ray and KubeRay"
    } else if owner("kubernetes.io") || owner("k8s.io") || owner("x-k8s.io") {
        "Kubernetes"
    } else {
        return None;
    };
    Some(format!(
        "keys under {prefix}/ are reserved for {who}; use a prefix of your own (e.g. example.com/)"
    ))
}

/// Environment variable prefix reserved for the platform; user env may not use it.
pub const RESERVED_ENV_PREFIX: &str = "TUNEPLANE_";

/// The only plugin that exists today: runs the user's entrypoint as given.
pub const PLUGIN_CUSTOM: &str = "custom/custom";

/// Every plugin the platform knows, for error messages.
pub const KNOWN_PLUGINS: &[&str] = &[PLUGIN_CUSTOM];

/// Default namespace for workloads when the spec names none.
pub const DEFAULT_NAMESPACE: &str = "tuneplane-jobs";

/// Version of the platform that filled the authoritative spec.
pub const PLATFORM_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Folder of the capsule reserved for platform files.
pub const RESERVED_DIR: &str = ".tuneplane";

/// Label naming the pool a Ray pod belongs to.
pub const POOL_LABEL: &str = "tuneplane.io/pool";

/// Label of a CPU-only job's Pod (`pod`): the namespace's shared NetworkPolicy for single-pod jobs
/// selects it.
pub const WORKLOAD_LABEL: &str = "tuneplane.io/workload";

/// Label holding the playground id on playground pods.
pub const PLAYGROUND_LABEL: &str = "tuneplane.io/playground-id";

/// `app.kubernetes.io/managed-by` label key; every TunePlane workload carries it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Value of [`MANAGED_BY_LABEL`] on TunePlane workloads.
pub const MANAGED_BY: &str = "tuneplane";

/// Annotation holding the capsule's SHA-256 on workloads.
pub const CAPSULE_ANNOTATION: &str = "tuneplane.io/capsule-sha256";

/// Field manager of the reconciler's server-side applies and writes.
pub const FIELD_MANAGER: &str = "tuneplane-reconciler";
