//! Mapping between TunePlane records and DynamoDB items (`AttributeValue` maps).
//!
//! Scalar fields are native attributes (`state`, `version`, `submitted_at`, ...) so conditions and
//! filters can use them; nested documents (`spec`, `pending`, `failure`) are JSON strings. The
//! index attributes (`tpk`/`tsk`, sparse `apk`/`ask`) are derived here and nowhere else.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tuneplane_core::job::{EventSource, JobEvent, JobRecord, JobState};
use tuneplane_core::store::{
    StoreError, active_shard, active_sort_key, event_sort_key, tenant_sort_key,
};

/// A raw DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// Partition key of a job and its events.
pub fn job_pk(id: &str) -> String {
    format!("JOB#{id}")
}

/// Sort key of the job item itself.
pub const JOB_SK: &str = "JOB";

/// Sort key of an event item.
pub fn event_sk(at_ms: i64, key: &str) -> String {
    format!("EVT#{}", event_sort_key(at_ms, key))
}

/// Partition key of a tenant in the tenant index.
pub fn tenant_pk(tenant: &str) -> String {
    format!("TENANT#{tenant}")
}

/// Partition key of one shard of the active index.
pub fn active_pk(shard: u32) -> String {
    format!("ACTIVE#{shard}")
}

/// Active-index partition that lists playgrounds.
pub const PLAYGROUNDS_PK: &str = "PLAYGROUNDS";

/// A string attribute.
pub fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// A number attribute.
pub fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A stored item being decoded, with the context its errors need.
pub struct Stored<'a> {
    /// The DynamoDB table the write goes to.
    pub table: &'a str,
    /// The raw attribute map read from the table.
    pub item: &'a Item,
}

impl Stored<'_> {
    fn key(&self) -> String {
        let part = |name| match self.item.get(name) {
            Some(AttributeValue::S(v)) => v.as_str(),
            _ => "?",
        };
        format!("{}/{}", part("pk"), part("sk"))
    }

    fn corrupt(&self, reason: String) -> StoreError {
        StoreError::Corrupt {
            table: self.table.to_owned(),
            key: self.key(),
            reason,
        }
    }

    /// A required string attribute.
    pub fn s(&self, name: &str) -> Result<&str, StoreError> {
        self.opt_s(name)?
            .ok_or_else(|| self.corrupt(format!("missing string attribute {name}")))
    }

    /// The required `tenant` attribute, checked against the tenant rule (a record naming a
    /// tenant no door accepts is reported as corrupt, not passed on).
    pub fn tenant(&self) -> Result<tuneplane_core::ids::TenantId, StoreError> {
        tuneplane_core::ids::TenantId::parse(self.s("tenant")?)
            .map_err(|e| self.corrupt(format!("attribute tenant: {e}")))
    }

    /// A required job id attribute, checked against [`tuneplane_core::ids::ID_RULE`].
    pub fn job_id(&self, name: &str) -> Result<tuneplane_core::ids::JobId, StoreError> {
        tuneplane_core::ids::JobId::parse(self.s(name)?)
            .map_err(|e| self.corrupt(format!("attribute {name}: {e}")))
    }

    /// An optional string attribute.
    pub fn opt_s(&self, name: &str) -> Result<Option<&str>, StoreError> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v)),
            Some(_) => Err(self.corrupt(format!("attribute {name} is not a string"))),
        }
    }

    /// A required integer attribute.
    pub fn i64(&self, name: &str) -> Result<i64, StoreError> {
        self.opt_i64(name)?
            .ok_or_else(|| self.corrupt(format!("missing number attribute {name}")))
    }

    /// An optional integer attribute.
    pub fn opt_i64(&self, name: &str) -> Result<Option<i64>, StoreError> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::N(v)) => v
                .parse()
                .map(Some)
                .map_err(|_| self.corrupt(format!("attribute {name} is not an integer: {v}"))),
            Some(_) => Err(self.corrupt(format!("attribute {name} is not a number"))),
        }
    }

    /// A JSON document stored in a string attribute.
    pub fn json<T: DeserializeOwned>(&self, name: &str) -> Result<T, StoreError> {
        serde_json::from_str(self.s(name)?)
            .map_err(|e| self.corrupt(format!("attribute {name}: {e}")))
    }

    /// An optional JSON document.
    pub fn opt_json<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, StoreError> {
        self.opt_s(name)?
            .map(|text| {
                serde_json::from_str(text)
                    .map_err(|e| self.corrupt(format!("attribute {name}: {e}")))
            })
            .transpose()
    }
}

