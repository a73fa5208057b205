//! Request limits and malformed requests: every refusal is a JSON error with a code, never a
//! plain-text framework message, and nothing is stored.

// Test code: an unwrapped error is a failed test that names its line (as clippy.toml allows in
// #[test] functions; this covers the helpers too).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use axum::http::{Method, StatusCode};
use base64::Engine;
use common::archives::{SPEC, body, code};
use common::{Harness, TENANT_A};
use serde_json::json;
use tuneplane_functions::config::{MAX_BODY_BYTES, MAX_INLINE_CODE_BYTES};

#[tokio::test]
async fn inline_code_over_the_limit_is_413_pointing_at_uploads() {
    let h = Harness::embedded().await;
    let big = vec![7u8; MAX_INLINE_CODE_BYTES + 1];
    let reply = h.submit(&body(SPEC, &big), None).await;
    assert_eq!(
        reply.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        reply.json
    );
    assert_eq!(reply.json["error"]["code"], "too_large");
    assert!(
        reply.json["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("/v1/uploads")
    );
    assert_eq!(h.job_count(TENANT_A).await, 0);
}

#[tokio::test]
async fn body_over_the_gateway_limit_is_a_json_413() {
    let h = Harness::embedded().await;
    let huge = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_BODY_BYTES]);
    let raw = json!({"spec": SPEC, "code": {"inline": huge}})
        .to_string()
        .into_bytes();
    let key = h.key_a.clone();
    let reply = h.call(Method::POST, "/v1/jobs", Some(&key), &[], raw).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.json["error"]["code"], "too_large");
}

#[tokio::test]
async fn malformed_bodies_and_queries_are_json_400s() {
    let h = Harness::embedded().await;
    let key = h.key_a.clone();
    let b64 = base64::engine::general_purpose::STANDARD.encode(code());
    let cases = [
        b"not json".to_vec(),
        json!({"spec": SPEC}).to_string().into_bytes(),
        json!({"spec": SPEC, "code": {"inline": b64, "upload_id": "u-1"}})
            .to_string()
            .into_bytes(),
        json!({"spec": SPEC, "code": {"inline": b64}, "extra": 1})
            .to_string()
            .into_bytes(),
        json!({"spec": 5, "code": {"inline": b64}})
            .to_string()
            .into_bytes(),
        json!({"spec": SPEC, "code": {"inline": "%%%"}})
            .to_string()
            .into_bytes(),
        json!({"spec": SPEC, "code": {"upload_id": "../x"}})
            .to_string()
            .into_bytes(),
    ];
    for raw in cases {
        let text = String::from_utf8_lossy(&raw)
            .chars()
            .take(60)
            .collect::<String>();
        let reply = h.call(Method::POST, "/v1/jobs", Some(&key), &[], raw).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{text}: {}",
            reply.json
        );
        assert_eq!(reply.json["error"]["code"], "invalid_body", "{text}");
    }
    let reply = h.get("/v1/jobs?limit=many").await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json["error"]["code"], "invalid_query");
    let bad_key = h.submit(&body(SPEC, &code()), Some(&"k".repeat(300))).await;
    assert_eq!(bad_key.status, StatusCode::BAD_REQUEST);
    assert_eq!(h.job_count(TENANT_A).await, 0);
    assert_eq!(h.object_count("capsules/").await, 0);
}
