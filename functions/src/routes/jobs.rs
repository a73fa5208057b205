//! `/v1/jobs`: submit, list, read, events, logs, stop.

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
use tuneplane_core::store::{EventQuery, JobQuery, PresignMethod, StoreError};
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
    let request =
        parse_body(&body)?.into_request(&principal.tenant, idempotency_key, Origin::Api)?;
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
    let query = JobQuery {
        state: status,
        limit: q.limit.unwrap_or(0),
        cursor: q.cursor,
    };
    let page = state
        .submit
        .jobs()
        .list_jobs(&principal.tenant, &query)
        .await?;
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
    Ok(state
        .submit
        .control()
        .owned_job(&principal.tenant, id)
        .await?)
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

/// `GET /v1/jobs/{id}/logs`: a presigned URL of the archived logs.
pub async fn logs(
    State(state): State<Arc<AppState>>,
    ReadableJob(job, ()): ReadableJob,
) -> Result<Json<serde_json::Value>, ApiError> {
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
    Ok(Json(json!({"url": url.url, "expires_at": url.expires_at})))
}

/// Read-modify-write rounds a follow mark tries against concurrent writers of the record.
const FOLLOW_ATTEMPTS: usize = 5;

/// Most segment bytes one live-logs answer carries (`more` tells the reader to ask again).
pub const LIVE_PAGE_BYTES: u64 = 1024 * 1024;

/// Marks that someone follows `job`'s output (the reconciler then ships its live logs every few
/// seconds) until [`FOLLOW_TTL_MS`](tuneplane_core::live::FOLLOW_TTL_MS) from now; returns the
/// expiry. A mark that still has more than half its time left is not written again.
pub async fn mark_followed(state: &AppState, job: JobRecord) -> Result<Option<i64>, ApiError> {
    use tuneplane_core::live::FOLLOW_TTL_MS;
    let mut job = job;
    for _ in 0..FOLLOW_ATTEMPTS {
        if job.is_terminal() {
            return Ok(None);
        }
        let now = crate::runtime::now_ms();
        if let Some(until) = job.logs_followed_until_ms
            && until - now > FOLLOW_TTL_MS / 2
        {
            return Ok(Some(until));
        }
        job.logs_followed_until_ms = Some(now + FOLLOW_TTL_MS);
        match state.submit.jobs().update_job(&job).await {
            Ok(stored) => return Ok(stored.logs_followed_until_ms),
            // The reconciler wrote in between: read again and retry.
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        job = match state.submit.jobs().get_job(&job.id).await? {
            Some(j) => j,
            None => return Ok(None),
        };
    }
    // Another writer kept winning: the mark is best effort, the next one will land.
    Ok(job.logs_followed_until_ms)
}

/// `POST /v1/jobs/{id}/logs/follow`: marks interest in the job's live output.
pub async fn follow_logs(
    State(state): State<Arc<AppState>>,
    ReadableJob(job, ()): ReadableJob,
) -> Result<Json<serde_json::Value>, ApiError> {
    let (id, state_now) = (job.id.clone(), job.state);
    let until = mark_followed(&state, job).await?;
    Ok(Json(
        json!({"job_id": id, "state": state_now, "followed_until_ms": until}),
    ))
}

/// Query of `GET /v1/jobs/{id}/logs/live`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveQuery {
    /// Only segments shipped after this one (`seq` of the last segment read; default 0).
    pub after: Option<u64>,
    /// Only this pod's.
    pub pod: Option<String>,
    /// Only this container's.
    pub container: Option<String>,
    /// Only the main output (`true`): the CPU pod's or the RayJob submitter's.
    pub main: Option<bool>,
}

/// Live segments of `job` after `q.after` (with their text), at most [`LIVE_PAGE_BYTES`] of
/// text: `{"segments": [...], "last_seq", "more", "archived"}`.
pub async fn live_page(
    state: &AppState,
    job: &JobRecord,
    q: &LiveQuery,
) -> Result<serde_json::Value, ApiError> {
    use tuneplane_core::live::{Manifest, manifest_key};
    let blobs = state.submit.blobs();
    let manifest: Manifest = match blobs.get(&manifest_key(&job.id)).await? {
        Some(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
        None => Manifest::default(),
    };
    let after = q.after.unwrap_or(0);
    let wanted = |s: &&tuneplane_core::live::Segment| {
        s.seq > after
            && q.pod.as_deref().is_none_or(|p| p == s.pod)
            && q.container.as_deref().is_none_or(|c| c == s.container)
            && (q.main != Some(true) || s.main)
    };
    let mut out = Vec::new();
    let mut size = 0;
    let mut last_seq = after;
    let mut more = false;
    for seg in manifest.segments.iter().filter(wanted) {
        if size > 0 && size + seg.bytes > LIVE_PAGE_BYTES {
            more = true;
            break;
        }
        let Some(text) = blobs.get(&seg.key).await? else {
            // Merged into an earlier segment since the list was read: the reader asks again
            // after the last segment it got, and the new list has the merged one.
            more = true;
            break;
        };
        size += seg.bytes;
        last_seq = seg.seq;
        out.push(json!({
            "seq": seg.seq,
            "pod": seg.pod,
            "container": seg.container,
            "offset": seg.offset,
            "bytes": seg.bytes,
            "main": seg.main,
            "at_ms": seg.at_ms,
            "text": String::from_utf8_lossy(&text),
        }));
    }
    Ok(json!({
        "job_id": job.id,
        "state": job.state,
        "segments": out,
        // Without `more`, every wanted segment was sent: the reader continues after the last one
        // shipped, whichever container it belonged to.
        "last_seq": if more { last_seq } else { last_seq.max(manifest.last_seq()) },
        "more": more,
        "archived": job.logs_key.is_some(),
    }))
}

/// `GET /v1/jobs/{id}/logs/live`: the output shipped while the job runs.
pub async fn live_logs(
    State(state): State<Arc<AppState>>,
    ReadableJob(job, ApiQuery(q)): ReadableJob<ApiQuery<LiveQuery>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(live_page(&state, &job, &q).await?))
}

/// `POST /v1/jobs/{id}/stop`: asks the reconciler to stop the job (202); a finished job is
/// answered as it is (200).
pub async fn stop(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    match state
        .submit
        .control()
        .stop_job(&principal.tenant, &id)
        .await?
    {
        Stop::Requested(stored) => {
            tracing::info!(job_id = %stored.id, "stop requested");
            Ok((StatusCode::ACCEPTED, Json(stored)).into_response())
        }
        Stop::Unchanged(job) => Ok((StatusCode::OK, Json(job)).into_response()),
    }
}
