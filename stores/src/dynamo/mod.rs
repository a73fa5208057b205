//! DynamoDB job store on the single-table design of docs/design.md §6.
//!
//! | item | `pk` | `sk` | other keys |
//! |---|---|---|---|
//! | job | `JOB#<id>` | `JOB` | `tpk`=`TENANT#<tenant>`, `tsk`=`<ms>#<id>`; while active `apk`=`ACTIVE#<0..4>`, `ask`=`<inv prio>#<ms>#<id>` |
//! | event | `JOB#<id>` | `EVT#<ms>#<key>` | `ttl` |
//! | idempotency | `IDEM#<tenant>#<key>` | `IDEM` | `ttl` |
//! | API key | `KEY#<sha256>` | `KEY` | |
//! | capacity | `CAPACITY` | `CURRENT` | |
//! | schedule | `SCHEDULE#<id>` | `SCHEDULE` | |
//! | playground | `PG#<id>` | `PG` | `apk`=`PLAYGROUNDS`, `ask`=`<id>` |
//! | a tenant's live playgrounds (the limit's guard) | `PGSLOTS#<tenant>` | `PGSLOTS` | |
//! | tenant quota | `QUOTA` | `<tenant>` | |
//!
//! Indexes (projection ALL): `active` (`apk`, `ask`: sparse, holds only non-terminal jobs and
//! playgrounds) and `tenant` (`tpk`, `tsk`). Every job write is a conditional `PutItem` on
//! `version`; creation with an idempotency key is one `TransactWriteItems` of two conditional puts,
//! and a state change with its events (`update_job_with_events`) is one `TransactWriteItems` of the
//! conditional job put and the event puts.

/// `$put` (a `PutItem` request or a transaction's `Put` builder: two types with the same
/// setters) on `$table` with the item of `$write` (a [`GuardedJobWrite`], whose `item` it
/// moves) and the condition that guards it.
macro_rules! guarded_put {
    ($put:expr, $table:expr, $write:ident) => {{
        let (names, values) = $write.condition_attributes();
        $put.table_name($table)
            .set_item(Some($write.item))
            .condition_expression(GuardedJobWrite::CONDITION)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
    }};
}

pub mod item;
mod keys;
mod outbox;
mod playgrounds;
mod query;
mod records;
pub mod table;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use tuneplane_core::clock::now_secs;
use tuneplane_core::job::{JobEvent, JobRecord};
use tuneplane_core::store::{
    BoxError, CreateOutcome, Idempotency, IdempotencyRecord, NewJob, Result, StoreError,
};

use item::{EventItem, Item, JOB_SK, JobItem, Stored, event_sk, job_pk, n, s};

/// Name of the sparse index of active jobs and playgrounds.
pub const ACTIVE_INDEX: &str = "active";
/// Name of the index of a tenant's jobs.
pub const TENANT_INDEX: &str = "tenant";
/// How long events are kept by default (DynamoDB TTL).
pub const DEFAULT_EVENT_TTL: Duration = Duration::from_secs(90 * 24 * 3600);

/// [`tuneplane_core::store::JobStore`] on one DynamoDB table; see the module docs for the layout.
#[derive(Debug, Clone)]
pub struct DynamoJobStore {
    client: Client,
    table: String,
    event_ttl_secs: i64,
}

impl DynamoJobStore {
    /// A store on `table` (create it with [`table::create_table`] or `template.yaml`).
    pub fn new(client: Client, table: impl Into<String>) -> DynamoJobStore {
        let event_ttl_secs = DEFAULT_EVENT_TTL.as_secs() as i64;
        DynamoJobStore {
            client,
            table: table.into(),
            event_ttl_secs,
        }
    }

    /// Changes how long events are kept.
    pub fn with_event_ttl(mut self, ttl: Duration) -> DynamoJobStore {
        self.event_ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        self
    }

