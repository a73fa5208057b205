//! The `JobStore` implementation of [`DynamoJobStore`], and the items beside jobs: idempotency
//! keys, API keys, the capacity snapshot, schedules, playgrounds and tenant quotas.
//!
//! Side records keep their fields in a JSON `body` attribute plus the attributes that conditions
//! and indexes need (`version`, `ttl`, `apk`/`ask`).

use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tuneplane_core::audit::{AuditEntry, AuditQuery};
use tuneplane_core::callback::{CallbackSecret, OutboxEntry, Subscription};
use tuneplane_core::ids::TenantId;
use tuneplane_core::job::{JobEvent, JobRecord};
use tuneplane_core::quota::TenantQuota;
use tuneplane_core::store::{
    ApiKeyChange, ApiKeyRecord, AuditRecords, CreateOutcome, EventQuery, Idempotency,
    IdempotencyRecord, JobQuery, JobRecords, JobUpdate, KeyRecords, NewJob, OutboxRecords, Page,
    PlaygroundCreate, PlaygroundRecord, PlaygroundRecords, QuotaRecords, Result, ScheduleRecord,
    ScheduleRecords, StoreError, SubscriptionRecords,
};

mod audit;
mod jobs;
mod keys;
mod outbox;
mod playgrounds;
mod quotas;
mod schedules;
mod subscriptions;

use super::item::{Item, PLAYGROUNDS_PK, Stored, n, s, to_json};
use super::{ACTIVE_INDEX, DynamoJobStore};

/// The idempotency item of `job`'s creation.
pub(super) fn idempotency_item(pk: &str, job: &JobRecord, idem: &Idempotency, ttl: i64) -> Item {
    Item::from([
        ("pk".to_owned(), s(pk)),
        ("sk".to_owned(), s("IDEM")),
        ("tenant".to_owned(), s(job.tenant.as_str())),
        ("idem_key".to_owned(), s(&idem.key)),
        ("request_sha256".to_owned(), s(&idem.request_sha256)),
        ("job_id".to_owned(), s(&job.id)),
        ("ttl".to_owned(), n(ttl)),
    ])
}

/// Decodes an idempotency item.
pub(super) fn idempotency_from(table: &str, item: &Item) -> Result<IdempotencyRecord> {
    let stored = Stored { table, item };
    Ok(IdempotencyRecord {
        tenant: stored.tenant()?,
        key: stored.s("idem_key")?.to_owned(),
        request_sha256: stored.s("request_sha256")?.to_owned(),
        job_id: stored.job_id("job_id")?,
        expires_at: stored.i64("ttl")?,
    })
}

impl DynamoJobStore {
    /// Writes a side record; `expected` = `Some(0)` creates, `Some(v)` updates version `v`, `None`
    /// overwrites unconditionally.
    async fn put_doc(
        &self,
        pk: &str,
        sk: &str,
        body: &impl Serialize,
        expected: Option<u64>,
        extra: Vec<(&str, AttributeValue)>,
    ) -> Result<()> {
        let mut item = Item::from([
            ("pk".to_owned(), s(pk)),
            ("sk".to_owned(), s(sk)),
            ("body".to_owned(), s(to_json(body))),
        ]);
        let token = super::write_token();
        if let Some(v) = expected {
            item.insert("version".to_owned(), n(v + 1));
            item.insert(super::WRITE_TOKEN.to_owned(), s(&token));
        }
        item.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v)));
        let mut put = self
            .client
            .put_item()
            .table_name(self.table())
            .set_item(Some(item));
        put = match expected {
            None => put,
            Some(0) => put.condition_expression("attribute_not_exists(pk)"),
            Some(v) => put
                .condition_expression("#v = :v")
                .expression_attribute_names("#v", "version")
                .expression_attribute_values(":v", n(v)),
        };
        match put.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                if self.already_written(pk, sk, &token).await {
                    return Ok(());
                }
                Err(match expected {
                    Some(0) => StoreError::AlreadyExists {
                        table: self.table().to_owned(),
                        key: pk.to_owned(),
                    },
                    _ => StoreError::Conflict {
                        table: self.table().to_owned(),
                        key: pk.to_owned(),
                        expected: expected.unwrap_or(0),
                    },
                })
            }
            Err(e) => Err(self.backend("PutItem", pk, e)),
        }
    }

    /// Writes `record` as a side record at its version (read and bumped through `version`) + 1,
    /// if the stored version is still the record's (0 creates); returns what was stored.
    async fn put_versioned<R: Serialize + Clone>(
        &self,
        (pk, sk): (&str, &str),
        record: &R,
        version: fn(&mut R) -> &mut u64,
        extra: Vec<(&str, AttributeValue)>,
    ) -> Result<R> {
        let mut next = record.clone();
        let expected = *version(&mut next);
        *version(&mut next) = expected + 1;
        self.put_doc(pk, sk, &next, Some(expected), extra).await?;
        Ok(next)
    }

    async fn get_doc<T: DeserializeOwned>(&self, pk: &str, sk: &str) -> Result<Option<T>> {
        let item = self.get_item(pk, sk).await?;
        item.as_ref()
            .map(|i| {
                Stored {
                    table: self.table(),
                    item: i,
                }
                .json("body")
            })
            .transpose()
    }

    /// Decodes the JSON `body` of side records.
    fn bodies<T: DeserializeOwned>(&self, items: &[Item]) -> Result<Vec<T>> {
        items
            .iter()
            .map(|i| {
                Stored {
                    table: self.table(),
                    item: i,
                }
                .json("body")
            })
            .collect()
    }

    async fn delete_doc(&self, pk: &str, sk: &str) -> Result<()> {
        self.client
            .delete_item()
            .table_name(self.table())
            .key("pk", s(pk))
            .key("sk", s(sk))
            .send()
            .await
            .map_err(|e| self.backend("DeleteItem", pk, e))?;
        Ok(())
    }
}

/// Prefix of the audit partitions: `AUDIT#<tenant>`, `sk` = `ID#<entry id>`.
const AUDIT_PK_PREFIX: &str = "AUDIT#";

fn audit_pk(tenant: &str) -> String {
    format!("{AUDIT_PK_PREFIX}{tenant}")
}

/// The item of an audit entry: the entry as JSON in `body`, its time in `at`.
pub(super) fn audit_item(entry: &AuditEntry) -> Item {
    Item::from([
        ("pk".to_owned(), s(audit_pk(&entry.tenant))),
        ("sk".to_owned(), s(format!("ID#{}", entry.id))),
        ("at".to_owned(), n(entry.at_ms)),
        ("body".to_owned(), s(to_json(entry))),
    ])
}

/// Partition of the tenants' quotas (`sk` is the tenant).
const QUOTA_PK: &str = "QUOTA";
