//! `/v1/playgrounds`: interactive vLLM pods the reconciler creates and reclaims at their TTL.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tuneplane_core::playground::{self, PlaygroundRequest, PlaygroundView};
use tuneplane_core::store::{PlaygroundRecord, StoreError};
use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE};

use crate::error::ApiError;
use crate::state::{AppState, Auth};

/// Longest playground lifetime, seconds.
pub const MAX_TTL_SECONDS: u64 = playground::MAX_TTL_SECONDS;

/// Body of `POST /v1/playgrounds`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePlayground {
    /// Model to serve (a Hugging Face id or a path the image knows).
    pub model: String,
    /// GPU series.
    pub series: String,
    /// GPUs (1 to the largest node of the series, at most 16).
    pub gpus: u32,
    /// Lifetime in seconds (default 3600, at most 24 h).
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
}

/// The API's view of `record` now.
fn view(state: &AppState, record: PlaygroundRecord) -> PlaygroundView {
    PlaygroundView::of(
        record,
        (state.clock)(),
        &state.submit.config().defaults.namespace,
    )
}

/// `POST /v1/playgrounds`: validated like a job submission — against the fleet shape of the
/// latest capacity snapshot when there is one (unknown series, more GPUs than the largest node
/// of the series); every problem is a 400 `invalid_request` with `details.fields`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    crate::state::JsonBody(body): crate::state::JsonBody,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    let req: CreatePlayground = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!("expected {{\"model\", \"series\", \"gpus\", \"ttl_seconds\"?}}: {e}"),
        )
    })?;
    let ttl = req.ttl_seconds.unwrap_or(playground::DEFAULT_TTL_SECONDS);
    let shape = state.submit.fleet_shape().await?;
    let request = PlaygroundRequest {
        model: &req.model,
        series: &req.series,
        gpus: req.gpus,
        ttl_seconds: ttl,
    };
    let notes = playground::validate(&request, shape.as_ref()).map_err(|fields| {
        ApiError::InvalidFields {
            code: "invalid_request",
            subject: "playground request",
            fields,
        }
    })?;
    let now = (state.clock)();
    let record = PlaygroundRecord {
        id: (state.new_id)("pg"),
        tenant: principal.tenant.clone(),
        model: req.model,
        series: req.series,
        gpus: req.gpus,
        pod_name: None,
        created_at_ms: now,
        expires_at_ms: now + (ttl as i64) * 1000,
        version: 0,
        pod_namespace: None,
        status: None,
    };
    let stored = state.submit.jobs().put_playground(&record).await?;
    let mut body = serde_json::to_value(view(&state, stored)).unwrap_or_default();
    body["notes"] = json!(notes);
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

async fn owned(state: &AppState, tenant: &str, id: &str) -> Result<PlaygroundRecord, ApiError> {
    let not_found = || ApiError::NotFound(format!("playground {id} not found"));
    if !crate::runtime::valid_id(id) {
        return Err(not_found());
    }
    match state.submit.jobs().get_playground(id).await? {
        Some(p) if p.tenant == tenant => Ok(p),
        _ => Err(not_found()),
    }
}

/// The caller's playgrounds that are not being deleted, newest first. A deleted playground (or
/// one past its TTL) leaves the listing at once, though the reconciler removes its pod within a
/// pass; `GET /v1/playgrounds/{id}` still answers `Deleting` until then.
pub async fn mine(state: &AppState, tenant: &str) -> Result<Vec<PlaygroundView>, ApiError> {
    let mut mine: Vec<PlaygroundView> = state
        .submit
        .jobs()
        .list_playgrounds()
        .await?
        .into_iter()
        .filter(|p| p.tenant == tenant)
        .map(|p| view(state, p))
        .filter(|v| !v.is_deleting())
        .collect();
    mine.sort_by_key(|v| {
        (
            std::cmp::Reverse(v.record.created_at_ms),
            v.record.id.clone(),
        )
    });
    Ok(mine)
}

/// `GET /v1/playgrounds`: the caller's live playgrounds (see [`mine`]).
pub async fn list(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
) -> Result<Json<serde_json::Value>, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    let mine = mine(&state, &principal.tenant).await?;
    Ok(Json(json!({"playgrounds": mine})))
}

/// `GET /v1/playgrounds/{id}`.
pub async fn get_one(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Json<PlaygroundView>, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    let pg = owned(&state, &principal.tenant, &id).await?;
    Ok(Json(view(&state, pg)))
}

/// `DELETE /v1/playgrounds/{id}`: expires it now (it leaves the listing at once); the reconciler
/// deletes the pod and the record within a pass. Answers 202 with the playground, `Deleting`.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    for _ in 0..5 {
        let mut pg = owned(&state, &principal.tenant, &id).await?;
        let now = (state.clock)();
        if pg.expires_at_ms <= now {
            return Ok((StatusCode::ACCEPTED, Json(view(&state, pg))).into_response());
        }
        pg.expires_at_ms = now;
        match state.submit.jobs().put_playground(&pg).await {
            Ok(stored) => {
                return Ok((StatusCode::ACCEPTED, Json(view(&state, stored))).into_response());
            }
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::Conflict {
        code: "busy",
        message: format!("playground {id} kept changing; retry"),
    })
}
