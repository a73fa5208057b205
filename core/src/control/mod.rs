//! The operations on existing jobs and playgrounds that the API and the console both offer:
//! stopping a job, creating and deleting a playground. One set of rules for every door: a caller
//! sees only its tenant's objects, and a write that meets a concurrent one (the reconciler's) reads
//! again and retries a bounded number of times.
//!
//! A tenant's callback subscriptions are managed the same way, in [`subscriptions`].

pub mod subscriptions;

use crate::audit::{Actor, AuditAction, AuditEntry};
use crate::clock::now_ms;
use crate::ids::TenantId;
use crate::job::JobRecord;
use crate::playground::{self, PlaygroundRequest};
use crate::spec::FieldError;
use crate::store::{PlaygroundCreate, PlaygroundRecord, StoreError};
use crate::submit::SubmitService;

/// Attempts of a write that keeps meeting concurrent writes before [`ControlError::Busy`].
pub const ATTEMPTS: usize = 5;

pub use crate::ids::valid_id;

/// Why an operation was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// No such object of the caller's tenant (another tenant's answers the same).
    #[error("{0}")]
    NotFound(String),
    /// The object kept changing under the write; the caller may retry.
    #[error("{0}")]
    Busy(String),
    /// The playground request breaks rules; every problem is listed.
    #[error("the playground request is invalid")]
    InvalidPlayground(Vec<FieldError>),
    /// The tenant already has as many live playgrounds as it may.
    #[error(
        "tenant {tenant} already has {active} live playgrounds, the most a tenant may have ({limit}): delete one (tuneplane playground delete ID) or wait for one to expire"
    )]
    PlaygroundLimit {
        /// The tenant.
        tenant: String,
        /// Its live playgrounds.
        active: usize,
        /// The limit (`TUNEPLANE_PLAYGROUND_LIMIT`).
        limit: u32,
    },
    /// Storage failed.
    #[error("storage failed: {0}")]
    Store(#[from] StoreError),
}

/// Result of the operations here.
pub type Result<T, E = ControlError> = std::result::Result<T, E>;

/// What a stop did.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// The stop was recorded; the reconciler stops the job on its next pass.
    Requested(JobRecord),
    /// Nothing to do: the job already ended or a stop was already requested.
    Unchanged(JobRecord),
}

/// A playground just stored, with the notes its validation gave.
#[derive(Debug, Clone, PartialEq)]
pub struct CreatedPlayground {
    /// The stored record.
    pub record: PlaygroundRecord,
    /// Notes for the user (e.g. no capacity snapshot to check the series against yet).
    pub notes: Vec<String>,
}

/// Stop and playground operations over the submission service's stores.
#[derive(Debug, Clone)]
pub struct ControlService {
    submit: SubmitService,
}

impl ControlService {
    /// The operations over `submit`'s stores.
    pub fn new(submit: SubmitService) -> ControlService {
        ControlService { submit }
    }

    /// Job `id` of `tenant`.
    pub async fn owned_job(&self, tenant: &TenantId, id: &str) -> Result<JobRecord> {
        let jobs = self.submit.jobs();
        owned("job", id, || jobs.get_job(id), |j| j.tenant == *tenant).await
    }

    /// Appends the audit entry of a change `actor` made.
    async fn audit(
        &self,
        actor: &Actor,
        tenant: &TenantId,
        action: AuditAction,
        target: &str,
        change: serde_json::Value,
        at_ms: i64,
    ) -> Result<()> {
        let entry = AuditEntry::new(actor, tenant, action, target, change, at_ms);
        Ok(self.submit.jobs().append_audit(&entry).await?)
    }