/// JSON text of a record field (serialising plain structs cannot fail; `null` if it ever did).
pub fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// The item of a job record, with its index attributes.
pub struct JobItem(pub Item);

impl From<&JobRecord> for JobItem {
    fn from(job: &JobRecord) -> JobItem {
        let mut item = Item::from([
            ("pk".to_owned(), s(job_pk(&job.id))),
            ("sk".to_owned(), s(JOB_SK)),
            ("id".to_owned(), s(&job.id)),
            ("tenant".to_owned(), s(job.tenant.as_str())),
            ("state".to_owned(), s(job.state.as_str())),
            ("version".to_owned(), n(job.version)),
            ("priority".to_owned(), n(job.spec.priority)),
            ("capsule_sha256".to_owned(), s(&job.capsule_sha256)),
            ("submitted_at".to_owned(), n(job.submitted_at_ms)),
            (
                "stop_requested".to_owned(),
                AttributeValue::Bool(job.stop_requested),
            ),
            ("spec".to_owned(), s(to_json(&job.spec))),
            ("tpk".to_owned(), s(tenant_pk(&job.tenant))),
            (
                "tsk".to_owned(),
                s(tenant_sort_key(job.submitted_at_ms, &job.id)),
            ),
        ]);
        let mut put_opt = |name: &str, value: Option<AttributeValue>| {
            if let Some(v) = value {
                item.insert(name.to_owned(), v);
            }
        };
        put_opt("admitted_at", job.admitted_at_ms.map(n));
        put_opt("running_at", job.running_at_ms.map(n));
        put_opt("finished_at", job.finished_at_ms.map(n));
        put_opt("workload_name", job.workload_name.as_ref().map(s));
        put_opt("logs_key", job.logs_key.as_ref().map(s));
        put_opt("pending", job.pending.as_ref().map(|p| s(to_json(p))));
        put_opt("failure", job.failure.as_ref().map(|f| s(to_json(f))));
        put_opt("logs_followed_until", job.logs_followed_until_ms.map(n));
        put_opt("logs_wanted_at", job.logs_wanted_at_ms.map(n));
        put_opt(
            "archive_failures",
            (job.archive_failures > 0).then(|| n(job.archive_failures)),
        );
        put_opt(
            "placements",
            (!job.placements.is_empty()).then(|| s(to_json(&job.placements))),
        );
        put_opt("attempt", (job.attempt > 1).then(|| n(job.attempt)));
        put_opt(
            "attempts",
            (!job.attempts.is_empty()).then(|| s(to_json(&job.attempts))),
        );
        put_opt("preempt", job.preempt.as_ref().map(|p| s(to_json(p))));
        put_opt("preempting", job.preempting.as_ref().map(|p| s(to_json(p))));
        put_opt("array", job.array.as_ref().map(|a| s(to_json(a))));
        // Sparse index: only non-terminal jobs carry the active-index keys.
        if !job.is_terminal() {
            put_opt("apk", Some(s(active_pk(active_shard(&job.id)))));
            put_opt(
                "ask",
                Some(s(active_sort_key(
                    job.spec.priority,
                    job.submitted_at_ms,
                    &job.id,
                ))),
            );
        }
        JobItem(item)
    }
}

