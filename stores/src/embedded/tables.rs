//! The embedded store's tables, shared helpers, and the write operations inside one redb transaction.
//!
//! Values are JSON text. Composite keys join their parts with U+001F (unit separator), which
//! sorts below every printable character, so a prefix range selects exactly one tenant or job.

use redb::{ReadableTable, Table, TableDefinition, TableHandle, WriteTransaction};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tuneplane_core::audit::AuditEntry;
use tuneplane_core::callback::OutboxEntry;
use tuneplane_core::job::{JobEvent, JobRecord};
use tuneplane_core::store::{
    CreateOutcome, Idempotency, IdempotencyRecord, Result, StoreError, active_sort_key,
    event_sort_key, tenant_sort_key,
};

pub(super) type Def = TableDefinition<'static, &'static str, &'static str>;

pub(super) const JOBS: Def = TableDefinition::new("jobs");
pub(super) const TENANT: Def = TableDefinition::new("tenant_jobs");
pub(super) const ACTIVE: Def = TableDefinition::new("active_jobs");
pub(super) const IDEM: Def = TableDefinition::new("idempotency");
pub(super) const EVENTS: Def = TableDefinition::new("events");
pub(super) const META: Def = TableDefinition::new("meta");

/// Prefix of audit entries in the meta table: `AUDIT#<tenant>` U+001F `<id>`.
pub const AUDIT_PREFIX: &str = "AUDIT#";

/// The meta key of audit entry `id` of `tenant` (`id` empty: the tenant's prefix).
pub fn audit_key(tenant: &str, id: &str) -> String {
    format!("{AUDIT_PREFIX}{tenant}{SEP}{id}")
}

/// Prefix of callback outbox entries in the meta table: `OUTBOX#<job id>#<order>`.
pub const OUTBOX_PREFIX: &str = "OUTBOX#";

/// The meta key of an outbox entry.
pub fn outbox_key(entry: &OutboxEntry) -> String {
    format!("{OUTBOX_PREFIX}{}", entry.key())
}

/// The meta key of subscription `id` of `tenant` (`id` empty: the tenant's prefix).
pub fn subscription_key(tenant: &str, id: &str) -> String {
    format!("SUB#{tenant}{SEP}{id}")
}

/// The meta key of retired playground `id` of `tenant` (`id` empty: the tenant's prefix).
pub fn retired_playground_key(tenant: &str, id: &str) -> String {
    format!("PGDONE#{tenant}{SEP}{id}")
}

/// Key of the capacity snapshot in the meta table.
pub const CAPACITY_KEY: &str = "CAPACITY#CURRENT";

pub(super) const SEP: char = '\u{1f}';
pub(super) const SEP_END: char = '\u{20}';

