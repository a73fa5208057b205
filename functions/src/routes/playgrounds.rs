//! `/v1/playgrounds`: interactive vLLM pods the reconciler creates and reclaims at their TTL.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tuneplane_core::playground::{self, PlaygroundRequest, PlaygroundView};
use tuneplane_core::store::PlaygroundRecord;
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
    /// GPU series, as in the capacity snapshot (`h200`); an unknown one is refused.
    pub series: String,
    /// GPUs (1 to the largest node of the series, at most 16).
    pub gpus: u32,
    /// Lifetime in seconds (default 3600, at most 24 h).
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
}

/// The API's view of `record` now.
fn view(state: &AppState, record: PlaygroundRecord) -> PlaygroundView {
    PlaygroundView::of(record, (state.clock)())
}

/// `POST /v1/playgrounds`: validated like a job submission — against the fleet shape of the
/// latest capacity snapshot when there is one (unknown series, more GPUs than the largest node
/// of the series); every problem is a 400 `invalid_request` with `details.fields`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    body: crate::state::JsonBody,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    let req: CreatePlayground = body.parse(r#"{"model", "series", "gpus", "ttl_seconds"?}"#)?;
    let request = PlaygroundRequest {
        model: &req.model,
        series: &req.series,
        gpus: req.gpus,
        ttl_seconds: req.ttl_seconds.unwrap_or(playground::DEFAULT_TTL_SECONDS),
    };
    let created = state
        .control()
        .create_playground(
            &principal.tenant,
            &request,
            (state.new_id)("pg"),
            crate::random::new_server_key(),
            (state.clock)(),
            &super::api_actor(&principal),
        )
        .await?;
    let (stored, notes) = (created.record, created.notes);
    let mut body = serde_json::to_value(view(&state, stored)).unwrap_or_default();
    body["notes"] = json!(notes);
    Ok((StatusCode::CREATED, Json(body)).into_response())
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
    let pg = state
        .control()
        .owned_playground(&principal.tenant, &id)
        .await?;
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
    let pg = state
        .control()
        .delete_playground(
            &principal.tenant,
            &id,
            (state.clock)(),
            &super::api_actor(&principal),
        )
        .await?;
    Ok((StatusCode::ACCEPTED, Json(view(&state, pg))).into_response())
}
