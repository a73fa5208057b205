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
    pub tenant: crate::ids::TenantId,
    /// Granted scopes (`jobs:write`, `admin`, ...).
    pub scopes: Vec<String>,
    /// Human label.
    pub name: String,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
    /// When the key was revoked, Unix milliseconds; a revoked key authenticates nothing, and its
    /// record stays for the audit trail (`tuneplane admin keys list`). Absent on records of older
    /// versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at_ms: Option<i64>,
    /// Console sessions are issued for this epoch; raising it ends every console session of the
    /// key (sign-out, revocation). Absent (0) on records of older versions.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub session_epoch: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A change to a stored API key, applied atomically by `JobStore::update_api_key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiKeyChange {
    /// Revoke the key at this time (Unix ms) and end its console sessions; revoking a revoked key
    /// keeps the first revocation time.
    Revoke {
        /// Revocation time, Unix milliseconds.
        at_ms: i64,
    },
    /// End every console session of the key (sign-out); the key itself stays valid.
    EndSessions,
}

impl ApiKeyRecord {
    /// The key's public id: `k-` and the first 16 hex digits of its hash (shown by `tuneplane
    /// admin keys list`, accepted by `revoke` and `rotate`; it reveals nothing of the secret).
    pub fn id(&self) -> String {
        format!(
            "k-{}",
            self.key_sha256.get(..16).unwrap_or(&self.key_sha256)
        )
    }

    /// True unless the key was revoked.
    pub fn is_active(&self) -> bool {
        self.revoked_at_ms.is_none()
    }

    /// The record after `change` (pure; the stores apply it inside one atomic write).
    pub fn with_change(mut self, change: ApiKeyChange) -> ApiKeyRecord {
        match change {
            ApiKeyChange::Revoke { at_ms } => {
                self.revoked_at_ms = Some(self.revoked_at_ms.unwrap_or(at_ms));
                self.session_epoch = self.session_epoch.saturating_add(1);
            }
            ApiKeyChange::EndSessions => {
                self.session_epoch = self.session_epoch.saturating_add(1);
            }
        }
        self
    }
}

/// What the store remembers about an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// Tenant the key belongs to (keys are scoped per tenant).
    pub tenant: crate::ids::TenantId,
    /// The client's key.
    pub key: String,
    /// SHA-256 (hex) of the first request.
    pub request_sha256: String,
    /// The job that request created.
    pub job_id: crate::ids::JobId,
    /// When the key is forgotten, Unix seconds (also the DynamoDB TTL attribute).
    pub expires_at: i64,
}

/// A scheduled batch job (an EventBridge Scheduler target in production).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// The schedule's id, which the idempotency key of each run starts from.
    pub id: String,
    /// The tenant whose quota and jobs each run counts against.
    pub tenant: crate::ids::TenantId,
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
    /// A pipeline schedule's steps (`admin create-schedule --from-pipeline`): each run submits
    /// them as one pipeline named after `spec` (the last step's). Empty for a one-job schedule,
    /// and absent from its stored form, so records of older versions read as such.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<ScheduleStep>,
}

/// One step of a pipeline schedule: a job's spec and capsule, reused at every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleStep {
    /// The step's name (its job's spec name), unique in the schedule.
    pub name: String,
    /// The authoritative spec; its `depends_on` names the first run's jobs, and each run points
    /// entry i at the job of `after[i]`.
    pub spec: JobSpec,
    /// Capsule the step runs.
    pub capsule_sha256: String,
    /// The steps it waits for, one per entry of the spec's `depends_on`, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

/// An interactive vLLM playground pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaygroundRecord {
    /// The playground's id (`pg-` and 20 hex digits); also names its pod.
    pub id: String,
    /// The tenant whose GPU quota the pod counts against.
    pub tenant: crate::ids::TenantId,
    /// The model vLLM serves (a Hugging Face name).
    pub model: String,
    /// The GPU series the pod must run on.
    pub series: String,
    /// GPUs of the pod.
    pub gpus: u32,
    /// Pod name once created (records of older versions name `pg-pg-<hex>` pods; the reconciler
    /// keeps using the name recorded here).
    pub pod_name: Option<String>,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
    /// When the reconciler reclaims it, Unix milliseconds.
    pub expires_at_ms: i64,
    /// Optimistic-concurrency version (0 before creation).
    pub version: u64,
    /// Namespace of the pod, recorded with `pod_name` (absent on records of older versions: the
    /// default namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_namespace: Option<String>,
    /// What the reconciler last saw of the pod; rewritten only when the state, reason or message
    /// changes. Absent before the pod exists and on records of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PlaygroundStatus>,
    /// The node admission planned for the pod (it is pinned there); absent while the playground
    /// waits for quota or capacity, and on records of older versions (admitted unplanned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The pod's IP once it runs: where the API's proxy sends requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// The vLLM server's API key (`--api-key`), made at creation. The API's proxy adds it; it
    /// is never shown (views drop it) and reaches the pod through a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_key: Option<String>,
    /// When admission placed it (it holds its GPUs from then; absent before, and on records of
    /// older versions, which count from their creation once admitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at_ms: Option<i64>,
    /// When the reconciler reclaimed it: set on the retired record kept for usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<i64>,
}

