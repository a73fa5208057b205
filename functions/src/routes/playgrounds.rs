//! `/v1/playgrounds`: interactive vLLM pods the reconciler creates and reclaims at their TTL.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tuneplane_core::store::{PlaygroundRecord, StoreError};
use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE};

use crate::app::{AppState, Auth};
use crate::error::ApiError;

/// Longest playground lifetime, seconds.
pub const MAX_TTL_SECONDS: u64 = 24 * 3600;

/// Body of `POST /v1/playgrounds`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreatePlayground {
    /// Model to serve (a Hugging Face id or a path the image knows).
    pub model: String,
    /// GPU series.
    pub series: String,
    /// GPUs (1..=16).
    pub gpus: u32,
    /// Lifetime in seconds (default 3600, at most 24 h).
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
}

/// `POST /v1/playgrounds`.
pub async fn create(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    let req: CreatePlayground = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(
            "invalid_body",
            format!("expected {{\"model\", \"series\", \"gpus\", \"ttl_seconds\"?}}: {e}"),
        )
    })?;
    let ttl = req.ttl_seconds.unwrap_or(3600);
    let mut problems = Vec::new();
    if req.model.trim().is_empty() || req.model.len() > 200 {
        problems.push("model: give a model name of 1 to 200 characters");
    }
    if !tuneplane_core::spec::is_dns_label(&req.series, 63) {
        problems.push("series: give a GPU series name such as h200");
    }
    if !(1..=16).contains(&req.gpus) {
        problems.push("gpus: between 1 and 16");
    }
    if !(60..=MAX_TTL_SECONDS).contains(&ttl) {
        problems.push("ttl_seconds: between 60 and 86400");
    }
    if !problems.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_request",
            problems.join("; "),
        ));
    }
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
    Ok((StatusCode::CREATED, Json(stored)).into_response())
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

/// `GET /v1/playgrounds`: the caller's playgrounds.
pub async fn list(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
) -> Result<Json<serde_json::Value>, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    let mine: Vec<PlaygroundRecord> = state
        .submit
        .jobs()
        .list_playgrounds()
        .await?
        .into_iter()
        .filter(|p| p.tenant == principal.tenant)
        .collect();
    Ok(Json(json!({"playgrounds": mine})))
}

/// `GET /v1/playgrounds/{id}`.
pub async fn get_one(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Json<PlaygroundRecord>, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    Ok(Json(owned(&state, &principal.tenant, &id).await?))
}

/// `DELETE /v1/playgrounds/{id}`: expires it now; the reconciler deletes the pod and the record.
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
            return Ok((StatusCode::ACCEPTED, Json(pg)).into_response());
        }
        pg.expires_at_ms = now;
        match state.submit.jobs().put_playground(&pg).await {
            Ok(stored) => return Ok((StatusCode::ACCEPTED, Json(stored)).into_response()),
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::Conflict {
        code: "busy",
        message: format!("playground {id} kept changing; retry"),
    })
}
