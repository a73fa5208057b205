//! Embedded job store: one `redb` database file in a local directory, for `tuneplane dev` and tests.
//!
//! It mirrors the DynamoDB layout with ordered tables: the same sort keys order tenant listings,
//! the active index and events, so both stores list identically. redb runs one write transaction at
//! a time, which makes every read-compare-write below atomic (the conditional-write semantics).
//! All database work runs on the blocking thread pool.

mod read;
mod tables;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{ConcurrencyMode, Database, ReadableDatabase};
use tuneplane_core::audit::{AuditEntry, AuditQuery};
use tuneplane_core::callback::{CallbackSecret, OutboxEntry, Subscription, outbox};
use tuneplane_core::clock::{now_ms, now_secs};
use tuneplane_core::ids::TenantId;
use tuneplane_core::job::{JobEvent, JobRecord};
use tuneplane_core::quota::TenantQuota;
use tuneplane_core::store::{
    ApiKeyChange, ApiKeyRecord, CreateOutcome, EventQuery, JobQuery, JobStore, NewJob, Page,
    PlaygroundCreate, PlaygroundRecord, Result, ScheduleRecord, StoreError, is_live_playground_of,
};

use tables::{Tx, db_err};

/// File name of the database inside the store's directory.
pub const DB_FILE: &str = "jobs.redb";

/// redb's page cache per open database. redb's default (1 GiB) let the cache grow with the whole
/// file: the reconciler reads every active record each pass, so its cache ended up holding the
/// jobs table (~15 MiB of its RSS at 10,000 active jobs with a 16 MiB cap). Pages beyond this are
/// read again from the file, i.e. from the OS page cache; at 10,000 active jobs the pass time did
/// not measurably change (BENCHMARKS.md, "Reconciler memory").
pub const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// [`JobStore`] persisted to `<dir>/jobs.redb`.
#[derive(Debug, Clone)]
pub struct EmbeddedJobStore {
    db: Arc<Database>,
    path: PathBuf,
}

impl EmbeddedJobStore {
    /// Opens (or creates) the store in `dir`, creating the directory if needed.
    pub fn open(dir: impl AsRef<Path>) -> Result<EmbeddedJobStore> {
        Self::open_with_cache(dir, CACHE_BYTES)
    }

