//! The embedded store's job records and their events: create (with idempotency, first events and audit entry in one write), read, conditional updates, listings, the active index, the capacity snapshot.

#[allow(clippy::wildcard_imports)]
use super::super::*;

#[async_trait::async_trait]
impl JobRecords for EmbeddedJobStore {
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
                with_new_job(tx, created, &events, audit.as_ref())?;
            }
            Ok(outcome)
        })
        .await
    }

    async fn create_all(&self, jobs: &[NewJob<'_>]) -> Result<Vec<JobRecord>> {
        tuneplane_core::store::check_create_all(jobs)?;
        let owned: Vec<(JobRecord, Vec<JobEvent>, Option<AuditEntry>)> = jobs
            .iter()
            .map(|n| (n.job.clone(), n.events.to_vec(), n.audit.cloned()))
            .collect();
        // One redb write transaction: an error before its commit drops it, writing nothing.
        self.write(move |tx| {
            let mut created = Vec::with_capacity(owned.len());
            for (job, events, audit) in owned {
                let id = job.id.clone();
                let CreateOutcome::Created(stored) = tx.create_job(job, None, now_secs())? else {
                    return Err(StoreError::AlreadyExists {
                        table: "jobs".into(),
                        key: format!("JOB#{id}"),
                    });
                };
                with_new_job(tx, &stored, &events, audit.as_ref())?;
                created.push(stored);
            }
            Ok(created)
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
        self.write(move |tx| update_with_events(tx, job, &events))
            .await
    }

    async fn update_jobs_with_events(&self, updates: &[JobUpdate<'_>]) -> Vec<Result<JobRecord>> {
        if updates.is_empty() {
            return Vec::new();
        }
        let owned: Vec<(JobRecord, Vec<JobEvent>)> = updates
            .iter()
            .map(|u| (u.job.clone(), u.events.to_vec()))
            .collect();
        let n = owned.len();
        // One redb write transaction, one commit, for the whole batch. An update whose version
        // no longer matches fails before it writes anything and is reported in its slot; any
        // other error drops the transaction (nothing of the batch lands) and is every slot's.
        let written = self
            .write(move |tx| {
                let mut out = Vec::with_capacity(owned.len());
                for (job, events) in owned {
                    match update_with_events(tx, job, &events) {
                        Ok(stored) => out.push(Ok(stored)),
                        Err(e @ StoreError::Conflict { .. }) => out.push(Err(e)),
                        Err(e) => return Err(e),
                    }
                }
                Ok(out)
            })
            .await;
        match written {
            Ok(out) => out,
            Err(e) => {
                // The first slot carries the error itself, the others name it.
                let text = e.to_string();
                let mut out = vec![Err(e)];
                out.extend(updates[1..n].iter().map(|u| {
                    Err(StoreError::backend(
                        "batched job update",
                        &self.path.display().to_string(),
                        &format!("JOB#{}", u.job.id),
                        format!("the batch's transaction failed: {text}"),
                    ))
                }));
                out
            }
        }
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
}

/// What a new job's write stores beside it: its events, the callbacks' outbox entries of them and
/// its audit entry.
/// The conditional update of `job` with its events and the callbacks' outbox entries of the
/// change, inside `tx`. A conflict writes nothing.
fn update_with_events(tx: &mut Tx<'_>, job: JobRecord, events: &[JobEvent]) -> Result<JobRecord> {
    let id = job.id.clone();
    let stored = tx.update_job(job)?;
    tx.append_events(&id, events)?;
    tx.append_outbox(&outbox::entries_for(
        &stored,
        events,
        stored.version,
        now_ms(),
    ))?;
    Ok(stored)
}

fn with_new_job(
    tx: &mut Tx<'_>,
    job: &JobRecord,
    events: &[JobEvent],
    audit: Option<&AuditEntry>,
) -> Result<()> {
    tx.append_events(&job.id, events)?;
    tx.append_outbox(&outbox::entries_for(job, events, job.version, now_ms()))?;
    if let Some(entry) = audit {
        tx.append_audit(entry)?;
    }
    Ok(())
}