    /// The DynamoDB table holding every record (jobs, events, keys, schedules, playgrounds).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// A [`StoreError::Backend`] of `op` on `key` of this table.
    pub(super) fn backend(
        &self,
        op: &'static str,
        key: &str,
        e: impl Into<BoxError>,
    ) -> StoreError {
        StoreError::backend(op, &self.table, key, e)
    }

    pub(super) fn conflict(&self, key: &str, expected: u64) -> StoreError {
        StoreError::Conflict {
            table: self.table.clone(),
            key: key.to_owned(),
            expected,
        }
    }

    pub(super) fn decode<T>(&self, item: &Item) -> Result<T>
    where
        for<'a> T: TryFrom<Stored<'a>, Error = StoreError>,
    {
        T::try_from(Stored {
            table: &self.table,
            item,
        })
    }

    pub(super) async fn get_item(&self, pk: &str, sk: &str) -> Result<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.backend("GetItem", pk, e))?;
        Ok(out.item)
    }

    /// Runs a query to the end (or until `want` items), following `LastEvaluatedKey`.
    pub(super) async fn query_all(
        &self,
        build: impl Fn(Option<Item>) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder,
        what: &str,
        want: Option<usize>,
        mut start: Option<Item>,
    ) -> Result<Vec<Item>> {
        let mut items = Vec::new();
        loop {
            let out = build(start)
                .send()
                .await
                .map_err(|e| self.backend("Query", what, e))?;
            items.extend(out.items.unwrap_or_default());
            start = out.last_evaluated_key;
            if start.is_none() || want.is_some_and(|w| items.len() >= w) {
                return Ok(items);
            }
        }
    }

    /// Every item of the partition `value` of the key attribute `attr` (of `index`, or of the
    /// table itself when `None`), in sort-key order.
    pub(super) async fn query_partition(
        &self,
        index: Option<&str>,
        attr: &str,
        value: &str,
    ) -> Result<Vec<Item>> {
        let condition = format!("{attr} = :v");
        let build = |from: Option<Item>| {
            self.client
                .query()
                .table_name(&self.table)
                .set_index_name(index.map(str::to_owned))
                .key_condition_expression(&condition)
                .expression_attribute_values(":v", s(value))
                .set_exclusive_start_key(from)
        };
        self.query_all(build, value, None, None).await
    }

    /// Resolves a create whose idempotency condition failed: the first request's job, or a mismatch.
    async fn resolve_idempotent(
        &self,
        tenant: &str,
        idem: &Idempotency,
        idem_pk: &str,
    ) -> Result<CreateOutcome> {
        let item = self.get_item(idem_pk, "IDEM").await?;
        let record: Option<IdempotencyRecord> = item
            .as_ref()
            .map(|i| records::idempotency_from(&self.table, i))
            .transpose()?;
        let Some(first) = record.filter(|r| r.expires_at > now_secs()) else {
            // The competing transaction did not commit: let the caller retry.
            return Err(self.conflict(idem_pk, 0));
        };
        if first.request_sha256 != idem.request_sha256 {
            return Err(StoreError::IdempotencyMismatch {
                tenant: tenant.to_owned(),
                key: idem.key.clone(),
                job_id: first.job_id,
            });
        }
        let job = self.get_job_inner(&first.job_id).await?;
        job.map(CreateOutcome::Existing)
            .ok_or_else(|| StoreError::Corrupt {
                table: self.table.clone(),
                key: idem_pk.to_owned(),
                reason: format!("idempotency record points at missing job {}", first.job_id),
            })
    }

    async fn get_job_inner(&self, id: &str) -> Result<Option<JobRecord>> {
        let item = self.get_item(&job_pk(id), JOB_SK).await?;
        item.as_ref().map(|i| self.decode(i)).transpose()
    }

    /// The put of each event of `job_id` (at most 98, so that the job and its idempotency record
    /// fit one transaction; a new job has one or two).
    fn event_puts(&self, job_id: &str, events: &[JobEvent]) -> Result<Vec<TransactWriteItem>> {
        let unique = unique_events(events);
        if unique.len() > 98 {
            return Err(self.backend(
                "TransactWriteItems",
                &job_pk(job_id),
                std::io::Error::other(format!(
                    "{} events cannot be written with the job in one transaction (at most 98)",
                    unique.len()
                )),
            ));
        }
        unique
            .into_iter()
            .map(|event| self.event_put(job_id, event))
            .collect()
    }

    /// The item of `event` of `job_id`, expiring `event_ttl` after the event.
    pub(super) fn event_item(&self, job_id: &str, event: &JobEvent) -> Item {
        let ttl = (event.at_ms / 1000).saturating_add(self.event_ttl_secs);
        let EventItem(item) = EventItem::new(job_id, event, ttl);
        item
    }

    /// The (unconditional) put of `event` of `job_id` in a transaction.
    pub(super) fn event_put(&self, job_id: &str, event: &JobEvent) -> Result<TransactWriteItem> {
        Put::builder()
            .table_name(&self.table)
            .set_item(Some(self.event_item(job_id, event)))
            .build()
            .map(|put| TransactWriteItem::builder().put(put).build())
            .map_err(|e| self.backend("TransactWriteItems", &job_pk(job_id), e))
    }

    /// After a create failed its `attribute_not_exists` condition: our own earlier attempt (its
    /// answer lost, the SDK retried) is a success; any other job at that key is taken.
    async fn ours_or_taken(
        &self,
        job: JobRecord,
        key: String,
        token: &str,
    ) -> Result<CreateOutcome> {
        if self.already_written(&key, JOB_SK, token).await {
            return Ok(CreateOutcome::Created(job));
        }
        Err(StoreError::AlreadyExists {
            table: self.table.clone(),
            key,
        })
    }

    /// The put of new job `job` (version 1), only if no item has its key, carrying `token`.
    fn new_job_put(&self, job: &JobRecord, token: &str) -> Result<TransactWriteItem> {
        let key = job_pk(&job.id);
        let JobItem(mut item) = JobItem::from(job);
        item.insert(WRITE_TOKEN.to_owned(), s(token));
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(|e| self.backend("TransactWriteItems", &key, e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// What a new job's transaction writes beside the job: its events, the callbacks' outbox
    /// entries of the submission, its audit entry (a fresh job's: its id is new, so the put
    /// needs no condition).
    fn new_job_extras(
        &self,
        job: &JobRecord,
        events: &[JobEvent],
        audit: Option<&tuneplane_core::audit::AuditEntry>,
    ) -> Result<Vec<TransactWriteItem>> {
        let mut items = self.event_puts(&job.id, events)?;
        let written: Vec<&JobEvent> = unique_events(events);
        items.extend(self.outbox_puts(job, &written)?);
        if let Some(entry) = audit {
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(records::audit_item(entry)))
                .build()
                .map_err(|e| self.backend("TransactWriteItems", &job_pk(&job.id), e))?;
            items.push(TransactWriteItem::builder().put(put).build());
        }
        Ok(items)
    }

    /// [`JobRecords::create_all`]: one transaction of every job with its events and audit
    /// entry; a job id already taken cancels it (nothing is written).
    pub(super) async fn create_all_inner(&self, jobs: &[NewJob<'_>]) -> Result<Vec<JobRecord>> {
        tuneplane_core::store::check_create_all(jobs)?;
        let token = write_token();
        let mut items = Vec::new();
        let mut created = Vec::with_capacity(jobs.len());
        for new in jobs {
            let mut job = new.job.clone();
            job.version = 1;
            items.push(self.new_job_put(&job, &token)?);
            items.extend(self.new_job_extras(&job, new.events, new.audit)?);
            created.push(job);
        }
        let key = created.first().map(|j| job_pk(&j.id)).unwrap_or_default();
        if items.len() > 100 {
            return Err(StoreError::InvalidKey {
                key,
                reason: format!(
                    "{} items in one transaction; DynamoDB allows 100: submit fewer jobs at once",
                    items.len()
                ),
            });
        }
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(created),
            Err(err) => {
                // An answer lost after the write (the SDK retried and met its own items).
                if let Some(first) = created.first()
                    && self
                        .already_written(&job_pk(&first.id), JOB_SK, &token)
                        .await
                {
                    return Ok(created);
                }
                let cancelled = matches!(
                    err.as_service_error(),
                    Some(TransactWriteItemsError::TransactionCanceledException(_))
                );
                if cancelled {
                    return Err(StoreError::AlreadyExists {
                        table: self.table.clone(),
                        key,
                    });
                }
                Err(self.backend("TransactWriteItems", &key, err))
            }
        }
    }

    /// One attempt of [`JobStore::create`]: a single transaction.
    async fn create_once(&self, new: NewJob<'_>) -> Result<CreateOutcome> {
        let NewJob {
            job,
            idem,
            events,
            audit,
        } = new;
        let mut job = job.clone();
        job.version = 1;
        let key = job_pk(&job.id);
        let token = write_token();
        // One transaction: the job (index 0, only if absent), its idempotency record (index 1,
        // when the request has a key), then the events, which carry no condition.
        let mut items = vec![self.new_job_put(&job, &token)?];
        let mut idem_pk = None;
        if let Some(idem) = idem {
            let now = now_secs();
            let pk = format!("IDEM#{}#{}", job.tenant, idem.key);
            let ttl = now.saturating_add(i64::try_from(idem.ttl_seconds).unwrap_or(i64::MAX));
            let idem_item = records::idempotency_item(&pk, &job, idem, ttl);
            // An expired key may be reused even before DynamoDB's TTL sweep deletes it.
            let put_idem = Put::builder()
                .table_name(&self.table)
                .set_item(Some(idem_item))
                .condition_expression("attribute_not_exists(pk) OR #ttl <= :now")
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":now", n(now))
                .build()
                .map_err(|e| self.backend("TransactWriteItems", &pk, e))?;
            items.push(TransactWriteItem::builder().put(put_idem).build());
            idem_pk = Some((idem, pk));
        }
        items.extend(self.new_job_extras(&job, events, audit)?);
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(CreateOutcome::Created(job)),
            Err(err) => err,
        };
        let codes: Option<Vec<String>> = match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(c)) => Some(
                c.cancellation_reasons()
                    .iter()
                    .map(|r| r.code().unwrap_or("None").to_owned())
                    .collect(),
            ),
            _ => None,
        };
        let failed = |i: usize| {
            codes
                .as_ref()
                .and_then(|c| c.get(i))
                .is_some_and(|code| code != "None")
        };
        match idem_pk {
            Some((idem, pk)) if failed(1) => self.resolve_idempotent(&job.tenant, idem, &pk).await,
            // Our own earlier attempt (its answer lost, the SDK retried) or another job.
            _ if failed(0) => self.ours_or_taken(job, key, &token).await,
            _ => Err(self.backend("TransactWriteItems", &key, err)),
        }
    }

    pub(super) async fn update_job_inner(&self, job: &JobRecord) -> Result<JobRecord> {
        let write = GuardedJobWrite::new(job);
        let result = guarded_put!(self.client.put_item(), &self.table, write)
            .send()
            .await;
        let (next, key, token) = (write.next, write.key, write.token);
        match result {
            Ok(_) => Ok(next),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                if self.already_written(&key, JOB_SK, &token).await {
                    return Ok(next);
                }
                Err(self.conflict(&key, job.version))
            }
            Err(e) => Err(self.backend("PutItem", &key, e)),
        }
    }

    /// True if the item at `pk`/`sk` carries `token`, the write token of a conditional put that
    /// failed its condition. The SDK retries a request whose answer was lost (a dropped
    /// connection, a 5xx after the write); the retry then fails the condition against its own
    /// earlier attempt, which is a success. Another writer's item, even an identical one, has
    /// another token; a read error says no.
    pub(super) async fn already_written(&self, pk: &str, sk: &str, token: &str) -> bool {
        let stored = self.get_item(pk, sk).await.ok().flatten();
        let ours = stored
            .as_ref()
            .and_then(|item| item.get(WRITE_TOKEN))
            .and_then(|v| v.as_s().ok())
            .is_some_and(|t| t == token);
        if ours {
            tracing::info!(
                table = %self.table,
                key = %pk,
                "conditional write had already applied (answer lost, retried)"
            );
        }
        ours
    }
}

