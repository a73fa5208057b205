//! The JobSpec: what a user asks to run, and its authoritative, fully defaulted form.
//!
//! Users write YAML or JSON; [`validate`] checks every rule at once and returns either the
//! [`JobSpec`] with every default filled in, or every problem with its field path. Nothing
//! downstream re-reads the user's text: the authoritative spec goes into the capsule and the record.

mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use validate::{
    DEFAULT_CPUS_PER_GPU, DEFAULT_MEMORY_GB_PER_GPU, Defaults, FieldError, MAX_SPEC_BYTES,
    SpecErrors, Validated, validate,
};

use crate::constants::PLUGIN_CUSTOM;

/// The authoritative JobSpec: validated, with every default filled in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// DNS-label job name, at most 40 characters.
    pub name: String,
    /// `family/variant`; `custom/custom` runs the user's entrypoint.
    pub plugin: String,
    /// Container image for every machine of the job.
    pub image: String,
    /// Shell command run through bash in the capsule root.
    pub entrypoint: String,
    /// Environment for the entrypoint.
    pub env: BTreeMap<String, String>,
    /// Machine pools; the first is the primary pool (it hosts the Ray head).
    pub pools: Vec<Pool>,
    /// Pre-running and run deadlines.
    pub deadlines: Deadlines,
    /// Higher runs first; ties are first come, first served.
    pub priority: i32,
    /// Labels copied onto the workload.
    pub labels: BTreeMap<String, String>,
    /// Kubernetes namespace of the workload.
    pub namespace: String,
    /// Version of the platform that produced this spec.
    pub platform_version: String,
}

/// One pool of identical machines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    /// DNS-label pool name, unique within the job.
    pub name: String,
    /// GPU series; `None` only for a CPU-only job.
    pub series: Option<String>,
    /// Number of machines.
    pub nodes: u32,
    /// GPUs per machine; 0 only for a CPU-only job.
    pub gpus_per_node: u32,
    /// CPU cores per machine (fractions allowed, millicore precision).
    pub cpus: f64,
    /// Memory per machine in GiB (fractions allowed, MiB precision).
    pub memory_gb: f64,
}

/// Deadlines of a job, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deadlines {
    /// From admission until RUNNING; past it the job fails with `PreRunningDeadlineExceeded`.
    pub pre_running_seconds: u64,
    /// From RUNNING until the job must have ended.
    pub run_seconds: u64,
}

/// What kind of workload a job becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkloadKind {
    /// A KubeRay `RayJob` (any job with GPUs).
    RayJob,
    /// A plain `Pod` (CPU-only custom job).
    Pod,
}

impl JobSpec {
    /// The workload this job becomes: a Pod for a CPU-only custom job, a RayJob otherwise.
    pub fn kind(&self) -> WorkloadKind {
        if self.is_cpu_only() {
            WorkloadKind::Pod
        } else {
            WorkloadKind::RayJob
        }
    }

    /// True for a CPU-only custom job (one pool, one node, no GPUs).
    pub fn is_cpu_only(&self) -> bool {
        self.plugin == PLUGIN_CUSTOM && self.pools.len() == 1 && self.pools[0].gpus_per_node == 0
    }

    /// Total GPUs the job occupies while it runs.
    pub fn total_gpus(&self) -> u64 {
        self.pools
            .iter()
            .map(|p| u64::from(p.nodes) * u64::from(p.gpus_per_node))
            .sum()
    }

    /// Canonical JSON: sorted keys, no whitespace. These bytes go into the capsule.
    pub fn canonical_json(&self) -> String {
        // Serialising a plain struct to a Value cannot fail (no maps with non-string keys).
        let value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        crate::canonical::to_string(&value)
    }
}

/// True if `s` is a lower-case RFC 1123 DNS label of at most `max` characters that starts with a letter.
pub fn is_dns_label(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

#[cfg(test)]
mod tests;
