//! The HTTP router of the `/v1` API (docs/design.md §7), shared by Lambda (`lambda_http`) and plain HTTP
//! (`tuneplane dev`). Handlers only parse, call core, and shape the answer.

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use tracing::Instrument;

use crate::config::MAX_BODY_BYTES;
use crate::error::REQUEST_ID;
use crate::routes;
use crate::state::AppState;

/// Header carrying the request id in both directions.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

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
    ("get", "/v1/jobs/{id}/outputs"),
    ("get", "/v1/jobs/{id}/checkpoint"),
    ("post", "/v1/jobs/{id}/grant/presign"),
    ("post", "/v1/jobs/{id}/grant/checkpoints/{name}/complete"),
    ("get", "/v1/jobs/{id}/grant/checkpoints/latest"),
    ("get", "/v1/jobs/{id}/grant/inputs"),
    ("post", "/v1/pipelines"),
    ("post", "/v1/uploads"),
    ("get", "/v1/capacity"),
    ("get", "/v1/quota"),
    ("get", "/v1/audit"),
    ("get", "/v1/usage"),
    ("post", "/v1/subscriptions"),
    ("get", "/v1/subscriptions"),
    ("delete", "/v1/subscriptions/{id}"),
    ("get", "/v1/subscriptions/secret"),
    ("post", "/v1/subscriptions/secret/rotate"),
    ("post", "/v1/playgrounds"),
    ("get", "/v1/playgrounds"),
    ("get", "/v1/playgrounds/{id}"),
    ("delete", "/v1/playgrounds/{id}"),
    ("get", "/v1/playgrounds/{id}/proxy/{path}"),
    ("post", "/v1/playgrounds/{id}/proxy/{path}"),
    ("post", "/v1/webhooks/{source}"),
];

/// The router with every `/v1` route, the body limit and the request-id middleware; console
/// sessions are signed with a random key of this process (the API binary passes the configured
/// one to [`router_with_console`]).
pub fn router(state: Arc<AppState>) -> Router {
    router_with_console(state, crate::console::ConsoleKeys::random())
}

/// [`router`] with explicit console keys: the configured ones
/// ([`ConsoleKeys::from_config`](crate::console::ConsoleKeys::from_config)), or those a
/// one-process stack persists.
pub fn router_with_console(state: Arc<AppState>, console: crate::console::ConsoleKeys) -> Router {
    let v1 = Router::new()
        .route("/healthz", get(routes::misc::healthz))
        .route("/jobs", post(routes::jobs::submit).get(routes::jobs::list))
        .route("/jobs/{id}", get(routes::jobs::get_one))
        .route("/pipelines", post(routes::pipelines::submit))
        .route("/jobs/{id}/events", get(routes::jobs::events))
        .route("/jobs/{id}/logs", get(routes::jobs::logs))
        .route("/jobs/{id}/logs/live", get(routes::live::live_logs))
        .route("/jobs/{id}/logs/follow", post(routes::live::follow_logs))
        .route("/jobs/{id}/stop", post(routes::jobs::stop))
        .route("/jobs/{id}/outputs", get(routes::outputs::outputs))
        .route("/jobs/{id}/checkpoint", get(routes::outputs::checkpoint))
        .route("/jobs/{id}/grant/presign", post(routes::outputs::presign))
        .route(
            "/jobs/{id}/grant/checkpoints/{name}/complete",
            post(routes::outputs::complete),
        )
        .route(
            "/jobs/{id}/grant/checkpoints/latest",
            get(routes::outputs::latest),
        )
        .route("/jobs/{id}/grant/inputs", get(routes::outputs::inputs))
        .route("/uploads", post(routes::misc::create_upload))
        .route("/capacity", get(routes::misc::capacity))
        .route("/quota", get(routes::quota::get_quota))
        .route("/audit", get(routes::audit::list))
        .route("/usage", get(routes::usage::usage))
        .route(
            "/subscriptions",
            post(routes::subscriptions::create).get(routes::subscriptions::list),
        )
        .route(
            "/subscriptions/secret",
            get(routes::subscriptions::get_secret),
        )
        .route(
            "/subscriptions/secret/rotate",
            post(routes::subscriptions::rotate_secret),
        )
        .route(
            "/subscriptions/{id}",
            axum::routing::delete(routes::subscriptions::delete),
        )
        .route(
            "/playgrounds",
            post(routes::playgrounds::create).get(routes::playgrounds::list),
        )
        .route(
            "/playgrounds/{id}",
            get(routes::playgrounds::get_one).delete(routes::playgrounds::delete),
        )
        .route(
            "/playgrounds/{id}/proxy/{*path}",
            get(routes::playground_proxy::forward).post(routes::playground_proxy::forward),
        )
        .route("/webhooks/{source}", post(crate::webhooks::receive));
    // Grant calls are charged per job, not to the shared address job pods call from.
    let limiter = crate::rate::Limiter {
        limits: state.rate_limits.clone(),
        grant_key: state.grant_key.clone(),
    };
    Router::new()
        .nest("/v1", v1)
        .merge(crate::console::router_with(console))
        .fallback(routes::misc::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // Inside the request id: a 429 carries one too.
        .layer(middleware::from_fn_with_state(limiter, crate::rate::limit))
        .layer(middleware::from_fn(request_id))
        .with_state(state)
}

/// The request id: API Gateway's under Lambda (a client cannot choose it, so logs, responses and
/// AWS traces agree), else the client's `x-request-id` (plain HTTP, up to 128 characters), else a
/// new one. The request is served within it and the response echoes it.
async fn request_id(req: Request, next: Next) -> Response {
    use lambda_http::RequestExt;
    let gateway = match req.request_context_ref() {
        Some(lambda_http::request::RequestContext::ApiGatewayV2(ctx)) => ctx.request_id.clone(),
        _ => None,
    };
    let client = || {
        req.headers()
            .get(REQUEST_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.len() <= 128)
            .map(str::to_owned)
    };
    let id = gateway
        .filter(|id| !id.is_empty())
        .or_else(client)
        .unwrap_or_else(|| crate::random::random_id("req"));
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
