//! Storage traits: [`JobStore`] (job records and everything beside them) and [`BlobStore`]
//! (capsules, uploads, log archives), with the one error type both return.
//!
//! Two implementations of each live in `tuneplane-stores` (DynamoDB + embedded, S3 + filesystem)
//! and one contract test suite runs against all four. The traits are object safe (`Arc<dyn
//! JobStore>`) through `async-trait`; every future is `Send`.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::ids::TenantId;
use crate::job::{JobEvent, JobRecord, JobState};

mod records;

pub use records::{
    ACTIVE_SHARDS, active_shard, active_sort_key, decode_cursor, encode_cursor, event_sort_key,
    tenant_sort_key,
};
pub use records::{
    ApiKeyChange, ApiKeyRecord, IdempotencyRecord, PlaygroundRecord, PlaygroundState,
    PlaygroundStatus, ScheduleRecord, ScheduleStep,
};

/// Boxed source of a backend failure (an SDK or database error), kept as the error's `source()`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result of every store call.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything a store can report. Variants name the table or bucket, the key and the job id.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A conditional write lost: the record's version is no longer `expected` (another writer
    /// won), or the record does not exist, or it is terminal and therefore final.
    #[error("{table}: {key} was changed by another writer (expected version {expected})")]
    Conflict {
        /// Table (or embedded database) name.
        table: String,
        /// Record key, e.g. `JOB#<id>`.
        key: String,
        /// The version the caller wrote against.
        expected: u64,
    },
    /// A create found the record already there.
    #[error("{table}: {key} already exists")]
    AlreadyExists {
        /// The table (DynamoDB) or database file (embedded) written to.
        table: String,
        /// The key of the record that exists (`JOB#<id>`, `SCHEDULE#<id>`, ...).
        key: String,
    },
    /// The idempotency key was first used with a different request.
    #[error(
        "idempotency key {key:?} of tenant {tenant} was already used for a different request (job {job_id})"
    )]
    IdempotencyMismatch {
        /// Tenant that owns the key.
        tenant: String,
        /// The client's idempotency key.
        key: String,
        /// The job created by the first request.
        job_id: crate::ids::JobId,
    },
    /// A pagination cursor that this store did not hand out.
    #[error("invalid pagination cursor {cursor:?}")]
    InvalidCursor {
        /// The cursor as received.
        cursor: String,
    },
    /// A blob key or record field that cannot be stored (e.g. `..` in a key).
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The refused key, as given.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A blob that does not exist.
    #[error("{bucket}: no object at {key}")]
    BlobNotFound {
        /// Bucket or root directory.
        bucket: String,
        /// The blob key that was asked for.
        key: String,
    },
    /// A stored item that does not decode (missing attribute, bad JSON).
    #[error("{table}: stored item {key} is malformed: {reason}")]
    Corrupt {
        /// The table or bucket the item was read from.
        table: String,
        /// The key of the item that does not decode.
        key: String,
        /// What is missing or wrong.
        reason: String,
    },
    /// The backend failed (network, throttling, I/O, database).
    #[error("{op} on {table} {key} failed")]
    Backend {
        /// Operation, e.g. `PutItem` or `write blob`.
        op: &'static str,
        /// Table, bucket or root directory.
        table: String,
        /// Record or object key (empty for table-wide operations).
        key: String,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

impl StoreError {
    /// A [`StoreError::Backend`]: `op` on `key` (empty for table-wide operations) of `table` (a
    /// table, bucket or root directory) failed with `source`.
    pub fn backend(
        op: &'static str,
        table: &str,
        key: &str,
        source: impl Into<BoxError>,
    ) -> StoreError {
        StoreError::Backend {
            op,
            table: table.to_owned(),
            key: key.to_owned(),
            source: source.into(),
        }
    }
}

/// Idempotency of a submission: the same `key` with the same `request_sha256` returns the first job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    /// The client's `Idempotency-Key` (or schedule id + scheduled time).
    pub key: String,
    /// SHA-256 (hex) of the canonical request, to tell a retry from a different request.
    pub request_sha256: String,
    /// How long the key is remembered, in seconds.
    pub ttl_seconds: u64,
}

