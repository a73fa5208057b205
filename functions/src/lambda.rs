//! The Lambda side of the HTTP API: an API Gateway v2 request (already decoded by `lambda_http`)
//! goes through the same router as plain HTTP, and the router's response goes back as a Lambda
//! response. Tests drive [`handle`] with real event JSON through `lambda_http::request::from_str`.

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{HeaderValue, header};
use lambda_http::{Request, RequestExt, Response};
use tower::ServiceExt;

use crate::app::REQUEST_ID_HEADER;
use crate::config::MAX_BODY_BYTES;

/// Serves one API Gateway request with `app`. Never fails: errors are HTTP responses.
pub async fn handle(
    app: Router,
    request: Request,
) -> Result<Response<lambda_http::Body>, std::convert::Infallible> {
    // API Gateway's request id becomes ours, so logs, responses and AWS traces agree.
    let gateway_id = request.request_context_ref().and_then(|ctx| match ctx {
        lambda_http::request::RequestContext::ApiGatewayV2(c) => c.request_id.clone(),
        _ => None,
    });
    let (mut parts, body) = request.into_parts();
    if let Some(id) = gateway_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
        parts.headers.entry(REQUEST_ID_HEADER).or_insert(id);
    }
    let body = match body {
        lambda_http::Body::Empty => Body::empty(),
        lambda_http::Body::Text(t) => Body::from(t),
        lambda_http::Body::Binary(b) => Body::from(b),
        _ => Body::empty(),
    };
    let request = axum::http::Request::from_parts(parts, body);
    let response = match app.oneshot(request).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    let (parts, body) = response.into_parts();
    // Responses are small JSON documents; the limit only guards against surprises.
    let bytes = to_bytes(body, MAX_BODY_BYTES).await.unwrap_or_default();
    let textual = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json") || ct.starts_with("text/"));
    let body = if bytes.is_empty() {
        lambda_http::Body::Empty
    } else if textual {
        match String::from_utf8(bytes.to_vec()) {
            Ok(text) => lambda_http::Body::Text(text),
            Err(e) => lambda_http::Body::Binary(e.into_bytes()),
        }
    } else {
        lambda_http::Body::Binary(bytes.to_vec())
    };
    Ok(Response::from_parts(parts, body))
}

/// Runs the Lambda runtime loop serving `app` until the runtime stops.
pub async fn run(app: Router) -> Result<(), lambda_http::Error> {
    lambda_http::run(lambda_http::service_fn(move |req: Request| {
        handle(app.clone(), req)
    }))
    .await
}