impl TryFrom<Stored<'_>> for JobRecord {
    type Error = StoreError;

    fn try_from(stored: Stored<'_>) -> Result<JobRecord, StoreError> {
        let state_name = stored.s("state")?;
        let state = JobState::parse(state_name)
            .ok_or_else(|| stored.corrupt(format!("unknown state {state_name}")))?;
        let version = u64::try_from(stored.i64("version")?)
            .map_err(|_| stored.corrupt("negative version".into()))?;
        Ok(JobRecord {
            id: stored.job_id("id")?,
            tenant: stored.tenant()?,
            spec: stored.json("spec")?,
            capsule_sha256: stored.s("capsule_sha256")?.to_owned(),
            state,
            version,
            submitted_at_ms: stored.i64("submitted_at")?,
            admitted_at_ms: stored.opt_i64("admitted_at")?,
            running_at_ms: stored.opt_i64("running_at")?,
            finished_at_ms: stored.opt_i64("finished_at")?,
            pending: stored.opt_json("pending")?,
            stop_requested: matches!(
                stored.item.get("stop_requested"),
                Some(AttributeValue::Bool(true))
            ),
            failure: stored.opt_json("failure")?,
            workload_name: stored.opt_s("workload_name")?.map(str::to_owned),
            logs_key: stored.opt_s("logs_key")?.map(str::to_owned),
            placements: stored.opt_json("placements")?.unwrap_or_default(),
            logs_followed_until_ms: stored.opt_i64("logs_followed_until")?,
            logs_wanted_at_ms: stored.opt_i64("logs_wanted_at")?,
            archive_failures: match stored.opt_i64("archive_failures")? {
                None => 0,
                Some(v) => u32::try_from(v).map_err(|_| {
                    stored.corrupt(format!("attribute archive_failures is out of range: {v}"))
                })?,
            },
            attempt: match stored.opt_i64("attempt")? {
                None => 1,
                Some(v) => u32::try_from(v).ok().filter(|a| *a >= 1).ok_or_else(|| {
                    stored.corrupt(format!("attribute attempt is out of range: {v}"))
                })?,
            },
            attempts: stored.opt_json("attempts")?.unwrap_or_default(),
            preempt: stored.opt_json("preempt")?,
            preempting: stored.opt_json("preempting")?,
            array: stored.opt_json("array")?,
        })
    }
}

/// The item of one event of `job_id`, expiring at `ttl` (Unix seconds).
pub struct EventItem(pub Item);

impl EventItem {
    /// Builds the item.
    pub fn new(job_id: &str, event: &JobEvent, ttl: i64) -> EventItem {
        let source = match event.source {
            EventSource::Platform => "Platform",
            EventSource::Kubernetes => "Kubernetes",
        };
        let mut item = Item::from([
            ("pk".to_owned(), s(job_pk(job_id))),
            ("sk".to_owned(), s(event_sk(event.at_ms, &event.key))),
            ("at".to_owned(), n(event.at_ms)),
            ("event_key".to_owned(), s(&event.key)),
            ("source".to_owned(), s(source)),
            ("kind".to_owned(), s(&event.kind)),
            ("reason".to_owned(), s(&event.reason)),
            ("message".to_owned(), s(&event.message)),
            ("ttl".to_owned(), n(ttl)),
        ]);
        if let Some(object) = &event.object {
            item.insert("object".to_owned(), s(object));
        }
        EventItem(item)
    }
}

impl TryFrom<Stored<'_>> for JobEvent {
    type Error = StoreError;

    fn try_from(stored: Stored<'_>) -> Result<JobEvent, StoreError> {
        let source = match stored.s("source")? {
            "Platform" => EventSource::Platform,
            "Kubernetes" => EventSource::Kubernetes,
            other => return Err(stored.corrupt(format!("unknown event source {other}"))),
        };
        Ok(JobEvent {
            at_ms: stored.i64("at")?,
            key: stored.s("event_key")?.to_owned(),
            source,
            kind: stored.s("kind")?.to_owned(),
            reason: stored.s("reason")?.to_owned(),
            message: stored.s("message")?.to_owned(),
            object: stored.opt_s("object")?.map(str::to_owned),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_item_whose_id_breaks_the_id_rule_is_corrupt_and_says_why() {
        let spec = serde_json::from_value(serde_json::json!({
            "name": "t", "plugin": "custom/custom", "image": "img", "entrypoint": "true",
            "env": {}, "pools": [{"name": "main", "series": "h200", "nodes": 1, "gpus_per_node": 8,
                "cpus": 8.0, "memory_gb": 64.0}],
            "deadlines": {"pre_running_seconds": 60, "run_seconds": 600},
            "priority": 0, "labels": {}, "namespace": "ns", "platform_version": "0"
        }))
        .unwrap();
        let job = JobRecord::new_queued(
            "j-1".parse().unwrap(),
            "acme".parse().unwrap(),
            spec,
            "ab",
            0,
        );
        let JobItem(mut item) = JobItem::from(&job);
        let stored = Stored {
            table: "jobs",
            item: &item,
        };
        assert_eq!(JobRecord::try_from(stored).unwrap(), job);
        item.insert("id".to_owned(), s("J/1"));
        let stored = Stored {
            table: "jobs",
            item: &item,
        };
        let err = JobRecord::try_from(stored).unwrap_err().to_string();
        assert!(
            err.contains("attribute id: \"J/1\" is not a valid id: use 1-64"),
            "{err}"
        );
    }
}