/// `events` once per sort key, in sort-key order (one request may not name an item twice); the
/// last copy of a repeated event wins.
pub(super) fn unique_events(events: &[JobEvent]) -> Vec<&JobEvent> {
    let mut unique = std::collections::BTreeMap::new();
    for event in events {
        unique.insert(event_sk(event.at_ms, &event.key), event);
    }
    unique.into_values().collect()
}

/// True when a transaction was cancelled because the condition of its first item failed.
pub(super) fn first_condition_failed(
    e: &aws_sdk_dynamodb::error::SdkError<
        TransactWriteItemsError,
        aws_sdk_dynamodb::config::http::HttpResponse,
    >,
) -> bool {
    match e.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(c)) => c
            .cancellation_reasons()
            .first()
            .and_then(|r| r.code())
            .is_some_and(|code| code == "ConditionalCheckFailed"),
        _ => false,
    }
}

/// The parts of a conditional job write (plain `PutItem` or inside a transaction): the record at
/// the next version with this call's write token, and the condition that the stored version is
/// still the caller's and the stored job is not terminal.
pub(super) struct GuardedJobWrite {
    /// The record as it will be stored (version + 1).
    pub next: JobRecord,
    /// Its partition key.
    pub key: String,
    /// The item, write token included.
    pub item: Item,
    /// This call's write token (see `already_written`).
    pub token: String,
    expected_version: u64,
}

