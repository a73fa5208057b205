//! `/v1/healthz`, `/v1/uploads`, `/v1/capacity` and the fallback for unknown routes.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tuneplane_core::store::PresignMethod;
use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE};

use super::submission::upload_key;
use crate::error::ApiError;
use crate::state::{AppState, Auth};

/// How long an upload URL stays valid.
const UPLOAD_URL_TTL: Duration = Duration::from_secs(900);

/// `GET /v1/healthz` (no authentication).
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok", "version": tuneplane_core::constants::PLATFORM_VERSION}))
}

/// Any other path.
pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(format!(
        "no route {}; the API lives under /v1 (see openapi.yaml)",
        uri.path()
    ))
}

/// `POST /v1/uploads`: a presigned PUT for code larger than the inline limit. Submit afterwards
/// with `code.upload_id`.
pub async fn create_upload(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    let upload_id = (state.new_id)("u");
    let key = upload_key(&principal.tenant, &upload_id);
    let presigned = state
        .submit
        .blobs()
        .presign(PresignMethod::Put, &key, UPLOAD_URL_TTL)
        .await?;
    let headers: serde_json::Map<String, serde_json::Value> = presigned
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let body = json!({
        "upload_id": upload_id,
        "method": "PUT",
        "url": presigned.url,
        "headers": headers,
        "expires_at": presigned.expires_at,
        // Enforced when the upload is read at submit (`Limits::max_archive_bytes`).
        "max_bytes": state.submit.config().limits.max_archive_bytes,
    });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `GET /v1/capacity`: the latest snapshot the reconciler published. Its `tenants` keeps only
/// the caller's own entry: another tenant's usage is never shown.
pub async fn capacity(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
) -> Result<Json<serde_json::Value>, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    let mut snapshot = state.submit.jobs().get_capacity().await?;
    if let Some(s) = snapshot.as_mut() {
        super::quota::only_own_tenant(s, &principal.tenant);
    }
    let note = snapshot
        .is_none()
        .then_some("no capacity snapshot yet: the reconciler has not published one");
    Ok(Json(json!({"snapshot": snapshot, "note": note})))
}
