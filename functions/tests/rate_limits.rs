//! The API's own rate limits through the router: a key over its limit gets 429 `rate_limited`
//! with `Retry-After` while another key goes on; a source address flooding bad keys is stopped
//! per address while another address is served; a job's valid grant is charged to the job, not
//! to the address it calls from; configuration errors name the variable.

// Test code: an unwrapped error is a failed test that names its line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode};
use tower::ServiceExt;
use tuneplane_functions::config::Config;
use tuneplane_functions::rate::{Rate, RateLimits};

fn limited(h: &common::Harness, per_key: Option<Rate>, per_source: Option<Rate>) -> axum::Router {
    let mut state = (*h.state).clone();
    state.rate_limits = Arc::new(RateLimits::new(per_key, per_source));
    tuneplane_functions::app::router_with_console(
        Arc::new(state),
        tuneplane_functions::console::ConsoleKeys::random(),
    )
}

async fn get(app: &axum::Router, from: &str, key: &str) -> (StatusCode, Option<String>, String) {
    send(app, Method::GET, "/v1/jobs", from, key, Vec::new()).await
}

/// `method path` from address `from` with `Authorization: Bearer {key}` and a JSON `body`.
async fn send(
    app: &axum::Router,
    method: Method,
    path: &str,
    from: &str,
    key: &str,
    body: Vec<u8>,
) -> (StatusCode, Option<String>, String) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .unwrap();
    let addr: SocketAddr = format!("{from}:40000").parse().unwrap();
    req.extensions_mut().insert(ConnectInfo(addr));
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let retry = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, retry, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn a_key_over_its_limit_gets_429_with_retry_after_and_another_key_goes_on() {
    let h = common::Harness::embedded().await;
    let rate = Rate {
        per_second: 0.5,
        burst: 3.0,
    };
    let app = limited(&h, Some(rate), None);
    for _ in 0..3 {
        let (status, _, body) = get(&app, "192.0.2.1", &h.key_a).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, retry, body) = get(&app, "192.0.2.1", &h.key_a).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body.contains("\"rate_limited\""), "{body}");
    assert_eq!(retry.as_deref(), Some("2"), "1 token at 0.5/s");
    // The same address with tenant B's key: its own bucket.
    let (status, _, body) = get(&app, "192.0.2.1", &h.key_b).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn an_address_flooding_bad_keys_is_stopped_and_another_address_is_served() {
    let h = common::Harness::embedded().await;
    let rate = Rate {
        per_second: 0.5,
        burst: 5.0,
    };
    let app = limited(&h, Some(rate), Some(rate));
    let mut statuses = Vec::new();
    for i in 0..8 {
        statuses.push(get(&app, "198.51.100.7", &format!("tp_wrong_{i}")).await.0);
    }
    assert_eq!(statuses[..5], [StatusCode::UNAUTHORIZED; 5]);
    assert_eq!(statuses[5..], [StatusCode::TOO_MANY_REQUESTS; 3]);
    let (status, _, body) = get(&app, "198.51.100.8", &h.key_a).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_flood_from_the_shared_address_does_not_delay_another_tenants_checkpoint_upload() {
    let h = common::Harness::embedded().await;
    // Running, so that its first attempt's grant is valid.
    let job = h.running_job().await.id;
    let rate = Rate {
        per_second: 0.5,
        burst: 5.0,
    };
    let app = limited(&h, Some(rate), Some(rate));
    // Job pods of every tenant call from the cluster's one NAT address.
    let nat = "100.64.0.1";
    let presign = |token: String| {
        let body = serde_json::to_vec(&serde_json::json!({
            "method": "PUT",
            "paths": [{"path": "checkpoints/step-1/opt.pt", "size": 1}],
        }))
        .unwrap();
        let app = app.clone();
        let path = format!("/v1/jobs/{job}/grant/presign");
        async move { send(&app, Method::POST, &path, nat, &token, body).await }
    };
    // One tenant's pods flood it with junk: wrong API keys and forged grants of the job, both
    // charged to the address, until the address is over its limit.
    let mut flooded = false;
    for i in 0..20 {
        let (status, _, body) = if i % 2 == 0 {
            get(&app, nat, &format!("tp_wrong_{i}")).await
        } else {
            presign(format!("tpg1.1.{:064x}", i)).await
        };
        if status == StatusCode::TOO_MANY_REQUESTS {
            flooded = true;
            break;
        }
        assert!(
            [StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN].contains(&status),
            "{status}: {body}"
        );
    }
    assert!(flooded, "the flood was never limited");
    let (status, _, body) = presign("tpg1.1.00".to_owned()).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "a forged grant: {body}"
    );

    // The job's real grant, from the same address, goes on its first try.
    let (status, retry, body) = presign(common::grant_key().token(&job, 1)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(retry, None);
    assert!(body.contains("step-1/opt.pt"), "{body}");
}

#[test]
fn bad_rate_values_name_the_variable_and_defaults_apply() {
    let config = |vars: &[(&str, &str)]| {
        let base = [
            ("TUNEPLANE_DATA_DIR", "/tmp/tuneplane-rate-test"),
            ("TUNEPLANE_BLOB_SECRET", "s"),
            ("TUNEPLANE_BLOB_URL", "http://127.0.0.1:9/blobs"),
        ];
        let vars: Vec<(String, String)> = base
            .iter()
            .chain(vars)
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    };
    let err = config(&[("TUNEPLANE_RATE_LIMIT_PER_KEY", "fast")])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.starts_with("TUNEPLANE_RATE_LIMIT_PER_KEY: rate \"fast\" is not a number"),
        "{err}"
    );
    let ok = config(&[("TUNEPLANE_RATE_LIMIT_PER_SOURCE", "off")]).unwrap();
    assert_eq!(ok.rate_per_source, None);
    assert_eq!(
        ok.rate_per_key,
        Some(Rate {
            per_second: 20.0,
            burst: 40.0
        })
    );
}
