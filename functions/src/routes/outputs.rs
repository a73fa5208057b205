//! A job's outputs and checkpoints (docs/design.md §4, "Outputs and checkpoints").
//!
//! - `GET /v1/jobs/{id}/outputs` (the tenant's key, `jobs:read`): the job's outputs with download
//!   links, and its complete checkpoints.
//! - `/v1/jobs/{id}/grant/...` (the attempt's grant token, `Authorization: Bearer tpg1...`): what
//!   the runner in the job's pods calls. `POST .../grant/presign` signs uploads (and checkpoint
//!   downloads) under the job's own folders only, each upload for the exact size it names and
//!   within the storage limits ([`tuneplane_core::storage`]); `POST .../grant/checkpoints/{name}/complete`
//!   records a checkpoint whose files are all uploaded and prunes old ones;
//!   `GET .../grant/checkpoints/latest` names the newest complete checkpoint with download
//!   links. A grant is the job's and one attempt's: refused for any other job, and once its
//!   attempt is over (its end plus the grace to save and upload).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::header;
use axum::http::request::Parts;
use serde::Deserialize;
use serde_json::{Value, json};
use tuneplane_core::job::JobRecord;
use tuneplane_core::outputs::{
    CompleteError, JobPath, complete_checkpoint, latest_checkpoint, list_checkpoints, list_outputs,
};
use tuneplane_core::store::PresignMethod;

use super::jobs::ReadableJob;
use crate::error::ApiError;
use crate::state::{AppState, JsonBody};

/// Validity of the URLs the runner gets (one upload or download each).
const GRANT_URL_TTL: Duration = Duration::from_secs(900);
/// Validity of the download links a user gets.
const DOWNLOAD_URL_TTL: Duration = Duration::from_secs(3600);
/// Most paths one presign request names.
pub const MAX_PRESIGN_PATHS: usize = 1000;

/// The job and attempt of a request carrying a valid grant for the job in its path.
#[derive(Debug)]
pub struct Granted {
    /// The job's record.
    pub job: JobRecord,
    /// The attempt the grant was minted for.
    pub attempt: u32,
}

impl FromRequestParts<Arc<AppState>> for Granted {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let Some(key) = &state.grant_key else {
            return Err(ApiError::Unavailable {
                code: "grants_unavailable",
                message: "this installation gives jobs no grants to write outputs or checkpoints (set TUNEPLANE_GRANT_KEY on the API and the reconciler)".into(),
            });
        };
        // The route's `{id}` (every grant route has one; the router nests them under /v1).
        let params = axum::extract::RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))?;
        let id = params
            .iter()
            .find(|(name, _)| *name == "id")
            .map(|(_, value)| value.to_owned())
            .unwrap_or_default();
        let token = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        let refused = || {
            ApiError::InvalidGrant(format!(
                "no valid grant of job {id}: send the attempt's TUNEPLANE_GRANT as Authorization: Bearer"
            ))
        };
        let attempt = key.verify(&id, token).ok_or_else(refused)?;
        let job = state
            .submit
            .jobs()
            .get_job(&id)
            .await?
            .ok_or_else(refused)?;
        let now = (state.clock)();
        match job.grant_valid_until_ms(attempt) {
            Some(until) if now <= until => Ok(Granted { job, attempt }),
            _ => Err(ApiError::InvalidGrant(format!(
                "the grant of attempt {attempt} of job {id} ended with the attempt (the job is {} in attempt {})",
                job.state, job.attempt
            ))),
        }
    }
}

/// Body of `POST /v1/jobs/{id}/grant/presign`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresignBody {
    /// `PUT` (outputs and checkpoint files) or `GET` (checkpoint files, to resume).
    pub method: String,
    /// Paths inside the job, `outputs/<path>` or `checkpoints/<name>/<path>`: for `PUT` each
    /// `{"path": ..., "size": <bytes>}` (its URL takes exactly that many bytes), for `GET` the
    /// path alone (or the same object).
    pub paths: Vec<Value>,
}

