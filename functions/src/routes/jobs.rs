//! `/v1/jobs`: submit, list, read, events, archived logs, stop (live logs: [`super::live`]).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tuneplane_core::control::Stop;
use tuneplane_core::job::{JobRecord, JobState};
use tuneplane_core::store::{EventQuery, JobQuery, PresignMethod};
use tuneplane_core::submit::{Origin, Principal, SCOPE_JOBS_READ, SCOPE_JOBS_WRITE, Submitted};

use super::submission::parse_body;
use crate::error::ApiError;
use crate::state::{ApiQuery, AppState, Auth, JsonBody};

/// Header of the client's idempotency key.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// How long a logs URL stays valid.
const LOGS_URL_TTL: Duration = Duration::from_secs(3600);

/// The answer to a submission: 201 for a new job, 200 for an idempotent repeat.
pub fn submitted_response(s: &Submitted) -> Response {
    let status = if s.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let body = json!({
        "job_id": s.job.id,
        "status": s.job.state,
        "capsule_sha256": s.job.capsule_sha256,
        "created": s.created,
        "notes": s.notes,
        "job": s.job,
    });
    let location = format!("/v1/jobs/{}", s.job.id);
    (status, [(header::LOCATION, location)], Json(body)).into_response()
}

/// `POST /v1/jobs`.
pub async fn submit(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    let idempotency_key = match headers.get(IDEMPOTENCY_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    ApiError::bad_request("invalid_request", "Idempotency-Key must be ASCII")
                })?
                .to_owned(),
        ),
    };
    let request = parse_body(&body)?.into_request(
        &principal.tenant,
        idempotency_key,
        Origin::Api,
        super::api_actor(&principal),
    )?;
    let submitted = state.submit.submit(request, (state.clock)()).await?;
    tracing::info!(job_id = %submitted.job.id, tenant = %principal.tenant, created = submitted.created, capsule = %submitted.job.capsule_sha256, "submitted");
    Ok(submitted_response(&submitted))
}

/// Query of `GET /v1/jobs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only jobs in this state (`QUEUED`, `RUNNING`, ...).
    pub status: Option<String>,
    /// Page size (1..=1000, default 50).
    pub limit: Option<usize>,
    /// Cursor from the previous page.
    pub cursor: Option<String>,
    /// `true` lists array jobs' children too; by default an array is its parent alone.
    pub children: Option<String>,
}

/// `GET /v1/jobs`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    let status = match q.status.as_deref() {
        None | Some("") => None,
        Some(s) => Some(JobState::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                format!("status {s:?} is unknown; use one of QUEUED, ADMITTED, RUNNING, SUCCEEDED, FAILED, STOPPED"),
            )
        })?),
    };
    let children = match q.children.as_deref() {
        None | Some("" | "false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("children {other:?} must be true or false"),
            ));
        }
    };
    let query = JobQuery {
        state: status,
        limit: q.limit.unwrap_or(0),
        cursor: q.cursor,
    };
    let mut page = state
        .submit
        .jobs()
        .list_jobs(&principal.tenant, &query)
        .await?;
    if !children {
        // The page keeps its cursor: a page may come back shorter than the limit.
        page.items.retain(|j| j.array_child().is_none());
    }
    Ok(Json(json!({"jobs": page.items, "next_cursor": page.next})))
}

/// The job `id` for a reader that holds `jobs:read`, if it belongs to the reader's tenant;
/// another tenant's job is reported as absent.
pub async fn readable_job(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<JobRecord, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    Ok(state.control().owned_job(&principal.tenant, id).await?)
}

/// The job of a `/v1/jobs/{id}/...` request, read with [`readable_job`], and the request's query
/// `Q` (`()` when the route takes none). Extraction fails as the caller's [`Auth`], the path, then
/// `Q` does, in that order, before the job is read; then as [`readable_job`] does.
#[derive(Debug)]
pub struct ReadableJob<Q = ()>(pub JobRecord, pub Q);

