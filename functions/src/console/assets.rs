//! The console's stylesheet and script, embedded in the binary (no front-end build step, nothing
//! to deploy beside the function).

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// URL of the stylesheet (the version busts caches across releases).
pub const CSS_PATH: &str = concat!("/console/assets/console.css?v=", env!("CARGO_PKG_VERSION"));
/// URL of the script.
pub const JS_PATH: &str = concat!("/console/assets/console.js?v=", env!("CARGO_PKG_VERSION"));

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// `GET /console/assets/{name}`.
pub async fn serve(Path(name): Path<String>) -> Response {
    let (body, content_type) = match name.as_str() {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "console.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    let mut res = body.into_response();
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    res
}