/// One entry of [`PresignBody::paths`]: the path and, for an upload, its size.
fn presign_entry(i: usize, value: &Value, put: bool) -> Result<(String, Option<u64>), ApiError> {
    let shape = || {
        ApiError::bad_request(
            "invalid_request",
            format!(
                "paths[{i}]: name an upload as {{\"path\": \"outputs/...\", \"size\": <bytes>}}, a download by its path"
            ),
        )
    };
    let (path, size) = match value {
        Value::String(path) => (path.clone(), None),
        Value::Object(map) => {
            if map.keys().any(|k| k != "path" && k != "size") {
                return Err(shape());
            }
            let path = map.get("path").and_then(Value::as_str).ok_or_else(shape)?;
            let size = match map.get("size") {
                None => None,
                Some(v) => Some(v.as_u64().ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_request",
                        format!("paths[{i}].size: {v} is not a whole number of bytes"),
                    )
                })?),
            };
            (path.to_owned(), size)
        }
        _ => return Err(shape()),
    };
    if put && size.is_none() {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!(
                "paths[{i}].size: name the size in bytes of {path:?} ({{\"path\": ..., \"size\": <bytes>}}); every upload URL is signed for its exact size"
            ),
        ));
    }
    Ok((path, size))
}

fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("invalid_body", format!("{what}: {e}")))
}

/// `POST /v1/jobs/{id}/grant/presign`.
pub async fn presign(
    State(state): State<Arc<AppState>>,
    granted: Granted,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let body: PresignBody = parse_body(&body, "presign request")?;
    let method = match body.method.as_str() {
        "PUT" => PresignMethod::Put,
        "GET" => PresignMethod::Get,
        other => {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("method {other:?}: use PUT or GET"),
            ));
        }
    };
    if body.paths.is_empty() || body.paths.len() > MAX_PRESIGN_PATHS {
        return Err(ApiError::bad_request(
            "invalid_request",
            format!(
                "paths: name 1 to {MAX_PRESIGN_PATHS} paths, not {}",
                body.paths.len()
            ),
        ));
    }
    let job = &granted.job;
    let put = method == PresignMethod::Put;
    let mut entries = Vec::with_capacity(body.paths.len());
    for (i, value) in body.paths.iter().enumerate() {
        let (text, size) = presign_entry(i, value, put)?;
        let path = JobPath::parse(&text)
            .map_err(|e| ApiError::bad_request("invalid_path", format!("paths[{i}]: {e}")))?;
        if !put && matches!(path, JobPath::Output(_)) {
            return Err(ApiError::bad_request(
                "invalid_path",
                format!("paths[{i}]: a job reads back only its checkpoints, not {text:?}"),
            ));
        }
        entries.push((text, path.key(&job.tenant, &job.id), size));
    }
    let blobs = state.submit.blobs();
    if put {
        check_storage(&state, job, &entries).await?;
    }
    let mut urls = Vec::with_capacity(entries.len());
    for (text, key, size) in entries {
        let signed = match size.filter(|_| put) {
            Some(size) => blobs.presign_upload(&key, GRANT_URL_TTL, size).await?,
            None => blobs.presign(method, &key, GRANT_URL_TTL).await?,
        };
        urls.push(json!({"path": text, "url": signed.url, "headers": signed.headers, "expires_at": signed.expires_at}));
    }
    tracing::info!(job_id = %job.id, attempt = granted.attempt, count = urls.len(), method = %body.method, "grant presigned");
    Ok(Json(json!({"urls": urls})))
}

/// Refuses uploads (`(path, key, size)` each) above the per-object limit (400 naming the field)
/// or past the tenant's storage quota (409 `storage_quota_exceeded` with its use and quota). With
/// a quota, this measures the tenant's stored bytes: one bounded listing of each of its two
/// folders per request ([`tuneplane_core::storage::tenant_use`]).
async fn check_storage(
    state: &AppState,
    job: &JobRecord,
    entries: &[(String, String, Option<u64>)],
) -> Result<(), ApiError> {
    use tuneplane_core::storage::{StorageRefusal, check_uploads, tenant_use};
    let limits = &state.submit.config().storage;
    let sizes: Vec<u64> = entries.iter().filter_map(|(_, _, s)| *s).collect();
    // The object limit first: a request it refuses costs no listing.
    check_uploads(&job.tenant, &sizes, None, limits)
        .map_err(|e| ApiError::bad_request("object_too_large", e.to_string()))?;
    let used = match limits.tenant_bytes {
        Some(_) => Some(tenant_use(state.submit.blobs().as_ref(), &job.tenant).await?),
        None => None,
    };
    check_uploads(&job.tenant, &sizes, used, limits).map_err(|e| match e {
        StorageRefusal::ObjectTooLarge { .. } => {
            ApiError::bad_request("object_too_large", e.to_string())
        }
        StorageRefusal::QuotaExceeded { .. } | StorageRefusal::TooManyObjects { .. } => {
            tracing::info!(job_id = %job.id, tenant = %job.tenant, refusal = %e, "uploads over the storage quota");
            ApiError::Conflict {
                code: "storage_quota_exceeded",
                message: e.to_string(),
            }
        }
    })
}