/// A database error with its context.
pub fn db_err(
    op: &'static str,
    table: &str,
    key: &str,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> StoreError {
    StoreError::backend(op, table, key, e)
}

/// Creates every table so that read transactions never meet a missing one.
pub fn create_all(db: &redb::Database, label: &str) -> Result<()> {
    let txn = db
        .begin_write()
        .map_err(|e| db_err("begin write", label, "", e))?;
    for def in [JOBS, TENANT, ACTIVE, IDEM, EVENTS, META] {
        txn.open_table(def)
            .map_err(|e| db_err("create table", label, def.name(), e))?;
    }
    txn.commit().map_err(|e| db_err("commit", label, "", e))
}

pub(super) fn to_json(label: &str, key: &str, value: &impl Serialize) -> Result<String> {
    serde_json::to_string(value).map_err(|e| db_err("encode", label, key, e))
}

pub(super) fn from_json<T: DeserializeOwned>(label: &str, key: &str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        table: label.to_owned(),
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

pub(super) fn get<T: DeserializeOwned>(
    t: &impl ReadableTable<&'static str, &'static str>,
    label: &str,
    key: &str,
) -> Result<Option<T>> {
    let guard = t.get(key).map_err(|e| db_err("get", label, key, e))?;
    guard.map(|g| from_json(label, key, g.value())).transpose()
}

/// Every record of `t` whose key starts with `prefix`, in key order.
pub(super) fn prefixed<T: DeserializeOwned>(
    t: &impl ReadableTable<&'static str, &'static str>,
    label: &str,
    prefix: &str,
) -> Result<Vec<T>> {
    let range = t
        .range(prefix..)
        .map_err(|e| db_err("range", label, prefix, e))?;
    let mut out = Vec::new();
    for item in range {
        let (k, v) = item.map_err(|e| db_err("range", label, prefix, e))?;
        if !k.value().starts_with(prefix) {
            break;
        }
        out.push(from_json(label, k.value(), v.value())?);
    }
    Ok(out)
}

/// Values of `prefix..` keys, from the start (or after `after`) ascending, or descending from the
/// end (or before `after`), up to `limit`.
pub(super) fn scan(
    t: &impl ReadableTable<&'static str, &'static str>,
    label: &str,
    prefix: &str,
    after: Option<&str>,
    descending: bool,
    limit: usize,
) -> Result<Vec<(String, String)>> {
    let start = format!("{prefix}{SEP}");
    let end = format!("{prefix}{SEP_END}");
    let range = match (after, descending) {
        (Some(a), false) => t.range(format!("{start}{a}\u{0}").as_str()..end.as_str()),
        (Some(a), true) => t.range(start.as_str()..format!("{start}{a}").as_str()),
        (None, _) => t.range(start.as_str()..end.as_str()),
    }
    .map_err(|e| db_err("range", label, prefix, e))?;
    let mut out = Vec::new();
    let mut push = |item: std::result::Result<_, redb::StorageError>| -> Result<bool> {
        let (k, v): (redb::AccessGuard<&str>, redb::AccessGuard<&str>) =
            item.map_err(|e| db_err("range", label, prefix, e))?;
        let sort = k.value().get(start.len()..).unwrap_or_default().to_owned();
        out.push((sort, v.value().to_owned()));
        Ok(out.len() < limit)
    };
    if descending {
        for item in range.rev() {
            if !push(item)? {
                break;
            }
        }
    } else {
        for item in range {
            if !push(item)? {
                break;
            }
        }
    }
    Ok(out)
}

pub(super) fn get_job(
    jobs: &impl ReadableTable<&'static str, &'static str>,
    label: &str,
    id: &str,
) -> Result<Option<JobRecord>> {
    get(jobs, label, id)
}

/// A write transaction with every table open.
pub struct Tx<'t> {
    label: String,
    jobs: Table<'t, &'static str, &'static str>,
    tenant: Table<'t, &'static str, &'static str>,
    active: Table<'t, &'static str, &'static str>,
    idem: Table<'t, &'static str, &'static str>,
    events: Table<'t, &'static str, &'static str>,
    meta: Table<'t, &'static str, &'static str>,
}

impl<'t> Tx<'t> {
    /// Opens every table in `txn`.
    pub fn write(txn: &'t WriteTransaction, label: &str) -> Result<Tx<'t>> {
        let open = |def: Def| {
            txn.open_table(def)
                .map_err(|e| db_err("open table", label, def.name(), e))
        };
        Ok(Tx {
            label: label.to_owned(),
            jobs: open(JOBS)?,
            tenant: open(TENANT)?,
            active: open(ACTIVE)?,
            idem: open(IDEM)?,
            events: open(EVENTS)?,
            meta: open(META)?,
        })
    }

    /// Database label for errors.
    pub fn label(&self) -> &str {
        &self.label
    }

    fn insert(&mut self, which: Which, key: &str, value: &str) -> Result<()> {
        let label = self.label.clone();
        self.table_mut(which)
            .insert(key, value)
            .map_err(|e| db_err("insert", &label, key, e))?;
        Ok(())
    }

    fn remove(&mut self, which: Which, key: &str) -> Result<()> {
        let label = self.label.clone();
        self.table_mut(which)
            .remove(key)
            .map_err(|e| db_err("remove", &label, key, e))?;
        Ok(())
    }

    fn table_mut(&mut self, which: Which) -> &mut Table<'t, &'static str, &'static str> {
        match which {
            Which::Jobs => &mut self.jobs,
            Which::Tenant => &mut self.tenant,
            Which::Active => &mut self.active,
            Which::Idem => &mut self.idem,
            Which::Events => &mut self.events,
            Which::Meta => &mut self.meta,
        }
    }

    /// Creates a job and its idempotency record, or resolves the idempotent repeat.
    pub fn create_job(
        &mut self,
        mut job: JobRecord,
        idem: Option<Idempotency>,
        now_secs: i64,
    ) -> Result<CreateOutcome> {
        let idem_key = idem
            .as_ref()
            .map(|i| format!("{}{SEP}{}", job.tenant, i.key));
        if let (Some(i), Some(k)) = (&idem, &idem_key) {
            let stored: Option<IdempotencyRecord> = get(&self.idem, &self.label, k)?;
            if let Some(first) = stored.filter(|r| r.expires_at > now_secs) {
                if first.request_sha256 != i.request_sha256 {
                    return Err(StoreError::IdempotencyMismatch {
                        tenant: job.tenant.to_string(),
                        key: i.key.clone(),
                        job_id: first.job_id,
                    });
                }
                let existing = get_job(&self.jobs, &self.label, &first.job_id)?;
                return existing
                    .map(CreateOutcome::Existing)
                    .ok_or_else(|| StoreError::Corrupt {
                        table: self.label.clone(),
                        key: k.clone(),
                        reason: format!(
                            "idempotency record points at missing job {}",
                            first.job_id
                        ),
                    });
            }
        }
        if self
            .jobs
            .get(job.id.as_str())
            .map_err(|e| db_err("get", &self.label, &job.id, e))?
            .is_some()
        {
            return Err(StoreError::AlreadyExists {
                table: self.label.clone(),
                key: job.id.into_string(),
            });
        }
        job.version = 1;
        self.write_job(&job, None)?;
        if let (Some(i), Some(k)) = (idem, idem_key) {
            let record = IdempotencyRecord {
                tenant: job.tenant.clone(),
                key: i.key,
                request_sha256: i.request_sha256,
                job_id: job.id.clone(),
                expires_at: now_secs
                    .saturating_add(i64::try_from(i.ttl_seconds).unwrap_or(i64::MAX)),
            };
            let text = to_json(&self.label, &k, &record)?;
            self.insert(Which::Idem, &k, &text)?;
        }
        Ok(CreateOutcome::Created(job))
    }

    /// Conditional update guarded by version and finality.
    pub fn update_job(&mut self, mut job: JobRecord) -> Result<JobRecord> {
        let stored = get_job(&self.jobs, &self.label, &job.id)?;
        let ok = stored
            .as_ref()
            .is_some_and(|s| s.version == job.version && !s.is_terminal());
        if !ok {
            return Err(StoreError::Conflict {
                table: self.label.clone(),
                key: format!("JOB#{}", job.id),
                expected: job.version,
            });
        }
        job.version += 1;
        self.write_job(&job, stored.as_ref())?;
        Ok(job)
    }

    fn write_job(&mut self, job: &JobRecord, old: Option<&JobRecord>) -> Result<()> {
        let text = to_json(&self.label, &job.id, job)?;
        self.insert(Which::Jobs, &job.id, &text)?;
        if let Some(old) = old {
            self.remove(
                Which::Active,
                &active_sort_key(old.spec.priority, old.submitted_at_ms, &old.id),
            )?;
            self.remove(
                Which::Tenant,
                &format!(
                    "{}{SEP}{}",
                    old.tenant,
                    tenant_sort_key(old.submitted_at_ms, &old.id)
                ),
            )?;
        }
        let tenant_key = format!(
            "{}{SEP}{}",
            job.tenant,
            tenant_sort_key(job.submitted_at_ms, &job.id)
        );
        self.insert(Which::Tenant, &tenant_key, &job.id)?;
        if !job.is_terminal() {
            self.insert(
                Which::Active,
                &active_sort_key(job.spec.priority, job.submitted_at_ms, &job.id),
                &job.id,
            )?;
        }
        Ok(())
    }

    /// Appends events; a repeated `(at_ms, key)` replaces its earlier copy (it is the same event).
    pub fn append_events(&mut self, job_id: &str, events: &[JobEvent]) -> Result<()> {
        for event in events {
            let key = format!("{job_id}{SEP}{}", event_sort_key(event.at_ms, &event.key));
            let text = to_json(&self.label, &key, event)?;
            self.insert(Which::Events, &key, &text)?;
        }
        Ok(())
    }

    /// Writes a meta record.
    pub fn put_meta(&mut self, key: &str, value: &impl Serialize) -> Result<()> {
        let text = to_json(&self.label, key, value)?;
        self.insert(Which::Meta, key, &text)
    }

    /// Reads a meta record inside the write transaction.
    pub fn get_meta<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        get(&self.meta, &self.label, key)
    }

    /// Appends an audit entry unless one with its id is stored (the same change retried).
    pub fn append_audit(&mut self, entry: &AuditEntry) -> Result<()> {
        let key = audit_key(&entry.tenant, &entry.id);
        if self.get_meta::<AuditEntry>(&key)?.is_none() {
            self.put_meta(&key, entry)?;
        }
        Ok(())
    }

    /// Writes new outbox entries (their first revision): the entries of one job's write. When
    /// nothing could want them — the job names no callback and its tenant has no subscription,
    /// read in this same transaction — none is written: the sender would only delete them. A
    /// subscription hears every change written after it exists either way.
    pub fn append_outbox(&mut self, entries: &[OutboxEntry]) -> Result<()> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        if entries.iter().all(|e| e.notify.is_empty())
            && !self.has_meta_prefix(&subscription_key(&first.event.tenant, ""))?
        {
            return Ok(());
        }
        for entry in entries {
            let mut entry = entry.clone();
            entry.rev = 1;
            self.put_meta(&outbox_key(&entry), &entry)?;
        }
        Ok(())
    }

    /// Every meta record whose key starts with `prefix`, read inside the write transaction.
    pub fn list_meta<T: DeserializeOwned>(&self, prefix: &str) -> Result<Vec<T>> {
        prefixed(&self.meta, &self.label, prefix)
    }

    /// Whether any meta record's key starts with `prefix`.
    fn has_meta_prefix(&self, prefix: &str) -> Result<bool> {
        let mut range = self
            .meta
            .range(prefix..)
            .map_err(|e| db_err("range", &self.label, prefix, e))?;
        match range.next() {
            Some(item) => {
                let (k, _) = item.map_err(|e| db_err("range", &self.label, prefix, e))?;
                Ok(k.value().starts_with(prefix))
            }
            None => Ok(false),
        }
    }

    /// Deletes a meta record.
    pub fn delete_meta(&mut self, key: &str) -> Result<()> {
        self.remove(Which::Meta, key)
    }
}

#[derive(Clone, Copy)]
enum Which {
    Jobs,
    Tenant,
    Active,
    Idem,
    Events,
    Meta,
}
