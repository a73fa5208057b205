//! Listings and events of [`DynamoJobStore`]: a tenant's jobs (index `tenant`), the active jobs
//! (index `active`, one query per shard), and a job's events (its own partition).
//!
//! Pages hold `limit + 1` items at most so that `next` is `None` exactly on the last page; the
//! cursor is the sort key of the last item returned, the same cursor the embedded store hands out.

use std::time::Duration;

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, Put, PutRequest, TransactWriteItem, WriteRequest};
use tuneplane_core::job::{JobEvent, JobRecord};
use tuneplane_core::store::{
    ACTIVE_SHARDS, EventQuery, JobQuery, Page, Result, StoreError, active_sort_key, decode_cursor,
    event_sort_key, tenant_sort_key,
};

use super::item::{Item, JOB_SK, Stored, active_pk, job_pk, s, tenant_pk};
use super::{
    ACTIVE_INDEX, DynamoJobStore, GuardedJobWrite, TENANT_INDEX, first_condition_failed,
    unique_events,
};

impl DynamoJobStore {
    pub(super) async fn list_jobs_inner(
        &self,
        tenant: &str,
        query: &JobQuery,
    ) -> Result<Page<JobRecord>> {
        let size = query.page_size();
        let tpk = tenant_pk(tenant);
        let start = match query.cursor.as_deref() {
            None => None,
            Some(cursor) => {
                let tsk = decode_cursor(cursor)?;
                let id = tsk
                    .split_once('#')
                    .map(|(_, id)| id.to_owned())
                    .unwrap_or_default();
                Some(Item::from([
                    ("pk".to_owned(), s(job_pk(&id))),
                    ("sk".to_owned(), s(JOB_SK)),
                    ("tpk".to_owned(), s(&tpk)),
                    ("tsk".to_owned(), s(tsk)),
                ]))
            }
        };
        // A filter applies after `Limit`: read bigger pages so a rare state needs few requests.
        let evaluate = if query.state.is_some() {
            (size + 1).max(200)
        } else {
            size + 1
        };
        let build = |from: Option<Item>| {
            let mut q = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(TENANT_INDEX)
                .key_condition_expression("tpk = :t")
                .expression_attribute_values(":t", s(&tpk))
                .scan_index_forward(false)
                .limit(i32::try_from(evaluate).unwrap_or(i32::MAX))
                .set_exclusive_start_key(from);
            if let Some(state) = query.state {
                q = q
                    .filter_expression("#st = :st")
                    .expression_attribute_names("#st", "state")
                    .expression_attribute_values(":st", s(state.as_str()));
            }
            q
        };
        self.query_page(build, &tpk, size, start, |j: &JobRecord| {
            tenant_sort_key(j.submitted_at_ms, &j.id)
        })
        .await
    }

    /// A page of `size` decoded items of the query `build` makes, from `start`: it reads one
    /// item ahead for [`Page::from_lookahead`], whose cursor is `sort_key` of the last item.
    async fn query_page<T>(
        &self,
        build: impl Fn(Option<Item>) -> QueryFluentBuilder,
        what: &str,
        size: usize,
        start: Option<Item>,
        sort_key: impl FnOnce(&T) -> String,
    ) -> Result<Page<T>>
    where
        for<'a> T: TryFrom<Stored<'a>, Error = StoreError>,
    {
        let items = self.query_all(build, what, Some(size + 1), start).await?;
        let decoded = items
            .iter()
            .map(|i| self.decode(i))
            .collect::<Result<Vec<T>>>()?;
        Ok(Page::from_lookahead(decoded, size, sort_key))
    }

