//! The submission service: the one path by which every entry point (HTTP API, webhooks, schedules,
//! the console inbox, EventBridge events) turns a request into a queued job (docs/design.md §7).
//!
//! Steps, in order: check the idempotency key, validate the JobSpec against the latest capacity
//! snapshot, ingest the user's code safely and build the capsule (CPU work, handed to an
//! [`Offload`]), refuse a job its tenant's quota can never admit, put the capsule if absent, then create the job record together with its idempotency
//! record in one atomic write. Nothing is stored for a rejected request: every check that can fail
//! because of the user's input runs before the first write.
//!
//! The request's identity for idempotency is the capsule digest: the capsule holds the authoritative
//! spec and every user file, so two requests with the same key are "the same" exactly when they
//! would run the same thing.

mod auth;
mod code;
mod error;
pub mod pipeline;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use sha2::{Digest, Sha256};

pub use auth::{
    API_KEY_PREFIX, Principal, SCOPE_ADMIN, SCOPE_JOBS_READ, SCOPE_JOBS_WRITE, authenticate,
    new_api_key, principal_of,
};
use code::prepare;
pub use code::{Prepared, SPEC_FILE_IN_ARCHIVE};
pub use error::SubmitError;

use crate::audit::{Actor, AuditAction, AuditEntry, AuditSource};
use crate::capacity::CapacitySnapshot;
use crate::capsule::{Limits, storage_key};
use crate::claimant::Claimant;
use crate::fleet::FleetShape;
use crate::job::{JobEvent, JobRecord};
use crate::quota::{Demand, TenantQuota, never_within};
use crate::spec::{Defaults, JobSpec};
use crate::store::{BlobStore, CreateOutcome, Idempotency, JobStore, NewJob, StoreError};

/// Result of the submission service.
pub type Result<T, E = SubmitError> = std::result::Result<T, E>;

/// Longest idempotency key accepted.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

/// Where the JobSpec comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum SpecInput {
    /// The user's YAML or JSON text, to be validated.
    Text(String),
    /// `tuneplane.yaml` (or `.yml`/`.json`) at the root of the code archive (console inbox).
    InArchive,
    /// An already authoritative spec (a schedule's stored spec); validated again for fleet fit only
    /// through its capsule, which must exist.
    Authoritative(Box<JobSpec>),
}

/// Where the user's code comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    /// An archive (tar, tar.gz or zip) held in memory (inline upload).
    Archive(Vec<u8>),
    /// An archive stored in the blob store (presigned upload, template code, inbox object).
    Blob {
        /// Blob key.
        key: String,
    },
    /// An existing capsule, reused as is (schedules). Only valid with [`SpecInput::Authoritative`].
    Capsule {
        /// SHA-256 (hex) of the capsule.
        sha256: String,
    },
}

/// Which entry point submitted; recorded in the job's first event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `POST /v1/jobs`.
    Api,
    /// The console's submit form.
    Console,
    /// `POST /v1/webhooks/{source}`.
    Webhook(String),
    /// A schedule firing (schedule id).
    Schedule(String),
    /// An archive dropped in the bucket's inbox (object key).
    Inbox(String),
    /// An EventBridge "TunePlane Job Submission" event (event id).
    Event(String),
}

impl Origin {
    fn describe(&self) -> String {
        match self {
            Origin::Api => "submitted through the API".into(),
            Origin::Console => "submitted from the console".into(),
            Origin::Webhook(s) => format!("submitted by webhook {s}"),
            Origin::Schedule(s) => format!("started by schedule {s}"),
            Origin::Inbox(k) => format!("submitted from inbox object {k}"),
            Origin::Event(id) => format!("submitted by event {id}"),
        }
    }
}

/// One submission.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitRequest {
    /// Tenant the job belongs to (from the caller's credentials, never from the body).
    pub tenant: crate::ids::TenantId,
    /// The JobSpec.
    pub spec: SpecInput,
    /// Where the code comes from: an archive in memory, an archive blob, or an existing capsule.
    pub code: Code,
    /// Client idempotency key (header, schedule id + time, event id ...).
    pub idempotency_key: Option<String>,
    /// Entry point.
    pub origin: Origin,
    /// Who submits, for the audit trail (its source follows from `origin`).
    pub actor: Actor,
}

