//! `GET /v1/quota`: the caller's own quota, usage and queued demand per series.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use tuneplane_core::capacity::CapacitySnapshot;
use tuneplane_core::quota_view::{QuotaView, quota_view};
use tuneplane_core::submit::SCOPE_JOBS_READ;

use crate::error::ApiError;
use crate::state::{AppState, Auth};

/// `GET /v1/quota`: built from the tenant's stored quota and its own entry of the latest
/// capacity snapshot; other tenants' usage is never read into the answer.
pub async fn get_quota(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
) -> Result<Json<QuotaView>, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    let jobs = state.submit.jobs();
    let own = jobs.get_quota(&principal.tenant).await?;
    let quota = state
        .submit
        .config()
        .default_quota
        .effective(&principal.tenant, own);
    let stored = jobs.get_capacity().await?;
    let (snapshot, problem) = match stored {
        None => (None, None),
        Some(value) => match serde_json::from_value::<CapacitySnapshot>(value) {
            Ok(s) => (Some(s), None),
            // A snapshot of another version that no longer decodes: answer with the quota alone.
            Err(e) => (
                None,
                Some(format!(
                    "the stored capacity snapshot does not decode ({e}); usage and fleet figures read 0 until the reconciler publishes a new one"
                )),
            ),
        },
    };
    let mut view = quota_view(&principal.tenant, quota.as_ref(), snapshot.as_ref());
    if problem.is_some() {
        view.note = problem;
    }
    Ok(Json(view))
}

/// Removes every tenant but `tenant` from a published snapshot's `tenants` (as stored: a JSON
/// value, so fields of newer versions pass through untouched).
pub fn only_own_tenant(snapshot: &mut serde_json::Value, tenant: &str) {
    if let Some(tenants) = snapshot
        .get_mut("tenants")
        .and_then(serde_json::Value::as_object_mut)
    {
        tenants.retain(|name, _| name == tenant);
    }
}
