//! Read-only operations of the embedded store (one redb read transaction, never blocking writers).

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, TableHandle};
use serde::de::DeserializeOwned;
use tuneplane_core::job::{JobEvent, JobRecord};
use tuneplane_core::store::{
    EventQuery, JobQuery, Page, Result, decode_cursor, encode_cursor, event_sort_key,
    tenant_sort_key,
};

use super::tables::{
    ACTIVE, Def, EVENTS, JOBS, META, TENANT, db_err, from_json, get, get_job, prefixed, scan,
};

/// A read-only view of the store.
pub struct ReadTx {
    txn: ReadTransaction,
    label: String,
}

impl ReadTx {
    /// Wraps a read transaction.
    pub fn new(txn: ReadTransaction, label: &str) -> ReadTx {
        ReadTx {
            txn,
            label: label.to_owned(),
        }
    }

    fn table(&self, def: Def) -> Result<redb::ReadOnlyTable<&'static str, &'static str>> {
        self.txn
            .open_table(def)
            .map_err(|e| db_err("open table", &self.label, def.name(), e))
    }

    /// The job `id` as this read transaction sees it; `None` if there is none.
    pub fn get_job(&self, id: &str) -> Result<Option<JobRecord>> {
        get_job(&self.table(JOBS)?, &self.label, id)
    }

    /// A tenant's jobs, newest first; the state filter is applied while scanning.
    pub fn list_jobs(&self, tenant: &str, query: &JobQuery) -> Result<Page<JobRecord>> {
        let (index, jobs) = (self.table(TENANT)?, self.table(JOBS)?);
        let size = query.page_size();
        let mut after = query.cursor.as_deref().map(decode_cursor).transpose()?;
        let mut items = Vec::new();
        loop {
            let batch = scan(&index, &self.label, tenant, after.as_deref(), true, 100)?;
            let exhausted = batch.len() < 100;
            for (sort, id) in batch {
                after = Some(sort.clone());
                let Some(job) = get_job(&jobs, &self.label, &id)? else {
                    continue;
                };
                if query.state.is_none_or(|s| s == job.state) {
                    if items.len() == size {
                        let last: &JobRecord = &items[size - 1];
                        let next = encode_cursor(&tenant_sort_key(last.submitted_at_ms, &last.id));
                        return Ok(Page {
                            items,
                            next: Some(next),
                        });
                    }
                    items.push(job);
                }
            }
            if exhausted {
                return Ok(Page { items, next: None });
            }
        }
    }

    /// Non-terminal jobs in admission order.
    pub fn list_active(&self) -> Result<Vec<JobRecord>> {
        let (active, jobs) = (self.table(ACTIVE)?, self.table(JOBS)?);
        // Sized once: grown by doubling, 10,000 records left a 16,384-slot buffer (~5 MiB unused).
        let count = active
            .len()
            .map_err(|e| db_err("count", &self.label, "active", e))?;
        let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        for item in active
            .iter()
            .map_err(|e| db_err("iterate", &self.label, "active", e))?
        {
            let (_, id) = item.map_err(|e| db_err("iterate", &self.label, "active", e))?;
            if let Some(job) = get_job(&jobs, &self.label, id.value())? {
                out.push(job);
            }
        }
        Ok(out)
    }

    /// A job's events in order.
    pub fn list_events(&self, job_id: &str, query: &EventQuery) -> Result<Page<JobEvent>> {
        let after = query.cursor.as_deref().map(decode_cursor).transpose()?;
        let size = query.page_size();
        let rows = scan(
            &self.table(EVENTS)?,
            &self.label,
            job_id,
            after.as_deref(),
            false,
            size + 1,
        )?;
        let items = rows
            .iter()
            .map(|(sort, text)| from_json(&self.label, sort, text))
            .collect::<Result<Vec<JobEvent>>>()?;
        Ok(Page::from_lookahead(items, size, |e| {
            event_sort_key(e.at_ms, &e.key)
        }))
    }

    /// A meta record.
    pub fn get_meta<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        get(&self.table(META)?, &self.label, key)
    }

    /// Every meta record whose key starts with `prefix`.
    pub fn list_meta<T: DeserializeOwned>(&self, prefix: &str) -> Result<Vec<T>> {
        prefixed(&self.table(META)?, &self.label, prefix)
    }

    /// The first `limit` meta records whose key starts with `prefix`, in key order.
    pub fn list_meta_limit<T: DeserializeOwned>(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<T>> {
        let meta = self.table(META)?;
        let mut out = Vec::new();
        let range = meta
            .range(prefix..)
            .map_err(|e| db_err("range", &self.label, prefix, e))?;
        for item in range.take(limit) {
            let (k, v) = item.map_err(|e| db_err("range", &self.label, prefix, e))?;
            if !k.value().starts_with(prefix) {
                break;
            }
            out.push(from_json(&self.label, k.value(), v.value())?);
        }
        Ok(out)
    }
}
