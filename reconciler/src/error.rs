//! The reconciler's error type: every variant names what it was acting on.

use tuneplane_core::ids::JobId;
use tuneplane_core::render::RenderError;
use tuneplane_core::store::StoreError;

/// Result of reconciler operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the reconciler can report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration variable is missing or malformed.
    #[error("configuration: {var}: {message}")]
    Config {
        /// The environment variable.
        var: &'static str,
        /// What is wrong and what is expected.
        message: String,
    },
    /// A Kubernetes API call failed (after retries, when retryable).
    #[error("kubernetes: {op} {object} failed")]
    Kube {
        /// Operation (`create`, `delete`, `logs`, ...).
        op: &'static str,
        /// The object (`rayjob ns/name`).
        object: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The RayJob CRD is not installed: KubeRay v1.4+ is required.
    #[error(
        "the RayJob CRD (rayjobs.ray.io/v1) is not served by the cluster: install the KubeRay operator v1.4 or newer"
    )]
    MissingCrd(#[source] kube::Error),
    /// A lifecycle transition the record does not allow (another writer moved it).
    #[error("{0}")]
    Transition(#[from] tuneplane_core::job::TransitionError),
    /// An id made from another (an array child's from its parent's) breaks the id rule.
    #[error("{0}")]
    Id(#[from] tuneplane_core::ids::IdError),
    /// A store call failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A workload could not be rendered.
    #[error("render: {0}")]
    Render(#[from] RenderError),
    /// A rendered object did not convert to its typed form.
    #[error("job {job_id}: rendered {kind} is not a valid object: {source}")]
    Convert {
        /// Job whose workload was rendered.
        job_id: String,
        /// `Pod` or `RayJob`.
        kind: &'static str,
        /// The decode error.
        #[source]
        source: serde_json::Error,
    },
    /// The operating system gave no randomness for a job's Ray token.
    #[error("job {job_id}: no randomness from the operating system for its Ray token: {message}")]
    Randomness {
        /// Job whose workload was being created.
        job_id: JobId,
        /// The OS's error.
        message: String,
    },
    /// One of the reconciler's endless loops (watches, lease, passes) ended: the process stops with
    /// an error so that it is restarted.
    #[error("{0} ended; stopping so that the reconciler is restarted")]
    LoopEnded(&'static str),
    /// Writing the logs archive failed.
    #[error("job {job_id}: building the logs archive failed")]
    Archive {
        /// Job whose logs were being archived.
        job_id: JobId,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An embedded access manifest (`infra/kustomize/base`) is not the YAML of Kubernetes
    /// objects with rules.
    #[error("infra manifest {file}: {message}")]
    Manifest {
        /// The file under `infra/kustomize/base` (as in `access::MANIFESTS`).
        file: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The reconciler's ServiceAccount token file could not be written.
    #[error("cannot write the token file {path}")]
    TokenFile {
        /// Where the token file was to be written.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The metrics server could not bind.
    #[error("metrics server on {addr}")]
    Bind {
        /// The address asked for (`TUNEPLANE_METRICS_ADDR`, default `0.0.0.0:9090`).
        addr: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Wraps a kube error with the operation and object.
    pub fn kube(op: &'static str, object: impl Into<String>, source: kube::Error) -> Error {
        Error::Kube {
            op,
            object: object.into(),
            source,
        }
    }
}
