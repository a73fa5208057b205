//! The Lambda side of the HTTP API: `lambda_http` serves the axum router directly (its own axum
//! integration converts the API Gateway v2 event into a request and the response back, choosing a
//! text or base64 body from the content type). API Gateway's request id reaches the request-id
//! middleware through the request extensions `lambda_http` sets.

use axum::Router;
use lambda_http::{Request, Response};
use tower::ServiceExt;

/// Serves one decoded API Gateway request with `app` and converts the response the way the
/// runtime loop does; what [`run`] does per invocation, for tests that hold event JSON.
pub async fn handle(app: Router, request: Request) -> Response<lambda_http::Body> {
    let response = match app.oneshot(request).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    lambda_http::IntoResponse::into_response(response).await
}

/// Runs the Lambda runtime loop serving `app` until the runtime stops.
pub async fn run(app: Router) -> Result<(), lambda_http::Error> {
    lambda_http::run(app).await
}