/// What [`JobRecords::create_job`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateOutcome {
    /// The job was stored (version 1).
    Created(JobRecord),
    /// The idempotency key matched an earlier identical request: this is that job.
    Existing(JobRecord),
}

impl CreateOutcome {
    /// The job, created now or earlier.
    pub fn record(&self) -> &JobRecord {
        match self {
            CreateOutcome::Created(r) | CreateOutcome::Existing(r) => r,
        }
    }
}

/// What [`JobRecords::create_playground`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum PlaygroundCreate {
    /// The playground was stored (version 1).
    Created(Box<PlaygroundRecord>),
    /// Its tenant already has `live` live playgrounds, `limit` or more; nothing was stored.
    AtLimit {
        /// The tenant's live playgrounds.
        live: usize,
    },
}

/// Whether `pg` is one of `tenant`'s live playgrounds at `now_ms` (before its TTL): what a
/// playground limit counts.
pub fn is_live_playground_of(pg: &PlaygroundRecord, tenant: &TenantId, now_ms: i64) -> bool {
    pg.tenant == *tenant && pg.expires_at_ms > now_ms
}

/// One page of a listing; pass `next` back as the cursor to continue.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// Opaque cursor of the next page; `None` on the last page.
    pub next: Option<String>,
}

impl<T> Page<T> {
    /// The page of a listing read one item ahead: at most `size` of `items` (which holds up to
    /// `size + 1`), so that `next` is `None` exactly on the last page. `next` is the cursor of
    /// the sort key `sort_key` gives the last item kept.
    pub fn from_lookahead(
        mut items: Vec<T>,
        size: usize,
        sort_key: impl FnOnce(&T) -> String,
    ) -> Page<T> {
        let next = if items.len() > size {
            items.truncate(size);
            items.last().map(|item| encode_cursor(&sort_key(item)))
        } else {
            None
        };
        Page { items, next }
    }
}

/// Listing a job's events, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Page size (clamped to 1..=1000; 0 means 100).
    pub limit: usize,
    /// Cursor from the previous page.
    pub cursor: Option<String>,
}

impl EventQuery {
    /// The first page of at most `limit` events.
    pub fn first(limit: usize) -> EventQuery {
        EventQuery {
            limit,
            cursor: None,
        }
    }

    /// The effective page size.
    pub fn page_size(&self) -> usize {
        if self.limit == 0 {
            100
        } else {
            self.limit.min(1000)
        }
    }
}

/// Listing a tenant's jobs, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobQuery {
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Page size (clamped to 1..=1000; 0 means 50).
    pub limit: usize,
    /// Cursor from the previous page.
    pub cursor: Option<String>,
}

impl JobQuery {
    /// The effective page size.
    pub fn page_size(&self) -> usize {
        if self.limit == 0 {
            50
        } else {
            self.limit.min(1000)
        }
    }
}

/// How many queued jobs (not being stopped) come before `job` in admission order among `jobs`.
pub use crate::admission::order::queue_ahead;

/// The most jobs [`JobRecords::create_all`] writes at once (DynamoDB's transactions hold at
/// most 100 items: a job, its events and audit entry take 3 to 4).
pub const MAX_CREATE_ALL: usize = 20;

/// Refuses a [`JobRecords::create_all`] the stores cannot write in one transaction: more than
/// [`MAX_CREATE_ALL`] jobs, or any with an idempotency key.
pub fn check_create_all(jobs: &[NewJob<'_>]) -> Result<()> {
    if jobs.len() > MAX_CREATE_ALL || jobs.iter().any(|n| n.idem.is_some()) {
        return Err(StoreError::InvalidKey {
            key: jobs
                .first()
                .map(|n| String::from(&n.job.id))
                .unwrap_or_default(),
            reason: format!(
                "{} jobs in one write: at most {MAX_CREATE_ALL}, none with an idempotency key",
                jobs.len()
            ),
        });
    }
    Ok(())
}

/// What [`JobRecords::create`] stores in one write.
#[derive(Debug, Clone, Copy)]
pub struct NewJob<'a> {
    /// The `QUEUED` record, `version` 0.
    pub job: &'a JobRecord,
    /// The submission's idempotency key, if it sent one.
    pub idem: Option<&'a Idempotency>,
    /// Events stored with the job (the `Submitted` event), none on an idempotent repeat.
    pub events: &'a [JobEvent],
    /// The submission's audit entry, stored with the job (not on an idempotent repeat).
    pub audit: Option<&'a crate::audit::AuditEntry>,
}