impl Origin {
    /// The audit trail's name for this entry point.
    pub fn audit_source(&self) -> AuditSource {
        match self {
            Origin::Api => AuditSource::Api,
            Origin::Console => AuditSource::Console,
            Origin::Webhook(_) => AuditSource::Webhook,
            Origin::Schedule(_) => AuditSource::Schedule,
            Origin::Inbox(_) => AuditSource::Inbox,
            Origin::Event(_) => AuditSource::Event,
        }
    }
}

/// What a submission produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The job (created now, or the earlier job of an idempotent repeat).
    pub job: JobRecord,
    /// True when this request created the job (201), false for a repeat (200).
    pub created: bool,
    /// Informational notes for the user (e.g. fleet fit not checked).
    pub notes: Vec<String>,
}

/// A submission checked and its capsule stored, not written yet ([`SubmitService::stage`]).
#[derive(Debug, Clone)]
pub(crate) struct Staged {
    pub(crate) record: JobRecord,
    pub(crate) idem: Option<Idempotency>,
    pub(crate) event: JobEvent,
    pub(crate) audit: AuditEntry,
    pub(crate) notes: Vec<String>,
}

/// Settings of the service (parsed once from configuration by each binary).
#[derive(Debug, Clone)]
pub struct SubmitConfig {
    /// Defaults filled into authoritative specs.
    pub defaults: Defaults,
    /// Limits on user code.
    pub limits: Limits,
    /// Folder for per-request scratch folders (staging, capsule files).
    pub scratch_dir: PathBuf,
    /// How long idempotency keys are remembered.
    pub idempotency_ttl_seconds: u64,
    /// The quota of tenants without their own.
    pub default_quota: crate::quota::DefaultQuota,
    /// Most live playgrounds a tenant may have at once.
    pub playground_limit: u32,
    /// Price of a GPU-hour per series, for the cost column of usage reports (none: no costs).
    pub gpu_prices: std::collections::BTreeMap<String, f64>,
    /// Most callback subscriptions a tenant may keep.
    pub subscription_limit: u32,
    /// Limits on what jobs upload through their grants (per object, per tenant).
    pub storage: crate::storage::StorageLimits,
}

impl Default for SubmitConfig {
    fn default() -> Self {
        SubmitConfig {
            defaults: Defaults::default(),
            limits: Limits::default(),
            scratch_dir: std::env::temp_dir(),
            idempotency_ttl_seconds: 24 * 3600,
            default_quota: Default::default(),
            playground_limit: 2,
            gpu_prices: Default::default(),
            subscription_limit: crate::callback::subscription::DEFAULT_SUBSCRIPTION_LIMIT as u32,
            storage: crate::storage::StorageLimits::default(),
        }
    }
}

/// Blocking work handed to an [`Offload`].
pub type BlockingTask = Box<dyn FnOnce() -> Result<Prepared> + Send + 'static>;
/// Future returned by an [`Offload`].
pub type BlockingFuture = Pin<Box<dyn Future<Output = Result<Prepared>> + Send + 'static>>;

/// Runs CPU-bound capsule building off the async executor (e.g. tokio's blocking pool); core knows
/// no runtime, so the edges provide this.
pub trait Offload: Send + Sync {
    /// Runs `task` and resolves to its result.
    fn run(&self, task: BlockingTask) -> BlockingFuture;
}

/// Runs the task on the calling thread (tests, single-request processes).
#[derive(Debug, Clone, Copy, Default)]
pub struct InPlace;

impl Offload for InPlace {
    fn run(&self, task: BlockingTask) -> BlockingFuture {
        let result = task();
        Box::pin(std::future::ready(result))
    }
}

/// The submission service; cheap to clone and share between requests.
#[derive(Clone)]
pub struct SubmitService {
    jobs: Arc<dyn JobStore>,
    blobs: Arc<dyn BlobStore>,
    config: Arc<SubmitConfig>,
    offload: Arc<dyn Offload>,
    new_id: fn() -> String,
}

