//! The HTTP router of the `/v1` API (docs/design.md §7), shared by Lambda (`lambda_http`) and plain HTTP
//! (`tuneplane dev`). Handlers only parse, call core, and shape the answer.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use tracing::Instrument;
use tuneplane_core::submit::{Principal, SubmitService, authenticate};

use crate::config::{MAX_BODY_BYTES, WebhookSource};
use crate::error::{ApiError, REQUEST_ID};
use crate::routes;

/// Header carrying the request id in both directions.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Everything a handler needs; built once per process.
#[derive(Debug)]
pub struct AppState {
    /// The submission service (and through it the stores).
    pub submit: SubmitService,
    /// Webhook sources by name.
    pub webhooks: BTreeMap<String, WebhookSource>,
    /// Current time, Unix milliseconds (a function so tests can move the clock).
    pub clock: fn() -> i64,
    /// Random id generator for uploads and playgrounds.
    pub new_id: fn(&str) -> String,
}

/// Every route of the API as `(method, path)`, the way the OpenAPI document lists them.
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/healthz"),
    ("post", "/v1/jobs"),
    ("get", "/v1/jobs"),
    ("get", "/v1/jobs/{id}"),
    ("get", "/v1/jobs/{id}/events"),
    ("get", "/v1/jobs/{id}/logs"),
    ("get", "/v1/jobs/{id}/logs/live"),
    ("post", "/v1/jobs/{id}/logs/follow"),
    ("post", "/v1/jobs/{id}/stop"),
    ("post", "/v1/uploads"),
    ("get", "/v1/capacity"),
    ("get", "/v1/quota"),
    ("post", "/v1/playgrounds"),
    ("get", "/v1/playgrounds"),
    ("get", "/v1/playgrounds/{id}"),
    ("delete", "/v1/playgrounds/{id}"),
    ("post", "/v1/webhooks/{source}"),
];

/// The router with every `/v1` route, the body limit and the request-id middleware; console
/// sessions are signed with the key from `TUNEPLANE_CONSOLE_SECRET` (random when unset).
pub fn router(state: Arc<AppState>) -> Router {
    router_with_console(state, crate::console::ConsoleKeys::from_env())
}

/// [`router`] with explicit console keys (a one-process stack persists its own).
pub fn router_with_console(state: Arc<AppState>, console: crate::console::ConsoleKeys) -> Router {
    let v1 = Router::new()
        .route("/healthz", get(routes::misc::healthz))
        .route("/jobs", post(routes::jobs::submit).get(routes::jobs::list))
        .route("/jobs/{id}", get(routes::jobs::get_one))
        .route("/jobs/{id}/events", get(routes::jobs::events))
        .route("/jobs/{id}/logs", get(routes::jobs::logs))
        .route("/jobs/{id}/logs/live", get(routes::jobs::live_logs))
        .route("/jobs/{id}/logs/follow", post(routes::jobs::follow_logs))
        .route("/jobs/{id}/stop", post(routes::jobs::stop))
        .route("/uploads", post(routes::misc::create_upload))
        .route("/capacity", get(routes::misc::capacity))
        .route("/quota", get(routes::quota::get_quota))
        .route(
            "/playgrounds",
            post(routes::playgrounds::create).get(routes::playgrounds::list),
        )
        .route(
            "/playgrounds/{id}",
            get(routes::playgrounds::get_one).delete(routes::playgrounds::delete),
        )
        .route("/webhooks/{source}", post(crate::webhooks::receive));
    Router::new()
        .nest("/v1", v1)
        .merge(crate::console::router_with(console))
        .fallback(routes::misc::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(request_id))
        .with_state(state)
}

/// Takes the request id from `x-request-id` (the Lambda adapter sets API Gateway's), or makes one;
/// serves the request within it and echoes it in the response.
async fn request_id(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_owned)
        .unwrap_or_else(|| crate::runtime::random_id("req"));
    let span = tracing::info_span!("request", request_id = %id, method = %req.method(), path = %req.uri().path());
    let mut response = REQUEST_ID
        .scope(id.clone(), next.run(req))
        .instrument(span)
        .await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response
            .headers_mut()
            .insert(HeaderName::from_static(REQUEST_ID_HEADER), value);
    }
    response
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
