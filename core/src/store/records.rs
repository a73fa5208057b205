//! Records stored beside jobs, and the sort keys and cursors both job stores share.
//!
//! Sort keys are plain strings that order correctly byte-wise, so DynamoDB range keys and the
//! embedded store's ordered tables agree on every listing order.

use serde::{Deserialize, Serialize};

use crate::spec::JobSpec;

use super::{Result, StoreError};

/// Number of shards of the active-jobs index (spreads writes over several partitions).
pub const ACTIVE_SHARDS: u32 = 4;

/// An API key, stored only as the SHA-256 of its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// SHA-256 (hex) of the secret.
    pub key_sha256: String,
    /// Tenant the key acts for.
    pub tenant: String,
    /// Granted scopes (`jobs:write`, `admin`, ...).
    pub scopes: Vec<String>,
    /// Human label.
    pub name: String,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
}

/// What the store remembers about an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// Tenant.
    pub tenant: String,
    /// The client's key.
    pub key: String,
    /// SHA-256 (hex) of the first request.
    pub request_sha256: String,
    /// The job that request created.
    pub job_id: String,
    /// When the key is forgotten, Unix seconds (also the DynamoDB TTL attribute).
    pub expires_at: i64,
}

/// A scheduled batch job (an EventBridge Scheduler target in production).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// Schedule id.
    pub id: String,
    /// Owning tenant.
    pub tenant: String,
    /// Schedule expression (`cron(...)` or `rate(...)`).
    pub expression: String,
    /// The authoritative spec each run uses.
    pub spec: JobSpec,
    /// Capsule each run uses.
    pub capsule_sha256: String,
    /// Paused schedules start nothing.
    pub enabled: bool,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
    /// Optimistic-concurrency version (0 before creation).
    pub version: u64,
}

/// An interactive vLLM playground pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaygroundRecord {
    /// Playground id.
    pub id: String,
    /// Owning tenant.
    pub tenant: String,
    /// Model to serve.
    pub model: String,
    /// GPU series.
    pub series: String,
    /// GPUs of the pod.
    pub gpus: u32,
    /// Pod name once created.
    pub pod_name: Option<String>,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
    /// When the reconciler reclaims it, Unix milliseconds.
    pub expires_at_ms: i64,
    /// Optimistic-concurrency version (0 before creation).
    pub version: u64,
}

/// Sort key of a tenant's job listing (ascending = oldest first): `<submitted ms>#<id>`.
pub fn tenant_sort_key(submitted_at_ms: i64, id: &str) -> String {
    format!("{:013}#{id}", submitted_at_ms.max(0))
}

/// Sort key of the active index (ascending = admission order): inverted priority, then
/// submission time, then id.
pub fn active_sort_key(priority: i32, submitted_at_ms: i64, id: &str) -> String {
    let inverted = i64::from(i32::MAX) - i64::from(priority);
    format!("{inverted:010}#{:013}#{id}", submitted_at_ms.max(0))
}

/// Sort key of a job's events (ascending = log order): `<at ms>#<event key>`.
pub fn event_sort_key(at_ms: i64, key: &str) -> String {
    format!("{:013}#{key}", at_ms.max(0))
}

/// The active-index shard of a job (stable across processes and versions).
pub fn active_shard(id: &str) -> u32 {
    // FNV-1a: tiny, stable, and good enough to spread ids over a handful of shards.
    let hash = id.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash % ACTIVE_SHARDS
}

/// Wraps a sort key into an opaque cursor.
pub fn encode_cursor(sort_key: &str) -> String {
    hex::encode(sort_key.as_bytes())
}

/// Unwraps a cursor made by [`encode_cursor`].
pub fn decode_cursor(cursor: &str) -> Result<String> {
    let invalid = || StoreError::InvalidCursor {
        cursor: cursor.to_owned(),
    };
    let bytes = hex::decode(cursor).map_err(|_| invalid())?;
    let key = String::from_utf8(bytes).map_err(|_| invalid())?;
    if key.contains('#') {
        Ok(key)
    } else {
        Err(invalid())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_keys_order_by_priority_then_submission() {
        let mut keys = [
            active_sort_key(0, 5, "c"),
            active_sort_key(10, 9, "b"),
            active_sort_key(-3, 1, "d"),
            active_sort_key(0, 2, "a"),
            active_sort_key(i32::MAX, 100, "e"),
            active_sort_key(i32::MIN, 0, "f"),
        ];
        keys.sort();
        let ids: Vec<_> = keys.iter().filter_map(|k| k.rsplit('#').next()).collect();
        assert_eq!(ids, ["e", "b", "a", "c", "d", "f"]);
    }

    #[test]
    fn cursor_round_trips_and_rejects_garbage() {
        let key = tenant_sort_key(1_700_000_000_000, "job-1");
        assert_eq!(decode_cursor(&encode_cursor(&key)).ok(), Some(key));
        assert!(matches!(
            decode_cursor("zz"),
            Err(StoreError::InvalidCursor { .. })
        ));
    }

    #[test]
    fn shards_are_in_range() {
        assert!((0..100).all(|i| active_shard(&format!("job-{i}")) < ACTIVE_SHARDS));
    }
}