    /// Counts, on every shard of the active index, the queued jobs (not being stopped) whose
    /// sort key comes before this job's: `Select: COUNT` pages, no items are returned.
    pub(super) async fn queue_position_inner(&self, job: &JobRecord) -> Result<Option<u64>> {
        if !tuneplane_core::admission::order::in_queue(job)
            || tuneplane_core::admission::order::waits_for_dependencies(job)
            || job.is_array_parent()
        {
            return Ok(None);
        }
        // The index counts every queued job ahead (those waiting for dependencies or parents of
        // arrays among them): an upper bound of the place.
        let mine = active_sort_key(job.spec.priority, job.submitted_at_ms, &job.id);
        let mut ahead: u64 = 0;
        for shard in 0..ACTIVE_SHARDS {
            let apk = active_pk(shard);
            let mut start: Option<Item> = None;
            loop {
                let out = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(ACTIVE_INDEX)
                    .key_condition_expression("apk = :a AND ask < :k")
                    .filter_expression("#st = :q AND stop_requested = :f")
                    .expression_attribute_names("#st", "state")
                    .expression_attribute_values(":a", s(&apk))
                    .expression_attribute_values(":k", s(&mine))
                    .expression_attribute_values(":q", s("QUEUED"))
                    .expression_attribute_values(":f", AttributeValue::Bool(false))
                    .select(aws_sdk_dynamodb::types::Select::Count)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|e| self.backend("Query", &apk, e))?;
                ahead += u64::try_from(out.count).unwrap_or(0);
                start = out.last_evaluated_key;
                if start.is_none() {
                    break;
                }
            }
        }
        Ok(Some(ahead + 1))
    }

    pub(super) async fn list_active_inner(&self) -> Result<Vec<JobRecord>> {
        let mut keyed = Vec::new();
        for shard in 0..ACTIVE_SHARDS {
            let apk = active_pk(shard);
            for item in self
                .query_partition(Some(ACTIVE_INDEX), "apk", &apk)
                .await?
            {
                let ask = match item.get("ask") {
                    Some(AttributeValue::S(v)) => v.clone(),
                    _ => String::new(),
                };
                keyed.push((ask, self.decode::<JobRecord>(&item)?));
            }
        }
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        // The index is eventually consistent: a job that just ended may still be listed.
        Ok(keyed
            .into_iter()
            .map(|(_, job)| job)
            .filter(|job| !job.is_terminal())
            .collect())
    }

    /// The job write and its events in one `TransactWriteItems` (at most 100 items: the job and
    /// the first 99 distinct events; any further ones follow as a batch, which state changes never
    /// need). The job put carries the same condition and write token as `update_job`.
    pub(super) async fn update_job_with_events_inner(
        &self,
        job: &JobRecord,
        events: &[JobEvent],
    ) -> Result<JobRecord> {
        let unique: Vec<JobEvent> = unique_events(events).into_iter().cloned().collect();
        if unique.is_empty() {
            return self.update_job_inner(job).await;
        }
        let write = GuardedJobWrite::new(job);
        // The callbacks' outbox entries of this change go in the same transaction (at most 100
        // items: the job, the outbox entries, then as many events as fit).
        let refs: Vec<&JobEvent> = unique.iter().collect();
        let outbox = self.outbox_puts(&write.next, &refs)?;
        let (now, later) = unique.split_at(unique.len().min(99 - outbox.len().min(98)));
        let key = write.key.clone();
        let put_job = guarded_put!(Put::builder(), &self.table, write)
            .build()
            .map_err(|e| self.backend("TransactWriteItems", &key, e))?;
        let mut request = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put_job).build());
        for put in outbox {
            request = request.transact_items(put);
        }
        for event in now {
            request = request.transact_items(self.event_put(&job.id, event)?);
        }
        match request.send().await {
            Ok(_) => {}
            Err(e) => {
                if !first_condition_failed(&e) {
                    return Err(self.backend("TransactWriteItems", &key, e));
                }
                // A retry of a transaction that applied before its answer was lost fails the
                // condition against itself: the token tells.
                if !self.already_written(&key, JOB_SK, &write.token).await {
                    return Err(self.conflict(&key, job.version));
                }
            }
        }
        if !later.is_empty() {
            self.append_events_inner(&job.id, later).await?;
        }
        Ok(write.next)
    }

    pub(super) async fn append_events_inner(
        &self,
        job_id: &str,
        events: &[JobEvent],
    ) -> Result<()> {
        let key = job_pk(job_id);
        let unique = unique_events(events);
        for chunk in unique.chunks(25) {
            let mut requests = Vec::with_capacity(chunk.len());
            for event in chunk {
                let put = PutRequest::builder()
                    .set_item(Some(self.event_item(job_id, event)))
                    .build()
                    .map_err(|e| self.backend("BatchWriteItem", &key, e))?;
                requests.push(WriteRequest::builder().put_request(put).build());
            }
            for attempt in 0..8u32 {
                let out = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, requests)
                    .send()
                    .await
                    .map_err(|e| self.backend("BatchWriteItem", &key, e))?;
                requests = out
                    .unprocessed_items
                    .and_then(|mut m| m.remove(&self.table))
                    .unwrap_or_default();
                if requests.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25 << attempt)).await;
            }
            if !requests.is_empty() {
                let e = std::io::Error::other(format!(
                    "{} events stayed unprocessed after retries",
                    requests.len()
                ));
                return Err(self.backend("BatchWriteItem", &key, e));
            }
        }
        Ok(())
    }

    pub(super) async fn list_events_inner(
        &self,
        job_id: &str,
        query: &EventQuery,
    ) -> Result<Page<JobEvent>> {
        let size = query.page_size();
        let pk = job_pk(job_id);
        let after = query.cursor.as_deref().map(decode_cursor).transpose()?;
        let start = after.map(|sort| {
            Item::from([
                ("pk".to_owned(), s(&pk)),
                ("sk".to_owned(), s(format!("EVT#{sort}"))),
            ])
        });
        let build = |from: Option<Item>| {
            self.client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :p AND begins_with(sk, :e)")
                .expression_attribute_values(":p", s(&pk))
                .expression_attribute_values(":e", s("EVT#"))
                .consistent_read(true)
                .limit(i32::try_from(size + 1).unwrap_or(i32::MAX))
                .set_exclusive_start_key(from)
        };
        self.query_page(build, &pk, size, start, |e: &JobEvent| {
            event_sort_key(e.at_ms, &e.key)
        })
        .await
    }
}
