//! Names shared across the platform: label keys, reserved paths, defaults.

/// Node label that names a node's GPU series (`h200`, `l40s`, ...).
pub const SERIES_LABEL: &str = "tuneplane/gpu-series";

/// Extended resource name of NVIDIA GPUs on Kubernetes nodes and containers.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Label holding the job id on every workload TunePlane creates.
pub const JOB_ID_LABEL: &str = "tuneplane.io/job-id";

/// Label holding the tenant on every workload TunePlane creates.
pub const TENANT_LABEL: &str = "tuneplane.io/tenant";

/// Label prefix reserved for the platform; user labels may not use it.
pub const RESERVED_LABEL_PREFIX: &str = "tuneplane.io/";

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