impl std::fmt::Debug for SubmitService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubmitService")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl SubmitService {
    /// A service over the given stores. `new_id` makes unique job ids (the edges supply randomness).
    pub fn new(
        jobs: Arc<dyn JobStore>,
        blobs: Arc<dyn BlobStore>,
        config: SubmitConfig,
        offload: Arc<dyn Offload>,
        new_id: fn() -> String,
    ) -> SubmitService {
        SubmitService {
            jobs,
            blobs,
            config: Arc::new(config),
            offload,
            new_id,
        }
    }

    /// The job store.
    pub fn jobs(&self) -> &Arc<dyn JobStore> {
        &self.jobs
    }

    /// The blob store.
    pub fn blobs(&self) -> &Arc<dyn BlobStore> {
        &self.blobs
    }

    /// The limits and defaults submissions are checked against.
    pub fn config(&self) -> &SubmitConfig {
        &self.config
    }

    /// The fleet shape from the latest capacity snapshot, if one was published and decodes.
    pub async fn fleet_shape(&self) -> Result<Option<FleetShape>> {
        Ok(self.stored_fleet_shape().await?)
    }

    /// [`SubmitService::fleet_shape`] with the store's own error.
    pub async fn stored_fleet_shape(&self) -> Result<Option<FleetShape>, StoreError> {
        let Some(value) = self.jobs.get_capacity().await? else {
            return Ok(None);
        };
        // A snapshot written by another version that no longer decodes is treated as absent:
        // submissions must not fail because of the reconciler's format.
        Ok(serde_json::from_value::<CapacitySnapshot>(value)
            .ok()
            .map(|s| s.shape()))
    }

    /// Runs one submission end to end (see the module docs). `now_ms` is the submission time.
    pub async fn submit(&self, req: SubmitRequest, now_ms: i64) -> Result<Submitted> {
        let staged = self.stage(req, None, &[], now_ms).await?;
        // The job, its first event and its audit entry in one atomic write: no crash leaves a
        // job without them.
        let new = NewJob {
            job: &staged.record,
            idem: staged.idem.as_ref(),
            events: std::slice::from_ref(&staged.event),
            audit: Some(&staged.audit),
        };
        let outcome = self.jobs.create(new).await?;
        let created = matches!(outcome, CreateOutcome::Created(_));
        let job = outcome.record().clone();
        Ok(Submitted {
            job,
            created,
            notes: staged.notes,
        })
    }

    /// Everything of a submission before its write: checks, the capsule (stored if absent),
    /// and the record with its first event, audit entry and idempotency record. `id` is the
    /// job's id when the caller chose it (a pipeline's steps); dependencies on `siblings` (jobs
    /// written in the same write) are not looked up.
    pub(crate) async fn stage(
        &self,
        req: SubmitRequest,
        id: Option<String>,
        siblings: &[String],
        now_ms: i64,
    ) -> Result<Staged> {
        let SubmitRequest {
            tenant,
            spec,
            code,
            idempotency_key,
            origin,
            actor,
        } = req;
        if let Some(key) = &idempotency_key {
            check_idempotency_key(key)?;
        }
        let shape = self.fleet_shape().await?;
        let scratch = code::Scratch::new(&self.config.scratch_dir)?;

        let prepared = match (spec, code) {
            (SpecInput::Authoritative(spec), Code::Capsule { sha256 }) => {
                self.existing_capsule(*spec, &sha256).await?
            }
            (_, Code::Capsule { .. }) | (SpecInput::Authoritative(_), _) => {
                return Err(SubmitError::InvalidRequest(
                    "an existing capsule can only run with its own authoritative spec".into(),
                ));
            }
            (spec, Code::Archive(bytes)) => {
                let archive = code::ArchiveSource::Bytes(bytes);
                self.build(&tenant, spec, archive, shape.as_ref(), scratch.path())
                    .await?
            }
            (spec, Code::Blob { key }) => {
                let path = scratch.path().join("code.archive");
                self.fetch_blob(&key, &path).await?;
                let archive = code::ArchiveSource::File(path);
                self.build(&tenant, spec, archive, shape.as_ref(), scratch.path())
                    .await?
            }
        };
        // Workloads run only in the namespace the operator gave the tenant.
        self.config
            .defaults
            .check_namespace(&tenant, &prepared.spec)?;

        // Before the first write: a job that alone is above a hard limit of its tenant's quota
        // would wait forever, so it is refused now. A tenant without a quota has the default one
        // (unlimited when none is configured).
        let stored = self.jobs.get_quota(&tenant).await?;
        let quota = self.config.default_quota.effective(&tenant, stored);
        check_quota(quota.as_ref(), &prepared.spec)?;
        self.check_dependencies(&tenant, &prepared.spec, siblings)
            .await?;

        if let Some(file) = &prepared.capsule_file {
            let key = storage_key(&prepared.sha256);
            self.blobs.put_file_if_absent(&key, file).await?;
        }
        let mut notes = prepared.notes.clone();
        if shape.is_none() && !notes.iter().any(|n| n.contains("capacity")) {
            notes.push("fleet fit not checked: no capacity snapshot yet".into());
        }
        drop(scratch);

        let id = crate::ids::JobId::parse(id.unwrap_or_else(self.new_id))
            .map_err(|e| SubmitError::InvalidRequest(format!("job id: {e}")))?;
        let mut record =
            JobRecord::new_queued(id, tenant, prepared.spec, prepared.sha256.clone(), now_ms);
        // An array is stored as its parent alone (one write, whatever its size); the reconciler
        // creates the children (crate::array).
        if record.spec.array.is_some() {
            record.array = Some(crate::array::ArrayRole::Parent(Default::default()));
        }
        let idem = idempotency_key.map(|key| Idempotency {
            key,
            request_sha256: request_digest(&prepared.sha256),
            ttl_seconds: self.config.idempotency_ttl_seconds,
        });
        let event = JobEvent::platform(
            now_ms,
            "submitted".into(),
            "Normal",
            "Submitted",
            format!(
                "{}; capsule {}",
                origin.describe(),
                &prepared.sha256[..12.min(prepared.sha256.len())]
            ),
        );
        let audit = AuditEntry::new(
            &actor,
            &record.tenant,
            AuditAction::JobSubmit,
            &record.id,
            serde_json::json!({
                "name": record.spec.name,
                "capsule_sha256": record.capsule_sha256,
                "origin": origin.describe(),
            }),
            now_ms,
        );
        Ok(Staged {
            record,
            idem,
            event,
            audit,
            notes,
        })
    }

    /// Refuses dependencies that name no job of `tenant` (another tenant's job answers the same)
    /// and `n_to_n` pairs that are not two arrays of one size, naming the entry.
    async fn check_dependencies(
        &self,
        tenant: &crate::ids::TenantId,
        spec: &JobSpec,
        siblings: &[String],
    ) -> Result<()> {
        let mut problems = Vec::new();
        for (i, d) in spec.depends_on.iter().enumerate() {
            if siblings.contains(&d.job) {
                continue;
            }
            let found = self
                .jobs
                .get_job(&d.job)
                .await?
                .filter(|j| j.tenant == *tenant);
            let Some(dep) = found else {
                problems.push(crate::spec::FieldError {
                    path: format!("depends_on[{i}].job"),
                    message: format!(
                        "no job {:?} of your tenant; name a job you submitted (tuneplane jobs lists them)",
                        d.job
                    ),
                });
                continue;
            };
            if d.n_to_n {
                let (mine, theirs) = (spec.array.map(|a| a.size), dep.array_size());
                if !dep.is_array_parent() || mine != theirs {
                    problems.push(crate::spec::FieldError {
                        path: format!("depends_on[{i}].n_to_n"),
                        message: format!(
                            "pairs child i with child i of two arrays of one size; job {} is {} and this job has {} children: leave n_to_n out to wait for all of it",
                            d.job,
                            match (dep.is_array_parent(), theirs) {
                                (true, Some(n)) => format!("an array of {n}"),
                                _ => "not an array".to_owned(),
                            },
                            mine.unwrap_or(1)
                        ),
                    });
                }
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(SubmitError::InvalidSpec(crate::spec::SpecErrors(problems)))
        }
    }

    /// Stages and builds on the offload (CPU work), inside the request's scratch folder.
    async fn build(
        &self,
        tenant: &str,
        spec: SpecInput,
        archive: code::ArchiveSource,
        shape: Option<&FleetShape>,
        dir: &std::path::Path,
    ) -> Result<Prepared> {
        let spec_text = match spec {
            SpecInput::Text(t) => Some(t),
            SpecInput::InArchive | SpecInput::Authoritative(_) => None,
        };
        // The tenant's own namespace is the default one of its specs.
        let config = if self.config.defaults.tenant_namespaces.contains_key(tenant) {
            Arc::new(SubmitConfig {
                defaults: self.config.defaults.for_tenant(tenant),
                ..SubmitConfig::clone(&self.config)
            })
        } else {
            Arc::clone(&self.config)
        };
        let (shape, dir) = (shape.cloned(), dir.to_path_buf());
        let task: BlockingTask =
            Box::new(move || prepare(spec_text.as_deref(), archive, shape.as_ref(), &config, &dir));
        self.offload.run(task).await
    }

    async fn existing_capsule(&self, spec: JobSpec, sha256: &str) -> Result<Prepared> {
        let key = storage_key(sha256);
        crate::store::validate_blob_key(&key).map_err(|_| {
            SubmitError::InvalidRequest(format!("{sha256:?} is not a capsule digest"))
        })?;
        if self.blobs.head(&key).await?.is_none() {
            return Err(SubmitError::NotFound(format!("capsule {sha256}")));
        }
        Ok(Prepared {
            spec,
            sha256: sha256.to_owned(),
            capsule_file: None,
            notes: Vec::new(),
        })
    }

    async fn fetch_blob(&self, key: &str, path: &std::path::Path) -> Result<()> {
        let max = self.config.limits.max_archive_bytes;
        match self.blobs.get_to_file_within(key, path, max).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(SubmitError::InvalidCode(
                crate::capsule::CapsuleError::RejectedSource(format!(
                    "the uploaded archive is larger than {max} bytes, the upload limit: keep data and checkpoints out of the code archive (read them from object storage in the job) and upload again"
                )),
            )),
            Err(crate::store::StoreError::BlobNotFound { .. }) => Err(SubmitError::NotFound(
                format!("code at {key} (upload it first, then submit)"),
            )),
            Err(e) => Err(e.into()),
        }
    }
}