impl PlaygroundRecord {
    /// The time it held its GPUs, `[admitted, ended or now)`; `None` if it was never admitted.
    pub fn held(&self, now_ms: i64) -> Option<(i64, i64)> {
        if !self.is_admitted() {
            return None;
        }
        let start = self.admitted_at_ms.unwrap_or(self.created_at_ms);
        let end = self.ended_at_ms.unwrap_or(now_ms).max(start);
        Some((start, end))
    }

    /// A new playground as asked (no pod yet, version 0): `gpus` of `series` serving `model`
    /// for `tenant`, from `created_at_ms` until `expires_at_ms`.
    pub fn requested(
        id: impl Into<String>,
        tenant: crate::ids::TenantId,
        model: impl Into<String>,
        series: impl Into<String>,
        gpus: u32,
        created_at_ms: i64,
        expires_at_ms: i64,
    ) -> PlaygroundRecord {
        PlaygroundRecord {
            id: id.into(),
            tenant,
            model: model.into(),
            series: series.into(),
            gpus,
            pod_name: None,
            created_at_ms,
            expires_at_ms,
            version: 0,
            pod_namespace: None,
            status: None,
            node: None,
            pod_ip: None,
            server_key: None,
            admitted_at_ms: None,
            ended_at_ms: None,
        }
    }

    /// True once admission gave it a node (or an older version created its pod unplanned).
    pub fn is_admitted(&self) -> bool {
        self.node.is_some() || self.pod_name.is_some()
    }
}

/// State of a playground's pod as the reconciler saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlaygroundState {
    /// Not admitted yet: it waits for its tenant's quota or for capacity (the reason says which);
    /// no pod exists.
    Queued,
    /// The pod exists but does not run yet (unschedulable, pulling, starting).
    Pending,
    /// The pod runs (vLLM may still be loading the model).
    Running,
    /// The pod ended or disappeared; it is not restarted. Delete the playground and create another.
    Failed,
}

impl PlaygroundState {
    /// The name used in records and the API (`Pending`, `Running`, `Failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            PlaygroundState::Queued => "Queued",
            PlaygroundState::Pending => "Pending",
            PlaygroundState::Running => "Running",
            PlaygroundState::Failed => "Failed",
        }
    }
}

/// Why a playground's pod is in its state: what the reconciler last recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaygroundStatus {
    /// The pod's state.
    pub state: PlaygroundState,
    /// Machine-readable reason: a pending reason while `Pending` (`InsufficientGpu`,
    /// `NoMatchingNode`, `ImagePull`, `Starting`, ...), why it ended when `Failed`
    /// (`ServerExited`, `PodLost`, ...), none while `Running`. A string, so a record written by a
    /// newer version with a reason this one does not know still decodes.
    #[serde(default)]
    pub reason: Option<String>,
    /// The Kubernetes message (scheduler, kubelet) or the platform's, verbatim.
    #[serde(default)]
    pub message: String,
    /// When this state and reason were first seen, Unix milliseconds.
    pub since_ms: i64,
    /// When the message was last written, Unix milliseconds (a message that changes under the
    /// same reason is rewritten at most every 30 s).
    #[serde(default)]
    pub updated_ms: i64,
}

/// Sort key of a tenant's job listing (ascending = oldest first): `<submitted ms>#<id>`.
pub fn tenant_sort_key(submitted_at_ms: i64, id: &str) -> String {
    format!("{:013}#{id}", submitted_at_ms.max(0))
}