/// `POST /v1/jobs/{id}/grant/checkpoints/{name}/complete`.
pub async fn complete(
    State(state): State<Arc<AppState>>,
    granted: Granted,
    Path((_id, name)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let job = &granted.job;
    let keep = usize::try_from(job.spec.checkpoints.keep).unwrap_or(1);
    let done = complete_checkpoint(
        state.submit.blobs().as_ref(),
        &job.tenant,
        &job.id,
        &name,
        granted.attempt,
        (state.clock)(),
        keep,
    )
    .await
    .map_err(|e| match e {
        CompleteError::Invalid(m) => ApiError::bad_request("invalid_checkpoint", m),
        CompleteError::Store(e) => ApiError::Store(e),
    })?;
    tracing::info!(job_id = %job.id, attempt = granted.attempt, checkpoint = %name, files = done.checkpoint.files.len(), deleted = done.deleted.len(), "checkpoint complete");
    Ok(Json(json!(done)))
}

/// `GET /v1/jobs/{id}/grant/checkpoints/latest`: 404 when the job has no complete checkpoint.
pub async fn latest(
    State(state): State<Arc<AppState>>,
    granted: Granted,
) -> Result<Json<Value>, ApiError> {
    let job = &granted.job;
    let blobs = state.submit.blobs();
    let Some(c) = latest_checkpoint(blobs.as_ref(), &job.tenant, &job.id).await? else {
        return Err(ApiError::NotFound(format!(
            "job {} has no complete checkpoint yet",
            job.id
        )));
    };
    let files = signed_files(blobs.as_ref(), job, &c, GRANT_URL_TTL).await?;
    Ok(Json(json!({
        "name": c.name,
        "attempt": c.attempt,
        "completed_at_ms": c.completed_at_ms,
        "files": files,
    })))
}

/// Most files a job's inputs may hold (all of its dependencies' outputs together).
pub const MAX_INPUT_FILES: usize = 2000;

/// `GET /v1/jobs/{id}/grant/inputs`: the outputs of exactly the jobs this job depends on, with
/// download links, each under the dependency's name (its spec's name; its id where two
/// dependencies share a name); an array parent's children's outputs under their index.
pub async fn inputs(
    State(state): State<Arc<AppState>>,
    granted: Granted,
) -> Result<Json<Value>, ApiError> {
    let job = &granted.job;
    let blobs = state.submit.blobs();
    let store = state.submit.jobs();
    let mut deps = Vec::new();
    for (id, _) in tuneplane_core::depends::targets(job) {
        // Only the job's own tenant's jobs (the submission checked; a record could be gone).
        if let Some(dep) = store.get_job(&id).await?.filter(|d| d.tenant == job.tenant) {
            deps.push(dep);
        }
    }
    let mut inputs = Vec::with_capacity(deps.len());
    let mut total = 0usize;
    for dep in &deps {
        let shared = deps.iter().filter(|d| d.spec.name == dep.spec.name).count() > 1;
        let name = if shared {
            String::from(&dep.id)
        } else {
            dep.spec.name.clone()
        };
        // An array parent has no outputs of its own: its children's, each under its index.
        let sources: Vec<(String, String)> = match dep.array_size() {
            Some(size) if dep.is_array_parent() => (0..size)
                .map(|i| (tuneplane_core::array::child_id(&dep.id, i), format!("{i}/")))
                .collect(),
            _ => vec![(String::from(&dep.id), String::new())],
        };
        let mut files = Vec::new();
        for (source, under) in sources {
            for f in list_outputs(blobs.as_ref(), &dep.tenant, &source).await? {
                total += 1;
                if total > MAX_INPUT_FILES {
                    return Err(ApiError::bad_request(
                        "too_many_inputs",
                        format!(
                            "the jobs {} depends on have more than {MAX_INPUT_FILES} output files together; write fewer, larger files (an archive) to their outputs",
                            job.id
                        ),
                    ));
                }
                let key = JobPath::Output(f.path.clone()).key(&dep.tenant, &source);
                let signed = blobs
                    .presign(PresignMethod::Get, &key, GRANT_URL_TTL)
                    .await?;
                files.push(json!({"path": format!("{under}{}", f.path), "size": f.size, "url": signed.url}));
            }
        }
        inputs.push(json!({"name": name, "job_id": dep.id, "state": dep.state, "files": files}));
    }
    tracing::info!(job_id = %job.id, attempt = granted.attempt, dependencies = inputs.len(), files = total, "inputs presigned");
    Ok(Json(json!({"inputs": inputs})))
}

/// `GET /v1/jobs/{id}/outputs`: the outputs with download links, and the complete checkpoints.
pub async fn outputs(
    State(state): State<Arc<AppState>>,
    ReadableJob(job, ()): ReadableJob,
) -> Result<Json<Value>, ApiError> {
    let blobs = state.submit.blobs();
    let files = list_outputs(blobs.as_ref(), &job.tenant, &job.id).await?;
    let mut outputs = Vec::with_capacity(files.len());
    for f in &files {
        let key = JobPath::Output(f.path.clone()).key(&job.tenant, &job.id);
        let signed = blobs
            .presign(PresignMethod::Get, &key, DOWNLOAD_URL_TTL)
            .await?;
        outputs.push(json!({"path": f.path, "size": f.size, "url": signed.url, "expires_at": signed.expires_at}));
    }
    let checkpoints: Vec<Value> = list_checkpoints(blobs.as_ref(), &job.tenant, &job.id)
        .await?
        .iter()
        .map(|c| {
            json!({"name": c.name, "attempt": c.attempt, "completed_at_ms": c.completed_at_ms,
                   "files": c.files.len(), "bytes": c.bytes()})
        })
        .collect();
    Ok(Json(json!({
        "job_id": job.id,
        "state": job.state,
        "outputs": outputs,
        "checkpoints": checkpoints,
    })))
}

/// Query of `GET /v1/jobs/{id}/checkpoint`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointQuery {
    /// The checkpoint's name as listed (default: the newest complete one).
    pub name: Option<String>,
}

