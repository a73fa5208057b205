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
    ApiKeyChange, ApiKeyRecord, CreateOutcome, EventQuery, Idempotency, IdempotencyRecord,
    JobQuery, JobStore, NewJob, Page, PlaygroundCreate, PlaygroundRecord, Result, ScheduleRecord,
    StoreError,
};

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
        job_id: stored.s("job_id")?.to_owned(),
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

#[async_trait::async_trait]
impl JobStore for DynamoJobStore {
    #[tracing::instrument(skip_all, fields(table = %self.table(), job_id = %new.job.id, events = new.events.len()), err)]
    async fn create(&self, new: NewJob<'_>) -> Result<CreateOutcome> {
        // A concurrent identical submission can cancel ours before its own transaction has
        // committed (nothing to resolve against yet): retry briefly, then report the conflict.
        let mut attempt = 0;
        loop {
            match self.create_once(new).await {
                Err(StoreError::Conflict { .. }) if new.idem.is_some() && attempt < 5 => {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20 << attempt)).await;
                }
                other => return other,
            }
        }
    }

    async fn get_job(&self, id: &str) -> Result<Option<JobRecord>> {
        self.get_job_inner(id).await
    }

    #[tracing::instrument(skip_all, fields(table = %self.table(), job_id = %job.id, version = job.version), err)]
    async fn update_job(&self, job: &JobRecord) -> Result<JobRecord> {
        self.update_job_inner(job).await
    }

    #[tracing::instrument(skip_all, fields(table = %self.table(), job_id = %job.id, version = job.version, events = events.len()), err)]
    async fn update_job_with_events(
        &self,
        job: &JobRecord,
        events: &[JobEvent],
    ) -> Result<JobRecord> {
        self.update_job_with_events_inner(job, events).await
    }

    async fn list_jobs(&self, tenant: &TenantId, query: &JobQuery) -> Result<Page<JobRecord>> {
        self.list_jobs_inner(tenant, query).await
    }

    #[tracing::instrument(skip_all, fields(table = %self.table()), err)]
    async fn list_active(&self) -> Result<Vec<JobRecord>> {
        self.list_active_inner().await
    }

    #[tracing::instrument(skip_all, fields(table = %self.table(), job_id = %job.id), err)]
    async fn queue_position(&self, job: &JobRecord) -> Result<Option<u64>> {
        self.queue_position_inner(job).await
    }

    #[tracing::instrument(skip_all, fields(table = %self.table(), job_id, count = events.len()), err)]
    async fn append_events(&self, job_id: &str, events: &[JobEvent]) -> Result<()> {
        self.append_events_inner(job_id, events).await
    }

    async fn list_events(&self, job_id: &str, query: &EventQuery) -> Result<Page<JobEvent>> {
        self.list_events_inner(job_id, query).await
    }

    async fn put_capacity(&self, snapshot: &serde_json::Value) -> Result<()> {
        self.put_doc("CAPACITY", "CURRENT", snapshot, None, Vec::new())
            .await
    }

    async fn get_capacity(&self) -> Result<Option<serde_json::Value>> {
        self.get_doc("CAPACITY", "CURRENT").await
    }

    async fn put_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let extra = vec![("tenant", s(key.tenant.as_str()))];
        self.put_doc(&format!("KEY#{}", key.key_sha256), "KEY", key, None, extra)
            .await
    }

    async fn get_api_key(&self, key_sha256: &str) -> Result<Option<ApiKeyRecord>> {
        self.get_doc(&format!("KEY#{key_sha256}"), "KEY").await
    }

    #[tracing::instrument(skip_all, fields(table = %self.table()), err)]
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        self.list_api_keys_inner().await
    }

    #[tracing::instrument(skip_all, fields(table = %self.table(), change = ?change), err)]
    async fn update_api_key(
        &self,
        key_sha256: &str,
        change: ApiKeyChange,
    ) -> Result<Option<ApiKeyRecord>> {
        self.update_api_key_inner(key_sha256, change).await
    }

    async fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<ScheduleRecord> {
        let pk = format!("SCHEDULE#{}", schedule.id);
        let extra = vec![("tenant", s(schedule.tenant.as_str()))];
        self.put_versioned((&pk, "SCHEDULE"), schedule, |r| &mut r.version, extra)
            .await
    }

    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>> {
        self.get_doc(&format!("SCHEDULE#{id}"), "SCHEDULE").await
    }

    async fn delete_schedule(&self, id: &str) -> Result<()> {
        self.delete_doc(&format!("SCHEDULE#{id}"), "SCHEDULE").await
    }

    async fn put_playground(&self, playground: &PlaygroundRecord) -> Result<PlaygroundRecord> {
        let pk = format!("PG#{}", playground.id);
        let extra = vec![
            ("tenant", s(playground.tenant.as_str())),
            ("apk", s(PLAYGROUNDS_PK)),
            ("ask", s(&playground.id)),
        ];
        self.put_versioned((&pk, "PG"), playground, |r| &mut r.version, extra)
            .await
    }

    async fn create_playground(
        &self,
        playground: &PlaygroundRecord,
        limit: u32,
        now_ms: i64,
    ) -> Result<PlaygroundCreate> {
        self.create_playground_inner(playground, limit, now_ms)
            .await
    }

    async fn get_playground(&self, id: &str) -> Result<Option<PlaygroundRecord>> {
        self.get_doc(&format!("PG#{id}"), "PG").await
    }

    async fn list_playgrounds(&self) -> Result<Vec<PlaygroundRecord>> {
        let items = self
            .query_partition(Some(ACTIVE_INDEX), "apk", PLAYGROUNDS_PK)
            .await?;
        self.bodies(&items)
    }

    async fn delete_playground(&self, id: &str) -> Result<()> {
        self.delete_doc(&format!("PG#{id}"), "PG").await
    }

    async fn retire_playground(&self, pg: &PlaygroundRecord) -> Result<()> {
        self.retire_playground_inner(pg).await
    }

    async fn list_retired_playgrounds(&self, tenant: &TenantId) -> Result<Vec<PlaygroundRecord>> {
        let items = self
            .query_partition(None, "pk", &format!("PGDONE#{tenant}"))
            .await?;
        self.bodies(&items)
    }

    async fn put_quota(&self, quota: &TenantQuota) -> Result<()> {
        self.put_doc(QUOTA_PK, &quota.tenant, quota, None, Vec::new())
            .await
    }

    async fn get_quota(&self, tenant: &TenantId) -> Result<Option<TenantQuota>> {
        self.get_doc(QUOTA_PK, tenant).await
    }

    async fn list_quotas(&self) -> Result<Vec<TenantQuota>> {
        // One partition: a query on the table itself, sorted by tenant.
        let items = self.query_partition(None, "pk", QUOTA_PK).await?;
        self.bodies(&items)
    }

    async fn delete_quota(&self, tenant: &TenantId) -> Result<()> {
        self.delete_doc(QUOTA_PK, tenant).await
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<()> {
        let put = self
            .client
            .put_item()
            .table_name(self.table())
            .set_item(Some(audit_item(entry)))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match put {
            Ok(_) => Ok(()),
            // The same change of a retried request is there already (or our own earlier
            // attempt, its answer lost): an entry is never replaced.
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(self.backend("PutItem", &audit_pk(&entry.tenant), e)),
        }
    }

    async fn list_outbox(&self, limit: usize) -> Result<Vec<OutboxEntry>> {
        self.list_outbox_inner(limit).await
    }

    async fn update_outbox(&self, entry: &OutboxEntry) -> Result<OutboxEntry> {
        self.update_outbox_inner(entry).await
    }

    async fn delete_outbox(&self, entry: &OutboxEntry) -> Result<()> {
        self.delete_outbox_inner(entry).await
    }

    async fn discard_outbox(&self, entries: &[OutboxEntry]) -> Result<()> {
        self.discard_outbox_inner(entries).await
    }

    async fn put_subscription(&self, sub: &Subscription) -> Result<()> {
        let pk = super::outbox::subscriptions_pk(&sub.tenant);
        self.put_doc(&pk, &sub.id, sub, None, Vec::new()).await
    }

    async fn list_subscriptions(&self, tenant: &TenantId) -> Result<Vec<Subscription>> {
        self.list_subscriptions_inner(tenant).await
    }

    async fn delete_subscription(&self, tenant: &TenantId, id: &str) -> Result<bool> {
        self.delete_subscription_inner(tenant, id).await
    }

    async fn get_callback_secret(&self, tenant: &TenantId) -> Result<Option<CallbackSecret>> {
        self.get_doc(&super::outbox::secret_pk(tenant), "CURRENT")
            .await
    }

    async fn put_callback_secret(
        &self,
        secret: &CallbackSecret,
        replace: bool,
    ) -> Result<CallbackSecret> {
        self.put_callback_secret_inner(secret, replace).await
    }

    async fn list_audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>> {
        let items = match &query.tenant {
            // One partition per tenant.
            Some(tenant) => self.query_partition(None, "pk", &audit_pk(tenant)).await?,
            // Operators across tenants, rarely: a filtered scan, like the key listing.
            None => {
                let mut start: Option<Item> = None;
                let mut items = Vec::new();
                loop {
                    let out = self
                        .client
                        .scan()
                        .table_name(self.table())
                        .filter_expression("begins_with(pk, :p)")
                        .expression_attribute_values(":p", s(AUDIT_PK_PREFIX))
                        .consistent_read(true)
                        .set_exclusive_start_key(start)
                        .send()
                        .await
                        .map_err(|e| self.backend("Scan", AUDIT_PK_PREFIX, e))?;
                    items.extend(out.items.unwrap_or_default());
                    start = out.last_evaluated_key;
                    if start.is_none() {
                        break;
                    }
                }
                items
            }
        };
        Ok(query.finish(self.bodies(&items)?))
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
