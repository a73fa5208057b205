//! The JobSpec: what a user asks to run, and its authoritative, fully defaulted form.
//!
//! Users write YAML or JSON; [`validate`] checks every rule at once and returns either the
//! [`JobSpec`] with every default filled in, or every problem with its field path. Nothing
//! downstream re-reads the user's text: the authoritative spec goes into the capsule and the record.

pub mod notify;
mod strict;
mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub(crate) use validate::parse as parse_document;
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
    /// Pre-running and run deadlines, and the grace a stopped attempt has to save.
    pub deadlines: Deadlines,
    /// How often the platform runs the job again after a failure (docs/design.md §6).
    #[serde(default)]
    pub retries: Retries,
    /// How many complete checkpoints the platform keeps.
    #[serde(default)]
    pub checkpoints: Checkpoints,
    /// Callbacks of the job's state changes (docs/design.md §6, "Callbacks"); left out of the
    /// spec's JSON while empty, so specs without callbacks keep their capsule digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<crate::spec::notify::Notify>,
    /// Higher runs first; ties are first come, first served.
    pub priority: i32,
    /// Whether the platform may stop the job to give its GPUs back to a tenant's guarantee or to
    /// a higher-priority job of its own tenant (it saves a checkpoint and is requeued;
    /// docs/design.md §8, "Preemption"). A job that is not preemptible never borrows above its
    /// tenant's quota. Left out of the spec's JSON while `true`, so specs that do not name it
    /// keep their capsule digest.
    #[serde(
        default = "preemptible_default",
        skip_serializing_if = "is_preemptible"
    )]
    pub preemptible: bool,
    /// Runs the job as an array of `size` children that differ only by their index
    /// (`TUNEPLANE_ARRAY_INDEX`); left out of the spec's JSON when absent, so specs without it
    /// keep their capsule digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArraySpec>,
    /// Jobs of the same tenant this one waits for (at most 20): it stays queued, holding nothing,
    /// until each has ended as asked, and fails `DependencyFailed` once one cannot. Left out of
    /// the spec's JSON while empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<Dependency>,
    /// Labels copied onto the workload.
    pub labels: BTreeMap<String, String>,
    /// Kubernetes namespace of the workload.
    pub namespace: String,
    /// Version of the platform that produced this spec.
    pub platform_version: String,
}

fn preemptible_default() -> bool {
    true
}

fn is_preemptible(p: &bool) -> bool {
    *p
}

/// An array job: one submission, one capsule, `size` children each queued, admitted and retried
/// as a job of its own (docs/design.md §6, "Arrays").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArraySpec {
    /// Children: 2..=10,000.
    pub size: u32,
    /// At most this many children admitted or running at once (`None`: as many as fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
}

/// One job another waits for (`depends_on[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    /// The job's id (an array parent: all of its children).
    pub job: String,
    /// What the job must have done.
    #[serde(default)]
    pub when: DependencyWhen,
    /// Between two arrays of one size: child i waits for child i only.
    #[serde(default, skip_serializing_if = "is_false")]
    pub n_to_n: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// When a dependency is met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DependencyWhen {
    /// It ended `SUCCEEDED` (any other end fails the waiting job).
    #[default]
    Succeeded,
    /// It ended, however.
    Ended,
}

impl DependencyWhen {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DependencyWhen::Succeeded => "succeeded",
            DependencyWhen::Ended => "ended",
        }
    }
}

/// The most dependencies of one job.
pub const MAX_DEPENDENCIES: usize = 20;

/// The fewest children of an array.
pub const MIN_ARRAY_SIZE: u32 = 2;
/// The most children of an array.
pub const MAX_ARRAY_SIZE: u32 = 10_000;

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
    /// What a stopped, lost or interrupted attempt's entrypoint gets after SIGTERM to save its
    /// work (the pods' termination grace period); outputs and complete checkpoints are
    /// uploaded within it.
    #[serde(default = "default_grace_seconds")]
    pub grace_seconds: u64,
}

/// The default of [`Deadlines::grace_seconds`].
pub const DEFAULT_GRACE_SECONDS: u64 = 120;

fn default_grace_seconds() -> u64 {
    DEFAULT_GRACE_SECONDS
}

/// How many more attempts a job gets after a failure, by the failure's cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retries {
    /// After the platform lost the attempt (node deleted or NotReady, pod evicted or
    /// preempted, an interruption notice, a Ray node lost): default 2, at most 10.
    pub infrastructure: u32,
    /// After the job's own failure (the entrypoint exited non-zero, OOMKilled): default 0.
    pub application: u32,
}

