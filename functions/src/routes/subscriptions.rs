//! `/v1/subscriptions`: a tenant's standing job-event callbacks (every job's events of the kinds
//! it names go to its URL) and the secret every delivery to the tenant is signed with.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tuneplane_core::callback::{CallbackSecret, Subscription};
use tuneplane_core::control::subscriptions::{self as subscriptions, SubscriptionRequest};
use tuneplane_core::submit::{SCOPE_JOBS_READ, SCOPE_JOBS_WRITE};

use crate::error::ApiError;
use crate::state::{AppState, Auth};

/// How a receiver checks a delivery, shown beside the secret.
pub const SCHEME: &str = "X-TunePlane-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<raw body>\" with the secret>; deduplicate by X-TunePlane-Event-Id";

/// A subscription as the API shows it (the URL's query, which may hold a token, left out).
pub fn view(sub: &Subscription) -> Value {
    json!({
        "id": sub.id,
        "url": subscriptions::redacted(&sub.url),
        "events": sub.events,
        "format": sub.format,
        "created_ms": sub.created_ms,
        "created_by": sub.created_by,
    })
}

/// The secret as the API shows it.
pub fn secret_view(secret: &CallbackSecret) -> Value {
    json!({
        "secret": secret.secret,
        "created_ms": secret.created_ms,
        "scheme": SCHEME,
    })
}

/// `POST /v1/subscriptions` `{url, events?, format?}`: 201 with the subscription; every
/// problem is a 400 `invalid_request` naming its field; past the tenant's limit a 409.
pub async fn create(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    body: crate::state::JsonBody,
) -> Result<Response, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    let request: SubscriptionRequest =
        body.parse(r#"{"url", "events"?: [...], "format"?: "json"|"slack"}"#)?;
    let config = state.submit.config();
    let sub = subscriptions::create(
        state.submit.jobs().as_ref(),
        &principal.tenant,
        &request,
        (
            config.subscription_limit,
            config.defaults.allow_loopback_callbacks,
        ),
        &super::api_actor(&principal),
        (state.clock)(),
    )
    .await?;
    let mut out = view(&sub);
    out["note"] = json!(
        "deliveries are signed with the tenant's callback secret: GET /v1/subscriptions/secret (tuneplane subscriptions secret)"
    );
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

/// `GET /v1/subscriptions`: the caller's tenant's subscriptions, oldest first.
pub async fn list(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
) -> Result<Json<Value>, ApiError> {
    principal.require(SCOPE_JOBS_READ)?;
    let subs = state
        .submit
        .jobs()
        .list_subscriptions(&principal.tenant)
        .await?;
    Ok(Json(json!({
        "subscriptions": subs.iter().map(view).collect::<Vec<_>>(),
        "limit": state.submit.config().subscription_limit,
    })))
}

/// `DELETE /v1/subscriptions/{id}`: 200 `{id, deleted: true}`, or 404 for none of the caller's
/// tenant.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    subscriptions::delete(
        state.submit.jobs().as_ref(),
        &principal.tenant,
        &id,
        &super::api_actor(&principal),
        (state.clock)(),
    )
    .await?;
    Ok(Json(json!({"id": id, "deleted": true})))
}

/// The tenant's secret, made on first use, or replaced first when `rotate` (audited). A
/// credential, so both routes need the write scope.
async fn secret_reply(
    state: &AppState,
    principal: &tuneplane_core::submit::Principal,
    rotate: bool,
) -> Result<Json<Value>, ApiError> {
    principal.require(SCOPE_JOBS_WRITE)?;
    let secret = subscriptions::secret(
        state.submit.jobs().as_ref(),
        &principal.tenant,
        rotate,
        crate::random::random_bytes::<32>(),
        &super::api_actor(principal),
        (state.clock)(),
    )
    .await?;
    Ok(Json(secret_view(&secret)))
}

/// `GET /v1/subscriptions/secret`: the tenant's signing secret (made on first use).
pub async fn get_secret(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
) -> Result<Json<Value>, ApiError> {
    secret_reply(&state, &principal, false).await
}

/// `POST /v1/subscriptions/secret/rotate`: a new signing secret; deliveries from now on are
/// signed with it.
pub async fn rotate_secret(
    State(state): State<Arc<AppState>>,
    Auth(principal): Auth,
) -> Result<Json<Value>, ApiError> {
    secret_reply(&state, &principal, true).await
}
