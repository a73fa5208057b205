//! Embedded job store: one `redb` database file in a local directory, for `tuneplane dev` and tests.
//!
//! It mirrors the DynamoDB layout with ordered tables: the same sort keys order tenant listings,
//! the active index and events, so both stores list identically. redb runs one write transaction at
//! a time, which makes every read-compare-write below atomic (the conditional-write semantics).
//! All database work runs on the blocking thread pool.

mod read;
mod records;
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
    ApiKeyChange, ApiKeyRecord, AuditRecords, CreateOutcome, EventQuery, JobQuery, JobRecords,
    JobUpdate, KeyRecords, NewJob, OutboxRecords, Page, PlaygroundCreate, PlaygroundRecord,
    PlaygroundRecords, QuotaRecords, Result, ScheduleRecord, ScheduleRecords, StoreError,
    SubscriptionRecords, is_live_playground_of,
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