impl Default for Retries {
    fn default() -> Self {
        Self {
            infrastructure: DEFAULT_INFRASTRUCTURE_RETRIES,
            application: 0,
        }
    }
}

/// The default of [`Retries::infrastructure`].
pub const DEFAULT_INFRASTRUCTURE_RETRIES: u32 = 2;
/// The most retries of either kind a spec may ask for.
pub const MAX_RETRIES: u32 = 10;

/// What the platform keeps of a job's checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoints {
    /// The newest complete checkpoints kept in the blob store (older ones are deleted):
    /// default 2, 1..=20.
    pub keep: u32,
}

impl Default for Checkpoints {
    fn default() -> Self {
        Self {
            keep: DEFAULT_CHECKPOINTS_KEPT,
        }
    }
}

/// The default of [`Checkpoints::keep`].
pub const DEFAULT_CHECKPOINTS_KEPT: u32 = 2;

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

pub use crate::ids::is_dns_label;

#[cfg(test)]
mod tests {
    //! Every JobSpec rule, valid and invalid.

    use super::*;
    use crate::fleet::{Fleet, FleetShape};

    const FLEET: &str = "
node_groups:
  - {name: h200, series: h200, count: 4, gpus: 8, cpus: 192, memory_gb: 2048, cordoned: 1}
  - {name: l40s, series: l40s, count: 2, gpus: 4, cpus: 64, memory_gb: 512}
  - {name: cpu, count: 2, cpus: 32, memory_gb: 128}
";

    const GPU_JOB: &str = "
name: llama-sft
plugin: custom/custom
image: ghcr.io/acme/train:1.2
entrypoint: python train.py --epochs 3
env: {WANDB_MODE: offline}
pools:
  - {name: main, series: h200, nodes: 2, gpus_per_node: 8}
  - {name: eval, series: l40s, nodes: 1, gpus_per_node: 4}
deadlines: {pre_running_seconds: 1800, run_seconds: 86400}
priority: 0
labels: {team: nlp}
";

