//! Job records for tests: a queued [`JobRecord`] built from a small valid spec, with the fields
//! tests vary set by name (`records::queued("j").pools(..).deadlines(..).build()`). Everything
//! left unset keeps the defaults below, so two tests that differ only in what they set build the
//! same record.
//!
//! Defaults: tenant `t`, capsule `ab`, submitted at 0; spec name `t`, plugin `custom/custom`,
//! image `img`, entrypoint `true`, no env or labels, one CPU-only pool ([`cpu_pool`]),
//! deadlines 10 s pre-running and 100 s running, priority 0, namespace `ns`, platform version `0`.

use serde_json::{Value, json};
use tuneplane_core::job::JobRecord;
use tuneplane_core::spec::JobSpec;

/// A pool as JSON: `nodes` machines of `gpus` GPUs of `series` (`None`: CPU-only), each with
/// `cpus` cores and `memory_gb` GiB.
pub fn pool_of(
    name: &str,
    series: Option<&str>,
    nodes: u32,
    gpus: u32,
    cpus: f64,
    memory_gb: f64,
) -> Value {
    json!({"name": name, "series": series, "nodes": nodes, "gpus_per_node": gpus,
           "cpus": cpus, "memory_gb": memory_gb})
}

/// The default pool: `main`, one CPU-only machine of 1 core and 1 GiB.
pub fn cpu_pool() -> Value {
    pool_of("main", None, 1, 0, 1.0, 1.0)
}

/// A queued job `id` under construction; [`queued`] starts one, [`Record::build`] ends it.
#[derive(Debug, Clone)]
pub struct Record {
    id: String,
    tenant: String,
    capsule: String,
    submitted_ms: i64,
    spec: Value,
}

/// Job `id` with the module's defaults.
pub fn queued(id: &str) -> Record {
    Record {
        id: id.to_owned(),
        tenant: "t".to_owned(),
        capsule: "ab".to_owned(),
        submitted_ms: 0,
        spec: json!({
            "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true",
            "env": {}, "pools": [cpu_pool()],
            "deadlines": {"pre_running_seconds": 10, "run_seconds": 100}, "priority": 0,
            "labels": {}, "namespace": "ns", "platform_version": "0"
        }),
    }
}

impl Record {
    /// The tenant (a valid tenant name).
    pub fn tenant(mut self, tenant: &str) -> Self {
        tenant.clone_into(&mut self.tenant);
        self
    }

    /// The capsule digest.
    pub fn capsule(mut self, sha: &str) -> Self {
        sha.clone_into(&mut self.capsule);
        self
    }

    /// When it was submitted, Unix ms.
    pub fn submitted_at(mut self, ms: i64) -> Self {
        self.submitted_ms = ms;
        self
    }

    /// The spec's pools (each as [`pool_of`] makes them).
    pub fn pools(self, pools: Vec<Value>) -> Self {
        self.spec_field("pools", Value::Array(pools))
    }

    /// The spec's image.
    pub fn image(self, image: &str) -> Self {
        self.spec_field("image", json!(image))
    }

    /// The spec's pre-running and run deadlines, seconds.
    pub fn deadlines(self, pre_running_seconds: u64, run_seconds: u64) -> Self {
        self.spec_field(
            "deadlines",
            json!({"pre_running_seconds": pre_running_seconds, "run_seconds": run_seconds}),
        )
    }

    /// The spec's priority.
    pub fn priority(self, priority: i32) -> Self {
        self.spec_field("priority", json!(priority))
    }

    /// Any other spec field, as the spec's JSON names it (`entrypoint`, `env`, `labels`, ...).
    pub fn spec_field(mut self, key: &str, value: Value) -> Self {
        self.spec[key] = value;
        self
    }

    /// The queued record; panics (failing the test) when a value set breaks the spec's or the
    /// ids' rules.
    pub fn build(self) -> JobRecord {
        let spec: JobSpec = serde_json::from_value(self.spec)
            .unwrap_or_else(|e| panic!("test spec of {} does not decode: {e}", self.id));
        JobRecord::new_queued(
            self.id
                .parse()
                .unwrap_or_else(|e| panic!("test job id: {e}")),
            self.tenant
                .parse()
                .unwrap_or_else(|e| panic!("test tenant: {e}")),
            spec,
            self.capsule,
            self.submitted_ms,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_build_a_queued_cpu_job_and_setters_change_only_their_field() {
        let plain = queued("j").build();
        assert_eq!(plain.id, "j");
        assert_eq!(plain.tenant.as_str(), "t");
        assert_eq!(plain.spec.pools.len(), 1);
        assert_eq!(plain.spec.pools[0].gpus_per_node, 0);
        let set = queued("j")
            .tenant("acme")
            .pools(vec![pool_of("main", Some("h200"), 2, 8, 8.0, 64.0)])
            .deadlines(60, 3600)
            .priority(5)
            .submitted_at(7)
            .build();
        assert_eq!(set.tenant.as_str(), "acme");
        assert_eq!(set.spec.pools[0].series.as_deref(), Some("h200"));
        assert_eq!(set.spec.pools[0].nodes, 2);
        assert_eq!(set.spec.deadlines.pre_running_seconds, 60);
        assert_eq!(set.spec.priority, 5);
        assert_eq!(set.submitted_at_ms, 7);
        assert_eq!(set.spec.image, plain.spec.image);
    }
}