impl GuardedJobWrite {
    /// The condition expression.
    pub const CONDITION: &'static str =
        "attribute_exists(pk) AND #v = :v AND NOT (#st IN (:s1, :s2, :s3))";

    pub(super) fn new(job: &JobRecord) -> GuardedJobWrite {
        let mut next = job.clone();
        next.version = job.version + 1;
        let JobItem(mut item) = JobItem::from(&next);
        let token = write_token();
        item.insert(WRITE_TOKEN.to_owned(), s(&token));
        GuardedJobWrite {
            key: job_pk(&job.id),
            next,
            item,
            token,
            expected_version: job.version,
        }
    }

    /// The names and values [`Self::CONDITION`] refers to.
    pub(super) fn condition_attributes(&self) -> (HashMap<String, String>, Item) {
        let names = HashMap::from([
            ("#v".to_owned(), "version".to_owned()),
            ("#st".to_owned(), "state".to_owned()),
        ]);
        let values = Item::from([
            (":v".to_owned(), n(self.expected_version)),
            (":s1".to_owned(), s("SUCCEEDED")),
            (":s2".to_owned(), s("FAILED")),
            (":s3".to_owned(), s("STOPPED")),
        ]);
        (names, values)
    }
}

/// Attribute of a versioned item (job, schedule, playground) naming the call that wrote it (see
/// `already_written`).
pub(super) const WRITE_TOKEN: &str = "write_token";

/// A token unique to one write call: process id, process start time and a counter.
pub(super) fn write_token() -> String {
    static START: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let start = START.get_or_init(tuneplane_core::clock::now_nanos);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{:x}-{start:x}-{n:x}", std::process::id())
}