/// One update of [`JobRecords::update_jobs_with_events`]: the record (its `version` the stored
/// one) and the events written with it.
#[derive(Debug, Clone, Copy)]
pub struct JobUpdate<'a> {
    /// The record as it should be stored.
    pub job: &'a JobRecord,
    /// Events appended in the same write.
    pub events: &'a [JobEvent],
}

/// Job records and their events: create (with idempotency, first events and audit entry in one write), read, conditional updates, listings, the active index, the capacity snapshot.
#[async_trait::async_trait]
pub trait JobRecords: Send + Sync {
    /// Stores a new `QUEUED` job (its `version` must be 0; it is stored as 1) with its idempotency
    /// record and its first events, in one atomic write. A repeated identical request returns the
    /// first job ([`CreateOutcome::Existing`]) and writes no events; the same key with another
    /// request is [`StoreError::IdempotencyMismatch`]; a failed create writes nothing.
    async fn create(&self, new: NewJob<'_>) -> Result<CreateOutcome>;

    /// Stores several new `QUEUED` jobs (no idempotency keys), each with its events and audit
    /// entry, all in one atomic write or none of them (a pipeline's steps). At most
    /// [`MAX_CREATE_ALL`] jobs; an id already taken fails the whole write.
    async fn create_all(&self, jobs: &[NewJob<'_>]) -> Result<Vec<JobRecord>>;

    /// [`JobRecords::create`] of a job without events.
    async fn create_job(
        &self,
        job: &JobRecord,
        idem: Option<&Idempotency>,
    ) -> Result<CreateOutcome> {
        let events = &[];
        self.create(NewJob {
            job,
            idem,
            events,
            audit: None,
        })
        .await
    }

    /// Reads one job (strongly consistent).
    async fn get_job(&self, id: &str) -> Result<Option<JobRecord>>;

    /// Writes `job` if the stored version still equals `job.version` and the stored job is not
    /// terminal; returns the stored record (version + 1). Otherwise [`StoreError::Conflict`].
    async fn update_job(&self, job: &JobRecord) -> Result<JobRecord>;

    /// [`JobRecords::update_job`] and [`JobRecords::append_events`] for the same job as one atomic write:
    /// both land or neither does, so a crash between a state change and its history entry cannot
    /// leave the record without the event. The stores override this with a single transaction;
    /// this default (for wrappers) writes the record, then the events.
    async fn update_job_with_events(
        &self,
        job: &JobRecord,
        events: &[JobEvent],
    ) -> Result<JobRecord> {
        let stored = self.update_job(job).await?;
        self.append_events(&job.id, events).await?;
        Ok(stored)
    }

    /// [`JobRecords::update_job_with_events`] for several jobs (a pass's decisions, its pending
    /// reasons). Each update stands alone: one that conflicts (or fails) is reported in its slot
    /// and the others still land; the outcomes come in the order of `updates`. The embedded store
    /// writes the whole batch in one transaction, one commit, so a pass that decides hundreds of
    /// jobs stays short (its writes are serialised, one commit each took the pass seconds); the
    /// DynamoDB store writes them a few at a time (separate items, nothing serialises them). This
    /// default writes them one after another.
    async fn update_jobs_with_events(&self, updates: &[JobUpdate<'_>]) -> Vec<Result<JobRecord>> {
        let mut out = Vec::with_capacity(updates.len());
        for u in updates {
            out.push(self.update_job_with_events(u.job, u.events).await);
        }
        out
    }

    /// A tenant's jobs, newest first, with an optional state filter.
    async fn list_jobs(&self, tenant: &TenantId, query: &JobQuery) -> Result<Page<JobRecord>>;

    /// Every non-terminal job in admission order: priority (high first), then submission, then id.
    async fn list_active(&self) -> Result<Vec<JobRecord>>;

    /// A queued job's place in the queue (1 = next in admission order), counting only queued jobs
    /// that are not being stopped; `None` for any other job. Admission may still start a later
    /// job first where it fits nodes this one cannot use (backfill). This default reads the
    /// active index; the DynamoDB store counts on the index instead.
    async fn queue_position(&self, job: &JobRecord) -> Result<Option<u64>> {
        if !crate::admission::order::in_queue(job)
            || crate::admission::order::waits_for_dependencies(job)
            || job.is_array_parent()
        {
            return Ok(None);
        }
        let active = self.list_active().await?;
        Ok(Some(queue_ahead(job, &active) + 1))
    }

    /// Appends events; an event whose `(at_ms, key)` is already stored is not duplicated.
    async fn append_events(&self, job_id: &str, events: &[JobEvent]) -> Result<()>;

    /// A job's events in `(at_ms, key)` order.
    async fn list_events(&self, job_id: &str, query: &EventQuery) -> Result<Page<JobEvent>>;

    /// Replaces the capacity snapshot (opaque JSON owned by the capacity module).
    async fn put_capacity(&self, snapshot: &serde_json::Value) -> Result<()>;

    /// The latest capacity snapshot, if the reconciler published one.
    async fn get_capacity(&self) -> Result<Option<serde_json::Value>>;
}

/// API keys, stored by the SHA-256 of their secret.
#[async_trait::async_trait]
pub trait KeyRecords: Send + Sync {
    /// Stores an API key record (by its hash); overwrites a record with the same hash.
    async fn put_api_key(&self, key: &ApiKeyRecord) -> Result<()>;

    /// Looks up an API key by the SHA-256 (hex) of the secret; see [`hash_api_key`]. Revoked
    /// keys are returned too (check [`ApiKeyRecord::is_active`]).
    async fn get_api_key(&self, key_sha256: &str) -> Result<Option<ApiKeyRecord>>;

    /// Every API key record, revoked ones included, sorted by hash (operators list them; this
    /// reads the whole key set, so it is not for request paths).
    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>>;

    /// Applies `change` to the key with this hash in one atomic read-modify-write (a concurrent
    /// change is not lost); returns the stored record, or `None` when no key has that hash (and
    /// nothing is written).
    async fn update_api_key(
        &self,
        key_sha256: &str,
        change: ApiKeyChange,
    ) -> Result<Option<ApiKeyRecord>>;
}

/// Schedules (cron triggers).
#[async_trait::async_trait]
pub trait ScheduleRecords: Send + Sync {
    /// Creates (version 0) or conditionally updates a schedule; returns it with version + 1.
    async fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<ScheduleRecord>;

    /// Reads one schedule.
    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>>;

    /// Deletes a schedule (no error if absent).
    async fn delete_schedule(&self, id: &str) -> Result<()>;
}

/// Playgrounds: live ones and retired ones (for usage).
#[async_trait::async_trait]
pub trait PlaygroundRecords: Send + Sync {
    /// Creates (version 0) or conditionally updates a playground; returns it with version + 1.
    async fn put_playground(&self, playground: &PlaygroundRecord) -> Result<PlaygroundRecord>;

    /// Creates playground `playground` (version 0; [`StoreError::AlreadyExists`] if its id is
    /// taken) unless its tenant already has `limit` live ones (expiring after `now_ms`), in one
    /// conditional write with the count: of creates racing for a tenant's last places, as many
    /// as fit win and the rest are [`PlaygroundCreate::AtLimit`]. (The embedded store counts in
    /// its write transaction; DynamoDB guards a per-tenant item listing the live ones.)
    async fn create_playground(
        &self,
        playground: &PlaygroundRecord,
        limit: u32,
        now_ms: i64,
    ) -> Result<PlaygroundCreate>;

    /// Reads one playground.
    async fn get_playground(&self, id: &str) -> Result<Option<PlaygroundRecord>>;

    /// Every playground, for the reconciler (few exist at a time).
    async fn list_playgrounds(&self) -> Result<Vec<PlaygroundRecord>>;

    /// Deletes a playground (no error if absent).
    async fn delete_playground(&self, id: &str) -> Result<()>;

    /// Replaces playground `pg.id` by its retired copy `pg` (with `ended_at_ms`) in one atomic
    /// write: it leaves the live list and stays in its tenant's usage for good.
    async fn retire_playground(&self, pg: &PlaygroundRecord) -> Result<()>;

    /// The retired playgrounds of `tenant` (for usage), in id order.
    async fn list_retired_playgrounds(&self, tenant: &TenantId) -> Result<Vec<PlaygroundRecord>>;
}

/// Tenants' quotas and fair-share weights.
#[async_trait::async_trait]
pub trait QuotaRecords: Send + Sync {
    /// Stores a tenant's quota and weight (overwrites the tenant's previous record).
    async fn put_quota(&self, quota: &crate::quota::TenantQuota) -> Result<()>;

    /// Reads one tenant's quota; `None` when it has none (unlimited, weight 1).
    async fn get_quota(&self, tenant: &TenantId) -> Result<Option<crate::quota::TenantQuota>>;

    /// Every stored quota, sorted by tenant (the reconciler reads them once per pass).
    async fn list_quotas(&self) -> Result<Vec<crate::quota::TenantQuota>>;

    /// Deletes a tenant's quota (no error if absent): the tenant is unlimited again.
    async fn delete_quota(&self, tenant: &TenantId) -> Result<()>;
}

/// The audit trail: append and list only.
#[async_trait::async_trait]
pub trait AuditRecords: Send + Sync {
    /// Appends `entry` to the audit trail, unless an entry with its id is there already (the
    /// same change of a retried request). There is no way to change or delete an entry.
    async fn append_audit(&self, entry: &crate::audit::AuditEntry) -> Result<()>;

    /// The audit entries `query` selects, oldest first ([`AuditQuery::finish`](crate::audit::AuditQuery::finish)).
    async fn list_audit(
        &self,
        query: &crate::audit::AuditQuery,
    ) -> Result<Vec<crate::audit::AuditEntry>>;
}

/// The callback outbox: entries written with their job writes, then delivered and deleted.
#[async_trait::async_trait]
pub trait OutboxRecords: Send + Sync {
    /// At most `limit` outbox entries of job-event callbacks, in key order (each job's in the
    /// order its writes made them). Entries are written only with their job write
    /// ([`crate::callback::outbox::entries_for`] of the events of [`JobRecords::create`] and
    /// [`JobRecords::update_job_with_events`]).
    async fn list_outbox(&self, limit: usize) -> Result<Vec<crate::callback::OutboxEntry>>;

    /// Replaces `entry` if its `rev` is the stored one; returns it with the next `rev`.
    /// [`StoreError::Conflict`] when it changed or is gone.
    async fn update_outbox(
        &self,
        entry: &crate::callback::OutboxEntry,
    ) -> Result<crate::callback::OutboxEntry>;

    /// Deletes `entry` if its `rev` is the stored one (no error if it is gone already).
    async fn delete_outbox(&self, entry: &crate::callback::OutboxEntry) -> Result<()>;

    /// Deletes entries that no target wants (never fanned out), many per request and without
    /// revision checks: most state changes notify nobody, and their entries go in bulk.
    async fn discard_outbox(&self, entries: &[crate::callback::OutboxEntry]) -> Result<()>;
}

/// Callback subscriptions and each tenant's signing secret.
#[async_trait::async_trait]
pub trait SubscriptionRecords: Send + Sync {
    /// Stores a tenant's subscription (its id is new).
    async fn put_subscription(&self, sub: &crate::callback::Subscription) -> Result<()>;

    /// A tenant's subscriptions, oldest first.
    async fn list_subscriptions(
        &self,
        tenant: &TenantId,
    ) -> Result<Vec<crate::callback::Subscription>>;

    /// Deletes subscription `id` of `tenant`; false when there was none.
    async fn delete_subscription(&self, tenant: &TenantId, id: &str) -> Result<bool>;

    /// The secret `tenant`'s deliveries are signed with, if it has one.
    async fn get_callback_secret(
        &self,
        tenant: &TenantId,
    ) -> Result<Option<crate::callback::CallbackSecret>>;

    /// Stores `secret` (replacing the tenant's when `replace`, else only if it has none) and
    /// returns the one stored.
    async fn put_callback_secret(
        &self,
        secret: &crate::callback::CallbackSecret,
        replace: bool,
    ) -> Result<crate::callback::CallbackSecret>;
}

/// Every record kind's trait, for code that calls store methods on a concrete store type
/// (`use tuneplane_core::store::prelude::*`); through `dyn JobStore` they need no import.
pub mod prelude {
    pub use super::{
        AuditRecords, JobRecords, JobStore, KeyRecords, OutboxRecords, PlaygroundRecords,
        QuotaRecords, ScheduleRecords, SubscriptionRecords,
    };
}

/// Every kind of record in the job table, for callers that need several (the API, the
/// reconciler, the stores' contract tests). Implemented for every type that implements each kind's
/// trait; a caller that needs one kind only can take that trait.
pub trait JobStore:
    JobRecords
    + KeyRecords
    + ScheduleRecords
    + PlaygroundRecords
    + QuotaRecords
    + AuditRecords
    + OutboxRecords
    + SubscriptionRecords
{
}

impl<T> JobStore for T where
    T: JobRecords
        + KeyRecords
        + ScheduleRecords
        + PlaygroundRecords
        + QuotaRecords
        + AuditRecords
        + OutboxRecords
        + SubscriptionRecords
{
}

/// SHA-256 (hex) of an API key secret: the only form in which keys are stored.
pub fn hash_api_key(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Metadata of a stored blob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobMeta {
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 (hex) of the content, when the store knows it.
    pub sha256: Option<String>,
}

/// What a put-if-absent did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was written.
    Created,
    /// An object already existed at the key; nothing was written.
    AlreadyExists,
}

/// HTTP method of a presigned URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PresignMethod {
    /// A `GET` URL: the holder downloads the object.
    Get,
    /// Upload (overwrites).
    Put,
}

/// A presigned request: anyone holding it may perform `method` on the object until `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresignedRequest {
    /// The HTTP method the URL is signed for; any other method is refused.
    pub method: PresignMethod,
    /// Full URL including the signature.
    pub url: String,
    /// Headers the client must send (e.g. `content-type` for uploads).
    pub headers: Vec<(String, String)>,
    /// Expiry, Unix seconds.
    pub expires_at: i64,
}

/// Object storage for capsules, uploads and log archives.
#[async_trait::async_trait]
pub trait BlobStore: Send + Sync {
    /// Writes `bytes` at `key` unless an object exists there; stores its SHA-256.
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<PutOutcome>;

    /// Streams the file at `path` to `key` unless an object exists there (multipart when large).
    async fn put_file_if_absent(&self, key: &str, path: &Path) -> Result<PutOutcome>;

    /// Writes `bytes` at `key`, replacing any object (log archives, snapshots).
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()>;

    /// Streams the file at `path` to `key`, replacing any object (log archives), with memory
    /// bounded whatever the file's size (multipart when large); stores its SHA-256 like `put`.
    async fn put_file(&self, key: &str, path: &Path) -> Result<()>;

    /// Reads a whole object; `None` if absent.
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Streams an object into the file at `path`; [`StoreError::BlobNotFound`] if absent.
    async fn get_to_file(&self, key: &str, path: &Path) -> Result<BlobMeta>;

    /// [`BlobStore::get_to_file`] of an object of at most `max_bytes`: `Ok(None)` (and no file)
    /// when it is larger. This default asks for the size first and checks what arrived; stores
    /// that stream (S3) also stop reading at the limit, so a swapped object cannot fill the disk.
    async fn get_to_file_within(
        &self,
        key: &str,
        path: &Path,
        max_bytes: u64,
    ) -> Result<Option<BlobMeta>> {
        if let Some(meta) = self.head(key).await?
            && meta.size > max_bytes
        {
            return Ok(None);
        }
        let meta = self.get_to_file(key, path).await?;
        if meta.size > max_bytes {
            let _ = std::fs::remove_file(path);
            return Ok(None);
        }
        Ok(Some(meta))
    }

    /// Size and checksum; `None` if absent.
    async fn head(&self, key: &str) -> Result<Option<BlobMeta>>;

    /// Deletes an object (no error if absent).
    async fn delete(&self, key: &str) -> Result<()>;

    /// The objects whose keys start with `prefix` (a folder: it ends in `/`), as `(key, size)`
    /// sorted by key, at most `limit` of them (jobs' outputs and checkpoints).
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<(String, u64)>>;

    /// A URL that allows `method` on `key` for `expires_in`: checks the key, fixes the expiry
    /// and asks the store to [`BlobStore::sign`].
    async fn presign(
        &self,
        method: PresignMethod,
        key: &str,
        expires_in: Duration,
    ) -> Result<PresignedRequest> {
        let request = SignRequest::new(method, key, expires_in, None)?;
        let (url, headers) = self.sign(&request).await?;
        Ok(request.presigned(url, headers))
    }

    /// A `PUT` URL for `key`, valid for `expires_in`, that stores a body of exactly
    /// `content_length` bytes and refuses any other: S3 signs the `Content-Length` header (the
    /// client must send it, and S3 checks the body against it), the filesystem store's server
    /// checks the length it signed. What bounds an upload whose client is not trusted (a job's
    /// outputs and checkpoints); the returned headers include `content-length`.
    async fn presign_upload(
        &self,
        key: &str,
        expires_in: Duration,
        content_length: u64,
    ) -> Result<PresignedRequest> {
        let request = SignRequest::new(PresignMethod::Put, key, expires_in, Some(content_length))?;
        let (url, headers) = self.sign(&request).await?;
        Ok(request.presigned(url, headers))
    }

    /// The store's half of [`BlobStore::presign`]: the signed URL of a checked request and the
    /// headers the client must send with it.
    async fn sign(&self, request: &SignRequest<'_>) -> Result<(String, Vec<(String, String)>)>;
}

/// What [`BlobStore::sign`] signs: a checked key, the method, the validity and, for a bounded
/// upload, the one body length it accepts.
#[derive(Debug, Clone, Copy)]
pub struct SignRequest<'a> {
    /// The only method the URL allows.
    pub method: PresignMethod,
    /// A key [`validate_blob_key`] accepted.
    pub key: &'a str,
    /// How long the URL is valid.
    pub expires_in: Duration,
    /// The same, as Unix seconds.
    pub expires_at: i64,
    /// For a `PUT`: the exact body length the URL accepts (`None`: any, up to the store's own
    /// limit).
    pub content_length: Option<u64>,
}

impl<'a> SignRequest<'a> {
    /// A request for `method` on `key` (checked) for `expires_in` from now.
    pub fn new(
        method: PresignMethod,
        key: &'a str,
        expires_in: Duration,
        content_length: Option<u64>,
    ) -> Result<SignRequest<'a>> {
        validate_blob_key(key)?;
        let secs = i64::try_from(expires_in.as_secs()).unwrap_or(i64::MAX);
        Ok(SignRequest {
            method,
            key,
            expires_in,
            expires_at: crate::clock::now_secs().saturating_add(secs),
            content_length,
        })
    }

    /// The presigned request of this one, signed as `url` with `headers`.
    fn presigned(&self, url: String, headers: Vec<(String, String)>) -> PresignedRequest {
        PresignedRequest {
            method: self.method,
            url,
            headers,
            expires_at: self.expires_at,
        }
    }
}

/// Checks a blob key: `/`-separated non-empty segments (not `.` or `..`) of ASCII letters, digits,
/// [`BLOB_KEY_PUNCTUATION`] and spaces, at most 1024 bytes. Platform keys use only letters, digits
/// and `-_.=/`; the rest is there for names people give files they drop into the inbox (`my
/// job (v2).tar.gz`). Every allowed character is safe in a file name; URLs percent-encode the
/// ones outside `-_.~` ([`encode_blob_key_path`]).
pub fn validate_blob_key(key: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(StoreError::InvalidKey {
            key: key.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if key.is_empty() || key.len() > 1024 {
        return bad("must be 1 to 1024 bytes");
    }
    if !key.bytes().all(blob_key_byte) {
        return bad(
            "only ASCII letters, digits, spaces, '/' and the punctuation -_.=+!(),@'~ are allowed",
        );
    }
    if key
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return bad("segments must be non-empty and not '.' or '..'");
    }
    Ok(())
}

/// Punctuation allowed in blob keys besides `/` (see [`validate_blob_key`]).
pub const BLOB_KEY_PUNCTUATION: &str = "-_.=+!(),@'~";

fn blob_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || b == b'/'
        || b == b' '
        || BLOB_KEY_PUNCTUATION.as_bytes().contains(&b)
}

/// Replaces every character a blob key may not hold with `_` (and empty, `.` or `..` segments
/// with `_`), so a note about an unusable key can still be written next to where it was.
pub fn sanitize_blob_key(key: &str) -> String {
    let cleaned: String = key
        .chars()
        .map(|c| {
            if c.is_ascii() && blob_key_byte(c as u8) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let segments: Vec<&str> = cleaned
        .split('/')
        .map(|seg| {
            if seg.is_empty() || seg == "." || seg == ".." {
                "_"
            } else {
                seg
            }
        })
        .collect();
    let mut out = segments.join("/");
    out.truncate(1000);
    out
}

/// A valid blob key as a URL path: every byte outside letters, digits, `/` and `-_.~` is
/// percent-encoded (so a space is `%20` and `+` is `%2B`, never read back as a space).
pub fn encode_blob_key_path(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_read_one_ahead_keeps_size_items_and_continues_after_the_last_kept() {
        let page = Page::from_lookahead(vec![1, 2, 3], 2, |n| format!("{n}#j-{n}"));
        assert_eq!(page.items, vec![1, 2]);
        assert_eq!(
            page.next.as_deref().map(decode_cursor).transpose().unwrap(),
            Some("2#j-2".to_owned())
        );
        let last = Page::from_lookahead(vec![1, 2], 2, |n| format!("{n}#j-{n}"));
        assert_eq!(last.items, vec![1, 2]);
        assert_eq!(last.next, None);
    }

    #[test]
    fn platform_blob_keys_are_valid() {
        for key in [
            "capsules/sha256/0af3/capsule.zip",
            "logs/j-1/logs.tar.gz",
            "uploads/u_1/code=v2.tgz",
            "inbox/acme/my job (v2)+final.tar.gz",
        ] {
            assert!(validate_blob_key(key).is_ok(), "{key}");
        }
    }

    #[test]
    fn sanitized_keys_are_valid_and_keep_what_was_allowed() {
        for (raw, want) in [
            ("inbox/acme/50%.zip", "inbox/acme/50_.zip"),
            ("inbox/acme/ünï.zip", "inbox/acme/_n_.zip"),
            ("inbox//acme/../x#y", "inbox/_/acme/_/x_y"),
            ("inbox/acme/ok (1).zip", "inbox/acme/ok (1).zip"),
        ] {
            let clean = sanitize_blob_key(raw);
            assert_eq!(clean, want);
            assert!(validate_blob_key(&clean).is_ok(), "{clean:?}");
        }
    }

    #[test]
    fn key_paths_encode_spaces_and_plus_distinctly() {
        assert_eq!(
            encode_blob_key_path("inbox/a/my job+1 (x).zip"),
            "inbox/a/my%20job%2B1%20%28x%29.zip"
        );
        assert_eq!(encode_blob_key_path("logs/j-1/a_b.~c"), "logs/j-1/a_b.~c");
    }

    #[test]
    fn keys_that_escape_or_need_escaping_are_invalid() {
        for key in [
            "", "/abs", "a//b", "../x", "a/./b", "a?b", "a%2e", "a\\b", "é", "a#b", "a\nb",
        ] {
            assert!(
                matches!(validate_blob_key(key), Err(StoreError::InvalidKey { .. })),
                "{key:?}"
            );
        }
    }
}
