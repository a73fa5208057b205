//! Handler tests through the Lambda adapter: real API Gateway v2 event JSON (our fixture, in the
//! shape API Gateway sends) decoded by `lambda_http::request::from_str`, served by
//! `tuneplane_functions::lambda::handle` over the embedded stores.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use base64::Engine;
use common::Harness;
use common::archives::{BAD_SPEC, SPEC, body, code};
use lambda_http::http::StatusCode;
use serde_json::Value;

const EVENT: &str = include_str!("fixtures/apigw_v2_request.json");

struct Event<'a> {
    method: &'a str,
    path: &'a str,
    key: &'a str,
    idempotency_key: &'a str,
    body: String,
    base64: bool,
}

impl Event<'_> {
    fn json(&self) -> String {
        let body = if self.base64 {
            base64::engine::general_purpose::STANDARD.encode(&self.body)
        } else {
            self.body.clone()
        };
        let encoded = serde_json::to_string(&body).unwrap_or_default();
        EVENT
            .replace("{{METHOD}}", self.method)
            .replace("{{PATH}}", self.path)
            .replace("{{AUTHORIZATION}}", &format!("Bearer {}", self.key))
            .replace("{{IDEMPOTENCY_KEY}}", self.idempotency_key)
            .replace("\"{{BODY}}\"", &encoded)
            .replace(
                "\"isBase64Encoded\": false",
                &format!("\"isBase64Encoded\": {}", self.base64),
            )
    }
}

fn get<'a>(path: &'a str, key: &'a str) -> Event<'a> {
    Event {
        method: "GET",
        path,
        key,
        idempotency_key: "unused",
        body: String::new(),
        base64: false,
    }
}

/// `POST /v1/jobs` of `spec` with the default code, the body sent as plain text.
fn submit_job<'a>(key: &'a str, idempotency_key: &'a str, spec: &str) -> Event<'a> {
    Event {
        method: "POST",
        path: "/v1/jobs",
        key,
        idempotency_key,
        body: body(spec, &code()).to_string(),
        base64: false,
    }
}

/// Decodes the event like the Lambda runtime does and serves it through the adapter.
async fn invoke(
    h: &Harness,
    event: &Event<'_>,
) -> (StatusCode, Value, lambda_http::http::HeaderMap) {
    let request =
        lambda_http::request::from_str(&event.json()).expect("not an API Gateway v2 event");
    let response = tuneplane_functions::lambda::handle(h.app.clone(), request).await;
    let status = response.status();
    let headers = response.headers().clone();
    let json = match response.body() {
        lambda_http::Body::Text(t) => serde_json::from_str(t).unwrap_or(Value::Null),
        lambda_http::Body::Binary(b) => serde_json::from_slice(b).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    (status, json, headers)
}

#[tokio::test]
async fn gateway_request_id_becomes_the_response_request_id() {
    let h = Harness::embedded().await;
    let (status, json, headers) = invoke(&h, &get("/v1/healthz", "none")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["status"], "ok");
    assert_eq!(
        headers.get("x-request-id").and_then(|v| v.to_str().ok()),
        Some("Hx1a2b3cDoEEJmQ=")
    );
}

/// A client's own `x-request-id` does not replace API Gateway's: the gateway's id is the one in
/// the logs and AWS traces, so it is the one the response carries.
#[tokio::test]
async fn gateway_request_id_wins_over_the_clients_header() {
    let h = Harness::embedded().await;
    let json = get("/v1/healthz", "none").json();
    let mut event: Value = serde_json::from_str(&json).unwrap_or(Value::Null);
    event["headers"]["x-request-id"] = "client-chosen".into();
    let request =
        lambda_http::request::from_str(&event.to_string()).expect("not an API Gateway v2 event");
    let response = tuneplane_functions::lambda::handle(h.app.clone(), request).await;
    assert_eq!(
        response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("Hx1a2b3cDoEEJmQ=")
    );
}

#[tokio::test]
async fn submit_event_creates_a_job_and_a_repeat_returns_it() {
    let h = Harness::embedded().await;
    let submit = submit_job(&h.key_a, "gw-1", SPEC);
    let (status, first, _) = invoke(&h, &submit).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, again, _) = invoke(&h, &submit).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(first["job_id"], again["job_id"]);
    let path = format!("/v1/jobs/{}", first["job_id"].as_str().unwrap_or_default());
    let (status, job, _) = invoke(&h, &get(&path, &h.key_a)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(job["state"], "QUEUED");
}

#[tokio::test]
async fn base64_encoded_body_is_decoded_by_the_adapter() {
    let h = Harness::embedded().await;
    let submit = Event {
        base64: true,
        ..submit_job(&h.key_a, "gw-b64", SPEC)
    };
    let (status, json, _) = invoke(&h, &submit).await;
    assert_eq!(status, StatusCode::CREATED, "{json}");
}

#[tokio::test]
async fn bad_spec_event_is_400_with_every_field() {
    let h = Harness::embedded().await;
    let submit = submit_job(&h.key_a, "gw-bad", BAD_SPEC);
    let (status, json, _) = invoke(&h, &submit).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let fields = json["error"]["details"]["fields"].as_array().map(Vec::len);
    assert!(fields.unwrap_or(0) >= 4, "{json}");
    assert_eq!(json["error"]["request_id"], "Hx1a2b3cDoEEJmQ=");
}

#[tokio::test]
async fn wrong_key_is_401_and_another_tenants_job_is_404() {
    let h = Harness::embedded().await;
    let (status, _, _) = invoke(
        &h,
        &get("/v1/jobs", "tp_ffffffffffffffffffffffffffffffffffffffff"),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let created = h.submit(&body(SPEC, &code()), None).await;
    let path = format!(
        "/v1/jobs/{}",
        created.json["job_id"].as_str().unwrap_or_default()
    );
    let (status, json, _) = invoke(&h, &get(&path, &h.key_b)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{json}");
}