    /// [`open`](Self::open) with a page cache of `cache_bytes` instead of [`CACHE_BYTES`].
    pub fn open_with_cache(dir: impl AsRef<Path>, cache_bytes: usize) -> Result<EmbeddedJobStore> {
        let dir = dir.as_ref();
        let path = dir.join(DB_FILE);
        let label = path.display().to_string();
        std::fs::create_dir_all(dir).map_err(|e| db_err("create directory", &label, "", e))?;
        // Several processes (`tuneplane dev`'s API, reconciler, admin commands) may share the file;
        // redb still runs one write transaction at a time across all of them.
        let db = Database::builder()
            .set_concurrency_mode(ConcurrencyMode::MultiWriter)
            .set_cache_size(cache_bytes)
            .create(&path)
            .map_err(|e| db_err("open database", &label, "", e))?;
        tables::create_all(&db, &label)?;
        Ok(EmbeddedJobStore {
            db: Arc::new(db),
            path,
        })
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Stores the meta record `record` under `key` when its version (read and bumped through
    /// `version`) matches the stored one, 0 for a new record; returns what was stored.
    async fn put_versioned<R>(
        &self,
        key: String,
        mut record: R,
        version: fn(&mut R) -> &mut u64,
    ) -> Result<R>
    where
        R: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
    {
        self.write(move |tx| {
            let stored: Option<R> = tx.get_meta(&key)?;
            let stored = stored.map(|mut s| *version(&mut s));
            check_version(tx.label(), &key, *version(&mut record), stored)?;
            *version(&mut record) += 1;
            tx.put_meta(&key, &record)?;
            Ok(record)
        })
        .await
    }

    /// Stores the meta record `record` under `key` (replacing any).
    async fn put_meta<R>(&self, key: String, record: R) -> Result<()>
    where
        R: serde::Serialize + Send + 'static,
    {
        self.write(move |tx| tx.put_meta(&key, &record)).await
    }

    /// The meta record under `key`, if any.
    async fn get_meta<R>(&self, key: String) -> Result<Option<R>>
    where
        R: serde::de::DeserializeOwned + Send + 'static,
    {
        self.read(move |tx| tx.get_meta(&key)).await
    }

    /// Every meta record whose key starts with `prefix`, in key order.
    async fn list_meta<R>(&self, prefix: &'static str) -> Result<Vec<R>>
    where
        R: serde::de::DeserializeOwned + Send + 'static,
    {
        self.read(move |tx| tx.list_meta(prefix)).await
    }

    /// Deletes the meta record under `key` (no error if absent).
    async fn delete_meta(&self, key: String) -> Result<()> {
        self.write(move |tx| tx.delete_meta(&key)).await
    }

    /// Runs `f` in a write transaction on the blocking pool and commits it if `f` succeeds.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        let label = self.path.display().to_string();
        let task_label = label.clone();
        run_blocking(&task_label, move || {
            let txn = db
                .begin_write()
                .map_err(|e| db_err("begin write", &label, "", e))?;
            let value = {
                let mut tx = Tx::write(&txn, &label)?;
                f(&mut tx)?
            };
            txn.commit().map_err(|e| db_err("commit", &label, "", e))?;
            Ok(value)
        })
        .await
    }

    /// Runs `f` in a read transaction on the blocking pool.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&read::ReadTx) -> Result<T> + Send + 'static,
    {
        let db = Arc::clone(&self.db);
        let label = self.path.display().to_string();
        let task_label = label.clone();
        run_blocking(&task_label, move || {
            let txn = db
                .begin_read()
                .map_err(|e| db_err("begin read", &label, "", e))?;
            let tx = read::ReadTx::new(txn, &label);
            f(&tx)
        })
        .await
    }
}

async fn run_blocking<T, F>(label: &str, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| db_err("blocking task", label, "", e))?
}

#[async_trait::async_trait]
impl JobStore for EmbeddedJobStore {
    async fn create(&self, new: NewJob<'_>) -> Result<CreateOutcome> {
        let job = new.job.clone();
        let idem = new.idem.cloned();
        let events = new.events.to_vec();
        let audit = new.audit.cloned();
        // One redb write transaction: the job, its idempotency record, its events and its
        // audit entry.
        self.write(move |tx| {
            let outcome = tx.create_job(job, idem, now_secs())?;
            if let CreateOutcome::Created(created) = &outcome {
                tx.append_events(&created.id, &events)?;
                tx.append_outbox(&outbox::entries_for(
                    created,
                    &events,
                    created.version,
                    now_ms(),
                ))?;
                if let Some(entry) = &audit {
                    tx.append_audit(entry)?;
                }
            }
            Ok(outcome)
        })
        .await
    }

    async fn get_job(&self, id: &str) -> Result<Option<JobRecord>> {
        let id = id.to_owned();
        self.read(move |tx| tx.get_job(&id)).await
    }

    async fn update_job(&self, job: &JobRecord) -> Result<JobRecord> {
        let job = job.clone();
        self.write(move |tx| tx.update_job(job)).await
    }

    async fn update_job_with_events(
        &self,
        job: &JobRecord,
        events: &[JobEvent],
    ) -> Result<JobRecord> {
        let job = job.clone();
        let events = events.to_vec();
        // One redb write transaction: both commit or neither does.
        self.write(move |tx| {
            let id = job.id.clone();
            let stored = tx.update_job(job)?;
            tx.append_events(&id, &events)?;
            // The callbacks' outbox entries of this change, in the same transaction.
            tx.append_outbox(&outbox::entries_for(
                &stored,
                &events,
                stored.version,
                now_ms(),
            ))?;
            Ok(stored)
        })
        .await
    }

    async fn list_jobs(&self, tenant: &TenantId, query: &JobQuery) -> Result<Page<JobRecord>> {
        let tenant = tenant.to_owned();
        let query = query.clone();
        self.read(move |tx| tx.list_jobs(&tenant, &query)).await
    }

    async fn list_active(&self) -> Result<Vec<JobRecord>> {
        self.read(|tx| tx.list_active()).await
    }

    async fn append_events(&self, job_id: &str, events: &[JobEvent]) -> Result<()> {
        let job_id = job_id.to_owned();
        let events = events.to_vec();
        self.write(move |tx| tx.append_events(&job_id, &events))
            .await
    }

    async fn list_events(&self, job_id: &str, query: &EventQuery) -> Result<Page<JobEvent>> {
        let job_id = job_id.to_owned();
        let query = query.clone();
        self.read(move |tx| tx.list_events(&job_id, &query)).await
    }

    async fn put_capacity(&self, snapshot: &serde_json::Value) -> Result<()> {
        self.put_meta(tables::CAPACITY_KEY.to_owned(), snapshot.clone())
            .await
    }