/// `GET /v1/jobs/{id}/checkpoint[?name=NAME]`: one complete checkpoint of a job the caller may
/// read (the newest without `name`), with a download link per file. 404 names the checkpoints
/// that exist.
pub async fn checkpoint(
    State(state): State<Arc<AppState>>,
    ReadableJob(job, crate::state::ApiQuery(q)): ReadableJob<
        crate::state::ApiQuery<CheckpointQuery>,
    >,
) -> Result<Json<Value>, ApiError> {
    if let Some(name) = &q.name {
        tuneplane_core::grant::check_checkpoint_name(name)
            .map_err(|e| ApiError::bad_request("invalid_query", format!("name: {e}")))?;
    }
    let blobs = state.submit.blobs();
    let all = list_checkpoints(blobs.as_ref(), &job.tenant, &job.id).await?;
    let found = match &q.name {
        Some(name) => all.iter().find(|c| &c.name == name),
        None => all.last(),
    };
    let Some(c) = found else {
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        return Err(ApiError::NotFound(match (&q.name, names.is_empty()) {
            (_, true) => format!("job {} has no complete checkpoint", job.id),
            (Some(name), false) => format!(
                "job {} has no complete checkpoint {name:?}; its checkpoints: {}",
                job.id,
                names.join(", ")
            ),
            (None, false) => format!("job {} has no complete checkpoint", job.id),
        }));
    };
    let files = signed_files(blobs.as_ref(), &job, c, DOWNLOAD_URL_TTL).await?;
    Ok(Json(json!({
        "job_id": job.id,
        "name": c.name,
        "attempt": c.attempt,
        "completed_at_ms": c.completed_at_ms,
        "files": files,
    })))
}

/// Each file of checkpoint `c` of `job` with a download link valid for `ttl`.
async fn signed_files(
    blobs: &dyn tuneplane_core::store::BlobStore,
    job: &JobRecord,
    c: &tuneplane_core::outputs::Checkpoint,
    ttl: Duration,
) -> Result<Vec<Value>, ApiError> {
    let mut files = Vec::with_capacity(c.files.len());
    for f in &c.files {
        let key = JobPath::Checkpoint {
            name: c.name.clone(),
            path: f.path.clone(),
        }
        .key(&job.tenant, &job.id);
        let signed = blobs.presign(PresignMethod::Get, &key, ttl).await?;
        files.push(json!({"path": f.path, "size": f.size, "url": signed.url, "expires_at": signed.expires_at}));
    }
    Ok(files)
}
