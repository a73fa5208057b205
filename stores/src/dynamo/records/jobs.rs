//! The DynamoDB store's job records and their events: create (with idempotency, first events and audit entry in one write), read, conditional updates, listings, the active index, the capacity snapshot.

#[allow(clippy::wildcard_imports)]
use super::*;

#[async_trait::async_trait]
impl JobRecords for DynamoJobStore {
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

    async fn create_all(&self, jobs: &[NewJob<'_>]) -> Result<Vec<JobRecord>> {
        self.create_all_inner(jobs).await
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

    async fn update_jobs_with_events(&self, updates: &[JobUpdate<'_>]) -> Vec<Result<JobRecord>> {
        use futures_util::StreamExt;
        // Separate items: nothing serialises their writes, so a few at a time (each still one
        // `TransactWriteItems` of the record and its events), outcomes in the batch's order.
        // Futures collected first: a stream over a borrowing closure would not be `Send`.
        let writes: Vec<_> = updates
            .iter()
            .map(|u| self.update_job_with_events_inner(u.job, u.events))
            .collect();
        futures_util::stream::iter(writes)
            .buffered(UPDATES_AT_ONCE)
            .collect()
            .await
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
}

/// How many updates of a batch ([`JobRecords::update_jobs_with_events`]) are in flight at once.
const UPDATES_AT_ONCE: usize = 16;