    async fn get_capacity(&self) -> Result<Option<serde_json::Value>> {
        self.get_meta(tables::CAPACITY_KEY.to_owned()).await
    }

    async fn put_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        self.put_meta(format!("KEY#{}", key.key_sha256), key.clone())
            .await
    }

    async fn get_api_key(&self, key_sha256: &str) -> Result<Option<ApiKeyRecord>> {
        self.get_meta(format!("KEY#{key_sha256}")).await
    }

    async fn list_api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        self.list_meta("KEY#").await
    }

    async fn update_api_key(
        &self,
        key_sha256: &str,
        change: ApiKeyChange,
    ) -> Result<Option<ApiKeyRecord>> {
        let meta_key = format!("KEY#{key_sha256}");
        // One write transaction: the read and the write cannot interleave with another change.
        self.write(move |tx| {
            let Some(stored) = tx.get_meta::<ApiKeyRecord>(&meta_key)? else {
                return Ok(None);
            };
            let next = stored.with_change(change);
            tx.put_meta(&meta_key, &next)?;
            Ok(Some(next))
        })
        .await
    }

    async fn put_schedule(&self, schedule: &ScheduleRecord) -> Result<ScheduleRecord> {
        let key = format!("SCHEDULE#{}", schedule.id);
        self.put_versioned(key, schedule.clone(), |r| &mut r.version)
            .await
    }

    async fn get_schedule(&self, id: &str) -> Result<Option<ScheduleRecord>> {
        self.get_meta(format!("SCHEDULE#{id}")).await
    }

    async fn delete_schedule(&self, id: &str) -> Result<()> {
        self.delete_meta(format!("SCHEDULE#{id}")).await
    }

    async fn put_playground(&self, playground: &PlaygroundRecord) -> Result<PlaygroundRecord> {
        let key = format!("PG#{}", playground.id);
        self.put_versioned(key, playground.clone(), |r| &mut r.version)
            .await
    }

    async fn create_playground(
        &self,
        playground: &PlaygroundRecord,
        limit: u32,
        now_ms: i64,
    ) -> Result<PlaygroundCreate> {
        let mut pg = playground.clone();
        // One write transaction (redb runs one at a time): the count and the write cannot be
        // separated by another create.
        self.write(move |tx| {
            let key = format!("PG#{}", pg.id);
            if tx.get_meta::<PlaygroundRecord>(&key)?.is_some() {
                return Err(StoreError::AlreadyExists {
                    table: tx.label().to_owned(),
                    key,
                });
            }
            let live = tx
                .list_meta::<PlaygroundRecord>("PG#")?
                .iter()
                .filter(|p| is_live_playground_of(p, &pg.tenant, now_ms))
                .count();
            if live >= limit as usize {
                return Ok(PlaygroundCreate::AtLimit { live });
            }
            pg.version = 1;
            tx.put_meta(&key, &pg)?;
            Ok(PlaygroundCreate::Created(Box::new(pg)))
        })
        .await
    }

    async fn get_playground(&self, id: &str) -> Result<Option<PlaygroundRecord>> {
        self.get_meta(format!("PG#{id}")).await
    }

    async fn list_playgrounds(&self) -> Result<Vec<PlaygroundRecord>> {
        self.list_meta("PG#").await
    }

    async fn delete_playground(&self, id: &str) -> Result<()> {
        self.delete_meta(format!("PG#{id}")).await
    }

    async fn retire_playground(&self, pg: &PlaygroundRecord) -> Result<()> {
        let pg = pg.clone();
        // One write transaction: the live record goes and the retired one comes together.
        self.write(move |tx| {
            tx.delete_meta(&format!("PG#{}", pg.id))?;
            tx.put_meta(&tables::retired_playground_key(&pg.tenant, &pg.id), &pg)
        })
        .await
    }

    async fn list_retired_playgrounds(&self, tenant: &TenantId) -> Result<Vec<PlaygroundRecord>> {
        let prefix = tables::retired_playground_key(tenant, "");
        self.read(move |tx| tx.list_meta(&prefix)).await
    }

    async fn put_quota(&self, quota: &TenantQuota) -> Result<()> {
        self.put_meta(format!("QUOTA#{}", quota.tenant), quota.clone())
            .await
    }

    async fn get_quota(&self, tenant: &TenantId) -> Result<Option<TenantQuota>> {
        self.get_meta(format!("QUOTA#{tenant}")).await
    }

    async fn list_quotas(&self) -> Result<Vec<TenantQuota>> {
        self.list_meta("QUOTA#").await
    }

    async fn delete_quota(&self, tenant: &TenantId) -> Result<()> {
        self.delete_meta(format!("QUOTA#{tenant}")).await
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<()> {
        let entry = entry.clone();
        self.write(move |tx| tx.append_audit(&entry)).await
    }

    async fn list_audit(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>> {
        let prefix = match &query.tenant {
            Some(t) => tables::audit_key(t, ""),
            None => tables::AUDIT_PREFIX.to_owned(),
        };
        let entries: Vec<AuditEntry> = self.read(move |tx| tx.list_meta(&prefix)).await?;
        Ok(query.finish(entries))
    }

    async fn list_outbox(&self, limit: usize) -> Result<Vec<OutboxEntry>> {
        self.read(move |tx| tx.list_meta_limit(tables::OUTBOX_PREFIX, limit))
            .await
    }

    async fn update_outbox(&self, entry: &OutboxEntry) -> Result<OutboxEntry> {
        let mut entry = entry.clone();
        let key = tables::outbox_key(&entry);
        self.write(move |tx| {
            let stored: Option<OutboxEntry> = tx.get_meta(&key)?;
            if stored.map(|s| s.rev) != Some(entry.rev) {
                return Err(StoreError::Conflict {
                    table: tx.label().to_owned(),
                    key,
                    expected: entry.rev,
                });
            }
            entry.rev += 1;
            tx.put_meta(&key, &entry)?;
            Ok(entry)
        })
        .await
    }

    async fn delete_outbox(&self, entry: &OutboxEntry) -> Result<()> {
        let (key, rev) = (tables::outbox_key(entry), entry.rev);
        self.write(move |tx| {
            let stored: Option<OutboxEntry> = tx.get_meta(&key)?;
            match stored {
                None => Ok(()),
                Some(s) if s.rev == rev => tx.delete_meta(&key),
                Some(_) => Err(StoreError::Conflict {
                    table: tx.label().to_owned(),
                    key,
                    expected: rev,
                }),
            }
        })
        .await
    }

    async fn discard_outbox(&self, entries: &[OutboxEntry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = entries.iter().map(tables::outbox_key).collect();
        self.write(move |tx| {
            for key in &keys {
                tx.delete_meta(key)?;
            }
            Ok(())
        })
        .await
    }

    async fn put_subscription(&self, sub: &Subscription) -> Result<()> {
        self.put_meta(tables::subscription_key(&sub.tenant, &sub.id), sub.clone())
            .await
    }

    async fn list_subscriptions(&self, tenant: &TenantId) -> Result<Vec<Subscription>> {
        let prefix = tables::subscription_key(tenant, "");
        let mut subs: Vec<Subscription> = self.read(move |tx| tx.list_meta(&prefix)).await?;
        subs.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(subs)
    }

    async fn delete_subscription(&self, tenant: &TenantId, id: &str) -> Result<bool> {
        let key = tables::subscription_key(tenant, id);
        self.write(move |tx| {
            let existed = tx.get_meta::<Subscription>(&key)?.is_some();
            tx.delete_meta(&key)?;
            Ok(existed)
        })
        .await
    }

    async fn get_callback_secret(&self, tenant: &TenantId) -> Result<Option<CallbackSecret>> {
        self.get_meta(format!("CBSECRET#{tenant}")).await
    }

    async fn put_callback_secret(
        &self,
        secret: &CallbackSecret,
        replace: bool,
    ) -> Result<CallbackSecret> {
        let secret = secret.clone();
        let key = format!("CBSECRET#{}", secret.tenant);
        self.write(move |tx| {
            if !replace && let Some(stored) = tx.get_meta::<CallbackSecret>(&key)? {
                return Ok(stored);
            }
            tx.put_meta(&key, &secret)?;
            Ok(secret)
        })
        .await
    }
}

/// Version check of a create-or-update: version 0 creates, any other must match the stored one.
fn check_version(table: &str, key: &str, expected: u64, stored: Option<u64>) -> Result<()> {
    match (expected, stored) {
        (0, None) => Ok(()),
        (0, Some(_)) => Err(StoreError::AlreadyExists {
            table: table.to_owned(),
            key: key.to_owned(),
        }),
        (v, Some(s)) if v == s => Ok(()),
        _ => Err(StoreError::Conflict {
            table: table.to_owned(),
            key: key.to_owned(),
            expected,
        }),
    }
}