/// SHA-256 (hex) identifying a request for idempotency: derived from the capsule digest.
pub fn request_digest(capsule_sha256: &str) -> String {
    hex::encode(Sha256::digest(
        format!("tuneplane-submit-v1\n{capsule_sha256}").as_bytes(),
    ))
}

/// Refuses `spec` when it alone is above a limit of `quota` that does not borrow (it could never
/// be admitted); no quota means no limit.
pub fn check_quota(quota: Option<&TenantQuota>, spec: &JobSpec) -> Result<()> {
    match quota.and_then(|q| never_within(q, &Demand::of(spec), Claimant::Job)) {
        Some(why) => Err(SubmitError::QuotaExceeded(why)),
        None => Ok(()),
    }
}

/// Refuses idempotency keys that are empty, too long or contain control characters.
pub fn check_idempotency_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN {
        return Err(SubmitError::InvalidRequest(format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} characters"
        )));
    }
    if key.chars().any(|c| c.is_control()) {
        return Err(SubmitError::InvalidRequest(
            "Idempotency-Key must not contain control characters".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Unit tests of the pure parts of submission; the full flow is tested through the HTTP router
    //! against both store implementations in `tuneplane-functions`.

    use super::*;

    #[test]
    fn request_digest_depends_only_on_the_capsule() {
        assert_eq!(request_digest("ab"), request_digest("ab"));
        assert_ne!(request_digest("ab"), request_digest("ac"));
        assert_eq!(request_digest("ab").len(), 64);
    }

    #[test]
    fn idempotency_keys_must_be_short_printable_text() {
        assert!(check_idempotency_key("build-42").is_ok());
        for bad in [
            String::new(),
            "a\nb".into(),
            "k".repeat(MAX_IDEMPOTENCY_KEY_LEN + 1),
        ] {
            assert!(
                matches!(
                    check_idempotency_key(&bad),
                    Err(SubmitError::InvalidRequest(_))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn new_keys_hash_to_their_record_and_carry_the_prefix() {
        let (secret, record) = new_api_key(
            [7; 20],
            &"acme".parse().unwrap(),
            vec![SCOPE_JOBS_READ.into()],
            "ci",
            5,
        );
        assert!(secret.starts_with(API_KEY_PREFIX));
        assert_eq!(record.key_sha256, crate::store::hash_api_key(&secret));
        assert_eq!(record.tenant, "acme");
    }

    #[test]
    fn admin_scope_implies_every_other_scope() {
        let p = |scopes: &[&str]| Principal {
            tenant: "t".parse().unwrap(),
            key_id: "k-0".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            key_name: "k".into(),
        };
        assert!(p(&[SCOPE_ADMIN]).require(SCOPE_JOBS_WRITE).is_ok());
        assert!(p(&[SCOPE_JOBS_READ]).require(SCOPE_JOBS_READ).is_ok());
        assert!(matches!(
            p(&[SCOPE_JOBS_READ]).require(SCOPE_JOBS_WRITE),
            Err(SubmitError::Forbidden { .. })
        ));
    }

    #[test]
    fn hostile_archive_is_a_client_error_naming_the_entry() {
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        let linked = tar.append_link(&mut header, "evil", "/etc/passwd");
        assert!(linked.is_ok());
        let bytes = tar.into_inner().unwrap_or_default();
        let dir = code::Scratch::new(&std::env::temp_dir()).unwrap();
        let spec = "{\"name\":\"t\",\"image\":\"i\",\"entrypoint\":\"true\",\"pools\":[{\"name\":\"main\",\"series\":\"h200\",\"nodes\":1,\"gpus_per_node\":1}]}";
        let err = prepare(
            Some(spec),
            code::ArchiveSource::Bytes(bytes),
            None,
            &SubmitConfig::default(),
            dir.path(),
        )
        .err();
        match err {
            Some(e @ SubmitError::InvalidCode(_)) => {
                assert!(e.is_client_error());
                assert!(e.to_string().contains("evil"), "{e}");
            }
            other => panic!("expected InvalidCode, got {other:?}"),
        }
    }

    fn gpu_spec(nodes: u32, gpus_per_node: u32) -> JobSpec {
        let text = format!(
            "name: t\nimage: i\nentrypoint: 'true'\npools: [{{name: main, series: h200, nodes: {nodes}, gpus_per_node: {gpus_per_node}}}]\n"
        );
        crate::spec::validate(&text, None, &crate::spec::Defaults::default())
            .unwrap()
            .spec
    }

    #[test]
    fn a_job_above_a_hard_quota_is_a_client_error_naming_the_limit_and_the_need() {
        use crate::quota::TenantQuota;
        let mut quota = TenantQuota::unlimited(&"team-a".parse().unwrap());
        quota.set_gpu_limit("h200", 16, false);
        // 3 nodes × 8 GPUs = 24 > 16: refused, saying why and what to do.
        let err = check_quota(Some(&quota), &gpu_spec(3, 8)).err();
        match err {
            Some(e @ SubmitError::QuotaExceeded(_)) => {
                assert!(e.is_client_error());
                let text = e.to_string();
                assert!(
                    text.starts_with("tenant team-a's quota is 16 h200 GPUs; this job needs 24"),
                    "{text}"
                );
                assert!(text.contains("tuneplane admin quota set"), "{text}");
            }
            other => panic!("expected QuotaExceeded, got {other:?}"),
        }
        // Exactly the limit fits; no quota at all is unlimited; a borrowing limit may be exceeded.
        assert!(check_quota(Some(&quota), &gpu_spec(2, 8)).is_ok());
        assert!(check_quota(None, &gpu_spec(64, 8)).is_ok());
        if let Some(limit) = quota.series.get_mut("h200") {
            limit.borrow = true;
        }
        assert!(check_quota(Some(&quota), &gpu_spec(3, 8)).is_ok());
    }
}
