//! The state every handler shares and the extractors they take (body, query, caller), apart from
//! the router so that handlers depend on this module and the router on the handlers, not both ways.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;
use tuneplane_core::submit::{Principal, SubmitService, authenticate};

use crate::config::{MAX_BODY_BYTES, WebhookSource};
use crate::error::ApiError;

/// Everything a handler needs; built once per process.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The submission service (and through it the stores).
    pub submit: SubmitService,
    /// Webhook sources by name.
    pub webhooks: BTreeMap<String, WebhookSource>,
    /// Tenant of each AWS account that may put submission events.
    pub event_senders: BTreeMap<String, tuneplane_core::ids::TenantId>,
    /// Current time, Unix milliseconds (a function so tests can move the clock).
    pub clock: fn() -> i64,
    /// Random id generator for uploads and playgrounds.
    pub new_id: fn(&str) -> String,
    /// Where and how the playground proxy may forward.
    pub playground_proxy: crate::pod_network::PlaygroundProxy,
    /// Rate limits per key and per source, with their buckets.
    pub rate_limits: Arc<crate::rate::RateLimits>,
    /// The key jobs' attempt grants are checked with (none: grants are refused).
    pub grant_key: Option<tuneplane_core::grant::GrantKey>,
}

impl AppState {
    /// The stop and playground operations over the submission service's stores.
    pub fn control(&self) -> tuneplane_core::control::ControlService {
        tuneplane_core::control::ControlService::new(self.submit.clone())
    }
}

/// The raw request body, with the API's error format when it is over the size limit.
#[derive(Debug, Clone)]
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(RawBody(bytes)),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(ApiError::TooLarge(format!(
                    "the request body is over {} MiB; upload large code with POST /v1/uploads",
                    MAX_BODY_BYTES >> 20
                )))
            }
            Err(e) => Err(ApiError::bad_request("invalid_body", e.body_text())),
        }
    }
}

/// The raw body of a request whose body must be JSON: a `Content-Type` that names another media
/// type is refused with 415 `unsupported_media_type` before the body is read; a missing one is
/// accepted (as `curl -d` clients and older CLIs send none).
#[derive(Debug, Clone)]
pub struct JsonBody(pub Bytes);

/// True for `application/json` and `application/<anything>+json`, parameters (`; charset=utf-8`)
/// ignored, case-insensitive.
pub fn is_json_media_type(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or_default().trim();
    let lower = essence.to_ascii_lowercase();
    lower == "application/json"
        || lower
            .strip_prefix("application/")
            .is_some_and(|sub| sub.len() > 5 && sub.ends_with("+json"))
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(value) = req.headers().get(header::CONTENT_TYPE) {
            let text = value.to_str().unwrap_or("(not ASCII)");
            if !is_json_media_type(text) {
                // The media type is echoed cut short: it is the client's own header.
                let shown: String = text.chars().take(80).collect();
                return Err(ApiError::UnsupportedMediaType(format!(
                    "Content-Type {shown:?} is not accepted here: send the body as JSON with Content-Type: application/json"
                )));
            }
        }
        RawBody::from_request(req, state)
            .await
            .map(|RawBody(b)| JsonBody(b))
    }
}

impl JsonBody {
    /// The body as a `T`; a body that does not parse is a 400 `invalid_body` saying what shape
    /// was `expected` and why it did not fit.
    pub fn parse<T: DeserializeOwned>(&self, expected: &str) -> Result<T, ApiError> {
        serde_json::from_slice(&self.0)
            .map_err(|e| ApiError::bad_request("invalid_body", format!("expected {expected}: {e}")))
    }
}

/// Query parameters, with the API's error format when they do not parse.
#[derive(Debug, Clone)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| ApiQuery(q))
            .map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))
    }
}

/// The authenticated caller of a request (`Authorization: Bearer <api key>`).
#[derive(Debug, Clone)]
pub struct Auth(pub Principal);

impl FromRequestParts<Arc<AppState>> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let principal = authenticate(state.submit.jobs().as_ref(), header).await?;
        Ok(Auth(principal))
    }
}