    /// Requests a stop of job `id` of `tenant`, made by `actor` (audited when it changes
    /// something).
    pub async fn stop_job(&self, tenant: &TenantId, id: &str, actor: &Actor) -> Result<Stop> {
        for _ in 0..ATTEMPTS {
            let mut job = self.owned_job(tenant, id).await?;
            if job.is_terminal() || job.stop_requested {
                return Ok(Stop::Unchanged(job));
            }
            job.stop_requested = true;
            match self.submit.jobs().update_job(&job).await {
                Ok(stored) => {
                    let change = serde_json::json!({"state": stored.state});
                    self.audit(actor, tenant, AuditAction::JobStop, id, change, now_ms())
                        .await?;
                    return Ok(Stop::Requested(stored));
                }
                // The reconciler wrote in between: read again and retry.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ControlError::Busy(format!(
            "job {id} kept changing; retry the stop"
        )))
    }

    /// Playground `id` of `tenant`.
    pub async fn owned_playground(&self, tenant: &TenantId, id: &str) -> Result<PlaygroundRecord> {
        let jobs = self.submit.jobs();
        owned(
            "playground",
            id,
            || jobs.get_playground(id),
            |p| p.tenant == *tenant,
        )
        .await
    }

    /// Validates `request` (against the fleet shape of the latest capacity snapshot when there
    /// is one, and against the tenant's quota) and stores it as playground `id` of `tenant`,
    /// created at `now_ms`, its server guarded by `server_key` (random, from the caller). It
    /// waits for admission like a job; the reconciler creates its pod once admitted.
    pub async fn create_playground(
        &self,
        tenant: &TenantId,
        request: &PlaygroundRequest<'_>,
        id: String,
        server_key: String,
        now_ms: i64,
        actor: &Actor,
    ) -> Result<CreatedPlayground> {
        let shape = self.submit.stored_fleet_shape().await?;
        let notes = playground::validate(request, shape.as_ref())
            .map_err(ControlError::InvalidPlayground)?;
        // Admitted like a job, so refused like one when its tenant's quota could never hold it.
        let quota = self.submit.jobs().get_quota(tenant).await?;
        let quota = self.submit.config().default_quota.effective(tenant, quota);
        if let Some(quota) = &quota {
            let need = crate::quota::Demand {
                gpus: [(request.series.to_owned(), request.gpus)].into(),
                ..crate::quota::Demand::default()
            };
            if let Some(why) =
                crate::quota::never_within(quota, &need, crate::claimant::Claimant::Playground)
            {
                return Err(ControlError::InvalidPlayground(vec![FieldError {
                    path: "gpus".into(),
                    message: why,
                }]));
            }
        }
        let ttl_ms = i64::try_from(request.ttl_seconds)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000);
        let mut record = PlaygroundRecord::requested(
            id,
            tenant.clone(),
            request.model,
            request.series,
            request.gpus,
            now_ms,
            now_ms.saturating_add(ttl_ms),
        );
        record.server_key = Some(server_key);
        // A tenant may keep only a few at once (a loop of creates cannot take the fleet): the
        // store counts and writes in one conditional write, so concurrent creates cannot both
        // take the last place.
        let limit = self.submit.config().playground_limit;
        let created = self
            .submit
            .jobs()
            .create_playground(&record, limit, now_ms)
            .await?;
        let record = match created {
            PlaygroundCreate::Created(record) => *record,
            PlaygroundCreate::AtLimit { live } => {
                return Err(ControlError::PlaygroundLimit {
                    tenant: tenant.to_string(),
                    active: live,
                    limit,
                });
            }
        };
        let change = serde_json::json!({
            "model": record.model,
            "series": record.series,
            "gpus": record.gpus,
            "expires_at_ms": record.expires_at_ms,
        });
        self.audit(
            actor,
            tenant,
            AuditAction::PlaygroundCreate,
            &record.id,
            change,
            now_ms,
        )
        .await?;
        Ok(CreatedPlayground { record, notes })
    }

    /// Expires playground `id` of `tenant` at `now_ms` (it leaves listings at once; the
    /// reconciler deletes the pod and the record within a pass). An expired one is returned as is.
    pub async fn delete_playground(
        &self,
        tenant: &TenantId,
        id: &str,
        now_ms: i64,
        actor: &Actor,
    ) -> Result<PlaygroundRecord> {
        for _ in 0..ATTEMPTS {
            let mut pg = self.owned_playground(tenant, id).await?;
            if pg.expires_at_ms <= now_ms {
                return Ok(pg);
            }
            pg.expires_at_ms = now_ms;
            match self.submit.jobs().put_playground(&pg).await {
                Ok(stored) => {
                    self.audit(
                        actor,
                        tenant,
                        AuditAction::PlaygroundDelete,
                        id,
                        serde_json::Value::Null,
                        now_ms,
                    )
                    .await?;
                    return Ok(stored);
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ControlError::Busy(format!(
            "playground {id} kept changing; retry"
        )))
    }
}

/// The `kind` object `id` read by `get` if `mine` says it is the caller's; an id the API never
/// hands out is not looked up, and another tenant's object answers like a missing one.
async fn owned<T, Fut>(
    kind: &str,
    id: &str,
    get: impl FnOnce() -> Fut,
    mine: impl FnOnce(&T) -> bool,
) -> Result<T>
where
    Fut: std::future::Future<Output = Result<Option<T>, StoreError>>,
{
    let not_found = || ControlError::NotFound(format!("{kind} {id} not found"));
    if crate::ids::Id::parse(id).is_err() {
        return Err(not_found());
    }
    match get().await? {
        Some(found) if mine(&found) => Ok(found),
        _ => Err(not_found()),
    }
}
