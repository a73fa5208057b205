//! `GET /v1/usage`: what the caller's tenant held, in GPU-hours (and CPU- and GiB-seconds), per
//! series, day or job, from its job records (every attempt from admission to its end).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use tuneplane_core::submit::SCOPE_JOBS_READ;
use tuneplane_core::usage::{GroupBy, report, tenant_slices, totals};

use super::audit::window;
use crate::error::ApiError;
use crate::state::{AppState, Auth};

/// Query of `GET /v1/usage`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageParams {
    /// Window start: a duration back from now (`7d`), an RFC 3339 time or epoch ms. Default 7d.
    pub from: Option<String>,
    /// Window end (same forms). Default: now.
    pub to: Option<String>,
    /// `series` (default), `day` or `job`.
    pub group_by: Option<String>,
}

/// The default window of a report without `from`.
pub const DEFAULT_FROM: &str = "7d";

/// `GET /v1/usage?from&to&group_by`.
pub async fn usage(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    Query(params): Query<UsageParams>,
) -> Result<Json<Value>, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    let now = (state.clock)();
    let (from, to) = window(
        ("from", params.from.as_deref().unwrap_or(DEFAULT_FROM)),
        ("to", params.to.as_deref()),
        now,
    )?;
    let to = to.unwrap_or(now);
    if to <= from {
        return Err(ApiError::bad_request(
            "invalid_query",
            "from: the window's start must be in the past",
        ));
    }
    let group_by = GroupBy::parse(params.group_by.as_deref().unwrap_or("series"))
        .map_err(|e| ApiError::bad_request("invalid_query", format!("group_by: {e}")))?;
    let slices = tenant_slices(
        state.submit.jobs().as_ref(),
        &principal.tenant,
        from,
        to,
        now,
    )
    .await?;
    let rows = report(&slices, group_by, &state.submit.config().gpu_prices);
    Ok(Json(json!({
        "tenant": principal.tenant,
        "from_ms": from,
        "to_ms": to,
        "group_by": group_by,
        "totals": totals(&rows),
        "rows": rows,
    })))
}