/// Sort key of the active index (ascending = admission order), spelled by the admission order
/// itself so that the stored order and the planner's can never differ.
pub use crate::admission::order::active_sort_key;

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
    fn schedules_of_older_versions_read_as_one_job_schedules_and_keep_that_shape() {
        let spec = crate::spec::validate(
            "name: t\nimage: i\nentrypoint: 'true'\npools: [{name: main, series: h200, nodes: 1, gpus_per_node: 1}]\n",
            None,
            &Default::default(),
        )
        .unwrap()
        .spec;
        let mut old = serde_json::json!({
            "id": "nightly", "tenant": "acme", "expression": "rate(1 day)", "spec": spec,
            "capsule_sha256": "ab", "enabled": true, "created_at_ms": 1, "version": 2,
        });
        let read: ScheduleRecord = serde_json::from_value(old.clone()).unwrap();
        assert!(read.steps.is_empty());
        // A one-job schedule is written as before; a pipeline schedule's steps round-trip.
        assert_eq!(serde_json::to_value(&read).unwrap(), old);
        let step = ScheduleStep {
            name: "train".into(),
            spec: read.spec.clone(),
            capsule_sha256: "cd".into(),
            after: vec!["prepare".into()],
        };
        old["steps"] = serde_json::json!([step]);
        let pipeline: ScheduleRecord = serde_json::from_value(old).unwrap();
        assert_eq!(pipeline.steps, [step]);
    }

    #[test]
    fn playground_records_of_older_versions_decode_and_new_fields_round_trip() {
        // A record as the previous version wrote it: no pod_namespace, no status.
        let old = r#"{"id":"pg-0a1b","tenant":"acme","model":"qwen","series":"l40s","gpus":1,
            "pod_name":"pg-pg-0a1b","created_at_ms":1,"expires_at_ms":2,"version":3}"#;
        let pg: PlaygroundRecord = serde_json::from_str(old).unwrap();
        assert_eq!(pg.pod_name.as_deref(), Some("pg-pg-0a1b"));
        assert_eq!((pg.pod_namespace.clone(), pg.status.clone()), (None, None));
        // Absent optional fields are not written, so older readers see the shape they know.
        let text = serde_json::to_string(&pg).unwrap_or_default();
        assert!(
            !text.contains("status") && !text.contains("pod_namespace"),
            "{text}"
        );

        let mut next = pg;
        next.status = Some(PlaygroundStatus {
            state: PlaygroundState::Pending,
            reason: Some("InsufficientGpu".into()),
            message: "0/4 nodes are available: 1 Insufficient nvidia.com/gpu".into(),
            since_ms: 7,
            updated_ms: 7,
        });
        next.pod_namespace = Some("tuneplane-jobs".into());
        let text = serde_json::to_string(&next).unwrap_or_default();
        assert!(text.contains(r#""state":"Pending""#), "{text}");
        let back: PlaygroundRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, next);
        // A reason this version does not know still decodes (it is a string).
        let newer = text.replace("InsufficientGpu", "SomethingNew");
        let read: PlaygroundRecord = serde_json::from_str(&newer).unwrap();
        assert_eq!(
            read.status.and_then(|s| s.reason).as_deref(),
            Some("SomethingNew")
        );
    }

    #[test]
    fn key_records_of_older_versions_decode_and_changes_apply() {
        let old = r#"{"key_sha256":"0123456789abcdef0123","tenant":"acme","scopes":["jobs:read"],
            "name":"ci","created_at_ms":1}"#;
        let key: ApiKeyRecord = serde_json::from_str(old).unwrap();
        assert!(key.is_active());
        assert_eq!(
            (key.session_epoch, key.id().as_str()),
            (0, "k-0123456789abcdef")
        );
        let text = serde_json::to_string(&key).unwrap_or_default();
        assert!(
            !text.contains("revoked") && !text.contains("epoch"),
            "{text}"
        );

        let signed_out = key.clone().with_change(ApiKeyChange::EndSessions);
        assert!(signed_out.is_active() && signed_out.session_epoch == 1);
        let revoked = signed_out.with_change(ApiKeyChange::Revoke { at_ms: 5 });
        assert_eq!((revoked.revoked_at_ms, revoked.session_epoch), (Some(5), 2));
        let again = revoked.with_change(ApiKeyChange::Revoke { at_ms: 9 });
        assert_eq!(
            again.revoked_at_ms,
            Some(5),
            "the first revocation time stays"
        );
    }

    #[test]
    fn shards_are_in_range() {
        assert!((0..100).all(|i| active_shard(&format!("job-{i}")) < ACTIVE_SHARDS));
    }
}