    const CPU_JOB: &str = "
name: hello
image: python:3.12
entrypoint: python hello.py
pools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 2, memory_gb: 4}]
";

    fn fleet() -> FleetShape {
        Fleet::from_yaml(FLEET).unwrap().shape()
    }

    fn ok(text: &str) -> JobSpec {
        validate(text, Some(&fleet()), &Defaults::default())
            .unwrap()
            .spec
    }

    fn errors(text: &str) -> Vec<String> {
        match validate(text, Some(&fleet()), &Defaults::default()) {
            Ok(v) => panic!("accepted: {:?}", v.spec),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    /// Asserts that some error contains every needle.
    fn has(errs: &[String], needles: &[&str]) {
        assert!(
            errs.iter().any(|e| needles.iter().all(|n| e.contains(n))),
            "no error with {needles:?} in {errs:#?}"
        );
    }

    fn with(base: &str, from: &str, to: &str) -> String {
        assert!(base.contains(from), "{from} not in base");
        base.replacen(from, to, 1)
    }

    #[test]
    fn design_example_is_valid_and_becomes_a_rayjob() {
        let spec = ok(GPU_JOB);
        assert_eq!(spec.kind(), WorkloadKind::RayJob);
        assert_eq!(spec.total_gpus(), 20);
        assert_eq!(spec.pools[0].cpus, 32.0, "default 4 CPUs per GPU");
        assert_eq!(spec.pools[1].memory_gb, 128.0, "default 32 GiB per GPU");
        assert_eq!(spec.namespace, crate::constants::DEFAULT_NAMESPACE);
        assert_eq!(spec.platform_version, crate::constants::PLATFORM_VERSION);
    }

    #[test]
    fn callbacks_are_validated_expanded_and_kept_out_of_specs_without_them() {
        let spec = ok(&format!(
            "{CPU_JOB}notify:\n  - {{url: https://hooks.example.com/a, events: [terminal]}}\n  - {{url: https://hooks.slack.com/services/x, format: slack}}\n"
        ));
        assert_eq!(spec.notify.len(), 2);
        assert_eq!(
            spec.notify[0].events,
            crate::spec::notify::EventKind::TERMINAL.to_vec()
        );
        assert_eq!(
            spec.notify[1].events,
            crate::spec::notify::EventKind::ALL.to_vec()
        );
        assert_eq!(spec.notify[1].format, crate::spec::notify::Format::Slack);
        let plain = serde_json::to_value(ok(CPU_JOB)).unwrap();
        assert!(plain.get("notify").is_none(), "no key while empty: {plain}");
    }

    #[test]
    fn a_callback_to_a_private_address_or_an_unknown_event_is_refused_by_field() {
        let errs = errors(&format!(
            "{CPU_JOB}notify:\n  - {{url: https://10.0.0.7/hook}}\n  - {{url: https://hooks.example.com/a, events: [done]}}\n  - {{url: 'https://169.254.169.254/', format: xml}}\n  - {{url: 'http://127.0.0.1:9/x'}}\n"
        ));
        has(&errs, &["notify[0].url", "private (10.0.0.0/8)"]);
        has(&errs, &["notify[1].events", "unknown event \"done\""]);
        has(&errs, &["notify[2].url", "metadata service"]);
        has(&errs, &["notify[2].format", "json, slack"]);
        has(&errs, &["notify[3].url", "loopback is allowed only in dev"]);
        let dev = Defaults {
            allow_loopback_callbacks: true,
            ..Defaults::default()
        };
        let text = format!("{CPU_JOB}notify: [{{url: 'http://127.0.0.1:9/x'}}]\n");
        assert!(validate(&text, None, &dev).is_ok());
        let six = format!(
            "{CPU_JOB}notify: [{}]\n",
            ["{url: https://h.example.com/}"; 6].join(", ")
        );
        has(&errors(&six), &["notify", "at most 5 per job"]);
    }

    #[test]
    fn json_is_accepted_like_yaml() {
        let json = r#"{"name":"hello","image":"python:3.12","entrypoint":"python hello.py",
        "pools":[{"name":"main","nodes":1,"gpus_per_node":0,"cpus":2,"memory_gb":4}]}"#;
        assert_eq!(ok(json), ok(CPU_JOB));
    }

    #[test]
    fn defaults_are_filled_in() {
        let spec = ok(CPU_JOB);
        assert_eq!(spec.plugin, "custom/custom");
        assert_eq!(
            spec.deadlines,
            Deadlines {
                pre_running_seconds: 1800,
                run_seconds: 86_400,
                grace_seconds: 120
            }
        );
        assert_eq!(spec.priority, 0);
        assert!(spec.env.is_empty() && spec.labels.is_empty());
        let custom = Defaults {
            pre_running_seconds: 60,
            run_seconds: 120,
            namespace: "ml".into(),
            ..Defaults::default()
        };
        let spec = validate(CPU_JOB, None, &custom).unwrap().spec;
        assert_eq!(
            (spec.deadlines.pre_running_seconds, spec.namespace.as_str()),
            (60, "ml")
        );
    }

    #[test]
    fn cpu_only_custom_job_is_accepted_as_a_pod() {
        let spec = ok(CPU_JOB);
        assert_eq!(spec.kind(), WorkloadKind::Pod);
        assert_eq!(spec.pools[0].series, None);
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_path() {
        let bad = "
name: Bad_Name
image: ''
pools:
  - {name: main, series: h100x, nodes: 0, gpus_per_node: 8, colour: red}
  - {name: main, series: h200, nodes: 1, gpus_per_node: 99}
priority: high
";
        let errs = errors(bad);
        has(&errs, &["name:", "DNS label"]);
        has(&errs, &["image:"]);
        has(&errs, &["entrypoint: is required"]);
        has(&errs, &["pools[0].nodes", "out of range"]);
        has(&errs, &["pools[0].colour: unknown field"]);
        has(&errs, &["pools[1].gpus_per_node", "out of range"]);
        has(&errs, &["priority", "whole number"]);
        assert!(errs.len() >= 7, "{errs:#?}");
    }

    #[test]
    fn unknown_series_names_the_known_ones() {
        let errs = errors(&with(GPU_JOB, "series: l40s", "series: h100x"));
        has(
            &errs,
            &["pools[1].series: unknown series \"h100x\"; known: h200, l40s"],
        );
    }

    #[test]
    fn unknown_fields_are_errors_at_every_level() {
        has(
            &errors(&format!("{CPU_JOB}\ncolor: blue\n")),
            &["color: unknown field", "allowed fields"],
        );
        has(
            &errors(&format!("{CPU_JOB}\ndeadlines: {{run: 5}}\n")),
            &["deadlines.run: unknown field"],
        );
    }

    #[test]
    fn a_misspelt_field_gets_the_name_it_probably_meant() {
        has(
            &errors(&format!("{CPU_JOB}\nentrypiont: python x.py\n")),
            &["entrypiont: unknown field; did you mean \"entrypoint\"?"],
        );
        has(
            &errors(&with(CPU_JOB, "memory_gb", "memry_gb")),
            &["pools[0].memry_gb: unknown field; did you mean \"memory_gb\"?"],
        );
        // Nothing close: no guess.
        let errs = errors(&format!("{CPU_JOB}\ncolor: blue\n"));
        assert!(errs.iter().all(|e| !e.contains("did you mean")), "{errs:?}");
    }

    #[test]
    fn job_that_exceeds_largest_node_is_rejected_at_submit() {
        has(
            &errors(&with(GPU_JOB, "gpus_per_node: 8", "gpus_per_node: 16")),
            &["pools[0].gpus_per_node", "largest h200 node has 8"],
        );
        has(
            &errors(&with(GPU_JOB, "nodes: 2", "nodes: 5")),
            &["pools[0].nodes", "only 4 h200 nodes"],
        );
        has(
            &errors(&with(
                GPU_JOB,
                "nodes: 1, gpus_per_node: 4",
                "nodes: 1, gpus_per_node: 4, cpus: 100",
            )),
            &["pools[1].cpus", "largest l40s node"],
        );
    }

    #[test]
    fn pools_of_one_series_add_up_because_they_never_share_nodes() {
        let two = with(
            GPU_JOB,
            "series: l40s, nodes: 1, gpus_per_node: 4",
            "series: h200, nodes: 3, gpus_per_node: 8",
        );
        has(
            &errors(&two),
            &["pools: pools main, eval together need 5 h200 nodes"],
        );
    }

    #[test]
    fn without_a_fleet_fit_is_not_checked_and_the_caller_is_told() {
        let huge = with(GPU_JOB, "nodes: 2", "nodes: 500");
        let v = validate(&huge, None, &Defaults::default()).unwrap();
        assert!(v.notes[0].contains("not checked"));
    }

    #[test]
    fn a_cpu_job_larger_than_every_cpu_node_is_accepted_with_a_note_that_it_runs_on_spare_gpu_node_cpu()
     {
        let notes = |text: &str| {
            validate(text, Some(&fleet()), &Defaults::default())
                .unwrap()
                .notes
        };
        // 90 CPUs: no CPU node (32) fits, an idle h200 node does beyond its GPUs' share (160).
        let big = notes(&with(CPU_JOB, "cpus: 2", "cpus: 90"));
        assert_eq!(big.len(), 1, "{big:?}");
        assert!(
            big[0].contains(
                "no CPU node fits 90 CPUs and 4 GiB (the largest has 32 CPUs and 128 GiB)"
            ),
            "{}",
            big[0]
        );
        assert!(big[0].contains("where GPU jobs go first"), "{}", big[0]);
        assert!(big[0].contains("reserves no GPU node"), "{}", big[0]);
        // One that fits a CPU node gets no note; one that fits nothing is still an error.
        assert!(notes(CPU_JOB).is_empty());
        has(
            &errors(&with(CPU_JOB, "cpus: 2", "cpus: 900")),
            &["pools[0].cpus", "fits no node", "on a CPU node"],
        );
    }

    #[test]
    fn cpu_only_rules_follow_the_design() {
        has(
            &errors(&with(CPU_JOB, "nodes: 1", "nodes: 2")),
            &["pools[0].nodes", "multi-machine CPU jobs are not supported"],
        );
        has(
            &errors(&with(CPU_JOB, "name: main,", "name: main, series: h200,")),
            &["pools[0].series", "CPU-only"],
        );
        has(
            &errors(&with(CPU_JOB, ", cpus: 2", "")),
            &["pools[0].cpus", "required for a CPU-only job"],
        );
        has(
            &errors(&with(CPU_JOB, ", memory_gb: 4", "")),
            &["pools[0].memory_gb", "required"],
        );
        has(
            &errors(&with(CPU_JOB, "cpus: 2", "cpus: 0")),
            &["pools[0].cpus", "greater than 0"],
        );
        // On a GPU node a CPU-only job may use only what the GPUs do not keep (4 CPUs, 32 GiB each).
        has(
            &errors(&with(CPU_JOB, "cpus: 2", "cpus: 500")),
            &[
                "pools[0].cpus",
                "fits no node; the largest that fit: 160 CPUs with 1792 GiB",
            ],
        );
        has(
            &errors(&with(CPU_JOB, "memory_gb: 4", "memory_gb: 1900")),
            &["pools[0].memory_gb", "fits no node"],
        );
        assert!(
            validate(
                &with(CPU_JOB, "cpus: 2", "cpus: 160"),
                Some(&fleet()),
                &Defaults::default()
            )
            .is_ok(),
            "160 CPUs fit an idle h200 node beside its GPUs' share"
        );
        // gpus_per_node: 0 in a multi-pool job is refused.
        let multi = with(GPU_JOB, "gpus_per_node: 4", "gpus_per_node: 0");
        has(
            &errors(&multi),
            &["pools[1].gpus_per_node", "only allowed for a CPU-only job"],
        );
    }

    #[test]
    fn scratch_volumes_are_refused_with_that_message() {
        has(
            &errors(&format!("{CPU_JOB}\nscratch: {{size_gb: 10}}\n")),
            &["scratch: scratch volumes are not supported"],
        );
        has(
            &errors(&format!("{CPU_JOB}\nvolumes: []\n")),
            &["volumes: scratch volumes are not supported"],
        );
    }

    #[test]
    fn gpu_pool_needs_a_series() {
        has(
            &errors(&with(GPU_JOB, "series: h200, ", "")),
            &["pools[0].series: is required"],
        );
    }

    #[test]
    fn pool_names_are_unique_dns_labels() {
        has(
            &errors(&with(GPU_JOB, "name: eval", "name: main")),
            &["pools[1].name", "duplicate"],
        );
        has(
            &errors(&with(GPU_JOB, "name: eval", "name: Eval_Pool")),
            &["pools[1].name", "DNS label"],
        );
        has(
            &errors(&with(GPU_JOB, "name: eval", "name: a-very-long-pool-name")),
            &["pools[1].name", "15"],
        );
    }

    #[test]
    fn pools_must_be_a_non_empty_bounded_list() {
        has(
            &errors(&with(
                CPU_JOB,
                "pools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 2, memory_gb: 4}]",
                "pools: []",
            )),
            &["pools: must list at least one pool"],
        );
        has(
            &errors(&with(
                CPU_JOB,
                "pools: [{name: main, nodes: 1, gpus_per_node: 0, cpus: 2, memory_gb: 4}]",
                "pools: main",
            )),
            &["pools: must be a list"],
        );
        let many: String = (0..9)
            .map(|i| format!("  - {{name: p{i}, series: h200, nodes: 1, gpus_per_node: 1}}\n"))
            .collect();
        let text = format!("name: x\nimage: i\nentrypoint: e\npools:\n{many}");
        has(&errors(&text), &["pools: has 9 pools; at most 8"]);
    }

    #[test]
    fn name_rules() {
        has(
            &errors(&with(
                CPU_JOB,
                "name: hello",
                &format!("name: {}", "a".repeat(41)),
            )),
            &["name:", "at most 40"],
        );
        has(
            &errors(&with(CPU_JOB, "name: hello", "name: 1hello")),
            &["name:", "DNS label"],
        );
        has(
            &errors(&with(CPU_JOB, "name: hello", "name: 42")),
            &["name: must be a string"],
        );
        ok(&with(
            CPU_JOB,
            "name: hello",
            &format!("name: {}", "a".repeat(40)),
        ));
    }

    #[test]
    fn plugin_must_be_known() {
        has(
            &errors(&format!("plugin: llm/sft\n{CPU_JOB}")),
            &["plugin: unknown plugin \"llm/sft\"; known: custom/custom"],
        );
        has(
            &errors(&format!("plugin: custom\n{CPU_JOB}")),
            &["plugin:", "family/variant"],
        );
    }

    #[test]
    fn image_and_entrypoint_rules() {
        has(
            &errors(&with(CPU_JOB, "image: python:3.12", "image: 'python 3'")),
            &["image:", "not a container image"],
        );
        has(
            &errors(&with(
                CPU_JOB,
                "entrypoint: python hello.py",
                "entrypoint: '  '",
            )),
            &["entrypoint: must not be empty"],
        );
    }

    #[test]
    fn env_rules() {
        let spec = ok(&format!("{CPU_JOB}env: {{EPOCHS: 3, DEBUG: true}}\n"));
        assert_eq!(spec.env["EPOCHS"], "3", "numbers become strings");
        has(
            &errors(&format!("{CPU_JOB}env: {{TUNEPLANE_JOB_ID: x}}\n")),
            &["env.TUNEPLANE_JOB_ID", "reserved"],
        );
        has(
            &errors(&format!("{CPU_JOB}env: {{1BAD: x}}\n")),
            &["env.1BAD", "not a valid variable name"],
        );
        has(
            &errors(&format!("{CPU_JOB}env: {{A: [1]}}\n")),
            &["env.A: must be a string"],
        );
        has(
            &errors(&format!("{CPU_JOB}env: [A]\n")),
            &["env: must be a mapping"],
        );
    }

    #[test]
    fn a_key_written_twice_is_refused_with_both_lines() {
        has(
            &errors(&format!(
                "{CPU_JOB}labels: {{team: a}}\nlabels: {{team: b}}\n"
            )),
            &["labels is written twice", "merge the two"],
        );
    }

    #[test]
    fn label_rules() {
        ok(&format!(
            "{CPU_JOB}labels: {{team: nlp, example.com/owner: ana}}\n"
        ));
        has(
            &errors(&format!("{CPU_JOB}labels: {{tuneplane.io/job-id: x}}\n")),
            &["labels.tuneplane.io/job-id", "reserved"],
        );
        // Keys Kubernetes, KubeRay or TunePlane select pods by: a job setting them could pass for
        // another job's pods (its logs, its Service).
        for key in [
            "job-name",
            "controller-uid",
            "batch.kubernetes.io/job-name",
            "app.kubernetes.io/name",
            "ray.io/cluster",
            "kueue.x-k8s.io/queue-name",
        ] {
            has(
                &errors(&format!("{CPU_JOB}labels: {{{key}: tp-j-other}}\n")),
                &[&format!("labels.{key}"), "reserved", "of your own"],
            );
        }
        ok(&format!(
            "{CPU_JOB}labels: {{notkubernetes.io/x: y, example.com/job-name: y}}\n"
        ));
        has(
            &errors(&format!("{CPU_JOB}labels: {{team: 'has space'}}\n")),
            &["labels.team", "label value"],
        );
        has(
            &errors(&format!("{CPU_JOB}labels: {{'bad key!': x}}\n")),
            &["label key"],
        );
    }

    #[test]
    fn deadline_and_priority_ranges() {
        has(
            &errors(&format!("{CPU_JOB}deadlines: {{pre_running_seconds: 1}}\n")),
            &["deadlines.pre_running_seconds", "out of range"],
        );
        has(
            &errors(&format!("{CPU_JOB}deadlines: {{run_seconds: -5}}\n")),
            &["deadlines.run_seconds", "out of range"],
        );
        has(
            &errors(&format!("{CPU_JOB}deadlines: {{run_seconds: 1.5}}\n")),
            &["deadlines.run_seconds", "whole number"],
        );
        has(
            &errors(&format!("{CPU_JOB}deadlines: 5\n")),
            &["deadlines: must be a mapping"],
        );
        has(
            &errors(&format!("{CPU_JOB}priority: 100000\n")),
            &["priority", "out of range"],
        );
        assert_eq!(ok(&format!("{CPU_JOB}priority: -7\n")).priority, -7);
    }

    #[test]
    fn namespace_rule() {
        assert_eq!(
            ok(&format!("{CPU_JOB}namespace: team-a\n")).namespace,
            "team-a"
        );
        has(
            &errors(&format!("{CPU_JOB}namespace: Team_A\n")),
            &["namespace", "DNS label"],
        );
    }

    #[test]
    fn documents_that_are_not_specs_are_refused_clearly() {
        for (text, needle) in [
            ("", "empty"),
            ("- a\n- b\n", "mapping"),
            ("{not json", "JSON"),
            ("a: [", "YAML"),
        ] {
            let e = validate(text, None, &Defaults::default()).unwrap_err();
            assert!(e.to_string().contains(needle), "{text:?}: {e}");
        }
        let huge = format!("name: x\n#{}\n", "x".repeat(MAX_SPEC_BYTES));
        assert!(
            validate(&huge, None, &Defaults::default())
                .unwrap_err()
                .to_string()
                .contains("limit")
        );
    }

    #[test]
    fn canonical_json_is_sorted_and_stable() {
        let spec = ok(GPU_JOB);
        let json = spec.canonical_json();
        assert!(
            json.starts_with(
                r#"{"checkpoints":{"keep":2},"deadlines":{"grace_seconds":120,"pre_running_seconds":1800,"run_seconds":86400},"entrypoint":"#
            ),
            "{json}"
        );
        let back: JobSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec);
        assert_eq!(back.canonical_json(), json);
    }
}
