//! Builders for records used by the contract cases.

use tuneplane_core::job::{EventSource, JobEvent, JobRecord};
use tuneplane_core::spec::JobSpec;
use tuneplane_core::store::Idempotency;

/// A small valid GPU job spec with the given priority.
pub fn spec(priority: i32) -> JobSpec {
    let json = serde_json::json!({
        "name": "contract", "plugin": "custom/custom", "image": "ghcr.io/acme/train:1",
        "entrypoint": "python train.py", "env": {"A": "1"},
        "pools": [{"name": "main", "series": "h200", "nodes": 2, "gpus_per_node": 8,
                   "cpus": 32.0, "memory_gb": 256.0}],
        "deadlines": {"pre_running_seconds": 1800, "run_seconds": 86400},
        "priority": priority, "labels": {"team": "nlp"}, "namespace": "tuneplane-jobs",
        "platform_version": "0.1.0"
    });
    serde_json::from_value(json).expect("fixture spec does not decode")
}

/// Idempotency key `key` for a request whose hash is `request` repeated, kept `ttl_seconds`.
pub fn idem(key: &str, request: &str, ttl_seconds: u64) -> Idempotency {
    Idempotency {
        key: key.to_owned(),
        request_sha256: request.repeat(64),
        ttl_seconds,
    }
}

/// A queued job of `tenant` submitted at `submitted_ms` with `priority`.
pub fn job(id: &str, tenant: &str, submitted_ms: i64, priority: i32) -> JobRecord {
    let mut job = tuneplane_testkit::records::queued(id)
        .tenant(tenant)
        .capsule(&"ab".repeat(32))
        .submitted_at(submitted_ms)
        .build();
    job.spec = spec(priority);
    job
}

/// A platform event.
pub fn event(at_ms: i64, key: &str, message: &str) -> JobEvent {
    JobEvent {
        at_ms,
        key: key.to_owned(),
        source: EventSource::Platform,
        kind: "Normal".to_owned(),
        reason: "Test".to_owned(),
        message: message.to_owned(),
        object: None,
    }
}

/// Fails the test with the error's full source chain.
pub fn ok<T, E: std::error::Error>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|e| {
        let mut msg = format!("{what}: {e}");
        let mut source = e.source();
        while let Some(s) = source {
            msg.push_str(&format!(": {s}"));
            source = s.source();
        }
        panic!("{msg}")
    })
}