impl<Q> FromRequestParts<Arc<AppState>> for ReadableJob<Q>
where
    Q: FromRequestParts<Arc<AppState>> + Send,
{
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let Auth(principal) = Auth::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let query = Q::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let job = readable_job(state, &principal, &id)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self(job, query))
    }
}

/// `GET /v1/jobs/{id}`.
pub async fn get_one(
    State(state): State<Arc<AppState>>,
    ReadableJob(job, ()): ReadableJob,
) -> Result<Json<serde_json::Value>, ApiError> {
    let position = state.submit.jobs().queue_position(&job).await?;
    // A plain record always serialises.
    let mut body = serde_json::to_value(&job).unwrap_or_default();
    if let (Some(p), Some(map)) = (position, body.as_object_mut()) {
        map.insert("queue_position".into(), serde_json::json!(p));
    }
    Ok(Json(body))
}

/// Query of `GET /v1/jobs/{id}/events`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Page size (default 100).
    pub limit: Option<usize>,
    /// Cursor from the previous page.
    pub cursor: Option<String>,
}

/// `GET /v1/jobs/{id}/events`.
pub async fn events(
    State(state): State<Arc<AppState>>,
    ReadableJob(job, ApiQuery(q)): ReadableJob<ApiQuery<EventsQuery>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let query = EventQuery {
        limit: q.limit.unwrap_or(100).clamp(1, 1000),
        cursor: q.cursor,
    };
    let page = state.submit.jobs().list_events(&job.id, &query).await?;
    Ok(Json(
        json!({"events": page.items, "next_cursor": page.next}),
    ))
}

/// Query of `GET /v1/jobs/{id}/logs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// An earlier attempt of a job that was run again (default: the current one).
    pub attempt: Option<u32>,
}

/// `GET /v1/jobs/{id}/logs[?attempt=N]`: a link to the archived logs of the job (its current
/// attempt) or of one of its earlier attempts.
pub async fn logs(
    State(state): State<Arc<AppState>>,
    ReadableJob(job, ApiQuery(q)): ReadableJob<ApiQuery<LogsQuery>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if let Some(n) = q.attempt.filter(|n| *n != job.attempt) {
        let Some(earlier) = job.attempts.iter().find(|a| a.number == n) else {
            return Err(ApiError::NotFound(format!(
                "job {} has no attempt {n}; its attempts are 1 to {}",
                job.id, job.attempt
            )));
        };
        let Some(key) = &earlier.logs_key else {
            return Err(ApiError::NotFound(format!(
                "attempt {n} of job {} has no archived logs",
                job.id
            )));
        };
        let url = state
            .submit
            .blobs()
            .presign(PresignMethod::Get, key, LOGS_URL_TTL)
            .await?;
        return Ok(Json(
            json!({"url": url.url, "expires_at": url.expires_at, "attempt": n}),
        ));
    }
    let Some(key) = &job.logs_key else {
        return Err(ApiError::Conflict {
            code: "logs_not_archived",
            message: format!(
                "job {} is {}; logs are archived when it ends (its output so far: GET /v1/jobs/{}/logs/live, or `tuneplane logs -f {}`)",
                job.id, job.state, job.id, job.id
            ),
        });
    };
    let url = state
        .submit
        .blobs()
        .presign(PresignMethod::Get, key, LOGS_URL_TTL)
        .await?;
    Ok(Json(
        json!({"url": url.url, "expires_at": url.expires_at, "attempt": job.attempt}),
    ))
}

/// `POST /v1/jobs/{id}/stop`: asks the reconciler to stop the job (202); a finished job is
/// answered as it is (200).
pub async fn stop(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    let actor = super::api_actor(&principal);
    match state
        .control()
        .stop_job(&principal.tenant, &id, &actor)
        .await?
    {
        Stop::Requested(stored) => {
            tracing::info!(job_id = %stored.id, "stop requested");
            Ok((StatusCode::ACCEPTED, Json(stored)).into_response())
        }
        Stop::Unchanged(job) => Ok((StatusCode::OK, Json(job)).into_response()),
    }
}
